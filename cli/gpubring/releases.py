"""The Helm releases of the platform phase, rendered in-process by Ansible itself.

The platform roles keep each release as three templates under
roles/<role>/templates/releases/<release>/ (release.yml.j2, values.yml.j2, manifests.yml.j2) and the
helm role resolves the chart's source with roles/helm/templates/source.yml.j2. A run renders them with
the `ansible.builtin.template` lookup (roles/helm/tasks/role_releases.yml); `gpubring plan` and the
rendering tests call that same lookup plugin here, with the variables Ansible gives the host:
DataLoader + InventoryManager + VariableManager over the inventory, playbooks/platform.yml loaded as a
Play (so role defaults and vars, group_vars precedence and the collection's vars plugin
gpubring.core.defaults are Ansible's), and Ansible's sandboxed Templar. Nothing of Jinja is copied here.
The three templates' results are assembled into the release, and the release completed with the
engine's and the site's defaults, by the helm role's own filter plugin (plugins/filter/helm_release.py),
which the run calls too.

Two differences from a run, both on purpose:
- Lookups do not run (a `lookup('pipe', ...)` in an inventory value would run a command on the
  controller). A release that needs one is returned with `deferred` saying so: it renders at run time.
- Ansible parses a copy of hosts.yml that keeps only the variables of the host the play runs on
  (10,000 hosts cost Ansible seconds); the other hosts are added by name to their groups, so the
  `groups` magic variable is Ansible's, but `hostvars` of another host holds nothing.
Ansible is imported only when something is rendered (`gpubring --help` does not pay for it).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpubring import paths

if TYPE_CHECKING:
    from gpubring.inventory import Inventory

__all__ = [
    "AnsibleSession",
    "LookupRefused",
    "PrunedHosts",
    "Release",
    "ReleaseRenderError",
    "Variables",
    "ansible_session",
    "host_variables",
    "plan_releases",
    "platform_roles",
    "pruned_hosts",
    "render_release",
    "render_template",
    "role_releases",
]

_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
RUN_TIME = "rendered at run time"


class ReleaseRenderError(Exception):
    """A template or a variable of a platform role did not render."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


class LookupRefused(Exception):
    """A template called a lookup plugin, which only a run may do."""

    def __init__(self, plugin: str) -> None:
        super().__init__(f"lookup {plugin!r}: {RUN_TIME}, not by gpubring plan")
        self.plugin = plugin


@dataclass(frozen=True)
class Release:
    """One Helm release as the platform phase applies it.

    `deferred` is non-empty when the release uses a lookup: it says why, and the other fields hold
    only what was known without it (the role and the release's folder name)."""

    role: str
    name: str
    chart: str
    version: str
    repo: str
    namespace: str
    source: Mapping[str, Any]  # kind (repo|oci|file), chart_ref, chart_repo_url, chart_version, copy_from
    values: dict[str, Any]
    namespace_object: dict[str, Any] | None = None
    pre_manifests: list[dict[str, Any]] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    wait: bool = True
    timeout: str = "10m"
    ready: list[dict[str, Any]] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)  # what a run waits for, in order, with each timeout
    upgrade_crds: bool = False  # the chart's crds/ are applied before a chart upgrade (helm tasks/crds.yml)
    deferred: str = ""

    @property
    def ref(self) -> str:
        """Where helm gets the chart: `<repo URL> <chart>`, an oci:// reference or a file."""
        src = self.source
        if src.get("chart_repo_url"):
            return f"{src['chart_repo_url']} {src['chart_ref']}"
        return str(src.get("chart_ref", self.chart))

    def objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object the release engine applies, in order (not the chart's own)."""
        head = [self.namespace_object] if self.namespace_object else []
        return [*head, *self.pre_manifests, *self.manifests]

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "name": self.name,
            "chart": self.chart,
            "version": self.version,
            "repo": self.repo,
            "ref": self.ref,
            "namespace": self.namespace,
            "source": dict(self.source),
            "values": self.values,
            "objects": self.objects(),
            "wait": self.wait,
            "timeout": self.timeout,
            "ready": self.ready,
            "waits": self.waits,
            "upgrade_crds": self.upgrade_crds,
            "deferred": self.deferred,
        }


# -- Ansible, in this process ---------------------------------------------------------------------


