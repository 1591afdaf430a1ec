# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""The verdicts of the verify role's cluster smoke tests, judged in one place.

verify_checks(gathered, settings) -> [{name, status, expected, output, reason}, ...]

`gathered` holds what the smoke tests registered (roles/verify tasks/cluster_*.yml), by variable
name: __verify_plan, __verify_test_nodes, __verify_pod_objects, __verify_pods_state, __verify_seen,
__verify_exec_rdma, __verify_dra_slices, __verify_volcano_job, __verify_kueue_job,
__verify_dcgm_pods, __verify_dcgm_metrics. A name that is missing or None is a test the run did not
reach (the variable is undefined in the play). `settings` holds the role's inputs the verdicts read
(verify_time_slicing_replicas, verify_dra, verify_dra_group, verify_dra_driver_name,
verify_gang_volcano, verify_gang_kueue, verify_gang_size, verify_kueue_cluster_queue,
verify_dcgm_metrics, verify_dcgm_selector, verify_dcgm_namespace, verify_dcgm_port).

Each check: status passed | failed | skipped, reason why it failed or was skipped ('' when it
passed), output what the test read. The role's asserts fail on these statuses and
tasks/cluster_results.yml publishes them as verify_results; the values are those the Jinja of
cluster_results.yml gave before it moved here (tests/test_verify_verdicts.py compares the two), the
list operations included: `difference` and `intersect` follow ansible-core's filters of the same
name, `flatten` its flatten, `bool` its bool, `int` Jinja's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gpubring.core.plugins.module_utils import (
    verify_autoscaling,
    verify_common,
    verify_controller,
    verify_inference,
    verify_scheduling,
)

STOPPED = verify_common.STOPPED
NO_GPU_NODE = "no GPU node of this run to test"

CHECK_NAMES = (
    "gpu_allocatable",
    "pods_running",
    "no_gpu_without_request",
    "one_gpu_per_pod",
    "distinct_gpus",
    "rdma_pods",
    "dra_resourceslices",
    "gang_volcano",
    "gang_kueue",
    "dcgm_exporters",
    "dcgm_metrics",
    *verify_scheduling.NAMES,
    *verify_autoscaling.NAMES,
    "inference_gateway_weighted",  # plugins/module_utils/verify_inference.py
    "inference_gateway_header",
    "kuberay_webhook_rejects",  # plugins/module_utils/verify_controller.py
    "kuberay_recreates",
)

_MISSING: Any = object()
_TRUE = frozenset({"yes", "on", "1", "true"})


# -- Jinja's and ansible-core's operations, as the Jinja of cluster_results.yml used them ---------


def _get(value: Any, path: str, default: Any = _MISSING) -> Any:
    """`value.a.b`, or default where a step is missing (Jinja's undefined)."""
    for key in path.split("."):
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        else:
            return default
    return value


def _bool(value: Any) -> bool:
    """ansible-core's `bool` filter."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)):
        return str(value).lower() in _TRUE
    return bool(value == 1)


def _int(value: Any) -> int:
    """Jinja's `int` filter."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def _unique(items: Sequence[Any]) -> list[Any]:
    kept: list[Any] = []
    for item in items:
        if item not in kept:
            kept.append(item)
    return kept


