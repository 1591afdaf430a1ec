"""No hidden downloads (issue 25, item 4): every place the roles fetch from, and the mirror that covers it.

The roles are read, not a list kept by hand:

- apt sources and files: every task of roles/*/tasks whose module downloads (ansible.builtin.get_url and
  uri `url`, deb822_repository `uris`, apt_repository `repo`, apt `deb`), and every apt source template
  (templates/etc/apt/sources.list.d/*.j2, read as text for its URLs);
- Helm charts: every release of every platform role (gpubring.releases, as `gpubring plan` renders them,
  all components on: tests/data/inventories/all-on), through roles/helm/templates/source.yml.j2;
- container images: the pins in versions.yml under *image* keys, the roles' defaults whose name ends
  in _image, and the image references in every release's rendered values and objects (all-on). The
  images the pinned charts pull by their own defaults are out of scope here (they come from the
  rendered charts, issue 25 item 1's bundle); they go through the same containerd mirror.

"Covered" is proven by rendering: each expression is rendered by Ansible's templar (gpubring.releases'
Variables) once with no mirror (the upstream, recorded in DOWNLOADS) and once with the four mirror
variables set; the mirrored rendering must name the mirror's host and path instead of the upstream host.
Images go through containerd: its certs.d/_default/hosts.toml (the only registry directory the role
writes) is rendered with gpubring_registry_mirror set and must name the mirror, and config.toml must read
certs.d, so every registry without a directory of its own (all of them) is pulled through the mirror.

Not covered by any mirror variable, by design: the OS's own archive (deb.debian.org, the host's
sources.list, which a site mirrors with its own apt configuration) — gpubring adds no source for it.

DOWNLOADS (built on first use) is the full table: (kind, role, where, upstream, mirrored); issue 25's
bundle can reuse it. `pytest tests/test_downloads.py -s -k table` prints it.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pytest
import yaml

from gpubring import releases
from gpubring.inventory import Inventory, load_inventory
from helpers import REPO

ROLES = REPO / "roles"
ALL_ON = REPO / "tests" / "data" / "inventories" / "all-on"
SAMPLE = REPO / "inventories" / "prod"

MIRRORS = {
    "gpubring_apt_mirror": "https://apt.mirror.invalid/apt",
    "gpubring_chart_mirror": "https://charts.mirror.invalid/charts",
    "gpubring_registry_mirror": "https://registry.mirror.invalid",
    "gpubring_binary_mirror": "https://files.mirror.invalid/files",
}
NO_MIRRORS = dict.fromkeys(MIRRORS, "")

# Which field of which module downloads, and the mirror variable that must cover it.
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
FACTS = {
    "distribution": "Debian",
    "distribution_release": "bookworm",
    "distribution_major_version": "12",
    "distribution_version": "12.8",
    "os_family": "Debian",
    "architecture": "x86_64",
    "machine": "x86_64",
}

URL = re.compile(r"(?:https?|oci)://[^\s\"'<>]+")


class Download(NamedTuple):
    kind: str  # apt, file, chart, image
    role: str
    where: str  # file (and task) it was read from
    upstream: str
    mirrored: str


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


def _role_facts(role: str) -> dict[str, Any]:
    """What a role sets for itself before it downloads: its vars/Debian.yml (include_vars by OS) and the
    set_fact arguments of its tasks (raw expressions, rendered with the rest)."""
    out: dict[str, Any] = {}
    os_vars = ROLES / role / "vars" / f"{FACTS['distribution']}.yml"
    if os_vars.is_file():
        out.update(yaml.safe_load(os_vars.read_text(encoding="utf-8")) or {})
    for path in sorted((ROLES / role / "tasks").glob("**/*.yml")):
        for task, _ in _tasks(yaml.safe_load(path.read_text(encoding="utf-8")), {}):
            for key in ("ansible.builtin.set_fact", "set_fact"):
                if isinstance(task.get(key), Mapping):
                    out.update({k: v for k, v in task[key].items() if k != "cacheable"})
    return out


def task_downloads() -> list[tuple[str, str, str, str, dict[str, Any]]]:
    """(role, where, module, raw expression, task vars) of every downloading field under roles/*/tasks."""
    out = []
    for path in sorted(ROLES.glob("*/tasks/**/*.yml")):
        role = path.relative_to(ROLES).parts[0]
        for task, scope in _tasks(yaml.safe_load(path.read_text(encoding="utf-8")), {}):
            for module, args in _modules(task):
                if not isinstance(args, Mapping):
                    continue
                for field in DOWNLOAD_FIELDS[module]:
                    value = args.get(field)
                    for raw in value if isinstance(value, list) else [value]:
                        if raw:
                            where = f"{path.relative_to(REPO)}: {task.get('name', module)}"
                            out.append((role, where, module, str(raw), scope))
    return out


