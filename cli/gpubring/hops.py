"""The hops of a platform release's upgrade, and how its CRDs reach the cluster first.

Some operators support an upgrade only within a major line (YY.MM) or to the next one: the NVIDIA GPU
Operator and the Network Operator (versions.yml's `gpubring_upgrade_hops`, each rule cited there). Their
way from a recorded release to the pin goes through the newest patch of every major line in between,
which versions.yml lists as data (`lines`; the charts are in shared/upstream/charts). Every other
release goes straight to its pin.

CRDs: Helm installs a chart's crds/ on the first install and never upgrades them. A release whose
roles/<role>/templates/releases/<folder>/release.yml.j2 says `upgrade_crds: true` gets its pinned chart's
CRDs applied first by gpubring (roles/helm/tasks/crds.yml); the operators above upgrade theirs by their
charts' own pre-upgrade hooks (`crds` in versions.yml says which value turns it on).

Pure: reads versions.yml and the roles' release declarations only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from gpubring import catalog, paths
from gpubring.versions import parse_version, read_section

HOPS_KEY = "gpubring_upgrade_hops"
GPUBRING_CRDS = (
    "Helm never upgrades a chart's crds/: gpubring applies the pinned chart's CRDs first "
    "(helm show crds | kubectl apply --server-side, roles/helm/tasks/crds.yml)"
)


class HopsError(ValueError):
    """versions.yml's upgrade hops cannot be read (a project bug, reported like bad input)."""


class _Change(Protocol):
    @property
    def component(self) -> str: ...
    @property
    def old(self) -> str | None: ...
    @property
    def new(self) -> str: ...


@dataclass(frozen=True)
class HopRule:
    release: str  # the Helm release name
    pin: str  # its chart pin in gpubring_versions
    lines: tuple[str, ...]  # the newest patch of each consecutive major line, oldest first
    crds: str
    source: str


@dataclass(frozen=True)
class Road:
    """One release's way from the recorded version to the pin."""

    release: str
    old: str | None
    new: str
    via: tuple[str, ...]  # intermediate releases, in order
    crds: str  # how its CRDs are upgraded first ("" when the chart keeps none Helm would skip)
    note: str = ""

    @property
    def steps(self) -> tuple[str, ...]:
        return (*self.via, self.new)

    def __str__(self) -> str:
        path = " -> ".join([self.old or "(not recorded)", *self.steps])
        hops = f" ({len(self.steps)} upgrades, one major line at a time)" if self.via else ""
        text = f"{self.release} {path}{hops}"
        if self.note:
            text += f"; {self.note}"
        if self.crds:
            text += f"; CRDs: {self.crds}"
        return text


def _line(version: str) -> tuple[int, ...] | None:
    parsed = parse_version(version)
    return tuple(parsed[:2]) if parsed and len(parsed) >= 2 else None


def load_rules(file: Path | None = None) -> dict[str, HopRule]:
    """Release name -> its hop rule, from versions.yml's gpubring_upgrade_hops."""
    try:
        section = read_section(HOPS_KEY, file)
    except ValueError as exc:
        raise HopsError(str(exc)) from None
    out: dict[str, HopRule] = {}
    for key, raw in section.items():
        where = f"versions.yml: {HOPS_KEY}.{key}"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("lines"), list):
            raise HopsError(f"{where}: expected release, pin, lines (a list), crds and source")
        lines = tuple(str(v) for v in raw["lines"])
        keys = [_line(v) for v in lines]
        if None in keys or keys != sorted(set(keys), key=lambda k: k or ()):
            raise HopsError(f"{where}.lines: expected versions of consecutive major lines, oldest first")
        out[str(raw.get("release", key))] = HopRule(
            str(raw.get("release", key)),
            str(raw.get("pin", "")),
            lines,
            str(raw.get("crds", "")),
            str(raw.get("source", "")),
        )
    return out


