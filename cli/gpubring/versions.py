"""versions.yml: the pinned matrix, the inventory's overrides and the compatibility rules.

The rule language (documented in versions.yml too): a rule applies when every `when` setting has the
given value (no `when`: always); then each `require` entry bounds the version at `path` (a dotted path
in gpubring_versions) with `min`/`max` (literal versions), `min_path`/`max_path` (another pin), or
relates it to another pin with `same_major_as` or `equal`. Bounds compare on the number of components
they give: max "1.34" admits 1.34.x, min "580" admits 580.95.05. A leading "v" is ignored.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from gpubring import paths, yamlfile
from gpubring.yamlfile import Problem

VERSIONS_KEY = "gpubring_versions"
RULES_KEY = "gpubring_version_rules"
_REQ_KEYS = {"path", "min", "max", "min_path", "max_path", "same_major_as", "equal"}
_RULE_KEYS = {"id", "message", "when", "require", "source"}


class VersionsFileError(Exception):
    """versions.yml itself is broken (a project bug, reported like bad input)."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems


@dataclass(frozen=True)
class Requirement:
    path: str
    min: str | None = None
    max: str | None = None
    min_path: str | None = None
    max_path: str | None = None
    same_major_as: str | None = None
    equal: str | None = None


@dataclass(frozen=True)
class Rule:
    id: str
    message: str
    when: Mapping[str, Any]
    require: tuple[Requirement, ...]
    # Where the upstream says so: the document and the tag (or the chart file) the rule is taken from.
    source: str = ""


@dataclass(frozen=True)
class Failure:
    """One requirement that does not hold: the pin, what was expected, what it is."""

    path: str
    expected: str
    actual: str
    refs: tuple[str, ...] = ()  # the other pins the requirement names (min_path, same_major_as, ...)


@dataclass(frozen=True)
class RuleResult:
    id: str
    message: str
    ok: bool
    detail: str
    applicable: bool = True
    failures: tuple[Failure, ...] = ()

    @property
    def verdict(self) -> str:
        if not self.applicable:
            return "not applicable"
        return "pass" if self.ok else "fail"


# Loading -----------------------------------------------------------------------------------------

_CACHE: dict[Path, tuple[dict[str, Any], tuple[Rule, ...]]] = {}


def load_file(file: Path | None = None) -> tuple[dict[str, Any], tuple[Rule, ...]]:
    """The pinned matrix and the rules of versions.yml; VersionsFileError when the file is broken."""
    file = (file or paths.versions_file()).resolve()
    if file not in _CACHE:
        _CACHE[file] = _parse_file(file)
    pinned, rules = _CACHE[file]
    return copy.deepcopy(pinned), rules


def read_section(key: str, file: Path | None = None) -> Mapping[str, Any]:
    """versions.yml's top-level `key` (a mapping: the support windows, the upgrade hops); ValueError
    naming the file and key when it cannot be read or is not a mapping."""
    file = file or paths.versions_file()
    try:
        data = yamlfile.read(file, "versions.yml")
    except yamlfile.YamlError as exc:
        raise ValueError(str(exc.problem)) from None
    section = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(section, Mapping):
        raise ValueError(f"versions.yml: {key}: expected a mapping")
    return section


def load_pinned(file: Path | None = None) -> dict[str, Any]:
    return load_file(file)[0]


def load_rules(file: Path | None = None) -> tuple[Rule, ...]:
    return load_file(file)[1]


