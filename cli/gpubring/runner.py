"""The ansible-runner wrapper: one run of a playbook (or of the phases asked for) on an inventory.

`run()` gives each run its own absolute private_data_dir under
<inventory root>/.gpubring/runs/<UTC timestamp>-<command>/ (mode 0700; see gpubring.runstore):

    owner.json                       the gpubring process of the run (pid and start time): a later
                                     start tells a run that is over from one still going
    vars/gpubring.json               the rolling batch size gpubring_serial (Ansible templates play
                                     keywords such as `serial` before any host's variables exist),
                                     passed with `-e @`
    vars/extra-vars-N.json           the operator's -e mappings (0600), only while the run (or the
                                     wait after its cancel) goes
    tmp/                             ansible's local temporary files (ANSIBLE_LOCAL_TEMP), only while
                                     the run (or the wait after its cancel) goes
    project/run.yml                  imports the phase playbooks asked for, in order (up)
    env/settings                     ansible-runner settings (how often the cancel flag is read)
    artifacts/<run>/                 ansible-runner's artifacts: command (environment scrubbed),
                                     stdout, job_events/, rc, status
    artifacts/<run>-wait/            the same of the wait after a cancel (below), when there was one
    report.json                      the run report (gpubring.report)

The inventory goes to ansible-runner as its absolute path, never as a dict (GPU_NOTES 15). The
settings.yml defaults and the version matrix are not passed at all: the collection's vars plugin
(plugins/vars/defaults.py) gives them to every play, as it does to a plain ansible-playbook run.
The operator's extra vars may hold secrets: they never go through ansible-runner's env/extravars
or the command line; they are written to 0600 files under the run folder (0700), passed with
`-e @file`, and removed when the run ends (success, failure or cancel). Nothing goes to the system's
temporary folder. A gpubring that is killed (SIGKILL) cannot remove them: the next run on the same
inventory removes what runs that are over left (`clear_leftovers`), and reports the
ansible-playbook processes such a run left running (`find_orphans`, `kill_orphans`).

A cancel (Ctrl-C, SIGTERM, SIGHUP, or a caller's CancelFlag) stops ansible-playbook and every process
it started here (`_Reaper`), but not what its tasks started on the hosts: an apt install or a `dkms
build` goes on there, and a re-run would meet a busy dpkg. So, once the local processes are stopped,
the run names the hosts that still had a task in flight (`RunState.in_flight`) and waits, up to
gpubring_cancel_wait_timeout seconds (settings.yml; 0 does not wait), for their package work to end:
a second, short ansible-runner run of playbooks/wait_idle.yml (preflight's package_wait.yml) limited to
those hosts, with the same inventory, -e and connection settings, the linear strategy (no Mitogen
socket), its -e files and local temporary files removed as the first run's are. A second signal
stops that wait at once (the hosts that may still be busy are named); the exit code stays 3 and
report.json's `cancel_wait` says what the wait found.

Nothing in this module imports ansible or ansible_runner at module level.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata, util
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import yaml

from gpubring import paths, report, runstore
from gpubring.events import (
    Cancelled,
    CancelWait,
    CancelWaitEnd,
    Event,
    Notice,
    Output,
    PhasePlay,
    PhaseTracker,
    PlayStart,
    RunState,
    package_wait,
    parse_all,
)
from gpubring.exitcodes import ExitCode
from gpubring.runopts import ExtraVarsSource, RunOptions, extra_var_names

if TYPE_CHECKING:
    from gpubring.model import Inventory

# Mitogen only checks a minimum ansible-core version (ansible_mitogen/loaders.py,
# ANSIBLE_VERSION_MIN); its newer releases dropped the maximum. gpubring enables it only up to the
# newest ansible-core line it was measured and tested with, unless Mitogen declares a maximum.
MITOGEN_TESTED_MAX = (2, 19)
MITOGEN_FALLBACK_MIN = (2, 10)
MITOGEN_STRATEGY = "mitogen_linear"
# mitogen.unix.make_socket_path(): the multiplexer's socket in the system's temporary folder.
MITOGEN_SOCKET_PREFIX = "mitogen_unix_"
CANCEL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How often (seconds) ansible-runner reads the cancel flag.
CANCEL_POLL_S = 1
# The wait after a cancel: its setting and that setting's default in settings.yml (used when the
# inventory cannot be read), the playbook, and how long past the setting gpubring lets the wait run
# go on (connecting, ansible-playbook's start) before it stops it.
CANCEL_WAIT_SETTING = "gpubring_cancel_wait_timeout"
CANCEL_WAIT_DEFAULT_S = 300
WAIT_PLAYBOOK = "wait_idle.yml"
WAIT_GRACE_S = 60


# --- the accelerator ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accelerator:
    strategy: str
    env: Mapping[str, str]
    notice: str = ""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) or "0"
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def mitogen_declared_range(loaders: Path) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """ANSIBLE_VERSION_MIN (and MAX, when Mitogen declares one) read from ansible_mitogen/loaders.py
    without importing it (importing it imports ansible)."""
    found: dict[str, tuple[int, ...]] = {}
    try:
        tree = ast.parse(loaders.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return MITOGEN_FALLBACK_MIN, None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("ANSIBLE_VERSION_MIN", "ANSIBLE_VERSION_MAX"):
                with suppress(ValueError, TypeError):
                    value = ast.literal_eval(node.value)
                    found[name] = tuple(int(v) for v in value)
    return found.get("ANSIBLE_VERSION_MIN", MITOGEN_FALLBACK_MIN), found.get("ANSIBLE_VERSION_MAX")


def accelerator(requested: bool, ansible_core: tuple[int, ...] | None = None) -> Accelerator:
    """Mitogen's linear strategy when asked for, installed, and made for this ansible-core
    (`ansible_core` defaults to the installed version, read without importing ansible)."""
    linear = Accelerator(strategy="linear", env={})
    if not requested:
        return linear
    spec = util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None or util.find_spec("mitogen") is None:
        return Accelerator(
            "linear",
            {},
            "Mitogen is not installed (pip install 'gpubring[accel]'): using the linear strategy.",
        )
    package = Path(spec.origin).parent
    strategy_dir = package / "plugins" / "strategy"
    try:
        core = ansible_core or _version_tuple(metadata.version("ansible-core"))
    except metadata.PackageNotFoundError:
        return Accelerator(
            "linear", {}, "ansible-core is not installed as a package: using the linear strategy."
        )
    low, high = mitogen_declared_range(package / "loaders.py")
    high = high or MITOGEN_TESTED_MAX
    shown = ".".join(map(str, core))
    if (
        not (tuple(low) <= core[:2] <= tuple(high)[:2])
        or not (strategy_dir / f"{MITOGEN_STRATEGY}.py").is_file()
    ):
        rng = f"{'.'.join(map(str, low))} to {'.'.join(map(str, high))}"
        return Accelerator(
            "linear", {}, f"Mitogen is not enabled for ansible-core {shown} (it is for {rng}): using linear."
        )
    return Accelerator(
        strategy=MITOGEN_STRATEGY,
        env={"ANSIBLE_STRATEGY_PLUGINS": str(strategy_dir), "ANSIBLE_STRATEGY": MITOGEN_STRATEGY},
    )


# --- cancel ---------------------------------------------------------------------------------------


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


class _Reaper:
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
        return _process_table()

    def _is_ours(self, pid: int) -> bool:
        return pid not in self.before and _is_ansible_playbook(pid)

    def snapshot(self) -> None:
        table = self._table()
        me = os.getpid()
        roots = [pid for pid, (ppid, _, _) in table.items() if ppid == me and self._is_ours(pid)]
        seen, sessions = _descendants(table, roots)
        self.seen.update(seen)
        self.sessions |= sessions
        self.sockets |= {path for path in _unix_sockets(seen) if path.name.startswith(MITOGEN_SOCKET_PREFIX)}

    def sweep(self) -> int:
        killed = _kill(self.seen, self.sessions)
        for path in self.sockets:
            with suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
        return killed


def _unix_sockets(pids: Iterable[int]) -> set[Path]:
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


def _process_table() -> dict[int, tuple[int, int, int]]:
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


def _cmdline_of(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_ansible_playbook(pid: int) -> bool:
    return any("ansible-playbook" in part for part in _cmdline_of(pid))


def _descendants(
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


def _kill(seen: Mapping[int, int], sessions: set[int]) -> int:
    """SIGKILL the processes of `seen` still alive with the same start time (a reused pid is left
    alone), and every process of `sessions`, never this one or its own session."""
    table = _process_table()
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


# --- what killed runs leave behind ----------------------------------------------------------------


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
    table = _process_table()
    me = os.getpid()
    found: dict[int, Path] = {}
    for pid in table:
        if pid != me and _is_ansible_playbook(pid):
            folder = _points_into(pid, folders)
            if folder is not None:
                found[pid] = folder
    # The top ones: an ansible-playbook whose parent is not one of them (workers are forks of it).
    roots = sorted(pid for pid in found if table[pid][0] not in found)
    orphans = []
    for pid in roots:
        seen, sessions = _descendants(table, [pid])
        orphans.append(
            Orphan(
                pid=pid,
                run=found[pid].name,
                folder=found[pid],
                limit=_limit_of(_cmdline_of(pid)),
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
    return _kill(seen, sessions) if seen else 0


# --- settings and result --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSettings:
    """One run: what to run (either `playbook`, run as is, or `phases`, imported from `playbooks_dir`
    in order) and where, with the operator's `options`."""

    inventory_root: Path
    hosts_file: Path
    command: str = "up"
    playbook: Path | None = None
    phases: tuple[str, ...] = ()
    phases_skipped: tuple[tuple[str, str], ...] = ()
    playbooks_dir: Path | None = None
    serial: str | None = None
    options: RunOptions = field(default_factory=RunOptions)
    keep_runs: int = runstore.DEFAULT_KEEP
    run_folder: Path | None = None
    # The --only/--from the operator gave, as typed (`--only preflight,host`): the run is partial.
    phase_option: str = ""
    # Seconds a cancelled run waits for the package work of the hosts that had a task in flight;
    # None: -e gpubring_cancel_wait_timeout, else the inventory's setting (settings.yml: 300).
    cancel_wait_timeout: int | None = None


