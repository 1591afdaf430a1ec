"""The inventory model: a standard Ansible YAML inventory read with PyYAML and validated in full.

Layout read: `<dir>/hosts.yml` (or hosts.yaml, or a path to the file itself), `group_vars/<group>.yml`
or `group_vars/<group>/*.yml`, `host_vars/<host>.yml` or `host_vars/<host>/*.yml`. Variables merge as
Ansible merges them (top-level keys replace): group vars of hosts.yml by group depth, then
group_vars/all, then group_vars of the other groups by depth, then host vars of hosts.yml, then
host_vars. Every problem is collected, each naming the file (relative to the inventory folder), the key
path in it and what was expected; `load_inventory` raises InventoryError with all of them.
Ansible itself is never imported here: `gpubring plan` on 1,000 nodes stays fast.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpubring import versions, yamlfile
from gpubring.model import Host, Inventory, InventoryError, VarLayer
from gpubring.phases import PHASES
from gpubring.validation import crosshost, specs
from gpubring.validation.rules import check_overrides, evaluate_rules, merge_results
from gpubring.versions import RuleResult
from gpubring.yamlfile import Problem, did_you_mean

__all__ = ["Host", "Inventory", "InventoryError", "Problem", "VarLayer", "load_inventory"]

HOSTS_FILES = ("hosts.yml", "hosts.yaml")
VAR_EXTS = ("", ".yml", ".yaml", ".json")
GROUP_KEYS = ("hosts", "vars", "children")
# group_vars/ of these may exist while the group has no hosts (an inventory without CPU nodes).
KNOWN_GROUPS = ("all", "ungrouped", "control_plane", "gpu_nodes", "cpu_nodes")
_RANGE = re.compile(r"\[[^\]]*:[^\]]*\]")
_HOST_PORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])+):(\d+)$")


def expand_host_range(pattern: str) -> list[str]:
    """Ansible's host ranges: `gpu[01:04]`, `node[a:c]`, `n[0:10:2]`, several per name."""
    m = _RANGE.search(pattern)
    if not m:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end() :]
    bounds = m.group(0)[1:-1].split(":")
    if len(bounds) not in (2, 3) or not bounds[1]:
        raise ValueError("a host range is [begin:end] or [begin:end:step]")
    beg, end = bounds[0] or "0", bounds[1]
    step = int(bounds[2]) if len(bounds) == 3 and bounds[2] else 1
    if beg in string.ascii_letters and end in string.ascii_letters:
        seq = list(
            string.ascii_letters[string.ascii_letters.index(beg) : string.ascii_letters.index(end) + 1 : step]
        )
    else:
        width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
        if width and len(end) != width:
            raise ValueError("a zero-padded host range needs begin and end of equal length")
        seq = [str(i).zfill(width) for i in range(int(beg), int(end) + 1, step)]
    out: list[str] = []
    for item in seq:
        out.extend(expand_host_range(head + item + tail))
    return out


