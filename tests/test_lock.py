"""One run at a time per inventory (gpubring.lock): a second run of a verb that changes hosts is refused
at once naming the holder, read-only verbs and --check runs never wait, a killed run's lock is taken
over, two runs racing for it cannot both win, and the lock is released however a run ends.

The holders are real processes taking the lock through gpubring.lock; no test reaches a host: the
executor (steps.run_steps, which every verb runs through) is replaced by a stand-in, but the
SIGTERM test, which runs a real phase over the local connection as tests/test_up.py does."""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpubring import lock
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.run import steps
from helpers import DATA, REPO

TEST_PHASES = DATA / "phases"
COMMANDS = REPO / "cli" / "gpubring" / "commands"
HOLDER_COMMAND = "gpubring up INVENTORY --limit gpu-1"
# A safety net for a broken test (a subprocess that never answers), not a timing assertion.
DEADLINE_S = 120

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gpubring import lock
    held = lock.acquire(Path(sys.argv[1]), sys.argv[2])
    print("held", flush=True)
    time.sleep(600)
    """
)

RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gpubring import lock
    go, stop = Path(sys.argv[2]), Path(sys.argv[3])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.001)
    try:
        held = lock.acquire(Path(sys.argv[1]), "racer")
    except lock.LockHeld:
        print("refused", flush=True)
        sys.exit(0)
    print("won", flush=True)
    while not stop.exists():
        time.sleep(0.01)
    held.release()
    """
)


SECOND = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gpubring import lock
    try:
        lock.acquire(Path(sys.argv[1]), "second").release()
    except lock.LockHeld as exc:
        print(exc.holder.pid if exc.holder else None)
    else:
        print("taken")
    """
)


def _spawn(script: str, *args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


def _expect_line(proc: subprocess.Popen[str], expected: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == expected, line + proc.stdout.read() if proc.poll() is not None else line


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=DEADLINE_S)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture
def inventory(make_inventory: Callable[..., Path]) -> Path:
    """A copy of the sample inventory (3 control planes, 4 GPU nodes, 1 CPU node)."""
    return make_inventory()


@pytest.fixture
def holder(inventory: Path) -> Iterator[subprocess.Popen[str]]:
    """Another live process holding the inventory's run lock, as a running `gpubring up` would."""
    proc = _spawn(HOLDER, inventory, HOLDER_COMMAND.replace("INVENTORY", str(inventory)))
    try:
        _expect_line(proc, "held")
        yield proc
    finally:
        _stop(proc)


class Reached(Exception):
    """Raised by the runner's stand-in: the command got past the lock to its run."""


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runner replaced: a command that reaches its run raises Reached (nothing reaches a host);
    the list records which entry point it reached."""
    reached: list[str] = []

    def fake_steps(*_args: Any, **_kwargs: Any) -> Any:
        reached.append("steps.run_steps")
        raise Reached

    monkeypatch.setattr(steps, "run_steps", fake_steps)
    return reached


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def runs_of(root: Path) -> list[Path]:
    base = root / ".gpubring" / "runs"
    return sorted(base.iterdir()) if base.is_dir() else []


def assert_free(root: Path) -> None:
    """Nobody holds the lock (this process included: flock conflicts between two opens of the file
    in one process too) and the holder's record is gone."""
    taken = lock.acquire(root, "test")
    try:
        assert taken.taken_over is None
    finally:
        taken.release()
    assert lock.lock_path(root).read_text() == ""


# The verbs that change hosts, with arguments that pass validation on the sample inventory.
CHANGING = {
    "up": ["up", "{inv}"],
    "node add": ["node", "add", "{inv}", "gpu-4"],
    "node replace": ["node", "replace", "{inv}", "gpu-2"],
    "node remove": ["node", "remove", "{inv}", "cpu-1"],
    "upgrade": ["upgrade", "{inv}"],
    "reset --yes": ["reset", "{inv}", "--yes"],
    "verify --acceptance": ["verify", "{inv}", "--acceptance"],
}


