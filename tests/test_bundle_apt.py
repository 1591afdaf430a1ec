"""The bundle's apt part (issue 25 item 1): which packages the phases install per OS release and host
group (gpubring.bundle.packages, read from the roles), and the local repository per release built from
them with this machine's apt (gpubring.bundle.apt)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpubring import paths, releases
from gpubring.bundle import apt, packages
from gpubring.bundle.manifest import sha256_of
from gpubring.inventory import load_inventory
from helpers import REPO, closed_port

SAMPLE = REPO / "inventories" / "prod"
BOOKWORM = next(r for r in packages.RELEASES if r.key == "debian-bookworm")


@functools.cache
def _sample() -> packages.ReleasePackages:
    return packages.inventory_packages(load_inventory(SAMPLE), (BOOKWORM,))[0]


def _installs(found: packages.ReleasePackages, group: str, role: str) -> list[str]:
    return sorted({p for i in found.installs if i.group == group and i.role == role for p in i.packages})


def test_every_package_task_of_the_roles_is_read() -> None:
    """Every ansible.builtin.apt/package task that names packages under roles/*/tasks is met by the walk of
    the phases' plays (installed, or left out by its own condition), or removes packages. A new task in a
    file no play includes, or a module the walk does not read, fails here with its file and task."""
    tasks = packages.package_tasks()
    assert {t.role for t in tasks} >= {"containerd", "kernel", "nvidia_driver", "rdma", "kubernetes_packages"}
    reached = _sample().reached
    missed = [t.where for t in tasks if not t.removes and t.where not in reached]
    assert not missed, "package tasks the bundle's package walk never reads:\n" + "\n".join(missed)
    removals = [t.where for t in tasks if t.removes]
    purge = "Remove the Kubernetes packages (apt, with their configuration files)"
    assert removals == [f"roles/kubeadm_join/tasks/reset_purge_packages_Debian.yml: {purge}"]
    assert not _sample().problems


def test_the_sample_installs_what_its_inventory_chooses() -> None:
    """inventories/prod: the driver from NVIDIA's CUDA repository at the matrix's pin with fabric manager
    (an HGX node has NVSwitches), containerd.io from Docker's, the host-owned toolkit, inbox RDMA, the
    Kubernetes packages at their revision; headers of the release's default kernel, said in a note."""
    inv = load_inventory(SAMPLE)
    found = _sample()
    gpu_host = inv.groups["gpu_nodes"][0]
    pins = releases.host_variables(inv, gpu_host, ("nvidia_driver", "containerd", "nvidia_container_toolkit"))
    version, containerd = pins["nvidia_driver_version"], pins["containerd_version"]
    toolkit = f"nvidia-container-toolkit={pins['nvidia_container_toolkit_version']}-*"
    assert set(_installs(found, "gpu_nodes", "nvidia_driver")) == {
        "linux-headers-amd64",
        "dkms",
        f"nvidia-kernel-open-dkms={version}-*",
        f"nvidia-driver-cuda={version}-*",
        f"nvidia-persistenced={version}-*",
        f"nvidia-modprobe={version}-*",
        f"nvidia-driver-pinning-{version.split('.')[0]}",
        f"nvidia-fabricmanager={version}-*",
    }
    (headers,) = [i for i in found.installs if "linux-headers-amd64" in i.packages]
    assert "running kernel is unknown offline" in headers.note
    driver = [i for i in found.installs if i.where.endswith("Install the driver packages")]
    assert driver and not any(i.recommends for i in driver)  # the task's install_recommends: false
    assert headers.recommends
    assert toolkit in _installs(found, "gpu_nodes", "nvidia_container_toolkit")
    assert "rdma-core" in _installs(found, "gpu_nodes", "rdma")
    for group in ("control_plane", "gpu_nodes", "cpu_nodes"):
        assert _installs(found, group, "containerd") == [f"containerd.io={containerd}-*"]
        assert any(p.startswith("kubeadm=") for p in _installs(found, group, "kubernetes_packages"))
    assert "python3-kubernetes" in _installs(found, "control_plane", "helm")
    assert not _installs(found, "cpu_nodes", "nvidia_driver")
    assert not _installs(found, "control_plane", "rdma")
    urls = "\n".join(s.text for s in found.sources)
    assert "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/" in urls
    assert "https://download.docker.com/linux/debian" in urls
    assert {s.role for s in found.sources} == {
        "containerd",
        "nvidia_driver",
        "nvidia_container_toolkit",
        "kubernetes_packages",
    }


def test_the_lab_choices_change_the_packages(tmp_path: Path) -> None:
    """The lab's choices (cli/gpubring/lab/vars.yml): the driver from Debian non-free with the proprietary
    modules and headers of the pinned kernel, the toolkit left to the GPU Operator, containerd from Debian,
    DOCA RDMA; the packages follow, and Docker's and NVIDIA's repositories are no longer written."""
    root = tmp_path / "inv"
    shutil.copytree(SAMPLE, root)
    (root / "group_vars" / "gpu_nodes" / "zz_lab.yml").write_text(
        yaml.safe_dump(
            {
                "nvidia_driver_source": "distribution",
                "nvidia_driver_kernel_modules": "proprietary",
                "nvidia_driver_kernel_version": "6.1.0-41-amd64",
                "nvidia_container_toolkit_owner": "operator",
                "rdma_stack": "doca",
            }
        ),
        encoding="utf-8",
    )
    (root / "group_vars" / "all" / "zz_lab.yml").write_text("containerd_source: distribution\n", "utf-8")
    (found,) = packages.inventory_packages(load_inventory(root), (BOOKWORM,))
    assert set(_installs(found, "gpu_nodes", "nvidia_driver")) == {
        "linux-headers-6.1.0-41-amd64",
        "dkms",
        "nvidia-kernel-dkms",
        "nvidia-smi",
        "libcuda1",
        "nvidia-persistenced",
        "nvidia-modprobe",
    }
    assert not any(i.note for i in found.installs)
    assert not _installs(found, "gpu_nodes", "nvidia_container_toolkit")
    assert _installs(found, "cpu_nodes", "containerd") == ["containerd"]
    assert "doca-ofed" in _installs(found, "gpu_nodes", "rdma")
    assert {s.role for s in found.sources} == {"kubernetes_packages", "rdma"}


# -- the repository, built with this machine's apt (network: Debian's archive) -----------------------

# apt's lists and archive cache of the tests: under ~/.cache/gpubring, so a rerun is warm.
WORK = paths.cache_dir() / "test-bundle-apt"


def _archive_or_skip() -> None:
    if shutil.which("apt-get") is None or shutil.which("dpkg-scanpackages") is None:
        pytest.skip("apt-get and dpkg-scanpackages (dpkg-dev) are needed to build an apt repository")
    if shutil.which("gpg") is None:
        pytest.skip("gpg is needed to sign the repository")
    if apt._os_release() != ("debian", "bookworm"):
        pytest.skip("the test reads this machine's apt sources of Debian bookworm")
    sources = [s for s in apt.host_sources() if "bookworm" in s.suites]
    if not sources:
        pytest.skip("this machine has no apt source for bookworm")
    error = apt._probe(sources[0].release_urls()[0], 5)
    if error:
        pytest.skip(f"Debian's archive is not reachable from here: {error}")


def _consumer(folder: Path, line: str, status: Path) -> apt.AptRoot:
    """A private apt root that reads only `line` (the bundle's repository), with the build's status."""
    root = apt.AptRoot(folder, 10)
    (root.path / "sources.list").write_text(line + "\n", encoding="utf-8")
    shutil.copy(status, root.path / "status")
    return root


@contextlib.contextmanager
def _served(folder: Path) -> Iterator[str]:
    """The folder over HTTP on 127.0.0.1 (as `gpubring bundle serve` serves DIR), its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _fields(packages_file: Path) -> dict[str, dict[str, str]]:
    out = {}
    for stanza in packages_file.read_text(encoding="utf-8").strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        out[fields["Package"]] = fields
    return out


def test_a_repository_apt_reads(tmp_path: Path) -> None:
    """jq for bookworm: the repository holds jq and its dependencies but no Priority: required package
    (libc6 comes with them), each .deb at apt's sha256; apt in a root that reads nothing else resolves and
    downloads jq from it with [trusted=yes]. A package the archive lacks and an unreachable third-party
    repository are listed with their real errors. A second run downloads nothing and signs with a key."""
    _archive_or_skip()
    bundle = tmp_path / "bundle"
    closed = f"http://127.0.0.1:{closed_port()}/linux/debian"
    third = {"docker": [apt.Source((closed,), ("bookworm",), ("stable",))]}
    requests = {"test": ["jq", "gpubring-no-such-package"], "docker:test": ["containerd.io=1.7.0-*"]}
    entries = apt.build_release(BOOKWORM, requests, bundle, work=WORK, third_party=third, timeout=5)

    repo = bundle / "apt" / "debian-bookworm"
    listed = _fields(repo / "Packages")
    assert {"jq", "libjq1", "libonig5"} <= set(listed)
    assert "libc6" not in listed
    assert all(f.get("Priority") != "required" for f in listed.values())
    fetched = {e.name: e for e in entries if e.kind == "apt" and e.status == "fetched"}
    assert set(fetched) == set(listed)
    for name, entry in fetched.items():
        deb = bundle / str(entry.path)
        assert sha256_of(deb) == entry.sha256 == listed[name]["SHA256"]
        assert entry.size == deb.stat().st_size and entry.source.startswith("http")
    missing = {e.name: e for e in entries if e.status == "missing"}
    assert "Unable to locate package gpubring-no-such-package" in missing["gpubring-no-such-package"].reason
    assert missing["docker"].kind == "apt-repo-missing" and "Connection refused" in missing["docker"].reason
    assert missing["containerd.io"].source.startswith(closed)
    assert "Unable to locate package containerd.io" in missing["containerd.io"].reason
    assert "Connection refused" in missing["containerd.io"].reason
    release = (repo / "Release").read_text(encoding="utf-8")
    digest = hashlib.sha256((repo / "Packages.gz").read_bytes()).hexdigest()
    assert f" {digest} {(repo / 'Packages.gz').stat().st_size} Packages.gz" in release

    status = WORK / "debian-bookworm" / "status"
    with _served(bundle) as base:
        consumer = _consumer(
            tmp_path / "consumer", f"deb [trusted=yes] {base}/apt/debian-bookworm ./", status
        )
        assert consumer.apt("apt-get", "update", "-q").returncode == 0
        got = consumer.apt("apt-get", "install", "--download-only", "-y", "jq")
    assert got.returncode == 0, got.stderr
    downloaded = {p.name.split("_", 1)[0] for p in (consumer.path / "archives").glob("*.deb")}
    assert {"jq", "libjq1", "libonig5"} <= downloaded <= set(listed)

    # Again: apt's cache has every .deb (none downloaded again), and Release is signed with a key.
    cached = {p: p.stat().st_mtime_ns for p in (WORK / "debian-bookworm" / "archives").glob("*.deb")}
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "gpubring test",
            "ed25519",
            "sign",
            "never",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    key = tmp_path / "site.gpg"
    key.write_bytes(subprocess.run(["gpg", "--export"], env=env, check=True, capture_output=True).stdout)
    os.environ["GNUPGHOME"] = str(home)
    try:
        again = apt.build_release(
            BOOKWORM, requests, bundle, work=WORK, third_party=third, timeout=5, sign_key="gpubring test"
        )
    finally:
        del os.environ["GNUPGHOME"]
    assert {p: p.stat().st_mtime_ns for p in cached} == cached
    assert sorted(again, key=str) == sorted(entries, key=str)
    assert (repo / "InRelease").is_file() and (repo / "Release.gpg").is_file()
    signed = _consumer(tmp_path / "signed", f"deb [signed-by={key}] file://{repo} ./", status)
    update = signed.apt("apt-get", "update", "-q")
    assert update.returncode == 0 and not apt._errors(update.stderr, warnings=True), update.stderr


# -- without the network: this machine's kind of sources, and a local archive --------------------------

DEB822 = """Types: deb
URIs: http://ar.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /k/debian.gpg

Types: deb
URIs: http://ar.invalid/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: https://no.invalid/node_20.x
Suites: nodistro
Components: main
"""


def test_the_sources_are_this_machines_rewritten_to_the_release() -> None:
    """deb822 and one-line sources; the archive's suites move to the target codename (-updates and
    -security too), the driver's components are added when it comes from Debian, a third-party source of
    the machine is left out, and a release of another distribution has no archive."""
    sources = apt.parse_sources(DEB822) + apt.parse_sources(
        "# comment\ndeb-src http://ar.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mi.invalid/debian bookworm-backports main contrib\n"
    )
    assert [s.suites for s in sources] == [
        ("bookworm", "bookworm-updates"),
        ("bookworm-security",),
        ("nodistro",),
        ("bookworm-backports",),
    ]
    assert sources[3].options == (("arch", "amd64"), ("signed-by", "/k.gpg"))
    trixie = next(r for r in packages.RELEASES if r.key == "debian-trixie")
    rewritten, why = apt.archive_sources(trixie, sources, ("debian", "bookworm"), driver_components=True)
    assert not why
    assert [line for s in rewritten for line in s.lines()] == [
        "deb [signed-by=/k/debian.gpg] http://ar.invalid/debian "
        "trixie main contrib non-free non-free-firmware",
        "deb [signed-by=/k/debian.gpg] http://ar.invalid/debian "
        "trixie-updates main contrib non-free non-free-firmware",
        "deb http://ar.invalid/debian-security trixie-security main contrib non-free non-free-firmware",
        "deb [arch=amd64 signed-by=/k.gpg] http://mi.invalid/debian trixie-backports main contrib "
        "non-free non-free-firmware",
    ]
    plain, _ = apt.archive_sources(trixie, sources[:1], ("debian", "bookworm"), driver_components=False)
    assert plain[0].components == ("main",)
    noble = next(r for r in packages.RELEASES if r.key == "ubuntu-noble")
    assert apt.archive_sources(noble, sources, ("debian", "bookworm"), False) == (
        [],
        "this machine's apt sources are debian bookworm's: no ubuntu archive to read",
    )


def _local_archive(root: Path) -> None:
    """A Debian-style archive (dists/bookworm/main, pool/) of three small packages built with dpkg-deb:
    a depends on b; c's .deb is listed but not there (a mirror missing a file)."""
    pool = root / "pool"
    pool.mkdir(parents=True)
    for name, depends in (
        ("gpubring-test-a", "gpubring-test-b"),
        ("gpubring-test-b", ""),
        ("gpubring-test-c", ""),
    ):
        src = root.parent / "src" / name
        (src / "DEBIAN").mkdir(parents=True)
        control = [
            f"Package: {name}",
            "Version: 1.0-1",
            "Architecture: all",
            "Maintainer: t <t@example.invalid>",
        ]
        control += [f"Depends: {depends}"] if depends else []
        (src / "DEBIAN" / "control").write_text("\n".join([*control, "Description: a test package"]) + "\n")
        deb = pool / f"{name}_1.0-1_all.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "--build", str(src), str(deb)], check=True, capture_output=True
        )
    index = subprocess.run(
        ["dpkg-scanpackages", "pool", "/dev/null"], cwd=root, check=True, capture_output=True
    ).stdout
    binary = root / "dists" / "bookworm" / "main" / "binary-amd64"
    binary.mkdir(parents=True)
    (binary / "Packages").write_bytes(index)
    (root / "dists" / "bookworm" / "Release").write_text(
        "Suite: bookworm\nCodename: bookworm\nArchitectures: amd64 all\nComponents: main\nSHA256:\n"
        f" {hashlib.sha256(index).hexdigest()} {len(index)} main/binary-amd64/Packages\n"
    )
    (pool / "gpubring-test-c_1.0-1_all.deb").unlink()


def test_what_apt_cannot_find_or_fetch_is_listed(tmp_path: Path) -> None:
    """From a local archive: a's closure (a, b) is fetched into the repository; c, whose .deb the archive
    lacks, is listed missing with apt's 404; an unknown package with apt's 'Unable to locate'; a source
    whose lists apt cannot fetch with apt's error."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-scanpackages") is None:
        pytest.skip("apt-get and dpkg-scanpackages (dpkg-dev) are needed to build an apt repository")
    _local_archive(tmp_path / "mirror" / "debian")
    bundle = tmp_path / "bundle"
    with _served(tmp_path / "mirror") as base:
        source = apt.Source((f"{base}/debian",), ("bookworm",), ("main",), (("trusted", "yes"),))
        # Another host name: apt's http method gives up on a whole host after one refused connection.
        gone = apt.Source((f"http://localhost:{closed_port()}/debian",), ("bookworm-updates",), ("main",))
        requests = {"t": ["gpubring-test-a", "gpubring-test-c", "gpubring-test-nope"]}
        entries = apt.build_release(
            BOOKWORM,
            requests,
            bundle,
            work=tmp_path / "work",
            sources=[source, gone],
            host=("debian", "bookworm"),
        )
    by_name = {e.name: e for e in entries}
    lists = by_name["package lists"]
    assert (
        lists.kind == "apt-repo-missing"
        and "Failed to fetch" in lists.reason
        and gone.uris[0] in lists.reason
    )
    assert {n for n, e in by_name.items() if e.status == "fetched"} == {"gpubring-test-a", "gpubring-test-b"}
    assert by_name["gpubring-test-a"].source == f"{base}/debian/pool/gpubring-test-a_1.0-1_all.deb"
    assert "404" in by_name["gpubring-test-c"].reason and by_name["gpubring-test-c"].status == "missing"
    assert "Unable to locate package gpubring-test-nope" in by_name["gpubring-test-nope"].reason
    assert set(_fields(bundle / "apt" / "debian-bookworm" / "Packages")) == {
        "gpubring-test-a",
        "gpubring-test-b",
    }


def test_only_the_phases_the_inventory_runs_are_bundled(tmp_path: Path) -> None:
    """An inventory that runs no cluster phase (gpubring_phases, as the lab's) installs no kubeadm, and
    pkgs.k8s.io is no source of its bundle; the host phase's packages stay."""
    root = tmp_path / "inv"
    shutil.copytree(SAMPLE, root)
    (root / "group_vars" / "all" / "zz_phases.yml").write_text(
        "gpubring_phases: [preflight, host, verify]\n", encoding="utf-8"
    )
    (found,) = packages.inventory_packages(load_inventory(root), (BOOKWORM,))
    (whole,) = packages.inventory_packages(load_inventory(SAMPLE), (BOOKWORM,))
    assert "kubeadm" in {p.partition("=")[0] for i in whole.installs for p in i.packages}
    assert not any(i.role == "kubernetes_packages" for i in found.installs)
    assert "kubernetes_packages" not in {s.role for s in found.sources}
    assert _installs(found, "gpu_nodes", "nvidia_driver") == _installs(whole, "gpu_nodes", "nvidia_driver")
    # A phase it dry-runs (gpubring_phases_check_only, as the lab's cluster phase) is bundled: apt's
    # check mode needs each package's candidate (python3-kubernetes of the control plane).
    (root / "group_vars" / "all" / "zz_check.yml").write_text(
        "gpubring_phases_check_only: [cluster, platform]\n", encoding="utf-8"
    )
    (dry,) = packages.inventory_packages(load_inventory(root), (BOOKWORM,))
    assert "python3-kubernetes" in _installs(dry, "control_plane", "kubeadm_control_plane")
