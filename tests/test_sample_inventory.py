"""inventories/prod documents every input an operator may set, in the folder Ansible reads it from.

The inputs are read at test time, so a role that gains an input fails here until the sample has it:
- every cluster-wide setting of settings.yml;
- every option of every role's argument spec, entry point `main`. Only `main` is read: the other
  entry points (helm's `release` and `role_releases`, kubeadm_join's `reset`, ...) are called by
  roles and playbooks with their own arguments, not configured from an inventory. No allow-list.

An entry is a top-level key (`key: value`) or a commented one (`# key: value`, a block value on the
following `#   ` lines), with a one-line description comment right above it, once in the sample.
A commented entry shows the input's default: its value must fit the spec and, unless the default is
a Jinja expression, equal the default (defaults/main.yml when the spec declares none).

Where an entry goes follows where its role runs (the phase playbooks, resolved on the sample's
groups): a role that runs only on GPU nodes reads group_vars/gpu_nodes; every other role, and every
gpubring_* setting, group_vars/all. An input of a GPU-node role that a role running only outside the
GPU nodes also reads (in its defaults, vars, tasks, handlers or templates) goes to group_vars/all
too, or that role would not see it (nvidia_container_toolkit_owner, which the GPU Operator follows).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpubring import paths, yamlfile
from gpubring.inventory import load_inventory
from gpubring.phases import plan_phases
from gpubring.validation import specs
from helpers import REPO

SAMPLE = REPO / "inventories" / "prod"
GPU_GROUP = "gpu_nodes"
# Role folders whose files are evaluated by Ansible on the role's hosts (not meta/ or README.md).
EVALUATED = ("defaults", "vars", "tasks", "handlers", "templates")

KEY_LINE = re.compile(r"^(?P<hash># ?)?(?P<key>[a-z][a-z0-9_]*):(?:\s|$)")
BLOCK_LINE = re.compile(r"^# {2,}\S")  # a commented block value: `#   - name: h100`
DESCRIPTION = re.compile(r"^# \S")


@dataclass(frozen=True)
class Input:
    """One input an operator may set: its owner (a role, or `settings.yml`) and its declaration."""

    key: str
    owner: str
    spec: Mapping[str, Any]
    default: Any


@dataclass(frozen=True)
class Entry:
    """One key of the sample, set or commented."""

    file: str  # relative to the inventory folder
    line: int
    key: str
    commented: bool
    value: Any
    described: bool
    error: str = ""


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@cache
def inputs() -> dict[str, Input]:
    """settings.yml's options and the options of every role's entry point main."""
    out: dict[str, Input] = {}
    for key, spec in (_load(paths.settings_file())["options"] or {}).items():
        out[key] = Input(key, "settings.yml", spec, spec.get("default"))
    for spec_file in sorted(paths.roles_dir().glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        main = (_load(spec_file) or {}).get("argument_specs", {}).get("main") or {}
        defaults_file = spec_file.parent.parent / "defaults" / "main.yml"
        defaults = (_load(defaults_file) if defaults_file.is_file() else None) or {}
        for key, spec in (main.get("options") or {}).items():
            out[key] = Input(key, role, spec, spec["default"] if "default" in spec else defaults.get(key))
    return out


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_templated(v) for v in value.values())
    if isinstance(value, list):
        return any(_templated(v) for v in value)
    return False


def _role_text(role: str) -> str:
    folder = paths.roles_dir() / role
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for sub in EVALUATED
        for p in sorted((folder / sub).rglob("*"))
        if p.is_file()
    )


@cache
def expected_groups() -> dict[str, str]:
    """Input -> the group_vars folder it belongs in (`all` or `gpu_nodes`), by the rule above."""
    inv = load_inventory(SAMPLE)
    gpu_hosts = set(inv.groups[GPU_GROUP])
    runs_on: dict[str, set[str]] = {}
    for phase in plan_phases(inv):
        for play in phase.plays:
            for role in play.roles:
                runs_on.setdefault(role, set()).update(play.hosts)
    gpu_roles = {role for role, hosts in runs_on.items() if hosts and hosts <= gpu_hosts}
    elsewhere = "\n".join(_role_text(r) for r, hosts in sorted(runs_on.items()) if not hosts & gpu_hosts)
    out: dict[str, str] = {}
    for key, item in inputs().items():
        gpu = item.owner in gpu_roles and not re.search(rf"\b{key}\b", elsewhere)
        out[key] = GPU_GROUP if gpu else "all"
    return out


def entries(root: Path) -> Iterator[Entry]:
    """Every top-level key, set or commented, of the group_vars files of an inventory."""
    for path in sorted((root / "group_vars").rglob("*.yml")):
        rel = path.relative_to(root).as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        data = yamlfile.load("\n".join(lines), rel) or {}  # reads !vault and !unsafe too
        for i, line in enumerate(lines):
            m = KEY_LINE.match(line)
            if not m:
                continue
            described = i > 0 and bool(DESCRIPTION.match(lines[i - 1])) and not KEY_LINE.match(lines[i - 1])
            if not m["hash"]:
                yield Entry(rel, i + 1, m["key"], False, data.get(m["key"]), described)
                continue
            block = [line[len(m["hash"]) :]]
            block += [ln[2:] for ln in lines[i + 1 :][: _block_length(lines[i + 1 :])]]
            try:
                value = (yaml.safe_load("\n".join(block)) or {})[m["key"]]
            except (yaml.YAMLError, KeyError, TypeError) as exc:
                yield Entry(rel, i + 1, m["key"], True, None, described, f"not YAML once uncommented: {exc}")
                continue
            yield Entry(rel, i + 1, m["key"], True, value, described)


def _block_length(rest: list[str]) -> int:
    n = 0
    while n < len(rest) and BLOCK_LINE.match(rest[n]):
        n += 1
    return n


def where_to_add(key: str, found: list[Entry]) -> str:
    """The file an input's entry belongs in: the one holding most entries of the same owner in the
    right folder, else a new file in that folder."""
    item, group = inputs()[key], expected_groups()[key]
    owner_files = Counter(
        e.file
        for e in found
        if e.key in inputs()
        and inputs()[e.key].owner == item.owner
        and e.file.startswith(f"group_vars/{group}/")
    )
    if owner_files:
        return owner_files.most_common(1)[0][0]
    name = item.owner if item.owner != "settings.yml" else "cluster"
    return f"group_vars/{group}/{name}.yml (a new file)"


def missing_entries(root: Path) -> list[str]:
    found = list(entries(root))
    present = {e.key for e in found}
    return [
        f"{item.owner}: {key} has no entry in {root.name}/; add a one-line description and `{key}: <value>` "
        f"or `# {key}: <default>` to {where_to_add(key, found)}"
        for key, item in inputs().items()
        if key not in present
    ]


def misplaced_entries(root: Path) -> list[str]:
    out = []
    for e in entries(root):
        if e.key not in inputs():
            continue
        group = expected_groups()[e.key]
        why = f"its role runs only on {GPU_GROUP}" if group == GPU_GROUP else f"read outside {GPU_GROUP}"
        if not e.file.startswith(f"group_vars/{group}/"):
            out.append(
                f"{e.file}:{e.line}: {e.key} ({inputs()[e.key].owner}) belongs in group_vars/{group}/ ({why})"
            )
    return out


def badly_documented_entries(root: Path) -> list[str]:
    found = [e for e in entries(root) if e.key in inputs()]
    out = [
        f"{e.file}:{e.line}: {e.key} has no description comment right above it"
        for e in found
        if not e.described
    ]
    for key, count in Counter(e.key for e in found).items():
        if count > 1:
            places = ", ".join(f"{e.file}:{e.line}" for e in found if e.key == key)
            out.append(f"{key} has {count} entries ({places}); keep one")
    return out


def wrong_commented_entries(root: Path) -> list[str]:
    table = specs.load_specs()
    out = []
    for e in entries(root):
        if not e.commented:
            continue
        where = f"{e.file}:{e.line}: # {e.key}"
        if e.error:
            out.append(f"{where}: {e.error}")
            continue
        unknown = table.unknown_message(e.key)
        if unknown is not None:
            out.append(f"{where}: {unknown}")
            continue
        item = inputs().get(e.key)
        if item is None:
            continue  # a commented key outside gpubring's namespaces (ansible_port, ...)
        spec = table.keys[e.key]
        out += [f"{where}: {path}: {expected}" for path, expected in specs.check_value(spec, e.value, e.key)]
        if not _templated(item.default) and e.value != item.default:
            out.append(
                f"{where}: shows {e.value!r}, but the default in {item.owner} is {item.default!r}; "
                "show the default, or set the value (uncommented)"
            )
    return out


# -- the sample ------------------------------------------------------------------------------------


def test_the_rule_reads_roles_and_settings() -> None:
    """The placement rule, derived from the playbooks, puts the GPU-node roles' inputs in gpu_nodes."""
    assert inputs()["gpubring_cni"].owner == "settings.yml" and inputs()["rdma_stack"].owner == "rdma"
    groups = expected_groups()
    assert groups["rdma_stack"] == groups["kubelet_topology_manager_policy"] == GPU_GROUP
    assert groups["gpu_operator_mig_strategy"] == groups["kernel_modules"] == groups["gpubring_cni"] == "all"
    # Read by the GPU Operator on control_plane[0] as well as by the toolkit role on the GPU nodes.
    assert groups["nvidia_container_toolkit_owner"] == "all"
    assert groups["nvidia_container_toolkit_version"] == GPU_GROUP
    # Options of entry points other than main are not inventory inputs.
    assert "helm_release" not in inputs() and "helm_role_releases" not in inputs()


