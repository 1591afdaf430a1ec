"""The phase playbooks: which plays each runs, on which inventory hosts, with which roles.

Read with PyYAML, never with Ansible: `gpubring plan` and the runner use it before anything runs.
Host patterns follow Ansible's rules for what gpubring's playbooks use: groups, hosts, `all`/`*`,
globs, `a:b` or `a,b` (union), `a:&b` (intersection), `a:!b` (exclusion), and subscripts
`g[0]`, `g[-1]`, `g[1:3]` (inclusive, as in Ansible), `g[2:]`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpubring import paths, yamlfile

if TYPE_CHECKING:
    from gpubring.model import Inventory

PHASES = ("preflight", "host", "cluster", "platform", "verify")

_TERM = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]*):([0-9]*))\]$")


@dataclass(frozen=True)
class PlaySpec:
    """A play as written in a playbook."""

    name: str
    hosts_pattern: str
    roles: tuple[str, ...]
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Play:
    """A play with its pattern resolved against an inventory."""

    name: str
    hosts_pattern: str
    hosts: tuple[str, ...]
    roles: tuple[str, ...]


@dataclass(frozen=True)
class PhasePlan:
    phase: str
    playbook: Path
    enabled: bool
    plays: tuple[Play, ...]


class PlaybookError(Exception):
    """A phase playbook cannot be read (a broken installation, reported like bad input)."""


class PhaseError(ValueError):
    """Phases asked for that do not exist, or nothing left to run."""


def short_role(entry: Any) -> str:
    """`gpubring.core.kernel`, `{role: gpubring.core.kernel}` or `{name: kernel}` -> `kernel`."""
    if isinstance(entry, Mapping):
        entry = entry.get("role") or entry.get("name") or ""
    return str(entry).rsplit(".", 1)[-1].rsplit("/", 1)[-1]


_PLAYBOOK_CACHE: dict[Path, tuple[PlaySpec, ...]] = {}


def read_playbook(path: Path, _seen: frozenset[Path] = frozenset()) -> tuple[PlaySpec, ...]:
    """The plays of a playbook, following import_playbook (relative to the importing file)."""
    path = path.resolve()
    if path in _PLAYBOOK_CACHE:
        return _PLAYBOOK_CACHE[path]
    if path in _seen:
        raise PlaybookError(f"{path}: import_playbook loops back to this file")
    try:
        data = yamlfile.read(path, str(path))
    except yamlfile.YamlError as exc:
        raise PlaybookError(
            f"{path}: cannot be read as YAML ({exc.problem.key}: {exc.problem.expected})"
        ) from None
    if not isinstance(data, list):
        raise PlaybookError(f"{path}: expected a list of plays")
    plays: list[PlaySpec] = []
    for item in data:
        if not isinstance(item, Mapping):
            raise PlaybookError(f"{path}: expected every play to be a mapping")
        imported = item.get("ansible.builtin.import_playbook") or item.get("import_playbook")
        if imported:
            plays.extend(read_playbook(path.parent / str(imported), _seen | {path}))
            continue
        hosts = item.get("hosts", "")
        pattern = ",".join(map(str, hosts)) if isinstance(hosts, list) else str(hosts)
        roles = tuple(short_role(r) for r in item.get("roles") or [])
        tags = item.get("tags") or []
        plays.append(
            PlaySpec(
                name=str(item.get("name", "")),
                hosts_pattern=pattern,
                roles=roles,
                tags=tuple(map(str, tags if isinstance(tags, list) else [tags])),
            )
        )
    result = tuple(plays)
    _PLAYBOOK_CACHE[path] = result
    return result


def split_pattern(pattern: str) -> list[str]:
    terms = pattern.split(",") if "," in pattern else _TERM.findall(pattern)
    return [t.strip() for t in terms if t.strip()]


def _match(expr: str, groups: Mapping[str, Sequence[str]], hosts: Sequence[str]) -> list[str]:
    if expr in ("all", "*"):
        return list(hosts)
    found: list[str] = []
    if expr.startswith("~"):
        regex = re.compile(expr[1:])
        matched_groups = [g for g in groups if regex.match(g)]
        matched_hosts = [h for h in hosts if regex.match(h)]
    else:
        matched_groups = [g for g in groups if fnmatch.fnmatchcase(g, expr)]
        special = any(c in expr for c in ".?*[")
        matched_hosts = (
            [h for h in hosts if fnmatch.fnmatchcase(h, expr)] if not matched_groups or special else []
        )
    for group in matched_groups:
        found.extend(groups[group])
    found.extend(matched_hosts)
    return list(dict.fromkeys(found))


def _subscript(expr: str) -> tuple[str, tuple[int, int | None] | None]:
    if expr.startswith("~"):
        return expr, None
    m = _SUBSCRIPT.match(expr)
    if not m:
        return expr, None
    base, idx, start, end = m.groups()
    if idx is not None:
        return base, (int(idx), None)
    return base, (int(start or 0), int(end) if end else -1)


def resolve_pattern(
    pattern: str, groups: Mapping[str, Sequence[str]], hosts: Sequence[str]
) -> tuple[str, ...]:
    """The hosts (in inventory order) that an Ansible host pattern selects."""
    terms = split_pattern(pattern)
    regular = [t for t in terms if t[0] not in "!&"]
    ordered = (regular or ["all"]) + [t for t in terms if t[0] == "&"] + [t for t in terms if t[0] == "!"]
    host_set = set(hosts)
    selected: list[str] = []
    for term in ordered:
        expr = term[1:] if term[0] in "!&" else term
        if expr in host_set and term[0] not in "!&":
            matched = [expr]
        else:
            base, sub = _subscript(expr)
            matched = _match(base, groups, hosts)
            if sub is not None and matched:
                start, end = sub
                if end is None:
                    matched = [matched[start]] if -len(matched) <= start < len(matched) else []
                else:
                    matched = matched[start : (len(matched) if end == -1 else end + 1)]
        if term[0] == "!":
            drop = set(matched)
            selected = [h for h in selected if h not in drop]
        elif term[0] == "&":
            keep = set(matched)
            selected = [h for h in selected if h in keep]
        else:
            seen = set(selected)
            selected.extend(h for h in matched if h not in seen)
    return tuple(selected)


def phase_playbook(phase: str, playbooks_dir: Path | None = None) -> Path:
    return (playbooks_dir or paths.playbooks_dir()) / f"{phase}.yml"


def plan_phases(inv: Inventory, playbooks_dir: Path | None = None) -> list[PhasePlan]:
    """Every phase, in order, with its plays resolved against the inventory; `enabled` says whether
    the inventory's gpubring_phases lets it run (Inventory.phases_skipped_reason says why not)."""
    order = list(inv.hosts)
    plans: list[PhasePlan] = []
    for phase in PHASES:
        playbook = phase_playbook(phase, playbooks_dir)
        plays = tuple(
            Play(
                name=spec.name,
                hosts_pattern=spec.hosts_pattern,
                hosts=resolve_pattern(spec.hosts_pattern, inv.groups, order),
                roles=spec.roles,
            )
            for spec in read_playbook(playbook)
        )
        plans.append(PhasePlan(phase=phase, playbook=playbook, enabled=phase in inv.phases, plays=plays))
    return plans


