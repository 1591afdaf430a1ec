"""The Helm releases of the platform phase, rendered from an inventory without Ansible.

The platform roles keep each release as three templates under
roles/<role>/templates/releases/<release>/ (release.yml.j2, values.yml.j2, manifests.yml.j2) and the
helm role resolves the chart's source with roles/helm/templates/source.yml.j2. The roles render them
with Ansible (roles/helm/tasks/role_releases.yml); this module renders the SAME files with Jinja2 and
the few Ansible filters they use, so `gpubring plan` shows what a run would apply and the rendering
tests can validate every values file and manifest; render_template renders any other role template
the same way. Ansible is never imported here.

Variables are layered as Ansible layers them for the first control plane (where the platform play
runs): the platform roles' defaults/main.yml (in playbooks/platform.yml order) and the settings.yml
defaults, then the host's inventory variables, then the roles' vars/main.yml; `gpubring_versions` is
the effective matrix (pins plus overrides). A default such as "{{ gpubring_versions.helm.version }}"
is resolved lazily, and a string that is one expression keeps its type, as in ansible-core 2.19.
Facts do not exist here: a template reads them with a default (the roles compute them at run time).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import jinja2
import jinja2.runtime
import yaml
from jinja2.nativetypes import NativeEnvironment
from jinja2.sandbox import SandboxedEnvironment

from gpubring import paths

if TYPE_CHECKING:
    from gpubring.inventory import Inventory

__all__ = ["Release", "ReleaseRenderError", "plan_releases", "platform_roles", "render_template"]

_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_ONE_EXPRESSION = re.compile(r"^\{\{(?:(?!\{\{|\}\}).)*\}\}$", re.DOTALL)
_BOOL_TRUE = frozenset({"yes", "on", "1", "true", "y", "t"})
_INTERNAL = ("enabled", "values_overrides")


class ReleaseRenderError(Exception):
    """A template or a variable of a platform role did not render."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass(frozen=True)
class Release:
    """One Helm release as the platform phase applies it."""

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
        }


# -- the Ansible filters the templates use ---------------------------------------------------------


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, int | float):
        return value == 1
    return str(value).strip().lower() in _BOOL_TRUE


def _to_json(value: Any, **kw: Any) -> str:
    return json.dumps(value, **kw)


def _to_nice_json(value: Any, indent: int = 4, sort_keys: bool = True, **kw: Any) -> str:
    return json.dumps(value, indent=indent, sort_keys=sort_keys, separators=(",", ": "), **kw)


def _to_yaml(value: Any, **kw: Any) -> str:
    return str(yaml.dump(value, Dumper=_SafeDumper, allow_unicode=True, **kw))


def _to_nice_yaml(value: Any, indent: int = 4, **kw: Any) -> str:
    return str(
        yaml.dump(
            value, Dumper=_SafeDumper, indent=indent, allow_unicode=True, default_flow_style=False, **kw
        )
    )


def _from_yaml(value: Any) -> Any:
    return yaml.load(value, Loader=_SafeLoader) if isinstance(value, str) else value


def _merge(left: Mapping[str, Any], right: Mapping[str, Any], recursive: bool) -> dict[str, Any]:
    out = dict(left)
    for key, value in right.items():
        if recursive and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value, True)
        else:
            out[key] = value
    return out


def _combine(*terms: Any, recursive: bool = False) -> dict[str, Any]:
    dicts: list[Mapping[str, Any]] = []
    for term in terms:
        dicts.extend(term if isinstance(term, list) else [term])
    out: dict[str, Any] = {}
    for item in dicts:
        if not isinstance(item, Mapping):
            raise jinja2.TemplateRuntimeError(f"combine expects dictionaries, got {type(item).__name__}")
        out = _merge(out, item, recursive)
    return out


def _basename(value: Any) -> str:
    return os.path.basename(str(value))


def _comment(text: Any) -> str:
    """Ansible's `comment` filter in its default (plain) style."""
    lines = [f"# {line}" if line else "#" for line in str(text).split("\n")]
    return "\n".join(["#", *lines, "#"])


