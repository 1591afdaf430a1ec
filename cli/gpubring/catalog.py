"""The Helm releases the roles declare, read from the role folders and versions.yml (no Ansible).

A release is declared once, in its role: a folder roles/<role>/templates/releases/<folder>/ whose
release.yml.j2 names it, listed in order in the role's `__<role>_releases` (vars/main.yml), its
chart version read from a role default that reads its pin in versions.yml
(`<role>_..._version: "{{ gpubring_matrix.<pin> }}"`). Everything else that needs the list of
releases derives it from here: `gpubring upgrade` (the releases whose chart pin it upgrades), and the
tests that check every release against its pinned chart.

release.yml.j2's scalar fields (name, chart, version, namespace, repo) are each one line; they are
evaluated here with Jinja2 alone over the role's defaults and the pinned matrix, which is what a run
gets before an inventory overrides anything. A field that needs more (another role's variable, an
Ansible-only filter) is a CatalogError naming the file: the release must say it more plainly. While
the version is evaluated, the pins it reads are recorded: exactly one is the release's pin.

`gpubring plan` renders the releases of an inventory with Ansible itself (releases.py); this module
only says which releases exist and where their pins are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpubring import paths, phases, versions, yamlfile

__all__ = ["CatalogError", "DeclaredRelease", "chart_pins", "declared_releases"]

_FIELDS = ("name", "chart", "version", "namespace", "repo")
_LINE = re.compile(r"^(?P<key>[a-z_]+):[ \t]*(?P<value>.*?)[ \t]*$", re.MULTILINE)
_MATRIX = ("gpubring_matrix", "gpubring_pins")  # the vars plugin's names for versions.yml's pins
_MISSING = "!"  # marks a pin read that versions.yml does not have


class CatalogError(ValueError):
    """A role's release cannot be read as declared (a project bug, reported like bad input)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass(frozen=True)
class DeclaredRelease:
    """One release a role declares, as the project pins it (no inventory)."""

    role: str  # the role whose templates/releases/<folder>/ holds it
    folder: str  # that folder's name (an item of __<role>_releases)
    name: str  # the Helm release name
    chart: str  # chart name or oci:// reference; "" for a release of gpubring's objects only
    version: str  # the chart version as the release renders it at the pin ("" without a chart)
    pin: str  # the path of its chart pin in versions.yml's gpubring_versions ("" without a chart)
    pinned: str  # the value of that pin in versions.yml
    namespace: str
    repo: str
    phase: str  # the phase whose playbook runs the role ("" for a role no phase runs)

    @property
    def chart_name(self) -> str:
        """The chart's own name (the last part of an oci:// reference)."""
        return self.chart.rsplit("/", 1)[-1]


