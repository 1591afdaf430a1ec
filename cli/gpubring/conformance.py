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
EVIDENCE below, by id: the verify checks (roles/verify's verify_results, by the names of
plugins/module_utils/verify_verdicts.py CHECK_NAMES) and the fabric test's verdict (FABRIC_CHECK), or the
justification of not-applicable, or why gpubring does not cover it. A new minor's list is a data change;
a requirement of the data without evidence is refused (ChecklistDataError), and one without a check is
never passed.

A requirement is
- `passed`/`failed`: the checks of roles/verify that prove it ran, with that result;
- `not-run`: gpubring has such a check, but this run did not run it (turned off, no GPU node, an
  earlier failure, check mode, a verify role that does not publish it; the reason says which);
- `not-applicable`: the requirement's own condition does not hold for gpubring (cluster_autoscaling: it
  applies "if the platform provides a cluster autoscaler"; bare metal scales out with `gpubring node
  add`), with the justification;
- `not-covered`: gpubring has no check that proves it, and the row says why.

Each row also carries `timestamp` (when its evidence was taken) and `product`: its status, evidence and
notes in the words of the CNCF submission's product file (conformance_checklists.yml product_statuses);
`product_yaml` writes them as that file (conformance-product.yaml).

Pure but for gpubring's own data and the clock (`now`): `build(report_data, matrix)` takes the run report
(report.json's fields) with the facts the verify roles published (`verify_results`, `gpu_acceptance`,
`fabric_test` and their event times: gpubring.verifyfacts) and the version matrix rows; `to_markdown` and
`product_yaml` render what `build` returns. The only files read are conformance_checklists.yml and, when
the matrix names no Kubernetes version, versions.yml (the pinned minor).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from gpubring import versions, yamlfile

SCHEMA = "gpubring.conformance/v1"
CHECKLIST_NAME = "Kubernetes AI Conformance"
CHECKLISTS_FILE = Path(__file__).with_name("conformance_checklists.yml")

PASSED, FAILED, NOT_RUN = "passed", "failed", "not-run"
NOT_APPLICABLE, NOT_COVERED = "not-applicable", "not-covered"
STATUSES = (PASSED, FAILED, NOT_RUN, NOT_APPLICABLE, NOT_COVERED)

# The check row that carries the NCCL fabric test's verdict (roles/fabric_test tasks/report.yml publishes
# fabric_test_result); every other check name of EVIDENCE is a check of roles/verify's verify_results
# (plugins/module_utils/verify_verdicts.py CHECK_NAMES).
FABRIC_CHECK = "fabric_test"
# The GPU resources that share or partition a GPU, as the GPU Operator's device plugin names them:
# MIG devices (nvidia.com/mig-<profile>) and renamed time-sliced GPUs (nvidia.com/gpu.shared).
SHARED_GPU_RESOURCE = r"^nvidia\.com/(mig-.+|gpu\..+)$"

NO_SMOKE_TESTS = (
    "the cluster smoke tests did not run in this run: verify_cluster false, check mode, no control_plane "
    "group, no admin kubeconfig on the first control plane yet, or the run stopped before them (see the "
    "run's failures)"
)
NO_FABRIC_TEST = (
    "the fabric test did not run in this run (fabric_test_enabled false, or the run stopped before it)"
)


