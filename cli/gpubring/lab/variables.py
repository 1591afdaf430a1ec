"""What a container cannot do, said through the roles' own variables: the lab's inventory variables.

The one list is vars.yml next to this module (read through gpubring.yamlfile, shipped in the wheel).
Each entry: name, group (all or gpu_nodes), why, either `value` (a constant) or `fact` (a value
`lab up` finds out, see lab_facts), and optionally `distros` (the lab distros it applies to; all
by default). A variable is written only when a role's meta/argument_specs.yml (or settings.yml for
gpubring_*) declares it, so a role that does not have it yet is not broken by it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from gpubring import yamlfile
from gpubring.lab.docker import debian_kernel
from gpubring.lab.shape import DISTROS, GROUP_GPU, LabError, LabSpec, Node, image_of, lab_nodes

VARS_FILE = Path(__file__).with_name("vars.yml")
GROUPS = ("all", "gpu_nodes")


@dataclass(frozen=True)
class LabFact:
    """A lab variable's value that `lab up` finds out (see lab_facts), named here."""

    name: str


# The kernel Debian's archive carries for the lab's distro (`6.1.0-41-amd64`): a container runs the
# machine's kernel, which need not be a Debian one, so the driver is built for this one.
DEBIAN_KERNEL = LabFact("debian_kernel")


@dataclass(frozen=True)
class LabVar:
    """One inventory variable the lab sets, the group it goes to and why a lab needs it."""

    name: str
    value: Any  # a constant, or a LabFact found out by `lab up`
    group: Literal["all", "gpu_nodes"]
    why: str
    distros: tuple[str, ...] = DISTROS  # the lab distros it applies to


FACTS = {DEBIAN_KERNEL.name: DEBIAN_KERNEL}


def _entry(item: Any, where: str) -> LabVar:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected a mapping with name, group, why and value or fact")
    unknown = set(item) - {"name", "group", "why", "value", "fact", "distros"}
    group = item.get("group")
    fact = item.get("fact")
    distros = item.get("distros", list(DISTROS))
    problems = [f"unknown keys {sorted(unknown)}"] if unknown else []
    if not isinstance(item.get("name"), str) or not isinstance(item.get("why"), str):
        problems.append("name and why are strings")
    if group not in GROUPS:
        problems.append(f"group is one of {', '.join(GROUPS)}")
    if ("value" in item) == ("fact" in item):
        problems.append("exactly one of value and fact")
    if fact is not None and fact not in FACTS:
        problems.append(f"fact is one of {', '.join(FACTS)}")
    if not isinstance(distros, list) or not set(distros) <= set(DISTROS):
        problems.append(f"distros is a list of {', '.join(DISTROS)}")
    if problems:
        raise ValueError(f"{where} ({item.get('name', '?')}): expected " + "; ".join(problems))
    value = FACTS[fact] if fact is not None else item["value"]
    return LabVar(item["name"], value, "all" if group == "all" else "gpu_nodes", item["why"], tuple(distros))


@cache
def lab_vars(path: Path = VARS_FILE) -> tuple[LabVar, ...]:
    """The lab variables of vars.yml, in order (ValueError when the file is malformed)."""
    try:
        data = yamlfile.read(path, str(path))
    except yamlfile.YamlError as exc:
        raise ValueError(str(exc.problem)) from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of lab variables")
    return tuple(_entry(item, f"{path}: entry {number}") for number, item in enumerate(data, start=1))


def declared_variables(root: Path | None = None) -> frozenset[str]:
    """Every key that inventory validation accepts as declared: settings.yml, role argument specs and
    defaults (gpubring.validation.specs, the same table `gpubring check` uses)."""
    from gpubring.validation.specs import load_specs

    return frozenset(load_specs(root).keys)


def needed_facts(declared: Iterable[str], distro: str, table: Sequence[LabVar] | None = None) -> set[LabFact]:
    """The facts `lab up` has to find out for the variables it will write."""
    known = set(declared)
    return {
        v.value
        for v in (lab_vars() if table is None else table)
        if isinstance(v.value, LabFact) and v.name in known and distro in v.distros
    }