@cache
def _ansible_ready() -> None:
    """Configure Ansible as the runner does (collection, roles, vars plugin), once, before its
    constants are read; then install the collection loader."""
    os.environ["ANSIBLE_COLLECTIONS_PATH"] = str(paths.collections_path())
    os.environ["ANSIBLE_ROLES_PATH"] = str(paths.roles_dir())
    os.environ["ANSIBLE_VARS_ENABLED"] = "host_group_vars,gpubring.core.defaults"
    os.environ.setdefault("ANSIBLE_LOCALHOST_WARNING", "false")
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "false")
    from ansible import constants
    from ansible.plugins.loader import init_plugin_loader

    if "gpubring.core.defaults" not in constants.VARIABLE_PLUGINS_ENABLED:  # imported before us
        constants.VARIABLE_PLUGINS_ENABLED = ["host_group_vars", "gpubring.core.defaults"]
    # The inventory model imports the collection's module_utils as plain namespace packages; Ansible's
    # collection loader must own `ansible_collections` to find the collection's roles and plugins.
    for name in [
        m for m in sys.modules if m == "ansible_collections" or m.startswith("ansible_collections.")
    ]:
        if "_collection_finder" not in type(getattr(sys.modules[name], "__loader__", None)).__module__:
            del sys.modules[name]
    init_plugin_loader([str(paths.collections_path())])
    # Ansible resolves the enabled vars plugins once, the first time anything in this process asks for
    # variables (ansible.vars.plugins._prime_vars_loader) and keeps them: had something read variables
    # before this (a test, an embedding program), the collection's plugin was not importable then and
    # stays left out, and every render misses gpubring_matrix. Ask for each by name now: the vars
    # loader adds it to the plugins it runs.
    from ansible.plugins.loader import vars_loader

    for name in constants.VARIABLE_PLUGINS_ENABLED:
        if name:
            vars_loader.get(name)


class _RefusingLookups:
    """Stands in for Ansible's lookup plugin loader while gpubring renders: every lookup is refused."""

    def get(self, name: str, *args: Any, **kwargs: Any) -> Any:
        raise LookupRefused(name)


@contextmanager
def _no_lookups() -> Iterator[None]:
    """Templates rendered inside cannot call lookup()/query()/q(): Ansible invokes them through the
    loader of _jinja_plugins, replaced here for the duration."""
    from ansible._internal._templating import _jinja_plugins

    real = _jinja_plugins.lookup_loader
    _jinja_plugins.lookup_loader = _RefusingLookups()
    try:
        yield
    finally:
        _jinja_plugins.lookup_loader = real


def _refused(exc: BaseException) -> LookupRefused | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, LookupRefused):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _message(exc: BaseException) -> str:
    """Ansible's message for a failed template, without its traceback."""
    if (refused := _refused(exc)) is not None:
        return str(refused)
    text = str(exc).strip() or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text}: {cause}"
    return text


def _plain(value: Any) -> Any:
    """Ansible's result as plain Python data (no tagged str, no lazy containers)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value) if type(value) is not str else value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value


def _trusted(value: Any) -> Any:
    """A value given in Python (facts, a task's `vars:`) as YAML in a task would be: templatable."""
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, Mapping):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _shown(path: Path) -> str:
    root = paths.project_root()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


@dataclass(frozen=True)
class PrunedHosts:
    data: Any  # hosts.yml with only the kept host under each `hosts:`
    members: tuple[tuple[str, str], ...]  # every (group, host) of a `hosts:` section, in file order


