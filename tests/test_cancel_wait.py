"""Cancel means stopped: after a cancel, gpubring names the hosts that still had a task in flight and
waits, up to gpubring_cancel_wait_timeout, for the package work those tasks left going on them; a
second signal stops that wait. The exit code is 3 either way and report.json's `cancel_wait` says
what happened.

The real tests cancel a real `gpubring up` (a subprocess, signalled as an operator's Ctrl-C or a
service manager's SIGTERM would) whose task runs over ssh on a real OpenSSH server (tests/sshd.py)
on 127.0.0.1. The task starts a process that outlives its ssh session, as an apt install does: a
holder of a lock file under tmp_path (the inventory points preflight_package_lock_paths at it, so
the machine's own dpkg lock is never touched), or a program standing for a DKMS build, named
FAKE_DKMS_NAME (the inventory's preflight_package_busy_commands: this machine's own `dkms` builds,
such as the e2e lab's beside the unit tests, are never waited for). The test releases or kills that
process by its pid; nothing is found or killed by name.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from gpubring import report, runstore, view
from gpubring.events import (
    CancelWait,
    CancelWaitEnd,
    HostResult,
    PackageWait,
    PlayStart,
    RunState,
    TaskStart,
    package_wait,
)
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.run import process
from gpubring.run.accelerate import MITOGEN_SOCKET_PREFIX
from gpubring.run.cancel import CancelFlag
from gpubring.run.cancelwait import CANCEL_WAIT_DEFAULT_S, cancel_wait_timeout
from gpubring.run.folder import EXTRA_VARS_PREFIX, LOCAL_TEMP
from gpubring.run.leftovers import find_orphans
from gpubring.run.settings import RunSettings
from gpubring.run.strategy import GPUBRING_STRATEGY
from gpubring.runopts import RunOptions, parse_extra_vars
from helpers import DATA, REPO, alive, refused
from sshd import KeyPair, Sshd, require_sshd

SECRET = "S3cr3t-cancel-wait-token"
# Safety nets for a broken run, never timing assertions: the run reaches its task, and the wait its
# host, well within these on a loaded machine.
REACH_S = 180
# The holder of test_a_second_signal_stops_the_wait lives this long unless killed: far longer than a
# stopped wait may take (STOPPED_WITHIN_S), so that a wait that went on waiting would be caught.
HOLD_S = 600
STOPPED_WITHIN_S = 90

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py

# A process that outlives its ssh session, like an apt install: it takes the lock, writes its pid,
# and holds the lock until the test creates `release` (or HOLD_S passes); it writes `holder.done`
# just before it lets the lock go.
LOCK_HOLDER = """import fcntl, os, sys, time
from pathlib import Path
lock, state, hold = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
with open(lock, "a") as handle:
    fcntl.lockf(handle, fcntl.LOCK_EX)
    (state / "holder.pid").write_text(str(os.getpid()))
    end = time.monotonic() + hold
    while not (state / "release").exists() and time.monotonic() < end:
        time.sleep(0.1)
    (state / "holder.done").write_text("done")
