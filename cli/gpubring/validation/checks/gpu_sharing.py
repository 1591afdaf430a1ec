"""Cross-field checks of GPU sharing per node group (gpu_operator_sharing), before any host is touched.

The gpu_operator role runs on the first control plane, so that host's values are the ones checked.
`gpu_operator_sharing` maps an inventory group to how its GPUs are shared:
`{mig: {strategy, config | devices}, time_slicing: {replicas, rename, resources}, mps: {replicas,
rename}}`. Refused, each with the file and key:

- a group the inventory does not have (or without hosts), a host in two sharing groups (its
  nvidia.com/device-plugin.config label holds one config), a group also in gpu_operator_mig_configs;
- a key that is none of mig, time_slicing, mps (and inside them, one that is not theirs);
- `mps` with `mig` or with `time_slicing` on one group: NVIDIA/k8s-device-plugin README.md at
  v0.20.0 (the plugin of GPU Operator v26.7.0): "Time-slicing and MPS are mutually exclusive" and
  "Sharing with MPS is currently not supported on devices with MIG enabled"; MPS shares only
  `nvidia.com/gpu` ("the only supported resource available for MPS are nvidia.com/gpu resources");
- `replicas` below 2: api/config/v1/replicas.go at v0.20.0 refuses it ("number of replicas must be
  >= 2");
- a MIG layout that is neither a named config nor custom profiles, a custom layout beside named
  ones (a custom mig-parted ConfigMap replaces the operator's default-mig-parted-config:
  controllers/object_controls.go at v26.7.0, GetConfigMapName), and a MIG profile the group's GPU
  does not have, when gpu_facts has seen the group's GPUs (the inventory's fact cache,
  gpubring.factcache, written by a run) and MIG_PROFILES knows their PCI device id;
- time-sliced MIG resources a group's nodes never advertise (nvidia.com/mig-* with the single
  strategy; a profile outside the group's layout with mixed);
- any sharing while NVIDIA's DRA driver hands out the GPUs (the device plugin is off), and a group
  name too long for the label value it becomes.

`sharing_notes` gives what `gpubring plan` says about sharing: time-slicing isolates no memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpubring import factcache
from gpubring.validation import specs
from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem, did_you_mean

if TYPE_CHECKING:
    from gpubring.model import Inventory

KEY = "gpu_operator_sharing"
LABEL_VALUE_MAX = 63  # characters of a label value (Kubernetes)
KINDS = {
    "mig": ("strategy", "config", "devices"),
    "time_slicing": ("replicas", "rename", "resources"),
    "mps": ("replicas", "rename"),
}

# MIG profiles per GPU (PCI device id), read from the GPU Operator's default mig-parted config at
# v26.7.0 (assets/state-mig-manager/0400_configmap.yaml): its per-product comments ("# A100-40GB,
# A800-40GB", "# H100-80GB, H800-80GB, A100-80GB, A800-80GB", "# A30-24GB", "# H100 NVL, H800 NVL",
# "# H200-141GB") and the device-filter lists of its all-balanced and all-1g.10gb configs, which name
# each product's device ids. Other GPUs are not checked here (mig-parted refuses a profile at apply).
_A100_40GB = ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
_GB_80 = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_A30 = ("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb")
_H100_NVL = ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")
_H200 = ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
MIG_PROFILES: dict[str, tuple[str, tuple[str, ...]]] = {
    **{d: ("A100/A800 40GB", _A100_40GB) for d in ("20b0", "20b1", "20f1", "20f6")},
    **{
        d: ("H100/H800/A100/A800 80GB", _GB_80)
        for d in ("2330", "2331", "2322", "20b2", "20b5", "20f3", "20f5", "2324")
    },
    "20b7": ("A30 24GB", _A30),
    **{d: ("H100/H800 NVL", _H100_NVL) for d in ("2321", "233a")},
    **{d: ("H200 141GB", _H200) for d in ("2335", "233b")},
}
# Named configs of that file that are no single profile.
WHOLE_GPU_CONFIGS = ("all-disabled", "all-enabled", "all-balanced")
_NAMED = re.compile(r"^all-(\d+g\.\d+gb)(\.me)?$")


def named_config_profile(name: str) -> str | None:
    """The MIG profile of a default-mig-parted-config name (all-1g.10gb.me -> 1g.10gb+me), else None."""
    match = _NAMED.match(name)
    if match is None:
        return None
    return match.group(1) + ("+me" if match.group(2) else "")


def _cached_device_ids(inv: Inventory, host: str) -> set[str]:
    """PCI device ids of the host's GPUs in the inventory's fact cache (empty when never gathered)."""
    facts = factcache.host_facts(inv.root, host)
    if facts is None:
        return set()
    gpu = facts.get("gpubring_gpu_facts") or facts.get("ansible_facts", {}).get("gpubring_gpu_facts") or {}
    ids = set()
    for item in gpu.get("gpus", []) if isinstance(gpu, Mapping) else []:
        if isinstance(item, Mapping) and item.get("device_id"):
            ids.add(str(item["device_id"]).lower().removeprefix("0x")[:4])
    return ids


def _sharing(inv: Inventory) -> tuple[str, Any, tuple[str, str]] | None:
    first = next(iter(inv.groups.get("control_plane", ())), None)
    if first is None or first not in inv.hosts:
        return None
    value = inv.hosts[first].vars.get(KEY)
    where = inv.origin(first, KEY) or (inv.hosts_file.name, KEY)
    return first, value, where


@register_validator
def gpu_sharing(inv: Inventory) -> list[Problem]:
    """Each node group's sharing is something the device plugin and mig-parted accept on its GPUs."""
    found = _sharing(inv)
    if found is None:
        return []
    first, sharing, (file, key) = found
    if not isinstance(sharing, Mapping) or specs.templated(sharing):
        return []  # unset, or the argument spec check's (type dict)
    problems: list[Problem] = []

    def bad(path: str, text: str) -> None:
        problems.append(Problem(file, f"{key}.{path}" if path else key, text))

    mig_configs = inv.hosts[first].vars.get("gpu_operator_mig_configs") or {}
    custom = [
        g
        for g, s in sharing.items()
        if isinstance(s, Mapping) and isinstance(s.get("mig"), Mapping) and "devices" in s["mig"]
    ]
    first_vars = inv.hosts[first].vars
    if sharing and first_vars.get("dra_driver_enabled") is True and first_vars.get("dra_driver_gpus") is True:
        bad(
            "",
            "expected no device plugin sharing while NVIDIA's DRA driver hands out the GPUs "
            "(dra_driver_gpus): the device plugin that reads these configs is off cluster-wide",
        )
    owner: dict[str, str] = {}
    for group, spec in sharing.items():
        if len(f"gpubring-{group}") > LABEL_VALUE_MAX:
            bad(
                str(group),
                "expected a group name of at most 54 characters: it is the value of the nodes' "
                "nvidia.com/device-plugin.config label (gpubring-<group> for a custom MIG layout), "
                f"at most {LABEL_VALUE_MAX}",
            )
        hosts = inv.groups.get(str(group))
        if not hosts:
            bad(
                str(group),
                f"expected an inventory group with hosts; {group!r} has none"
                f"{did_you_mean(str(group), inv.groups)}",
            )
            continue
        clash: dict[str, list[str]] = {}
        for host in hosts:
            if host in owner:
                clash.setdefault(owner[host], []).append(host)
            owner.setdefault(host, str(group))
        for other, both in clash.items():
            bad(
                str(group),
                f"expected each host in one sharing group; {', '.join(both)} in {other!r} and {group!r} "
                "(a node's nvidia.com/device-plugin.config label holds one config)",
            )
        if not isinstance(spec, Mapping):
            bad(str(group), "expected a mapping with mig, time_slicing and/or mps")
            continue
        for kind, body in spec.items():
            if kind not in KINDS:
                bad(f"{group}.{kind}", f"expected one of {', '.join(KINDS)}{did_you_mean(str(kind), KINDS)}")
                continue
            if not isinstance(body, Mapping):
                bad(f"{group}.{kind}", "expected a mapping")
                continue
            for field in body:
                if field not in KINDS[kind]:
                    bad(
                        f"{group}.{kind}.{field}",
                        f"expected one of {', '.join(KINDS[kind])}{did_you_mean(str(field), KINDS[kind])}",
                    )
        if "mps" in spec and "mig" in spec:
            bad(
                f"{group}.mps",
                "expected MPS or MIG on a group, not both: the device plugin (v0.20.0 README) "
                "does not support MPS sharing on devices with MIG enabled",
            )
        if "mps" in spec and "time_slicing" in spec:
            bad(
                f"{group}.mps",
                "expected MPS or time-slicing on a group, not both: the device plugin "
                "(v0.20.0 README) says they are mutually exclusive",
            )
        for kind in ("time_slicing", "mps"):
            problems.extend(_check_shared(file, f"{key}.{group}.{kind}", kind, spec.get(kind)))
        mig = spec.get("mig")
        if isinstance(mig, Mapping):
            problems.extend(_check_mig(inv, file, f"{key}.{group}.mig", str(group), mig, custom=bool(custom)))
            if isinstance(mig_configs, Mapping) and group in mig_configs:
                bad(
                    f"{group}.mig",
                    f"expected the MIG layout of {group!r} in one place; "
                    "gpu_operator_mig_configs sets it too",
                )
            sliced = spec.get("time_slicing")
            if isinstance(sliced, Mapping):
                problems.extend(_check_sliced_mig(file, f"{key}.{group}.time_slicing.resources", mig, sliced))
    return problems