def _shown(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def _read(path: Path, root: Path) -> Any:
    try:
        return yamlfile.read(path, _shown(path, root))
    except yamlfile.YamlError as exc:
        raise CatalogError(exc.problem.file, f"{exc.problem.key}: {exc.problem.expected}") from None


class _Pins:
    """The pinned matrix as a template sees it, recording each pin read (its dotted path)."""

    def __init__(self, tree: Mapping[str, Any], seen: list[str], prefix: str = "") -> None:
        self._tree = tree
        self._seen = seen
        self._prefix = prefix

    def __getitem__(self, key: str) -> Any:
        path = f"{self._prefix}{key}"
        if key not in self._tree:
            self._seen.append(f"{_MISSING}{path}")
            raise KeyError(key)  # Jinja's undefined, which fails the field
        value = self._tree[key]
        if isinstance(value, Mapping):
            return _Pins(value, self._seen, path + ".")
        self._seen.append(path)
        return value

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


class _Evaluator:
    """A release.yml.j2 field's Jinja evaluated over one role's defaults and the pinned matrix."""

    def __init__(self, defaults: Mapping[str, Any], matrix: Mapping[str, Any]) -> None:
        from jinja2 import StrictUndefined
        from jinja2.sandbox import SandboxedEnvironment

        self.env = SandboxedEnvironment(undefined=StrictUndefined)
        self.env.filters["to_json"] = json.dumps
        self.env.filters["bool"] = _bool
        self.defaults = defaults
        self.matrix = matrix

    def render(self, text: str, seen: list[str], depth: int = 0) -> str:
        from jinja2 import meta

        if depth > 10:
            raise ValueError("role defaults that refer to one another more than 10 deep")
        tree = self.env.parse(text)
        names: dict[str, Any] = {}
        for name in meta.find_undeclared_variables(tree):
            if name in _MATRIX:
                names[name] = _Pins(self.matrix, seen)
            elif name in self.defaults:
                value = self.defaults[name]
                is_template = isinstance(value, str) and ("{{" in value or "{%" in value)
                names[name] = self.render(value, seen, depth + 1) if is_template else value
            # anything else stays undefined: StrictUndefined fails the field, naming the variable
        return str(self.env.from_string(tree).render(names))


def _bool(value: Any) -> bool:
    """Ansible's `bool` filter (not strict)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "on", "1", "true", "y", "t", "1.0")


def _fields(path: Path, root: Path) -> dict[str, str]:
    """The scalar fields of a release.yml.j2 as written: each on one line at column 0."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(_shown(path, root), f"cannot be read ({exc.strerror or exc})") from None
    out: dict[str, str] = {}
    for match in _LINE.finditer(text):
        key = match["key"]
        if key in _FIELDS and key not in out:
            out[key] = match["value"]
    return out


def _release(role: str, folder: str, phase: str, evaluator: _Evaluator, root: Path) -> DeclaredRelease:
    path = root / "roles" / role / "templates" / "releases" / folder / "release.yml.j2"
    where = _shown(path, root)
    if not path.is_file():
        raise CatalogError(
            where, f"no such file: __{role}_releases (roles/{role}/vars/main.yml) lists {folder!r}"
        )
    written = _fields(path, root)
    values: dict[str, str] = {}
    reads: dict[str, list[str]] = {}
    for key in _FIELDS:
        seen: list[str] = []
        try:
            rendered = evaluator.render(written.get(key, '""'), seen)
            value = yamlfile.load(rendered, where) if rendered.strip() else ""
        except yamlfile.YamlError as exc:
            raise CatalogError(where, f"{key}: {exc.problem.expected}") from None
        except Exception as exc:  # Jinja: an undefined variable, an unknown filter, a syntax error
            if missing := [p[len(_MISSING) :] for p in seen if p.startswith(_MISSING)]:
                raise CatalogError(
                    where, f"{key}: reads gpubring_matrix.{missing[0]}, which versions.yml does not pin"
                ) from None
            raise CatalogError(
                where,
                f"{key}: cannot be read from the role's defaults and versions.yml ({exc}); write it "
                "on one line from the role's own defaults",
            ) from None
        values[key] = "" if value is None else str(value)
        reads[key] = seen
    if not values["name"]:
        raise CatalogError(where, "name: expected the release's name on one line")
    pins = list(dict.fromkeys(reads["version"]))
    if values["chart"] and len(pins) != 1:
        said = ", ".join(pins) if pins else "none"
        raise CatalogError(
            where,
            f"version: expected to read exactly one pin of versions.yml (gpubring_matrix.<pin>, "
            f"through a default of roles/{role}/defaults/main.yml); it reads {said}",
        )
    pin = pins[0] if values["chart"] else ""
    return DeclaredRelease(
        role=role,
        folder=folder,
        name=values["name"],
        chart=values["chart"],
        version=values["version"] if values["chart"] else "",
        pin=pin,
        pinned=str(versions.get_path(evaluator.matrix, pin)) if pin else "",
        namespace=values["namespace"],
        repo=values["repo"],
        phase=phase,
    )


def _role_phases(root: Path) -> dict[str, str]:
    """Role -> the first phase whose playbook runs it."""
    out: dict[str, str] = {}
    for phase in phases.PHASES:
        try:
            plays = phases.read_playbook(phases.phase_playbook(phase, root / "playbooks"))
        except phases.PlaybookError as exc:
            raise CatalogError(f"playbooks/{phase}.yml", str(exc)) from None
        for play in plays:
            for role in play.roles:
                out.setdefault(role, phase)
    return out


def _release_roles(root: Path, by_phase: Mapping[str, str]) -> list[str]:
    """The roles that declare releases (a templates/releases/ folder or a __<role>_releases list), in
    the order the phases run them; roles no phase runs last, by name."""
    found = {
        p.name
        for p in (root / "roles").iterdir()
        if (p / "templates" / "releases").is_dir() or _listed(p, root) is not None
    }
    ordered = [r for r in by_phase if r in found]
    return ordered + sorted(found - set(ordered))


def _listed(role_dir: Path, root: Path) -> list[str] | None:
    file = role_dir / "vars" / "main.yml"
    key = f"__{role_dir.name}_releases"
    if not file.is_file() or key not in file.read_text(encoding="utf-8"):
        return None
    data = _read(file, root)
    if not isinstance(data, Mapping) or key not in data:
        return None
    items = data[key]
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        raise CatalogError(_shown(file, root), f"{key}: expected a list of release folder names")
    return list(items)


@lru_cache(maxsize=8)
def _declared(root: Path) -> tuple[DeclaredRelease, ...]:
    matrix = versions.load_pinned(root / "versions.yml")
    by_phase = _role_phases(root)
    out: list[DeclaredRelease] = []
    for role in _release_roles(root, by_phase):
        role_dir = root / "roles" / role
        listed = _listed(role_dir, root) or []
        release_dir = role_dir / "templates" / "releases"
        on_disk = sorted(p.name for p in release_dir.iterdir() if p.is_dir()) if release_dir.is_dir() else []
        unlisted = [f for f in on_disk if f not in listed]
        if unlisted:
            raise CatalogError(
                f"roles/{role}/vars/main.yml",
                f"__{role}_releases: expected every folder of templates/releases/; it leaves out "
                f"{', '.join(unlisted)} (a run would never apply it)",
            )
        defaults_file = role_dir / "defaults" / "main.yml"
        defaults = _read(defaults_file, root) if defaults_file.is_file() else {}
        evaluator = _Evaluator(defaults if isinstance(defaults, Mapping) else {}, matrix)
        phase = by_phase.get(role, "")
        out.extend(_release(role, folder, phase, evaluator, root) for folder in listed)
    names: dict[str, DeclaredRelease] = {}
    for release in out:
        if (other := names.setdefault(release.name, release)) is not release:
            raise CatalogError(
                f"roles/{release.role}/templates/releases/{release.folder}/release.yml.j2",
                f"name: {release.name!r} is also the name of roles/{other.role}/templates/releases/"
                f"{other.folder}",
            )
    return tuple(out)


def declared_releases(root: Path | None = None) -> tuple[DeclaredRelease, ...]:
    """Every release the roles of the project at `root` (default: this one) declare, in the order
    the phases run them. Raises CatalogError naming the file when one cannot be read as declared:
    a folder under templates/releases/ its role does not list, a listed one without a folder, a
    field that needs more than the role's defaults, a chart whose version reads no pin or several,
    two releases with one name."""
    return _declared((root or paths.project_root()).resolve())


def chart_pins(root: Path | None = None) -> list[str]:
    """The chart pins of versions.yml: every pin named `chart` or `<something>_chart`, in file order
    (the CNI charts are pinned under their names, cni.calico and cni.cilium: releases read them too)."""
    matrix = versions.load_pinned((root or paths.project_root()).resolve() / "versions.yml")
    return [
        path
        for path, _ in versions.flatten(matrix)
        if (last := path.rsplit(".", 1)[-1]) == "chart" or last.endswith("_chart")
    ]
