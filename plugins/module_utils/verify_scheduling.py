# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Verdicts of the verify role's gang-scheduling, DRA-claim and secure-access smoke tests.

scheduling_checks(gathered, settings) -> the checks, in the order of NAMES, each as verify_verdicts'
checks are: {name, expected, output, status (passed | failed | skipped), reason}. verify_verdicts
lists NAMES in its CHECK_NAMES and these checks in verify_checks.

gathered (by variable name, None where the test was not reached):
  __verify_pod_objects, __verify_seen          the smoke-test pods (cluster_pods.yml): what each saw
  __verify_dra_nodes, __verify_dra_slices,     the DRA nodes, their ResourceSlices, the test's
  __verify_dra_claim, __verify_dra_pod         ResourceClaim and its pod (cluster_dra.yml)
  __verify_held_<volcano|kueue|kai>            the pods of each gang that cannot fit, after the bounded
                                               wait (k8s_info with until, cluster_gang.yml)
  __verify_kai_job                             the KAI gang Job that fits
  __verify_plan                                the plan, which sizes the gang that cannot fit (held_gang)
settings: verify_gang_volcano, verify_gang_kueue, verify_gang_kai, verify_gang_size,
verify_gang_held_seconds, verify_kai_queue, verify_dra,
verify_dra_group, verify_dra_driver_name, verify_dra_device_class.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

NAMES = (
    "visible_devices_env_ignored",
    "dra_claim_allocated",
    "gang_held_volcano",
    "gang_held_kueue",
    "gang_kai",
    "gang_held_kai",
)

_SCHEDULERS = {
    "volcano": ("Volcano", "schedulers_volcano_enabled"),
    "kueue": ("Kueue", "schedulers_kueue_enabled"),
    "kai": ("KAI", "schedulers_kai_enabled"),
}
_STARTED = ("Running", "Succeeded")


def held_gang(plan: Any) -> dict[str, Any]:
    """The gang that cannot fit, from the plan's allocatable (__verify_plan: [{node, resource,
    allocatable, rdma}]): the GPU resource of the node with the most allocatable (A), more than half of A
    per pod (A // 2 + 1), pinned to the nodes that offer that resource, one pod more than there are such
    nodes. No node can hold two of its pods, so never all of them run; yet one pod alone fits a node
    beside the smoke-test pods (one or two GPUs each node): a scheduler without gangs would start some,
    which is what the test tells apart. Without a device-plugin GPU node: nodes empty (no such gang)."""
    offered = [p for p in plan or [] if isinstance(p, Mapping) and p.get("resource")]
    if not offered:
        return {"resource": "", "gpus": 0, "nodes": [], "pods": 0}
    top = max(offered, key=lambda p: _v()._int(p.get("allocatable")))
    nodes = [str(p.get("node")) for p in offered if p.get("resource") == top["resource"]]
    return {"resource": top["resource"], "gpus": _v()._int(top.get("allocatable")) // 2 + 1, "nodes": nodes,
            "pods": len(nodes) + 1}  # fmt: skip


def _v() -> Any:
    # verify_verdicts imports this module: its helpers are read at call time.
    from ansible_collections.gpubring.core.plugins.module_utils import verify_verdicts

    return verify_verdicts


def _visible_all(gathered: Mapping[str, Any]) -> dict[str, Any]:
    """A pod without a GPU request and with NVIDIA_VISIBLE_DEVICES=all sees no /dev/nvidia* and no
    GPU in nvidia-smi; a one-GPU pod with it (verify-gpu-*) sees exactly one."""
    V = _v()
    objects, seen_raw = gathered.get("__verify_pod_objects"), gathered.get("__verify_seen")
    seen = list((seen_raw or {}).items())
    no_gpu = [(k, v) for k, v in seen if re.match("verify-env-no-gpu-", k)]
    one_gpu = [(k, v) for k, v in seen if re.match("verify-gpu-", k)]
    pods_skip = V.STOPPED if objects is None or len(objects) > 0 else V.NO_GPU_NODE
    bad = [
        k
        for k, v in no_gpu
        if V._get(v, "rc") != 0 or V._get(v, "nvidia_devices") != [] or V._get(v, "uuid_count") != 0
    ]
    bad += [k for k, v in one_gpu if V._get(v, "rc") != 0 or V._get(v, "uuid_count") != 1]
    output = {
        k: {"node": V._get(v, "node", None), "rc": V._get(v, "rc", None),
            "nvidia_devices": V._get(v, "nvidia_devices", None), "uuids": V._get(v, "uuids", None)}
        for k, v in no_gpu + one_gpu
    } if seen_raw is not None else None  # fmt: skip
    if objects is None or seen_raw is None:
        status, reason = "skipped", pods_skip
    elif not no_gpu:
        status = "skipped"
        reason = (
            V.NO_GPU_NODE
            if not objects
            else "no pod with NVIDIA_VISIBLE_DEVICES=all ran (pods of an older role)"
        )
    elif bad:
        status, reason = "failed", "sees GPUs it did not ask for or failed: " + V._join(bad)
    else:
        status, reason = "passed", ""
    expected = (
        "with NVIDIA_VISIBLE_DEVICES=all, a pod without a GPU request sees no /dev/nvidia* and no GPU in"
        " nvidia-smi, a one-GPU pod sees exactly one"
    )
    return V._check("visible_devices_env_ignored", expected, output, status, reason)


def _first(result: Any) -> Any:
    resources = _v()._get(result, "resources", None) or [{}]
    return resources[0]