def test_every_setting_and_role_input_has_an_entry() -> None:
    missing = missing_entries(SAMPLE)
    assert not missing, "\n".join(missing)


def test_every_entry_is_in_the_folder_its_role_reads() -> None:
    misplaced = misplaced_entries(SAMPLE)
    assert not misplaced, "\n".join(misplaced)


def test_every_entry_is_described_once() -> None:
    problems = badly_documented_entries(SAMPLE)
    assert not problems, "\n".join(problems)


def test_commented_entries_show_valid_defaults() -> None:
    problems = wrong_commented_entries(SAMPLE)
    assert not problems, "\n".join(problems)
    commented = [e for e in entries(SAMPLE) if e.commented and e.key in inputs()]
    assert len(commented) > len(inputs()) // 2  # most inputs are shown at their default


def test_the_sample_sets_the_production_choices() -> None:
    """What the sample chooses for an 8-GPU HGX fleet with ConnectX NICs, as Ansible would see it."""
    inv = load_inventory(SAMPLE)
    gpu, cp = inv.hosts["gpu-1"].vars, inv.hosts["cp-1"].vars
    assert gpu["nvidia_driver_source"] == "cuda_repo"
    assert gpu["rdma_stack"] == "inbox" and gpu["rdma_disable_acs"] is True
    assert (gpu["kubelet_topology_manager_policy"], gpu["kubelet_topology_manager_scope"]) == (
        "best-effort",
        "pod",
    )
    assert gpu["nvidia_container_toolkit_owner"] == cp["nvidia_container_toolkit_owner"] == "host"
    assert cp["containerd_source"] == "docker"  # containerd.io at the pin: CDI needs containerd >= 1.7
    # Whole GPUs only on gpu_train: gpu_infer's are MIG devices and gpu_dev's time-sliced and renamed
    # (nvidia.com/gpu.shared), so the flavor's and the teams' whole-GPU quotas count gpu_train's 16.
    sharing = cp["gpu_operator_sharing"]
    assert set(inv.groups[GPU_GROUP]) == set(inv.groups["gpu_train"]) | set(inv.groups["gpu_infer"]) | set(
        inv.groups["gpu_dev"]
    )
    assert "gpu_train" not in sharing and sharing["gpu_infer"]["mig"]["strategy"] == "mixed"
    assert sharing["gpu_dev"]["time_slicing"]["rename"] is True
    (flavor,) = cp["schedulers_kueue_flavors"]
    whole = 8 * len(inv.groups["gpu_train"])
    assert flavor["quotas"]["nvidia.com/gpu"] == whole == sum(t["quota"]["gpu"] for t in cp["gpubring_teams"])