"""

# A DKMS build as the wait sees one: a process whose name (/proc/PID/comm) is one of
# preflight_package_busy_commands, holding no lock. Not `dkms` itself: this machine is the test's node,
# and the e2e lab's containers beside the unit tests run real `dkms build`s that its /proc shows (three
# tests waited for them in a clean-clone run).
FAKE_DKMS_NAME = "dkms-gbtest"
FAKE_DKMS = """#!/bin/sh
echo $$ > "$1/holder.pid"
i=0
while [ ! -e "$1/release" ] && [ "$i" -lt "$2" ]; do sleep 0.2; i=$((i + 1)); done
echo done > "$1/holder.done"
"""


# --- the in-flight hosts and the wait's verdicts (no run) -------------------------------------------


def _fold(*events: Any) -> RunState:
    state = RunState()
    for event in events:
        state.apply(event)
    return state


def test_in_flight_is_a_task_started_on_a_host_with_no_result_yet() -> None:
    state = _fold(
        PlayStart(name="Host setup", pattern="all"),
        TaskStart(host="gpu-1", task="Install the driver", role="nvidia_driver"),
        TaskStart(host="gpu-2", task="Install the driver", role="nvidia_driver"),
        TaskStart(host="cpu-1", task="Install containerd", role="containerd"),
        HostResult(host="gpu-2", task="Install the driver", role="nvidia_driver", status="changed"),
        HostResult(host="cpu-1", task="Install containerd", role="containerd", status="failed", message="x"),
        TaskStart(host="gpu-2", task="Build the module", role="nvidia_driver"),
        TaskStart(host="cp-1", task="Wait"),
        HostResult(host="cp-1", task="Wait", status="unreachable", message="gone"),
    )
    assert state.in_flight() == {
        "gpu-1": "nvidia_driver : Install the driver",
        "gpu-2": "nvidia_driver : Build the module",
    }
    # A host that only ever reported results, and a run with no task started, have nothing in flight.
    assert _fold(HostResult(host="h", task="t", status="ok")).in_flight() == {}
    assert RunState().in_flight() == {}


def test_the_wait_gives_each_host_an_outcome_and_the_run_one() -> None:
    hosts = {name: f"task of {name}" for name in ("idle", "finished", "busy", "gone", "silent")}
    state = _fold(
        CancelWait(hosts=hosts, timeout_s=300),
        PackageWait(host="idle", done=False),
        PackageWait(host="idle", done=True),
        PackageWait(host="finished", holders=("7 /var/lib/dpkg/lock-frontend apt-get install x",)),
        PackageWait(host="finished", holders=("7 /var/lib/dpkg/lock-frontend apt-get install x",), done=True),
        PackageWait(host="busy", holders=("9 (running) /usr/sbin/dkms autoinstall",)),
        PackageWait(
            host="busy",
            holders=("9 (running) /usr/sbin/dkms autoinstall",),
            busy=("9 (running) dkms",),
            done=True,
        ),
        PackageWait(host="stranger", holders=("1 x",), done=True),  # not a host in flight: ignored
        CancelWaitEnd(duration_s=12.3456, unchecked={"gone": "Failed to connect to the host via ssh"}),
    )
    wait = state.cancel_wait
    assert wait is not None
    assert {name: host.outcome for name, host in wait.hosts.items()} == {
        "idle": "idle",
        "finished": "finished",
        "busy": "timed_out",
        "gone": "unchecked",
        "silent": "unchecked",
    }
    assert wait.outcome == "timed_out"
    assert wait.maybe_busy() == ["busy", "gone", "silent"]
    data = wait.as_dict()
    assert data["duration_s"] == 12.346
    assert data["hosts"]["finished"] == {
        "task": "task of finished",
        "outcome": "finished",
        "holders": ["7 /var/lib/dpkg/lock-frontend apt-get install x"],
        "busy": [],
        "message": "",
    }
    assert data["hosts"]["gone"]["message"] == "Failed to connect to the host via ssh"

    stopped = _fold(
        CancelWait(hosts={"a": "t", "b": "t"}, timeout_s=300),
        PackageWait(host="a", done=True),
        CancelWaitEnd(stopped="SIGINT received"),
    ).cancel_wait
    assert stopped is not None
    assert (stopped.outcome, stopped.reason, stopped.maybe_busy()) == ("stopped", "SIGINT received", ["b"])

    not_waited = _fold(CancelWait(hosts={"a": "t"}, timeout_s=0), CancelWaitEnd(not_waited=True)).cancel_wait
    assert not_waited is not None
    assert (not_waited.outcome, not_waited.hosts["a"].outcome) == ("not_waited", "not_waited")


def test_the_wait_reads_what_package_wait_yml_published() -> None:
    fact = {"holders": ["12 /tmp/l python3 h"], "busy": [], "done": True}
    raw = {
        "event": "runner_on_ok",
        "event_data": {"host": "n", "res": {"ansible_facts": {"preflight_package_wait": fact}}},
    }
    assert package_wait(raw) == PackageWait(host="n", holders=("12 /tmp/l python3 h",), busy=(), done=True)
    assert package_wait({"event": "runner_on_ok", "event_data": {"host": "n", "res": {}}}) is None
    assert package_wait({**raw, "event": "runner_on_failed"}) is None


def _report(state: RunState, tmp_path: Path) -> dict[str, Any]:
    now = process.utc_now()
    meta = report.RunMeta(
        command="up",
        inventory=tmp_path,
        hosts_file=tmp_path / "hosts.yml",
        run_folder=tmp_path,
        playbook="run.yml",
        started=now,
        ended=now,
        ansible_rc=None,
    )
    return report.build(state, meta)


def test_report_and_summary_say_which_hosts_may_still_be_busy(tmp_path: Path) -> None:
    from gpubring.events import Cancelled

    assert _report(RunState(), tmp_path)["cancel_wait"] is None
    state = _fold(
        TaskStart(host="gpu-1", task="Install the driver", role="nvidia_driver"),
        Cancelled("SIGINT received"),
        CancelWait(hosts={"gpu-1": "nvidia_driver : Install the driver"}, timeout_s=300),
        PackageWait(host="gpu-1", holders=("42 /var/lib/dpkg/lock-frontend /usr/bin/dpkg -i x.deb",)),
        CancelWaitEnd(duration_s=3.2, stopped="SIGINT received"),
    )
    doc = _report(state, tmp_path)
    assert list(doc) == list(report.REPORT_FIELDS)
    assert doc["status"] == "cancelled" and doc["exit_code"] == 3
    assert doc["cancel_wait"]["outcome"] == "stopped"
    assert doc["cancel_wait"]["hosts"]["gpu-1"]["outcome"] == "stopped"
    out = Console(width=300, file=io.StringIO())
    view.summary(out, report.RunReport.from_json(json.loads(report.dumps(doc))))
    assert isinstance(out.file, io.StringIO)
    lines = out.file.getvalue().splitlines()
    assert "after the cancel: stopped waiting (SIGINT received) after 3 s: gpu-1 may still be busy" in lines
    assert (
        "  gpu-1 (nvidia_driver : Install the driver): 42 /var/lib/dpkg/lock-frontend /usr/bin/dpkg -i x.deb"
        in lines
    )


# --- the setting ---------------------------------------------------------------------------------------


def test_the_setting_is_declared_with_its_default() -> None:
    declared = yaml.safe_load((REPO / "settings.yml").read_text())["options"]["gpubring_cancel_wait_timeout"]
    assert declared["type"] == "int" and declared["min"] == 0
    assert declared["default"] == CANCEL_WAIT_DEFAULT_S == 300


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("gpubring_cancel_wait_timeout: -1", "gpubring_cancel_wait_timeout: expected a number >= 0, got -1"),
        (
            "gpubring_cancel_wait_timeout: later",
            "gpubring_cancel_wait_timeout: expected an integer, got 'later'",
        ),
    ],
)
def test_a_bad_cancel_wait_timeout_is_refused_before_any_host(
    make_inventory: MakeInventory, line: str, expected: str
) -> None:
    site = "group_vars/all/zz-operations.yml"
    root = make_inventory({site: f"---\n{line}\n"})
    stderr = refused("check", root)
    assert f"error: {site}: {expected}" in stderr, stderr


def test_the_timeout_comes_from_the_run_then_e_then_the_inventory(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/zz-operations.yml": "---\ngpubring_cancel_wait_timeout: 0\n"})
    inventory = load_inventory(root)
    assert inventory.settings["gpubring_cancel_wait_timeout"] == 0  # 0 is valid: do not wait

    def timeout(options: RunOptions, **given: Any) -> int:
        settings = RunSettings(inventory_root=root, hosts_file=root / "hosts.yml", options=options, **given)
        return cancel_wait_timeout(settings, inventory.settings)

    assert timeout(RunOptions()) == 0
    e = parse_extra_vars(["gpubring_cancel_wait_timeout=45", '{"gpubring_cancel_wait_timeout": 60}'])
    assert timeout(RunOptions(extra_vars=e)) == 60  # the last -e wins, as in Ansible
    assert timeout(RunOptions(extra_vars=e), cancel_wait_timeout=5) == 5
    settings = RunSettings(inventory_root=root, hosts_file=root / "hosts.yml")
    assert cancel_wait_timeout(settings, None) == CANCEL_WAIT_DEFAULT_S


# --- a real cancel on localhost: the setting at 0 -----------------------------------------------------


def test_with_the_timeout_at_0_the_cancel_names_the_host_and_does_not_wait(tmp_path: Path) -> None:
    root = tmp_path / "inventory"
    root.mkdir()
    (root / "hosts.yml").write_text((DATA / "inventories" / "localhost" / "hosts.yml").read_text())
    flag = CancelFlag()
    seen: list[Any] = []

    def on_event(event: Any) -> None:
        seen.append(event)
        if isinstance(event, TaskStart) and event.task == "Wait for the cancel":
            flag.set("test cancel")

    settings = RunSettings(
        inventory_root=root,
        hosts_file=root / "hosts.yml",
        command="test",
        playbook=DATA / "playbooks" / "wait.yml",
        options=RunOptions(accelerate=False),
        cancel_wait_timeout=0,
    )
    result = process.run(settings, on_event, flag)
    assert result.exit_code == ExitCode.CANCELLED
    assert CancelWait(hosts={"node1": "Wait for the cancel"}, timeout_s=0) in seen
    wait = result.report.cancel_wait
    assert wait is not None
    assert (wait["outcome"], wait["hosts"]["node1"]["outcome"]) == ("not_waited", "not_waited")
    assert not list(result.run_folder.glob("artifacts/*-wait"))  # no second run


def test_a_cancelled_mitogen_run_and_its_wait_leave_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mitogen's multiplexer socket goes to the system's temporary folder and a SIGKILL leaves it
    there: the reaper removes it. The wait runs without Mitogen and removes its -e files too."""
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(systmp))
    monkeypatch.setattr(tempfile, "tempdir", str(systmp))
    root = tmp_path / "inventory"
    root.mkdir()
    (root / "hosts.yml").write_text((DATA / "inventories" / "localhost" / "hosts.yml").read_text())
    flag = CancelFlag()
    during: list[str] = []

    def on_event(event: Any) -> None:
        if isinstance(event, TaskStart) and event.task == "Wait for the cancel":
            during.extend(p.name for p in systmp.iterdir())
            flag.set("test cancel")

    settings = RunSettings(
        inventory_root=root,
        hosts_file=root / "hosts.yml",
        command="test",
        playbook=DATA / "playbooks" / "wait.yml",
        options=RunOptions(accelerate=True, extra_vars=parse_extra_vars([f"operator_token={SECRET}"])),
        cancel_wait_timeout=60,
    )
    result = process.run(settings, on_event, flag)
    assert result.exit_code == ExitCode.CANCELLED
    if result.report.options["strategy"] == GPUBRING_STRATEGY:
        assert [name for name in during if name.startswith(MITOGEN_SOCKET_PREFIX)], during
    assert result.report.to_json()["cancel_wait"]["hosts"]["node1"]["task"] == "Wait for the cancel"
    assert list(result.run_folder.glob("artifacts/*-wait/command"))
    assert list(systmp.iterdir()) == []
    assert list((result.run_folder / "vars").glob(f"{EXTRA_VARS_PREFIX}*")) == []
    assert not (result.run_folder / LOCAL_TEMP).exists()
    assert _holding(result.run_folder, SECRET) == []


