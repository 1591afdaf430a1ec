"""What a run leaves behind: the operator's -e files live in the run folder only while the run goes,
nothing goes to the system's temporary folder, and what a killed gpubring left (its -e files, its
ansible-playbook still running) is found at the next start."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import runstore
from gpubring.app import app
from gpubring.commands import runs as runs_command
from gpubring.events import Event, Notice, TaskStart
from gpubring.exitcodes import ExitCode
from gpubring.run import process
from gpubring.run.cancel import CancelFlag
from gpubring.run.folder import LOCAL_TEMP
from gpubring.run.leftovers import Orphan, find_orphans, kill_orphans, run_is_over
from gpubring.run.proctable import process_start
from gpubring.run.settings import RunSettings
from gpubring.runopts import RunOptions, parse_extra_vars
from helpers import DATA, alive

PLAYBOOKS = DATA / "playbooks"
SECRET = "S3cr3t-left-nowhere"


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    root = tmp_path / "inventory"
    shutil.copytree(DATA / "inventories" / "localhost", root)
    return root


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary folder of this test's own, as tempfile.gettempdir() for gpubring and ansible."""
    folder = tmp_path / "systmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    assert tempfile.gettempdir() == str(folder)
    return folder


def settings_for(root: Path, playbook: str, **options: object) -> RunSettings:
    return RunSettings(
        inventory_root=root,
        hosts_file=root / "hosts.yml",
        command="test",
        playbook=PLAYBOOKS / playbook,
        options=RunOptions(**options),  # type: ignore[arg-type]
    )


def holding(top: Path, text: str) -> list[Path]:
    found = []
    for path in top.rglob("*"):
        try:
            if path.is_file() and text.encode() in path.read_bytes():
                found.append(path)
        except OSError:
            continue
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_extra_vars_are_in_the_private_run_folder_only_while_the_run_goes(
    local_inventory: Path, private_tmp: Path
) -> None:
    during: list[tuple[Path, int, int]] = []

    def on_event(event: Event) -> None:
        if isinstance(event, TaskStart) and not during:
            [folder] = runstore.run_folders(runstore.runs_dir(local_inventory))
            for path in holding(folder, SECRET) + holding(private_tmp, SECRET):
                during.append((path, mode(path), mode(path.parent)))

    result = process.run(
        settings_for(local_inventory, "mixed.yml", extra_vars=parse_extra_vars([f"s={SECRET}"])),
        on_event=on_event,
    )
    assert result.exit_code == ExitCode.TASK_FAILED  # a run that fails cleans up too
    folder = result.run_folder
    assert during == [(folder / "vars" / "extra-vars-0.json", 0o600, 0o700)]
    assert mode(folder) == 0o700
    assert holding(folder, SECRET) == []
    assert holding(private_tmp, SECRET) == []
    assert list(private_tmp.iterdir()) == []
    assert not (folder / LOCAL_TEMP).exists()
    assert runstore.read_owner(folder) == runstore.Owner(os.getpid(), process_start(os.getpid()) or 0)


def test_a_cancelled_run_removes_its_extra_vars(local_inventory: Path, private_tmp: Path) -> None:
    flag = CancelFlag()

    def on_event(event: Event) -> None:
        if isinstance(event, TaskStart) and event.task == "Wait for the cancel":
            flag.set("test cancel")

    settings = settings_for(
        local_inventory, "wait.yml", extra_vars=parse_extra_vars([f"s={SECRET}"]), accelerate=False
    )
    result = process.run(settings, on_event, flag)
    assert result.exit_code == ExitCode.CANCELLED
    assert holding(result.run_folder, SECRET) == []
    assert holding(private_tmp, SECRET) == []


# --- a gpubring killed by SIGKILL ---------------------------------------------------------------------

