"""Conformance evidence: each CNCF Kubernetes AI Conformance requirement, the gpubring check that
proves it on this cluster, its result and what it read (`gpubring verify --report DIR`).

The requirements are those of the Kubernetes AI Conformance checklist for Kubernetes v1.34
(cncf/k8s-ai-conformance, docs/AIConformance-1.34.md, generated from AIConformance-1.34.yaml, at
commit c20ddff5884bfc01ddf9878e90ad0149038a8868): nine requirements, all MUST, with the ids below.
gpubring pins Kubernetes 1.34 (versions.yml). The titles are the checklist's; the descriptions of
what each asks are not copied here: read the checklist. A later checklist (v1.35) adds SHOULD items
(driver runtime management, GPU sharing, virtualized accelerator) and turns no MUST item here into
something else.

A requirement is
- `passed`/`failed`: the checks of roles/verify that prove it ran, with that result;
- `not-run`: gpubring has such a check, but this run did not run it (turned off, no GPU node, an
  earlier failure, check mode; the reason says which);
- `not-covered`: gpubring has no check that proves it, and the row says why.

Pure: `build(report_data, matrix)` takes the run report (report.json's fields) with the facts the
verify roles published (`verify_results`, `gpu_acceptance`: gpubring.verifyfacts) and the version
matrix rows; `to_markdown` renders what `build` returns. Nothing here reads files or prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA = "gpubring.conformance/v1"
CHECKLIST = {
    "name": "Kubernetes AI Conformance",
    "version": "v1.34",
    "source": (
        "https://github.com/cncf/k8s-ai-conformance/blob/c20ddff5884bfc01ddf9878e90ad0149038a8868/"
        "docs/AIConformance-1.34.md"
    ),
}
CHECKLIST_KUBERNETES = "1.34"

PASSED, FAILED, NOT_RUN, NOT_COVERED = "passed", "failed", "not-run", "not-covered"
STATUSES = (PASSED, FAILED, NOT_RUN, NOT_COVERED)

NO_SMOKE_TESTS = (
    "the cluster smoke tests did not run in this run: verify_cluster false, check mode, no control_plane "
    "group, no admin kubeconfig on the first control plane yet, or the run stopped before them (see the "
    "run's failures)"
)


@dataclass(frozen=True)
class Requirement:
    """One checklist requirement and how gpubring proves it.

    `required`: the verify checks (verify_results.checks[].name) that must pass, all of them or, with
    any_of, at least one; `optional`: checks shown as evidence that fail the requirement when they
    fail. No check at all: not covered, for the reason in `not_covered`."""

    id: str
    title: str
    category: str
    level: str
    proof: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    any_of: bool = False
    not_covered: str = ""


REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement(
        id="dra_support",
        title="DRA Support",
        category="Accelerators",
        level="MUST",
        proof=(
            "roles/verify tasks/cluster_dra.yml: the resource.k8s.io/v1 API is served and NVIDIA's DRA "
            "driver (gpu.nvidia.com) publishes each DRA node's GPUs as devices in ResourceSlices"
        ),
        required=("dra_resourceslices",),
    ),
    Requirement(
        id="ai_inference",
        title="AI Inference",
        category="Networking",
        level="MUST",
        proof="none",
        not_covered=(
            "gpubring installs no Gateway API implementation (no Gateway API CRDs, no gateway controller, no "
            "inference extension) and the verify phase tests no Gateway or HTTPRoute: install one and prove "
            "it with its own tests"
        ),
    ),
    Requirement(
        id="gang_scheduling",
        title="Gang Scheduling",
        category="Scheduling & Orchestration",
        level="MUST",
        proof=(
            "roles/verify tasks/cluster_gang.yml: a 3-pod job runs all together under Volcano (minAvailable) "
            "and/or is admitted as one workload by Kueue, whichever the platform runs (KAI Scheduler has no "
            "gang test)"
        ),
        required=("gang_volcano", "gang_kueue"),
        any_of=True,
    ),
    Requirement(
        id="cluster_autoscaling",
        title="Cluster Autoscaling",
        category="Scheduling & Orchestration",
        level="MUST",
        proof="none",
        not_covered=(
            "gpubring builds bare-metal clusters from a fixed inventory and installs no cluster autoscaler: "
            "nodes are added with `gpubring node add`; the requirement is conditional on the platform "
            "providing an autoscaler"
        ),
    ),
    Requirement(
        id="pod_autoscaling",
        title="Pod Autoscaling",
        category="Scheduling & Orchestration",
        level="MUST",
        proof="none",
        not_covered=(
            "the monitoring role installs prometheus-adapter with the custom metric pod_gpu_utilization "
            "(monitoring_enabled, monitoring_adapter), but the verify phase neither queries "
            "custom.metrics.k8s.io nor scales a HorizontalPodAutoscaler on it"
        ),
    ),
    Requirement(
        id="accelerator_metrics",
        title="Accelerator Metrics",
        category="Observability",
        level="MUST",
        proof=(
            "roles/verify tasks/cluster_dcgm.yml: a DCGM exporter runs on every tested GPU node and "
            "answers on :9400/metrics with DCGM_FI_* samples (the output is their count per node)"
        ),
        required=("dcgm_exporters", "dcgm_metrics"),
    ),
    Requirement(
        id="ai_service_metrics",
        title="AI Service Metrics",
        category="Observability",
        level="MUST",
        proof="none",
        not_covered=(
            "the monitoring role installs kube-prometheus-stack, whose Prometheus selects every "
            "ServiceMonitor (monitoring_enabled), but the verify phase does not check that a workload's "
            "metrics are discovered and scraped"
        ),
    ),
    Requirement(
        id="secure_accelerator_access",
        title="Secure Accelerator Access",
        category="Security",
        level="MUST",
        proof=(
            "roles/verify tasks/cluster_pods.yml: a pod without a GPU request sees no /dev/nvidia*, a "
            "one-GPU pod sees exactly one GPU through nvidia-smi, two one-GPU pods on one node see "
            "different GPUs (skipped with time-slicing or without a node of two GPUs)"
        ),
        required=("no_gpu_without_request", "one_gpu_per_pod"),
        optional=("distinct_gpus", "pods_running"),
    ),
    Requirement(
        id="robust_controller",
        title="Robust Controller",
        category="Operator Support",
        level="MUST",
        proof="none",
        not_covered=(
            "the verify phase does not read the operators' state: `gpubring up`'s platform phase waits for "
            "the GPU Operator's ClusterPolicy and the Network Operator's NicClusterPolicy to report state "
            "ready (roles/helm tasks/ready.yml) and fails otherwise, but that is not re-checked here, and no "
            "webhook or reconcile test of an AI operator (Ray, Kubeflow) runs"
        ),
    ),
)


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


def _judge(req: Requirement, rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
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
    row: dict[str, Any] = {
        "id": req.id,
        "title": req.title,
        "category": req.category,
        "level": req.level,
        "covered": bool(req.required),
        "proof": req.proof,
    }
    if not req.required:
        return row | {
            "status": NOT_COVERED,
            "reason": f"not covered by gpubring: {req.not_covered}",
            "checks": [],
        }
    rows = [_check_row(name, checks.get(name) if ran else None) for name in (*req.required, *req.optional)]
    if not ran:
        return row | {"status": NOT_RUN, "reason": NO_SMOKE_TESTS, "checks": rows}
    status, reason = _judge(req, rows)
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
    requirements = [_requirement(req, checks, ran) for req in REQUIREMENTS]
    summary = {status: sum(1 for r in requirements if r["status"] == status) for status in STATUSES}
    kubernetes = _kubernetes(matrix)
    notes: list[str] = []
    if kubernetes and not (
        kubernetes == CHECKLIST_KUBERNETES or kubernetes.startswith(CHECKLIST_KUBERNETES + ".")
    ):
        notes.append(
            f"this cluster runs Kubernetes {kubernetes}; the requirements are those of the "
            f"{CHECKLIST['version']} checklist"
        )
    return {
        "schema": SCHEMA,
        "checklist": dict(CHECKLIST),
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