# --- real cancels over ssh -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    require_sshd()
    return KeyPair.generate(tmp_path_factory.mktemp("client") / "id_client")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, client: KeyPair) -> Iterator[Sshd]:
    with Sshd.start(tmp_path_factory.mktemp("sshd"), [client.public_line]) as sshd:
        yield sshd


@dataclass
class Site:
    """An inventory of one host, `node`, reached over ssh on the test's sshd, and a phase playbook
    whose task starts a process that outlives its ssh session."""

    tmp: Path
    server: Sshd
    client: KeyPair
    state: Path = field(init=False)
    lock: Path = field(init=False)
    root: Path = field(init=False)
    phases: Path = field(init=False)

    def __post_init__(self) -> None:
        self.state = self.tmp / "state"
        self.state.mkdir()
        self.lock = self.tmp / "package.lock"
        self.root = self.tmp / "inventory"
        self.root.mkdir()
        self.phases = self.tmp / "phases"
        self.phases.mkdir()
        known_hosts = self.tmp / "known_hosts"
        known_hosts.write_text(self.server.known_hosts_line() + "\n")
        node = {
            "ansible_host": self.server.address,
            "ansible_user": "root",
            # ansible_port comes with -e: the wait must connect as the run did, -e included.
            "ansible_ssh_private_key_file": str(self.client.private),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
            ),
            "ansible_python_interpreter": sys.executable,
            # root already: su needs no password for root, and this machine has no sudo.
            "ansible_become_method": "su",
            "preflight_package_lock_paths": [str(self.lock)],
            "preflight_package_busy_commands": [FAKE_DKMS_NAME],
            "preflight_require_gpu": False,
            "preflight_check_time_sync": False,
        }
        hosts = {
            "all": {
                "hosts": {"node": node},
                "children": {
                    "control_plane": {"hosts": {"node": None}},
                    "gpu_nodes": {"hosts": {"node": None}},
                },
            }
        }
        (self.root / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))

    def phase(self, argv: list[str]) -> None:
        """The `host` phase: one play whose task runs `argv` on the node (and waits for it)."""
        play = [
            {
                "name": "Hold the package manager",
                "hosts": "all",
                "gather_facts": False,
                "tasks": [
                    {"name": "Hold the lock", "ansible.builtin.command": {"argv": argv}, "changed_when": True}
                ],
            }
        ]
        (self.phases / "host.yml").write_text(yaml.safe_dump(play, sort_keys=False))

    def holder_pid(self) -> int | None:
        path = self.state / "holder.pid"
        text = path.read_text().strip() if path.is_file() else ""
        return int(text) if text.isdigit() else None