@dataclass(frozen=True)
class RunResult:
    run_folder: Path
    report_path: Path
    status: str
    exit_code: ExitCode
    report: Mapping[str, Any]
    state: RunState


# --- building the run folder ----------------------------------------------------------------------


def plays_of(playbook: Path) -> list[str]:
    """The play names of a playbook in run order, following import_playbook (for the phase tracker);
    a play without a name is called by its hosts pattern, as ansible-runner's events call it."""
    from gpubring.phases import PlaybookError, read_playbook

    try:
        specs = read_playbook(playbook)
    except PlaybookError:
        return []
    return [(spec.name or spec.hosts_pattern).strip() for spec in specs]


def _write_yaml(path: Path, header: str, data: Any) -> Path:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    runstore.write_private(path, f"---\n{header}{body}")
    return path


def phase_playbooks(settings: RunSettings) -> list[tuple[str, Path]]:
    base = (settings.playbooks_dir or paths.playbooks_dir()).resolve()
    return [(phase, base / f"{phase}.yml") for phase in settings.phases]


def _prepare(settings: RunSettings, folder: Path) -> tuple[Path, list[PhasePlay], list[Path]]:
    """Write the generated files of the run folder; return the playbook, its plays and inventories."""
    if settings.phases:
        imports = phase_playbooks(settings)
        missing = [str(p) for _, p in imports if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"phase playbook not found: {', '.join(missing)}")
        playbook = _write_yaml(
            folder / "project" / "run.yml",
            "# Generated by gpubring for this run: the phases asked for, in order.\n",
            [
                {"name": f"Phase {phase}", "ansible.builtin.import_playbook": str(path)}
                for phase, path in imports
            ],
        )
        plays = [PhasePlay(phase, name) for phase, path in imports for name in plays_of(path)]
    elif settings.playbook is not None:
        (folder / "project").mkdir(mode=0o700, exist_ok=True)
        playbook = settings.playbook.resolve()
        plays = [PhasePlay("", name) for name in plays_of(playbook)]
    else:
        raise ValueError("RunSettings needs a playbook or phases")
    # ansible-runner reads env/settings only from the file (a settings= argument is dropped when the
    # file is missing); this one only says how often to read the cancel flag and to stay quiet.
    env_dir = folder / "env"
    env_dir.mkdir(mode=0o700, exist_ok=True)
    (folder / "artifacts").mkdir(mode=0o700, exist_ok=True)
    runstore.write_private(
        env_dir / "settings", json.dumps({"pexpect_timeout": CANCEL_POLL_S, "suppress_ansible_output": True})
    )
    return playbook, plays, [settings.hosts_file.resolve()]


