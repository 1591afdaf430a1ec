"""`gpubring bundle` (issue 25 item 1): resumable downloads, charts as a Helm repository, the Hauler
manifest, what cannot be fetched listed with the real error, bad input refused before anything.

Real components: a real HTTP server on 127.0.0.1 (the standard library's, with Range support added
here as any static server has it) for the downloads; a closed local port for an unreachable chart
repository; the upstream charts of $GPUBRING_UPSTREAM_DIR packaged and loaded back by Helm's own engine
(helm-python-sdk). The full list of entries is checked against every download in
tests/test_downloads.py.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpubring import bundle, downloads
from gpubring.app import app
from gpubring.bundle import charts, fetch, hauler
from gpubring.bundle.manifest import Entry, Manifest, ManifestError, sha256_of
from helpers import REPO, closed_port

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB, not all one byte
CUT = 300_000  # where the first answer breaks off


class _Server(http.server.ThreadingHTTPServer):
    requests: list[tuple[str, str]]
    files: dict[str, bytes]
    cut_once: set[str]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        del format, args

    def do_GET(self) -> None:
        rng = self.headers.get("Range", "")
        self.server.requests.append((self.path, rng))
        body = self.server.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = int(rng.removeprefix("bytes=").split("-")[0]) if rng.startswith("bytes=") else 0
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if self.path in self.server.cut_once:  # the connection breaks after CUT bytes
            self.server.cut_once.discard(self.path)
            self.wfile.write(body[start:CUT])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body[start:])


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.requests, srv.files, srv.cut_once = [], {}, set()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _url(srv: _Server, path: str) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}{path}"


def test_an_interrupted_download_resumes_where_it_stopped(server: _Server, tmp_path: Path) -> None:
    server.files["/helm.tar.gz"] = PAYLOAD
    server.cut_once.add("/helm.tar.gz")
    dest = tmp_path / "files" / "helm.tar.gz"
    with pytest.raises(fetch.FetchError) as failed:
        fetch.download(_url(server, "/helm.tar.gz"), dest)
    assert _url(server, "/helm.tar.gz") in str(failed.value)
    part = dest.with_name(dest.name + ".part")
    assert part.stat().st_size == CUT and not dest.exists()

    seen: list[int] = []
    digest, size = fetch.download(
        _url(server, "/helm.tar.gz"),
        dest,
        sha256=hashlib.sha256(PAYLOAD).hexdigest(),
        progress=lambda done, total: seen.append(done),
    )
    assert server.requests[-1] == ("/helm.tar.gz", f"bytes={CUT}-")  # asked only for the rest
    assert dest.read_bytes() == PAYLOAD and not part.exists()
    assert (digest, size) == (hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD))
    assert seen[0] > CUT and seen[-1] == len(PAYLOAD)  # the bar starts where the part ended


def test_a_download_with_another_sha256_is_refused_and_removed(server: _Server, tmp_path: Path) -> None:
    server.files["/f"] = b"not what was pinned"
    dest = tmp_path / "f"
    with pytest.raises(fetch.FetchError, match=r"expected 0{64}: removed"):
        fetch.download(_url(server, "/f"), dest, sha256="0" * 64)
    assert not dest.exists() and not dest.with_name("f.part").exists()


def test_a_second_run_downloads_nothing_that_still_matches(server: _Server, tmp_path: Path) -> None:
    server.files["/kube-flannel.yml"] = b"kind: List\n"
    planned = bundle.Planned(
        Entry(
            "file", "kube-flannel.yml", "", "https://up.invalid/kube-flannel.yml", path="files/flannel.yml"
        ),
        url=_url(server, "/kube-flannel.yml"),
    )
    out = bundle.Output(lambda _: None)
    first = bundle._fetch_file(planned, tmp_path, None, out)
    assert first.status == "fetched" and first.sha256 == hashlib.sha256(b"kind: List\n").hexdigest()
    previous = Manifest("inv", entries=[first])
    again = bundle._fetch_file(planned, tmp_path, previous, out)
    assert again == first and len(server.requests) == 1  # nothing fetched the second time
    (tmp_path / "files/flannel.yml").write_bytes(b"changed on disk")
    bundle._fetch_file(planned, tmp_path, previous, out)
    assert len(server.requests) == 2  # a file that no longer matches is fetched again


def test_an_unreachable_chart_repository_is_listed_missing_with_the_real_error(tmp_path: Path) -> None:
    repo = f"http://127.0.0.1:{closed_port()}/charts"
    planned = bundle.Planned(Entry("chart", "metallb", "v0.16.1", f"{repo} metallb", path="charts/m.tgz"))
    entry = bundle._fetch_chart(planned, tmp_path, None, None, bundle.Output(lambda _: None))
    assert entry.status == "missing" and entry.path is None
    assert entry.reason.startswith(f"{repo}/index.yaml: ")
    assert "Connection refused" in entry.reason
    assert entry.source == f"{repo} metallb"


def test_an_oci_chart_without_helm_is_listed_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no helm binary
    ref = "oci://registry.k8s.io/kueue/charts/kueue"
    planned = bundle.Planned(Entry("chart", "kueue", "0.19.2", ref, path="charts/kueue-0.19.2.tgz"))
    entry = bundle._fetch_chart(planned, tmp_path, None, None, bundle.Output(lambda _: None))
    assert entry.status == "missing"
    assert (
        entry.reason
        == f"{ref}: an OCI chart needs a helm binary on PATH to pull it (none here); or give --charts"
    )


def _upstream_charts() -> Path:
    root = os.environ.get("GPUBRING_UPSTREAM_DIR")
    if not root:
        pytest.skip("GPUBRING_UPSTREAM_DIR is not set (the upstream charts)")
    return Path(root) / "charts"


def test_local_charts_are_packaged_deterministically_into_a_helm_repository(tmp_path: Path) -> None:
    helm = pytest.importorskip(
        "helm_python", reason="helm-python-sdk loads the charts: pip install -e '.[test]'"
    )
    source = _upstream_charts()
    bundle_dir = tmp_path / "b"
    planned = [
        bundle.Planned(
            Entry("chart", name, version, f"https://up.invalid {name}", path=f"charts/{name}-{version}.tgz")
        )
        for name, version in (("metallb", "v0.16.1"), ("metrics-server", "3.13.1"))
    ]
    (bundle_dir / "charts").mkdir(parents=True)
    entries = [
        bundle._fetch_chart(p, bundle_dir, source, None, bundle.Output(lambda _: None)) for p in planned
    ]
    assert [e.status for e in entries] == ["fetched", "fetched"], entries
    first = [sha256_of(bundle_dir / str(e.path)) for e in entries]
    again = [bundle._fetch_chart(p, bundle_dir, source, None, bundle.Output(lambda _: None)) for p in planned]
    assert [e.sha256 for e in again] == first  # the same bytes on every run
    tgz = bundle_dir / "charts" / "metallb-v0.16.1.tgz"
    with tarfile.open(tgz) as tar:
        members = tar.getmembers()
    assert {m.mtime for m in members} == {charts.FIXED_MTIME} and {m.uid for m in members} == {0}
    assert all(m.name.startswith("metallb/") for m in members)

    index = charts.write_index(bundle_dir / "charts", "2026-11-27T00:00:00Z")
    read = yaml.safe_load((bundle_dir / "charts" / "index.yaml").read_text(encoding="utf-8"))
    assert read == index and read["apiVersion"] == "v1"
    assert sorted(read["entries"]) == ["metallb", "metrics-server"]
    for name, versions in read["entries"].items():
        (entry,) = versions
        path = bundle_dir / "charts" / entry["urls"][0]
        assert entry["digest"] == sha256_of(path)
        with helm.Chart.load(str(path)) as chart:  # Helm's own loader reads the archive
            assert (chart.metadata["name"], chart.metadata["version"]) == (name, entry["version"])


def test_the_hauler_manifest_lists_every_image_chart_and_file() -> None:
    entries = [
        Entry(
            "image", "nvcr.io/nvidia/gpu-operator:v26.7.0", "v26.7.0", "nvcr.io/nvidia/gpu-operator:v26.7.0"
        ),
        Entry("chart", "gpu-operator", "v26.7.0", "https://helm.ngc.nvidia.com/nvidia gpu-operator"),
        Entry("chart", "kueue", "0.19.2", "oci://registry.k8s.io/kueue/charts/kueue"),
        Entry("file", "helm.tar.gz", "", "https://get.helm.sh/helm-v3.21.4-linux-amd64.tar.gz"),
        Entry("apt-repo", "cuda.list", "", "https://developer.download.nvidia.com/compute/cuda/repos/"),
    ]
    docs = list(yaml.safe_load_all(yaml.safe_dump_all(hauler.documents(entries, "site"))))
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [
        ("content.hauler.cattle.io/v1", "Images"),
        ("content.hauler.cattle.io/v1", "Charts"),
        ("content.hauler.cattle.io/v1", "Files"),
    ]
    images, chart_doc, files = (d["spec"] for d in docs)
    assert images == {"images": [{"name": "nvcr.io/nvidia/gpu-operator:v26.7.0"}]}
    assert chart_doc["charts"] == [
        {"name": "gpu-operator", "repoURL": "https://helm.ngc.nvidia.com/nvidia", "version": "v26.7.0"},
        {"name": "kueue", "repoURL": "oci://registry.k8s.io/kueue/charts", "version": "0.19.2"},
    ]
    assert files["files"] == [
        {"path": "https://get.helm.sh/helm-v3.21.4-linux-amd64.tar.gz", "name": "helm.tar.gz"}
    ]


def test_the_manifest_is_replaced_atomically_and_read_back(tmp_path: Path) -> None:
    m = Manifest(
        "inventories/prod", entries=[Entry("file", "a", "", "https://x.invalid/a").missing("x: refused")]
    )
    m.write(tmp_path)
    back = Manifest.read(tmp_path)
    assert back is not None and back.entries == m.entries
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temporary file left
    (tmp_path / "manifest.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ManifestError, match="not a bundle manifest of format 1"):
        Manifest.read(tmp_path)


def test_files_land_where_their_mirror_variable_serves_them() -> None:
    probe = downloads.PROBE_MIRRORS["gpubring_binary_mirror"]
    d = downloads.Download(
        "file",
        "cni",
        "roles/cni/tasks/flannel.yml",
        "https://github.com/x/kube-flannel.yml",
        f"{probe}/flannel/v0.28.9/kube-flannel.yml",
        "kube-flannel.yml",
    )
    (planned,) = bundle.plan_entries([d, d])
    assert planned.entry.path == "files/flannel/v0.28.9/kube-flannel.yml"
    assert planned.url == d.upstream and planned.entry.source == d.upstream


@pytest.mark.parametrize("case", ["file", "unwritable", "inventory"])
@pytest.mark.parametrize("verb", [[], ["build"]])  # `bundle INVENTORY DIR` is `bundle build INVENTORY DIR`
def test_bad_input_is_one_line_before_anything(case: str, verb: list[str], tmp_path: Path) -> None:
    inventory, folder = REPO / "inventories" / "prod", tmp_path / "bundle"
    if case == "file":
        folder.write_text("x", encoding="utf-8")
        expected = f"error: {folder}: exists and is not a folder (expected the bundle's folder)"
    elif case == "unwritable":
        folder = Path("/proc/gpubring-bundle")
        expected = f"error: {folder}: cannot create the bundle's folder ("
    else:
        inventory = tmp_path / "nowhere"
    result = CliRunner().invoke(app, ["bundle", *verb, str(inventory), str(folder)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    if case == "inventory":
        assert "nowhere" in result.stderr and result.stderr.startswith("error: ")
    else:
        assert result.stderr.startswith(expected) and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "bundle" / "manifest.json").exists()


@pytest.mark.parametrize("only", ["apt,disks", "", " , "])
def test_only_names_parts_or_is_refused_before_anything(only: str, tmp_path: Path) -> None:
    folder = tmp_path / "bundle"
    result = CliRunner().invoke(
        app, ["bundle", str(REPO / "inventories" / "prod"), str(folder), "--only", only]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"error: --only {only!r}: expected one or more of apt, files, charts, images"
    )
    assert ("(not a part: disks)" in result.stderr) == ("disks" in only)
    assert "Traceback" not in result.output and not folder.exists()


def test_a_build_of_some_parts_keeps_the_manifests_other_entries(tmp_path: Path) -> None:
    """--only files fetches the files (here: none reachable, listed missing) and touches neither the
    charts, the images nor an earlier run's entries of those kinds."""
    from gpubring.inventory import load_inventory

    folder = tmp_path / "bundle"
    folder.mkdir()
    earlier = Manifest(inventory="x")
    earlier.put([Entry("chart", "gpu-operator", "v1", "https://example.invalid/charts")], ("chart",))
    earlier.write(folder)
    inv = load_inventory(REPO / "inventories" / "prod")
    refused = r"bundle parts 'files,disks': expected one or more of apt.*\(not a part: disks\)"
    with pytest.raises(bundle.BundleError, match=refused):
        bundle.build(inv, folder, bundle.Output(lambda _l: None), parts=("files", "disks"))
    said: list[str] = []
    result = bundle.build(inv, folder, bundle.Output(said.append), parts=("files",))
    kinds = {e.kind for e in result.manifest.entries}
    assert "chart" in kinds and "file" in kinds and "image" not in kinds and "apt" not in kinds
    assert not (folder / "charts").exists() and not (folder / "images").exists()
    assert all(line.startswith("fetching ") for line in said) and said


def test_an_image_archive_says_how_skopeo_reads_it(tmp_path: Path) -> None:
    """skopeo's and ctr's archives hold an OCI layout (oci-archive), crane's a docker-save manifest."""
    from gpubring.bundle import images

    def archive(name: str, members: list[str]) -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w") as tar:
            for member in members:
                data = tmp_path / "m"
                data.write_text("{}", encoding="utf-8")
                tar.add(data, arcname=member)
        return path

    assert (
        images.transport(archive("ctr.tar", ["oci-layout", "index.json", "manifest.json"])) == "oci-archive"
    )
    assert images.transport(archive("crane.tar", ["manifest.json", "sha256:abc"])) == "docker-archive"
    assert images.transport(archive("other.tar", ["x"])) == ""
    assert images.transport(tmp_path / "none.tar") == ""
    assert images.file_name("rayproject/ray:2.52.0") == "docker.io_rayproject_ray_2.52.0.tar"
