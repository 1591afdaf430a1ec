"""Verdicts of the gang, DRA-claim and secure-access smoke tests (plugins/module_utils/verify_scheduling.py),
on recorded outputs: what k8s_info and k8s_exec register for each test (the shapes of
tests/fixtures/conformance/registered.yml), in passing and failing variants.

- gang_held_<scheduler>: after the bounded wait, no pod of the gang that cannot fit runs; one Running
  (or Succeeded) pod fails it; no device-plugin node (the watch skipped) or the scheduler off skips it.
- gang_kai: the KAI Job reports all its pods ready.
- dra_claim_allocated: the claim's allocation names a device that a ResourceSlice of a DRA node
  publishes, and the claim's pod runs.
- visible_devices_env_ignored: NVIDIA_VISIBLE_DEVICES=all gives a pod without a GPU request no device
  and no GPU, and a one-GPU pod exactly one.
- held_gang: the gang that cannot fit, sized from the plan (the filter gpubring.core.verify_held_gang
  the templates read).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from helpers import collection_module, module_utils

S = module_utils("verify_scheduling")
V = module_utils("verify_verdicts")

PLAN = [
    {"node": "gpu-01", "resource": "nvidia.com/gpu", "allocatable": 8, "rdma": True},
    {"node": "gpu-02", "resource": "nvidia.com/gpu", "allocatable": 4, "rdma": False},
]
SETTINGS: dict[str, Any] = {
    "verify_gang_volcano": True,
    "verify_gang_kueue": True,
    "verify_gang_kai": True,
    "verify_gang_size": 3,
    "verify_gang_held_seconds": 60,
    "verify_kai_queue": "default-queue",
    "verify_dra": True,
    "verify_dra_group": "gpu_dra",
    "verify_dra_driver_name": "gpu.nvidia.com",
    "verify_dra_device_class": "gpu.nvidia.com",
}
_UNPUBLISHED = "allocated a device that no ResourceSlice of a DRA node publishes"
_SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def pods(*phases: str, test: str = "held-volcano") -> dict[str, Any]:
    return {
        "attempts": 13,
        "failed": False,
        "resources": [
            {"metadata": {"name": f"verify-{test}-worker-{n}"}, "status": {"phase": phase}}
            for n, phase in enumerate(phases)
        ],
    }


def slices() -> dict[str, Any]:
    """ResourceSlices of the DRA node gpu-03 (cluster_dra.yml, looped over the DRA nodes)."""
    spec = {
        "driver": "gpu.nvidia.com",
        "nodeName": "gpu-03",
        "pool": {"name": "gpu-03", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
    }
    return {"results": [{"item": "gpu-03", "resources": [{"spec": spec}]}]}


def allocated(pool: str = "gpu-03", device: str = "gpu-1", driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    result = {"request": "gpu", "driver": driver, "pool": pool, "device": device}
    return {"resources": [{"status": {"allocation": {"devices": {"results": [result]}}}}]}


def seen(**changes: Any) -> dict[str, Any]:
    """What the pods saw (cluster_pods.yml's __verify_seen) on one node, all as they should."""
    data = {
        "verify-no-gpu-1": {"node": "gpu-01", "rc": 0, "nvidia_devices": [], "uuids": [], "uuid_count": 0},
        "verify-env-no-gpu-1": {
            "node": "gpu-01", "rc": 0, "nvidia_devices": [], "uuids": [], "uuid_count": 0,
            "output": "null\nshm\nsh: 1: nvidia-smi: not found",
        },
        "verify-gpu-rdma-1": {
            "node": "gpu-01", "rc": 0, "nvidia_devices": [], "uuids": ["GPU-a"], "uuid_count": 1,
        },
    }  # fmt: skip
    for name, values in changes.items():
        data[name.replace("_", "-")].update(values)
    return data


def passing() -> dict[str, Any]:
    return {
        "__verify_plan": copy.deepcopy(PLAN),
        "__verify_pod_objects": [{"metadata": {"name": name}} for name in seen()],
        "__verify_seen": seen(),
        "__verify_dra_nodes": ["gpu-03"],
        "__verify_dra_slices": slices(),
        "__verify_dra_claim": allocated(),
        "__verify_dra_pod": {"resources": [{"status": {"phase": "Running"}}]},
        "__verify_held_volcano": pods("Pending", "Pending", "Pending"),
        "__verify_held_kueue": pods(test="held-kueue"),  # suspended: Kueue created no pod
        "__verify_held_kai": pods("Pending", "Pending", "Pending", test="held-kai"),
        "__verify_kai_job": {"resources": [{"status": {"ready": 3, "active": 3}}]},
    }


def checks(gathered: dict[str, Any], **settings: Any) -> dict[str, dict[str, Any]]:
    result = S.scheduling_checks(gathered, SETTINGS | settings)
    assert [c["name"] for c in result] == list(S.NAMES)
    return {c["name"]: c for c in result}


def test_the_names_are_verify_checks() -> None:
    names = list(V.CHECK_NAMES)
    assert names[names.index(S.NAMES[0]) : names.index(S.NAMES[0]) + len(S.NAMES)] == list(S.NAMES)


def test_everything_passes() -> None:
    result = checks(passing())
    assert {n: (c["status"], c["reason"]) for n, c in result.items()} == dict.fromkeys(
        S.NAMES, ("passed", "")
    )
    assert result["gang_held_volcano"]["output"] == {
        "pods": {f"verify-held-volcano-worker-{n}": "Pending" for n in range(3)}, "attempts": 13, "gang": 3,
    }  # fmt: skip
    assert result["gang_held_volcano"]["expected"] == (
        "Volcano starts none of the 3 pods of verify-held-volcano, a gang that cannot fit on gpu-01, gpu-02"
        " (5 nvidia.com/gpu per pod), for 60 s"
    )
    assert result["dra_claim_allocated"]["output"] == {
        "devices": [{"driver": "gpu.nvidia.com", "pool": "gpu-03", "device": "gpu-1"}],
        "nodes": ["gpu-03"],
        "pod": "Running",
    }
    assert result["gang_kai"]["output"] == {"ready": 3, "parallelism": 3, "queue": "default-queue"}


@pytest.mark.parametrize("phase", ["Running", "Succeeded"])
def test_a_held_gang_with_one_pod_started_fails(phase: str) -> None:
    data = passing()
    data["__verify_held_volcano"] = pods("Pending", phase, "Pending")
    data["__verify_held_kai"] = pods(phase, phase, "Pending", test="held-kai")
    result = checks(data)
    assert (result["gang_held_volcano"]["status"], result["gang_held_volcano"]["reason"]) == (
        "failed", "started 1 of 3: verify-held-volcano-worker-1",
    )  # fmt: skip
    assert result["gang_held_kai"]["reason"] == (
        "started 2 of 3: verify-held-kai-worker-0, verify-held-kai-worker-1"
    )
    assert result["gang_held_kueue"]["status"] == "passed"


def test_held_gangs_skip_without_a_device_plugin_node_or_their_scheduler() -> None:
    data = passing()
    for scheduler in ("volcano", "kueue", "kai"):
        data[f"__verify_held_{scheduler}"] = dict(_SKIPPED)
    result = checks(data, verify_gang_kueue=False)
    assert result["gang_held_volcano"]["status"] == "skipped"
    assert result["gang_held_volcano"]["reason"] == (
        "no device-plugin GPU node in this run to size a gang that cannot fit"
    )
    assert result["gang_held_kueue"]["reason"] == "Kueue is off (schedulers_kueue_enabled)"
    del data["__verify_held_kai"], data["__verify_kai_job"]
    result = checks(data)
    assert (result["gang_held_kai"]["reason"], result["gang_kai"]["reason"]) == (V.STOPPED, V.STOPPED)
    result = checks(passing(), verify_gang_kai="false")
    assert (
        result["gang_kai"]["reason"]
        == result["gang_held_kai"]["reason"]
        == "KAI is off (schedulers_kai_enabled)"
    )


def test_kai_that_does_not_start_the_whole_gang_fails() -> None:
    data = passing()
    data["__verify_kai_job"] = {"resources": [{"status": {"active": 3}}]}
    result = checks(data)
    assert (result["gang_kai"]["status"], result["gang_kai"]["reason"]) == ("failed", "ready 0 of 3")


@pytest.mark.parametrize(
    ("claim", "pod", "reason"),
    [
        ({"resources": [{"status": {}}]}, "Pending", "the claim has no allocated device"),
        (allocated(pool="gpu-01"), "Running", f"{_UNPUBLISHED}: gpu-01/gpu-1"),
        (allocated(device="gpu-7"), "Running", f"{_UNPUBLISHED}: gpu-03/gpu-7"),
        (allocated(driver="other.example.com"), "Running", "allocated by another driver: other.example.com"),
        (allocated(), "Pending", "the pod of the claim is Pending"),
        ({"resources": []}, None, "the claim has no allocated device"),
    ],
)  # fmt: skip
def test_a_claim_without_a_gpu_of_a_dra_node_or_a_running_pod_fails(
    claim: dict[str, Any], pod: str | None, reason: str
) -> None:
    data = passing()
    data["__verify_dra_claim"] = claim
    data["__verify_dra_pod"] = {"resources": [{"status": {"phase": pod}}] if pod else []}
    result = checks(data)["dra_claim_allocated"]
    assert (result["status"], result["reason"]) == ("failed", reason)


def test_the_dra_claim_is_skipped_when_dra_is_off_or_has_no_node() -> None:
    data = passing()
    assert (
        checks(data, verify_dra=False)["dra_claim_allocated"]["reason"] == "DRA is off (dra_driver_enabled)"
    )
    data.update(__verify_dra_nodes=[], __verify_dra_claim=dict(_SKIPPED), __verify_dra_pod=dict(_SKIPPED))
    result = checks(data)["dra_claim_allocated"]
    assert (result["status"], result["reason"], result["output"]) == (
        "skipped", "no DRA node (gpu_dra) in this run", None,
    )  # fmt: skip
    del data["__verify_dra_claim"]
    data["__verify_dra_nodes"] = ["gpu-03"]
    assert checks(data)["dra_claim_allocated"]["reason"] == V.STOPPED


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"verify_env_no_gpu_1": {"nvidia_devices": ["nvidia0", "nvidiactl"]}}, "verify-env-no-gpu-1"),
        ({"verify_env_no_gpu_1": {"uuids": ["GPU-a"], "uuid_count": 1}}, "verify-env-no-gpu-1"),
        ({"verify_env_no_gpu_1": {"rc": 126}}, "verify-env-no-gpu-1"),
        (
            {"verify_gpu_rdma_1": {"uuids": [f"GPU-{n}" for n in range(8)], "uuid_count": 8}},
            "verify-gpu-rdma-1",
        ),
    ],
)
def test_a_pod_that_gets_gpus_through_the_variable_fails(changes: dict[str, Any], reason: str) -> None:
    data = passing()
    data["__verify_seen"] = seen(**changes)
    result = checks(data)["visible_devices_env_ignored"]
    assert (result["status"], result["reason"]) == (
        "failed",
        "sees GPUs it did not ask for or failed: " + reason,
    )
    # The pod without the variable is not this check's: no_gpu_without_request judges it.
    assert "verify-no-gpu-1" not in result["output"]


