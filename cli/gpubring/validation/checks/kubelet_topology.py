"""Cross-field checks of the kubelet_topology inputs, before any kubelet sees them.

With `memoryManagerPolicy: Static` the kubelet refuses to start unless `reservedMemory` adds up exactly
to kube-reserved + system-reserved + the hard eviction threshold for memory. The role computes a list
that does; an explicit `kubelet_topology_reserved_memory` from the inventory, or an evictionHard
`memory.available` given as a percentage, is checked here with the same function the role's filter
uses (plugins/module_utils/gpu_topology.py), so `gpubring check` and `gpubring up` refuse it at
validation time. NUMA node ids are not known before the hosts are read: the role checks those.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpubring import paths
from gpubring.validation import specs
from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem

if TYPE_CHECKING:
    from gpubring.model import Inventory

ROLE = "kubelet_topology"
KEYS = {
    "policy": f"{ROLE}_memory_manager_policy",
    "reserved_memory": f"{ROLE}_reserved_memory",
    "kube_reserved": f"{ROLE}_kube_reserved",
    "system_reserved": f"{ROLE}_system_reserved",
    "eviction_hard": f"{ROLE}_eviction_hard",
}


@cache
def gpu_topology() -> ModuleType:
    """module_utils/gpu_topology, imported as Ansible does (through the gpubring.core collection)."""
    folder = str(paths.collections_path())
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module("ansible_collections.gpubring.core.plugins.module_utils.gpu_topology")


def _templated(value: Any) -> bool:
    """Whether a value (or anything in it) is Ansible's to evaluate (specs.templated)."""
    if specs.templated(value):
        return True
    if isinstance(value, Mapping):
        return any(_templated(v) for v in value.values())
    if isinstance(value, list):
        return any(_templated(v) for v in value)
    return False


def _role_defaults() -> dict[str, Any]:
    table = specs.load_specs()
    defaults = table.defaults()
    return {name: defaults.get(key) for name, key in KEYS.items()}


def host_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, sentence) problems of one host's effective kubelet_topology inputs (KEYS names)."""
    if values.get("policy") != "Static" or any(_templated(v) for v in values.values()):
        return []
    topo = gpu_topology()
    kube, system = values.get("kube_reserved"), values.get("system_reserved")
    eviction = values.get("eviction_hard")
    reserved = values.get("reserved_memory")
    if not reserved:
        try:
            topo.reserved_memory_total(kube or None, system or None, eviction or None)
        except ValueError as exc:
            return [(KEYS["eviction_hard"], str(exc))]
        return []
    problems: list[str] = topo.check_reserved_memory(reserved, kube or None, system or None, eviction or None)
    return [(KEYS["reserved_memory"], problem) for problem in problems]


@register_validator
def reserved_memory_adds_up(inv: Inventory) -> list[Problem]:
    """An explicit reservedMemory must add up to kube-reserved + system-reserved + eviction (Static)."""
    defaults: dict[str, Any] | None = None
    out: list[Problem] = []
    for name, host in inv.hosts.items():
        if not any(key in host.vars for key in KEYS.values()):
            continue  # the role's defaults add up by construction
        if defaults is None:
            defaults = _role_defaults()
        values = {n: host.vars.get(key, defaults.get(n)) for n, key in KEYS.items()}
        for key, sentence in host_problems(values):
            origins = [inv.origin(name, k) for k in (key, *KEYS.values())]
            file, path = next((o for o in origins if o is not None), (inv.hosts_file.name, key))
            out.append(
                Problem(
                    file,
                    path,
                    f"expected settings the kubelet's Static memory manager accepts: {sentence}",
                )
            )
    return out