def _difference(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """ansible-core's `difference` (a set's order where the items hash, as the filter gives it)."""
    try:
        return list(set(a) - set(b))
    except TypeError:
        return _unique([x for x in a if x not in b])


def _intersect(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """ansible-core's `intersect`."""
    try:
        return list(set(a) & set(b))
    except TypeError:
        return _unique([x for x in a if x in b])


def _flatten(items: Sequence[Any]) -> list[Any]:
    """ansible-core's `flatten` (every level, nulls dropped)."""
    flat: list[Any] = []
    for item in items:
        if item is None or (isinstance(item, str) and item in ("None", "null")):
            continue
        if isinstance(item, Sequence) and not isinstance(item, str):
            flat.extend(_flatten(item))
        else:
            flat.append(item)
    return flat


def _join(items: Sequence[Any], sep: str = ", ") -> str:
    return sep.join(str(item) for item in items)


def _skipped(result: Any) -> bool:
    return isinstance(result, Mapping) and bool(result.get("skipped"))


_check = verify_common.check


def _only(value: Any, keys: Sequence[str]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k in keys} if isinstance(value, Mapping) else {}


def _first_resource(job: Any) -> Any:
    """`job.resources | default([{}], true) | first`."""
    resources = _get(job, "resources", None) or [{}]
    return resources[0]


# -- the checks ---------------------------------------------------------------------------------


def _allocatable(plan: Any) -> dict[str, Any]:
    nodes = plan or []
    missing = [p for p in nodes if _get(p, "resource") == ""]
    if not nodes:
        status = "skipped"
        reason = STOPPED if plan is None else "no device-plugin GPU node in this run"
    elif missing:
        status, reason = "failed", "no allocatable GPU on " + _join([_get(p, "node", "") for p in missing])
    else:
        status, reason = "passed", ""
    return _check("gpu_allocatable", "each device-plugin GPU node has allocatable GPUs", plan, status, reason)


def _pods(objects: Any, state: Any, pods_skip: str) -> dict[str, Any]:
    names = [_get(o, "metadata.name", None) for o in objects or []]
    ours = [r for r in _get(state, "resources", None) or [] if _get(r, "metadata.name") in names]
    running = [r for r in ours if _get(r, "status.phase") == "Running"]
    output = (
        {_get(r, "metadata.name", None): _get(r, "status.phase", None) for r in ours}
        if state is not None
        else None
    )
    if state is None or _skipped(state):
        status, reason = "skipped", pods_skip
    elif len(running) == len(names):
        status, reason = "passed", ""
    else:
        not_running = _difference(names, [_get(r, "metadata.name", None) for r in running])
        status, reason = "failed", "not Running: " + _join(not_running)
    return _check("pods_running", "every smoke-test pod is Running on its node", output, status, reason)


def _no_gpu(seen_no_gpu: list[tuple[str, Any]], pods_ran: bool, pods_skip: str) -> dict[str, Any]:
    leaks = [(k, v) for k, v in seen_no_gpu if _get(v, "nvidia_devices") != []]
    leaks += [(k, v) for k, v in seen_no_gpu if _get(v, "rc") != 0]
    output = {k: _only(v, ("node", "rc", "nvidia_devices")) for k, v in seen_no_gpu}
    if not pods_ran or not seen_no_gpu:
        status, reason = "skipped", pods_skip
    elif leaks:
        status, reason = (
            "failed",
            "sees GPU devices or failed: " + _join(_unique([name for name, _value in leaks])),
        )
    else:
        status, reason = "passed", ""
    expected = "a pod without a GPU request sees no /dev/nvidia*"
    return _check("no_gpu_without_request", expected, output, status, reason)


def _one_gpu(seen_gpu: list[tuple[str, Any]], pods_ran: bool, pods_skip: str) -> dict[str, Any]:
    bad = [(k, v) for k, v in seen_gpu if _get(v, "rc") != 0]
    bad += [(k, v) for k, v in seen_gpu if _get(v, "rc") == 0 and _get(v, "uuid_count") != 1]
    output = {k: _only(v, ("node", "rc", "uuids", "output")) for k, v in seen_gpu}
    if not pods_ran or not seen_gpu:
        status, reason = "skipped", pods_skip
    elif bad:
        status, reason = "failed", "not exactly one GPU: " + _join([name for name, _value in bad])
    else:
        status, reason = "passed", ""
    expected = "a one-GPU pod runs nvidia-smi -L and sees exactly one GPU"
    return _check("one_gpu_per_pod", expected, output, status, reason)


def _distinct(
    seen: list[tuple[str, Any]], pods_ran: bool, pods_skip: str, settings: Mapping[str, Any]
) -> dict[str, Any]:
    pair = next(((k, v) for k, v in seen if re.match("verify-pair-", k)), None)
    pair_node = _get(pair[1], "node") if pair else ""
    partner = next(
        ((k, v) for k, v in seen if re.match("verify-gpu-", k) and _get(v, "node") == pair_node), None
    )
    shared = _intersect(_get(pair[1], "uuids"), _get(partner[1], "uuids")) if pair and partner else []
    output = (
        {pair[0]: _get(pair[1], "uuids"), partner[0]: _get(partner[1], "uuids"), "shared": shared}
        if pair and partner
        else None
    )
    replicas = settings.get("verify_time_slicing_replicas")
    if not pods_ran:
        status, reason = "skipped", pods_skip
    elif not pair:
        status = "skipped"
        reason = (
            f"time-slicing shares GPUs ({replicas} replicas)"
            if _int(replicas) > 1
            else "no tested node has two allocatable GPUs"
        )
    elif shared and partner is not None:  # shared is empty without a partner
        status, reason = "failed", f"{pair[0]} and {partner[0]} both see " + _join(shared)
    else:
        status, reason = "passed", ""
    return _check("distinct_gpus", "two one-GPU pods on one node see different GPUs", output, status, reason)


def _rdma(exec_rdma: Any, pods_skip: str) -> dict[str, Any]:
    results = _get(exec_rdma, "results", None) or [] if exec_rdma is not None else []
    bad = [r for r in results if "stdout" not in r]
    bad += [r for r in results if "stdout" in r and not re.search(r"(?m)^uverbs\d+$", r["stdout"])]
    output = {
        _get(r, "item.metadata.name", None): (
            str(r.get("stdout", "")) + str(r.get("stderr", "")) + str(r.get("msg", ""))
        ).strip()
        for r in results
    }
    if exec_rdma is None or not results:
        status = "skipped"
        reason = (
            pods_skip
            if exec_rdma is None
            else "no RDMA pod: the Network Operator is off (verify_rdma_pods) or no tested node has RDMA NICs"
        )
    elif bad:
        status, reason = (
            "failed",
            "no uverbs device: " + _join([_get(r, "item.metadata.name", None) for r in bad]),
        )
    else:
        status, reason = "passed", ""
    expected = "a GPU pod with the RDMA resource and IPC_LOCK sees /dev/infiniband/uverbs*"
    return _check("rdma_pods", expected, output, status, reason)


def _dra(slices: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    driver = settings.get("verify_dra_driver_name")
    results = _get(slices, "results", None) or [] if slices is not None else []
    devices = [
        len(_flatten([_get(res, "spec.devices", []) for res in _get(r, "resources", [])])) for r in results
    ]
    items = [_get(r, "item", None) for r in results]
    empty = [item for item, count in zip(items, devices, strict=True) if count == 0]
    output = (
        {
            "api": "resource.k8s.io/v1",
            "driver": driver,
            "devices": dict(zip(items, devices, strict=True)),
            "errors": {_get(r, "item", None): r["msg"] for r in results if "msg" in r},
        }
        if slices is not None
        else None
    )
    if slices is None or not results:
        status = "skipped"
        reason = (
            STOPPED
            if slices is None
            else "DRA is off (dra_driver_enabled)"
            if not _bool(settings.get("verify_dra"))
            else f"no DRA node ({settings.get('verify_dra_group')}) in this run"
        )
    elif empty:
        status, reason = "failed", "no device published for " + _join(empty)
    else:
        status, reason = "passed", ""
    expected = (
        f"the DRA driver {driver} publishes devices in resource.k8s.io/v1 ResourceSlices for each DRA node"
    )
    return _check("dra_resourceslices", expected, output, status, reason)


def _volcano(job: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    size = settings.get("verify_gang_size")
    state = _get(_first_resource(job), "status", {}) if job is not None and not _skipped(job) else {}
    running = _get(state, "running", 0)
    ok = _int(running) >= _int(size)
    output = (
        {
            "phase": _get(state, "state.phase", None),
            "running": running,
            "pending": _get(state, "pending", 0),
            "min_available": _int(size),
        }
        if state
        else None
    )
    if not _bool(settings.get("verify_gang_volcano")):
        status, reason = "skipped", "Volcano is off (schedulers_volcano_enabled)"
    elif job is None:
        status, reason = "skipped", STOPPED
    elif ok:
        status, reason = "passed", ""
    else:
        status, reason = "failed", f"running {running} of {size}"
    expected = f"Volcano runs the {size} pods of verify-gang-volcano (minAvailable) together"
    return _check("gang_volcano", expected, output, status, reason)


def _kueue(job: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    size = settings.get("verify_gang_size")
    resource = _first_resource(job) if job is not None and not _skipped(job) else {}
    spec = _get(resource, "spec", {})
    state = _get(resource, "status", {})
    ready = _get(state, "ready", 0)
    ok = not _get(spec, "suspend", True) and _int(ready) >= _int(size)
    output = (
        {
            "suspend": _get(spec, "suspend", None),
            "ready": ready,
            "parallelism": _int(size),
            "cluster_queue": settings.get("verify_kueue_cluster_queue"),
        }
        if resource
        else None
    )
    if not _bool(settings.get("verify_gang_kueue")):
        status, reason = "skipped", "Kueue is off (schedulers_kueue_enabled)"
    elif job is None:
        status, reason = "skipped", STOPPED
    elif ok:
        status, reason = "passed", ""
    else:
        status, reason = "failed", f"suspended: {_get(spec, 'suspend', 'unknown')}, ready {ready} of {size}"
    expected = f"Kueue admits verify-gang-kueue ({size} pods) as one workload and starts them together"
    return _check("gang_kueue", expected, output, status, reason)


def _dcgm_off(test_nodes: Any, dcgm_pods: Any, settings: Mapping[str, Any]) -> str:
    if not _bool(settings.get("verify_dcgm_metrics")):
        return "the GPU Operator runs no DCGM exporter (gpu_operator_dcgm_exporter)"
    if test_nodes is None:
        return STOPPED
    if not test_nodes:
        return NO_GPU_NODE
    return STOPPED if dcgm_pods is None else ""


def _exporters(test_nodes: Any, dcgm_pods: Any, off: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    pods = _get(dcgm_pods, "resources", None) or [] if dcgm_pods is not None else []
    covered = [_get(p, "spec.nodeName", None) for p in pods]
    missing = _difference(test_nodes or [], covered)
    output = (
        dict(zip(covered, [_get(p, "metadata.name", None) for p in pods], strict=True)) if not off else None
    )
    if off:
        status, reason = "skipped", off
    elif missing:
        status, reason = "failed", "no exporter on " + _join(missing)
    else:
        status, reason = "passed", ""
    expected = (
        f"a running DCGM exporter ({settings.get('verify_dcgm_selector')} in "
        f"{settings.get('verify_dcgm_namespace')}) on each tested GPU node"
    )
    return _check("dcgm_exporters", expected, output, status, reason)


def _metrics(dcgm_metrics: Any, dcgm_off: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    results = _get(dcgm_metrics, "results", None) or [] if dcgm_metrics is not None else []
    bad = [r for r in results if _get(r, "rc") != 0]
    bad += [r for r in results if _get(r, "rc") == 0 and _get(r, "stdout") in ("0", "")]
    off = dcgm_off or (
        STOPPED if dcgm_metrics is None else "no DCGM exporter pod of a tested node" if not results else ""
    )
    # The Jinja this replaces split stderr on the two characters backslash and n (Ansible keeps the
    # backslash of '\n' in a folded YAML block): the output carries the whole trimmed stderr. Kept so.
    output = (
        {
            _get(r, "item.spec.nodeName", None): (
                str(r.get("stdout", ""))
                + " "
                + str(r.get("stderr", "")).strip().rsplit("\\n", maxsplit=1)[-1]
            ).strip()
            for r in results
        }
        if dcgm_metrics is not None
        else None
    )
    if off:
        status, reason = "skipped", off
    elif bad:
        status = "failed"
        reason = "no DCGM_FI_* sample from " + _join([_get(r, "item.spec.nodeName", None) for r in bad])
    else:
        status, reason = "passed", ""
    expected = (
        f"each exporter answers on :{settings.get('verify_dcgm_port')}/metrics with DCGM_FI_* samples"
        " (output: how many)"
    )
    return _check("dcgm_metrics", expected, output, status, reason)


def verify_checks(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The smoke tests' checks, in the order of CHECK_NAMES, from what they gathered."""

    def got(name: str) -> Any:
        return gathered.get(name)

    objects, seen_raw = got("__verify_pod_objects"), got("__verify_seen")
    seen = list((seen_raw or {}).items())
    seen_gpu = [(k, v) for k, v in seen if re.match("verify-(gpu|pair)-", k)]
    seen_no_gpu = [(k, v) for k, v in seen if re.match("verify-no-gpu-", k)]
    pods_ran = objects is not None and seen_raw is not None
    pods_skip = STOPPED if objects is None or len(objects) > 0 else NO_GPU_NODE
    test_nodes, dcgm_pods = got("__verify_test_nodes"), got("__verify_dcgm_pods")
    dcgm_off = _dcgm_off(test_nodes, dcgm_pods, settings)
    return [
        _allocatable(got("__verify_plan")),
        _pods(objects, got("__verify_pods_state"), pods_skip),
        _no_gpu(seen_no_gpu, pods_ran, pods_skip),
        _one_gpu(seen_gpu, pods_ran, pods_skip),
        _distinct(seen, pods_ran, pods_skip, settings),
        _rdma(got("__verify_exec_rdma"), pods_skip),
        _dra(got("__verify_dra_slices"), settings),
        _volcano(got("__verify_volcano_job"), settings),
        _kueue(got("__verify_kueue_job"), settings),
        _exporters(test_nodes, dcgm_pods, dcgm_off, settings),
        _metrics(got("__verify_dcgm_metrics"), dcgm_off, settings),
        *verify_scheduling.scheduling_checks(gathered, settings),
        *verify_autoscaling.autoscaling_checks(gathered, settings),
        *verify_inference.inference_checks(gathered, settings),
        *verify_controller.controller_checks(gathered, settings),
    ]
