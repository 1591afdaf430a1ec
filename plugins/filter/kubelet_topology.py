# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filters of the kubelet_topology role: the kubelet's NUMA settings from gpu_facts' ``numa_nodes``.

The computations live in module_utils/gpu_topology (plain functions, unit-tested there); these
filters only expose them to Jinja and turn their ValueError into an AnsibleFilterError whose message
names the input to fix.

Filters (FQCN gpubring.core.<name>):

kubelet_numa_settings(numa_nodes, reserved_cpus_per_numa, kube_reserved, system_reserved,
                      eviction_hard=None, memory_split='even', policy_options=None)
    -> {reservedSystemCPUs: "0-1,64-65", reservedMemory: [{numaNode, limits: {memory}}],
        topologyManagerPolicyOptions: {...}}
kubelet_reserved_memory_problems(reserved_memory, kube_reserved, system_reserved,
                                 eviction_hard=None, numa_node_ids=None) -> [sentence, ...]
kubelet_reserved_memory_total(kube_reserved, system_reserved, eviction_hard=None) -> "2148Mi"
k8s_quantity_bytes(quantity) -> int
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpubring.core.plugins.module_utils.gpu_topology import (
    check_reserved_memory,
    format_quantity,
    kubelet_numa_settings,
    parse_quantity,
    reserved_memory_total,
)


def _numa_nodes(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise AnsibleFilterError(
            "kubelet_numa_settings: expected the numa_nodes list of gpubring_gpu_facts "
            f"(at least one node), got {value!r}"
        )
    for node in value:
        if not isinstance(node, dict) or "id" not in node or "cpus" not in node:
            raise AnsibleFilterError(f"kubelet_numa_settings: a NUMA node needs id and cpus, got {node!r}")
    return value


def numa_settings(  # noqa: PLR0917 - a Jinja filter takes its arguments by position
    numa_nodes: Any,
    reserved_cpus_per_numa: Any,
    kube_reserved: Any,
    system_reserved: Any,
    eviction_hard: Any = None,
    memory_split: str = "even",
    policy_options: Any = None,
) -> dict[str, Any]:
    """The NUMA-dependent KubeletConfiguration fields of one host (gpu_topology.kubelet_numa_settings)."""
    try:
        return kubelet_numa_settings(
            _numa_nodes(numa_nodes),
            int(reserved_cpus_per_numa),
            kube_reserved=kube_reserved or None,
            system_reserved=system_reserved or None,
            eviction_hard=eviction_hard or None,
            memory_split=memory_split,
            policy_options=policy_options or None,
        )
    except (ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"kubelet_numa_settings: {exc}") from None


def reserved_memory_problems(
    reserved_memory: Any,
    kube_reserved: Any,
    system_reserved: Any,
    eviction_hard: Any = None,
    numa_node_ids: Any = None,
) -> list[str]:
    """What is wrong with a user-given reservedMemory list (gpu_topology.check_reserved_memory)."""
    ids = [int(i) for i in numa_node_ids] if numa_node_ids is not None else None
    return check_reserved_memory(
        reserved_memory, kube_reserved or None, system_reserved or None, eviction_hard or None, ids
    )


def reserved_memory_sum(kube_reserved: Any, system_reserved: Any, eviction_hard: Any = None) -> str:
    """kube-reserved + system-reserved + evictionHard memory.available as a quantity (``2148Mi``)."""
    try:
        return format_quantity(
            reserved_memory_total(kube_reserved or None, system_reserved or None, eviction_hard or None)
        )
    except ValueError as exc:
        raise AnsibleFilterError(f"kubelet_reserved_memory_total: {exc}") from None


def quantity_bytes(value: Any) -> int:
    """A Kubernetes quantity (``1Gi``, ``100Mi``) in bytes."""
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise AnsibleFilterError(f"k8s_quantity_bytes: {exc}") from None


class FilterModule:
    """gpubring kubelet topology filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "kubelet_numa_settings": numa_settings,
            "kubelet_reserved_memory_problems": reserved_memory_problems,
            "kubelet_reserved_memory_total": reserved_memory_sum,
            "k8s_quantity_bytes": quantity_bytes,
        }