def pruned_hosts(hosts_file: Path, keep: str) -> PrunedHosts | None:
    """hosts.yml with only `keep` in each `hosts:` (groups, children and vars unchanged) and every
    other host's group, or None when the file is not a plain YAML inventory that names the host (host
    ranges, scripts: Ansible reads it all). Pruned at the node level, so the other hosts' entries are
    never constructed."""
    members: dict[tuple[str, str], None] = {}
    plain = True

    def prune(name: str, group: yaml.Node) -> None:
        nonlocal plain
        if not isinstance(group, yaml.MappingNode):
            return
        for key, value in group.value:  # in the file's order, as Ansible's yaml plugin reads them
            if key.value == "hosts" and isinstance(value, yaml.MappingNode):
                for host, _ in value.value:
                    plain = plain and isinstance(host, yaml.ScalarNode) and "[" not in str(host.value)
                    members.setdefault((name, str(host.value)))
                value.value = [(h, v) for h, v in value.value if h.value == keep]
            elif key.value == "children" and isinstance(value, yaml.MappingNode):
                for child_name, child in value.value:
                    prune(str(child_name.value), child)

    try:
        loader = _SafeLoader(hosts_file.read_text(encoding="utf-8"))
        try:
            node = loader.get_single_node()
            if not isinstance(node, yaml.MappingNode):
                return None
            for name, group in node.value:
                prune(str(name.value), group)
            if not plain or not any(h == keep for _, h in members):
                return None
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except (OSError, yaml.YAMLError):
        return None
    return PrunedHosts(_trusted(data), tuple(members))


def _add_other_hosts(inventory: Any, pruned: PrunedHosts, keep: str) -> None:
    """Every other host, by name only, in its groups and in the order Ansible would have added it, so
    that the `groups` magic variable is Ansible's own; their variables are never read."""
    data = inventory._inventory
    for group, host in pruned.members:
        if host != keep and group in data.groups:
            data.add_host(host, group)
    data.reconcile_inventory()  # `all` and `ungrouped`, as after a parse
    rank = {pair: i for i, pair in enumerate(pruned.members)}
    for group in data.groups.values():
        group.hosts.sort(key=lambda h: rank.get((group.name, h.name), -1))
        group.clear_hosts_cache()
    data._groups_dict_cache = {}


def _fingerprint(root: Path) -> tuple[tuple[str, int, int], ...]:
    out = []
    for path in sorted(root.rglob("*")):
        if ".gpubring" in path.parts or not path.is_file():
            continue
        st = path.stat()
        out.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(out)


class _SharedList(list[str]):
    """A list of host names that deepcopy shares instead of copying (nothing writes to it)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _SharedList:
        return self


class _SharedDict(dict[str, Any]):
    """A read-only snapshot of variables that deepcopy shares instead of copying."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _SharedDict:
        return self


@dataclass(frozen=True)
class AnsibleSession:
    loader: Any
    variables: dict[str, Any]


@lru_cache(maxsize=8)
def ansible_session(
    hosts_file: str,
    root: str,
    host: str,
    roles: tuple[str, ...] | None,
    _stamp: tuple[tuple[str, int, int], ...],
) -> AnsibleSession:
    """Ansible's loader and the variables of `host` (with `roles`' defaults) for an inventory, read as
    Ansible reads it, hosts.yml pruned to that host (pruned_hosts). Cached: `_stamp` is the
    inventory's fingerprint, so an edited inventory is read again."""
    _ansible_ready()
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook import Playbook
    from ansible.playbook.play import Play
    from ansible.vars.manager import VariableManager

    pruned = pruned_hosts(Path(hosts_file), host)

    class Loader(DataLoader):  # type: ignore[misc]
        def load_from_file(self, file_name: str, *args: Any, **kwargs: Any) -> Any:
            if pruned is not None and os.path.abspath(file_name) == hosts_file:
                return pruned.data
            return super().load_from_file(file_name, *args, **kwargs)

    loader = Loader()
    inventory = InventoryManager(loader=loader, sources=[hosts_file])
    if pruned is not None:
        _add_other_hosts(inventory, pruned, host)
    manager = VariableManager(loader=loader, inventory=inventory)
    if roles is None:
        playbook = str(paths.playbooks_dir() / "platform.yml")
        play = Playbook.load(playbook, variable_manager=manager, loader=loader).get_plays()[0]
    else:
        loader.set_basedir(str(paths.playbooks_dir()))
        play = Play.load(
            {
                "name": "gpubring render",
                "hosts": host,
                "gather_facts": False,
                "roles": [{"role": f"gpubring.core.{r}"} for r in roles],
            },
            variable_manager=manager,
            loader=loader,
        )
    target = inventory.get_host(host)
    if target is None:
        raise ReleaseRenderError(_shown(Path(hosts_file)), f"Ansible finds no host {host!r}")
    # `_hosts`: the play's batch, as the linear strategy passes it (the platform play runs on one host).
    variables = manager.get_vars(play=play, host=target, _hosts=[host])
    # The template lookup deep-copies every variable for each template: share the read-only host lists
    # (and the `vars` snapshot, which holds them again) instead of copying 10,000 names each time.
    variables["groups"] = {g: _SharedList(m) for g, m in variables["groups"].items()}
    for key in ("ansible_play_hosts_all", "ansible_play_hosts"):
        if isinstance(variables.get(key), list):
            variables[key] = _SharedList(variables[key])
    if isinstance(variables.get("vars"), dict):
        variables["vars"] = _SharedDict({**variables["vars"], "groups": variables["groups"]})
    variables.setdefault("inventory_dir", root)
    return AnsibleSession(loader, variables)


