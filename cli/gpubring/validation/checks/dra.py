"""Cross-field checks of NVIDIA's DRA driver inputs (dra_driver), before any host is touched.

The dra_driver role runs on the first control plane, so that host's values are the ones checked.
With `dra_driver_enabled`:

- it must hand out something: `dra_driver_gpus` and/or `dra_driver_compute_domains`;
- `dra_driver_gpus` (the device plugin off cluster-wide) needs `dra_driver_group: gpu_nodes`. GPU
  Operator v25.10.0 keeps its validator's plugin validation unless the device plugin is off
  everywhere (controllers/object_controls.go, TransformValidator, case "plugin"), and that
  validation waits for `nvidia.com/gpu` capacity on its node (cmd/nvidia-validator/main.go,
  validateGPUResource): on DRA nodes it never comes, so the ClusterPolicy is never ready;
- `dra_driver_group` must be a group of the inventory with hosts.

The role asserts the same at run time (roles/dra_driver/tasks/main.yml) for a hand-run playbook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpubring.validation import specs
from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem

if TYPE_CHECKING:
    from gpubring.model import Inventory

KEYS = ("dra_driver_enabled", "dra_driver_gpus", "dra_driver_compute_domains", "dra_driver_group")


@register_validator
def dra_driver_hands_out(inv: Inventory) -> list[Problem]:
    """What the DRA driver hands out must be something, and GPUs only on every GPU node."""
    first = next(iter(inv.groups.get("control_plane", ())), None)
    if first is None or first not in inv.hosts:
        return []
    host = inv.hosts[first]
    if not any(key in host.vars for key in KEYS):
        return []  # off by default
    defaults = specs.load_specs().defaults()
    values = {key: host.vars.get(key, defaults.get(key)) for key in KEYS}
    if any(specs.templated(v) for v in values.values()) or values["dra_driver_enabled"] is not True:
        return []  # Ansible evaluates templates; a wrong type is the argument spec check's

    def where(*keys: str) -> tuple[str, str]:
        for key in keys:
            found = inv.origin(first, key)
            if found is not None:
                return found
        return inv.hosts_file.name, keys[0]

    gpus, domains = values["dra_driver_gpus"], values["dra_driver_compute_domains"]
    group = values["dra_driver_group"]
    problems: list[Problem] = []
    if gpus is not True and domains is not True:
        problems.append(
            Problem(
                *where("dra_driver_enabled", "dra_driver_gpus", "dra_driver_compute_domains"),
                "expected dra_driver_gpus and/or dra_driver_compute_domains on with dra_driver_enabled: "
                "with both off the DRA driver hands out nothing (dra_driver_gpus is off by default because "
                "the pinned chart 25.8.0 calls GPUs through DRA not yet supported)",
            )
        )
    if gpus is True and group != "gpu_nodes":
        problems.append(
            Problem(
                *where("dra_driver_group", "dra_driver_gpus"),
                f"expected dra_driver_group gpu_nodes with dra_driver_gpus on, not {group!r}: the GPU "
                "Operator's validator (v25.10.0) waits for nvidia.com/gpu on every GPU node while its device "
                "plugin is on anywhere, so DRA GPUs on some nodes never let the ClusterPolicy become ready; "
                "hand out GPUs through DRA on every GPU node, or keep the device plugin (dra_driver_gpus: "
                "false; ComputeDomains still work on the group)",
            )
        )
    if isinstance(group, str) and not inv.groups.get(group):
        problems.append(
            Problem(
                *where("dra_driver_group"),
                f"expected an inventory group with hosts for the DRA kubelet plugin; {group!r} has none",
            )
        )
    return problems
