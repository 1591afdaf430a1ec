"""Every download the roles make, and where it comes from for one inventory (issue 25).

The roles are read, not a list kept by hand:

- apt sources and files: every task of roles/*/tasks whose module downloads (ansible.builtin.get_url and
  uri `url`, deb822_repository `uris`, apt_repository `repo`, apt `deb`), and every apt source template
  (templates/etc/apt/sources.list.d/*.j2, read as text for its URLs);
- Helm charts: every planned release (gpubring.releases, as `gpubring plan` renders them) and the CNI's
  chart, through roles/helm/templates/source.yml.j2;
- container images: the pins of the effective version matrix under *image* keys, the roles' defaults
  whose name ends in _image, and the image references in every release's rendered values and objects.
  The images a chart pulls by its own defaults come from the rendered charts (gpubring.bundle.images).

Each expression is rendered by Ansible's templar (gpubring.releases' Variables) with the inventory's
variables, once with the four mirror variables emptied (the upstream) and once as the inventory (or the
caller's `overrides`) sets them (the source a run uses). Images go through containerd's registry mirror
(roles/containerd certs.d/_default/hosts.toml), so an image's source is its reference, pulled through
gpubring_registry_mirror when that is set.

Not covered by any mirror variable, by design: the OS's own archive (the host's sources.list, which a site
mirrors with its own apt configuration); gpubring adds no source for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from gpubring import paths

if TYPE_CHECKING:
    from gpubring.inventory import Inventory
    from gpubring.releases import Release, Variables

__all__ = [
    "FACTS",
    "KINDS",
    "MIRROR_VARIABLES",
    "NO_MIRRORS",
    "PROBE_MIRRORS",
    "Download",
    "apt_source_templates",
    "document",
    "images_in",
    "lines",
    "mirror_path",
    "registry",
    "scan",
    "task_downloads",
    "url_downloads",
]

# The mirror variable (settings.yml) that covers each kind of download.
MIRROR_VARIABLES = {
    "apt": "gpubring_apt_mirror",
    "file": "gpubring_binary_mirror",
    "chart": "gpubring_chart_mirror",
    "image": "gpubring_registry_mirror",
}
KINDS = tuple(MIRROR_VARIABLES)
NO_MIRRORS = dict.fromkeys(MIRROR_VARIABLES.values(), "")
# Mirrors on a reserved name (RFC 2606 .invalid): rendered with them, a URL shows the path it has under its
# mirror (the layout a bundle's files/ and apt/ must have).
PROBE_MIRRORS = {
    var: f"https://{kind}.gpubring-mirror.invalid/{kind}" for kind, var in MIRROR_VARIABLES.items()
}

# Which field of which module downloads.
DOWNLOAD_FIELDS = {
    "get_url": ("url",),
    "uri": ("url",),
    "deb822_repository": ("uris",),
    "apt_repository": ("repo",),
    "apt": ("deb",),
}
# A task's URL is an apt repository's (its key, its keyring package) or a file's (a binary, a manifest).
APT_ROLES = ("containerd", "kubernetes_packages", "nvidia_container_toolkit", "nvidia_driver", "rdma")

# Facts the download expressions read (a Debian 12 x86_64 host: the lab's and the sample's).
FACTS: dict[str, Any] = {
    "distribution": "Debian",
    "distribution_release": "bookworm",
    "distribution_major_version": "12",
    "distribution_version": "12.8",
    "os_family": "Debian",
    "architecture": "x86_64",
    "machine": "x86_64",
}

URL = re.compile(r"(?:https?|oci)://[^\s\"'<>]+")


@dataclass(frozen=True)
class Download:
    """One thing a run fetches."""

    kind: str  # apt, file, chart, image
    role: str
    where: str  # the file (and task, or release) it was read from
    upstream: str  # where it comes from with no mirror set
    source: str  # where a run with this inventory (and the overrides) fetches it
    name: str = ""  # a chart's name, an image's reference, a file's name
    version: str = ""  # a chart's pin, an image's tag or digest
    repository: bool = False  # an apt repository (a source a host reads), not one file

    @property
    def variable(self) -> str:
        return MIRROR_VARIABLES[self.kind]

    def via(self, inv_values: Mapping[str, Any]) -> str:
        """`mirror` when the kind's mirror variable is set, "local" for a chart given as a file, else
        "upstream"."""
        if self.kind == "chart" and self.source.startswith("file "):
            return "local"
        return "mirror" if str(inv_values.get(self.variable) or "").strip() else "upstream"

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "role": self.role,
            "where": self.where,
            "upstream": self.upstream,
            "source": self.source,
            "variable": self.variable,
            "name": self.name,
            "version": self.version,
            "repository": self.repository,
        }


# -- reading the roles -------------------------------------------------------------------------------


def _roles() -> Path:
    return paths.roles_dir()


def _modules(task: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for key, args in task.items():
        short = str(key).rsplit(".", 1)[-1]
        if short in DOWNLOAD_FIELDS and str(key) in (short, f"ansible.builtin.{short}"):
            yield short, args


def _tasks(data: Any, scope: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], dict[str, Any]]]:
    """Every task (blocks walked), with the `vars:` of its blocks and its own."""
    for task in data or []:
        if not isinstance(task, Mapping):
            continue
        own = {**scope, **(task.get("vars") or {})}
        yield task, own
        for section in ("block", "rescue", "always"):
            yield from _tasks(task.get(section), own)


@cache
def _load(path: Path) -> Any:
    """A role file's YAML, read once per process (read-only here: callers copy what they keep)."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _role_facts(role: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    """What a role sets for itself before it downloads: its OS vars file, the first found of
    <distribution>-<major>.yml, <distribution>.yml, <os_family>.yml (the roles' own first_found order,
    e.g. roles/kubernetes_packages/tasks/vars.yml), and the set_fact arguments of its tasks (raw
    expressions, rendered with the rest)."""
    out: dict[str, Any] = {}
    names = (
        f"{facts['distribution']}-{facts['distribution_major_version']}.yml",
        f"{facts['distribution']}.yml",
        f"{facts['os_family']}.yml",
    )
    os_vars = next((f for n in names if (f := _roles() / role / "vars" / n).is_file()), None)
    if os_vars is not None:
        out.update(_load(os_vars) or {})
    for path in sorted((_roles() / role / "tasks").glob("**/*.yml")):
        for task, _ in _tasks(_load(path), {}):
            for key in ("ansible.builtin.set_fact", "set_fact"):
                if isinstance(task.get(key), Mapping):
                    out.update({k: v for k, v in task[key].items() if k != "cacheable"})
    return out


@cache
def task_downloads() -> tuple[tuple[str, str, str, str, dict[str, Any]], ...]:
    """(role, where, module, raw expression, task vars) of every downloading field under roles/*/tasks."""
    out = []
    root = paths.project_root()
    for path in sorted(_roles().glob("*/tasks/**/*.yml")):
        role = path.relative_to(_roles()).parts[0]
        for task, scope in _tasks(_load(path), {}):
            for module, args in _modules(task):
                if not isinstance(args, Mapping):
                    continue
                for field in DOWNLOAD_FIELDS[module]:
                    value = args.get(field)
                    for raw in value if isinstance(value, list) else [value]:
                        if raw:
                            where = f"{path.relative_to(root)}: {task.get('name', module)}"
                            out.append((role, where, module, str(raw), scope))
    return tuple(out)