class _Loader:
    def __init__(self, path: Path) -> None:
        self.given = path
        self.problems: list[Problem] = []
        self.root = path
        self.hosts_file = path
        self.table = specs.load_specs()
        self.problems.extend(self.table.problems)
        self.group_order: dict[str, None] = {"all": None}
        self.direct_hosts: dict[str, dict[str, None]] = {"all": {}}
        self.children: dict[str, dict[str, None]] = {"all": {}}
        self.parents: dict[str, set[str]] = {}
        self.decl: dict[str, dict[str, str]] = {}  # host -> group -> key path of the declaration
        self.host_order: dict[str, None] = {}
        self.inline_group_layers: dict[str, list[VarLayer]] = {}
        self.inline_host_layers: dict[str, list[VarLayer]] = {}
        self.file_group_layers: dict[str, list[VarLayer]] = {}
        self.file_host_layers: dict[str, list[VarLayer]] = {}
        self.own_keys: dict[str, str] = {}

    # -- reading --------------------------------------------------------------------------------

    def add(self, file: str, key: str, expected: str) -> None:
        self.problems.append(Problem(file, key, expected))

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def read_yaml(self, path: Path) -> tuple[bool, Any]:
        rel = self.rel(path)
        try:
            text = yamlfile.read_text(path, rel)
            if text.startswith("$ANSIBLE_VAULT;"):
                return True, None  # a vault-encrypted file: only Ansible can read it
            return True, yamlfile.load(text, rel)
        except yamlfile.YamlError as exc:
            self.problems.append(exc.problem)
        return False, None

    def locate(self) -> bool:
        path = self.given
        if not path.exists():
            self.add(
                str(path),
                "inventory",
                "expected an inventory folder (with hosts.yml) or file; it does not exist",
            )
            return False
        if path.is_dir():
            self.root = path
            found = [path / name for name in HOSTS_FILES if (path / name).exists()]
            if not found:
                self.add(
                    str(path),
                    "hosts.yml",
                    "expected hosts.yml (or hosts.yaml) in the inventory folder; none found",
                )
                return False
            self.hosts_file = found[0]
        else:
            self.root, self.hosts_file = path.parent, path
        return True

    # -- hosts.yml ------------------------------------------------------------------------------

    def walk_group(self, name: str, data: Any, path: str, parent: str | None) -> None:
        file = self.rel(self.hosts_file)
        self.group_order.setdefault(name, None)
        self.direct_hosts.setdefault(name, {})
        self.children.setdefault(name, {})
        if parent is not None and name != "all":
            self.children[parent].setdefault(name, None)
            self.parents.setdefault(name, set()).add(parent)
        if data is None:
            return
        if not isinstance(data, Mapping):
            self.add(file, path, "expected a group: a mapping with hosts, vars or children")
            return
        for key in data:
            if key not in GROUP_KEYS:
                self.add(
                    file,
                    f"{path}.{key}",
                    f"expected one of hosts, vars, children{did_you_mean(str(key), GROUP_KEYS)}",
                )
        group_vars = data.get("vars")
        if isinstance(group_vars, Mapping):
            self.inline_group_layers.setdefault(name, []).append(VarLayer(file, f"{path}.vars", group_vars))
        elif group_vars is not None:
            self.add(file, f"{path}.vars", "expected a mapping of variables")
        hosts = data.get("hosts")
        if isinstance(hosts, Mapping):
            for pattern, host_vars in hosts.items():
                self.add_hosts(name, str(pattern), host_vars, f"{path}.hosts.{pattern}")
        elif hosts is not None:
            self.add(
                file, f"{path}.hosts", "expected a mapping of host names (each with its variables or empty)"
            )
        kids = data.get("children")
        if isinstance(kids, Mapping):
            for child_key, child_data in kids.items():
                child = str(child_key)
                if child == "all":
                    self.add(
                        file,
                        f"{path}.children.all",
                        "expected a group other than all (every group is in all)",
                    )
                    continue
                self.walk_group(child, child_data, f"{path}.children.{child}", name)
        elif kids is not None:
            self.add(file, f"{path}.children", "expected a mapping of groups")

    def add_hosts(self, group: str, pattern: str, host_vars: Any, path: str) -> None:
        file = self.rel(self.hosts_file)
        port = None
        m = _HOST_PORT.match(pattern)
        if m:
            pattern, port = m.group(1), int(m.group(2))
        try:
            names = expand_host_range(pattern)
        except ValueError as exc:
            self.add(file, path, f"expected a valid host range: {exc}")
            return
        if host_vars is not None and not isinstance(host_vars, Mapping):
            self.add(file, path, "expected a mapping of host variables (or nothing)")
            host_vars = None
        for name in names:
            self.host_order.setdefault(name, None)
            self.direct_hosts[group].setdefault(name, None)
            self.decl.setdefault(name, {}).setdefault(group, path)
            if port is not None:
                self.inline_host_layers.setdefault(name, []).append(
                    VarLayer(file, path, {"ansible_port": port})
                )
            if host_vars:
                self.inline_host_layers.setdefault(name, []).append(VarLayer(file, path, host_vars))

    # -- group_vars / host_vars -------------------------------------------------------------------

    def vars_files(self, kind: str, known: Mapping[str, Any]) -> dict[str, list[VarLayer]]:
        """Ansible's host_group_vars: for each name, the first of `<name>` (a file or a folder read
        recursively), `<name>.yml`, `<name>.yaml`, `<name>.json`; Ansible ignores the others."""
        base = self.root / kind
        out: dict[str, list[VarLayer]] = {}
        if not base.is_dir():
            return out
        entries = {
            p.name: p for p in base.iterdir() if not p.name.startswith(".") and not p.name.endswith("~")
        }
        what = "group" if kind == "group_vars" else "host"
        claimed: set[str] = set()
        for name in known:
            found = [entries[name + ext] for ext in VAR_EXTS if name + ext in entries]
            if not found:
                continue
            claimed.update(p.name for p in found)
            for ignored in found[1:]:
                self.add(
                    self.rel(ignored),
                    name,
                    f"expected one place for the {what} vars of {name}; Ansible reads only "
                    f"{self.rel(found[0])} and ignores this",
                )
            loops: list[Path] = []
            files = _dir_vars_files(found[0], loops) if found[0].is_dir() else [found[0]]
            for loop in loops:
                self.add(
                    self.rel(loop),
                    name,
                    f"expected a folder of {what} vars without a loop; this link leads back to "
                    f"{loop.resolve()}, which Ansible would walk again and again",
                )
            for file in files:
                ok, data = self.read_yaml(file)
                if not ok or data is None:
                    continue
                if not isinstance(data, Mapping):
                    self.add(self.rel(file), "(top level)", "expected a mapping of variables")
                    continue
                out.setdefault(name, []).append(VarLayer(self.rel(file), "", data))
        for entry_name, entry in sorted(entries.items()):
            if entry_name in claimed:
                continue
            name = entry.stem if entry.suffix in VAR_EXTS[1:] and entry.is_file() else entry_name
            self.add(
                self.rel(entry),
                name,
                f"expected the name of a {what} in {self.rel(self.hosts_file)}; "
                f"there is no {what} {name}{did_you_mean(name, known)}",
            )
        return out

    # -- checks -------------------------------------------------------------------------------

    def check_layer(self, layer: VarLayer, cluster_wide: bool, pinned: Mapping[str, Any] | None) -> None:
        for raw_key, value in layer.vars.items():
            key = str(raw_key)
            path = layer.key_path(key)
            if (
                key not in self.table.keys
                and not key.startswith("ansible_")
                and self.table.namespace(key) is None
            ):
                self.own_keys.setdefault(key, layer.file)
            if key.startswith("gpubring_") and not cluster_wide and key in self.table.keys:
                self.add(layer.file, path, "expected in group_vars/all: gpubring_* settings are cluster-wide")
                continue
            for key_path, expected in specs.check_key(self.table, key, value, path):
                self.add(layer.file, key_path, expected)
            if key == versions.VERSIONS_KEY and pinned is not None and isinstance(value, Mapping):
                for key_path, expected in check_overrides(pinned, value, path):
                    self.add(layer.file, key_path, expected)

    def depth(self, group: str, seen: frozenset[str] = frozenset()) -> int:
        if group == "all" or group in seen:
            return 0
        return 1 + max((self.depth(p, seen | {group}) for p in self.parents.get(group, {"all"})), default=0)

    def ancestors(self, group: str) -> set[str]:
        out: set[str] = set()
        todo = [group]
        while todo:
            g = todo.pop()
            for p in self.parents.get(g, set()):
                if p not in out:
                    out.add(p)
                    todo.append(p)
        return out

    def group_members(self, group: str) -> tuple[str, ...]:
        out: dict[str, None] = {}
        todo, seen = [group], set()
        while todo:
            g = todo.pop(0)
            if g in seen:
                continue
            seen.add(g)
            out.update(self.direct_hosts.get(g, {}))
            todo.extend(self.children.get(g, {}))
        return tuple(out)

    # -- the steps of load_inventory ---------------------------------------------------------------

    def fail_if_problems(self) -> None:
        if self.problems:
            raise InventoryError(self.problems)

    def read_hosts_file(self) -> None:
        """Locate and walk hosts.yml; stop early when there is nothing to validate further."""
        if not self.locate():
            self.fail_if_problems()
        file = self.rel(self.hosts_file)
        ok, data = self.read_yaml(self.hosts_file)
        if ok and (data is None or data == {}):
            self.add(file, "all", "expected an inventory with groups and hosts; the file is empty")
        elif ok and not isinstance(data, Mapping):
            self.add(file, "(top level)", "expected a mapping of groups (all:, control_plane:, gpu_nodes:)")
        elif ok:
            for name, group in data.items():
                self.walk_group(str(name), group, str(name), None if name == "all" else "all")
            if not self.host_order:
                self.add(file, "all", "expected at least one host; the inventory has none")
        if not ok or not self.host_order:
            raise InventoryError(self.problems)

    def read_vars(self) -> tuple[dict[str, Any] | None, tuple[versions.Rule, ...]]:
        """group_vars/ and host_vars/, then the per-key checks of every variable layer."""
        pinned: dict[str, Any] | None = None
        rules: tuple[versions.Rule, ...] = ()
        try:
            pinned, rules = versions.load_file()
        except versions.VersionsFileError as exc:
            self.problems.extend(exc.problems)
        for name in self.host_order:
            if set(self.decl[name]) <= {"all"}:
                self.direct_hosts.setdefault("ungrouped", {})[name] = None
                self.group_order.setdefault("ungrouped", None)
        self.file_group_layers = self.vars_files(
            "group_vars", {**dict.fromkeys(KNOWN_GROUPS), **self.group_order}
        )
        self.file_host_layers = self.vars_files("host_vars", self.host_order)
        for group, layers in [*self.inline_group_layers.items(), *self.file_group_layers.items()]:
            for layer in layers:
                self.check_layer(layer, group == "all", pinned)
        for layers in [*self.inline_host_layers.values(), *self.file_host_layers.values()]:
            for layer in layers:
                self.check_layer(layer, False, pinned)
        return pinned, rules

    def build_hosts(self) -> dict[str, Host]:
        """Each host with its groups (ancestors included), merged variables and SSH endpoint."""
        depth = {g: self.depth(g) for g in self.group_order}
        hosts: dict[str, Host] = {}
        cache: dict[tuple[str, ...], tuple[tuple[VarLayer, ...], dict[str, Any]]] = {}
        for name in self.host_order:
            direct = set(self.decl[name]) | (
                {"ungrouped"} if name in self.direct_hosts.get("ungrouped", {}) else set()
            )
            member = direct | {a for g in direct for a in self.ancestors(g)} | {"all"}
            groups = tuple(sorted(member, key=lambda g: (depth[g], g)))
            if groups not in cache:
                layers = [layer for g in groups for layer in self.inline_group_layers.get(g, [])]
                layers += [layer for g in groups for layer in self.file_group_layers.get(g, []) if g == "all"]
                layers += [layer for g in groups if g != "all" for layer in self.file_group_layers.get(g, [])]
                merged: dict[str, Any] = {}
                for layer in layers:
                    merged.update(layer.vars)
                cache[groups] = (tuple(layers), merged)
            group_layers, group_vars = cache[groups]
            own = (*self.inline_host_layers.get(name, []), *self.file_host_layers.get(name, []))
            host_vars = dict(group_vars)
            for layer in own:
                host_vars.update(layer.vars)
            port = _as_port(host_vars.get("ansible_port", 22))
            if port is None:
                where = next(lay for lay in reversed((*group_layers, *own)) if "ansible_port" in lay.vars)
                got = host_vars.get("ansible_port")
                self.add(
                    where.file, where.key_path("ansible_port"), f"expected a port number 1-65535, got {got}"
                )
                port = 22
            user = host_vars.get("ansible_user")
            hosts[name] = Host(
                name=name,
                address=str(host_vars.get("ansible_host", name)),
                port=port,
                user=None if user is None else str(user),
                groups=tuple(g for g in groups if g != "all"),
                vars=host_vars,
                layers=(*group_layers, *own),
            )
        return hosts


