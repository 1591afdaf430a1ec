"""`gpubring bundle serve DIR`: a bundle's apt repositories, charts and files over HTTP, and its images
from a registry when Debian's `docker-registry` is installed (issue 25 item 2).

HTTP: Python's threaded http.server on DIR, limited to the bundle's parts (SERVED): a path outside them,
a `..` that climbs out of DIR or a link that leads out of it answers 404. GET and HEAD, and a single byte
range (`Range: bytes=A-B`, 206 Partial Content), which apt uses to resume a .deb. Nothing is written
into DIR by the HTTP side.

Images: the bundle keeps them as archives (DIR/images/*.tar, gpubring.bundle.images). A registry serves
them only when `docker-registry` (Debian's package of the CNCF distribution registry) is on PATH: it
runs on DIR/images/registry (its filesystem storage) and the archives that skopeo can copy are pushed
into it; otherwise the images are said to be not served, and why.

What the inventory needs is printed (`mirror_lines`): the apt source line per OS release of DIR/apt (the
hosts' own apt configuration: the bundle's OS packages are the distribution's, which gpubring_apt_mirror
does not cover, DESIGN/downloads: that variable moves third-party repositories at their upstream paths),
and gpubring_chart_mirror, gpubring_binary_mirror, gpubring_registry_mirror (only when images are
served).
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = [
    "SERVED",
    "BundleHandler",
    "BundleServer",
    "ServeError",
    "apt_releases",
    "apt_source_line",
    "mirror_lines",
    "registry_command",
    "serve",
]

# The parts of a bundle served over HTTP, and the top-level files.
SERVED = ("apt", "charts", "files")
SERVED_FILES = ("manifest.json", "hauler-manifest.yaml")
REGISTRY_BINARY = "docker-registry"
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class ServeError(Exception):
    """Bad input (no bundle folder, a port in use): said in one line before anything is served."""


class BundleHandler(http.server.SimpleHTTPRequestHandler):
    """http.server's file handler confined to the bundle's parts, with single byte ranges."""

    server_version = "gpubring-bundle"
    _range: tuple[int, int] | None = None

    def translate_path(self, path: str) -> str:
        """The file for a URL path, or a path that does not exist when the URL leaves the served parts
        (http.server drops `..` segments itself; links are resolved here and must stay inside)."""
        local = Path(super().translate_path(path))
        root = Path(self.directory).resolve()
        missing = str(root / ".not-served")
        try:
            relative = local.resolve().relative_to(root)
        except (ValueError, OSError):
            return missing
        parts = relative.parts
        if not parts:
            return missing
        if parts[0] in SERVED or (len(parts) == 1 and parts[0] in SERVED_FILES):
            return str(root / relative)
        return missing

    def list_directory(self, path: str | os.PathLike[str]) -> Any:
        """Listings of the served folders only (the root is not a listing)."""
        if Path(path).resolve() == Path(self.directory).resolve():
            self.send_error(404, "File not found")
            return None
        return super().list_directory(path)

    def send_head(self) -> Any:
        self._range = None
        header = self.headers.get("Range")
        if not header:
            return super().send_head()
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        match = _RANGE.match(header.strip())
        if match is None or not (match.group(1) or match.group(2)):
            return super().send_head()  # a form we do not serve (several ranges): the whole file
        first, last = match.groups()
        if first:
            start, end = int(first), min(int(last), size - 1) if last else size - 1
        else:
            start, end = max(0, size - int(last)), size - 1
        if start >= size or start > end:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        handle = path.open("rb")
        handle.seek(start)
        self._range = (start, end)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        return handle

    def copyfile(self, source: Any, outputfile: Any) -> None:
        if self._range is None:
            super().copyfile(source, outputfile)
            return
        left = self._range[1] - self._range[0] + 1
        while left > 0:
            chunk = source.read(min(64 * 1024, left))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)

    def end_headers(self) -> None:
        if self._range is None and self.command in ("GET", "HEAD"):
            self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log: Callable[[str], None] | None = getattr(self.server, "log", None)
        if log is not None:
            log(f"{self.address_string()} {format % args}")


class BundleServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    log: Callable[[str], None] | None = None


def make_server(
    root: Path, address: str, port: int, log: Callable[[str], None] | None = None
) -> BundleServer:
    """An HTTP server on address:port (0: any free port) for the bundle folder `root`."""
    if not root.is_dir():
        raise ServeError(f"{root}: expected a bundle folder (written by `gpubring bundle`), found none")
    if not any((root / part).is_dir() for part in SERVED):
        raise ServeError(f"{root}: no {', '.join(p + '/' for p in SERVED)}: not a bundle folder")

    def handler(*args: Any, **kwargs: Any) -> BundleHandler:
        return BundleHandler(*args, directory=str(root.resolve()), **kwargs)

    try:
        server = BundleServer((address, port), handler)
    except OSError as err:
        raise ServeError(f"cannot listen on {address}:{port}: {err.strerror or err}") from None
    server.log = log
    return server


# -- what the inventory needs ------------------------------------------------------------------------


def apt_releases(root: Path) -> list[str]:
    """The OS releases of DIR/apt (`debian-bookworm`), those with a Packages index."""
    apt = root / "apt"
    if not apt.is_dir():
        return []
    return sorted(
        p.name for p in apt.iterdir() if (p / "Packages").is_file() or (p / "Packages.gz").is_file()
    )


def apt_source_line(url: str, release: str) -> str:
    """The one-line apt source of a flat repository (apt's sources.list(5): a suite ending in `/` is an
    exact path, no component); trusted=yes since the bundle's Release is not signed."""
    return f"deb [trusted=yes] {url.rstrip('/')}/apt/{release} ./"