def lab_group_vars(
    declared: Iterable[str],
    distro: str = DISTROS[0],
    facts: Mapping[str, Any] | None = None,
    table: Sequence[LabVar] | None = None,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The group_vars the lab writes ({"all": {...}, "gpu_nodes": {...}}) and the names left out."""
    known = set(declared)
    out: dict[str, dict[str, Any]] = {"all": {}, "gpu_nodes": {}}
    left_out: list[str] = []
    for var in lab_vars() if table is None else table:
        if distro not in var.distros:
            continue
        if var.name not in known:
            left_out.append(var.name)
            continue
        value = var.value
        if isinstance(value, LabFact):
            if not facts or value.name not in facts:
                raise LabError(f"{var.name}: the lab did not find out {value.name}")
            value = facts[value.name]
        out[var.group][var.name] = value
    return out, left_out


def _members(var: LabVar, nodes: Sequence[Node]) -> list[Node]:
    return [n for n in nodes if var.group == "all" or GROUP_GPU in n.groups]


def facts_by_distro(
    declared: Iterable[str], spec: LabSpec, table: Sequence[LabVar] | None = None
) -> dict[str, set[LabFact]]:
    """The facts `lab up` has to find out, per distro: a fact is asked of a distro only when a node of
    that distro gets the variable (a lab whose GPU nodes alone run debian13 asks debian13's kernel)."""
    known = set(declared)
    nodes = lab_nodes(spec)
    needed: dict[str, set[LabFact]] = {}
    for var in lab_vars() if table is None else table:
        if not isinstance(var.value, LabFact) or var.name not in known:
            continue
        for node in _members(var, nodes):
            distro = spec.distro_of(node)
            if distro in var.distros:
                needed.setdefault(distro, set()).add(var.value)
    return needed


def lab_inventory_vars(
    declared: Iterable[str],
    spec: LabSpec,
    facts: Mapping[str, Mapping[str, Any]] | None = None,
    table: Sequence[LabVar] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
    """The lab's variables as group_vars ({"all": {...}, "gpu_nodes": {...}}) and host_vars
    ({node: {...}}), and the names left out; `facts` per distro ({"debian13": {"debian_kernel": ...}}).

    A variable goes to its group's group_vars when it applies to every node of the group with one value
    (always, in a lab of one distro); in a lab whose GPU nodes run another distro (--gpu-distro), a
    variable that applies to one distro only, or whose fact differs between them, goes to the
    host_vars of each node it applies to instead."""
    known = set(declared)
    nodes = lab_nodes(spec)
    group_vars: dict[str, dict[str, Any]] = {"all": {}, "gpu_nodes": {}}
    host_vars: dict[str, dict[str, Any]] = {}
    left_out: list[str] = []
    for var in lab_vars() if table is None else table:
        members = _members(var, nodes)
        targets = [n for n in members if spec.distro_of(n) in var.distros]
        if not targets:
            continue
        if var.name not in known:
            left_out.append(var.name)
            continue
        values: dict[str, Any] = {}
        for node in targets:
            value = var.value
            if isinstance(value, LabFact):
                distro = spec.distro_of(node)
                found = (facts or {}).get(distro) or {}
                if value.name not in found:
                    raise LabError(f"{var.name}: the lab did not find out {value.name} for {distro}")
                value = found[value.name]
            values[node.name] = value
        distinct = {repr(v) for v in values.values()}
        if len(targets) == len(members) and len(distinct) == 1:
            group_vars[var.group][var.name] = values[targets[0].name]
        else:
            for name, value in values.items():
                host_vars.setdefault(name, {})[var.name] = value
    return group_vars, host_vars, left_out


def lab_facts(
    spec: LabSpec,
    needed: Mapping[str, Iterable[LabFact]],
    previous: Mapping[str, Any] | None,
    out: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """The facts the lab variables need, per distro, reusing what the folder's marker recorded."""
    recorded_all = (previous or {}).get("facts_by_distro")
    recorded_all = recorded_all if isinstance(recorded_all, dict) else {}
    facts: dict[str, dict[str, Any]] = {}
    for distro in sorted(needed):
        recorded = recorded_all.get(distro)
        recorded = recorded if isinstance(recorded, dict) else {}
        for fact in sorted(needed[distro], key=lambda f: f.name):
            if fact.name in recorded:
                facts.setdefault(distro, {})[fact.name] = recorded[fact.name]
            elif fact == DEBIAN_KERNEL:
                value = debian_kernel(image_of(distro))
                facts.setdefault(distro, {})[fact.name] = value
                out(f"kernel: Debian's archive carries {value} ({distro}): GPU nodes build the driver for it")
            else:
                raise LabError(f"no way to find out {fact.name}")
    return facts