class Variables(Mapping[str, Any]):
    """The variables Ansible gives one host in a play of `roles`, each rendered on access by
    Ansible's Templar (lookups refused), as plain Python data."""

    def __init__(self, session: AnsibleSession, extra: Mapping[str, Any] | None = None) -> None:
        self._loader = session.loader
        self.raw: dict[str, Any] = {**session.variables, **_trusted(dict(extra or {}))}

    def _templar(self, extra: Mapping[str, Any] | None = None) -> Any:
        from ansible.template import Templar

        return Templar(loader=self._loader, variables={**self.raw, **(extra or {})})

    def __getitem__(self, key: str) -> Any:
        raw = self.raw[key]
        return self.resolve(raw, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def resolve(self, value: Any, where: str = "value") -> Any:
        """`value` (a Jinja expression such as "{{ x | bool }}", or data holding some) rendered."""
        try:
            with _no_lookups():
                return _plain(self._templar().template(_trusted(value)))
        except Exception as exc:  # any error of the expression is the variable's
            if (refused := _refused(exc)) is not None:
                raise refused from None
            raise ReleaseRenderError(where, _message(exc)) from None

    def render_file(self, path: Path, extra: Mapping[str, Any] | None = None) -> str:
        """The text of a template file, rendered by the ansible.builtin.template lookup as a task's
        `lookup('ansible.builtin.template', path, template_vars=extra)` renders it."""
        from ansible.plugins.loader import lookup_loader

        rel = _shown(path)
        if not path.is_file():
            raise ReleaseRenderError(rel, "cannot read the template: no such file")
        templar = self._templar()
        plugin = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=templar)
        try:
            with _no_lookups():
                (text,) = plugin.run([str(path)], variables=self.raw, template_vars=dict(extra or {}))
        except Exception as exc:  # a template runs Python: any error is the template's (or its input's)
            if (refused := _refused(exc)) is not None:
                raise refused from None
            raise ReleaseRenderError(rel, _message(exc)) from None
        return str(text)

    def render_yaml(self, path: Path, extra: Mapping[str, Any] | None = None) -> Any:
        text = self.render_file(path, extra)
        try:
            return _plain(yaml.load(text, Loader=_SafeLoader))
        except yaml.YAMLError as exc:
            raise ReleaseRenderError(_shown(path), f"the rendered text is not YAML: {exc}") from None


def host_variables(
    inv: Inventory,
    host: str | None = None,
    roles: tuple[str, ...] | None = None,
    host_vars: Mapping[str, Any] | None = None,
) -> Variables:
    """Ansible's variables of `host` (default: the first control plane) in the platform play, or in a
    play of `roles` (short names); `host_vars` (facts, a task's `vars:`) rank above them all."""
    name = host or (inv.groups.get("control_plane") or tuple(inv.hosts))[0]
    hosts_file = os.path.abspath(inv.hosts_file)
    try:
        session = ansible_session(hosts_file, str(inv.root.resolve()), name, roles, _fingerprint(inv.root))
    except ReleaseRenderError:
        raise
    except Exception as exc:  # Ansible could not read the inventory or load the play: say what it said
        raise ReleaseRenderError(_shown(inv.hosts_file), _message(exc)) from None
    return Variables(session, host_vars)


# -- reading the roles -----------------------------------------------------------------------------


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_SafeLoader)
    except FileNotFoundError:
        return None
    except (OSError, yaml.YAMLError) as exc:
        raise ReleaseRenderError(str(path), f"cannot read: {exc}") from None


