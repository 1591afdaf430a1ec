"""The admission gate (issue 14.3): a GPU node joins tainted gpubring.io/acceptance=pending
(kubeadm_join, tests/test_cluster_render.py); gpu_acceptance then removes the taint, replaces it by
=failed or keeps it pending, as module_utils/gpu_expect.admission decides from the verdict, and writes
the verdict and reasons in the node annotation. The operators' daemonsets and the smoke tests tolerate
it, so a node not yet accepted still gets its device plugin; a workload does not.

The API calls themselves (roles/gpu_acceptance/tasks/gate.yml) need a cluster: molecule/gpu_acceptance
proves the role says `no-cluster` where there is none.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from _render import planned_releases
from gpubring.inventory import load_inventory
from gpubring.releases import plan_releases
from helpers import DATA, REPO, module_utils

E = module_utils("gpu_expect")
KEY = "gpubring.io/acceptance"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PENDING = {"key": KEY, "value": "pending", "effect": "NoSchedule"}


def result(*checks: tuple[str, str, str]) -> dict[str, Any]:
    built = [E.check(name, status, None, None, reason) for name, status, reason in checks]
    return {"verdict": E.verdict(built), "checks": built}


def test_a_passed_node_loses_the_taint_and_keeps_its_others() -> None:
    gate = E.admission(
        result(("gpu_health", "passed", ""), ("dcgm_diag", "skipped", "dcgmi not installed")),
        [GPU_TAINT, PENDING],
        KEY,
        "2026-11-26T09:00:00Z",
    )
    assert gate == {
        "state": "accepted",
        "taints": [GPU_TAINT],
        "annotation": "passed at 2026-11-26T09:00:00Z",
    }


def test_a_failed_node_is_tainted_failed_with_the_reasons() -> None:
    gate = E.admission(
        result(("nvlink", "failed", "GPU 3: 2 of 18 links down"), ("gpu_xid", "failed", "Xid 79 on GPU 5")),
        [PENDING, GPU_TAINT],
        KEY,
    )
    assert gate["state"] == "failed"
    assert gate["taints"] == [GPU_TAINT, {"key": KEY, "value": "failed", "effect": "NoSchedule"}]
    assert gate["annotation"] == "failed: nvlink: GPU 3: 2 of 18 links down; gpu_xid: Xid 79 on GPU 5"


def test_an_accepted_node_that_fails_later_is_tainted_again() -> None:
    """gpubring verify --acceptance on a node in service: no taint before, failed after."""
    gate = E.admission(result(("nic_link", "failed", "mlx5_3 at 200 Gb/s, expected 400")), [GPU_TAINT], KEY)
    assert gate["taints"] == [GPU_TAINT, {"key": KEY, "value": "failed", "effect": "NoSchedule"}]


def test_nothing_measured_keeps_the_node_pending_and_says_what_was_skipped() -> None:
    gate = E.admission(
        result(("gpu_health", "skipped", "nvidia-smi not installed"), ("nvlink", "skipped", "no GPU")),
        [],
        KEY,
    )
    assert gate["state"] == "pending"
    assert gate["taints"] == [PENDING]
    assert gate["annotation"] == "skipped-only: gpu_health: nvidia-smi not installed; nvlink: no GPU"


def test_the_annotation_is_cut_to_its_limit() -> None:
    many = [(f"check{i}", "failed", "x" * 200) for i in range(20)]
    gate = E.admission(result(*many), [], KEY)
    assert len(gate["annotation"]) == E.ANNOTATION_LIMIT
    assert gate["annotation"].endswith("...")


@pytest.mark.parametrize("inventory", ["prod", "all-on"])
def test_the_operators_daemonsets_tolerate_the_admission_taint(inventory: str) -> None:
    root = REPO / "inventories" / "prod" if inventory == "prod" else DATA / "inventories" / inventory
    releases = {r.name: r for r in planned_releases(load_inventory(root))}
    wanted = {"key": KEY, "operator": "Exists", "effect": "NoSchedule"}
    gpu = releases["gpu-operator"].values
    assert wanted in gpu["daemonsets"]["tolerations"]
    assert wanted in gpu["node-feature-discovery"]["worker"]["tolerations"]
    # The chart's own tolerations stay (values.yaml at v25.10.0).
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in gpu["daemonsets"][
        "tolerations"
    ]
    if "network-operator" in releases:
        (policy,) = [o for o in releases["network-operator"].manifests if o["kind"] == "NicClusterPolicy"]
        assert wanted in policy["spec"]["tolerations"]
    if "nvidia-dra-driver-gpu" in releases:
        assert wanted in releases["nvidia-dra-driver-gpu"].values["kubeletPlugin"]["tolerations"]


def test_without_the_gate_nothing_tolerates_it(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    shutil.copytree(
        REPO / "inventories" / "prod", root, ignore=shutil.ignore_patterns(".gpubring", "README.md")
    )
    (root / "group_vars" / "all" / "zz-gate.yml").write_text("---\ngpubring_acceptance_gate: false\n")
    releases = {r.name: r for r in plan_releases(load_inventory(root))}
    keys = {t["key"] for t in releases["gpu-operator"].values["daemonsets"]["tolerations"]}
    assert keys == {"nvidia.com/gpu"}