@pytest.fixture
def site(tmp_path: Path, server: Sshd, client: KeyPair) -> Iterator[Site]:
    made = Site(tmp_path, server, client)
    yield made
    # The holder is stopped by its pid, whatever the test did: released, then killed.
    (made.state / "release").touch()
    pid = made.holder_pid()
    if pid is not None and alive(pid):
        time.sleep(1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


class Gpubring:
    """`gpubring up` in a subprocess, its output read line by line as it comes."""

    def __init__(self, site: Site, private_tmp: Path, *more: str) -> None:
        args = [
            "up",
            str(site.root),
            "--playbooks-dir",
            str(site.phases),
            "--only",
            "host",
            "--no-accelerate",
        ]
        args += ["-e", f"ansible_port={site.server.port}", "-e", f"operator_token={SECRET}", *more]
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpubring", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                "COLUMNS": "1000",
                # Ansible's ssh: no ~/.ssh of the user, no shared connection that outlives a run.
                "HOME": str(site.tmp),
                "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",
                "TMPDIR": str(private_tmp),
            },
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for_line(self, start: str, seconds: float = REACH_S) -> str:
        end = time.monotonic() + seconds
        with self._changed:
            while time.monotonic() < end:
                found = [line for line in self.lines if line.startswith(start)]
                if found:
                    return found[0]
                if self.proc.poll() is not None and not self._reader.is_alive():
                    break
                self._changed.wait(timeout=0.5)
        raise AssertionError(f"no line starting {start!r}:\n{self.output}")

    def finish(self, seconds: float = REACH_S) -> int:
        code = self.proc.wait(timeout=seconds)
        self._reader.join(timeout=30)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def private_tmp(tmp_path: Path) -> Path:
    folder = tmp_path / "systmp"
    folder.mkdir()
    return folder