def platform_roles(playbook: Path | None = None) -> tuple[str, ...]:
    """The roles of the platform playbook, in order (short names: helm, gpu_operator, ...)."""
    data = _read_yaml(playbook or paths.playbooks_dir() / "platform.yml") or []
    out: list[str] = []
    for play in data:
        for role in play.get("roles", []) if isinstance(play, Mapping) else []:
            name = role.get("role", role.get("name")) if isinstance(role, Mapping) else role
            short = str(name).rsplit(".", 1)[-1]
            if short not in out:
                out.append(short)
    return tuple(out)


def render_template(
    inv: Inventory,
    template: str,
    *,
    host: str | None = None,
    roles: tuple[str, ...] | None = None,
    host_vars: Mapping[str, Any] | None = None,
) -> str:
    """The text of a role template rendered for one host by Ansible's template lookup.

    `template` is a path under roles/ ("verify/templates/smoke/pods.yml.j2"); `host` defaults to the
    first control plane. The variables are Ansible's for a play of `roles` (default: the template's own
    role); `host_vars` (facts, a task's `vars:`) rank above them. Raises ReleaseRenderError naming the
    template that failed (a lookup is refused the same way)."""
    variables = host_variables(inv, host, roles or (template.split("/", 1)[0],), host_vars)
    path = paths.roles_dir() / template
    try:
        return variables.render_file(path)
    except LookupRefused as exc:
        raise ReleaseRenderError(_shown(path), str(exc)) from None


def _bool(value: Any) -> bool:
    """Ansible's `bool` filter."""
    from ansible.module_utils.parsing.convert_bool import boolean

    return bool(boolean(value, strict=False))


_FILTERS = "ansible_collections.gpubring.core.plugins.filter"


def _release_filters() -> Any:
    """The helm role's filter plugin that assembles and completes a release (plugins/filter/
    helm_release.py): the one place a run and `plan` both do it. Ansible's collection loader is set up
    by host_variables before a release is rendered."""
    return importlib.import_module(f"{_FILTERS}.helm_release")


def render_release(
    role: str, release_id: str, variables: Variables, helm_defaults: Mapping[str, Any]
) -> Release | None:
    """One release as roles/helm/tasks/role_release.yml renders and assembles it (the same filter,
    gpubring.core.helm_release_assemble, over the same three templates)."""
    folder = paths.roles_dir() / role / "templates" / "releases" / release_id
    where = f"roles/{role}/templates/releases/{release_id}"
    filters = _release_filters()
    try:
        head = variables.render_yaml(folder / "release.yml.j2")
        if not isinstance(head, Mapping):
            raise ReleaseRenderError(f"{where}/release.yml.j2", "expected a mapping (the release)")
        if not _bool(head.get("enabled", True)):
            return None
        values = variables.render_yaml(folder / "values.yml.j2")
        objects = variables.render_yaml(folder / "manifests.yml.j2")
        try:
            assembled = filters.helm_release_assemble(head, values, objects)
        except filters.ReleaseShapeError as exc:
            raise ReleaseRenderError(f"{where}/{exc.template}", exc.message) from None
        merged = filters.helm_release_complete(assembled, {}, helm_defaults)
        for key in (
            ("name", "namespace") if not merged.get("chart") else ("name", "chart", "version", "namespace")
        ):
            if not merged.get(key):
                raise ReleaseRenderError(f"{where}/release.yml.j2", f"expected a non-empty {key}")
        return _assemble(role, merged, variables)
    except LookupRefused as exc:
        return _deferred(role, release_id, f"{where}: {exc}")


def _deferred(role: str, name: str, why: str) -> Release:
    return Release(
        role=role, name=name, chart="", version="", repo="", namespace="", source={}, values={}, deferred=why
    )