def apt_source_templates() -> list[Path]:
    return sorted(ROLES.glob("*/templates/etc/apt/sources.list.d/*.j2"))


@functools.cache
def _inventory(root: Path) -> Inventory:
    return load_inventory(root)


def _variables(
    root: Path,
    roles: tuple[str, ...] | None,
    mirrors: Mapping[str, str],
    extra: Mapping[str, Any] | None = None,
) -> releases.Variables:
    inv = _inventory(root)
    host = inv.groups["control_plane"][0]
    facts = {**FACTS, "default_ipv4": {"address": inv.hosts[host].address, "interface": "eno1"}}
    return releases.host_variables(inv, host, roles, {**(extra or {}), "ansible_facts": facts, **mirrors})


def _roles_with_downloads() -> tuple[str, ...]:
    found = {d[0] for d in task_downloads()} | {p.relative_to(ROLES).parts[0] for p in apt_source_templates()}
    return tuple(sorted(found))


def _local(url: str) -> bool:
    """A URL the roles call on the cluster itself (an API server, a Service), not a download."""
    host = urlsplit(url).hostname or ""
    addresses = {h.address for h in _inventory(SAMPLE).hosts.values()}
    return (
        host in ("127.0.0.1", "localhost", "::1")
        or host in addresses
        or host.endswith((".svc", ".cluster.local"))
    )


def _mirror_for(kind: str) -> str:
    return {
        "apt": "gpubring_apt_mirror",
        "file": "gpubring_binary_mirror",
        "chart": "gpubring_chart_mirror",
        "image": "gpubring_registry_mirror",
    }[kind]


def _url_downloads() -> list[Download]:
    roles = _roles_with_downloads()
    out = []
    for role, where, module, raw, scope in task_downloads():
        kind = (
            "apt" if module in ("deb822_repository", "apt_repository", "apt") or role in APT_ROLES else "file"
        )
        extra = {**_role_facts(role), **scope}
        up = _variables(SAMPLE, roles, NO_MIRRORS, extra)
        down = _variables(SAMPLE, roles, MIRRORS, extra)
        upstream = str(up.resolve(raw, where)).strip()
        if _local(upstream):
            continue
        out.append(Download(kind, role, where, upstream, str(down.resolve(raw, where)).strip()))
    for path in apt_source_templates():
        role = path.relative_to(ROLES).parts[0]
        up = _variables(SAMPLE, roles, NO_MIRRORS, _role_facts(role))
        down = _variables(SAMPLE, roles, MIRRORS, _role_facts(role))
        up_urls = URL.findall(up.render_file(path))
        down_urls = URL.findall(down.render_file(path))
        assert len(up_urls) == len(down_urls) and up_urls, (
            f"{path}: no URL, or a different number with the mirror"
        )
        out.extend(
            Download("apt", role, str(path.relative_to(REPO)), u, m)
            for u, m in zip(up_urls, down_urls, strict=True)
        )
    return out


def _no_chart_paths() -> dict[str, str]:
    """Every role's *_chart_path emptied: a local .tgz (all-on has some) is no download, so each release
    is rendered from where a site without one fetches it."""
    out = {}
    for path in ROLES.glob("*/defaults/main.yml"):
        out.update(
            {
                k: ""
                for k in yaml.safe_load(path.read_text(encoding="utf-8")) or {}
                if k.endswith("_chart_path")
            }
        )
    return out


@functools.cache
def _releases(mirrored: bool) -> tuple[releases.Release, ...]:
    """Every release of the platform roles (all-on) and the CNI's, rendered with or without the mirrors."""
    mirrors = MIRRORS if mirrored else NO_MIRRORS
    variables = _variables(ALL_ON, None, mirrors, _no_chart_paths())
    found = []
    for role in releases.platform_roles():
        if role != "helm":
            found.extend(releases.role_releases(role, variables))
    # The CNI's charts (cluster phase, one per gpubring_cni; Flannel is a manifest, a file download).
    for cni in ("calico", "cilium"):
        cni_vars = _variables(ALL_ON, ("helm", "cni"), mirrors, {**_no_chart_paths(), "gpubring_cni": cni})
        found.extend(releases.role_releases("cni", cni_vars))
    return tuple(found)