# ansible-runner gives ansible-playbook a pty whose master this process holds: when the process is
# killed the pty hangs up, and whether ansible-playbook is still there a moment later is a race with
# its SIGHUP. An ignored SIGHUP (inherited through exec; process.run off the main thread leaves it so)
# makes the orphan certain, so that `--kill-orphans` below always has one to stop.
KILLED_RUN = """
import signal, sys, threading
from pathlib import Path
from gpubring.run import process
from gpubring.run.settings import RunSettings
from gpubring.runopts import RunOptions, parse_extra_vars
root = Path(sys.argv[1])
signal.signal(signal.SIGHUP, signal.SIG_IGN)
settings = RunSettings(
    inventory_root=root, hosts_file=root / "hosts.yml", command="up", playbook=Path(sys.argv[2]),
    options=RunOptions(extra_vars=parse_extra_vars([sys.argv[3]]), accelerate=False))
worker = threading.Thread(target=process.run, args=(settings,))
worker.start()
worker.join()
"""


def _wait_gone(pids: list[int], seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_a_killed_run_leaves_its_vars_under_the_run_folder_and_the_next_start_clears_them(
    local_inventory: Path, private_tmp: Path
) -> None:
    playbook = PLAYBOOKS / "outlive.yml"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, str(local_inventory), str(playbook), f"s={SECRET}"],
        env={**os.environ, "TMPDIR": str(private_tmp)},
    )
    orphans: list[Orphan] = []
    try:
        base = runstore.runs_dir(local_inventory)
        deadline = time.monotonic() + 120  # a safety net for a broken run, not a timing assertion
        waiting = False
        while not waiting and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            waiting = any(
                "Wait for the cancel" in p.read_text()
                for p in base.glob("*/artifacts/*/job_events/*.json")
                if p.stat().st_size
            )
        assert waiting, "the run never reached its long task"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

        [folder] = runstore.run_folders(base)
        # gpubring could not clean up: the -e file is where it was written, in the 0700 run folder.
        assert holding(folder, SECRET) == [folder / "vars" / "extra-vars-0.json"]
        assert mode(folder) == 0o700 and mode(folder / "vars" / "extra-vars-0.json") == 0o600
        assert holding(private_tmp, SECRET) == []
        assert run_is_over(folder)

        # ansible-playbook goes on (ansible-runner starts it in a session of its own): an orphan.
        orphans = find_orphans(local_inventory)
        assert [o.run for o in orphans] == [folder.name]
        assert b"ansible-playbook" in Path(f"/proc/{orphans[0].pid}/cmdline").read_bytes()

        # The next run on the inventory removes the leftover file and says so in one line.
        seen: list[Event] = []
        result = process.run(settings_for(local_inventory, "mixed.yml"), on_event=seen.append)
        note = f"removed 1 -e file(s) left by killed run(s): {folder.name}"
        assert note in result.report.notices
        assert Notice(note) in seen
        assert holding(folder, SECRET) == []

        # `gpubring runs INVENTORY --kill-orphans` stops it and everything it started.
        out = CliRunner().invoke(app, ["runs", str(local_inventory), "--kill-orphans"])
        assert out.exit_code == 0, out.output
        assert f"stopping pid {orphans[0].pid} (run {folder.name}, all hosts of the run;" in out.output
        assert _wait_gone(list(orphans[0].processes)) == []
        assert find_orphans(local_inventory) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_orphans(orphans)


# --- orphans, with a stand-in ansible-playbook ---------------------------------------------------------

STAND_IN = """import os, sys, time
if os.fork() == 0:
    time.sleep(600)  # a worker
    sys.exit(0)
time.sleep(600)
"""


