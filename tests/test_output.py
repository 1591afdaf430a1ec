"""Output a person and a CI log can trust: a closed pipe, wide tables without a terminal, progress
lines during long tasks, and a live view that says which hosts wait."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from gpubring.events import HostResult, PlayStart, TaskStart
from gpubring.view import RunView
from helpers import REPO

SAMPLE = REPO / "inventories" / "prod"
GPUBRING = [sys.executable, "-m", "gpubring"]


def test_a_reader_that_leaves_early_is_not_an_error() -> None:
    proc = subprocess.Popen(
        [*GPUBRING, "plan", str(SAMPLE)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert first.startswith(b"Inventory ")
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err


def test_tables_are_not_wrapped_without_a_terminal() -> None:
    done = subprocess.run(
        [*GPUBRING, "versions", str(SAMPLE)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "HOME": str(REPO)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    # Each pin and its version on one line, however narrow the default terminal would be.
    assert next(r[:2] for r in rows if r and r[0] == "nvidia_container_toolkit.version") == [
        "nvidia_container_toolkit.version",
        "1.18.0",
    ]
    assert max(len(line) for line in done.stdout.splitlines()) > 80


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _view(live: bool = False) -> tuple[RunView, io.StringIO, Clock]:
    out = io.StringIO()
    clock = Clock()
    console = Console(file=out, width=200, height=40, force_terminal=False, color_system=None)
    return RunView(console, live=live, heartbeat_s=30, clock=clock), out, clock


def test_a_long_task_prints_a_progress_line_every_30_seconds_without_a_terminal() -> None:
    view, _, clock = _view()
    view.handle(PlayStart(name="GPU hosts", pattern="gpu_nodes", phase="host"))
    view.handle(TaskStart(host="gpu-1", task="Build the module with DKMS", role="nvidia_driver"))
    view.handle(TaskStart(host="gpu-2", task="Build the module with DKMS", role="nvidia_driver"))
    view.handle(
        HostResult(host="gpu-2", task="Build the module with DKMS", role="nvidia_driver", status="ok")
    )
    clock.now += 29
    assert view.heartbeat() is None  # a line went out less than 30 s ago
    clock.now += 96
    line = view.heartbeat()
    assert line is not None
    assert line.plain == "… still running: gpu-1: nvidia_driver : Build the module with DKMS (2m05s)"
    view.print(line)
    assert view.heartbeat() is None  # the next one is due 30 s after this one


def test_the_live_table_shows_elapsed_time_and_marks_hosts_of_other_plays_as_waiting() -> None:
    view, out, clock = _view()
    view.handle(PlayStart(name="All hosts", pattern="all", phase="host"))
    view.handle(TaskStart(host="cp-1", task="Configure containerd", role="containerd"))
    view.handle(PlayStart(name="GPU hosts", pattern="gpu_nodes", phase="host"))
    view.handle(TaskStart(host="gpu-1", task="Install the driver", role="nvidia_driver"))
    clock.now += 75
    view.console.print(view.render())
    rows = {line.split()[0]: line for line in out.getvalue().splitlines() if line.strip()}
    assert "waiting" in rows["cp-1"] and "containerd" not in rows["cp-1"]
    assert "nvidia_driver : Install the driver" in rows["gpu-1"] and "1m15s" in rows["gpu-1"]


@pytest.mark.parametrize("command", ["plan", "versions", "check", "up"])
@pytest.mark.parametrize(("target", "says"), [("missing/x.json", "does not exist"), (".", "is a folder")])
def test_a_json_path_that_cannot_be_written_is_bad_input(
    command: str, target: str, says: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [*GPUBRING, command, str(SAMPLE), "--json", str(tmp_path / target)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and "--json" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["plan", "versions"])
def test_json_copies_are_private(command: str, tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    done = subprocess.run(
        [*GPUBRING, command, str(SAMPLE), "--json", str(target)], capture_output=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    assert target.stat().st_mode & 0o777 == 0o600