def _args(template: list[str], inventory: Path) -> list[str]:
    return [a.format(inv=inventory) for a in template]


def test_a_second_up_is_refused_at_once_naming_the_holder(
    inventory: Path, holder: subprocess.Popen[str]
) -> None:
    """The real CLI in its own process, as an operator's second terminal runs it."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpubring", "up", str(inventory)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == ExitCode.BAD_INPUT, done.stdout + done.stderr
    assert time.monotonic() - started < DEADLINE_S / 2  # it did not sit waiting for the holder
    record = json.loads(lock.lock_path(inventory).read_text())
    err = done.stderr
    assert "error: another gpubring run holds the run lock of this inventory" in err
    assert f"held by: gpubring up {inventory} --limit gpu-1" in err
    assert f"pid {holder.pid} on host {socket.gethostname()}, started {record['started']}" in err
    assert f"lock file: {inventory.resolve() / '.gpubring' / 'lock'}" in err
    assert "Traceback" not in err
    assert runs_of(inventory) == []  # no run folder: no ansible-runner, no host
    assert holder.poll() is None
    assert json.loads(lock.lock_path(inventory).read_text()) == record  # the holder's record untouched


@pytest.mark.parametrize("verb", list(CHANGING))
def test_every_verb_that_changes_hosts_is_refused_while_held(
    verb: str, inventory: Path, holder: subprocess.Popen[str], no_run: list[str]
) -> None:
    result = invoke(*_args(CHANGING[verb], inventory))
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "holds the run lock of this inventory" in result.output
    assert f"pid {holder.pid} on host {socket.gethostname()}" in result.output
    assert no_run == []
    assert runs_of(inventory) == []


@pytest.mark.parametrize("verb", list(CHANGING))
def test_every_verb_that_changes_hosts_holds_the_lock_during_its_run(
    verb: str, inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the run goes on, another process is refused and the record names this command."""
    seen: list[str] = []

    def fake(*_args: Any, **_kwargs: Any) -> Any:
        racer = subprocess.run(
            [sys.executable, "-c", SECOND, str(inventory)],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            check=True,
            cwd=REPO,
        )
        seen.append(racer.stdout.strip())
        raise Reached

    monkeypatch.setattr(steps, "run_steps", fake)
    result = invoke(*_args(CHANGING[verb], inventory))
    assert isinstance(result.exception, Reached), result.output
    assert seen == [str(os.getpid())]
    assert_free(inventory)


@pytest.mark.parametrize(
    ("args", "reaches"),
    [
        pytest.param(["plan", "{inv}"], None, id="plan"),
        pytest.param(["versions", "{inv}"], None, id="versions"),
        pytest.param(["runs", "{inv}"], None, id="runs"),
        pytest.param(["upgrade", "{inv}", "--check"], "steps.run_steps", id="upgrade --check"),
        pytest.param(["reset", "{inv}"], None, id="reset without --yes"),
        pytest.param(["up", "{inv}", "--check"], "steps.run_steps", id="up --check"),
        pytest.param(["node", "add", "{inv}", "gpu-4", "--check"], "steps.run_steps", id="node add --check"),
        pytest.param(["reset", "{inv}", "--yes", "--check"], "steps.run_steps", id="reset --yes --check"),
        pytest.param(["verify", "{inv}"], "steps.run_steps", id="verify"),
        pytest.param(
            ["verify", "{inv}", "--acceptance", "--check"],
            "steps.run_steps",
            id="verify --acceptance --check",
        ),
    ],
)
def test_read_only_verbs_and_check_runs_never_wait_while_held(
    args: list[str], reaches: str | None, inventory: Path, holder: subprocess.Popen[str], no_run: list[str]
) -> None:
    result = invoke(*_args(args, inventory))
    assert "run lock" not in result.output
    if reaches is None:
        assert result.exit_code == ExitCode.OK, result.output
        assert no_run == []
    else:
        assert isinstance(result.exception, Reached), result.output
        assert no_run == [reaches]
    assert holder.poll() is None
    assert lock.read_holder(inventory) is not None  # still the holder's


