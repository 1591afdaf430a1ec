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
from gpubring.lab.shape import DISTROS, LabError, LabSpec

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


def lab_facts(
    spec: LabSpec, needed: Iterable[LabFact], previous: Mapping[str, Any] | None, out: Callable[[str], None]
) -> dict[str, Any]:
    """The facts the lab variables need, reusing what the folder's marker recorded for this distro."""
    facts: dict[str, Any] = {}
    recorded = (
        dict((previous or {}).get("facts") or {}) if (previous or {}).get("distro") == spec.distro else {}
    )
    for fact in sorted(needed, key=lambda f: f.name):
        if fact.name in recorded:
            facts[fact.name] = recorded[fact.name]
        elif fact == DEBIAN_KERNEL:
            facts[fact.name] = debian_kernel(spec.image)
            out(f"kernel: Debian's archive carries {facts[fact.name]}; GPU nodes build the driver for it")
        else:
            raise LabError(f"no way to find out {fact.name}")
    return facts
