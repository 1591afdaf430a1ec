"""The bundle's Helm charts: DIR/charts/<chart>-<version>.tgz and DIR/charts/index.yaml.

DIR/charts is a classic Helm chart repository (what `gpubring_chart_mirror=http://HOST/charts` reads:
roles/helm/templates/source.yml.j2 then asks for the chart by its name at its pin). Its index.yaml
has the shape of Helm's IndexFile (helm.sh/helm/v3 pkg/repo/index.go: apiVersion v1, generated,
entries: chart name -> [the chart's Chart.yaml metadata with urls, created, digest]); Helm reads it
strictly, so an entry holds Chart.yaml's own keys only.

Where a chart comes from, first found:
- a local chart the inventory gives (a release's *_chart_path: a .tgz, copied, or a folder, packaged);
- `--charts DIR`, holding <chart>-<version>/ folders or <chart>-<version>.tgz files (as
  `gpubring plan --manifests --charts`);
- its repository: <repo>/index.yaml read over HTTPS, the chart's .tgz at its pin fetched (resumable,
  its digest from the index checked);
- an oci:// chart: `helm pull` when a helm binary is on PATH; otherwise it is listed missing.
A folder is packaged deterministically: members sorted, owner root, mtime fixed, gzip without a name
or time, so the same chart gives the same bytes (and sha256) on every run.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import yaml

from gpubring.bundle import fetch
from gpubring.bundle.manifest import sha256_of

__all__ = ["INDEX", "ChartError", "chart_metadata", "fetch_oci", "fetch_repo", "package", "write_index"]

INDEX = "index.yaml"
FIXED_MTIME = 315532800  # 1980-01-01T00:00:00Z: a fixed time for every member of a packaged chart
HELM_PULL_TIMEOUT = 120


class ChartError(Exception):
    """A chart could not be fetched or packaged; the message is one line with the real error."""


def package(folder: Path, dest: Path) -> None:
    """The chart folder `folder` as a .tgz at `dest` (its top folder named for the chart, as `helm
    package` writes it), deterministically."""
    meta = chart_metadata(folder / "Chart.yaml")
    top = str(meta.get("name") or folder.name)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(_members(folder)):
            rel = path.relative_to(folder).as_posix()
            info = tar.gettarinfo(str(path), arcname=f"{top}/{rel}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = FIXED_MTIME
            info.mode = 0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            elif info.isdir():
                tar.addfile(info)
    data = gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)
    _atomic_write(dest, data)


def _members(folder: Path) -> Iterable[Path]:
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".git")]
        for name in [*dirs, *files]:
            path = Path(root) / name
            if path.is_symlink():
                continue  # helm package follows no link out of the chart; neither does this
            yield path


def _atomic_write(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def chart_metadata(source: Path) -> dict[str, Any]:
    """Chart.yaml of a chart folder's Chart.yaml path, or of a packaged .tgz."""
    try:
        if source.suffix == ".tgz":
            with tarfile.open(source, "r:gz") as tar:
                member = next(
                    (
                        m
                        for m in tar.getmembers()
                        if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml")
                    ),
                    None,
                )
                handle = tar.extractfile(member) if member is not None else None
                if handle is None:
                    raise ChartError(f"{source}: no <chart>/Chart.yaml in the archive")
                text = handle.read().decode("utf-8")
        else:
            text = source.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except (OSError, tarfile.TarError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ChartError(f"{source}: cannot read the chart's Chart.yaml ({exc})") from None
    if not isinstance(data, dict) or not data.get("name") or not data.get("version"):
        raise ChartError(f"{source}: Chart.yaml has no name and version")
    return data


def _versions(version: str) -> tuple[str, ...]:
    bare = version.removeprefix("v")
    return tuple(dict.fromkeys((version, bare, f"v{bare}")))


def fetch_repo(
    repo: str, name: str, version: str, dest: Path, progress: fetch.Progress | None = None
) -> tuple[str, int]:
    """The chart `name` at `version` from the classic Helm repository `repo`, to `dest`; (sha256, size).
    ChartError with the real error when the repository cannot be read or has no such chart."""
    index_url = repo.rstrip("/") + "/" + INDEX
    try:
        index = yaml.safe_load(fetch.read_url(index_url))
    except fetch.FetchError as exc:
        raise ChartError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise ChartError(f"{index_url}: not YAML ({exc})") from None
    entries = (index or {}).get("entries") or {} if isinstance(index, dict) else {}
    found = next(
        (
            v
            for v in entries.get(name) or []
            if isinstance(v, dict) and str(v.get("version")) in _versions(version)
        ),
        None,
    )
    if found is None or not found.get("urls"):
        raise ChartError(f"{index_url}: no chart {name} at version {version}")
    url = urljoin(repo.rstrip("/") + "/", str(found["urls"][0]))
    try:
        return fetch.download(url, dest, sha256=str(found.get("digest") or ""), progress=progress)
    except fetch.FetchError as exc:
        raise ChartError(str(exc)) from None


def fetch_oci(ref: str, version: str, dest: Path) -> tuple[str, int]:
    """An oci:// chart pulled by `helm pull` (a helm binary on PATH) to `dest`; (sha256, size)."""
    helm = shutil.which("helm")
    if helm is None:
        raise ChartError(
            f"{ref}: an OCI chart needs a helm binary on PATH to pull it (none here); or give --charts"
        )
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        try:
            done = subprocess.run(
                [helm, "pull", ref, "--version", version, "--destination", tmp],
                capture_output=True,
                text=True,
                timeout=HELM_PULL_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ChartError(f"{ref}: helm pull took more than {HELM_PULL_TIMEOUT} s") from None
        pulled = sorted(Path(tmp).glob("*.tgz"))
        if done.returncode != 0 or not pulled:
            raise ChartError(f"{ref}: helm pull: {' '.join((done.stderr or done.stdout).split())}")
        os.replace(pulled[0], dest)
    return sha256_of(dest), dest.stat().st_size


def write_index(folder: Path, generated: str) -> dict[str, Any]:
    """folder/index.yaml for every .tgz in the folder (Helm's IndexFile shape); the index written."""
    entries: dict[str, list[dict[str, Any]]] = {}
    for tgz in sorted(folder.glob("*.tgz")):
        meta = chart_metadata(tgz)
        entry = {**meta, "urls": [tgz.name], "digest": sha256_of(tgz), "created": generated}
        entry.setdefault("apiVersion", "v1")
        entries.setdefault(str(meta["name"]), []).append(entry)
    index = {"apiVersion": "v1", "generated": generated, "entries": entries}
    text = yaml.safe_dump(index, sort_keys=True, default_flow_style=False)
    _atomic_write(folder / INDEX, text.encode("utf-8"))
    return index