EXTRA_VARS_PREFIX = "extra-vars-"
LOCAL_TEMP = "tmp"


def _extra_vars_args(sources: Sequence[ExtraVarsSource], vars_dir: Path) -> list[str]:
    """`-e @file` for each of the operator's -e: a vault file as it is, a mapping written to a 0600
    file under the run folder (0700), removed when the run ends (`_remove_run_files`); never in the
    system's /tmp, never on the command line."""
    args: list[str] = []
    vars_dir.mkdir(mode=0o700, exist_ok=True)
    for index, source in enumerate(sources):
        if isinstance(source, Path):
            args += ["-e", f"@{source}"]
            continue
        path = vars_dir / f"{EXTRA_VARS_PREFIX}{index}.json"
        runstore.write_private(path, json.dumps(dict(source), default=str))
        args += ["-e", f"@{path}"]
    return args


def _remove_run_files(folder: Path) -> None:
    """Remove the -e files and ansible's local temporary folder of a run that is over."""
    for path in (folder / "vars").glob(f"{EXTRA_VARS_PREFIX}*.json"):
        with suppress(OSError):
            path.unlink()
    shutil.rmtree(folder / LOCAL_TEMP, ignore_errors=True)


def _cmdline(settings: RunSettings, folder: Path) -> str:
    args: list[str] = []
    play_vars: dict[str, Any] = {}
    if settings.serial is not None:
        play_vars["gpubring_serial"] = settings.serial
    vars_dir = folder / "vars"
    vars_dir.mkdir(mode=0o700, exist_ok=True)
    if play_vars:
        vars_file = vars_dir / "gpubring.json"
        runstore.write_private(vars_file, json.dumps(play_vars, indent=2))
        args += ["-e", f"@{vars_file}"]
    args += _extra_vars_args(settings.options.extra_vars, vars_dir)
    if settings.options.check:
        args.append("--check")
    if settings.options.diff:
        args.append("--diff")
    return shlex.join(args)


