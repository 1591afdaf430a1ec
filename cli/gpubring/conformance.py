"""Conformance evidence: each CNCF Kubernetes AI Conformance requirement, the gpubring check that
proves it on this cluster, its result and what it read (`gpubring verify --report DIR`).

The requirements are those of the Kubernetes AI Conformance checklist of the cluster's Kubernetes minor
(the version matrix's kubernetes.version). gpubring keeps each checklist's requirement ids, sections and
levels as data in conformance_checklists.yml next to this file, with its source (cncf/k8s-ai-conformance
docs/AIConformance-1.NN.yaml and the commit); the checklists of v1.34, v1.35 and v1.36 are there. v1.35
adds three SHOULD items to v1.34's nine MUST (driver_runtime_management, gpu_sharing,
virtualized_accelerator); v1.36 drops dra_support (Kubernetes conformance covers the DRA APIs from v1.35)
and adds three more SHOULD (advanced_inference_ingress, high_performance_networking,
disaggregated_inference). A cluster on a minor without a checklist there (1.37, say) is judged against the
nearest older one (else the oldest), and the document's notes say so. What proves each requirement is
EVIDENCE below, by id; a new minor's list is a data change, and a requirement without a check is reported
`not-covered`, never passed.

A requirement is
- `passed`/`failed`: the checks of roles/verify that prove it ran, with that result;
- `not-run`: gpubring has such a check, but this run did not run it (turned off, no GPU node, an
  earlier failure, check mode; the reason says which);
- `not-covered`: gpubring has no check that proves it, and the row says why.

Pure but for gpubring's own data: `build(report_data, matrix)` takes the run report (report.json's
fields) with the facts the verify roles published (`verify_results`, `gpu_acceptance`:
gpubring.verifyfacts) and the version matrix rows; `to_markdown` renders what `build` returns. The only
files read are conformance_checklists.yml and, when the matrix names no Kubernetes version, versions.yml
(the pinned minor).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpubring import versions, yamlfile

SCHEMA = "gpubring.conformance/v1"
CHECKLIST_NAME = "Kubernetes AI Conformance"
CHECKLISTS_FILE = Path(__file__).with_name("conformance_checklists.yml")

PASSED, FAILED, NOT_RUN, NOT_COVERED = "passed", "failed", "not-run", "not-covered"
STATUSES = (PASSED, FAILED, NOT_RUN, NOT_COVERED)

NO_SMOKE_TESTS = (
    "the cluster smoke tests did not run in this run: verify_cluster false, check mode, no control_plane "
    "group, no admin kubeconfig on the first control plane yet, or the run stopped before them (see the "
    "run's failures)"
)


@dataclass(frozen=True)
class Evidence:
    """How gpubring proves one requirement (any checklist that has its id).

    `required`: the verify checks (verify_results.checks[].name) that must pass, all of them or, with
    any_of, at least one; `optional`: checks shown as evidence that fail the requirement when they
    fail. No check at all: not covered, for the reason in `not_covered`."""

    proof: str = "none"
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    any_of: bool = False
    not_covered: str = ""


@dataclass(frozen=True)
class Requirement:
    """One requirement of a checklist (id, title, section, level: conformance_checklists.yml) with its
    Evidence."""

    id: str
    title: str
    section: str  # the checklist's spec key: accelerators, networking, ...
    category: str  # its name: Accelerators, Networking, ...
    level: str
    evidence: Evidence


@dataclass(frozen=True)
class Checklist:
    """One Kubernetes minor's checklist as gpubring keeps it: `minor` "1.35", `version` "v1.35", the
    upstream file it was read from (repository, commit, path) and its requirements in order."""

    minor: str
    version: str
    repository: str
    commit: str
    path: str
    requirements: tuple[Requirement, ...]

    @property
    def source(self) -> str:
        return f"https://github.com/{self.repository}/blob/{self.commit}/{self.path}"

    def describe(self) -> dict[str, str]:
        return {
            "name": CHECKLIST_NAME,
            "version": self.version,
            "kubernetes": self.minor,
            "source": self.source,
            "repository": self.repository,
            "commit": self.commit,
            "path": self.path,
        }


EVIDENCE: dict[str, Evidence] = {
    "dra_support": Evidence(
        proof=(
            "roles/verify tasks/cluster_dra.yml: the resource.k8s.io/v1 API is served and NVIDIA's DRA "
            "driver (gpu.nvidia.com) publishes each DRA node's GPUs as devices in ResourceSlices"
        ),
        required=("dra_resourceslices",),
    ),
    "ai_inference": Evidence(
        proof="none",
        not_covered=(
            "gpubring installs no Gateway API implementation (no Gateway API CRDs, no gateway controller, no "
            "inference extension) and the verify phase tests no Gateway or HTTPRoute: install one and prove "
            "it with its own tests"
        ),
    ),
    "gang_scheduling": Evidence(
        proof=(
            "roles/verify tasks/cluster_gang.yml: a 3-pod job runs all together under Volcano (minAvailable) "
            "and/or is admitted as one workload by Kueue, whichever the platform runs (KAI Scheduler has no "
            "gang test)"
        ),
        required=("gang_volcano", "gang_kueue"),
        any_of=True,
    ),
    "cluster_autoscaling": Evidence(
        proof="none",
        not_covered=(
            "gpubring builds bare-metal clusters from a fixed inventory and installs no cluster autoscaler: "
            "nodes are added with `gpubring node add`; the requirement is conditional on the platform "
            "providing an autoscaler"
        ),
    ),
    "pod_autoscaling": Evidence(
        proof="none",
        not_covered=(
            "the monitoring role installs prometheus-adapter with the custom metric pod_gpu_utilization "
            "(monitoring_enabled, monitoring_adapter), but the verify phase neither queries "
            "custom.metrics.k8s.io nor scales a HorizontalPodAutoscaler on it"
        ),
    ),
    "accelerator_metrics": Evidence(
        proof=(
            "roles/verify tasks/cluster_dcgm.yml: a DCGM exporter runs on every tested GPU node and "
            "answers on :9400/metrics with DCGM_FI_* samples (the output is their count per node)"
        ),
        required=("dcgm_exporters", "dcgm_metrics"),
    ),
    "ai_service_metrics": Evidence(
        proof="none",
        not_covered=(
            "the monitoring role installs kube-prometheus-stack, whose Prometheus selects every "
            "ServiceMonitor (monitoring_enabled), but the verify phase does not check that a workload's "
            "metrics are discovered and scraped"
        ),
    ),
    "secure_accelerator_access": Evidence(
        proof=(
            "roles/verify tasks/cluster_pods.yml: a pod without a GPU request sees no /dev/nvidia*, a "
            "one-GPU pod sees exactly one GPU through nvidia-smi, two one-GPU pods on one node see "
            "different GPUs (skipped with time-slicing or without a node of two GPUs)"
        ),
        required=("no_gpu_without_request", "one_gpu_per_pod"),
        optional=("distinct_gpus", "pods_running"),
    ),
    "robust_controller": Evidence(
        proof="none",
        not_covered=(
            "the verify phase does not read the operators' state: `gpubring up`'s platform phase waits for "
            "the GPU Operator's ClusterPolicy and the Network Operator's NicClusterPolicy to report state "
            "ready (roles/helm tasks/ready.yml) and fails otherwise, but that is not re-checked here, and no "
            "webhook or reconcile test of an AI operator (Ray, Kubeflow) runs"
        ),
    ),
    # SHOULD items of the v1.35 and v1.36 checklists: no verify check proves any of them yet.
    "driver_runtime_management": Evidence(
        not_covered=(
            "the per-host verify checks read the loaded driver's version against its pin (roles/verify "
            "tasks/nvidia_driver.yml) and the GPU Operator validates driver and toolkit, but no cluster "
            "check of verify_results proves the driver and container runtime of every GPU node, and none "
            "reads driver or runtime versions through DRA"
        ),
    ),
    "gpu_sharing": Evidence(
        not_covered=(
            "the GPU Operator can be set to time-slice GPUs (gpu_operator_time_slicing_replicas) or to "
            "partition them with MIG, but the verify phase does not prove that a shared or partitioned GPU "
            "is schedulable and oversubscribed"
        ),
    ),
    "virtualized_accelerator": Evidence(
        not_covered="gpubring sets up no virtualized accelerators (vGPU) and the verify phase tests none",
    ),
    "advanced_inference_ingress": Evidence(
        not_covered=(
            "gpubring installs no Gateway API implementation and no Gateway API Inference Extension, and the "
            "verify phase tests no model-aware routing"
        ),
    ),
    "high_performance_networking": Evidence(
        not_covered=(
            "the Network Operator (RDMA devices, secondary networks) and the NCCL fabric test "
            "(fabric_test_enabled, its own verdict in the run) are there, but no check of verify_results "
            "proves that pods attach to more than one interface or that the devices are exposed through DRA"
        ),
    ),
    "disaggregated_inference": Evidence(
        not_covered="gpubring installs no disaggregated (prefill/decode) inference serving and tests none",
    ),
}


def _minor_key(version: str) -> tuple[int, ...]:
    parts = version.strip().lstrip("v").split(".")[:2]
    return tuple(int(p) if p.isdigit() else -1 for p in parts)


def _minor(version: str) -> str:
    return ".".join(version.strip().lstrip("v").split(".")[:2])


class ChecklistDataError(Exception):
    """conformance_checklists.yml does not say what gpubring expects (a defect of gpubring itself)."""


@cache
def checklists() -> dict[str, Checklist]:
    """Every checklist of conformance_checklists.yml by minor ("1.34"), oldest first. Every id there
    must have its EVIDENCE and a title."""
    try:
        data = yamlfile.read(CHECKLISTS_FILE, CHECKLISTS_FILE.name)
        sections, titles = dict(data["sections"]), dict(data["titles"])
        out: dict[str, Checklist] = {}
        for minor in sorted(data["checklists"], key=_minor_key):
            entry = data["checklists"][minor]
            reqs = tuple(
                Requirement(
                    id=str(row["id"]),
                    title=str(titles[row["id"]]),
                    section=str(row["section"]),
                    category=str(sections[row["section"]]),
                    level=str(row["level"]),
                    evidence=EVIDENCE[row["id"]],
                )
                for row in entry["requirements"]
            )
            out[str(minor)] = Checklist(
                minor=str(minor),
                version=str(entry["version"]),
                repository=str(entry["repository"]),
                commit=str(entry["commit"]),
                path=str(entry["path"]),
                requirements=reqs,
            )
    except (yamlfile.YamlError, KeyError, TypeError, AttributeError) as exc:
        raise ChecklistDataError(f"{CHECKLISTS_FILE}: {exc}") from None
    if not out:
        raise ChecklistDataError(f"{CHECKLISTS_FILE}: no checklist")
    return out


def checklist_for(kubernetes: str) -> tuple[Checklist, list[str]]:
    """The checklist of that Kubernetes version's minor, with the notes the document carries: none when
    gpubring has that minor's checklist; else the nearest older one's (the oldest when there is none
    older) and a note naming it. No version: the checklist of the minor gpubring pins (versions.yml)."""
    table = checklists()
    if not kubernetes:
        pinned = str(versions.load_pinned()["kubernetes"]["version"])
        chosen, _ = checklist_for(pinned)
        return chosen, [
            f"the version matrix names no Kubernetes version; the requirements are those of the "
            f"{chosen.version} checklist, of the Kubernetes gpubring pins ({pinned})"
        ]
    minor = _minor(kubernetes)
    if minor in table:
        return table[minor], []
    older = [m for m in table if _minor_key(m) <= _minor_key(minor)]
    chosen = table[older[-1] if older else next(iter(table))]
    return chosen, [
        f"this cluster runs Kubernetes {kubernetes}; gpubring has no AI Conformance checklist for {minor}, "
        f"the requirements are those of the {chosen.version} checklist"
    ]


def _checks_by_name(verify_results: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The cluster's smoke-test results (the host that ran them) and its checks by name."""
    for host in sorted(verify_results):
        fact = verify_results[host]
        if isinstance(fact, Mapping) and isinstance(fact.get("checks"), list):
            checks = {str(c.get("name")): dict(c) for c in fact["checks"] if isinstance(c, Mapping)}
            return {"host": host, **{k: v for k, v in fact.items() if k != "checks"}}, checks
    return {}, {}


