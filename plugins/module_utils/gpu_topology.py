# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Kubelet CPU / Memory / Topology Manager settings computed from a host's NUMA layout.

Plain functions, standard library only, used by the kubelet_topology role (through a filter or a
module) and by the unit tests. The NUMA layout is the ``numa_nodes`` list of gpubring_gpu_facts:
``[{"id": 0, "cpus": [0, 1, ...], "cores": [[0, 128], [1, 129], ...] or None, "memory_mb": ...}]``.

Rules (documented for operators in the kubelet_topology role README):

reservedSystemCPUs
    ``reserved_cpus_per_numa`` CPUs are reserved on every NUMA node that has CPUs. On each node,
    physical cores are taken in ascending order of their lowest CPU id, whole cores at a time (a
    core's hyperthread siblings are never split between system and pods), until at least that many
    CPUs of the node are reserved — so with 2 threads per core, 3 CPUs per node become 2 cores =
    4 CPUs. When the siblings are not known, the lowest CPU ids of the node are taken. Reserving
    every CPU of a node is refused.

reservedMemory (memoryManagerPolicy: Static)
    The kubelet refuses to start unless, per resource, the reservedMemory entries add up exactly to
    kube-reserved + system-reserved + the hard eviction threshold ``memory.available``. The kubelet
    default for that threshold is 100Mi, but only when ``evictionHard`` is not set at all: once any
    evictionHard signal is set, unset signals are zero (kubelet documentation, "Node-pressure
    Eviction"). Percentages cannot be summed exactly and are refused. The total is split evenly over
    the NUMA nodes in the largest unit that divides it exactly (Mi, else Ki, else bytes); the
    remainder units go to the lowest node ids, so the parts always add up to the total.

topologyManagerPolicyOptions
    The Topology Manager refuses hosts with more than 8 NUMA nodes unless
    ``max-allowable-numa-nodes`` is at least the node count (kubernetes#124148, KEP-4622: beta and
    on by default since Kubernetes 1.31).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from ansible_collections.gpubring.core.plugins.module_utils.gpu_parsers import format_cpulist

DEFAULT_EVICTION_MEMORY_AVAILABLE = "100Mi"
TOPOLOGY_MANAGER_DEFAULT_MAX_NUMA_NODES = 8

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY_RE = re.compile(
    r"^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE][0-9]+)?$"
)


# --------------------------------------------------------------------------------------------
# Kubernetes quantities


def parse_quantity(text: str | int) -> int:
    """A Kubernetes memory quantity (``1Gi``, ``100Mi``, ``1.5G``, ``1e9``, ``1048576``) in bytes.

    Raises ValueError for anything else, for negative values and for fractions of a byte.
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{text} is negative")
        return text
    value = str(text).strip()
    match = _QUANTITY_RE.match(value)
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        amount = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None
    if suffix in _BINARY:
        amount *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        amount *= _DECIMAL[suffix]
    elif suffix:
        amount *= Decimal(10) ** int(suffix[1:])
    if amount != amount.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(amount)


def format_quantity(value: int) -> str:
    """Bytes as a Kubernetes quantity in the largest binary unit that divides them: ``1124Mi``."""
    if value < 0:
        raise ValueError(f"{value} is negative")
    if value == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


# --------------------------------------------------------------------------------------------
# NUMA layouts from the parsers (for hosts described by lscpu / numactl captures)


def numa_layout_from_lscpu(
    lscpu: dict[str, Any], core_groups: dict[int, list[int]] | None
) -> list[dict[str, Any]]:
    """``numa_nodes`` entries from parse_lscpu (+ lscpu_core_groups); memory is unknown there."""
    nodes = []
    for node_id, cpus in sorted(lscpu["numa_nodes"].items()):
        cores = None
        if core_groups is not None:
            seen: dict[tuple[int, ...], None] = {}
            for cpu in cpus:
                seen[tuple(core_groups.get(cpu, [cpu]))] = None
            cores = sorted((list(group) for group in seen), key=lambda group: group[0])
        nodes.append({"id": node_id, "cpus": list(cpus), "cores": cores, "memory_mb": None})
    return nodes


def numa_layout_from_numactl(numactl: dict[str, Any]) -> list[dict[str, Any]]:
    """``numa_nodes`` entries from parse_numactl_hardware (siblings unknown: numactl does not say)."""
    return [
        {"id": node["id"], "cpus": list(node["cpus"]), "cores": None, "memory_mb": node["size_mb"]}
        for node in numactl["nodes"]
    ]


# --------------------------------------------------------------------------------------------
# reservedSystemCPUs


def reserved_system_cpus(numa_nodes: list[dict[str, Any]], per_numa: int) -> list[int]:
    """CPUs to reserve for the system: ``per_numa`` per NUMA node, whole cores first (module doc)."""
    if isinstance(per_numa, bool) or not isinstance(per_numa, int) or per_numa < 0:
        raise ValueError(f"reserved CPUs per NUMA node must be a whole number >= 0, got {per_numa!r}")
    reserved: list[int] = []
    if per_numa == 0:
        return reserved
    for node in sorted(numa_nodes, key=lambda n: n["id"]):
        cpus = sorted(node.get("cpus") or [])
        if not cpus:
            continue  # memory-only node
        cores = node.get("cores")
        if not cores:
            cores = [[cpu] for cpu in cpus]
        taken: list[int] = []
        for core in sorted(cores, key=min):
            if len(taken) >= per_numa:
                break
            taken.extend(cpu for cpu in core if cpu in cpus)
        if len(taken) >= len(cpus):
            raise ValueError(
                "reserving {} CPUs per NUMA node would take all {} CPUs of NUMA node {}".format(
                    per_numa, len(cpus), node["id"]
                )
            )
        reserved.extend(taken)
    return sorted(reserved)


def reserved_system_cpus_string(numa_nodes: list[dict[str, Any]], per_numa: int) -> str:
    """reserved_system_cpus in the kubelet's cpuset form (``0-1,64-65``)."""
    return format_cpulist(reserved_system_cpus(numa_nodes, per_numa))


# --------------------------------------------------------------------------------------------
# reservedMemory


def _memory_of(reserved: dict[str, Any] | str | int | None, what: str) -> int:
    if reserved is None:
        return 0
    if isinstance(reserved, dict):
        value = reserved.get("memory")
        if value is None:
            return 0
    else:
        value = reserved
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise ValueError(f"{what} memory: {exc}") from None


def eviction_memory_available(eviction_hard: dict[str, Any] | None) -> int:
    """The hard eviction threshold for memory.available in bytes (100Mi when evictionHard is unset,
    0 when evictionHard is set without memory.available, as the kubelet does)."""
    if not eviction_hard:
        return parse_quantity(DEFAULT_EVICTION_MEMORY_AVAILABLE)
    value = eviction_hard.get("memory.available")
    if value is None:
        return 0
    if isinstance(value, str) and value.strip().endswith("%"):
        raise ValueError(
            f"evictionHard memory.available {value!r} is a percentage: the Static memory manager needs an "
            "absolute quantity so that reservedMemory can add up to it exactly"
        )
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise ValueError(f"evictionHard memory.available: {exc}") from None


def reserved_memory_total(
    kube_reserved: dict[str, Any] | str | None,
    system_reserved: dict[str, Any] | str | None,
    eviction_hard: dict[str, Any] | None = None,
) -> int:
    """kube-reserved + system-reserved + evictionHard memory.available, in bytes.

    kube_reserved / system_reserved: the KubeletConfiguration maps (``{"memory": "1Gi", "cpu": ...}``)
    or a memory quantity; eviction_hard: the evictionHard map or None (kubelet defaults).
    """
    return (
        _memory_of(kube_reserved, "kube-reserved")
        + _memory_of(system_reserved, "system-reserved")
        + eviction_memory_available(eviction_hard)
    )


def split_reserved_memory(total: int, numa_node_ids: list[int], mode: str = "even") -> list[dict[str, Any]]:
    """reservedMemory entries (``{"numaNode": 0, "limits": {"memory": "562Mi"}}``) adding up to total.

    mode ``even``: spread over all nodes (module doc); ``first``: all of it on the lowest node id.
    """
    ids = sorted(set(numa_node_ids))
    if not ids:
        raise ValueError("no NUMA nodes to put reservedMemory on")
    if total < 0:
        raise ValueError("reserved memory total is negative")
    if mode == "first":
        shares = [total] + [0] * (len(ids) - 1)
    elif mode == "even":
        unit = next(u for u in (_BINARY["Mi"], _BINARY["Ki"], 1) if total % u == 0)
        base, remainder = divmod(total // unit, len(ids))
        shares = [(base + (1 if i < remainder else 0)) * unit for i in range(len(ids))]
    else:
        raise ValueError(f"unknown reservedMemory split mode {mode!r} (even or first)")
    return [
        {"numaNode": node_id, "limits": {"memory": format_quantity(share)}}
        for node_id, share in zip(ids, shares, strict=True)
    ]


def check_reserved_memory(
    reserved_memory: Any,
    kube_reserved: dict[str, Any] | str | None,
    system_reserved: dict[str, Any] | str | None,
    eviction_hard: dict[str, Any] | None = None,
    numa_node_ids: list[int] | None = None,
) -> list[str]:
    """Problems with a user-given reservedMemory list, one sentence each; [] when it is valid.

    Checks the shape (numaNode ints, limits.memory quantities), duplicate and non-existent NUMA
    nodes (when numa_node_ids is given), and that the memory adds up exactly to kube-reserved +
    system-reserved + evictionHard memory.available, which the kubelet requires for the Static policy.
    """
    problems: list[str] = []
    try:
        expected = reserved_memory_total(kube_reserved, system_reserved, eviction_hard)
    except ValueError as exc:
        return [str(exc)]
    if not isinstance(reserved_memory, list) or not reserved_memory:
        return ["reservedMemory must be a non-empty list of {numaNode, limits: {memory}} entries"]
    total = 0
    seen: set[int] = set()
    known = set(numa_node_ids) if numa_node_ids is not None else None
    for i, entry in enumerate(reserved_memory):
        where = f"reservedMemory[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} must be a mapping with numaNode and limits")
            continue
        node = entry.get("numaNode")
        if isinstance(node, bool) or not isinstance(node, int) or node < 0:
            problems.append(f"{where}.numaNode must be a NUMA node id (an integer >= 0), got {node!r}")
        else:
            if node in seen:
                problems.append(f"{where}.numaNode: NUMA node {node} is listed twice")
            seen.add(node)
            if known is not None and node not in known:
                problems.append(
                    "{}.numaNode: NUMA node {} does not exist on this host (nodes: {})".format(
                        where, node, format_cpulist(sorted(known)) or "none"
                    )
                )
        limits = entry.get("limits")
        if not isinstance(limits, dict) or "memory" not in limits:
            problems.append(f"{where}.limits.memory is missing")
            continue
        try:
            total += parse_quantity(limits["memory"])
        except ValueError as exc:
            problems.append(f"{where}.limits.memory: {exc}")
    if not problems and total != expected:
        problems.append(
            "reservedMemory adds up to {} of memory, but kube-reserved ({}) + system-reserved ({}) + "
            "evictionHard memory.available ({}) = {}: the kubelet refuses to start with "
            "memoryManagerPolicy Static unless they are equal".format(
                format_quantity(total),
                format_quantity(_memory_of(kube_reserved, "kube-reserved")),
                format_quantity(_memory_of(system_reserved, "system-reserved")),
                format_quantity(eviction_memory_available(eviction_hard)),
                format_quantity(expected),
            )
        )
    return problems


# --------------------------------------------------------------------------------------------
# Topology Manager


def max_allowable_numa_nodes(numa_node_count: int) -> int | None:
    """The value ``max-allowable-numa-nodes`` needs on this host, or None when the default (8) is enough."""
    if numa_node_count > TOPOLOGY_MANAGER_DEFAULT_MAX_NUMA_NODES:
        return numa_node_count
    return None


def topology_manager_policy_options(
    numa_node_count: int, options: dict[str, Any] | None = None
) -> dict[str, str]:
    """topologyManagerPolicyOptions for this host: the user's options (values as strings, as the
    KubeletConfiguration wants) plus ``max-allowable-numa-nodes`` when the host has more than 8 NUMA
    nodes. A user value smaller than the node count is raised to it."""
    result = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (options or {}).items()}
    needed = max_allowable_numa_nodes(numa_node_count)
    if needed is not None:
        current = result.get("max-allowable-numa-nodes")
        if current is None or not current.isdigit() or int(current) < needed:
            result["max-allowable-numa-nodes"] = str(needed)
    return result


def kubelet_numa_settings(
    numa_nodes: list[dict[str, Any]],
    reserved_cpus_per_numa: int,
    *,
    kube_reserved: dict[str, Any] | str | None,
    system_reserved: dict[str, Any] | str | None,
    eviction_hard: dict[str, Any] | None = None,
    memory_split: str = "even",
    policy_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The NUMA-dependent KubeletConfiguration fields for one host, computed together."""
    node_ids = [node["id"] for node in numa_nodes]
    total = reserved_memory_total(kube_reserved, system_reserved, eviction_hard)
    return {
        "reservedSystemCPUs": reserved_system_cpus_string(numa_nodes, reserved_cpus_per_numa),
        "reservedMemory": split_reserved_memory(total, node_ids, memory_split),
        "topologyManagerPolicyOptions": topology_manager_policy_options(len(node_ids), policy_options),
    }