# -- the checks catch what they are for -----------------------------------------------------------


def _drop_lines(path: Path, key: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = [ln for ln in lines if not ln.startswith((f"{key}:", f"# {key}:"))]
    assert len(kept) == len(lines) - 1
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")


@pytest.fixture
def copy(make_inventory: Callable[..., Path]) -> Path:
    """A copy of the sample to break."""
    return make_inventory()


def test_a_missing_input_names_role_option_and_file(copy: Path) -> None:
    _drop_lines(copy / "group_vars/gpu_nodes/rdma.yml", "rdma_stack")
    _drop_lines(copy / "group_vars/all/schedulers.yml", "schedulers_kai_queues")
    assert missing_entries(copy) == [
        f"rdma: rdma_stack has no entry in {copy.name}/; add a one-line description and "
        "`rdma_stack: <value>` or `# rdma_stack: <default>` to group_vars/gpu_nodes/rdma.yml",
        f"schedulers: schedulers_kai_queues has no entry in {copy.name}/; add a one-line description and "
        "`schedulers_kai_queues: <value>` or `# schedulers_kai_queues: <default>` to "
        "group_vars/all/schedulers.yml",
    ]


def test_wrong_placement_description_and_defaults_are_reported(copy: Path) -> None:
    rdma = copy / "group_vars/gpu_nodes/rdma.yml"
    text = rdma.read_text(encoding="utf-8")
    text = text.replace("# rdma_memlock_limit: unlimited", "# rdma_memlock_limit: 65536")
    text = text.replace("# rdma_verify: true", "# rdma_verify: maybe")
    text = text.replace("# rdma_kernel_modules: []", "# rdma_kernel_modles: []")
    rdma.write_text(text, encoding="utf-8")
    (copy / "group_vars/all/extra.yml").write_text(
        "---\nrdma_stack: inbox\n# Preflight.\n# preflight_min_kernel: '5.14'\n", encoding="utf-8"
    )
    wrong = "\n".join(wrong_commented_entries(copy))
    assert "rdma_memlock_limit: shows 65536, but the default in rdma is 'unlimited'" in wrong
    assert "# rdma_verify: rdma_verify: expected a boolean (true or false), got 'maybe'" in wrong
    assert "# rdma_kernel_modles: unknown key" in wrong and "did you mean rdma_kernel_modules?" in wrong
    misplaced = misplaced_entries(copy)
    assert any(
        m.startswith("group_vars/all/extra.yml:2: rdma_stack (rdma) belongs in group_vars/gpu_nodes/")
        for m in misplaced
    )
    documented = "\n".join(badly_documented_entries(copy))
    assert "group_vars/all/extra.yml:2: rdma_stack has no description comment right above it" in documented
    assert "rdma_stack has 2 entries" in documented and "preflight_min_kernel has 2 entries" in documented
