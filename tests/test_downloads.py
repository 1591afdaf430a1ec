"""No hidden downloads (issue 25, item 4): every place the roles fetch from, and the mirror that covers it.

The list is gpubring.downloads' (the roles read, not a list kept by hand: apt sources and files of
roles/*/tasks and the apt source templates, the Helm charts of every release, the images of the version
matrix, of the roles' *_image defaults and of the releases' values and objects); here it is computed for
the sample inventory with every release of every platform role on (tests/data/inventories/all-on, and
the CNI's charts of calico and cilium) and the four mirror variables set.

"Covered" is proven by rendering: each expression is rendered by Ansible's templar once with no mirror
(the upstream) and once with the mirrors set; the mirrored rendering must name the mirror's host and
path instead of the upstream host. Images go through containerd: its certs.d/_default/hosts.toml (the
only registry directory the role writes) is rendered with gpubring_registry_mirror set and must name the
mirror, and config.toml must read certs.d, so every registry without a directory of its own (all of them)
is pulled through the mirror. "Listed" is proven against the bundle's plan (gpubring.bundle.plan_entries,
the entries `gpubring bundle` writes to manifest.json, computed without the network): every download
has its entry.

Not covered by any mirror variable, by design: the OS's own archive (deb.debian.org, the host's
sources.list, which a site mirrors with its own apt configuration) -- gpubring adds no source for it.

`pytest tests/test_downloads.py -s -k table` prints the table.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gpubring import bundle, releases
from gpubring import downloads as scan
from gpubring.downloads import Download
from gpubring.inventory import Inventory, load_inventory
from helpers import REPO

ROLES = REPO / "roles"
ALL_ON = REPO / "tests" / "data" / "inventories" / "all-on"
SAMPLE = REPO / "inventories" / "prod"

# Mirrors on a reserved name (gpubring.downloads'): a URL rendered with them shows its path under its
# mirror, the path the bundle's entry must have.
MIRRORS = dict(scan.PROBE_MIRRORS)


@functools.cache
def _inventory(root: Path) -> Inventory:
    return load_inventory(root)


def _variables(
    root: Path, roles: tuple[str, ...] | None, mirrors: dict[str, str], extra: dict[str, Any] | None = None
) -> releases.Variables:
    inv = _inventory(root)
    host = inv.groups["control_plane"][0]
    facts = {**scan.FACTS, "default_ipv4": {"address": inv.hosts[host].address, "interface": "eno1"}}
    return releases.host_variables(inv, host, roles, {**(extra or {}), "ansible_facts": facts, **mirrors})


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
def _releases() -> tuple[releases.Release, ...]:
    """Every release of the platform roles (all-on) and the CNI's, rendered with the mirrors."""
    variables = _variables(ALL_ON, None, MIRRORS, _no_chart_paths())
    found = []
    for role in releases.platform_roles():
        if role != "helm":
            found.extend(releases.role_releases(role, variables))
    # The CNI's charts (cluster phase, one per gpubring_cni; Flannel is a manifest, a file download).
    for cni in ("calico", "cilium"):
        cni_vars = _variables(ALL_ON, ("helm", "cni"), MIRRORS, {**_no_chart_paths(), "gpubring_cni": cni})
        found.extend(releases.role_releases("cni", cni_vars))
    return tuple(found)


@functools.cache
def downloads() -> tuple[Download, ...]:
    return scan.scan(_inventory(SAMPLE), MIRRORS, releases=_releases())


def _covered(d: Download) -> None:
    mirror = MIRRORS[d.variable]
    host = urlsplit(mirror).netloc
    assert host not in d.upstream, d
    upstream_host = urlsplit(d.upstream.split()[0]).netloc
    assert d.source != d.upstream, f"{d.where}: {d.upstream} is not replaced by {d.variable}"
    target = d.source.split()[0]
    assert target.startswith(mirror + "/") or target == mirror, (
        f"{d.where}: with {d.variable}={mirror} it still fetches {d.source} (upstream {d.upstream})"
    )
    assert upstream_host not in d.source, d


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
        assert scan.registry(d.upstream) not in certs_dirs, d