def _ternary(value: Any, true_val: Any, false_val: Any) -> Any:
    return true_val if _to_bool(value) else false_val


def _dict2items(
    value: Mapping[str, Any], key_name: str = "key", value_name: str = "value"
) -> list[dict[str, Any]]:
    return [{key_name: k, value_name: v} for k, v in value.items()]


def _items2dict(
    value: Iterable[Mapping[str, Any]], key_name: str = "key", value_name: str = "value"
) -> dict[str, Any]:
    return {item[key_name]: item[value_name] for item in value}


FILTERS: dict[str, Callable[..., Any]] = {
    "bool": _to_bool,
    "to_json": _to_json,
    "to_nice_json": _to_nice_json,
    "to_yaml": _to_yaml,
    "to_nice_yaml": _to_nice_yaml,
    "from_yaml": _from_yaml,
    "combine": _combine,
    "basename": _basename,
    "comment": _comment,
    "ternary": _ternary,
    "dict2items": _dict2items,
    "items2dict": _items2dict,
}


def _native_concat(values: Iterator[Any]) -> Any:
    """One expression keeps its type (ansible-core 2.19); anything else is a string."""
    head = list(islice(values, 2))
    if not head:
        return None
    if len(head) == 1:
        return head[0]
    return "".join(str(v) for v in chain(head, values))


def _context(tmpl: jinja2.Template, variables: Mapping[str, Any]) -> jinja2.runtime.Context:
    """A render context that reads `variables` itself (shared), so lazy variables stay lazy: Jinja
    only needs `in` and `[]` of its parent, though its annotation says dict."""
    return tmpl.new_context(cast(dict[str, Any], variables), shared=True)


def _configure(env: jinja2.Environment) -> jinja2.Environment:
    env.filters.update(FILTERS)
    return env


@cache
def _file_env() -> jinja2.Environment:
    # Ansible renders templates with trim_blocks on and a sandboxed environment.
    return _configure(
        SandboxedEnvironment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    )


@cache
def _expr_env() -> jinja2.Environment:
    return _configure(NativeEnvironment(undefined=jinja2.StrictUndefined))


