"""A bundle's manifest.json: what `gpubring bundle` fetched, from where, and what it could not.

The shared contract of the bundle's parts (charts, files, images here; the apt repositories of
gpubring.bundle.apt): DIR/manifest.json is

    {"format": 1, "inventory": ..., "created": ..., "entries": [{kind, name, version, source, sha256,
     size, path, status, reason}, ...]}

`path` is relative to DIR (null when missing); `status` is "fetched" or "missing"; `reason` says why an
entry is missing (the real error, one line). The file is written atomically (a temporary file renamed
over it) after each part, so an interrupted build leaves a valid manifest of what it finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "MANIFEST", "STATUSES", "Entry", "Manifest", "ManifestError", "sha256_of"]

FORMAT = 1
MANIFEST = "manifest.json"
STATUSES = ("fetched", "missing")


class ManifestError(Exception):
    """manifest.json exists and is not a manifest of this format."""


@dataclass(frozen=True)
class Entry:
    kind: str  # apt, apt-repo-missing, apt-source, chart, file, image, ...
    name: str
    version: str
    source: str  # where it is fetched from (a URL, a chart repository and name, an image reference)
    sha256: str = ""
    size: int = 0
    path: str | None = None  # relative to the bundle's folder
    status: str = "missing"
    reason: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.source, self.version)

    def fetched(self, path: str, sha256: str, size: int) -> Entry:
        return replace(self, path=path, sha256=sha256, size=size, status="fetched", reason="")

    def missing(self, reason: str) -> Entry:
        return replace(self, path=None, sha256="", size=0, status="missing", reason=" ".join(reason.split()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        return cls(
            kind=str(data.get("kind", "")),
            name=str(data.get("name", "")),
            version=str(data.get("version", "")),
            source=str(data.get("source", "")),
            sha256=str(data.get("sha256") or ""),
            size=int(data.get("size") or 0),
            path=str(data["path"]) if data.get("path") else None,
            status=str(data.get("status", "missing")),
            reason=str(data.get("reason") or ""),
        )


@dataclass
class Manifest:
    inventory: str
    created: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    entries: list[Entry] = field(default_factory=list)

    def previous(self, entry: Entry) -> Entry | None:
        """The entry of the same kind, source and version (an earlier run's), if any."""
        for e in self.entries:
            if e.key == entry.key:
                return e
        return None

    def put(self, entries: Iterable[Entry], kinds: Iterable[str]) -> None:
        """Replace every entry of `kinds` with `entries` (one part of the build), keeping the others."""
        drop = set(kinds)
        self.entries = [e for e in self.entries if e.kind not in drop] + list(entries)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "inventory": self.inventory,
            "created": self.created,
            "entries": [asdict(e) for e in self.entries],
        }

    def write(self, folder: Path) -> None:
        """folder/manifest.json, replaced atomically."""
        fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.as_dict(), handle, indent=1, sort_keys=True)
                handle.write("\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, folder / MANIFEST)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def read(cls, folder: Path) -> Manifest | None:
        """folder/manifest.json (None when there is none); ManifestError when it is not one."""
        path = folder / MANIFEST
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ManifestError(f"{path}: not a bundle manifest ({exc})") from None
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ManifestError(f"{path}: not a bundle manifest of format {FORMAT}")
        entries = [Entry.from_dict(e) for e in data.get("entries") or [] if isinstance(e, Mapping)]
        return cls(str(data.get("inventory", "")), str(data.get("created", "")), entries)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