def _wait_until(check: Callable[[], bool], seconds: float = REACH_S) -> bool:
    end = time.monotonic() + seconds
    while not check() and time.monotonic() < end:
        time.sleep(0.1)
    return check()


def _holding(top: Path, text: str) -> list[Path]:
    return [p for p in top.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def _assert_nothing_left(site: Site, private_tmp: Path, gpubring: Gpubring) -> dict[str, Any]:
    [folder] = runstore.run_folders(runstore.runs_dir(site.root))
    assert list((folder / "vars").glob(f"{EXTRA_VARS_PREFIX}*")) == []
    assert not (folder / LOCAL_TEMP).exists()
    assert list(private_tmp.iterdir()) == []
    assert _holding(folder, SECRET) == []
    assert SECRET not in gpubring.output
    assert find_orphans(site.root) == []  # no ansible-playbook of either run goes on
    # The second run went to the same host with the same -e: its command names them, not their values.
    command = json.loads((folder / "artifacts" / f"{folder.name}-wait" / "command").read_text())
    args = command["command"]
    assert args[args.index("--limit") + 1] == "node"
    assert str(REPO / "playbooks" / "wait_idle.yml") in args
    data: dict[str, Any] = json.loads((folder / "report.json").read_text())
    return data


def test_a_cancel_waits_until_the_package_work_on_the_host_is_over(site: Site, private_tmp: Path) -> None:
    holder = site.tmp / "holder.py"
    holder.write_text(LOCK_HOLDER)
    site.phase([sys.executable, str(holder), str(site.lock), str(site.state), str(HOLD_S)])
    gpubring = Gpubring(site, private_tmp)
    try:
        assert _wait_until(lambda: site.holder_pid() is not None or gpubring.proc.poll() is not None)
        pid = site.holder_pid()
        assert pid is not None, gpubring.output
        gpubring.proc.send_signal(signal.SIGTERM)
        busy = gpubring.wait_for_line("node is busy: ")
        # The wait saw the holder on the host: its pid, the lock, its command line.
        assert busy.startswith(f"node is busy: {pid} {site.lock} {sys.executable} {holder}"), busy
        assert not (site.state / "holder.done").exists()
        (site.state / "release").touch()
        code = gpubring.finish()
        # gpubring returned after the holder was done: it waited for it.
        assert (site.state / "holder.done").exists()
    finally:
        gpubring.stop()
    output = gpubring.output
    assert code == ExitCode.CANCELLED, output
    assert "cancelling (SIGTERM received)" in output
    assert "a task was still running on 1 host(s): node (Hold the lock)" in output
    assert "waiting up to 300 s (gpubring_cancel_wait_timeout)" in output
    assert "done waiting (" in output and "): no package work left on node" in output
    assert "cancelled (exit 3)" in output
    data = _assert_nothing_left(site, private_tmp, gpubring)
    assert (data["status"], data["exit_code"]) == ("cancelled", 3)
    assert data["stopped_at"]["hosts"]["node"]["task"] == "Hold the lock"
    wait = data["cancel_wait"]
    assert (wait["outcome"], wait["timeout_s"], wait["reason"]) == ("finished", 300, "")
    node = wait["hosts"]["node"]
    assert (node["task"], node["outcome"], node["busy"]) == ("Hold the lock", "finished", [])
    # The lock's holder first. The node is this machine: package processes it runs besides (the e2e
    # lab's containers, whose processes this PID namespace sees, when the test command runs it beside
    # the unit tests) are listed after it as "(running)", as they would be on a real node.
    holders = [line.split()[:2] for line in node["holders"]]
    assert holders[0] == [str(pid), str(site.lock)], holders
    assert all(h[1] == "(running)" for h in holders[1:]), holders


def test_a_second_signal_stops_the_wait_and_names_the_host(site: Site, private_tmp: Path) -> None:
    # A DKMS build holds no dpkg lock: the wait finds it by its name (preflight_package_busy_commands).
    dkms = site.tmp / "bin" / FAKE_DKMS_NAME
    dkms.parent.mkdir()
    dkms.write_text(FAKE_DKMS)
    dkms.chmod(0o755)
    site.phase([str(dkms), str(site.state), str(HOLD_S * 5)])
    gpubring = Gpubring(site, private_tmp)
    try:
        assert _wait_until(lambda: site.holder_pid() is not None or gpubring.proc.poll() is not None)
        pid = site.holder_pid()
        assert pid is not None, gpubring.output
        gpubring.proc.send_signal(signal.SIGTERM)
        busy = gpubring.wait_for_line("node is busy: ")
        assert busy.startswith(f"node is busy: {pid} (running) /bin/sh {dkms}"), busy
        second = time.monotonic()
        gpubring.proc.send_signal(signal.SIGTERM)
        code = gpubring.finish(seconds=STOPPED_WITHIN_S)
        took = time.monotonic() - second
        # It did not wait for the holder: the holder goes on.
        assert alive(pid) and not (site.state / "holder.done").exists()
    finally:
        gpubring.stop()
    output = gpubring.output
    assert code == ExitCode.CANCELLED, output
    assert took < STOPPED_WITHIN_S
    assert "a task was still running on 1 host(s): node (Hold the lock)" in output
    assert "stopped waiting (SIGTERM received) after " in output
    assert ": node may still be busy" in output
    assert f"  node (Hold the lock): {pid} (running) /bin/sh {dkms}" in output
    assert "cancelled (exit 3)" in output
    data = _assert_nothing_left(site, private_tmp, gpubring)
    assert (data["status"], data["exit_code"]) == ("cancelled", 3)
    wait = data["cancel_wait"]
    assert (wait["outcome"], wait["reason"]) == ("stopped", "SIGTERM received")
    assert wait["hosts"]["node"]["outcome"] == "stopped"
    assert wait["hosts"]["node"]["holders"][0].startswith(f"{pid} (running) /bin/sh {dkms}")


def test_a_wait_that_runs_out_says_what_is_still_busy(site: Site, private_tmp: Path) -> None:
    holder = site.tmp / "holder.py"
    holder.write_text(LOCK_HOLDER)
    site.phase([sys.executable, str(holder), str(site.lock), str(site.state), str(HOLD_S)])
    # The -e wins over the inventory's setting, in gpubring's bound as in the play's.
    gpubring = Gpubring(site, private_tmp, "-e", "gpubring_cancel_wait_timeout=4")
    try:
        assert _wait_until(lambda: site.holder_pid() is not None or gpubring.proc.poll() is not None)
        pid = site.holder_pid()
        assert pid is not None, gpubring.output
        gpubring.proc.send_signal(signal.SIGTERM)
        code = gpubring.finish()
        assert alive(pid) and not (site.state / "holder.done").exists()
    finally:
        gpubring.stop()
    output = gpubring.output
    assert code == ExitCode.CANCELLED, output
    assert "waiting up to 4 s (gpubring_cancel_wait_timeout)" in output
    assert "gave up waiting after 4 s (gpubring_cancel_wait_timeout): node may still be busy" in output
    assert f"  node (Hold the lock): {pid} {site.lock} {sys.executable} {holder}" in output
    data = _assert_nothing_left(site, private_tmp, gpubring)
    wait = data["cancel_wait"]
    assert (wait["outcome"], wait["timeout_s"]) == ("timed_out", 4)
    node = wait["hosts"]["node"]
    assert node["outcome"] == "timed_out"
    assert [line.split()[:2] for line in node["busy"]] == [[str(pid), str(site.lock)]]