@dataclass(frozen=True)
class Evidence:
    """How gpubring proves one requirement (any checklist that has its id).

    `groups`: alternatives, each a set of verify checks (verify_results.checks[].name) that must all
    pass; the requirement passes when every check of at least one group passed (gang scheduling: one
    scheduler proven both ways). `optional`: checks shown as evidence that fail the requirement when they
    fail. `shared_resource`: a pattern one tested node's GPU resource (gpu_allocatable's output) must
    match for the checks to prove GPU sharing. No group: `not_applicable` (the requirement's condition does
    not hold for gpubring, with the justification) or `not_covered` (why gpubring cannot prove it)."""

    proof: str = "none"
    groups: tuple[tuple[str, ...], ...] = ()
    optional: tuple[str, ...] = ()
    shared_resource: str = ""
    not_applicable: str = ""
    not_covered: str = ""

    @property
    def required(self) -> tuple[str, ...]:
        """Every check of every group, once, in order."""
        return tuple(dict.fromkeys(name for group in self.groups for name in group))

    @property
    def checks(self) -> tuple[str, ...]:
        """Every check the requirement shows: the groups' and the optional ones."""
        return tuple(dict.fromkeys((*self.required, *self.optional)))


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
    metadata: tuple[str, ...]  # the keys of the template's `metadata` (the product file's header)

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
            "roles/verify: the resource.k8s.io/v1 API is served, NVIDIA's DRA driver (gpu.nvidia.com) "
            "publishes each DRA node's GPUs in ResourceSlices, and a ResourceClaim for a GPU is allocated "
            "to a pod"
        ),
        groups=(("dra_resourceslices", "dra_claim_allocated"),),
    ),
    "ai_inference": Evidence(
        proof=(
            "roles/verify: two backends behind a Gateway of the inventory's Gateway API implementation "
            "(ai_inference_enabled); an HTTPRoute splits traffic by weight and another routes on a header"
        ),
        groups=(("inference_gateway_weighted", "inference_gateway_header"),),
    ),
    "gang_scheduling": Evidence(
        proof=(
            "roles/verify: for each enabled gang scheduler (Volcano, Kueue, KAI Scheduler), a gang that fits "
            "starts all its pods together and a gang that cannot fit starts none; one scheduler proven both "
            "ways is enough"
        ),
        groups=(
            ("gang_volcano", "gang_held_volcano"),
            ("gang_kueue", "gang_held_kueue"),
            ("gang_kai", "gang_held_kai"),
        ),
    ),
    # N/A as certified platforms on customer-provided machines report it (Talos Linux, cncf/k8s-ai-conformance
    # v1.34/talos/PRODUCT.md at cc50d533a2ed4e3bc31e8f11f59cc6a7b3c17e76).
    "cluster_autoscaling": Evidence(
        not_applicable=(
            "gpubring builds bare-metal clusters from a fixed inventory of machines and provides no cluster "
            'autoscaler or equivalent mechanism, which the requirement is conditional on ("If the platform '
            'provides a cluster autoscaler or an equivalent mechanism"); the scale-out path is adding a '
            "machine to the inventory and running `gpubring node add`"
        ),
    ),
    "pod_autoscaling": Evidence(
        proof=(
            "roles/verify: metrics.k8s.io serves node and pod metrics (metrics-server), and "
            "custom.metrics.k8s.io returns pod_gpu_utilization (prometheus-adapter over DCGM) for a test pod "
            "that a HorizontalPodAutoscaler reads (currentMetrics set)"
        ),
        groups=(("resource_metrics", "hpa_gpu_metric"),),
    ),
    "accelerator_metrics": Evidence(
        proof=(
            "roles/verify: a DCGM exporter runs on every tested GPU node and answers on :9400/metrics with "
            "DCGM_FI_* samples (the output is their count per node); the GPU metric an HPA reads is shown too"
        ),
        groups=(("dcgm_exporters", "dcgm_metrics"),),
        optional=("hpa_gpu_metric",),
    ),
    "ai_service_metrics": Evidence(
        proof=(
            "roles/verify: a test workload exposes its own metrics behind a ServiceMonitor, and Prometheus "
            "(kube-prometheus-stack) holds that workload's series"
        ),
        groups=(("service_monitor_scrape",),),
    ),
    "secure_accelerator_access": Evidence(
        proof=(
            "roles/verify: a pod without a GPU request sees no /dev/nvidia*, even with "
            "NVIDIA_VISIBLE_DEVICES=all; a one-GPU pod sees exactly one GPU through nvidia-smi, with that "
            "variable too; two one-GPU pods on one node see different GPUs (skipped with time-slicing or "
            "without a node of two GPUs)"
        ),
        groups=(("no_gpu_without_request", "one_gpu_per_pod", "visible_devices_env_ignored"),),
        optional=("distinct_gpus", "pods_running"),
    ),
    "robust_controller": Evidence(
        proof=(
            "roles/verify: the KubeRay operator (kuberay_enabled) runs; its validating webhook rejects an "
            "invalid RayCluster, and an owned object deleted from a RayCluster is recreated by the operator"
        ),
        groups=(("kuberay_webhook_rejects", "kuberay_recreates"),),
    ),
    # SHOULD items of the v1.35 and v1.36 checklists.
    "driver_runtime_management": Evidence(
        proof=(
            "gpubring installs the pinned driver and configures the container runtime (nvidia-container-"
            "toolkit) on every GPU node; roles/verify asserts per host that the loaded driver is the pinned "
            "version (tasks/nvidia_driver.yml: a mismatch fails the run), and the cluster checks prove that "
            "every tested GPU node offers allocatable GPUs and runs a one-GPU pod's nvidia-smi through the "
            "runtime. Driver and runtime versions are not read through DRA"
        ),
        groups=(("gpu_allocatable", "one_gpu_per_pod"),),
        optional=("pods_running",),
    ),
    "gpu_sharing": Evidence(
        proof=(
            "the GPU Operator shares GPUs by time-slicing (gpu_operator_time_slicing_replicas, "
            "gpu_operator_time_slicing_rename: nvidia.com/gpu.shared) or partitions them with MIG "
            "(nvidia.com/mig-*); roles/verify proves a node offers that shared resource as allocatable and "
            "that a pod requesting one of it runs nvidia-smi (the KAR-0003 test)"
        ),
        groups=(("gpu_allocatable", "one_gpu_per_pod"),),
        shared_resource=SHARED_GPU_RESOURCE,
    ),
    "virtualized_accelerator": Evidence(
        not_covered="gpubring sets up no virtualized accelerators (vGPU) and the verify phase tests none",
    ),
    "advanced_inference_ingress": Evidence(
        not_covered=(
            "gpubring installs a Gateway API implementation (ai_inference) but no Gateway API Inference "
            "Extension (InferencePool, endpoint picker), and the verify phase tests no model-aware routing"
        ),
    ),
    "high_performance_networking": Evidence(
        proof=(
            "the Network Operator exposes RDMA devices to pods; roles/verify runs a pod with an RDMA device "
            "on each RDMA node, and the NCCL fabric test (fabric_test_enabled, roles/fabric_test) reports "
            "its all-reduce bandwidth across nodes, with GPUDirect RDMA ([GDRDMA]) when expected"
        ),
        groups=(("rdma_pods",),),
        optional=(FABRIC_CHECK,),
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


def _evidence(rid: str) -> Evidence:
    """The evidence of a requirement id: its checks, or the justification of N/A, or why gpubring does
    not cover it; exactly one of them. A requirement of the data without one is a defect."""
    evidence = EVIDENCE.get(rid)
    if evidence is None:
        raise ChecklistDataError(
            f"{CHECKLISTS_FILE}: requirement {rid} has no evidence in conformance.py EVIDENCE (its checks, "
            "the justification of not-applicable, or why gpubring does not cover it)"
        )
    given = [bool(evidence.groups), bool(evidence.not_applicable.strip()), bool(evidence.not_covered.strip())]
    if sum(given) != 1 or (evidence.groups and not all(evidence.groups)):
        raise ChecklistDataError(
            f"conformance.py EVIDENCE[{rid!r}]: give exactly one of groups (non-empty), not_applicable or "
            "not_covered"
        )
    return evidence


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
                    evidence=_evidence(str(row["id"])),
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
                metadata=tuple(str(key) for key in entry["metadata"]),
            )
    except (yamlfile.YamlError, KeyError, TypeError, AttributeError) as exc:
        raise ChecklistDataError(f"{CHECKLISTS_FILE}: {exc}") from None
    if not out:
        raise ChecklistDataError(f"{CHECKLISTS_FILE}: no checklist")
    return out