def test_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The full list (for issue 25's bundle), one line per download."""
    with capsys.disabled():
        for d in downloads():
            print(f"{d.kind:6} {d.role:24} {d.upstream}  ->  {d.source}   [{d.where}]")
    assert len({(d.kind, d.upstream) for d in downloads()}) >= 15


def test_an_oci_chart_mirror_serves_every_chart_by_its_name() -> None:
    """gpubring_chart_mirror may be an oci:// registry (settings.yml: url_or_oci): every chart then comes
    from <mirror>/<chart name> at its pin (roles/helm/templates/source.yml.j2, as the release engine
    renders it)."""
    mirror = "oci://charts.mirror.invalid/gpubring"
    variables = _variables(SAMPLE, ("helm",), {**MIRRORS, "gpubring_chart_mirror": mirror})
    charted = [r for r in _releases() if r.chart]
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


def test_every_download_has_its_entry_in_the_bundle() -> None:
    """The bundle's plan (the entries `gpubring bundle` fetches and writes to manifest.json, computed
    here without the network) lists every download, a file or key at the path its mirror serves it."""
    planned = {(p.entry.kind, p.entry.source): p.entry for p in bundle.plan_entries(downloads())}
    for d in downloads():
        kind = {"apt": "apt-repo" if d.repository else "apt-source"}.get(d.kind, d.kind)
        entry = planned.get((kind, d.upstream))
        assert entry is not None, f"{d.where}: {d.upstream} is not in the bundle's manifest"
        if kind in ("file", "apt-source"):
            under = d.source.split()[0].removeprefix(MIRRORS[d.variable] + "/")
            assert entry.path == f"{'files' if kind == 'file' else 'apt'}/{under}", (d, entry)
        elif kind == "chart":
            assert entry.path == f"charts/{d.name}-{d.version}.tgz", entry
    kinds = {p.entry.kind for p in bundle.plan_entries(downloads())}
    assert kinds == {"file", "apt-source", "apt-repo", "chart", "image"}


def test_plan_shows_where_each_download_comes_from() -> None:
    """`gpubring plan --downloads` (planning.render_downloads over downloads.document): every download
    with its source, the mirror variable that serves it when set, and which to set when not."""
    import io

    from rich.console import Console

    from gpubring import planning

    def shown(values: dict[str, str]) -> tuple[list[dict[str, Any]], str]:
        docs = scan.document(downloads(), values)
        out = io.StringIO()
        planning.render_downloads(docs, Console(file=out, width=400, force_terminal=False))
        return docs, out.getvalue()

    mirrored, text = shown(MIRRORS)
    assert len(mirrored) == len({(d.kind, d.upstream, d.source) for d in downloads()})
    for doc in mirrored:
        assert doc["via"] == "mirror", doc
        assert doc["variable"] in doc["from"], doc
        if doc["kind"] != "image":
            assert doc["from"].startswith(MIRRORS[doc["variable"]]), doc
    assert "an air-gapped site sets" not in text
    helm = next(d for d in mirrored if d["upstream"].startswith("https://get.helm.sh/"))
    assert any(
        line.split()[:2] == ["file", helm["upstream"]]
        and line.endswith(f"{helm['source']} (gpubring_binary_mirror)")
        for line in text.splitlines()
    ), text

    upstream, text = shown(dict.fromkeys(MIRRORS, ""))
    assert {d["via"] for d in upstream} == {"upstream"}
    assert "Downloads: where each comes from:" in text
    assert text.rstrip().endswith(
        "an air-gapped site sets gpubring_apt_mirror, gpubring_binary_mirror, gpubring_chart_mirror, "
        "gpubring_registry_mirror (gpubring bundle builds what they serve)"
    )
    image = next(d for d in upstream if d["kind"] == "image" and d["upstream"].startswith("nvcr.io/"))
    assert image["from"] == "nvcr.io (upstream; gpubring_registry_mirror unset)"


def test_the_bundle_lists_the_images_of_the_rendered_charts() -> None:
    """The images a chart pulls by its own defaults come from the chart rendered by Helm's engine with the
    release's values (gpubring.bundle.images.chart_images, as the bundle calls it): MetalLB 0.16.1's."""
    pytest.importorskip("helm_python", reason="helm-python-sdk renders the charts: pip install -e '.[test]'")
    upstream = os.environ.get("GPUBRING_UPSTREAM_DIR")
    if not upstream:
        pytest.skip("GPUBRING_UPSTREAM_DIR is not set (the upstream charts)")
    from gpubring.bundle import images

    (metallb,) = [r for r in _releases() if r.name == "metallb"]
    refs, problems = images.chart_images(_inventory(ALL_ON), [metallb], Path(upstream) / "charts")
    assert problems == []
    assert {"quay.io/metallb/controller:v0.16.1", "quay.io/metallb/speaker:v0.16.1"} <= set(refs), refs
    missing = bundle._save_image(
        bundle._image_entry(refs[0]),
        Path("/nonexistent"),
        None,
        ("", images.usable("")),
        bundle.Output(print),
    )
    assert (missing.status, missing.path) == ("missing", None)
    assert missing.reason == f"{refs[0]}: no image tool here (skopeo, crane, ctr: none on PATH)"


@pytest.mark.slow  # a whole `gpubring plan` (the roles rendered twice): ~6 s of CPU
def test_gpubring_plan_downloads_shows_upstream_and_mirror(tmp_path: Path) -> None:
    """The command: `gpubring plan INVENTORY --downloads --json FILE` on the sample with one mirror set
    (gpubring_binary_mirror): its files come from the mirror, the rest upstream, in the human output
    and in the JSON's `downloads`."""
    import shutil

    from typer.testing import CliRunner

    from gpubring.app import app

    inventory = tmp_path / "prod"
    shutil.copytree(SAMPLE, inventory)
    mirror = "http://bundle.site.invalid:8080/files"
    mirrors = inventory / "group_vars/all/mirrors.yml"  # the sample's mirror settings, all empty
    text = mirrors.read_text(encoding="utf-8")
    assert 'gpubring_binary_mirror: ""' in text
    mirrors.write_text(
        text.replace('gpubring_binary_mirror: ""', f"gpubring_binary_mirror: {mirror}"), encoding="utf-8"
    )
    result = CliRunner().invoke(
        app, ["plan", str(inventory), "--downloads", "--json", str(tmp_path / "p.json")]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "p.json").read_text(encoding="utf-8"))
    files = [d for d in doc["downloads"] if d["kind"] == "file"]
    assert files and all(d["via"] == "mirror" and d["source"].startswith(mirror + "/") for d in files)
    assert {d["via"] for d in doc["downloads"] if d["kind"] != "file"} == {"upstream"}
    helm = next(d for d in files if d["name"].startswith("helm-v"))
    assert f"{mirror}/{helm['name']} (gpubring_binary_mirror)" in result.stdout
    assert "Downloads: where each comes from" in result.stdout
    assert "an air-gapped site sets gpubring_apt_mirror, gpubring_chart_mirror, gpubring_registry_mirror" in (
        result.stdout
    )


def test_each_os_release_has_its_own_downloads_under_the_mirror() -> None:
    """The bundle lists the apt sources and files of every OS release it carries: each role's OS vars
    are the first found of <distribution>-<major>, <distribution>, <os_family> as the roles load them,
    so an Ubuntu host (whose roles fall back to Debian.yml) renders too (before, only
    vars/<distribution>.yml was read and Ubuntu's sources failed on an undefined keyring folder)."""
    noble = {
        **scan.FACTS,
        "distribution": "Ubuntu",
        "distribution_release": "noble",
        "distribution_major_version": "24",
        "distribution_version": "24.04",
    }
    found = scan.url_downloads(_inventory(SAMPLE), MIRRORS, noble)
    upstream = {d.upstream for d in found}
    assert "https://download.docker.com/linux/ubuntu" in upstream
    assert "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/" in upstream
    for d in found:
        _covered(d)
    planned = {p.entry.path for p in bundle.plan_entries(found)}
    assert "apt/compute/cuda/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb" in planned
