"""What decides a host's setup, as one digest: the `inputs` of gpubring.core.host_state.

A host that the host phase converged keeps a record (the module's `mode: record`) of its state and of the
inputs of that run; a later run leaves the host out of the host phase's roles when both still match
(playbooks/host.yml, issue 26 item 1). The inputs are everything on the controller that can change what
the roles would do to a host:

    project     roles/, playbooks/, plugins/, settings.yml, versions.yml (a gpubring upgrade)
    inventory   every file under the inventory's folder, its .gpubring/ state and hidden folders left out
                (hosts, group_vars, host_vars, vault files; files over 4 MiB by size and mtime)
    -e          the operator's extra variables (a vault file by its content), in order

So an edit of any of them sends every host through the host phase once, and its record is rewritten.
The digest is a SHA-256 (it may cover secrets of the inventory or -e; only the digest leaves here).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from gpubring import paths
from gpubring.run.settings import RunSettings

INPUTS_VAR = "gpubring_host_inputs"
FAST_VAR = "gpubring_host_fast"
PROJECT_PARTS = ("roles", "playbooks", "plugins", "settings.yml", "versions.yml")
BIG = 4 << 20


def _files(top: Path) -> Iterator[Path]:
    if top.is_file():
        yield top
        return
    for root, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(names):
            if not name.endswith(".pyc"):
                yield Path(root) / name


def _add_tree(hasher: hashlib._Hash, label: str, top: Path) -> None:
    for path in _files(top):
        try:
            info = path.stat()
            hasher.update(f"{label}/{path.relative_to(top.parent)}\0".encode())
            if not stat.S_ISREG(info.st_mode):  # a FIFO or socket would block a read: its name and kind
                hasher.update(f"{stat.S_IFMT(info.st_mode):o}\0".encode())
            elif info.st_size > BIG:
                hasher.update(f"{info.st_size} {info.st_mtime_ns}\0".encode())
            else:
                hasher.update(path.read_bytes())
        except OSError as exc:  # a file that went away or cannot be read: its name and the error count
            hasher.update(f"{label}/{path} {exc.errno}\0".encode())


def inputs_digest(settings: RunSettings) -> str:
    hasher = hashlib.sha256(b"gpubring host inputs 1\0")
    root = paths.project_root()
    for part in PROJECT_PARTS:
        if (root / part).exists():
            _add_tree(hasher, "project", root / part)
    _add_tree(hasher, "inventory", settings.inventory_root.resolve())
    for source in settings.options.extra_vars:
        if isinstance(source, Mapping):
            hasher.update(json.dumps(dict(source), sort_keys=True, default=str).encode())
        else:
            _add_tree(hasher, "extra-vars", Path(source))
    return hasher.hexdigest()
