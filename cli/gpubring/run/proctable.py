"""What /proc says about processes: the table (parent, session, start time), command lines, the unix
sockets a process holds, descendants, and the SIGKILL that spares reused pids. Empty where there is
no /proc."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path


def unix_sockets(pids: Iterable[int]) -> set[Path]:
    """The paths of the unix sockets that these processes hold open (their fds matched with
    /proc/net/unix by inode; abstract and unnamed sockets left out)."""
    inodes: set[str] = set()
    for pid in pids:
        with suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:[") and target.endswith("]"):
                        inodes.add(target[len("socket:[") : -1])
    paths: set[Path] = set()
    if not inodes:
        return paths
    with suppress(OSError), open("/proc/net/unix", encoding="utf-8", errors="replace") as handle:
        for line in handle.read().splitlines()[1:]:
            fields = line.split(maxsplit=7)  # Num RefCount Protocol Flags Type St Inode Path
            if len(fields) == 8 and fields[6] in inodes and fields[7].startswith("/"):
                paths.add(Path(fields[7]))
    return paths


def process_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, session id, start time) of every process, from /proc (empty elsewhere)."""
    table: dict[int, tuple[int, int, int]] = {}
    with suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                table[int(entry.name)] = (int(fields[1]), int(fields[3]), int(fields[19]))
            except (OSError, IndexError, ValueError):
                continue
    return table


def cmdline_of(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_ansible_playbook(pid: int) -> bool:
    return any("ansible-playbook" in part for part in cmdline_of(pid))


def descendants(
    table: Mapping[int, tuple[int, int, int]], roots: Sequence[int]
) -> tuple[dict[int, int], set[int]]:
    """The roots and every descendant (pid -> start time), and the sessions those descendants lead
    (ansible-core's workers detach into sessions of their own)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen: dict[int, int] = {}
    sessions: set[int] = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        _ppid, sid, start = table[pid]
        seen[pid] = start
        if sid == pid and pid not in roots:
            sessions.add(sid)
        stack.extend(children.get(pid, []))
    return seen, sessions


def kill(seen: Mapping[int, int], sessions: set[int]) -> int:
    """SIGKILL the processes of `seen` still alive with the same start time (a reused pid is left
    alone), and every process of `sessions`, never this one or its own session."""
    table = process_table()
    own_session = os.getsid(0)
    victims = [
        pid
        for pid, (_, sid, start) in table.items()
        if pid != os.getpid() and ((seen.get(pid) == start) or (sid in sessions and sid != own_session))
    ]
    for pid in victims:
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(victims)


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks after boot), or None when it does not exist."""
    entry = _process_table_entry(pid)
    return entry[2] if entry else None


def _process_table_entry(pid: int) -> tuple[int, int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[3]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None