def _chart_downloads() -> list[Download]:
    out = []
    rendered = {"up": _releases(False), "down": _releases(True)}
    for up, down in zip(rendered["up"], rendered["down"], strict=True):
        assert (up.role, up.name) == (down.role, down.name)
        assert not up.deferred, up
        if not up.chart:
            continue  # a release of manifests only (their images are listed below)
        assert up.source.get("kind") in ("repo", "oci"), up
        out.append(
            Download("chart", up.role, f"release {up.name} ({up.chart} {up.version})", up.ref, down.ref)
        )
    return out


def _image_downloads() -> list[Download]:
    out = []
    matrix = yaml.safe_load((REPO / "versions.yml").read_text(encoding="utf-8"))

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else str(key))
        elif (
            isinstance(node, str)
            and "image" in path.rsplit(".", 1)[-1]
            and re.fullmatch(r"[\w.\-/:@]+", node)
            and ("/" in node or ":" in node)
        ):
            out.append(Download("image", "versions.yml", path, node, node))

    walk(matrix, "")
    defaults = _variables(
        SAMPLE, ("kubeadm_control_plane", "fabric_test", "verify", "containerd"), NO_MIRRORS
    )
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        for key in yaml.safe_load(path.read_text(encoding="utf-8")) or {}:
            if key.endswith("_image") and key in defaults.raw:
                value = str(defaults[key]).strip()
                if value:
                    out.append(Download("image", path.relative_to(ROLES).parts[0], key, value, value))
    return out


def _images_in(node: Any) -> Iterator[str]:
    """Image references in rendered values or objects: `image: <ref>`, or an image mapping
    ({registry?, repository, tag/version}), or NicClusterPolicy's {image, repository, version}."""
    if isinstance(node, list):
        for item in node:
            yield from _images_in(item)
    if not isinstance(node, Mapping):
        return
    image = node.get("image")
    if isinstance(image, str) and image and isinstance(node.get("repository"), str):
        tag = node.get("version") or node.get("tag")
        yield f"{node['repository']}/{image}" + (f":{tag}" if tag else "")
    elif isinstance(image, str) and ("/" in image or ":" in image):
        yield image
    elif isinstance(image, Mapping) and isinstance(image.get("repository"), str) and image["repository"]:
        registry = image.get("registry")
        tag = image.get("tag") or image.get("version")
        ref = (f"{registry}/" if registry else "") + image["repository"]
        if tag or registry or "/" in ref:
            yield ref + (f":{tag}" if tag else "")
    for key, value in node.items():
        if key != "image" or not isinstance(value, str):
            yield from _images_in(value)


def _release_images() -> list[Download]:
    """The images gpubring itself names in its releases' values and objects (all-on, and the CNI's)."""
    out = []
    for release in _releases(False):
        for where, node in (("values", release.values), ("objects", release.objects())):
            for ref in dict.fromkeys(_images_in(node)):
                out.append(Download("image", release.role, f"release {release.name} {where}", ref, ref))
    return out


@functools.cache
def downloads() -> tuple[Download, ...]:
    return (*_url_downloads(), *_chart_downloads(), *_image_downloads(), *_release_images())