def _check_row(name: str, check: Mapping[str, Any] | None) -> dict[str, Any]:
    if check is None:
        return {"name": name, "status": "skipped", "expected": None, "reason": NO_SMOKE_TESTS, "output": None}
    return {
        "name": name,
        "status": str(check.get("status", "skipped")),
        "expected": check.get("expected"),
        "reason": check.get("reason") or "",
        "output": check.get("output"),
    }


def _judge(req: Evidence, rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """The requirement's status and why, from the rows of its checks."""
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        return FAILED, "; ".join(f"{r['name']}: {r['reason'] or 'failed'}" for r in failed)
    required = [r for r in rows if r["name"] in req.required]
    passed = [r for r in required if r["status"] == "passed"]
    if (req.any_of and passed) or (not req.any_of and len(passed) == len(required)):
        return PASSED, ""
    not_passed = [r for r in required if r["status"] != "passed"]
    return NOT_RUN, "; ".join(f"{r['name']}: {r['reason'] or r['status']}" for r in not_passed)


def _requirement(req: Requirement, checks: Mapping[str, Mapping[str, Any]], ran: bool) -> dict[str, Any]:
    evidence = req.evidence
    row: dict[str, Any] = {
        "id": req.id,
        "title": req.title,
        "category": req.category,
        "level": req.level,
        "covered": bool(evidence.required),
        "proof": evidence.proof,
    }
    if not evidence.required:
        return row | {
            "status": NOT_COVERED,
            "reason": f"not covered by gpubring: {evidence.not_covered}",
            "checks": [],
        }
    names = (*evidence.required, *evidence.optional)
    rows = [_check_row(name, checks.get(name) if ran else None) for name in names]
    if not ran:
        return row | {"status": NOT_RUN, "reason": NO_SMOKE_TESTS, "checks": rows}
    status, reason = _judge(evidence, rows)
    return row | {"status": status, "reason": reason, "checks": rows}


def _acceptance(report_data: Mapping[str, Any]) -> dict[str, Any]:
    results = report_data.get("gpu_acceptance") or {}
    nodes: dict[str, Any] = {}
    for host in sorted(results):
        fact = results[host]
        if not isinstance(fact, Mapping):
            continue
        checks = [dict(c) for c in fact.get("checks") or [] if isinstance(c, Mapping)]
        nodes[host] = {
            "verdict": fact.get("verdict"),
            "passed": [c.get("name") for c in checks if c.get("status") == "passed"],
            "failed": [c.get("name") for c in checks if c.get("status") == "failed"],
            "skipped": [c.get("name") for c in checks if c.get("status") == "skipped"],
            "checks": checks,
        }
    if nodes:
        return {"ran": True, "reason": "", "nodes": nodes}
    skip_tags = str((report_data.get("options") or {}).get("skip_tags") or "")
    if "gpu_acceptance" in [t.strip() for t in skip_tags.split(",")]:
        reason = "not run: gpubring verify ran without --acceptance"
    else:
        reason = (
            "no node published gpu_acceptance_result: the play reached no GPU node (see the run's failures)"
        )
    return {"ran": False, "reason": reason, "nodes": {}}


def _kubernetes(matrix: Sequence[Mapping[str, Any]]) -> str:
    for row in matrix:
        if row.get("path") == "kubernetes.version":
            return str(row.get("version") or "")
    return ""


def build(report_data: Mapping[str, Any], matrix: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The conformance document of a run.

    report_data: the run report (gpubring.report's fields: command, status, exit_code, run_folder,
    started, ended, failures, options, gpubring_version, ...) with `verify_results` ({host: fact}) and
    `gpu_acceptance` ({host: gpu_acceptance_result}). matrix: the effective version matrix as rows
    {path, version, overridden, pinned} (`gpubring versions --json`'s `matrix`)."""
    cluster, checks = _checks_by_name(report_data.get("verify_results") or {})
    ran = bool(checks)
    kubernetes = _kubernetes(matrix)
    checklist, notes = checklist_for(kubernetes)
    requirements = [_requirement(req, checks, ran) for req in checklist.requirements]
    summary = {status: sum(1 for r in requirements if r["status"] == status) for status in STATUSES}
    return {
        "schema": SCHEMA,
        "checklist": checklist.describe(),
        "gpubring_version": report_data.get("gpubring_version"),
        "run": {
            key: report_data.get(key)
            for key in (
                "command",
                "inventory",
                "run_folder",
                "started",
                "ended",
                "status",
                "exit_code",
                "partial",
            )
        }
        | {"failures": list(report_data.get("failures") or [])},
        "cluster": cluster or None,
        "summary": summary,
        "requirements": requirements,
        "acceptance": _acceptance(report_data),
        "kubernetes": kubernetes,
        "versions": [
            {
                "path": str(row.get("path")),
                "version": row.get("version"),
                "overridden": bool(row.get("overridden")),
                "pinned": row.get("pinned"),
            }
            for row in matrix
        ],
        "notes": notes,
    }


# --- Markdown ---------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split()) or "—"


def _block(value: Any) -> list[str]:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    fence = "```"
    while fence in text:
        fence += "`"
    return [f"{fence}json", text, fence]


_SHOWN = {PASSED: "passed", FAILED: "FAILED", NOT_RUN: "not run", NOT_COVERED: "not covered"}


def to_markdown(doc: Mapping[str, Any]) -> str:
    """The document as Markdown: the requirement table, each requirement's checks with their raw
    output, the acceptance verdict of every node and the version matrix."""
    checklist = doc["checklist"]
    run = doc.get("run") or {}
    summary = doc.get("summary") or {}
    lines = [
        f"# {checklist['name']} evidence",
        "",
        f"Checklist {checklist['version']}: <{checklist['source']}>. Generated by gpubring "
        f"{doc.get('gpubring_version') or ''} from the run `{run.get('run_folder') or ''}` "
        f"({run.get('command') or ''}, status {run.get('status') or ''}, exit code {run.get('exit_code')}, "
        f"ended {run.get('ended') or ''}).",
        "",
        "Summary: " + ", ".join(f"{summary.get(s, 0)} {_SHOWN[s]}" for s in STATUSES) + ".",
    ]
    for note in doc.get("notes") or []:
        lines += ["", f"Note: {note}."]
    cluster = doc.get("cluster") or {}
    if cluster:
        lines += [
            "",
            f"Smoke tests run from {_cell(cluster.get('control_plane'))} on the GPU nodes "
            f"{_cell(', '.join(cluster.get('tested_nodes') or []))} (DRA nodes: "
            f"{_cell(', '.join(cluster.get('dra_nodes') or []))}).",
        ]
    lines += [
        "",
        "## Requirements",
        "",
        "| Requirement | ID | Level | Result | Check | Why |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for req in doc["requirements"]:
        lines.append(
            f"| {_cell(req['category'] + ': ' + req['title'])} | `{req['id']}` | {req['level']} | "
            f"{_SHOWN[req['status']]} | {_cell(req['proof'])} | {_cell(req['reason'])} |"
        )
    for req in doc["requirements"]:
        lines += ["", f"### {req['title']} (`{req['id']}`): {_SHOWN[req['status']]}"]
        if req["reason"]:
            lines += ["", str(req["reason"])]
        if not req["checks"]:
            continue
        lines += ["", "| Check | Result | Expected | Reason |", "| --- | --- | --- | --- |"]
        for check in req["checks"]:
            expected, reason = _cell(check["expected"]), _cell(check["reason"])
            lines.append(f"| `{check['name']}` | {check['status']} | {expected} | {reason} |")
        for check in req["checks"]:
            if check["output"] is not None:
                lines += ["", f"Output of `{check['name']}`:", "", *_block(check["output"])]
    acceptance = doc.get("acceptance") or {}
    lines += ["", "## Node acceptance (gpu_acceptance)", ""]
    if not acceptance.get("ran"):
        lines.append(str(acceptance.get("reason") or "not run"))
    else:
        lines += ["| Node | Verdict | Failed | Skipped | Passed |", "| --- | --- | --- | --- | --- |"]
        for host, node in acceptance["nodes"].items():
            failed, skipped, passed = (
                _cell(", ".join(map(str, node[k]))) for k in ("failed", "skipped", "passed")
            )
            lines.append(f"| {_cell(host)} | {_cell(node['verdict'])} | {failed} | {skipped} | {passed} |")
        for host, node in acceptance["nodes"].items():
            lines += [
                "",
                f"### {host}: {node['verdict']}",
                "",
                "| Check | Result | Reason |",
                "| --- | --- | --- |",
            ]
            lines += [
                f"| `{c.get('name')}` | {c.get('status')} | {_cell(c.get('reason'))} |"
                for c in node["checks"]
            ]
    lines += ["", "## Version matrix", ""]
    if not doc.get("versions"):
        lines.append("No version matrix.")
    else:
        lines += ["| Component | Version | Pinned | Overridden |", "| --- | --- | --- | --- |"]
        lines += [
            f"| `{row['path']}` | {_cell(row['version'])} | {_cell(row['pinned'])} | "
            f"{'yes' if row['overridden'] else 'no'} |"
            for row in doc["versions"]
        ]
    failures = run.get("failures") or []
    if failures:
        lines += ["", "## Failures of the run", ""]
        lines += [
            f"- {_cell(f.get('host'))}, {_cell(f.get('task'))}: {_cell(f.get('message'))}"
            for f in failures
            if isinstance(f, Mapping)
        ]
    return "\n".join(lines) + "\n"