def test_a_killed_runs_lock_is_taken_over_with_a_notice(inventory: Path, no_run: list[str]) -> None:
    proc = _spawn(HOLDER, inventory, f"gpubring up {inventory}")
    try:
        _expect_line(proc, "held")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)
    finally:
        _stop(proc)
    left = lock.read_holder(inventory)
    assert left is not None and left.pid == proc.pid  # the killed run could not empty its record
    result = invoke("up", inventory)
    assert isinstance(result.exception, Reached), result.output
    notice = [line for line in result.output.splitlines() if line.startswith("notice:")]
    assert notice == [
        "notice: took over the run lock of this inventory from a run that was killed: "
        f"`gpubring up {inventory}` (pid {proc.pid} on host {socket.gethostname()}, started {left.started})"
    ]
    assert no_run == ["steps.run_steps"]
    assert_free(inventory)


def _record(inventory: Path, **fields: Any) -> None:
    path = lock.lock_path(inventory)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    base = {
        "command": "gpubring up X",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": "2026-01-01T00:00:00+00:00",
        "proc_start": lock.process_start(os.getpid()),
        "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
    }
    path.write_text(json.dumps(base | fields))


def test_a_reused_pid_is_not_the_holder(inventory: Path) -> None:
    """The record's pid lives, but it is another process (its start time differs): taken over."""
    parent = os.getppid()
    _record(inventory, pid=parent, proc_start=(lock.process_start(parent) or 0) + 1)
    taken = lock.acquire(inventory, "gpubring up")
    try:
        assert taken.taken_over is not None and taken.taken_over.pid == parent
    finally:
        taken.release()


def test_a_record_from_before_a_reboot_is_taken_over(inventory: Path) -> None:
    parent = os.getppid()
    _record(inventory, pid=parent, proc_start=lock.process_start(parent), boot_id="another-boot")
    taken = lock.acquire(inventory, "gpubring up")
    taken.release()
    assert taken.taken_over is not None


def test_a_live_holder_of_an_unlocked_file_is_refused(inventory: Path) -> None:
    """Its process still runs (same pid, same start, same boot) though nobody locks the file (it was
    replaced under the run, or the file system ignores flock): refused, not taken over."""
    parent = os.getppid()
    _record(inventory, pid=parent, proc_start=lock.process_start(parent))
    with pytest.raises(lock.LockHeld) as caught:
        lock.acquire(inventory, "gpubring up")
    assert caught.value.holder is not None and caught.value.holder.pid == parent
    assert not caught.value.other_host


def test_a_holder_on_another_host_is_refused_with_how_to_remove_it(
    inventory: Path, no_run: list[str]
) -> None:
    """A shared inventory (NFS): the record names another host, whose processes cannot be checked."""
    _record(inventory, host="other-admin-box", pid=4242)
    result = invoke("up", inventory)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    path = lock.lock_path(inventory)
    assert "pid 4242 on host other-admin-box" in result.output
    assert f"if other-admin-box is down or that run is over, remove the lock file: rm {path}" in result.output
    assert no_run == []
    assert json.loads(path.read_text())["host"] == "other-admin-box"
    path.unlink()  # as the message says
    result = invoke("up", inventory)
    assert isinstance(result.exception, Reached), result.output


