"""One run at a time per inventory: the run lock, <inventory root>/.gpubring/lock.

The verbs that change hosts (`up`, `node add|replace|remove`, `upgrade`, `reset --yes`,
`verify --acceptance`) hold it for their whole run; the read-only ones (plan, versions, check, runs
and every --check run) never take it and never wait for it. A second run is refused at once, naming
the holder: its command line, pid, host name and start time (LockHeld).

The primitive is `fcntl.flock` on the lock file, held open for the run's lifetime:
- two runs starting at the same instant cannot both win: the kernel grants LOCK_EX to one open file
  description only (a create-then-check with O_EXCL would still need the stale check below, and its
  "remove the stale file" step races with a third run);
- the kernel drops it when the process dies, however it dies (SIGKILL included), so a killed run
  never blocks the next one on this host; the file is opened O_CLOEXEC (Python's default), so the
  ansible-playbook processes a run starts do not inherit it;
- on NFS, Linux turns flock into a POSIX lock the server arbitrates between clients.

The holder's record (JSON: command line, pid, host, start time, the process's start in clock ticks
and the boot id) is written into the locked file and emptied when the run releases it; the file is
never removed, since a run that opened the old file before its removal could lock it while a third
run locks a new one. A record found in a file nobody locks is a killed run's (taken over, with a
notice: LockHolder.taken_over) unless its process still lives (same pid and start time on this
host's boot: a file replaced under a live run, or a filesystem that ignores flock; refused) or it
names another host, whose processes cannot be checked from here (refused, saying how to remove it).

This module prints nothing and never exits: the commands turn LockHeld and LockError into exit 2.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

LOCK_PATH = Path(".gpubring") / "lock"
# A run that has just locked the file may not have written its record yet: how long a refused run
# waits for that record (not for the lock) before it names the holder as unknown.
_RECORD_WAIT_S = 0.5
# Options of the run verbs that take a value; -e's values may be secrets and are never recorded.
_VALUE_SHORT = frozenset("ltfe")
_SECRET_OPTIONS = ("-e", "--extra-vars")
_HIDDEN = "***"


class LockError(Exception):
    """The run lock cannot be taken (a file system error); `path` is the lock file."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path

    def lines(self) -> list[str]:
        return [str(self)]


@dataclass(frozen=True)
class Holder:
    """The run that holds (or held) the lock, as it recorded itself."""

    command: str
    pid: int
    host: str
    started: str
    proc_start: int | None = None
    boot_id: str | None = None

    def describe(self) -> str:
        return f"`{self.command}` (pid {self.pid} on host {self.host}, started {self.started})"


class LockHeld(LockError):
    """Another run holds the lock, or may hold it (its host is not this one); `holder` is its record,
    None when it could not be read."""

    def __init__(self, path: Path, holder: Holder | None, *, other_host: bool) -> None:
        super().__init__(path, "another gpubring run holds the run lock of this inventory")
        self.holder = holder
        self.other_host = other_host

    def lines(self) -> list[str]:
        """The refusal, one line each: who holds it, the file, what to do."""
        out = [f"{self}: one run at a time may change its hosts"]
        holder = self.holder
        if holder is None:
            out.append("  held by: a run whose record cannot be read")
        else:
            out.append(f"  held by: {holder.command}")
            out.append(f"  pid {holder.pid} on host {holder.host}, started {holder.started}")
        out.append(f"  lock file: {self.path}")
        if self.other_host and holder is not None:
            out.append(
                f"  its host is not this one ({socket.gethostname()}): gpubring cannot tell from here "
                f"whether it still runs; if {holder.host} is down or that run is over, remove the lock "
                f"file: rm {self.path}"
            )
        else:
            stop = f" (Ctrl-C there, or kill {holder.pid})" if holder is not None else ""
            out.append(
                f"  wait for it to end, or stop it{stop}; read-only commands (plan, versions, check, "
                "runs, --check runs) do not need the lock"
            )
        return out