def facts_dir(inventory_root: Path) -> Path:
    """The inventory's fact cache, `<inventory>/.gpubring/facts` (0700)."""
    folder = inventory_root.resolve() / ".gpubring" / "facts"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _envvars(settings: RunSettings, accel: Accelerator, folder: Path) -> dict[str, str]:
    root = paths.project_root()
    env = {
        # ansible's local temporary files (module payloads with their arguments) stay in the run
        # folder, not in ~/.ansible/tmp, where a killed run would leave them.
        "ANSIBLE_LOCAL_TEMP": str(folder / LOCAL_TEMP),
        # ansible-playbook from the same installation as gpubring (a venv that is not activated).
        "PATH": os.pathsep.join(filter(None, (str(Path(sys.executable).parent), os.environ.get("PATH")))),
        "ANSIBLE_COLLECTIONS_PATH": str(paths.collections_path()),
        "ANSIBLE_ROLES_PATH": str(paths.roles_dir()),
        # The collection's vars plugin gives every play the settings.yml defaults and gpubring_matrix.
        "ANSIBLE_VARS_ENABLED": "host_group_vars,gpubring.core.defaults",
        # ansible-runner turns host key checking off unless it is set: keep ansible's default, on.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",
        # Facts persist per inventory (GPU_NOTES item 2): a later `--only platform` or `--limit` run
        # reads the GPU nodes' facts (gpu_facts: NICs, GPU models) from the cache and never needs
        # facts of hosts outside the play; plays that gather always refresh their own hosts.
        "ANSIBLE_CACHE_PLUGIN": "jsonfile",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(facts_dir(settings.inventory_root)),
        "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "0",
        "ANSIBLE_GATHERING": "implicit",
        "ANSIBLE_DISPLAY_ARGS_TO_STDOUT": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_FORCE_COLOR": "False",
        **accel.env,
    }
    cfg = root / "ansible.cfg"
    if cfg.is_file():
        env["ANSIBLE_CONFIG"] = str(cfg)
    return env