class _Vars(Mapping[str, Any]):
    """Variables whose templated strings render on first use, like Ansible's lazy variables."""

    def __init__(
        self, raw: Mapping[str, Any], extra: Mapping[str, Any] | None = None, parent: _Vars | None = None
    ) -> None:
        self._raw = raw
        self._extra = dict(extra or {})
        self._parent = parent
        self._done: dict[str, Any] = {}
        self._busy: set[str] = set()

    def child(self, extra: Mapping[str, Any]) -> _Vars:
        return _Vars({}, extra, self)

    def __contains__(self, key: object) -> bool:
        return (
            key in self._extra
            or key in self._raw
            or (self._parent is not None and key in self._parent)
            or key in _file_env().globals
        )

    def __getitem__(self, key: str) -> Any:
        if key in self._extra:
            return self._extra[key]
        if key in self._raw:
            if key not in self._done:
                if key in self._busy:
                    raise ReleaseRenderError(key, "the variable refers to itself")
                self._busy.add(key)
                try:
                    self._done[key] = self.resolve(self._raw[key], key)
                finally:
                    self._busy.discard(key)
            return self._done[key]
        if self._parent is not None and key in self._parent:
            return self._parent[key]
        return _file_env().globals[key]

    def __iter__(self) -> Iterator[str]:
        return iter(
            {**dict.fromkeys(self._parent or ()), **dict.fromkeys(self._raw), **dict.fromkeys(self._extra)}
        )

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def resolve(self, value: Any, where: str) -> Any:
        """Render the templated strings in a value (recursively through lists and dicts)."""
        if isinstance(value, str):
            if "{{" not in value and "{%" not in value:
                return value
            try:
                if _ONE_EXPRESSION.match(value.strip()):
                    tmpl = _expr_env().from_string(value.strip())
                    out = _native_concat(tmpl.root_render_func(_context(tmpl, self)))
                else:
                    tmpl = _file_env().from_string(value)
                    out = "".join(tmpl.root_render_func(_context(tmpl, self)))
            except ReleaseRenderError:
                raise
            except Exception as exc:  # any error of the expression is the variable's
                raise ReleaseRenderError(where, f"{type(exc).__name__}: {exc} (in {value!r})") from None
            return self.resolve(out, where) if isinstance(out, str) and out != value else out
        if isinstance(value, Mapping):
            return {k: self.resolve(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value


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


def _role_file(role: str, rel: str) -> dict[str, Any]:
    data = _read_yaml(paths.roles_dir() / role / rel)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ReleaseRenderError(f"roles/{role}/{rel}", "expected a mapping of variables")
    return dict(data)


def _shown(path: Path) -> str:
    root = paths.project_root()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def _render_text(path: Path, variables: _Vars) -> str:
    rel = _shown(path)
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReleaseRenderError(rel, f"cannot read the template: {exc}") from None
    try:
        tmpl = _file_env().from_string(source)
        text = "".join(tmpl.root_render_func(_context(tmpl, variables)))
    except ReleaseRenderError as exc:
        raise ReleaseRenderError(rel, exc.message if exc.where in rel else str(exc)) from None
    except jinja2.TemplateSyntaxError as exc:
        raise ReleaseRenderError(rel, f"line {exc.lineno}: {exc}") from None
    except Exception as exc:  # a template runs Python: any error is the template's (or its input's)
        raise ReleaseRenderError(rel, f"{type(exc).__name__}: {exc}") from None
    return text


def _render_file(path: Path, variables: _Vars) -> Any:
    text = _render_text(path, variables)
    try:
        return yaml.load(text, Loader=_SafeLoader)
    except yaml.YAMLError as exc:
        raise ReleaseRenderError(_shown(path), f"the rendered text is not YAML: {exc}") from None


def _variables(
    inv: Inventory,
    host: str | None,
    roles: tuple[str, ...],
    host_vars: Mapping[str, Any] | None = None,
) -> _Vars:
    name = host or (inv.groups.get("control_plane") or tuple(inv.hosts))[0]
    raw: dict[str, Any] = {}
    for role in roles:
        raw.update(_role_file(role, "defaults/main.yml"))
    raw.update(inv.settings)
    raw.update(inv.hosts[name].vars)
    raw.update(host_vars or {})
    for role in roles:
        raw.update(_role_file(role, "vars/main.yml"))
    raw["gpubring_matrix"] = inv.versions
    extra = {
        "inventory_hostname": name,
        "inventory_hostname_short": name.split(".", 1)[0],
        "inventory_dir": str(inv.root.resolve()),
        "groups": {g: list(members) for g, members in inv.groups.items()},
        "group_names": list(inv.hosts[name].groups),
        "ansible_check_mode": False,
        "ansible_managed": "Ansible managed",  # as the template module sets it (the default text)
    }
    return _Vars(raw, extra)


def render_template(
    inv: Inventory,
    template: str,
    *,
    host: str | None = None,
    roles: tuple[str, ...] | None = None,
    host_vars: Mapping[str, Any] | None = None,
) -> str:
    """The text of a role template rendered for one host as Ansible renders it.

    `template` is a path under roles/ ("verify/templates/smoke/pods.yml.j2"); `host` defaults to the
    first control plane. The variables are layered as for the releases, from the defaults and vars of
    `roles` (default: the template's own role); `host_vars` (facts, a task's `vars:`) are added to the
    host's inventory variables. Raises ReleaseRenderError naming the template or variable that failed."""
    variables = _variables(inv, host, roles or (template.split("/", 1)[0],), host_vars)
    return _render_text(paths.roles_dir() / template, variables)


def _release(
    role: str, release_id: str, variables: _Vars, helm_defaults: Mapping[str, Any]
) -> Release | None:
    folder = paths.roles_dir() / role / "templates" / "releases" / release_id
    head = _render_file(folder / "release.yml.j2", variables)
    where = f"roles/{role}/templates/releases/{release_id}"
    if not isinstance(head, Mapping):
        raise ReleaseRenderError(f"{where}/release.yml.j2", "expected a mapping (the release)")
    if not _to_bool(head.get("enabled", True)):
        return None
    values = _render_file(folder / "values.yml.j2", variables) or {}
    if not isinstance(values, Mapping):
        raise ReleaseRenderError(f"{where}/values.yml.j2", "expected a mapping (the chart's values)")
    values = _merge(values, head.get("values_overrides") or {}, True)
    objects = _render_file(folder / "manifests.yml.j2", variables) or {}
    if not isinstance(objects, Mapping):
        raise ReleaseRenderError(
            f"{where}/manifests.yml.j2", "expected {pre_manifests: [...], manifests: [...]}"
        )
    merged = {**helm_defaults, **{k: v for k, v in head.items() if k not in _INTERNAL}}
    merged["values"] = values
    merged["pre_manifests"] = list(objects.get("pre_manifests") or [])
    merged["manifests"] = list(objects.get("manifests") or [])
    for key in (
        ("name", "namespace") if not merged.get("chart") else ("name", "chart", "version", "namespace")
    ):
        if not merged.get(key):
            raise ReleaseRenderError(f"{where}/release.yml.j2", f"expected a non-empty {key}")
    return _assemble(role, merged, variables)


def _assemble(role: str, merged: Mapping[str, Any], variables: _Vars) -> Release:
    """The Release of a checked definition, its chart source from the helm role's source.yml.j2."""
    source = _render_file(
        paths.roles_dir() / "helm" / "templates" / "source.yml.j2", variables.child({"helm_release": merged})
    )
    return Release(
        role=role,
        name=str(merged["name"]),
        chart=str(merged["chart"]),
        version=str(merged["version"]),
        repo=str(merged.get("repo") or ""),
        namespace=str(merged["namespace"]),
        source={k: v for k, v in source.items() if k != "namespace"},
        values=dict(merged.get("values") or {}),
        namespace_object=source.get("namespace") if _to_bool(merged.get("create_namespace", True)) else None,
        pre_manifests=list(merged.get("pre_manifests") or []),
        manifests=list(merged.get("manifests") or []),
        wait=_to_bool(merged.get("wait", True)),
        timeout=str(merged.get("timeout", "10m")),
        ready=list(merged.get("ready") or []),
    )


def plan_releases(inv: Inventory, host: str | None = None) -> list[Release]:
    """Every enabled release of the platform phase for this inventory, in the order they apply.

    `host` is the host the platform play runs on (default: the first control plane). Raises
    ReleaseRenderError naming the template or variable that failed."""
    roles = platform_roles()
    variables = _variables(inv, host, roles)
    helm_defaults = variables.get("helm_release_defaults", {})
    out: list[Release] = []
    for role in roles:
        if role == "helm":
            for i, extra in enumerate(variables.get("helm_releases", [])):
                out.append(_extra_release(extra, variables, helm_defaults, i))
            continue
        ids = _role_file(role, "vars/main.yml").get(f"__{role}_releases") or []
        for release_id in ids:
            release = _release(role, str(release_id), variables, helm_defaults)
            if release is not None:
                out.append(release)
    return out


def _extra_release(extra: Any, variables: _Vars, helm_defaults: Mapping[str, Any], index: int) -> Release:
    where = f"helm_releases[{index}]"
    if not isinstance(extra, Mapping):
        raise ReleaseRenderError(where, "expected a mapping (a release)")
    merged = {**helm_defaults, **extra}
    for key in ("name", "chart", "version", "namespace"):
        if not merged.get(key):
            raise ReleaseRenderError(where, f"expected a non-empty {key}")
    return _assemble("helm", merged, variables)
