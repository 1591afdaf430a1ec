"""A run's cancel: the flag Ctrl-C, SIGTERM, SIGHUP or a caller sets (CancelFlag), and the Reaper that
stops what ansible-runner's cancel leaves behind (ansible-core's detached workers, Mitogen's sockets)."""

from __future__ import annotations

import os
import signal
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType

from gpubring.run.accelerate import MITOGEN_SOCKET_PREFIX
from gpubring.run.proctable import descendants, is_ansible_playbook, kill, process_table, unix_sockets

CANCEL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class CancelFlag:
    """Set by Ctrl-C, SIGTERM or a caller; read by ansible-runner's cancel_callback.

    Set again (a second Ctrl-C), it stops the wait for the hosts' package work after the cancel."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._again = threading.Event()
        self.reason = ""
        self.again_reason = ""

    def set(self, reason: str = "cancelled") -> None:
        if self._event.is_set():
            if not self._again.is_set():
                self.again_reason = reason
            self._again.set()
            return
        self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def is_set_again(self) -> bool:
        return self._again.is_set()

    @contextmanager
    def on_signals(self) -> Iterator[None]:
        """While inside, SIGINT, SIGTERM and SIGHUP set the flag instead of killing gpubring (whose
        death would leave ansible-playbook running on: ansible-runner starts it in its own session)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            self.set(f"{signal.Signals(signum).name} received")

        previous = {sig: signal.signal(sig, handler) for sig in CANCEL_SIGNALS}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)


class Reaper:
    """Stops what ansible-runner's cancel leaves behind.

    ansible-runner cancels by SIGKILL to ansible-playbook's process group, but ansible-core's
    workers detach into sessions of their own (WorkerProcess._detach) and would go on running the
    task they hold (a package install, a long pause) after the run is reported cancelled. When the
    cancel starts, the reaper notes every descendant of this run's ansible-playbook (from /proc);
    after ansible-runner returns it kills those still alive, and everything in their sessions.

    This run's ansible-playbook is the child of this process that runs ansible-playbook and was not
    there before the run started (a command line need not name the run folder: the inventory, the
    playbook and every -e file may all live elsewhere).

    Mitogen's connection multiplexer binds a unix socket in the system's temporary folder and removes
    it when it exits, which a SIGKILL does not let it do: the reaper notes the Mitogen sockets those
    processes hold and removes them once they are killed.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seen: dict[int, int] = {}
        self.sessions: set[int] = set()
        self.sockets: set[Path] = set()
        me = os.getpid()
        self.before = {pid for pid, (ppid, _, _) in self._table().items() if ppid == me}

    @staticmethod
    def _table() -> dict[int, tuple[int, int, int]]:
        return process_table()

    def _is_ours(self, pid: int) -> bool:
        return pid not in self.before and is_ansible_playbook(pid)

    def snapshot(self) -> None:
        table = self._table()
        me = os.getpid()
        roots = [pid for pid, (ppid, _, _) in table.items() if ppid == me and self._is_ours(pid)]
        seen, sessions = descendants(table, roots)
        self.seen.update(seen)
        self.sessions |= sessions
        self.sockets |= {path for path in unix_sockets(seen) if path.name.startswith(MITOGEN_SOCKET_PREFIX)}

    def sweep(self) -> int:
        killed = kill(self.seen, self.sessions)
        for path in self.sockets:
            with suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
        return killed