def mirror_lines(root: Path, url: str, registry: str | None, registry_why: str = "") -> list[str]:
    """What to put in the inventory and the hosts' apt configuration for a bundle served at `url`."""
    out = []
    releases = apt_releases(root)
    if releases:
        out.append(
            "# the hosts' own apt configuration (replacing their distribution's sources), per OS release:"
        )
        out.extend(f"#   {release}: {apt_source_line(url, release)}" for release in releases)
    else:
        out.append("# no OS packages in this bundle (DIR/apt holds no repository)")
    out.append("# the inventory (group_vars/all):")
    if (root / "charts").is_dir():
        out.append(f"gpubring_chart_mirror: {url.rstrip('/')}/charts")
    if (root / "files").is_dir():
        out.append(f"gpubring_binary_mirror: {url.rstrip('/')}/files")
    if registry:
        out.append(f"gpubring_registry_mirror: {registry}")
    else:
        out.append(f"# gpubring_registry_mirror: not set: images are not served: {registry_why}")
    return out


# -- the registry ------------------------------------------------------------------------------------


@dataclass
class Registry:
    url: str | None = None
    why: str = ""
    process: subprocess.Popen[bytes] | None = None
    pushed: list[str] = field(default_factory=list)


def registry_command(config: Path) -> list[str] | None:
    """`docker-registry serve CONFIG` when the binary is on PATH, else None."""
    binary = shutil.which(REGISTRY_BINARY)
    return [binary, "serve", str(config)] if binary else None


def registry_config(storage: Path, address: str, port: int) -> str:
    """The distribution registry's configuration (its docs: configuration.md, storage.filesystem and
    http.addr): filesystem storage, plain HTTP, deletes off."""
    return (
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: false\n"
        f"http:\n  addr: {address}:{port}\n"
    )


def start_registry(root: Path, address: str, port: int, out: Callable[[str], None]) -> Registry:
    """docker-registry on DIR/images/registry when installed; the archives pushed with skopeo."""
    images = root / "images"
    archives = sorted(images.glob("*.tar")) if images.is_dir() else []
    storage = images / "registry"
    config = images / "registry.yml"
    command = registry_command(config)
    if command is None:
        return Registry(why=f"{REGISTRY_BINARY} is not installed (Debian: apt-get install docker-registry)")
    if not archives and not storage.is_dir():
        return Registry(why=f"{images}: no image archives in the bundle")
    storage.mkdir(parents=True, exist_ok=True)
    config.write_text(registry_config(storage, address, port), encoding="utf-8")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    reg = Registry(url=f"{address}:{port}", process=process)
    skopeo = shutil.which("skopeo")
    if archives and skopeo is None:
        out(f"images: {len(archives)} archives not pushed into the registry: skopeo is not installed")
    for archive in archives if skopeo else []:
        target = f"docker://{address}:{port}/{archive.stem.replace('_', '/')}"
        proc = subprocess.run(
            [skopeo or "skopeo", "copy", "--dest-tls-verify=false", f"oci-archive:{archive}", target],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        if proc.returncode == 0:
            reg.pushed.append(archive.name)
        else:
            out(f"images: {archive.name} not pushed: {(proc.stderr or proc.stdout).strip()[-200:]}")
    return reg


# -- the verb ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _stop_on_sigterm(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM stops the server as Ctrl-C does (in the main thread only, where signals are handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=stop, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve(
    root: Path,
    address: str = "127.0.0.1",
    port: int = 8080,
    out: Callable[[str], None] = print,
    *,
    registry_port: int | None = None,
    log: Callable[[str], None] | None = None,
    ready: Callable[[BundleServer], None] | None = None,
) -> None:
    """Serve the bundle until SIGTERM or Ctrl-C; print the mirror variables first."""
    server = make_server(root, address, port, log)
    bound = server.server_address[1]
    host = address if address not in ("0.0.0.0", "::") else "HOST"
    url = f"http://{host}:{bound}"
    reg = start_registry(root, address, registry_port or bound + 1, out)
    registry_url = reg.url if reg.url is None else f"{host}:{reg.url.rsplit(':', 1)[1]}"
    out(f"serving {root} on {url} (apt/, charts/, files/); Ctrl-C or SIGTERM stops it")
    if reg.url:
        out(f"images: {REGISTRY_BINARY} on {registry_url} ({len(reg.pushed)} pushed)")
    else:
        out(f"images: not served: {reg.why}")
    for line in mirror_lines(root, url, registry_url, reg.why):
        out(line)
    if ready is not None:
        ready(server)
    try:
        with _stop_on_sigterm(server.shutdown):
            server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if reg.process is not None:
            reg.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                reg.process.wait(timeout=10)
        out("stopped")