def test_visible_devices_skips_where_no_pod_carried_the_variable() -> None:
    data = passing()
    del data["__verify_seen"]["verify-env-no-gpu-1"]
    assert checks(data)["visible_devices_env_ignored"]["reason"] == (
        "no pod with NVIDIA_VISIBLE_DEVICES=all ran (pods of an older role)"
    )
    data.update(__verify_pod_objects=[], __verify_seen=None)
    result = checks(data)["visible_devices_env_ignored"]
    assert (result["status"], result["reason"], result["output"]) == ("skipped", V.NO_GPU_NODE, None)


def test_the_held_gang_is_sized_from_the_plan() -> None:
    # More than half the largest node (8 GPUs): 5 per pod, so gpu-01 holds one and gpu-02 (4) none.
    assert S.held_gang(PLAN) == {
        "resource": "nvidia.com/gpu",
        "gpus": 5,
        "nodes": ["gpu-01", "gpu-02"],
        "pods": 3,
    }
    mixed = [
        *PLAN,
        {"node": "mig-1", "resource": "nvidia.com/mig-1g.10gb", "allocatable": "14", "rdma": False},
    ]
    assert S.held_gang(mixed) == {
        "resource": "nvidia.com/mig-1g.10gb",
        "gpus": 8,
        "nodes": ["mig-1"],
        "pods": 2,
    }
    one = [{"node": "gpu-05", "resource": "nvidia.com/gpu", "allocatable": 1}]
    assert S.held_gang(one) == {"resource": "nvidia.com/gpu", "gpus": 1, "nodes": ["gpu-05"], "pods": 2}
    # A node without allocatable GPUs (resource '') does not count; no such node at all: no gang.
    assert S.held_gang([{"node": "gpu-09", "resource": "", "allocatable": 0}]) == {
        "resource": "", "gpus": 0, "nodes": [], "pods": 0,
    }  # fmt: skip
    assert S.held_gang(None)["nodes"] == []
    filters = collection_module("filter.verify_verdicts").FilterModule().filters()
    assert filters["verify_held_gang"](PLAN) == S.held_gang(PLAN)
    with pytest.raises(Exception, match="must be a list"):
        filters["verify_held_gang"]("gpu-01")
