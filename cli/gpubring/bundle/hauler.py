"""DIR/hauler-manifest.yaml: the bundle's lists as Hauler content, so a site that uses Hauler can sync them
(`hauler store sync --files hauler-manifest.yaml`: hauler-dev/hauler internal/flags/sync.go).

Hauler's content API (hauler-dev/hauler pkg/apis/hauler.cattle.io/v1: image.go, chart.go, file.go;
group content.hauler.cattle.io, version v1) has one kind per list: Images (spec.images[].name, a
reference by tag or digest), Charts (spec.charts[]: name, repoURL, version; an OCI chart's repoURL is its
oci:// registry path) and Files (spec.files[]: path, a URL, and name). Every entry planned is listed,
fetched here or not: Hauler may reach what this machine could not.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from gpubring.bundle.manifest import Entry

__all__ = ["API_VERSION", "FILE", "documents", "write"]

API_VERSION = "content.hauler.cattle.io/v1"
FILE = "hauler-manifest.yaml"


def _chart(entry: Entry) -> dict[str, str]:
    """An entry's source is `<repo URL> <name>` or an oci:// reference ending in the chart's name."""
    if entry.source.startswith("oci://"):
        return {"name": entry.name, "repoURL": entry.source.rsplit("/", 1)[0], "version": entry.version}
    repo = entry.source.split()[0]
    return {"name": entry.name, "repoURL": repo, "version": entry.version}


def documents(entries: Sequence[Entry], name: str) -> list[dict[str, Any]]:
    images = [{"name": e.source} for e in entries if e.kind == "image"]
    charts = [_chart(e) for e in entries if e.kind == "chart"]
    files = [
        {"path": e.source, "name": e.name}
        for e in entries
        if e.kind in ("file", "apt-source") and "://" in e.source
    ]

    def doc(kind: str, key: str, items: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": f"{name}-{kind.lower()}"},
            "spec": {key: items},
        }

    return [doc("Images", "images", images), doc("Charts", "charts", charts), doc("Files", "files", files)]


def write(folder: Path, entries: Sequence[Entry], name: str = "gpubring") -> Path:
    text = yaml.safe_dump_all(documents(entries, name), sort_keys=False, default_flow_style=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILE}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, folder / FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return folder / FILE