def _check_sliced_mig(
    file: str, path: str, mig: Mapping[str, Any], sliced: Mapping[str, Any]
) -> list[Problem]:
    """Time-sliced resources of a MIG group are ones its nodes advertise: with the single strategy MIG
    devices are nvidia.com/gpu, with mixed nvidia.com/mig-<profile> of the group's layout (k8s-device-plugin
    README v0.20.0, MIG strategies)."""
    resources = sliced.get("resources", ["nvidia.com/gpu"])
    if not isinstance(resources, list):
        return []
    strategy = mig.get("strategy", "single")
    mig_resources = [r for r in resources if isinstance(r, str) and r.startswith("nvidia.com/mig-")]
    if strategy == "single" and mig_resources:
        return [
            Problem(
                file,
                path,
                f"expected nvidia.com/gpu with the single MIG strategy (its MIG devices are advertised as "
                f"nvidia.com/gpu); {', '.join(mig_resources)} would never exist",
            )
        ]
    config, devices = mig.get("config"), mig.get("devices")
    profile = named_config_profile(config) if isinstance(config, str) else None
    layout = set(devices) if isinstance(devices, Mapping) else ({profile} if profile else set())
    if strategy != "mixed" or not layout or any("+" in str(p) for p in layout):
        return []  # a layout of several products' profiles (all-balanced) or media extensions: not checked
    missing = [r for r in mig_resources if r.removeprefix("nvidia.com/mig-") not in layout]
    if not missing:
        return []
    names = ", ".join(f"nvidia.com/mig-{p}" for p in sorted(layout))
    return [
        Problem(
            file,
            path,
            f"expected MIG resources of the group's layout ({names}); "
            f"{', '.join(missing)} would never exist on its nodes",
        )
    ]