@dataclass
class RunLock:
    """A lock this process holds: released by release() or when the process dies."""

    path: Path
    holder: Holder
    taken_over: Holder | None
    _fd: int | None

    def release(self) -> None:
        """Empty the record, unlock, close; a second call does nothing."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def lock_path(inventory_root: Path) -> Path:
    return inventory_root.resolve() / LOCK_PATH


def command_line(argv: Sequence[str]) -> str:
    """`gpubring ARGS` as typed, with the values of -e/--extra-vars hidden (they may hold secrets, and
    the record is on disk and shown to the next run); an @file stays, it names a file."""
    out = ["gpubring"]
    hide_next = False
    for arg in argv[1:]:
        if hide_next:
            out.append(arg if arg.startswith("@") else _HIDDEN)
            hide_next = False
        elif arg in _SECRET_OPTIONS:
            out.append(arg)
            hide_next = True
        elif arg.startswith("--extra-vars="):
            value = arg.split("=", 1)[1]
            out.append(arg if value.startswith("@") else f"--extra-vars={_HIDDEN}")
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            out.append(_short_cluster(arg))
            hide_next = _takes_next_as_extra_vars(arg)
        else:
            out.append(arg)
    return " ".join(out)


def _value_option(cluster: str) -> int | None:
    """In a cluster of short options (-Ce k=v, -ek=v), the index of the first one that takes a value:
    it takes the rest of the cluster, or the next argument."""
    return next((i for i, char in enumerate(cluster) if i and char in _VALUE_SHORT), None)


def _short_cluster(arg: str) -> str:
    index = _value_option(arg)
    if index is None or arg[index] != "e":
        return arg
    value = arg[index + 1 :]
    return arg if not value or value.startswith("@") else arg[: index + 1] + _HIDDEN


def _takes_next_as_extra_vars(arg: str) -> bool:
    index = _value_option(arg)
    return index is not None and arg[index] == "e" and index == len(arg) - 1


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks after boot, field 22 of /proc/<pid>/stat), or None when it
    does not exist or /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_alive(holder: Holder) -> bool:
    """Whether the process of a record made on this host still runs: same boot, same pid, and the
    same start time (a pid reused by another process is not it)."""
    boot = _boot_id()
    if holder.boot_id and boot and holder.boot_id != boot:
        return False
    start = process_start(holder.pid)
    if start is not None and holder.proc_start is not None:
        return start == holder.proc_start
    if Path("/proc/self/stat").exists():
        return start is not None  # /proc works, and has no such process
    return _pid_exists(holder.pid)  # no /proc here: the pid alone


def _parse(text: str) -> Holder | None:
    try:
        data = json.loads(text)
        proc_start = data.get("proc_start")
        boot_id = data.get("boot_id")
        return Holder(
            command=str(data["command"]),
            pid=int(data["pid"]),
            host=str(data["host"]),
            started=str(data["started"]),
            proc_start=int(proc_start) if proc_start is not None else None,
            boot_id=str(boot_id) if boot_id else None,
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _read(fd: int) -> str:
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 65536, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def read_holder(inventory_root: Path) -> Holder | None:
    """The record in the lock file: the holder of a held lock, a killed run's, or None (free)."""
    try:
        text = lock_path(inventory_root).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return _parse(text) if text.strip() else None


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        # O_NOFOLLOW: a symlink planted there is not followed to another file; O_CLOEXEC: no child
        # process keeps the lock after this one is gone.
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise LockError(path, f"cannot open the run lock {path}: {exc.strerror or exc}") from None
    return fd


def acquire(inventory_root: Path, command: str, *, now: datetime | None = None) -> RunLock:
    """Take the run lock of the inventory at once, or raise LockHeld naming its holder (never waits
    for it). `command` is the command line to record (command_line(sys.argv))."""
    path = lock_path(inventory_root)
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _wait_record(fd)
            raise LockHeld(
                path, holder, other_host=holder is not None and holder.host != socket.gethostname()
            ) from None
        except OSError as exc:
            hint = " (a network file system without lock support?)" if exc.errno == errno.ENOLCK else ""
            raise LockError(path, f"cannot lock {path}: {exc.strerror or exc}{hint}") from None
        text = _read(fd)
        previous = _parse(text) if text.strip() else None
        if previous is not None:
            if previous.host != socket.gethostname():
                raise LockHeld(path, previous, other_host=True)
            if previous.pid != os.getpid() and holder_alive(previous):
                raise LockHeld(path, previous, other_host=False)
        me = os.getpid()
        holder = Holder(
            command=command,
            pid=me,
            host=socket.gethostname(),
            started=(now or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds"),
            proc_start=process_start(me),
            boot_id=_boot_id(),
        )
        data = (json.dumps(asdict(holder), sort_keys=True) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)  # closing drops the flock if this process took it
        raise
    taken_over = previous if previous is not None and previous.pid != me else None
    if text.strip() and previous is None:
        # A record nobody holds that cannot be read: say so, as for a killed run.
        taken_over = Holder(command="(unreadable record)", pid=0, host=holder.host, started="?")
    return RunLock(path=path, holder=holder, taken_over=taken_over, _fd=fd)


def _wait_record(fd: int) -> Holder | None:
    """The holder's record; a run that has just taken the lock writes it a moment later."""
    deadline = time.monotonic() + _RECORD_WAIT_S
    while True:
        text = _read(fd)
        holder = _parse(text) if text.strip() else None
        if holder is not None or time.monotonic() >= deadline:
            return holder
        time.sleep(0.05)


@contextmanager
def held(inventory_root: Path, command: str) -> Iterator[RunLock]:
    """Hold the run lock for the with-block (acquire, then release on any exit)."""
    run_lock = acquire(inventory_root, command)
    try:
        yield run_lock
    finally:
        run_lock.release()