def _dra_claim(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The claim's status.allocation names a device that a ResourceSlice of a DRA node publishes
    (driver, pool, device), and the pod that uses the claim runs."""
    V = _v()
    driver = settings.get("verify_dra_driver_name")
    dra_nodes = gathered.get("__verify_dra_nodes")
    claim, pod, slices = (
        gathered.get(k) for k in ("__verify_dra_claim", "__verify_dra_pod", "__verify_dra_slices")
    )
    published = {
        (V._get(s, "spec.driver", None), V._get(s, "spec.pool.name", None), V._get(d, "name", None)):
            V._get(s, "spec.nodeName", None)
        for r in (V._get(slices, "results", None) or [] if slices is not None else [])
        for s in V._get(r, "resources", None) or []
        for d in V._get(s, "spec.devices", None) or []
    }  # fmt: skip
    ran = claim is not None and not V._skipped(claim)
    allocated = V._get(_first(claim), "status.allocation.devices.results", None) or [] if ran else []
    devices = [
        {
            "driver": V._get(a, "driver", None),
            "pool": V._get(a, "pool", None),
            "device": V._get(a, "device", None),
        }
        for a in allocated
    ]
    on_nodes = [published.get((d["driver"], d["pool"], d["device"])) for d in devices]
    phase = V._get(_first(pod), "status.phase", None) if pod is not None and not V._skipped(pod) else None
    output = {"devices": devices, "nodes": on_nodes, "pod": phase} if ran else None
    if not V._bool(settings.get("verify_dra")):
        status, reason = "skipped", "DRA is off (dra_driver_enabled)"
    elif dra_nodes is None or (claim is None and dra_nodes):
        status, reason = "skipped", V.STOPPED
    elif not dra_nodes or not ran:
        status, reason = "skipped", f"no DRA node ({settings.get('verify_dra_group')}) in this run"
    elif not devices:
        status, reason = "failed", "the claim has no allocated device"
    elif any(d["driver"] != driver for d in devices):
        status, reason = "failed", "allocated by another driver: " + V._join([d["driver"] for d in devices])
    elif any(node not in dra_nodes for node in on_nodes):
        status = "failed"
        reason = "allocated a device that no ResourceSlice of a DRA node publishes: " + V._join(
            [
                f"{d['pool']}/{d['device']}"
                for d, n in zip(devices, on_nodes, strict=True)
                if n not in dra_nodes
            ]
        )
    elif phase != "Running":
        status, reason = "failed", f"the pod of the claim is {phase or 'not found'}"
    else:
        status, reason = "passed", ""
    expected = (
        f"a resource.k8s.io/v1 ResourceClaim of DeviceClass {settings.get('verify_dra_device_class')} is"
        f" allocated a device of a DRA node ({driver}) and the pod using it runs"
    )
    return V._check("dra_claim_allocated", expected, output, status, reason)


def _held(scheduler: str, gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """After the bounded wait, none of the pods of the gang that cannot fit is Running (or done)."""
    V = _v()
    title, switch = _SCHEDULERS[scheduler]
    pods = gathered.get(f"__verify_held_{scheduler}")
    ran = pods is not None and not V._skipped(pods)
    listed = V._get(pods, "resources", None) or [] if ran else []
    phases = {V._get(p, "metadata.name", None): V._get(p, "status.phase", None) for p in listed}
    started = sorted(name for name, phase in phases.items() if phase in _STARTED)
    gang = held_gang(gathered.get("__verify_plan"))
    size = gang["pods"]
    output = {"pods": phases, "attempts": V._get(pods, "attempts", None), "gang": size} if ran else None
    if not V._bool(settings.get(f"verify_gang_{scheduler}")):
        status, reason = "skipped", f"{title} is off ({switch})"
    elif pods is None:
        status, reason = "skipped", V.STOPPED
    elif not ran:
        status, reason = "skipped", "no device-plugin GPU node in this run to size a gang that cannot fit"
    elif started:
        status, reason = "failed", f"started {len(started)} of {size}: " + V._join(started)
    else:
        status, reason = "passed", ""
    expected = (
        f"{title} starts none of the {size} pods of verify-held-{scheduler}, a gang that cannot fit on"
        f" {V._join(gang['nodes'])} ({gang['gpus']} {gang['resource']} per pod),"
        f" for {settings.get('verify_gang_held_seconds')} s"
    )
    return V._check(f"gang_held_{scheduler}", expected, output, status, reason)


def _kai(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    V = _v()
    size = settings.get("verify_gang_size")
    job = gathered.get("__verify_kai_job")
    resource = _first(job) if job is not None and not V._skipped(job) else {}
    ready = V._get(resource, "status.ready", 0)
    output = (
        {"ready": ready, "parallelism": V._int(size), "queue": settings.get("verify_kai_queue")}
        if resource
        else None
    )
    if not V._bool(settings.get("verify_gang_kai")):
        status, reason = "skipped", "KAI is off (schedulers_kai_enabled)"
    elif job is None:
        status, reason = "skipped", V.STOPPED
    elif V._int(ready) >= V._int(size):
        status, reason = "passed", ""
    else:
        status, reason = "failed", f"ready {ready} of {size}"
    expected = f"KAI starts the {size} pods of verify-gang-kai (batch-min-member {size}) together"
    return V._check("gang_kai", expected, output, status, reason)


def scheduling_checks(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The checks of NAMES, in that order."""
    return [
        _visible_all(gathered),
        _dra_claim(gathered, settings),
        _held("volcano", gathered, settings),
        _held("kueue", gathered, settings),
        _kai(gathered, settings),
        _held("kai", gathered, settings),
    ]