@dataclass(frozen=True)
class PhaseSelection:
    run: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]


def _phase_list(value: str, allowed: Sequence[str], option: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        shown = ", ".join(unknown) if unknown else "(empty)"
        raise PhaseError(f"{option}: unknown phase {shown}; the phases are {', '.join(allowed)}")
    return names


def select_phases(
    all_phases: Sequence[str],
    only: str | None,
    from_phase: str | None,
    inventory_phases: Sequence[str],
    inventory_reason: str = "",
    *,
    check: bool = False,
    check_only: Sequence[str] = (),
) -> PhaseSelection:
    """The phases to run, in their fixed order, and every other one with the reason it is skipped.

    A phase the inventory leaves out but lists in gpubring_phases_check_only runs when `check` is set
    (check mode changes nothing)."""
    if only and from_phase:
        raise PhaseError("--only and --from cannot be used together")
    asked: list[str] = list(all_phases)
    why_not = ""
    if only:
        asked = _phase_list(only, all_phases, "--only")
        why_not = f"not asked for (--only {','.join(p for p in all_phases if p in asked)})"
    elif from_phase:
        start = _phase_list(from_phase, all_phases, "--from")
        if len(start) != 1:
            raise PhaseError(f"--from takes one phase; the phases are {', '.join(all_phases)}")
        asked = list(all_phases[all_phases.index(start[0]) :])
        why_not = f"not asked for (--from {start[0]})"
    run: list[str] = []
    skipped: list[tuple[str, str]] = []
    for phase in all_phases:
        if phase not in asked:
            skipped.append((phase, why_not))
        elif phase in check_only and check:
            run.append(phase)
        elif phase not in inventory_phases:
            reason = inventory_reason.strip() or "not in this inventory's gpubring_phases"
            if phase in check_only:
                reason += " (it runs in check mode: gpubring up --check)"
            skipped.append((phase, f"the inventory leaves it out: {reason}"))
        else:
            run.append(phase)
    if not run:
        detail = "; ".join(f"{p}: {r}" for p, r in skipped)
        raise PhaseError(f"no phase left to run ({detail})")
    return PhaseSelection(run=tuple(run), skipped=tuple(skipped))
