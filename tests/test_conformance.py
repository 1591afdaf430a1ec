"""`gpubring verify --report DIR`: the conformance evidence from a recorded run, and the verb's input checks.

The fixture (tests/fixtures/conformance/, made by its record.py) is shaped by the roles themselves:
verify_results is what roles/verify tasks/cluster_results.yml publishes when ansible-playbook runs it
on registered.yml (the values the smoke tests register, recorded; the first test runs it again and
compares), and gpu_acceptance_result is built with the role's plugins/module_utils/gpu_expect.py
(check, dcgm_check, verdict), inside the job events ansible-runner writes for a run.

The requirements are the checklist of the cluster's Kubernetes minor (gpubring's copy of each checklist:
cli/gpubring/conformance_checklists.yml); with GPUBRING_UPSTREAM_DIR set, that copy is compared with the
upstream checklists in $GPUBRING_UPSTREAM_DIR/ai-conformance.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpubring import conformance, verifyfacts, versions
from gpubring.app import app
from helpers import FIXTURES, ansible_playbook, module_utils

HERE = FIXTURES / "conformance"
RUN = HERE / "run"
# The v1.34 checklist's requirements, all MUST (cncf/k8s-ai-conformance docs/AIConformance-1.34.yaml).
IDS_1_34 = [
    "dra_support",
    "ai_inference",
    "gang_scheduling",
    "cluster_autoscaling",
    "pod_autoscaling",
    "accelerator_metrics",
    "ai_service_metrics",
    "secure_accelerator_access",
    "robust_controller",
]
# v1.35 (docs/AIConformance-1.35.yaml): three SHOULD items after dra_support, in the accelerators section.
SHOULD_1_35 = ["driver_runtime_management", "gpu_sharing", "virtualized_accelerator"]
IDS_1_35 = [IDS_1_34[0], *SHOULD_1_35, *IDS_1_34[1:]]
# v1.36 (docs/AIConformance-1.36.yaml): no dra_support; three more SHOULD items after ai_inference.
SHOULD_1_36 = ["advanced_inference_ingress", "high_performance_networking", "disaggregated_inference"]
IDS_1_36 = [*SHOULD_1_35, "ai_inference", *SHOULD_1_36, *IDS_1_34[2:]]
IDS_BY_MINOR = {"1.34": IDS_1_34, "1.35": IDS_1_35, "1.36": IDS_1_36}
# The SHOULD items gpubring has checks for (issue 23 item 9).
SHOULD_COVERED = {"driver_runtime_management", "gpu_sharing", "high_performance_networking"}
# The pinned Kubernetes (versions.yml) is 1.35.x: the document of the recorded run has v1.35's rows.
REQUIREMENT_IDS = IDS_1_35
# The run report of that run (gpubring.report's fields), as `gpubring verify --acceptance` wrote it.
REPORT: dict[str, Any] = {
    "gpubring_version": "0.1.0",
    "command": "verify",
    "inventory": "/srv/cluster",
    "run_folder": "/srv/cluster/.gpubring/runs/20260301T101500Z-verify",
    "started": "2026-03-01T10:15:00+00:00",
    "ended": "2026-03-01T10:21:40+00:00",
    "status": "failed",
    "exit_code": 1,
    "partial": [],
    "options": {"check": False, "limit": None, "tags": None, "skip_tags": None},
    "failures": [
        {
            "host": "cp-01",
            "task": "Check that each exporter answers with DCGM samples",
            "role": "verify",
            "status": "failed",
            "message": "verify: DCGM exporters that do not answer with DCGM_FI_* metrics on :9400/metrics: "
            "gpu-02 (10.244.2.9): no DCGM_FI_* sample;",
            "phase": "verify",
            "play": "Verify every host and the cluster",
        }
    ],
}


def matrix() -> list[dict[str, Any]]:
    pinned = versions.load_pinned()
    return [
        {"path": path, "version": value, "overridden": path == "kubernetes.version", "pinned": value}
        for path, value in versions.flatten(pinned)
    ]


def recorded() -> dict[str, Any]:
    facts = verifyfacts.from_run_folder(RUN)
    return {**REPORT, **facts.report_fields()}


# The checks this round adds to roles/verify (CHECKS.md of the round: inference gateway, metrics APIs and
# the HPA, the ServiceMonitor scrape, KubeRay, the gang schedulers both ways, the DRA claim, the env
# variable); the recorded values (registered.yml) have none of their inputs, so the role skips them.
ROUND_CHECKS = (
    "inference_gateway_weighted",
    "inference_gateway_header",
    "resource_metrics",
    "hpa_gpu_metric",
    "service_monitor_scrape",
    "kuberay_webhook_rejects",
    "kuberay_recreates",
    "gang_held_volcano",
    "gang_kueue",
    "gang_held_kueue",
    "gang_kai",
    "gang_held_kai",
    "dra_claim_allocated",
    "visible_devices_env_ignored",
)


def with_checks(data: dict[str, Any], statuses: dict[str, str]) -> dict[str, Any]:
    """A copy of the run data whose verify_results has those checks with those results, in the role's
    check shape (name, status, expected, reason, output); a check the run had is replaced."""
    out = json.loads(json.dumps(data))
    fact = out["verify_results"]["cp-01"]
    kept = [c for c in fact["checks"] if c["name"] not in statuses]
    added = [
        {
            "name": name,
            "status": status,
            "expected": f"{name} as the verify role states it",
            "reason": "" if status == "passed" else f"{name} {status}",
            "output": {"check": name} if status != "skipped" else None,
        }
        for name, status in statuses.items()
    ]
    fact["checks"] = kept + added
    return out


NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # when the recorded run's document is made


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return conformance.build(recorded(), matrix(), now=NOW)


def rows(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in document["requirements"]}


# --- the fixture is what the roles publish ---------------------------------------------------------


def test_fixture_verify_results_is_what_the_role_publishes(tmp_path: Path) -> None:
    out = tmp_path / "verify_results.json"
    done = ansible_playbook(
        *("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"),
        HERE / "cluster_results_play.yml",
        *("-e", f"registered={HERE / 'registered.yml'}", "-e", f"out={out}"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert verifyfacts.from_run_folder(RUN).verify_results == {"cp-01": json.loads(out.read_text())}


def test_fixture_acceptance_results_have_the_roles_shape() -> None:
    expect = module_utils("gpu_expect")
    nodes = verifyfacts.from_run_folder(RUN).gpu_acceptance
    assert sorted(nodes) == ["gpu-01", "gpu-02"]
    for result in nodes.values():
        assert set(result) == {"verdict", "checks", "expected"}
        for check in result["checks"]:
            assert check == expect.check(**check)
        assert result["verdict"] == expect.verdict(result["checks"])


# --- verifyfacts -----------------------------------------------------------------------------------


def _ok(counter: int, host: str, facts: dict[str, Any]) -> dict[str, Any]:
    return {
        "counter": counter,
        "event": "runner_on_ok",
        "event_data": {"host": host, "res": {"ansible_facts": facts}},
    }


def test_the_last_fact_of_a_host_wins_and_other_events_are_left_out() -> None:
    events = [
        _ok(1, "cp-01", {"verify_results": {"checks": [], "n": 1}}),
        {
            "counter": 2,
            "event": "runner_on_failed",
            "event_data": {"host": "cp-01", "res": {"ansible_facts": {"verify_results": {"n": 9}}}},
        },
        _ok(3, "cp-01", {"verify_results": {"checks": [], "n": 2}, "other": 1}),
        _ok(4, "gpu-01", {"gpu_acceptance_result": {"verdict": "passed", "checks": []}}),
        _ok(5, "gpu-01", {"preflight_summary": {"host": "gpu-01"}}),
        _ok(6, "gpu-02", {"gpu_acceptance_result": "not a mapping"}),
    ]
    facts = verifyfacts.from_events(events)
    assert facts.verify_results == {"cp-01": {"checks": [], "n": 2}}
    assert facts.gpu_acceptance == {"gpu-01": {"verdict": "passed", "checks": []}}


def test_job_events_are_read_by_counter_and_broken_files_skipped(tmp_path: Path) -> None:
    events = tmp_path / "artifacts" / "x" / "job_events"
    events.mkdir(parents=True)
    (events / "10-b.json").write_text(json.dumps(_ok(10, "h", {"verify_results": {"n": 10}})))
    (events / "9-a.json").write_text(json.dumps(_ok(9, "h", {"verify_results": {"n": 9}})))
    (events / "11-c.json").write_text('{"counter": 11, "event": "runner_on_ok", "event_da')
    assert [e["counter"] for e in verifyfacts.job_events(tmp_path)] == [9, 10]
    assert verifyfacts.from_run_folder(tmp_path).verify_results == {"h": {"n": 10}}
    assert verifyfacts.from_run_folder(tmp_path / "missing") == verifyfacts.VerifyFacts()


# --- the document ----------------------------------------------------------------------------------


def test_every_requirement_of_the_checklist_has_a_row_in_order(doc: dict[str, Any]) -> None:
    assert [r["id"] for r in doc["requirements"]] == REQUIREMENT_IDS
    levels = {r["id"]: r["level"] for r in doc["requirements"]}
    assert {i for i, level in levels.items() if level == "SHOULD"} == set(SHOULD_1_35)
    assert {i for i, level in levels.items() if level == "MUST"} == set(IDS_1_34)
    assert doc["checklist"] == {
        "name": "Kubernetes AI Conformance",
        "version": "v1.35",
        "kubernetes": "1.35",
        "source": "https://github.com/cncf/k8s-ai-conformance/blob/b2c89690e77f705dd4aec8da7d33a3b5d9831d8e/"
        "docs/AIConformance-1.35.yaml",
        "repository": "cncf/k8s-ai-conformance",
        "commit": "b2c89690e77f705dd4aec8da7d33a3b5d9831d8e",
        "path": "docs/AIConformance-1.35.yaml",
    }
    assert doc["schema"] == "gpubring.conformance/v1"
    by_id = rows(doc)
    assert by_id["driver_runtime_management"]["title"] == "Accelerator Driver & Runtime Management"
    assert by_id["gpu_sharing"]["category"] == "Accelerators"
    assert by_id["robust_controller"]["category"] == "Operator Support"


@pytest.mark.parametrize("minor", sorted(IDS_BY_MINOR))
def test_each_minor_gets_its_own_checklist(minor: str) -> None:
    document = conformance.build(recorded(), [{"path": "kubernetes.version", "version": f"{minor}.4"}])
    assert document["checklist"]["version"] == f"v{minor}"
    assert document["checklist"]["path"] == f"docs/AIConformance-{minor}.yaml"
    assert [r["id"] for r in document["requirements"]] == IDS_BY_MINOR[minor]
    assert document["notes"] == []
    by_id = rows(document)
    # A requirement new in a later checklist: gpubring's checks where it has them (SHOULD_COVERED),
    # else not covered, with the reason.
    for new in set(IDS_BY_MINOR[minor]) - set(IDS_1_34):
        assert by_id[new]["level"] == "SHOULD"
        if new in SHOULD_COVERED:
            assert by_id[new]["covered"] is True and by_id[new]["checks"], by_id[new]
            continue
        assert by_id[new]["status"] == "not-covered", by_id[new]
        assert by_id[new]["covered"] is False and by_id[new]["checks"] == []
        assert len(by_id[new]["reason"]) > len("not covered by gpubring: ") + 20
    # The requirements all checklists share keep their evidence and results (the checks issue 23 added are
    # skipped in the recorded run: those requirements are not run, naming the check).
    shared = ("gang_scheduling", "accelerator_metrics", "cluster_autoscaling")
    assert {k: by_id[k]["status"] for k in shared} == {
        "gang_scheduling": "not-run",
        "accelerator_metrics": "failed",
        "cluster_autoscaling": "not-applicable",
    }
    assert ("dra_support" in by_id) == (minor != "1.36")
    covered = {"1.34": 8, "1.35": 10, "1.36": 10}[minor]
    assert sum(document["summary"][s] for s in ("passed", "failed", "not-run")) == covered
    assert document["summary"]["not-applicable"] == 1
    assert document["summary"]["not-covered"] == len(IDS_BY_MINOR[minor]) - covered - 1


def test_every_requirement_id_has_its_evidence_and_title() -> None:
    tables = conformance.checklists()
    assert list(tables) == ["1.34", "1.35", "1.36"]
    ids = {r.id for checklist in tables.values() for r in checklist.requirements}
    assert ids == set(conformance.EVIDENCE)
    for checklist in tables.values():
        for req in checklist.requirements:
            assert req.title and req.category and req.level in ("MUST", "SHOULD")
            assert req.evidence is conformance.EVIDENCE[req.id]
            given = (req.evidence.groups, req.evidence.not_applicable, req.evidence.not_covered)
            assert sum(bool(g) for g in given) == 1, req.id


def _upstream_rows(file: Path) -> list[tuple[str, str, str]]:
    data = yaml.safe_load(file.read_text(encoding="utf-8"))
    return [
        (str(r["id"]), section, str(r["level"])) for section, items in data["spec"].items() for r in items
    ]


def _sources_rows(folder: Path) -> dict[str, list[str]]:
    """SOURCES.md's table: folder path -> [repository, commit, path in the repository, last commit]."""
    out: dict[str, list[str]] = {}
    for line in (folder / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| v1.") and len(cells) == 5:
            out[cells[0]] = cells[1:]
    return out


def test_the_checklists_are_the_upstream_ones() -> None:
    """gpubring's per-minor requirement ids, sections and levels, and the commits it cites, are those of
    the upstream checklists in $GPUBRING_UPSTREAM_DIR/ai-conformance (one v1.NN folder per minor, both
    the cncf/k8s-ai-conformance template and the kubernetes-sigs/ai-conformance definition)."""
    upstream = os.environ.get("GPUBRING_UPSTREAM_DIR")
    if not upstream:
        pytest.skip("GPUBRING_UPSTREAM_DIR is not set: no upstream AI Conformance checklists to compare with")
    folder = Path(upstream) / "ai-conformance"
    if not folder.is_dir():
        pytest.skip(f"{folder} does not exist: no upstream AI Conformance checklists to compare with")
    minors = sorted(p.name.removeprefix("v") for p in folder.glob("v1.*") if p.is_dir())
    assert minors, folder
    tables = conformance.checklists()
    sources = _sources_rows(folder)
    for minor in minors:
        assert minor in tables, f"gpubring has no copy of the v{minor} checklist in {folder}"
        checklist = tables[minor]
        ours = [(r.id, r.section, r.level) for r in checklist.requirements]
        cncf = folder / f"v{minor}" / f"AIConformance-{minor}.yaml"
        sigs = folder / f"v{minor}" / f"KubernetesAIConformance-{minor}.yaml"
        assert ours == _upstream_rows(cncf), minor
        assert ours == _upstream_rows(sigs), minor
        assert [r[0] for r in ours] == IDS_BY_MINOR[minor]
        assert sources[f"v{minor}/{cncf.name}"][:3] == [
            checklist.repository,
            checklist.commit,
            checklist.path,
        ]
    assert sorted(tables) == minors, "gpubring has a checklist the upstream folder does not hold"


def test_results_pass_fail_not_run_and_not_covered(doc: dict[str, Any]) -> None:
    """The recorded values (registered.yml) predate the checks issue 23 added, which the role then skips
    with their reasons: a requirement whose check was skipped is not run, the reason naming the check."""
    by_id = rows(doc)
    assert {k: v["status"] for k, v in by_id.items()} == {
        "dra_support": "not-run",
        "ai_inference": "not-run",
        "gang_scheduling": "not-run",
        "cluster_autoscaling": "not-applicable",
        "pod_autoscaling": "not-run",
        "accelerator_metrics": "failed",
        "ai_service_metrics": "not-run",
        "secure_accelerator_access": "not-run",
        "robust_controller": "not-run",
        "driver_runtime_management": "passed",
        "gpu_sharing": "not-run",
        "virtualized_accelerator": "not-covered",
    }
    assert doc["summary"] == {"passed": 1, "failed": 1, "not-run": 8, "not-applicable": 1, "not-covered": 1}
    assert by_id["accelerator_metrics"]["reason"] == "dcgm_metrics: no DCGM_FI_* sample from gpu-02"
    # Skipped without its recorded inputs (a run of an older role lacks it: test_conformance_product).
    assert by_id["dra_support"]["reason"].startswith("dra_claim_allocated: ")
    assert by_id["gpu_sharing"]["reason"].startswith("no tested node offers a shared or partitioned GPU")
    for row in by_id.values():
        if row["status"] == "not-covered":
            assert row["reason"].startswith("not covered by gpubring: "), row
            assert row["covered"] is False and row["checks"] == []
    assert "vGPU" in by_id["virtualized_accelerator"]["reason"]
    assert by_id["cluster_autoscaling"]["reason"].startswith("not applicable to gpubring: ")
    assert "gpubring node add" in by_id["cluster_autoscaling"]["reason"]


def test_each_row_carries_its_checks_raw_output(doc: dict[str, Any]) -> None:
    by_id = rows(doc)
    checks = {c["name"]: c for r in doc["requirements"] for c in r["checks"]}
    assert [c["name"] for c in by_id["gang_scheduling"]["checks"]] == [
        "gang_volcano",
        "gang_held_volcano",
        "gang_kueue",
        "gang_held_kueue",
        "gang_kai",
        "gang_held_kai",
    ]
    assert checks["gang_volcano"]["output"] == {
        "phase": "Running",
        "running": 3,
        "pending": 0,
        "min_available": 3,
    }
    assert checks["gang_kueue"] | {"expected": None} == {
        "name": "gang_kueue",
        "status": "skipped",
        "expected": None,
        "reason": "Kueue is off (schedulers_kueue_enabled)",
        "output": None,
    }
    assert checks["dra_resourceslices"]["output"]["devices"] == {"gpu-03": 4}
    assert checks["dra_resourceslices"]["output"]["api"] == "resource.k8s.io/v1"
    assert checks["dcgm_metrics"]["output"] == {"gpu-01": "736", "gpu-02": "0", "gpu-03": "368"}
    assert checks["dcgm_metrics"]["status"] == "failed"
    assert checks["no_gpu_without_request"]["output"]["verify-no-gpu-1"] == {
        "node": "gpu-01",
        "rc": 0,
        "nvidia_devices": [],
    }
    assert checks["one_gpu_per_pod"]["output"]["verify-gpu-2"]["output"].startswith("GPU 0: NVIDIA A100")
    assert checks["distinct_gpus"]["output"]["shared"] == []
    assert doc["cluster"] == {
        "host": "cp-01",
        "control_plane": "cp-01",
        "tested_nodes": ["gpu-01", "gpu-02", "gpu-03"],
        "dra_nodes": ["gpu-03"],
    }
    assert doc["run"]["failures"][0]["host"] == "cp-01"
    assert doc["run"]["exit_code"] == 1


def test_acceptance_verdict_of_every_node(doc: dict[str, Any]) -> None:
    acceptance = doc["acceptance"]
    assert acceptance["ran"] is True
    assert {h: n["verdict"] for h, n in acceptance["nodes"].items()} == {
        "gpu-01": "passed",
        "gpu-02": "failed",
    }
    assert acceptance["nodes"]["gpu-02"]["failed"] == ["nic_link:mlx5_1/1"]
    assert acceptance["nodes"]["gpu-02"]["skipped"] == ["dcgm_diag"]
    assert acceptance["nodes"]["gpu-01"]["passed"] == [
        "dcgm_diag",
        "gpu_health:0000:1a:00.0",
        "nic_link:mlx5_0/1",
    ]
    assert acceptance["nodes"]["gpu-02"]["checks"][1]["measured"] == {"state": "DOWN", "rate_gbps": None}


def test_the_version_matrix(doc: dict[str, Any]) -> None:
    by_path = {r["path"]: r for r in doc["versions"]}
    pinned = versions.load_pinned()
    assert by_path["kubernetes.version"]["version"] == pinned["kubernetes"]["version"]
    assert by_path["kubernetes.version"]["overridden"] is True
    assert len(doc["versions"]) == len(versions.flatten(pinned))
    assert doc["kubernetes"] == pinned["kubernetes"]["version"]
    assert doc["notes"] == []


def test_a_minor_without_a_checklist_is_noted() -> None:
    # No v1.37 checklist exists (ai-conformance SOURCES.md): the nearest older one, v1.36, and a note.
    document = conformance.build(recorded(), [{"path": "kubernetes.version", "version": "1.37.1"}])
    assert document["notes"] == [
        "this cluster runs Kubernetes 1.37.1; gpubring has no AI Conformance checklist for 1.37, "
        "the requirements are those of the v1.36 checklist"
    ]
    assert document["checklist"]["version"] == "v1.36"
    assert [r["id"] for r in document["requirements"]] == IDS_1_36
    assert "Note: this cluster runs Kubernetes 1.37.1; " in conformance.to_markdown(document)
    # Older than every checklist: the oldest, noted.
    older = conformance.build(recorded(), [{"path": "kubernetes.version", "version": "v1.33.5"}])
    assert older["checklist"]["version"] == "v1.34"
    assert older["notes"] == [
        "this cluster runs Kubernetes v1.33.5; gpubring has no AI Conformance checklist for 1.33, "
        "the requirements are those of the v1.34 checklist"
    ]


def test_without_a_kubernetes_version_the_pinned_minor_is_used_and_noted() -> None:
    pinned = versions.load_pinned()["kubernetes"]["version"]
    minor = ".".join(pinned.split(".")[:2])
    document = conformance.build(recorded(), [{"path": "other", "version": "1"}])
    assert document["checklist"]["version"] == f"v{minor}"
    assert document["notes"] == [
        f"the version matrix names no Kubernetes version; the requirements are those of the v{minor} "
        f"checklist, of the Kubernetes gpubring pins ({pinned})"
    ]


def test_without_smoke_tests_or_acceptance_the_covered_rows_are_not_run() -> None:
    data = {**REPORT, "options": {"skip_tags": "gpu_acceptance"}, "verify_results": {}, "gpu_acceptance": {}}
    document = conformance.build(data, [])
    by_id = rows(document)
    for row in by_id.values():
        if row["covered"]:
            assert row["status"] == "not-run"
            assert row["reason"] == conformance.NO_SMOKE_TESTS
    assert document["summary"] == {
        "passed": 0,
        "failed": 0,
        "not-run": 10,
        "not-applicable": 1,
        "not-covered": 1,
    }
    assert document["acceptance"] == {
        "ran": False,
        "reason": "not run: gpubring verify ran without --acceptance",
        "nodes": {},
    }
    assert document["cluster"] is None


def test_a_skipped_required_check_leaves_the_requirement_not_run() -> None:
    data = with_checks(recorded(), dict.fromkeys(ROUND_CHECKS, "passed"))
    fact = data["verify_results"]["cp-01"]
    off = {
        "gang_volcano": "Volcano is off (schedulers_volcano_enabled)",
        "gang_kueue": "Kueue is off (schedulers_kueue_enabled)",
        "gang_kai": "KAI is off",
    }
    for check in fact["checks"]:
        if check["name"] in off:
            check.update(status="skipped", reason=off[check["name"]], output=None)
        if check["name"] == "distinct_gpus":
            check.update(status="skipped", reason="no tested node has two allocatable GPUs", output=None)
    by_id = rows(conformance.build(data, []))
    assert by_id["gang_scheduling"]["status"] == "not-run"
    assert by_id["gang_scheduling"]["reason"] == (
        "gang_volcano: Volcano is off (schedulers_volcano_enabled); "
        "gang_kueue: Kueue is off (schedulers_kueue_enabled); gang_kai: KAI is off"
    )
    assert by_id["gang_scheduling"]["product"]["status"] == "Partially Implemented"
    assert by_id["secure_accelerator_access"]["status"] == "passed"  # distinct_gpus is optional
    # A gang that fits under one scheduler is not enough: the held gang of the same scheduler must pass.
    for check in fact["checks"]:
        if check["name"] == "gang_kueue":
            check.update(status="passed", reason="", output={"admitted": True})
        if check["name"] == "gang_held_kueue":
            check.update(status="skipped", reason="Kueue's held gang did not run", output=None)
    assert rows(conformance.build(data, []))["gang_scheduling"]["status"] == "not-run"
    for check in fact["checks"]:
        if check["name"] == "gang_held_kueue":
            check.update(status="passed", reason="", output={"started": 0})
    assert rows(conformance.build(data, []))["gang_scheduling"]["status"] == "passed"


def test_markdown(doc: dict[str, Any]) -> None:
    text = conformance.to_markdown(doc)
    lines = text.splitlines()
    header = "| Requirement | ID | Level | Result | Product file status | Checks | Evidence taken | Why |"
    start = lines.index(header)
    table = lines[start + 2 : start + 2 + len(REQUIREMENT_IDS)]
    assert [line.split(" | ")[1].strip("`") for line in table] == REQUIREMENT_IDS
    assert table[0].startswith(
        "| Accelerators: DRA Support | `dra_support` | MUST | not run | Partially Implemented | "
        "`dra_resourceslices`, `dra_claim_allocated` | 2026-03-01T10:21:40+00:00 | dra_claim_allocated: "
    )
    assert (
        "| Observability: Accelerator Metrics | `accelerator_metrics` | MUST | FAILED | Not Implemented |"
        in text
    )
    assert (
        "| Scheduling & Orchestration: Cluster Autoscaling | `cluster_autoscaling` | MUST | not applicable | "
        "N/A | — | 2026-03-02T08:00:00+00:00 | not applicable to gpubring: " in text
    )
    assert "Summary: 1 passed, 1 FAILED, 8 not run, 1 not applicable, 1 not covered." in text
    assert (
        "| Accelerators: Virtualized Accelerators | `virtualized_accelerator` | SHOULD | not covered |"
        in text
    )
    assert "Proof: roles/verify: the resource.k8s.io/v1 API is served" in text
    assert doc["checklist"]["source"] in text
    assert '"gpu-02": "0"' in text  # raw output, fenced
    assert "| gpu-01 | passed | — | rdma_write_bw:mlx5_0 |" in text
    assert "| gpu-02 | failed | nic_link:mlx5_1/1 | dcgm_diag | pcie:0000:1b:00.0 |" in text
    kubernetes = versions.load_pinned()["kubernetes"]["version"]
    assert f"| `kubernetes.version` | {kubernetes} | {kubernetes} | yes |" in text
    assert "- cp-01, Check that each exporter answers with DCGM samples: verify: DCGM exporters" in text
    # Every row of a table has its header's columns (escaped pipes are no column).
    widths: list[int] = []
    for line in [*lines, ""]:
        if line.startswith("|"):
            widths.append(len(re.findall(r"(?<!\\)\|", line)))
        elif widths:
            assert len(set(widths)) == 1, widths
            widths = []


def test_markdown_cells_escape_pipes() -> None:
    data = {**REPORT, "failures": [{"host": "a|b", "task": "t", "message": "x | y"}]}
    text = conformance.to_markdown(conformance.build(data, [{"path": "p", "version": "1|2"}]))
    assert "| `p` | 1\\|2 | — | no |" in text
    assert "- a\\|b, t: x \\| y" in text


# --- the verb --------------------------------------------------------------------------------------


@pytest.fixture
def unreachable(tmp_path: Path) -> Path:
    """An inventory whose only host refuses SSH (127.0.0.1, port 1)."""
    root = tmp_path / "inventory"
    root.mkdir()
    (root / "hosts.yml").write_text(
        "---\nall:\n  hosts:\n    node1:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n"
        "      ansible_user: root\n  children:\n    control_plane:\n      hosts:\n        node1:\n"
        "    gpu_nodes:\n      hosts:\n        node1:\n",
        encoding="utf-8",
    )
    return root


def runs_of(root: Path) -> list[Path]:
    base = root / ".gpubring" / "runs"
    return sorted(base.iterdir()) if base.is_dir() else []


def test_bad_report_paths_exit_2_before_any_host(unreachable: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "report.txt"
    a_file.write_text("x")
    taken = tmp_path / "taken"
    (taken / "conformance.json").mkdir(parents=True)
    for bad, message in (
        (a_file, "is not a folder"),
        (tmp_path / "no" / "such" / "dir", "does not exist"),
        (taken, "conformance.json is a folder"),
    ):
        result = CliRunner().invoke(app, ["verify", str(unreachable), "--report", str(bad)])
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert "Traceback" not in result.output
        assert runs_of(unreachable) == []
    assert not (tmp_path / "no").exists()


def test_bad_inventory_exits_2_and_creates_no_report_folder(tmp_path: Path) -> None:
    report = tmp_path / "evidence"
    result = CliRunner().invoke(app, ["verify", str(tmp_path / "missing"), "--report", str(report)])
    assert result.exit_code == 2
    assert not report.exists()


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an ssh client for the unreachable host")
def test_report_on_an_unreachable_cluster(unreachable: Path, tmp_path: Path) -> None:
    report = tmp_path / "evidence"
    result = CliRunner().invoke(app, ["verify", str(unreachable), "--report", str(report)])
    assert result.exit_code == 4, result.output
    assert stat.S_IMODE(report.stat().st_mode) == 0o700
    for name in ("conformance.json", "conformance.md", "conformance-product.yaml"):
        assert stat.S_IMODE((report / name).stat().st_mode) == 0o600
    document = json.loads((report / "conformance.json").read_text())
    assert document["run"]["status"] == "unreachable"
    assert document["summary"] == {
        "passed": 0,
        "failed": 0,
        "not-run": 10,
        "not-applicable": 1,
        "not-covered": 1,
    }
    assert document["checklist"]["version"] == "v1.35"
    product = yaml.safe_load((report / "conformance-product.yaml").read_text())
    assert stat.S_IMODE((report / "conformance-product.yaml").stat().st_mode) == 0o600
    assert product["metadata"]["kubernetesVersion"] == "v1.35"
    statuses = {r["id"]: r["status"] for rs in product["spec"].values() for r in rs}
    assert statuses["cluster_autoscaling"] == "N/A" and statuses["dra_support"] == "Not Implemented"
    assert document["acceptance"]["reason"] == "not run: gpubring verify ran without --acceptance"
    (run,) = runs_of(unreachable)
    stored = json.loads((run / "report.json").read_text())
    assert stored["command"] == "verify"
    assert stored["options"]["skip_tags"] == "gpu_acceptance"
    assert stored["phases"]["run"] == ["verify"]


def test_help_lists_verify_without_importing_ansible() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['gpubring', '--help']\n"
        "from gpubring.app import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('ansible', 'ansible_runner'))\n"
        "print('HEAVY', heavy)\n"
    )
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "HEAVY []" in done.stdout
    assert any(line.split()[:1] == ["verify"] for line in done.stdout.splitlines())
