"""The conformance report in the AI Conformance program's shape (issue 23 items 8 and 9).

- every requirement of a checklist gpubring keeps is proven by checks the verify role publishes, or
  justified (not-applicable: cluster_autoscaling on bare metal; not-covered with why); a checklist that
  names a requirement without either is refused;
- every check name EVIDENCE uses is one roles/verify publishes (plugins/module_utils/verify_verdicts.py
  CHECK_NAMES, read at test time: the checks of this round land there) or the fabric test's verdict;
- the document carries per requirement the status, the checks, their raw output and a timestamp, and
  conformance-product.yaml has the fields of the CNCF submission's product file (cncf/k8s-ai-conformance
  docs/AIConformance-1.NN.yaml: `status`, `evidence`, `notes` under `spec.<section>[]`, with the template's
  `metadata` keys), compared with the upstream templates when GPUBRING_UPSTREAM_DIR names them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpubring import conformance, verifyfacts, versions
from helpers import REPO, module_utils
from test_conformance import IDS_BY_MINOR, NOW, ROUND_CHECKS, matrix, recorded, rows, with_checks

TEMPLATE_STATUSES = ("Implemented", "Not Implemented", "Partially Implemented", "N/A")


def upstream_folder() -> Path | None:
    upstream = os.environ.get("GPUBRING_UPSTREAM_DIR")
    folder = Path(upstream) / "ai-conformance" if upstream else None
    return folder if folder is not None and folder.is_dir() else None


def all_passed(resource: str = "nvidia.com/gpu.shared") -> dict[str, Any]:
    """The recorded run with every check of this round passed, DCGM fixed, and the tested nodes offering
    `resource` (gpu_allocatable's output as the role writes it)."""
    data = with_checks(recorded(), dict.fromkeys((*ROUND_CHECKS, "dcgm_metrics"), "passed"))
    for check in data["verify_results"]["cp-01"]["checks"]:
        if check["name"] == "gpu_allocatable":
            for node in check["output"]:
                node["resource"] = resource
    return data


# --- every requirement is covered or justified ------------------------------------------------------


def test_every_must_of_the_pinned_minor_is_present_with_its_evidence() -> None:
    """The report of the recorded run: each MUST of the pinned minor's checklist (the upstream file's
    when GPUBRING_UPSTREAM_DIR names it) has a row with its status, checks, raw output and timestamp,
    and a product-file status."""
    pinned = versions.load_pinned()["kubernetes"]["version"]
    minor = ".".join(pinned.split(".")[:2])
    musts = [r.id for r in conformance.checklists()[minor].requirements if r.level == "MUST"]
    folder = upstream_folder()
    if folder is not None:
        template = yaml.safe_load((folder / f"v{minor}" / f"AIConformance-{minor}.yaml").read_text())
        assert musts == [r["id"] for rs in template["spec"].values() for r in rs if r["level"] == "MUST"]
    assert len(musts) == 9
    doc = conformance.build(recorded(), matrix(), now=NOW)
    by_id = rows(doc)
    for rid in musts:
        row = by_id[rid]
        assert row["level"] == "MUST"
        assert row["status"] in conformance.STATUSES
        assert row["timestamp"], rid
        assert row["product"]["status"] in TEMPLATE_STATUSES
        if row["covered"]:
            assert row["checks"] and row["proof"] != "none", rid
            assert row["timestamp"] == "2026-03-01T10:21:40+00:00"  # the run's end: no event time recorded
            first = row["product"]["evidence"][0]
            assert first.startswith(f"gpubring verify --report conformance.json, requirement {rid}: ")
        else:
            assert row["status"] == "not-applicable" and rid == "cluster_autoscaling"
            assert row["timestamp"] == NOW.isoformat()
    # Raw output travels: the DRA row carries the ResourceSlices the role read.
    dra = {c["name"]: c for c in by_id["dra_support"]["checks"]}
    assert dra["dra_resourceslices"]["output"]["devices"] == {"gpu-03": 4}
    assert by_id["cluster_autoscaling"]["product"] == {
        "status": "N/A",
        "evidence": [],
        "notes": by_id["cluster_autoscaling"]["reason"],
    }


def test_every_requirement_of_every_checklist_is_covered_or_justified() -> None:
    for checklist in conformance.checklists().values():
        for req in checklist.requirements:
            ev = req.evidence
            if ev.groups:
                assert ev.proof != "none" and all(ev.groups), req.id
            else:
                assert len((ev.not_applicable or ev.not_covered).strip()) > 40, req.id
    assert conformance.EVIDENCE["cluster_autoscaling"].not_applicable
    for should in ("gpu_sharing", "driver_runtime_management", "high_performance_networking"):
        assert conformance.EVIDENCE[should].groups, should


@pytest.fixture
def checklist_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of conformance_checklists.yml that conformance reads instead (caches cleared)."""
    copy = tmp_path / "conformance_checklists.yml"
    shutil.copy(conformance.CHECKLISTS_FILE, copy)
    monkeypatch.setattr(conformance, "CHECKLISTS_FILE", copy)
    conformance.checklists.cache_clear()
    conformance.product_statuses.cache_clear()
    yield copy
    conformance.checklists.cache_clear()
    conformance.product_statuses.cache_clear()


def test_a_requirement_without_evidence_fails_the_checklist_data(
    checklist_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = checklist_copy.read_text()
    new = "      - {id: robust_controller, section: operator, level: MUST}\n"
    assert new in text
    checklist_copy.write_text(
        text.replace(
            new, new + "      - {id: model_registry, section: operator, level: SHOULD}\n", 1
        ).replace("titles:\n", "titles:\n  model_registry: Model Registry\n", 1)
    )
    with pytest.raises(conformance.ChecklistDataError, match="requirement model_registry has no evidence"):
        conformance.checklists()
    # Evidence that neither names checks nor says why not is no justification.
    checklist_copy.write_text(text)
    conformance.checklists.cache_clear()
    monkeypatch.setitem(conformance.EVIDENCE, "gpu_sharing", conformance.Evidence(not_covered="  "))
    with pytest.raises(conformance.ChecklistDataError, match="EVIDENCE\\['gpu_sharing'\\]"):
        conformance.checklists()
    both = conformance.Evidence(groups=(("gpu_allocatable",),), not_covered="also not covered")
    monkeypatch.setitem(conformance.EVIDENCE, "gpu_sharing", both)
    conformance.checklists.cache_clear()
    with pytest.raises(conformance.ChecklistDataError, match="exactly one of"):
        conformance.checklists()


def test_the_product_statuses_are_data_for_every_result(checklist_copy: Path) -> None:
    assert set(conformance.product_statuses()) == {*conformance.STATUSES, conformance.PARTIAL}
    assert set(conformance.product_statuses().values()) == set(TEMPLATE_STATUSES)
    checklist_copy.write_text(checklist_copy.read_text().replace("  not-applicable: N/A\n", "", 1))
    conformance.product_statuses.cache_clear()
    with pytest.raises(conformance.ChecklistDataError, match="product_statuses has"):
        conformance.product_statuses()


# --- the check names are the verify role's -----------------------------------------------------------


def unknown_checks(known: set[str]) -> dict[str, list[str]]:
    """Per requirement id, the check names of its EVIDENCE that are not in `known`."""
    out: dict[str, list[str]] = {}
    for rid, evidence in conformance.EVIDENCE.items():
        missing = [name for name in evidence.checks if name not in known]
        if missing:
            out[rid] = missing
    return out


def test_every_evidence_check_is_one_the_verify_role_publishes() -> None:
    """CHECK_NAMES is read from the role's code now (the checks of this round land there as they are
    written); the fabric test's verdict is the one other source (roles/fabric_test publishes
    fabric_test_result, which gpubring.verifyfacts reads)."""
    known = {*module_utils("verify_verdicts").CHECK_NAMES, conformance.FABRIC_CHECK}
    assert unknown_checks(known) == {}, (
        "conformance.py EVIDENCE names checks roles/verify does not publish (verify_verdicts CHECK_NAMES)"
    )
    # The same comparison refuses a name the role does not publish.
    assert unknown_checks(known - {"dcgm_metrics"}) == {"accelerator_metrics": ["dcgm_metrics"]}
    report = yaml.safe_load((REPO / "roles" / "fabric_test" / "tasks" / "report.yml").read_text())
    published = [task["ansible.builtin.set_fact"] for task in report if "ansible.builtin.set_fact" in task]
    assert any(verifyfacts.FABRIC_FACT in facts for facts in published)


# --- results -------------------------------------------------------------------------------------------


def test_every_check_passed_every_covered_requirement_is_implemented() -> None:
    for minor, ids in IDS_BY_MINOR.items():
        doc = conformance.build(
            all_passed(), [{"path": "kubernetes.version", "version": f"{minor}.2"}], now=NOW
        )
        by_id = rows(doc)
        assert [r["id"] for r in doc["requirements"]] == ids
        for rid, row in by_id.items():
            if rid == "high_performance_networking":  # the fabric test did not run: rdma_pods is enough
                assert row["status"] == "passed"
                assert {c["name"]: c["reason"] for c in row["checks"]}[
                    "fabric_test"
                ] == conformance.NO_FABRIC_TEST
            expected = {"cluster_autoscaling": "not-applicable"}.get(
                rid, "passed" if row["covered"] else "not-covered"
            )
            assert row["status"] == expected, (minor, rid, row["reason"])
            assert (
                row["product"]["status"]
                == {
                    "passed": "Implemented",
                    "not-applicable": "N/A",
                    "not-covered": "Not Implemented",
                }[expected]
            )
        assert doc["summary"]["failed"] == doc["summary"]["not-run"] == 0


def test_a_check_the_run_did_not_publish_leaves_its_requirement_not_run() -> None:
    data = all_passed()
    fact = data["verify_results"]["cp-01"]
    fact["checks"] = [c for c in fact["checks"] if c["name"] != "dra_claim_allocated"]
    row = rows(conformance.build(data, []))["dra_support"]
    assert row["status"] == "not-run"
    assert row["reason"] == (
        "dra_claim_allocated: this run's verify_results has no check dra_claim_allocated: the verify role of "
        "this run does not publish it (a gpubring older than the check)"
    )
    assert row["product"]["status"] == "Partially Implemented"  # dra_resourceslices passed


def test_gpu_sharing_needs_a_shared_or_mig_resource() -> None:
    for resource in ("nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"):
        assert rows(conformance.build(all_passed(resource), []))["gpu_sharing"]["status"] == "passed"
    row = rows(conformance.build(all_passed("nvidia.com/gpu"), []))["gpu_sharing"]
    assert row["status"] == "not-run"
    assert "gpu_operator_time_slicing_rename" in row["reason"]
    assert row["product"]["status"] == "Not Implemented"  # the checks passed, but showed no sharing


def fabric(verdict: str, status: str, reason: str = "") -> dict[str, Any]:
    check = {"name": "nccl_all_reduce:multi_node", "status": status, "reason": reason}
    check |= {"measured": {"busbw_gbs": 182.4, "network": "IB/GDRDMA"}, "expected": {"min_busbw_gbs": 150}}
    return {
        "cp-01": {"verdict": verdict, "checks": [check], "nodes": ["gpu-01", "gpu-02"], "gpus_per_node": 8}
    }


def test_high_performance_networking_carries_the_fabric_test_verdict() -> None:
    v136 = [{"path": "kubernetes.version", "version": "1.36.0"}]
    data = all_passed() | {
        "fabric_test": fabric("passed", "passed"),
        "facts_published": {
            "verify_results": "2026-03-01T10:20:00.5",
            "fabric_test_result": "2026-03-01T10:21:00",
        },
    }
    row = rows(conformance.build(data, v136))["high_performance_networking"]
    assert row["status"] == "passed"
    check = {c["name"]: c for c in row["checks"]}["fabric_test"]
    assert check["status"] == "passed" and check["output"]["checks"][0]["measured"]["network"] == "IB/GDRDMA"
    assert row["timestamp"] == "2026-03-01T10:21:00+00:00"  # the later of the two results
    assert (
        rows(conformance.build(data, v136))["gang_scheduling"]["timestamp"]
        == "2026-03-01T10:20:00.500000+00:00"
    )
    why = "no [GDRDMA] in the NCCL log while GPUDirect RDMA is expected"
    failed = rows(conformance.build(data | {"fabric_test": fabric("failed", "failed", why)}, v136))
    assert failed["high_performance_networking"]["status"] == "failed"
    assert (
        failed["high_performance_networking"]["reason"] == f"fabric_test: nccl_all_reduce:multi_node: {why}"
    )
    measured_nothing = fabric("skipped-only", "skipped", "fewer than two nodes")
    skipped = rows(conformance.build(data | {"fabric_test": measured_nothing}, v136))
    assert skipped["high_performance_networking"]["status"] == "passed"  # optional evidence
    assert {c["name"]: c["status"] for c in skipped["high_performance_networking"]["checks"]}[
        "fabric_test"
    ] == ("skipped")


def test_fact_times_come_from_the_events(tmp_path: Path) -> None:
    events = tmp_path / "artifacts" / "x" / "job_events"
    events.mkdir(parents=True)
    fact = {"control_plane": "cp-01", "checks": [{"name": "gpu_allocatable", "status": "passed"}]}
    for counter, created, facts in (
        (1, "2026-03-01T10:00:00.000001", {"verify_results": fact}),
        (2, "2026-03-01T10:05:00", {"fabric_test_result": fabric("passed", "passed")["cp-01"]}),
        (3, "2026-03-01T10:09:00", {"verify_results": fact}),
    ):
        event = {"counter": counter, "event": "runner_on_ok", "created": created}
        event["event_data"] = {"host": "cp-01", "res": {"ansible_facts": facts}}
        (events / f"{counter}-a.json").write_text(json.dumps(event))
    found = verifyfacts.from_run_folder(tmp_path)
    assert found.published == {
        "verify_results": "2026-03-01T10:09:00",
        "fabric_test_result": "2026-03-01T10:05:00",
    }
    assert found.fabric_test["cp-01"]["verdict"] == "passed"
    doc = conformance.build({**found.report_fields(), "ended": "2026-03-01T10:30:00+00:00"}, [])
    assert rows(doc)["driver_runtime_management"]["timestamp"] == "2026-03-01T10:09:00+00:00"


# --- the product file -------------------------------------------------------------------------------


def test_the_product_file_has_the_templates_fields() -> None:
    """conformance-product.yaml of the recorded run: the template's metadata keys and spec sections,
    ids and levels, in order; per requirement only the template's fields (a vendor copies status,
    evidence and notes); statuses from the template's list; N/A with its justification."""
    folder = upstream_folder()
    listed: list[str] = []
    for minor in IDS_BY_MINOR:
        doc = conformance.build(
            all_passed(), [{"path": "kubernetes.version", "version": f"{minor}.1"}], now=NOW
        )
        text = conformance.product_yaml(doc)
        assert text.startswith(f"# Kubernetes AI Conformance v{minor}: status, evidence and notes")
        product = yaml.safe_load(text)
        ours = [(s, r["id"], r["level"]) for s, rs in product["spec"].items() for r in rs]
        assert [r[1] for r in ours] == IDS_BY_MINOR[minor]
        for section in product["spec"].values():
            for row in section:
                assert list(row) == ["id", "level", "status", "evidence", "notes"]
                assert row["status"] in TEMPLATE_STATUSES
                assert isinstance(row["evidence"], list) and all(isinstance(e, str) for e in row["evidence"])
                if row["status"] == "N/A":
                    assert row["notes"].startswith("not applicable to gpubring: ")
        assert product["metadata"]["kubernetesVersion"] == f"v{minor}"
        if folder is None:
            continue
        template_text = (folder / f"v{minor}" / f"AIConformance-{minor}.yaml").read_text()
        template = yaml.safe_load(template_text)
        assert list(product["metadata"]) == list(template["metadata"])
        assert ours == [(s, r["id"], r["level"]) for s, rs in template["spec"].items() for r in rs]
        for section in template["spec"].values():
            for row in section:
                assert {"id", "level", "status", "evidence", "notes"} <= set(row)
        words = re.search(r"status: \"\"\s+# (.+)", template_text)
        if words is not None:  # the v1.34 and v1.35 templates list the words; v1.36 has no comment
            assert {w.strip() for w in words.group(1).split(",")} == set(TEMPLATE_STATUSES)
            listed.append(minor)
    assert folder is None or listed


def test_the_markdown_names_the_product_file_and_every_row_its_timestamp() -> None:
    doc = conformance.build(all_passed(), matrix(), now=datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
    text = conformance.to_markdown(doc)
    assert "conformance-product.yaml next to this file" in text
    assert (
        "| Scheduling & Orchestration: Gang Scheduling | `gang_scheduling` | MUST | passed | Implemented | "
        "`gang_volcano`, `gang_held_volcano`, `gang_kueue`, `gang_held_kueue`, `gang_kai`, `gang_held_kai` | "
        "2026-03-01T10:21:40+00:00 |"
    ) in text
