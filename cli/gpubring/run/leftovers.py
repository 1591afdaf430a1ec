"""What killed runs leave behind: a gpubring killed by SIGKILL cannot remove its -e files and
ansible's local temporary folder (`clear_leftovers` removes them at the next run's start), nor stop
its ansible-playbook (`find_orphans` names them, `kill_orphans` stops them)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from gpubring import runstore
from gpubring.run.folder import EXTRA_VARS_PREFIX, LOCAL_TEMP
from gpubring.run.proctable import (
    cmdline_of,
    descendants,
    is_ansible_playbook,
    kill,
    process_start,
    process_table,
)


def run_is_over(folder: Path) -> bool:
    """Whether the run of `folder` has no gpubring process any more: its recorded owner is gone (or
    its pid now belongs to another process); a run without an owner record is over when it wrote
    its report."""
    owner = runstore.read_owner(folder)
    if owner is None:
        return (folder / runstore.REPORT_NAME).is_file()
    return process_start(owner.pid) != owner.start


def _over_runs(inventory_root: Path, exclude: Path | None) -> list[Path]:
    folders = runstore.run_folders(runstore.runs_dir(inventory_root))
    return [f for f in folders if (exclude is None or f != exclude) and run_is_over(f)]


def clear_leftovers(inventory_root: Path, exclude: Path | None = None) -> list[Path]:
    """Remove the -e files (and ansible's local temporary folder) that runs which are over left in
    their run folders (a gpubring killed by SIGKILL cannot remove them); return the -e files."""
    removed: list[Path] = []
    for folder in _over_runs(inventory_root, exclude):
        for path in sorted((folder / "vars").glob(f"{EXTRA_VARS_PREFIX}*.json")):
            with suppress(OSError):
                path.unlink()
                removed.append(path)
        shutil.rmtree(folder / LOCAL_TEMP, ignore_errors=True)
    return removed


@dataclass(frozen=True)
class Orphan:
    """An ansible-playbook left running by an earlier run whose gpubring process is gone."""

    pid: int
    run: str
    folder: Path
    limit: str
    processes: Mapping[int, int]  # pid -> start time: it and its descendants
    sessions: frozenset[int]

    def describe(self) -> str:
        hosts = f"hosts {self.limit}" if self.limit else "all hosts of the run"
        return f"pid {self.pid} (run {self.run}, {hosts}; {len(self.processes)} process(es) in all)"


def _points_into(pid: int, folders: Sequence[Path]) -> Path | None:
    """The run folder a process works in: its cwd (ansible-runner starts ansible-playbook in
    <run>/project) or its AWX_ISOLATED_DATA_DIR (<run>/artifacts/<run>, inherited by every worker)."""
    places: list[str] = []
    with suppress(OSError):
        places.append(os.readlink(f"/proc/{pid}/cwd"))
    with suppress(OSError), open(f"/proc/{pid}/environ", "rb") as handle:
        for item in handle.read().split(b"\0"):
            if item.startswith(b"AWX_ISOLATED_DATA_DIR="):
                places.append(item.split(b"=", 1)[1].decode(errors="replace"))
    for place in places:
        path = Path(place)
        for folder in folders:
            if path == folder or folder in path.parents:
                return folder
    return None


def _limit_of(cmdline: Sequence[str]) -> str:
    for index, part in enumerate(cmdline):
        if part in ("--limit", "-l") and index + 1 < len(cmdline):
            return cmdline[index + 1]
        if part.startswith("--limit="):
            return part.split("=", 1)[1]
    return ""


def find_orphans(inventory_root: Path, exclude: Path | None = None) -> list[Orphan]:
    """The ansible-playbook processes (this user's) that work in a run folder of the inventory whose
    gpubring process is gone, each with its descendants and their sessions."""
    folders = _over_runs(inventory_root, exclude)
    if not folders:
        return []
    table = process_table()
    me = os.getpid()
    found: dict[int, Path] = {}
    for pid in table:
        if pid != me and is_ansible_playbook(pid):
            folder = _points_into(pid, folders)
            if folder is not None:
                found[pid] = folder
    # The top ones: an ansible-playbook whose parent is not one of them (workers are forks of it).
    roots = sorted(pid for pid in found if table[pid][0] not in found)
    orphans = []
    for pid in roots:
        seen, sessions = descendants(table, [pid])
        orphans.append(
            Orphan(
                pid=pid,
                run=found[pid].name,
                folder=found[pid],
                limit=_limit_of(cmdline_of(pid)),
                processes=seen,
                sessions=frozenset(sessions),
            )
        )
    return orphans


def kill_orphans(orphans: Sequence[Orphan]) -> int:
    """SIGKILL the orphans, their descendants and their sessions; return how many processes."""
    seen: dict[int, int] = {}
    sessions: set[int] = set()
    for orphan in orphans:
        seen.update(orphan.processes)
        sessions |= orphan.sessions
    return kill(seen, sessions) if seen else 0