def _dir_vars_files(folder: Path, loops: list[Path], seen: frozenset[Path] = frozenset()) -> list[Path]:
    """The files of a vars folder in Ansible's order: sorted per level, sub-folders recursively. A
    sub-folder that leads back to a folder being walked (a symlink loop) is not entered but added to
    `loops`; a file reached twice through links is read once."""
    here = folder.resolve()
    seen = seen | {here}
    found: list[Path] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        if entry.is_dir() and not entry.suffix:
            if entry.resolve() in seen:
                loops.append(entry)
                continue
            found.extend(_dir_vars_files(entry, loops, seen))
        elif entry.is_file() and entry.suffix in VAR_EXTS:
            found.append(entry)
    first: dict[Path, Path] = {}
    for path in found:
        first.setdefault(path.resolve(), path)
    return list(first.values())


def _as_port(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def load_inventory(path: Path, *, check_rules: bool = True) -> Inventory:
    """Read and validate an inventory; InventoryError lists every problem found.

    With check_rules=False, broken version rules do not raise: they stay in
    Inventory.version_problems (`gpubring versions` prints the verdicts first)."""
    ld = _Loader(Path(path))
    ld.read_hosts_file()
    pinned, rules = ld.read_vars()
    key_problems = len(ld.problems)
    hosts = ld.build_hosts()
    groups = {"all": tuple(ld.host_order)}
    groups.update({g: ld.group_members(g) for g in ld.group_order if g != "all"})
    all_layers = [*ld.inline_group_layers.get("all", []), *ld.file_group_layers.get("all", [])]
    # Settings: settings.yml defaults, then all's vars in hosts.yml, then group_vars/all.
    settings = {k: s.default for k, s in ld.table.keys.items() if k.startswith("gpubring_")}
    for layer in all_layers:
        settings.update({k: v for k, v in layer.vars.items() if str(k).startswith("gpubring_")})
    cpu_groups = {"cpu_nodes"} | {g for g in ld.group_order if "cpu_nodes" in ld.ancestors(g)}
    ld.problems.extend(crosshost.check_structure(ld.rel(ld.hosts_file), hosts, groups, ld.decl, cpu_groups))
    overrides = settings.get(versions.VERSIONS_KEY)
    overrides = overrides if isinstance(overrides, Mapping) else {}
    effective = versions.effective(pinned or {}, overrides)
    overridden = tuple(versions.overridden_paths(pinned or {}, overrides))
    version_layer = next((lay for lay in reversed(all_layers) if versions.VERSIONS_KEY in lay.vars), None)
    results, rule_problems = _evaluate(ld, hosts, settings, effective, rules, overridden, version_layer)
    if len(ld.problems) > key_problems or pinned is None:
        rule_problems = []  # fix the overrides' shape and the structure first
    chosen = settings.get("gpubring_phases")
    chosen = chosen if isinstance(chosen, list) else list(PHASES)
    check_only = settings.get("gpubring_phases_check_only")
    check_only = check_only if isinstance(check_only, list) else []
    inv = Inventory(
        root=ld.root,
        hosts_file=ld.hosts_file,
        hosts=hosts,
        groups=groups,
        settings=settings,
        versions=effective,
        phases=tuple(p for p in PHASES if p in chosen),
        phases_skipped_reason=str(settings.get("gpubring_phases_skipped_reason") or ""),
        overridden=overridden,
        phases_check_only=tuple(p for p in PHASES if p in check_only and p not in chosen),
        rule_results=tuple(results),
        version_problems=tuple(rule_problems),
        own_keys=tuple(sorted(ld.own_keys.items())),
    )
    if not ld.problems:  # cross-field checks may rely on well-typed values
        for validator in crosshost.registered():
            ld.problems.extend(validator(inv))
    problems = list(dict.fromkeys(ld.problems + (rule_problems if check_rules else [])))
    if problems:
        raise InventoryError(problems)
    return inv


def _evaluate(  # noqa: PLR0917 - one private step of load_inventory
    ld: _Loader,
    hosts: Mapping[str, Host],
    settings: Mapping[str, Any],
    effective: Mapping[str, Any],
    rules: tuple[versions.Rule, ...],
    overridden: tuple[str, ...],
    version_layer: VarLayer | None,
) -> tuple[list[RuleResult], list[Problem]]:
    """The rules over every distinct set of the hosts' `when` settings; problems name the file to fix:
    the override of a pin the rule names, else the setting that made the rule apply."""
    when_keys = sorted({k for rule in rules for k in rule.when})
    defaults = ld.table.defaults()
    contexts: dict[str, tuple[dict[str, Any], str]] = {}
    for name, one in hosts.items():
        ctx = {**settings, **{k: defaults[k] for k in when_keys if k in defaults}}
        ctx.update({k: one.vars[k] for k in when_keys if k in one.vars})
        contexts.setdefault(repr([(k, repr(ctx.get(k))) for k in when_keys]), (ctx, name))
    if not contexts:
        contexts["-"] = ({**defaults, **settings}, "")
    per_context = [evaluate_rules(effective, ctx, rules) for ctx, _ in contexts.values()]
    results = merge_results(per_context)
    problems: list[Problem] = []
    for i, (rule, result) in enumerate(zip(rules, results, strict=True)):
        if result.ok:
            continue
        host = next(h for (_, h), res in zip(contexts.values(), per_context, strict=True) if not res[i].ok)
        for failure in result.failures:
            why = (
                f"expected {failure.path} {failure.expected}, got {failure.actual} "
                f"(rule {rule.id}: {rule.message})"
            )
            touched = [p for p in (failure.path, *failure.refs) if p in overridden]
            origin = next((o for k in rule.when if host and (o := _origin(hosts[host], k))), None)
            if touched and version_layer is not None:
                origin = version_layer.file, version_layer.key_path(f"{versions.VERSIONS_KEY}.{touched[0]}")
            problems.append(
                Problem(*(origin or ("versions.yml", f"{versions.VERSIONS_KEY}.{failure.path}")), why)
            )
    return results, problems


def _origin(host: Host, key: str) -> tuple[str, str] | None:
    for layer in reversed(host.layers):
        if key in layer.vars:
            return layer.file, layer.key_path(key)
    return None