def test_two_runs_racing_for_the_lock_exactly_one_wins(tmp_path: Path) -> None:
    root = tmp_path / "inventory"
    root.mkdir()
    go, stop = tmp_path / "go", tmp_path / "stop"
    racers = [_spawn(RACER, root, go, stop) for _ in range(6)]
    try:
        for proc in racers:
            _expect_line(proc, "ready")
        go.touch()  # every racer polls for it: they try within a millisecond or so of each other
        answers = []
        for proc in racers:
            assert proc.stdout is not None
            answers.append(proc.stdout.readline().strip())
        assert sorted(answers) == ["refused"] * 5 + ["won"], answers
        stop.touch()
        for proc in racers:
            assert proc.wait(timeout=DEADLINE_S) == 0
    finally:
        for proc in racers:
            _stop(proc)
    assert_free(root)


def test_the_lock_is_released_when_the_run_ends(inventory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that ends (a task failed here: exit 1) leaves the lock free and its record emptied."""
    failed = steps.Outcome(exit_code=ExitCode.TASK_FAILED, last=None)
    monkeypatch.setattr(steps, "run_steps", lambda *_a, **_k: failed)
    result = invoke("up", inventory)
    assert result.exit_code == ExitCode.TASK_FAILED, result.output
    assert_free(inventory)
    monkeypatch.setattr(steps, "run_steps", lambda *_a, **_k: steps.Outcome(exit_code=ExitCode.OK, last=None))
    for verb in ("node add", "reset --yes", "upgrade"):
        result = invoke(*_args(CHANGING[verb], inventory))
        assert result.exit_code == ExitCode.OK, (verb, result.output)
        assert_free(inventory)


@pytest.mark.parametrize("error", [RuntimeError("the runner broke"), KeyboardInterrupt()])
def test_the_lock_is_released_after_an_exception(
    error: BaseException, inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(steps, "run_steps", broken)
    result = invoke("up", inventory)
    assert result.exit_code != ExitCode.OK
    assert_free(inventory)


def test_a_sigterm_cancel_releases_the_lock(tmp_path: Path) -> None:
    """A real `gpubring up` cancelled by SIGTERM mid-task (the runner's cancel: exit 3)."""
    root = tmp_path / "inventory"
    subprocess.run(["cp", "-r", str(DATA / "inventories" / "localhost"), str(root)], check=True)
    marker = tmp_path / "waiting"
    args = ["up", str(root), "--playbooks-dir", str(TEST_PHASES), "--only", "host", "-e", f"marker={marker}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpubring", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), proc.communicate(timeout=60)[0] if proc.poll() is not None else "no marker"
        during = lock.read_holder(root)
        assert during is not None and during.pid == proc.pid
        assert during.command == f"gpubring {' '.join(args[:-1])} ***"  # -e values are not recorded
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.CANCELLED, output
    assert_free(root)


def test_command_line_hides_extra_vars_values() -> None:
    argv = ["/venv/bin/gpubring", "up", "inv", "-e", "token=s3cr3t", "-e", "@vars.yml", "--extra-vars=a=b"]
    argv += ["-Cek=v", "-Ce", "x=y", "-l", "gpu-*", "--extra-vars", "@more.yml"]
    assert lock.command_line(argv) == (
        "gpubring up inv -e *** -e @vars.yml --extra-vars=*** -Ce*** -Ce *** -l gpu-* --extra-vars @more.yml"
    )


def _calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                names.add(f"{func.value.id}.{func.attr}")
            elif isinstance(func, ast.Name):
                names.add(func.id)
    return names


@pytest.mark.parametrize("path", sorted(COMMANDS.glob("*.py")), ids=lambda p: p.name)
def test_every_verb_that_runs_a_playbook_takes_the_lock(path: Path) -> None:
    """For verbs added later: a command that starts ansible-runner (through the executor, steps.run_steps)
    calls hold_run_lock (for its runs that change hosts), or is read-only and says so here."""
    read_only: set[str] = set()  # verbs that run playbooks but never change a host: none yet
    calls = _calls(path)
    if "steps.run_steps" in calls and path.stem not in read_only:
        assert "hold_run_lock" in calls, f"{path.name} runs a playbook without the run lock"