# ansible-runner records the whole environment in artifacts/<ident>/command; only these names (and
# gpubring's own settings) are kept there, so no token exported in the operator's shell lands on disk.
_RUNNER_ENV = frozenset(
    {
        "ANSIBLE_STDOUT_CALLBACK",
        "ANSIBLE_CALLBACK_PLUGINS",
        "ANSIBLE_RETRY_FILES_ENABLED",
        "ANSIBLE_HOST_KEY_CHECKING",
        "ANSIBLE_ROLES_PATH",
        "AWX_ISOLATED_DATA_DIR",
        "RUNNER_OMIT_EVENTS",
        "RUNNER_ONLY_FAILED_EVENTS",
    }
)


def _scrub_command_artifact(artifact_dir: Path, keep: Mapping[str, str]) -> None:
    path = artifact_dir / "command"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    env = data.get("env") or {}
    data["env"] = {k: v for k, v in sorted(env.items()) if k in keep or k in _RUNNER_ENV}
    data["env_note"] = (
        "gpubring keeps only the variables it sets; the rest of the environment is not recorded"
    )
    runstore.write_private(path, json.dumps(data, indent=2))


def _owner_only(top: Path) -> None:
    """Folders 0700 and files 0600 under `top` (ansible-runner leaves a few readable by others)."""
    for dirpath, _dirnames, filenames in os.walk(top):
        with suppress(OSError):
            os.chmod(dirpath, 0o700)
        for name in filenames:
            with suppress(OSError):
                os.chmod(os.path.join(dirpath, name), 0o600)


# --- the run --------------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


