"""`gpubring bundle serve`: a real HTTP server on 127.0.0.1 serving a small bundle folder, fetched with
urllib (GET, HEAD, a byte range as apt asks to resume), what it refuses (a `..` out of the folder, a link
out of it, parts that are not the bundle's), the mirror variables it prints, and SIGTERM stopping the
command."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpubring.bundle import serve

DEB = bytes(range(256)) * 8  # 2048 bytes


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    repo = root / "apt" / "debian-bookworm"
    repo.mkdir(parents=True)
    (repo / "Packages").write_text("Package: ccache\nFilename: ./ccache_4.8_amd64.deb\n", encoding="utf-8")
    (repo / "ccache_4.8_amd64.deb").write_bytes(DEB)
    (root / "charts").mkdir()
    (root / "charts" / "index.yaml").write_text("apiVersion: v1\nentries: {}\n", encoding="utf-8")
    (root / "files" / "v3.16.2").mkdir(parents=True)
    (root / "files" / "v3.16.2" / "helm.tar.gz").write_bytes(b"helm")
    (root / "manifest.json").write_text('{"format": 1, "entries": []}\n', encoding="utf-8")
    (root / "secret.txt").write_text("not a bundle part\n", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("outside\n", encoding="utf-8")
    (root / "files" / "escape.txt").symlink_to(tmp_path / "outside.txt")
    return root


@pytest.fixture
def served(bundle: Path) -> Iterator[tuple[str, list[str]]]:
    lines: list[str] = []
    started: list[serve.BundleServer] = []
    ready = threading.Event()

    def on_ready(server: serve.BundleServer) -> None:
        started.append(server)
        ready.set()

    thread = threading.Thread(
        target=serve.serve, args=(bundle, "127.0.0.1", 0, lines.append), kwargs={"ready": on_ready}
    )
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{started[0].server_address[1]}", lines
    started[0].shutdown()
    thread.join(10)
    assert not thread.is_alive()
    assert lines[-1] == "stopped"


def _get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), b""


def test_get_head_and_range(served: tuple[str, list[str]]) -> None:
    url, _ = served
    deb = f"{url}/apt/debian-bookworm/ccache_4.8_amd64.deb"
    status, headers, body = _get(deb)
    assert (status, body, headers["Accept-Ranges"]) == (200, DEB, "bytes")
    with urllib.request.urlopen(urllib.request.Request(deb, method="HEAD"), timeout=5) as resp:
        assert (resp.status, resp.headers["Content-Length"], resp.read()) == (200, str(len(DEB)), b"")
    status, headers, body = _get(deb, Range="bytes=100-199")
    assert (status, headers["Content-Range"], body) == (206, f"bytes 100-199/{len(DEB)}", DEB[100:200])
    status, headers, body = _get(deb, Range="bytes=2000-")
    assert (status, headers["Content-Length"], body) == (206, "48", DEB[2000:])
    status, headers, body = _get(deb, Range="bytes=-10")
    assert (status, body) == (206, DEB[-10:])
    status, headers, _ = _get(deb, Range="bytes=5000-")
    assert (status, headers["Content-Range"]) == (416, f"bytes */{len(DEB)}")
    assert _get(f"{url}/files/v3.16.2/helm.tar.gz")[2] == b"helm"
    assert _get(f"{url}/manifest.json")[0] == 200


def test_refuses_what_is_not_the_bundle(served: tuple[str, list[str]]) -> None:
    url, _ = served
    host, port = url.removeprefix("http://").split(":")
    for path in ("/../outside.txt", "/files/../../outside.txt", "/apt/%2e%2e/%2e%2e/outside.txt"):
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request("GET", path)  # sent as written, not normalised by a client
        resp = conn.getresponse()
        assert (resp.status, b"outside" in resp.read()) == (404, False), path
        conn.close()
    assert _get(f"{url}/files/escape.txt")[0] == 404  # a link leading out of the folder
    assert _get(f"{url}/secret.txt")[0] == 404  # not a part of the bundle
    assert _get(f"{url}/")[0] == 404  # no listing of the folder itself


def test_prints_the_mirror_variables(served: tuple[str, list[str]], bundle: Path) -> None:
    url, lines = served
    assert f"deb [trusted=yes] {url}/apt/debian-bookworm ./" in "\n".join(lines)
    assert f"gpubring_chart_mirror: {url}/charts" in lines
    assert f"gpubring_binary_mirror: {url}/files" in lines
    # No registry here (docker-registry is not on the test machine's PATH, or no archives): said, not set.
    assert not any(line.startswith("gpubring_registry_mirror") for line in lines)
    assert any(line.startswith("images: not served: ") for line in lines)


def test_registry_absent_is_said(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(bundle))  # no docker-registry there
    reg = serve.start_registry(bundle, "127.0.0.1", 5000, print)
    assert (reg.url, reg.why) == (
        None,
        "docker-registry is not installed (Debian: apt-get install docker-registry)",
    )
    config = serve.registry_config(bundle / "images" / "registry", "0.0.0.0", 5000)
    assert "rootdirectory: " + str(bundle / "images" / "registry") in config
    assert "addr: 0.0.0.0:5000" in config


def test_bad_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(serve.ServeError, match="expected a bundle folder"):
        serve.make_server(tmp_path / "nope", "127.0.0.1", 0)
    with pytest.raises(serve.ServeError, match="not a bundle folder"):
        serve.make_server(tmp_path, "127.0.0.1", 0)


def test_command_stops_on_sigterm(bundle: Path) -> None:
    """The real command in its own process: it prints the variables, then SIGTERM ends it (exit 0)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpubring", "bundle", "serve", str(bundle), "--port", "0", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith(f"serving {bundle} on http://127.0.0.1:"), first + (
        proc.stderr.read() if proc.stderr else ""
    )
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert out.rstrip().endswith("stopped")
    assert "Traceback" not in err