def _dead_owner() -> runstore.Owner:
    done = subprocess.Popen(["true"])
    start = process_start(done.pid) or 1
    done.wait()
    return runstore.Owner(pid=done.pid, start=start)


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    """A program called ansible-playbook that forks a worker and sleeps."""
    path = tmp_path / "bin" / "ansible-playbook"
    path.parent.mkdir()
    path.write_text(STAND_IN)
    return path


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        with_children = [proc.pid, *_children(proc.pid)]
        for pid in with_children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        proc.wait(timeout=30)


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _start_in(
    stand_in: Path, cwd: Path, spawned: list[subprocess.Popen[bytes]], *args: str
) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, str(stand_in), *args], cwd=cwd, start_new_session=True)
    spawned.append(proc)
    deadline = time.monotonic() + 30
    while not _children(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _children(proc.pid), "the stand-in did not fork its worker"
    return proc


def test_orphans_of_a_dead_gpubring_are_found_and_killed(
    local_inventory: Path, stand_in: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    dead = runstore.new_run_folder(local_inventory, "up", datetime(2026, 3, 1, 9).astimezone())
    runstore.write_owner(dead, _dead_owner())
    (dead / "project").mkdir()
    going = runstore.new_run_folder(local_inventory, "up", datetime(2026, 3, 1, 10).astimezone())
    runstore.write_owner(going, runstore.Owner(os.getpid(), process_start(os.getpid()) or 0))
    (going / "project").mkdir()
    orphan = _start_in(stand_in, dead / "project", spawned, "--limit", "gpu01,gpu02")
    _start_in(stand_in, going / "project", spawned)  # its gpubring (this test) is alive: not an orphan

    found = find_orphans(local_inventory)
    assert [(o.pid, o.run, o.limit) for o in found] == [(orphan.pid, dead.name, "gpu01,gpu02")]
    assert set(found[0].processes) == {orphan.pid, *_children(orphan.pid)}
    assert found[0].describe().startswith(f"pid {orphan.pid} (run {dead.name}, hosts gpu01,gpu02; 2 process")

    worker = _children(orphan.pid)
    assert kill_orphans(found) == 2
    orphan.wait(timeout=30)
    assert _wait_gone(worker) == []
    assert find_orphans(local_inventory) == []
    assert spawned[1].poll() is None  # the live run's process is left alone


def _up_preflight(inventory: Path, stdin: str = "") -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        [
            *("up", str(inventory), "--playbooks-dir", str(DATA / "phases"), "--only", "preflight"),
            *("-e", "gpubring_test_secret=S3cr3t-VALUE", "-e", "gpubring_test_file_secret=F1le-S3cr3t"),
        ],
        input=stdin,
    )
    return result.exit_code, result.output


def test_up_names_the_orphans_and_the_command_that_stops_them(
    local_inventory: Path, stand_in: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    dead = runstore.new_run_folder(local_inventory, "up", datetime(2026, 3, 1, 9).astimezone())
    runstore.write_owner(dead, _dead_owner())
    (dead / "project").mkdir()
    orphan = _start_in(stand_in, dead / "project", spawned)
    code, output = _up_preflight(local_inventory)
    assert code == 0, output
    assert "warning: 1 ansible-playbook process(es) left running by earlier gpubring runs" in output
    assert f"pid {orphan.pid} (run {dead.name}, all hosts of the run; 2 process(es) in all)" in output
    assert f"to stop them: gpubring runs {local_inventory} --kill-orphans" in output
    assert orphan.poll() is None  # without a terminal nothing is killed; the run went on


def test_up_on_a_terminal_asks_before_killing_orphans(
    local_inventory: Path,
    stand_in: Path,
    spawned: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runs_command, "interactive", lambda: True)
    dead = runstore.new_run_folder(local_inventory, "up", datetime(2026, 3, 1, 9).astimezone())
    runstore.write_owner(dead, _dead_owner())
    (dead / "project").mkdir()
    orphan = _start_in(stand_in, dead / "project", spawned)
    code, output = _up_preflight(local_inventory, "\n")  # the default is no
    assert code == 0, output
    assert "Stop them now (SIGKILL)? [y/N]" in output
    assert orphan.poll() is None
    code, output = _up_preflight(local_inventory, "y\n")
    assert code == 0, output
    assert "stopped 2 process(es)" in output
    assert orphan.wait(timeout=30) == -signal.SIGKILL


def test_a_run_without_an_owner_record_is_over_once_it_has_a_report(local_inventory: Path) -> None:
    folder = runstore.new_run_folder(local_inventory, "up")
    assert not run_is_over(folder)  # still going, or an older gpubring's: never touched
    (folder / runstore.REPORT_NAME).write_text(json.dumps({"status": "ok"}))
    assert run_is_over(folder)