class _Session:
    """The callbacks ansible-runner calls during one run, and the state they fold events into."""

    def __init__(
        self,
        settings: RunSettings,
        folder: Path,
        plays: Sequence[PhasePlay],
        envvars: Mapping[str, str],
        *,
        on_event: Callable[[Event], None] | None,
        cancel: CancelFlag,
        ident: str = "",
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.state = RunState()
        self.tracker = PhaseTracker(plays)
        self.reaper = _Reaper(folder)
        self.artifact_dir = folder / "artifacts" / (ident or folder.name)
        self.envvars = envvars
        self.on_event = on_event
        self.cancel = cancel
        self.should_stop = should_stop or cancel.is_set

    def emit(self, event: Event) -> None:
        self.state.apply(event)
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception as exc:  # the display must not abandon a half-done run on its hosts
            self.on_event = None
            self.state.notices.append(f"the live view stopped ({exc!r}); the run went on")

    def event_handler(self, raw: dict[str, Any]) -> bool:
        if self.settings.options.verbosity and raw.get("stdout"):
            self.emit(Output(str(raw["stdout"])))
        for event in parse_all(raw):
            self.emit(self.tracker.play_started(event) if isinstance(event, PlayStart) else event)
        return True

    def status_handler(self, data: Mapping[str, Any], runner_config: Any = None) -> None:
        if data.get("status") == "running":
            _scrub_command_artifact(self.artifact_dir, self.envvars)

    def cancel_callback(self) -> bool:
        if not self.should_stop():
            return False
        if not self.reaper.seen:
            self.reaper.snapshot()
        return True

    def finish(self, runner_status: str) -> None:
        if self.reaper.seen:
            self.reaper.sweep()
        _scrub_command_artifact(self.artifact_dir, self.envvars)
        _owner_only(self.artifact_dir.parent)
        if runner_status == "canceled" or (not runner_status and self.should_stop()):
            self.emit(Cancelled(self.cancel.reason or "cancelled"))


def _options(settings: RunSettings, accel: Accelerator) -> dict[str, Any]:
    return {
        "check": settings.options.check,
        "diff": settings.options.diff,
        "limit": settings.options.limit,
        "tags": settings.options.tags,
        "skip_tags": settings.options.skip_tags,
        "forks": settings.options.forks,
        "strategy": accel.strategy,
        "extra_vars": extra_var_names(settings.options.extra_vars),
    }


def _run_playbook(
    settings: RunSettings, folder: Path, session: _Session, playbook: Path, inventories: Sequence[Path]
) -> tuple[int | None, str]:
    """ansible-runner's run of the playbook: ansible-playbook's exit status and ansible-runner's status."""
    import ansible_runner

    runner = ansible_runner.run(
        private_data_dir=str(folder),
        ident=folder.name,
        playbook=str(playbook),
        inventory=[str(p) for p in inventories],
        cmdline=_cmdline(settings, folder),
        envvars=dict(session.envvars),
        limit=settings.options.limit,
        tags=settings.options.tags,
        skip_tags=settings.options.skip_tags,
        forks=settings.options.forks,
        verbosity=settings.options.verbosity or None,
        quiet=True,
        suppress_env_files=True,
        rotate_artifacts=settings.keep_runs,
        # Not "jsonfile": ansible-runner would point the cache into this run's artifacts.
        fact_cache_type="memory",
        event_handler=session.event_handler,
        status_handler=session.status_handler,
        cancel_callback=session.cancel_callback,
    )
    return (runner.rc if isinstance(runner.rc, int) else None), str(runner.status)


# --- the wait after a cancel ----------------------------------------------------------------------


def _seconds(value: Any) -> int | None:
    """A timeout setting as whole seconds >= 0, or None when it is not one."""
    if isinstance(value, bool):
        return None
    try:
        seconds = int(str(value).strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def cancel_wait_timeout(settings: RunSettings, inventory_settings: Mapping[str, Any] | None = None) -> int:
    """The seconds a cancelled run waits for its hosts' package work: the run's own
    `cancel_wait_timeout`, else the last -e that sets gpubring_cancel_wait_timeout (it wins in Ansible
    too), else the inventory's setting, else settings.yml's default."""
    if settings.cancel_wait_timeout is not None:
        return max(settings.cancel_wait_timeout, 0)
    for source in reversed(settings.options.extra_vars):
        if isinstance(source, Mapping) and CANCEL_WAIT_SETTING in source:
            seconds = _seconds(source[CANCEL_WAIT_SETTING])
            if seconds is not None:
                return seconds
    seconds = _seconds((inventory_settings or {}).get(CANCEL_WAIT_SETTING))
    return CANCEL_WAIT_DEFAULT_S if seconds is None else seconds


def _inventory_of(settings: RunSettings) -> Inventory | None:
    """The run's inventory (its hosts and cluster-wide settings), or None when it cannot be read: the
    wait then takes every host in flight and settings.yml's default."""
    from gpubring.inventory import InventoryError, load_inventory

    try:
        return load_inventory(settings.inventory_root, check_rules=False)
    except (InventoryError, OSError):
        return None


def _wait_after_cancel(settings: RunSettings, folder: Path, session: _Session, cancel: CancelFlag) -> None:
    """Name the inventory hosts that still had a task in flight when the run was cancelled, and wait
    for their package work (`_wait_run`); events CancelWait, PackageWait and CancelWaitEnd."""
    flight = session.state.in_flight()
    if not flight:
        return
    inventory = _inventory_of(settings)
    if inventory is not None:
        # A play on the controller (implicit localhost) left nothing on a host: the reaper stopped it.
        flight = {host: task for host, task in flight.items() if host in inventory.hosts}
        if not flight:
            return
    timeout = cancel_wait_timeout(settings, inventory.settings if inventory is not None else None)
    session.emit(CancelWait(hosts=flight, timeout_s=timeout))
    began = time.monotonic()
    if timeout == 0:
        end = CancelWaitEnd(not_waited=True)
    elif cancel.is_set_again():
        end = CancelWaitEnd(stopped=cancel.again_reason)
    else:
        try:
            end = _wait_run(settings, folder, session, cancel, flight=flight, timeout=timeout)
        except Exception as exc:  # the cancelled run still ends with its report and exit code 3
            why = f"the wait could not run: {type(exc).__name__}: {exc}"
            end = CancelWaitEnd(unchecked=dict.fromkeys(flight, why))
    session.emit(replace(end, duration_s=time.monotonic() - began))


def _wait_run(
    settings: RunSettings,
    folder: Path,
    session: _Session,
    cancel: CancelFlag,
    *,
    flight: Mapping[str, str],
    timeout: int,
) -> CancelWaitEnd:
    """The second ansible-runner run: playbooks/wait_idle.yml limited to the hosts in flight, with the
    run's inventory, -e (0600 files under the run folder again, removed after) and connection
    settings, the linear strategy (no Mitogen), ident <run>-wait. What the hosts publish
    (PackageWait) goes to the run's events as it arrives; nothing else of this run does."""
    import ansible_runner

    ident = f"{folder.name}-wait"
    deadline = time.monotonic() + timeout + WAIT_GRACE_S
    ran_out = threading.Event()

    def should_stop() -> bool:
        if time.monotonic() > deadline:
            ran_out.set()
        return cancel.is_set_again() or ran_out.is_set()

    envvars = _envvars(settings, Accelerator(strategy="linear", env={}), folder)
    waiting = _Session(
        settings, folder, (), envvars, on_event=None, cancel=cancel, ident=ident, should_stop=should_stop
    )

    def event_handler(raw: dict[str, Any]) -> bool:
        waiting.event_handler(raw)
        found = package_wait(raw)
        if found is not None and found.host in flight:
            session.emit(found)
        return True

    args = _extra_vars_args(settings.options.extra_vars, folder / "vars")
    # Last: what gpubring waits for is what the play waits for, whatever an -e said.
    args += ["-e", json.dumps({CANCEL_WAIT_SETTING: timeout})]
    (folder / LOCAL_TEMP).mkdir(mode=0o700, exist_ok=True)
    status = ""
    try:
        runner = ansible_runner.run(
            private_data_dir=str(folder),
            ident=ident,
            playbook=str(paths.playbooks_dir().resolve() / WAIT_PLAYBOOK),
            inventory=[str(settings.hosts_file.resolve())],
            cmdline=shlex.join(args),
            envvars=dict(envvars),
            limit=",".join(flight),
            forks=settings.options.forks,
            quiet=True,
            suppress_env_files=True,
            fact_cache_type="memory",
            event_handler=event_handler,
            status_handler=waiting.status_handler,
            cancel_callback=waiting.cancel_callback,
        )
        status = str(runner.status)
    finally:
        waiting.finish(status)
        _remove_run_files(folder)
    stopped = cancel.again_reason if cancel.is_set_again() else ""
    unchecked = {f.host: f.message for f in waiting.state.failures if f.host in flight}
    if waiting.state.errors and not stopped:
        for host in flight:
            unchecked.setdefault(host, waiting.state.errors[0])
    return CancelWaitEnd(stopped=stopped, timed_out=ran_out.is_set() and not stopped, unchecked=unchecked)


def run(
    settings: RunSettings,
    on_event: Callable[[Event], None] | None = None,
    cancel: CancelFlag | None = None,
) -> RunResult:
    """Run the playbook (or phases) of `settings`; events go to `on_event` as they arrive.

    Ctrl-C, SIGTERM and SIGHUP (when called from the main thread) and `cancel` stop the run; the
    report is written to <run folder>/report.json in every case.

    A cancel then waits, up to gpubring_cancel_wait_timeout, for the package work of the hosts that
    had a task in flight (the module's docstring); a second signal, or `cancel.set()` again, stops
    that wait. The report says what it found (`cancel_wait`).
    """
    cancel = cancel or CancelFlag()
    started = _now()
    inventory_root = settings.inventory_root.resolve()
    folder = settings.run_folder or runstore.new_run_folder(inventory_root, settings.command, started)
    folder = folder.resolve()
    me = os.getpid()
    runstore.write_owner(folder, runstore.Owner(pid=me, start=process_start(me) or 0))
    runstore.prune(runstore.runs_dir(inventory_root), settings.keep_runs, protect=folder)
    leftovers = clear_leftovers(inventory_root, exclude=folder)
    accel = accelerator(settings.options.accelerate)
    playbook, plays, inventories = _prepare(settings, folder)
    envvars = _envvars(settings, accel, folder)
    session = _Session(settings, folder, plays, envvars, on_event=on_event, cancel=cancel)
    if leftovers:
        runs = ", ".join(sorted({p.parent.parent.name for p in leftovers}))
        session.emit(Notice(f"removed {len(leftovers)} -e file(s) left by killed run(s): {runs}"))
    if accel.notice:
        session.emit(Notice(accel.notice))
    (folder / LOCAL_TEMP).mkdir(mode=0o700, exist_ok=True)
    ansible_rc: int | None = None
    runner_status = ""
    try:
        # One signal handler from the start of the run to the end of the wait after its cancel: a
        # second Ctrl-C stops that wait, and no Ctrl-C can interrupt the cleanup in between.
        with cancel.on_signals():
            try:
                ansible_rc, runner_status = _run_playbook(settings, folder, session, playbook, inventories)
            finally:
                session.finish(runner_status)
                _remove_run_files(folder)
            if session.state.cancelled:
                _wait_after_cancel(settings, folder, session, cancel)
    finally:
        meta = report.RunMeta(
            command=settings.command,
            inventory=inventory_root,
            hosts_file=settings.hosts_file.resolve(),
            run_folder=folder,
            playbook=str(playbook),
            started=started,
            ended=_now(),
            ansible_rc=ansible_rc,
            phases_run=settings.phases,
            phases_skipped=settings.phases_skipped,
            options=_options(settings, accel),
            partial=runstore.partial_by(
                limit=settings.options.limit,
                tags=settings.options.tags,
                skip_tags=settings.options.skip_tags,
                phases=settings.phase_option,
            ),
        )
        data = report.build(session.state, meta)
        report_path = report.write(data, folder)
    status, code = report.outcome(session.state, ansible_rc)
    return RunResult(
        run_folder=folder,
        report_path=report_path,
        status=status,
        exit_code=code,
        report=data,
        state=session.state,
    )