def _check_shared(file: str, path: str, kind: str, body: object) -> list[Problem]:
    """replicas >= 2 and resource names of time_slicing or mps."""
    if not isinstance(body, Mapping):
        return []
    problems: list[Problem] = []
    replicas = body.get("replicas")
    if not specs.templated(replicas) and (
        not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2
    ):
        problems.append(
            Problem(
                file,
                f"{path}.replicas",
                "expected a whole number of replicas >= 2 (the device plugin refuses fewer: "
                f"api/config/v1/replicas.go v0.20.0); got {replicas!r}",
            )
        )
    resources = body.get("resources", ["nvidia.com/gpu"])
    if not isinstance(resources, list) or not resources or not all(isinstance(r, str) for r in resources):
        problems.append(
            Problem(file, f"{path}.resources", "expected a list of resource names such as nvidia.com/gpu")
        )
    elif kind == "mps" and resources != ["nvidia.com/gpu"]:
        problems.append(
            Problem(
                file,
                f"{path}.resources",
                "expected MPS on nvidia.com/gpu only (device plugin v0.20.0 README)",
            )
        )
    return problems


def _check_mig(
    inv: Inventory, file: str, path: str, group: str, mig: Mapping[str, Any], *, custom: bool
) -> list[Problem]:
    problems: list[Problem] = []
    strategy = mig.get("strategy", "single")
    if strategy not in ("single", "mixed") and not specs.templated(strategy):
        problems.append(Problem(file, f"{path}.strategy", f"expected single or mixed; got {strategy!r}"))
    config, devices = mig.get("config"), mig.get("devices")
    if (config is None) == (devices is None):
        problems.append(
            Problem(
                file,
                path,
                "expected either config (a named layout of the GPU Operator's "
                "default-mig-parted-config, e.g. all-1g.10gb) or devices ({profile: count})",
            )
        )
        return problems
    profiles: list[tuple[str, str]] = []  # (key path, profile)
    if config is not None:
        if not isinstance(config, str) or specs.templated(config):
            return problems
        profile = named_config_profile(config)
        if profile is None and config not in WHOLE_GPU_CONFIGS:
            problems.append(
                Problem(
                    file,
                    f"{path}.config",
                    f"expected a named MIG config of the GPU Operator "
                    f"(all-<profile>, all-<profile>.me, {', '.join(WHOLE_GPU_CONFIGS)}); got "
                    f"{config!r} (custom profiles go in devices)",
                )
            )
            return problems
        if custom and config != "all-disabled":
            problems.append(
                Problem(
                    file,
                    f"{path}.config",
                    "expected custom profiles (devices) on every MIG "
                    "group once one group has them: a custom mig-parted config replaces the "
                    "GPU Operator's default-mig-parted-config, which names this layout",
                )
            )
        if profile is not None:
            profiles.append((f"{path}.config", profile))
    else:
        if not isinstance(devices, Mapping) or not devices:
            problems.append(
                Problem(file, f"{path}.devices", "expected a mapping {profile: count}, e.g. {'1g.10gb': 7}")
            )
            return problems
        for profile, count in devices.items():
            if not re.match(r"^\d+g\.\d+gb(\+me)?$", str(profile)):
                problems.append(
                    Problem(
                        file,
                        f"{path}.devices.{profile}",
                        "expected a MIG profile name such as 1g.10gb or 1g.10gb+me",
                    )
                )
            elif not isinstance(count, int) or isinstance(count, bool) or count < 1:
                problems.append(
                    Problem(file, f"{path}.devices.{profile}", f"expected a count >= 1; got {count!r}")
                )
            else:
                profiles.append((f"{path}.devices.{profile}", str(profile)))
    for host in inv.groups.get(group, ()):
        for device in sorted(_cached_device_ids(inv, host)):
            known = MIG_PROFILES.get(device)
            if known is None:
                continue
            product, valid = known
            for where, profile in profiles:
                if profile not in valid:
                    problems.append(
                        Problem(
                            file,
                            where,
                            f"expected a MIG profile of {host}'s GPU ({product}, "
                            f"device {device}, as gpu_facts found it): one of {', '.join(valid)}; "
                            f"{profile} is none",
                        )
                    )
            return problems  # one host of the group is enough: a group shares one layout
    return problems


def sharing_notes(inv: Inventory) -> list[str]:
    """What `gpubring plan` says about GPU sharing: time-slicing isolates neither memory nor faults."""
    found = _sharing(inv)
    if found is None:
        return []
    first, sharing, _where = found
    sliced = []
    replicas = inv.hosts[first].vars.get("gpu_operator_time_slicing_replicas", 1)
    if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 1:
        sliced.append("the whole cluster (gpu_operator_time_slicing_replicas)")
    if isinstance(sharing, Mapping):
        sliced += [f"group {g}" for g, s in sharing.items() if isinstance(s, Mapping) and "time_slicing" in s]
    if not sliced:
        return []
    return [
        f"warning: GPUs are time-sliced on {', '.join(sliced)}: time-slicing gives no memory isolation; pods "
        "sharing a GPU see all of its memory and share its fault domain (one crash ends them all: "
        "NVIDIA k8s-device-plugin README, v0.20.0). Use MIG or MPS where workloads must not reach each "
        "other's memory (docs/platform.md, GPU sharing per node group)."
    ]