def apt_source_templates() -> list[Path]:
    return sorted(_roles().glob("*/templates/etc/apt/sources.list.d/*.j2"))


def _roles_with_downloads() -> tuple[str, ...]:
    found = {d[0] for d in task_downloads()} | {
        p.relative_to(_roles()).parts[0] for p in apt_source_templates()
    }
    return tuple(sorted(found))


def _host(inv: Inventory) -> str:
    return (inv.groups.get("control_plane") or tuple(inv.hosts))[0]


def _variables(
    inv: Inventory,
    roles: tuple[str, ...] | None,
    overrides: Mapping[str, Any],
    facts: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> Variables:
    from gpubring import releases

    host = _host(inv)
    ansible_facts = {**facts, "default_ipv4": {"address": inv.hosts[host].address, "interface": "eno1"}}
    return releases.host_variables(
        inv, host, roles, {**(extra or {}), "ansible_facts": ansible_facts, **overrides}
    )


def _local(url: str, inv: Inventory) -> bool:
    """A URL the roles call on the cluster itself (an API server, a Service), not a download."""
    host = urlsplit(url).hostname or ""
    addresses = {h.address for h in inv.hosts.values()}
    return (
        host in ("127.0.0.1", "localhost", "::1")
        or host in addresses
        or host.endswith((".svc", ".cluster.local"))
    )


def url_downloads(inv: Inventory, overrides: Mapping[str, Any], facts: Mapping[str, Any]) -> list[Download]:
    """The apt sources and files of the roles' tasks and apt source templates, for a host with `facts`
    (scan's first part; the bundle asks it for each OS release it carries)."""
    return _url_downloads(inv, overrides, facts)


def _url_downloads(inv: Inventory, overrides: Mapping[str, Any], facts: Mapping[str, Any]) -> list[Download]:
    roles = _roles_with_downloads()
    root = paths.project_root()
    out = []
    for role, where, module, raw, scope in task_downloads():
        kind = (
            "apt" if module in ("deb822_repository", "apt_repository", "apt") or role in APT_ROLES else "file"
        )
        extra = {**_role_facts(role, facts), **scope}
        upstream = str(_variables(inv, roles, {**overrides, **NO_MIRRORS}, facts, extra).resolve(raw, where))
        if _local(upstream.strip(), inv):
            continue
        source = str(_variables(inv, roles, overrides, facts, extra).resolve(raw, where))
        name = urlsplit(upstream.strip()).path.rstrip("/").rsplit("/", 1)[-1]
        repository = module in ("deb822_repository", "apt_repository")
        out.append(Download(kind, role, where, upstream.strip(), source.strip(), name, "", repository))
    for path in apt_source_templates():
        role = path.relative_to(_roles()).parts[0]
        extra = _role_facts(role, facts)
        up = URL.findall(_variables(inv, roles, {**overrides, **NO_MIRRORS}, facts, extra).render_file(path))
        down = URL.findall(_variables(inv, roles, overrides, facts, extra).render_file(path))
        if len(up) != len(down):
            raise ValueError(f"{path}: a different number of URLs with the mirror ({up} / {down})")
        out.extend(
            Download("apt", role, str(path.relative_to(root)), u, m, path.name.removesuffix(".j2"), "", True)
            for u, m in zip(up, down, strict=True)
        )
    return out


def _planned_releases(
    inv: Inventory, overrides: Mapping[str, Any], facts: Mapping[str, Any]
) -> list[Release]:
    """The releases `gpubring plan` shows (the platform phase's) and the CNI's chart, rendered with the
    overrides."""
    from gpubring import releases

    variables = _variables(inv, None, overrides, facts)
    found: list[Release] = []
    for role in releases.platform_roles():
        if role == "helm":
            found.extend(releases._extra_releases(variables))
        else:
            found.extend(releases.role_releases(role, variables))
    found.extend(releases.role_releases("cni", _variables(inv, ("helm", "cni"), overrides, facts)))
    return found


def chart_upstream(release: Release) -> str:
    """Where the chart of a release comes from with no mirror: its OCI reference, or `<repo> <chart>`."""
    if release.chart.startswith("oci://") or not release.repo:
        return release.chart
    return f"{release.repo} {release.chart}"


def _chart_downloads(found: Sequence[Release]) -> list[Download]:
    out = []
    for r in found:
        if r.deferred or not r.chart:
            continue  # a release of manifests only (its images are listed with the images)
        source = f"file {r.source.get('copy_from')}" if r.source.get("kind") == "file" else r.ref
        name = r.chart.rstrip("/").rsplit("/", 1)[-1]
        where = f"release {r.name} ({r.chart} {r.version})"
        out.append(Download("chart", r.role, where, chart_upstream(r), source, name, str(r.version)))
    return out


def _image(role: str, where: str, ref: str) -> Download:
    _, version = split_reference(ref)
    return Download("image", role, where, ref, ref, ref, version)


def split_reference(ref: str) -> tuple[str, str]:
    """(repository, tag or digest) of an image reference ("" when it names neither)."""
    if "@" in ref:
        repo, _, digest = ref.partition("@")
        return repo, digest
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        return ref.rsplit(":", 1)[0], ref.rsplit(":", 1)[1]
    return ref, ""


def _pinned_images(inv: Inventory, overrides: Mapping[str, Any], facts: Mapping[str, Any]) -> list[Download]:
    out: list[Download] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif (
            isinstance(node, str)
            and "image" in path.rsplit(".", 1)[-1]
            and re.fullmatch(r"[\w.\-/:@]+", node)
            and ("/" in node or ":" in node)
        ):
            out.append(_image("versions.yml", path, node))

    walk(inv.versions, "gpubring_versions")
    keys: dict[str, str] = {}
    for path in sorted(_roles().glob("*/defaults/main.yml")):
        for key in _load(path) or {}:
            if str(key).endswith("_image"):
                keys[str(key)] = path.relative_to(_roles()).parts[0]
    defaults = _variables(inv, tuple(sorted(set(keys.values()))), overrides, facts)
    for key, role in keys.items():
        if key in defaults.raw:
            value = str(defaults[key]).strip()
            if value:
                out.append(_image(role, key, value))
    return out


def images_in(node: Any) -> Iterator[str]:
    """Image references in rendered values or objects: `image: <ref>`, or an image mapping
    ({registry?, repository, tag/version}), or NicClusterPolicy's {image, repository, version}."""
    if isinstance(node, list):
        for item in node:
            yield from images_in(item)
    if not isinstance(node, Mapping):
        return
    image = node.get("image")
    if isinstance(image, str) and image and isinstance(node.get("repository"), str):
        tag = node.get("version") or node.get("tag")
        yield f"{node['repository']}/{image}" + (f":{tag}" if tag else "")
    elif isinstance(image, str) and ("/" in image or ":" in image):
        yield image
    elif isinstance(image, Mapping) and isinstance(image.get("repository"), str) and image["repository"]:
        registry_ = image.get("registry")
        tag = image.get("tag") or image.get("version")
        ref = (f"{registry_}/" if registry_ else "") + image["repository"]
        if tag or registry_ or "/" in ref:
            yield ref + (f":{tag}" if tag else "")
    for key, value in node.items():
        if key != "image" or not isinstance(value, str):
            yield from images_in(value)


def _release_images(found: Sequence[Release]) -> list[Download]:
    """The images gpubring itself names in its releases' values and objects."""
    out = []
    for r in found:
        for where, node in (("values", r.values), ("objects", r.objects())):
            for ref in dict.fromkeys(images_in(node)):
                out.append(_image(r.role, f"release {r.name} {where}", ref))
    return out


def registry(image: str) -> str:
    """The registry host of an image reference, as containerd resolves it (docker.io without one)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def scan(
    inv: Inventory,
    overrides: Mapping[str, Any] | None = None,
    *,
    releases: Sequence[Release] | None = None,
    facts: Mapping[str, Any] = FACTS,
) -> tuple[Download, ...]:
    """Every download of a run on this inventory (see the module's docstring). `overrides` (mirror
    variables, say) rank above the inventory's variables; `releases` replaces the planned releases (a
    test passes every release of every role). Raises gpubring.releases.ReleaseRenderError naming the
    template or variable that failed."""
    over = dict(overrides or {})
    found = list(releases) if releases is not None else _planned_releases(inv, over, facts)
    return (
        *_url_downloads(inv, over, facts),
        *_chart_downloads(found),
        *_pinned_images(inv, over, facts),
        *_release_images(found),
    )


def mirror_path(probe: Download) -> str:
    """The path of a URL download under its mirror, from the download scanned with PROBE_MIRRORS as
    overrides ("" when the mirror does not cover it)."""
    prefix = PROBE_MIRRORS[probe.variable] + "/"
    target = probe.source.split()[0] if probe.source else ""
    return target[len(prefix) :].lstrip("/") if target.startswith(prefix) else ""


# -- what `gpubring plan` shows ----------------------------------------------------------------------


def _described(d: Download, values: Mapping[str, Any]) -> str:
    via = d.via(values)
    if via == "local":
        return f"local chart ({d.source.removeprefix('file ')})"
    if d.kind == "image":
        if via == "mirror":
            return f"{values.get(d.variable)} ({d.variable}, containerd's registry mirror)"
        return f"{registry(d.upstream)} (upstream; {d.variable} unset)"
    if via == "mirror":
        return f"{d.source} ({d.variable})"
    return f"{d.source} (upstream; {d.variable} unset)"


def document(found: Sequence[Download], values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The downloads as JSON: each with where it comes from (`via`: upstream, mirror or local)."""
    return [{**d.as_dict(), "via": d.via(values), "from": _described(d, values)} for d in _unique(found)]


def lines(found: Sequence[Download], values: Mapping[str, Any]) -> list[str]:
    """One line per download (the same download once), for the plan's human output."""
    out = []
    for d in _unique(found):
        what = d.upstream if d.kind != "chart" else f"{d.name} {d.version}"
        out.append(f"  {d.kind:5} {what}  <-  {_described(d, values)}")
    return out


def _unique(found: Sequence[Download]) -> list[Download]:
    seen: dict[tuple[str, str, str], Download] = {}
    for d in found:
        seen.setdefault((d.kind, d.upstream, d.source), d)
    return list(seen.values())