def road(rule: HopRule | None, release: str, old: str | None, new: str, crds: str = "") -> Road:
    """The way of `release` from `old` to `new`: through the newest patch of every major line strictly
    between the two when a rule says the release moves one major line at a time."""
    if rule is None or old is None:
        return Road(release, old, new, (), crds)
    have, want = _line(old), _line(new)
    if have is None or want is None or want <= have:
        return Road(release, old, new, (), crds)
    via = tuple(v for v in rule.lines if (line := _line(v)) is not None and have < line < want)
    first = _line(rule.lines[0])
    note = ""
    if first is not None and have < first:
        note = (
            f"the record's {old} is older than the lines gpubring knows ({', '.join(rule.lines)}): check "
            "the operator's upgrade notes for the lines before"
        )
    return Road(release, old, new, via, crds, note)


@cache
def _gpubring_crds(root: Path) -> frozenset[str]:
    """The releases whose release.yml.j2 sets `upgrade_crds: true` (gpubring applies their CRDs first)."""
    names: set[str] = set()
    for decl in catalog.declared_releases(root):
        path = root / "roles" / decl.role / "templates" / "releases" / decl.folder / "release.yml.j2"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        if any(line.strip() == "upgrade_crds: true" for line in text.splitlines()):
            names.add(decl.name)
    return frozenset(names)


def roads(changes: Iterable[_Change], root: Path | None = None) -> list[Road]:
    """The roads of the releases an upgrade changes (gpubring.upgrade.Change), in the order given."""
    rules = load_rules()
    ours = _gpubring_crds((root or paths.project_root()).resolve())
    out: list[Road] = []
    for change in changes:
        rule = rules.get(change.component)
        crds = rule.crds if rule else GPUBRING_CRDS if change.component in ours else ""
        out.append(road(rule, change.component, change.old, change.new, crds))
    return out


def hop_stages(found: Iterable[Road]) -> list[dict[str, str]]:
    """The intermediate upgrades in stages: stage i upgrades every release that has an i-th hop to it
    (release name -> version). Empty when no release needs a hop."""
    stages: list[dict[str, str]] = []
    for r in found:
        for i, version in enumerate(r.via):
            while len(stages) <= i:
                stages.append({})
            stages[i][r.release] = version
    return stages


def as_dict(r: Road) -> dict[str, Any]:
    return {"release": r.release, "old": r.old, "new": r.new, "via": list(r.via), "crds": r.crds}


def _pins_text(stage: Mapping[str, str], rules: Mapping[str, HopRule]) -> str:
    return ", ".join(
        f"{rules[name].pin if name in rules else name}: {version}" for name, version in stage.items()
    )


def run_lines(found: Iterable[Road]) -> list[str]:
    """How the hops are taken: one `gpubring upgrade` per stage with the stage's versions pinned by the
    inventory, then the pins themselves. Empty when no release needs a hop."""
    found = list(found)
    stages = hop_stages(found)
    if not stages:
        return []
    rules = load_rules()
    out = [f"the operators move one major line at a time: {len(stages) + 1} runs of `gpubring upgrade`"]
    for i, stage in enumerate(stages, 1):
        out.append(
            f"  run {i}: pin in the inventory's group_vars/all/versions.yml (gpubring_versions) "
            f"{_pins_text(stage, rules)}; the run takes every other change of this plan too"
        )
    out.append(f"  run {len(stages) + 1}: remove those pins; the releases go to versions.yml's pins")
    return out


def refusal(found: Iterable[Road]) -> str:
    """Why `gpubring upgrade` (not --check) stops before any host when a release needs a hop."""
    found = [r for r in found if r.via]
    roads_text = "; ".join(f"{r.release} {' -> '.join([r.old or '', *r.steps])}" for r in found)
    rules = load_rules()
    stage = hop_stages(found)[0]
    return (
        f"{roads_text}: the operator supports an upgrade only within a major line or to the next one "
        f"({'; '.join(rules[r.release].source for r in found if r.release in rules)}). Take the hop "
        f"first: pin {_pins_text(stage, rules)} under gpubring_versions in the inventory's "
        "group_vars/all/versions.yml and run `gpubring upgrade` (it takes the rest of the plan too), then "
        "remove those pins and run it again. `gpubring upgrade --check` prints the whole road"
    )