def _assemble(role: str, merged: Mapping[str, Any], variables: Variables) -> Release:
    """The Release of a checked definition, its chart source from the helm role's source.yml.j2."""
    source = variables.render_yaml(
        paths.roles_dir() / "helm" / "templates" / "source.yml.j2", {"helm_release": dict(merged)}
    )
    manifests = list(merged.get("manifests") or [])
    ready = list(merged.get("ready") or [])
    return Release(
        role=role,
        name=str(merged["name"]),
        chart=str(merged["chart"]),
        version=str(merged["version"]),
        repo=str(merged.get("repo") or ""),
        namespace=str(merged["namespace"]),
        source={k: v for k, v in source.items() if k != "namespace"},
        values=dict(merged.get("values") or {}),
        namespace_object=source.get("namespace") if _bool(merged.get("create_namespace", True)) else None,
        pre_manifests=list(merged.get("pre_manifests") or []),
        manifests=manifests,
        wait=_bool(merged.get("wait", True)),
        timeout=str(merged.get("timeout", "10m")),
        ready=ready,
        waits=_waits(str(merged["name"]), merged, manifests, ready, variables),
        upgrade_crds=_bool(merged.get("upgrade_crds", False)),
    )


def _waits(
    name: str,
    merged: Mapping[str, Any],
    manifests: Sequence[Mapping[str, Any]],
    ready: Sequence[Mapping[str, Any]],
    variables: Variables,
) -> list[str]:
    """What a run of the release waits for, in the words and with the timeouts of the helm role
    (tasks/release.yml, manifest.yml, ready.yml; helm_wait_timeouts in its defaults)."""
    timeouts = variables.get("helm_wait_timeouts") or {}
    out: list[str] = []
    if _bool(merged.get("wait", True)) and merged.get("chart"):
        limit = merged.get("timeout", "10m")
        out.append(f"Helm --wait: the chart's Deployments, StatefulSets and DaemonSets ready (<= {limit})")
    if manifests:
        kinds = ", ".join(f"{m.get('kind')}/{(m.get('metadata') or {}).get('name')}" for m in manifests)
        accept = timeouts.get("accept", "?")
        out.append(f"the API server accepts, before each is applied (<= {accept} s each): {kinds}")
    if ready:
        # The helm role's own words (its filter plugin), as the run's task names and failures say them.
        text = importlib.import_module(f"{_FILTERS}.helm_ready").helm_ready_text
        limit = timeouts.get(name, timeouts.get("default", "?"))
        out.extend(f"{text(entry)} (<= {limit} s)" for entry in ready)
    return out


def _release_defaults(variables: Variables) -> dict[str, Any]:
    """The fields a release leaves out: the site's helm_release_defaults over the engine's own
    (roles/helm/vars/main.yml __helm_release_fields), as the helm role combines them."""
    engine = variables.get("__helm_release_fields") or {}
    return dict(_release_filters().helm_release_complete({}, engine, variables.get("helm_release_defaults")))


def role_releases(role: str, variables: Variables) -> list[Release]:
    """The enabled releases of one role (its `__<role>_releases`), in order."""
    helm_defaults = _release_defaults(variables)
    out: list[Release] = []
    for release_id in variables.get(f"__{role}_releases") or []:
        release = render_release(role, str(release_id), variables, helm_defaults)
        if release is not None:
            out.append(release)
    return out


def plan_releases(inv: Inventory, host: str | None = None) -> list[Release]:
    """Every enabled release of the platform phase for this inventory, in the order they apply.

    `host` is the host the platform play runs on (default: the first control plane). Raises
    ReleaseRenderError naming the template or variable that failed; a release that needs a lookup
    comes back with `deferred` set."""
    variables = host_variables(inv, host)
    out: list[Release] = []
    for role in platform_roles():
        if role == "helm":
            out.extend(_extra_releases(variables))
            continue
        out.extend(role_releases(role, variables))
    return out


def _extra_releases(variables: Variables) -> list[Release]:
    try:
        extras = variables.get("helm_releases") or []
        helm_defaults = _release_defaults(variables)
    except LookupRefused as exc:
        return [_deferred("helm", "helm_releases", f"helm_releases: {exc}")]
    out: list[Release] = []
    for index, extra in enumerate(extras):
        where = f"helm_releases[{index}]"
        if not isinstance(extra, Mapping):
            raise ReleaseRenderError(where, "expected a mapping (a release)")
        merged = _release_filters().helm_release_complete(extra, {}, helm_defaults)
        for key in ("name", "chart", "version", "namespace"):
            if not merged.get(key):
                raise ReleaseRenderError(where, f"expected a non-empty {key}")
        try:
            out.append(_assemble("helm", merged, variables))
        except LookupRefused as exc:
            out.append(_deferred("helm", str(merged["name"]), f"{where}: {exc}"))
    return out