PARTIAL = "partial"  # product_statuses' key for a requirement that is proven in part


@cache
def product_statuses() -> dict[str, str]:
    """gpubring's result -> the status word of the CNCF product file (conformance_checklists.yml
    product_statuses), for each of STATUSES and PARTIAL."""
    try:
        data = yamlfile.read(CHECKLISTS_FILE, CHECKLISTS_FILE.name)
        statuses = {str(k): str(v) for k, v in dict(data["product_statuses"]).items()}
    except (yamlfile.YamlError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ChecklistDataError(f"{CHECKLISTS_FILE}: {exc}") from None
    if set(statuses) != {*STATUSES, PARTIAL}:
        raise ChecklistDataError(
            f"{CHECKLISTS_FILE}: product_statuses has {sorted(statuses)}, "
            f"expected {sorted({*STATUSES, PARTIAL})}"
        )
    return statuses


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


def _missing_reason(name: str) -> str:
    return (
        f"this run's verify_results has no check {name}: the verify role of this run does not publish it "
        "(a gpubring older than the check)"
    )


def _check_row(name: str, check: Mapping[str, Any] | None, reason: str) -> dict[str, Any]:
    """One check's row; `reason` says why it is skipped when the run has no such check."""
    if check is None:
        return {"name": name, "status": "skipped", "expected": None, "reason": reason, "output": None}
    return {
        "name": name,
        "status": str(check.get("status", "skipped")),
        "expected": check.get("expected"),
        "reason": check.get("reason") or "",
        "output": check.get("output"),
    }


def _fabric_check(fabric_test: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fabric test's verdict as one check (FABRIC_CHECK): passed, failed, or skipped when it measured
    nothing (skipped-only); its output is what the test published. None: it did not run."""
    for host in sorted(fabric_test):
        fact = fabric_test[host]
        if not isinstance(fact, Mapping):
            continue
        checks = [dict(c) for c in fact.get("checks") or [] if isinstance(c, Mapping)]
        verdict = str(fact.get("verdict") or "")
        status = verdict if verdict in (PASSED, FAILED) else "skipped"
        failed = [c for c in checks if c.get("status") == FAILED]
        skipped = [c for c in checks if c.get("status") == "skipped"]
        reason = "; ".join(
            f"{c.get('name')}: {c.get('reason') or c.get('status')}" for c in failed or skipped
        )
        return {
            "name": FABRIC_CHECK,
            "status": status,
            "expected": "the NCCL all-reduce bus bandwidth of each tested set of nodes reaches its floor",
            "reason": reason if status != PASSED else "",
            "output": {
                "host": host,
                "verdict": verdict,
                "nodes": fact.get("nodes"),
                "gpus_per_node": fact.get("gpus_per_node"),
                "checks": checks,
            },
        }
    return None


def _shared_resources(row: Mapping[str, Any] | None, pattern: str) -> list[str]:
    """The GPU resources matching pattern that gpu_allocatable's output shows a node offering."""
    output = (row or {}).get("output")
    found = []
    for node in output if isinstance(output, list) else []:
        resource = str(node.get("resource") or "") if isinstance(node, Mapping) else ""
        if resource and re.match(pattern, resource) and resource not in found:
            found.append(resource)
    return found


def _judge(req: Evidence, rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """The requirement's status and why, from the rows of its checks."""
    by_name = {r["name"]: r for r in rows}
    failed = [r for r in rows if r["status"] == FAILED]
    if failed:
        return FAILED, "; ".join(f"{r['name']}: {r['reason'] or 'failed'}" for r in failed)
    proven = [g for g in req.groups if all(by_name[name]["status"] == PASSED for name in g)]
    if proven and req.shared_resource:
        shared = _shared_resources(by_name.get("gpu_allocatable"), req.shared_resource)
        if not shared:
            return NOT_RUN, (
                "no tested node offers a shared or partitioned GPU resource (nvidia.com/mig-*, "
                "nvidia.com/gpu.shared): turn on MIG, or time-slicing with gpu_operator_time_slicing_rename, "
                "and run verify again"
            )
    if proven:
        return PASSED, ""
    not_passed = [r for r in rows if r["name"] in req.required and r["status"] != PASSED]
    return NOT_RUN, "; ".join(f"{r['name']}: {r['reason'] or r['status']}" for r in not_passed)


def _requirement(
    req: Requirement, checks: Mapping[str, Mapping[str, Any]], ran: bool, times: Mapping[str, str | None]
) -> dict[str, Any]:
    evidence = req.evidence
    row: dict[str, Any] = {
        "id": req.id,
        "title": req.title,
        "section": req.section,
        "category": req.category,
        "level": req.level,
        "covered": bool(evidence.groups),
        "proof": evidence.proof,
    }
    if evidence.not_applicable:
        return row | {
            "status": NOT_APPLICABLE,
            "reason": f"not applicable to gpubring: {evidence.not_applicable}",
            "checks": [],
            "timestamp": times["generated"],
        }
    if not evidence.groups:
        return row | {
            "status": NOT_COVERED,
            "reason": f"not covered by gpubring: {evidence.not_covered}",
            "checks": [],
            "timestamp": times["generated"],
        }
    rows = []
    for name in evidence.checks:
        if name == FABRIC_CHECK:
            rows.append(_check_row(name, checks.get(name), NO_FABRIC_TEST))
        else:
            reason = _missing_reason(name) if ran else NO_SMOKE_TESTS
            rows.append(_check_row(name, checks.get(name) if ran else None, reason))
    stamp = times["verify_results"]
    if any(r["name"] == FABRIC_CHECK and r["output"] is not None for r in rows):
        stamp = max(filter(None, (stamp, times["fabric_test"])), default=stamp)
    if not ran:
        return row | {"status": NOT_RUN, "reason": NO_SMOKE_TESTS, "checks": rows, "timestamp": stamp}
    status, reason = _judge(evidence, rows)
    return row | {"status": status, "reason": reason, "checks": rows, "timestamp": stamp}


def _product(row: Mapping[str, Any], run_folder: Any) -> dict[str, Any]:
    """The requirement as the CNCF product file states it: `status` (the template's words,
    product_statuses), `evidence` (references to the test results: this document's row and each check
    with its result) and `notes` (what proves it, and why it is not proven; the justification of N/A).
    A requirement not run whose required checks passed in part is Partially Implemented (not GPU
    sharing: its checks prove sharing only on a shared resource); a failed one is Not Implemented."""
    status = str(row["status"])
    proves = EVIDENCE[row["id"]]
    required = [c for c in row["checks"] if c["name"] in proves.required]
    if status == NOT_RUN and not proves.shared_resource and any(c["status"] == PASSED for c in required):
        status = PARTIAL
    evidence: list[str] = []
    if row["checks"]:
        evidence.append(
            f"gpubring verify --report conformance.json, requirement {row['id']}: {row['status']}, "
            f"{row['timestamp']} (run {run_folder})"
        )
        evidence += [
            f"check {c['name']}: {c['status']}" + (f" ({c['reason']})" if c["reason"] else "")
            for c in row["checks"]
        ]
    proof = "" if row["proof"] == "none" else str(row["proof"])
    notes = ". ".join(text for text in (proof, str(row["reason"])) if text)
    return {"status": product_statuses()[status], "evidence": evidence, "notes": notes}


def product_file(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document in the shape of the CNCF submission's product file (cncf/k8s-ai-conformance
    docs/AIConformance-1.NN.yaml, the checklist's own file): `metadata` with the template's keys
    (kubernetesVersion set, the vendor's fields left empty) and `spec`, per section, each requirement's
    id, level, status, evidence and notes. The descriptions stay the template's: a vendor copies status,
    evidence and notes into it."""
    checklist = checklists().get(str(doc["checklist"]["kubernetes"]))
    keys = checklist.metadata if checklist else ("kubernetesVersion",)
    metadata = {key: "" for key in keys} | {"kubernetesVersion": doc["checklist"]["version"]}
    spec: dict[str, list[dict[str, Any]]] = {}
    for row in doc["requirements"]:
        product = row["product"]
        spec.setdefault(row["section"], []).append({"id": row["id"], "level": row["level"], **product})
    return {"metadata": metadata, "spec": spec}


def product_yaml(doc: Mapping[str, Any]) -> str:
    """product_file as YAML, with a header saying where it comes from (conformance-product.yaml)."""
    import yaml

    checklist, run = doc["checklist"], doc.get("run") or {}
    header = [
        f"# {CHECKLIST_NAME} {checklist['version']}: status, evidence and notes per requirement, in the",
        f"# fields of {checklist['repository']} {checklist['path']} ({checklist['source']}).",
        f"# Generated by gpubring {doc.get('gpubring_version') or ''} at {doc.get('generated') or ''}",
        f"# from the run {run.get('run_folder') or ''} (gpubring verify --report;",
        "# conformance.json next to this file has each check's raw output).",
        "# Fill in the metadata; copy status, evidence and notes into the template of this version, which",
        f"# is submitted as {checklist['version']}/<product>/PRODUCT.yaml with conformance.json beside it.",
    ]
    body = yaml.safe_dump(product_file(doc), sort_keys=False, allow_unicode=True, width=100)
    return "\n".join(header) + "\n" + body


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


def _utc(stamp: Any) -> str | None:
    """An ISO time as UTC with its offset; ansible-runner's event `created` is UTC without one."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def build(
    report_data: Mapping[str, Any], matrix: Sequence[Mapping[str, Any]], now: datetime | None = None
) -> dict[str, Any]:
    """The conformance document of a run.

    report_data: the run report (gpubring.report's fields: command, status, exit_code, run_folder,
    started, ended, failures, options, gpubring_version, ...) with `verify_results` ({host: fact}),
    `gpu_acceptance` ({host: gpu_acceptance_result}), `fabric_test` ({host: fabric_test_result}) and
    `facts_published` ({fact: the event's created time}): gpubring.verifyfacts' report_fields. matrix: the
    effective version matrix as rows {path, version, overridden, pinned} (`gpubring versions --json`'s
    `matrix`). now: when the document is made (its `generated`; the time of the rows without a check).

    Each requirement's `timestamp` is when its evidence was taken: the time the verify role published
    verify_results (the fabric test's, when later and shown), else the run's end; for a requirement
    without a check (not-applicable, not-covered), the document's time."""
    cluster, checks = _checks_by_name(report_data.get("verify_results") or {})
    ran = bool(checks)
    fabric = _fabric_check(report_data.get("fabric_test") or {})
    if fabric is not None:
        checks[FABRIC_CHECK] = fabric
    published = report_data.get("facts_published") or {}
    ended = _utc(report_data.get("ended"))
    generated = (now or datetime.now(UTC)).astimezone(UTC).isoformat()
    times = {
        "verify_results": _utc(published.get("verify_results")) or ended,
        "fabric_test": _utc(published.get("fabric_test_result")) or ended,
        "generated": generated,
    }
    kubernetes = _kubernetes(matrix)
    checklist, notes = checklist_for(kubernetes)
    requirements = [_requirement(req, checks, ran, times) for req in checklist.requirements]
    for row in requirements:
        row["product"] = _product(row, report_data.get("run_folder"))
    summary = {status: sum(1 for r in requirements if r["status"] == status) for status in STATUSES}
    return {
        "schema": SCHEMA,
        "checklist": checklist.describe(),
        "gpubring_version": report_data.get("gpubring_version"),
        "generated": generated,
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


_SHOWN = {
    PASSED: "passed",
    FAILED: "FAILED",
    NOT_RUN: "not run",
    NOT_APPLICABLE: "not applicable",
    NOT_COVERED: "not covered",
}


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
        "",
        f"Generated {doc.get('generated') or ''}. conformance-product.yaml next to this file holds each "
        "requirement's status, evidence and notes in the fields of the CNCF submission's product file.",
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
        "| Requirement | ID | Level | Result | Product file status | Checks | Evidence taken | Why |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for req in doc["requirements"]:
        names = ", ".join(f"`{c['name']}`" for c in req["checks"])
        lines.append(
            f"| {_cell(req['category'] + ': ' + req['title'])} | `{req['id']}` | {req['level']} | "
            f"{_SHOWN[req['status']]} | {_cell(req['product']['status'])} | {_cell(names)} | "
            f"{_cell(req['timestamp'])} | {_cell(req['reason'])} |"
        )
    for req in doc["requirements"]:
        lines += ["", f"### {req['title']} (`{req['id']}`): {_SHOWN[req['status']]}"]
        if req["proof"] != "none":
            lines += ["", f"Proof: {req['proof']}."]
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