def _parse_file(file: Path) -> tuple[dict[str, Any], tuple[Rule, ...]]:
    name = "versions.yml"
    try:
        data = yamlfile.read(file, name)
    except yamlfile.YamlError as exc:
        raise VersionsFileError([exc.problem]) from None
    if not isinstance(data, Mapping) or not isinstance(data.get(VERSIONS_KEY), Mapping):
        raise VersionsFileError([Problem(name, VERSIONS_KEY, "expected a mapping of pins")])
    pinned: dict[str, Any] = dict(data[VERSIONS_KEY])
    problems: list[Problem] = []
    rules: list[Rule] = []
    raw_rules = data.get(RULES_KEY) or []
    if not isinstance(raw_rules, list):
        raise VersionsFileError([Problem(name, RULES_KEY, "expected a list of rules")])
    for i, raw in enumerate(raw_rules):
        where = f"{RULES_KEY}[{i}]"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str):
            problems.append(Problem(name, where, "expected a mapping with an id"))
            continue
        for key in set(raw) - _RULE_KEYS:
            problems.append(
                Problem(name, f"{where}.{key}", f"expected one of {', '.join(sorted(_RULE_KEYS))}")
            )
        when = raw.get("when") or {}
        reqs = raw.get("require") or []
        if not isinstance(when, Mapping) or not isinstance(reqs, list) or not reqs:
            problems.append(
                Problem(name, where, "expected `when` as a mapping and `require` as a non-empty list")
            )
            continue
        parsed: list[Requirement] = []
        for j, req in enumerate(reqs):
            req_where = f"{where}.require[{j}]"
            if not isinstance(req, Mapping) or set(req) - _REQ_KEYS or "path" not in req:
                problems.append(
                    Problem(
                        name,
                        req_where,
                        f"expected path plus any of {', '.join(sorted(_REQ_KEYS - {'path'}))}",
                    )
                )
                continue
            requirement = Requirement(**{k: str(v) for k, v in req.items()})
            for key in ("path", "min_path", "max_path", "same_major_as", "equal"):
                ref = getattr(requirement, key)
                if ref is not None and not isinstance(get_path(pinned, ref), str | int):
                    problems.append(
                        Problem(name, f"{req_where}.{key}", f"expected a pin in {VERSIONS_KEY}, got {ref}")
                    )
            for key in ("min", "max"):
                bound = getattr(requirement, key)
                if bound is not None and parse_version(bound) is None:
                    problems.append(Problem(name, f"{req_where}.{key}", f"expected a version, got {bound}"))
            parsed.append(requirement)
        rules.append(
            Rule(
                id=raw["id"],
                message=str(raw.get("message", "")),
                when=dict(when),
                require=tuple(parsed),
                source=str(raw.get("source", "")),
            )
        )
    if problems:
        raise VersionsFileError(problems)
    return pinned, tuple(rules)


# The matrix --------------------------------------------------------------------------------------


def get_path(tree: Mapping[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def flatten(tree: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) for every pin, in file order."""
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.extend(flatten(value, path + "."))
        else:
            out.append((path, value))
    return out


def effective(pinned: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pinned matrix with the overrides deep-merged over it (leaf values as strings)."""
    out: dict[str, Any] = copy.deepcopy(dict(pinned))
    for key, value in (overrides or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = effective(out[key], value)
        elif key in out and not isinstance(out[key], Mapping) and not isinstance(value, Mapping):
            out[key] = str(value)
    return out


def overridden_paths(pinned: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> list[str]:
    """Dotted paths of the pins an inventory set (to a different value or the same)."""
    if not isinstance(overrides, Mapping):
        return []
    known = dict(flatten(pinned))
    return [path for path, _ in flatten(overrides) if path in known]


# Rules -------------------------------------------------------------------------------------------


def parse_version(text: Any) -> tuple[int, ...] | None:
    """The release numbers of a version ("v25.10.0" -> (25, 10, 0)); None when it is no version."""
    if isinstance(text, bool) or text is None:
        return None
    value = str(text).strip()
    value = value[1:] if value[:1] in ("v", "V") else value
    try:
        return Version(value).release
    except InvalidVersion:
        return None


def compare(actual: tuple[int, ...], bound: tuple[int, ...]) -> int:
    """Compare on the components the bound gives: compare((1, 34, 2), (1, 34)) == 0."""
    n = len(bound)
    head = tuple(actual[:n]) + (0,) * max(0, n - len(actual))
    return (head > bound) - (head < bound)