def _registry(image: str) -> str:
    """The registry host of an image reference, as containerd resolves it (docker.io without one)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _covered(d: Download) -> None:
    mirror = MIRRORS[_mirror_for(d.kind)]
    host = urlsplit(mirror).netloc
    assert host not in d.upstream, d
    upstream_host = urlsplit(d.upstream.split()[0]).netloc
    assert d.mirrored != d.upstream, f"{d.where}: {d.upstream} is not replaced by {_mirror_for(d.kind)}"
    target = d.mirrored.split()[0]
    assert target.startswith(mirror + "/") or target == mirror, (
        f"{d.where}: with {_mirror_for(d.kind)}={mirror} it still fetches {d.mirrored} "
        f"(upstream {d.upstream})"
    )
    assert upstream_host not in d.mirrored, d


# -- tests ---------------------------------------------------------------------------------------------


def test_the_scan_finds_every_kind_of_download() -> None:
    """The scan sees what the roles are known to fetch (a scan that found nothing would prove nothing)."""
    found = downloads()
    kinds = {d.kind for d in found}
    assert kinds == {"apt", "file", "chart", "image"}
    upstream = " ".join(d.upstream for d in found)
    for host in (
        "download.docker.com",
        "pkgs.k8s.io",
        "nvidia.github.io",
        "developer.download.nvidia.com",
        "linux.mellanox.com",
        "get.helm.sh",
        "raw.githubusercontent.com",
        "helm.ngc.nvidia.com",
        "oci://registry.k8s.io",
        "github.com/flannel-io",
        "docs.tigera.io",
        "helm.cilium.io",
    ):
        assert host in upstream, host
    assert {
        "containerd",
        "kubernetes_packages",
        "nvidia_container_toolkit",
        "rdma",
        "helm",
        "dra_driver",
        "cni",
    } <= {d.role for d in found}


def test_every_url_download_follows_its_mirror() -> None:
    urls = [d for d in downloads() if d.kind in ("apt", "file", "chart")]
    for d in urls:
        _covered(d)


def test_every_image_goes_through_the_registry_mirror() -> None:
    """containerd reads certs.d, writes only _default there, and _default names the mirror: every
    registry of every image (none has a directory of its own) is pulled through it."""
    variables = _variables(SAMPLE, ("containerd",), MIRRORS)
    hosts = tomllib.loads(
        variables.render_file(ROLES / "containerd/templates/etc/containerd/certs.d/_default/hosts.toml.j2")
    )
    assert list(hosts["host"]) == [MIRRORS["gpubring_registry_mirror"]]
    assert "pull" in hosts["host"][MIRRORS["gpubring_registry_mirror"]]["capabilities"]
    for version, major, minor in ((2, 1, 7), (3, 2, 1)):  # containerd 1.7 (config version 2) and 2.x (3)
        config = variables.render_file(
            ROLES / "containerd/templates/etc/containerd/config.toml.j2",
            {
                "__containerd_config_version": version,
                "__containerd_major": major,
                "__containerd_minor": minor,
            },
        )
        assert tomllib.loads(config)["version"] == version
        assert 'config_path = "/etc/containerd/certs.d"' in config
    certs_dirs = re.findall(
        r"/etc/containerd/certs\.d/([^/\s\"']+)",
        "".join(p.read_text(encoding="utf-8") for p in (ROLES / "containerd/tasks").glob("*.yml")),
    )
    assert set(certs_dirs) == {"_default"}
    images = [d for d in downloads() if d.kind == "image"]
    assert images
    for d in images:
        assert _registry(d.upstream) not in certs_dirs, d


def test_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The full list (for issue 25's bundle), one line per download."""
    with capsys.disabled():
        for d in downloads():
            print(f"{d.kind:6} {d.role:24} {d.upstream}  ->  {d.mirrored}   [{d.where}]")
    assert len({(d.kind, d.upstream) for d in downloads()}) >= 15


def test_an_oci_chart_mirror_serves_every_chart_by_its_name() -> None:
    """gpubring_chart_mirror may be an oci:// registry (settings.yml: url_or_oci): every chart then comes
    from <mirror>/<chart name> at its pin (roles/helm/templates/source.yml.j2, as the release engine
    renders it)."""
    mirror = "oci://charts.mirror.invalid/gpubring"
    variables = _variables(SAMPLE, ("helm",), {**MIRRORS, "gpubring_chart_mirror": mirror})
    charted = [r for r in _releases(False) if r.chart]
    assert len(charted) >= 10
    for release in charted:
        source = variables.render_yaml(
            ROLES / "helm/templates/source.yml.j2",
            {
                "helm_release": {
                    "chart": release.chart,
                    "chart_path": "",
                    "version": release.version,
                    "repo": release.repo,
                    "namespace": release.namespace,
                }
            },
        )
        chart_name = release.chart.rsplit("/", 1)[-1]
        assert source["kind"] == "oci", release.name
        assert source["chart_ref"] == f"{mirror}/{chart_name}", release.name
        assert source["chart_version"] == str(release.version), release.name
        assert not source["chart_repo_url"], release.name
