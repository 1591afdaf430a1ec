"""Output a person and a CI log can trust: a closed pipe, wide tables without a terminal, progress
lines during long tasks, and a live view that says which hosts wait."""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpubring import events, report, runstore, versions
from gpubring.app import app
from gpubring.events import HardwareSummary, HostResult, PlayStart, TaskStart
from gpubring.view import RunView, hardware_line
from gpubring.view import summary as print_summary
from helpers import FIXTURES, REPO

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
        versions.load_pinned()["nvidia_container_toolkit"]["version"],
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


# --- preflight's hardware summary -------------------------------------------------------------------

PREFLIGHT = FIXTURES / "events" / "preflight.jsonl"


def _replay(view: RunView, raw_events: list[dict[str, object]]) -> None:
    for raw in raw_events:
        for event in events.parse_all(raw):
            view.handle(event)


@pytest.mark.parametrize("live", [False, True], ids=["plain", "live"])
def test_the_recorded_preflight_stream_prints_the_hardware_summary_once(live: bool) -> None:
    view, out, _ = _view(live=live)
    with view:
        _replay(view, events.load_events(PREFLIGHT.read_text().splitlines()))
    text = out.getvalue()
    assert text.count("hardware (preflight, 1 host(s)):") == 1
    hardware = [line for line in text.splitlines() if line.startswith("  node1: ")]
    assert hardware == [
        "  node1: Debian 12.11, kernel 6.18.44-fc-v669 · 2 CPUs, 23.5 GiB, NUMA 1 · GPUs 0 · NVSwitches 0"
        " · driver none loaded · RDMA NICs 0 · IOMMU off · Secure Boot off"
    ]
    # The same events give the report its hardware.
    assert view.state.hardware["node1"]["os"] == "Debian 12.11"


def test_the_report_keeps_each_hosts_hardware() -> None:
    state = events.RunState()
    for raw in events.load_events(PREFLIGHT.read_text().splitlines()):
        for event in events.parse_all(raw):
            state.apply(event)
    assert state.hardware["node1"]["memory_mib"] == 24105
    assert state.stats is not None and state.stats.hosts["node1"].failed == 0


def test_the_hardware_summary_takes_the_failures_and_warnings_published_beside_it() -> None:
    """The role publishes preflight_failures and preflight_warnings beside preflight_summary, in the
    same set_fact result (rendering them into the summary too ran every check twice, issue 26): the
    report's hardware summary carries them as before."""
    raw = {
        "event": "runner_on_ok",
        "event_data": {
            "host": "gpu01",
            "res": {
                "ansible_facts": {
                    "preflight_summary": {"host": "gpu01", "os": "Debian 12"},
                    "preflight_failures": ["swap is on (2048 MiB)"],
                    "preflight_warnings": [],
                }
            },
        },
    }
    found = events.hardware_summary(raw)
    assert found is not None and found.host == "gpu01"
    assert found.summary == {
        "host": "gpu01",
        "os": "Debian 12",
        "failures": ["swap is on (2048 MiB)"],
        "warnings": [],
    }
    # A summary of an earlier gpubring that carries its own lines keeps them.
    raw["event_data"]["res"]["ansible_facts"]["preflight_summary"]["failures"] = ["kept"]  # type: ignore[index]
    assert events.hardware_summary(raw).summary["failures"] == ["kept"]  # type: ignore[union-attr]


def _gpu_summary(host: str) -> dict[str, object]:
    [recorded] = [
        found
        for raw in events.load_events(PREFLIGHT.read_text().splitlines())
        if (found := events.hardware_summary(raw)) is not None
    ]
    summary = dict(recorded.summary)
    nics = [f"mlx5_{i} ibp{i}s0 InfiniBand {i // 4}" for i in range(8)]
    summary.update(
        host=host,
        gpu_count="8",
        gpu_models=["NVIDIA H100 80GB HBM3"],
        nvswitch_count="4",
        driver="570.133.20",
        rdma_nics=nics,
        iommu=True,
        secure_boot=None,
        dgx_os=True,
        numa_nodes="2",
        warnings=["a warning"],
    )
    return summary


def test_the_hardware_of_each_host_prints_when_preflight_is_over() -> None:
    view, out, _ = _view()
    view.handle(PlayStart("Preflight checks on every host", "all", "preflight"))
    for host in ("gpu01", "gpu02"):
        view.handle(HardwareSummary(host, _gpu_summary(host)))
    assert "hardware" not in out.getvalue()  # not before the play is over
    view.handle(PlayStart("Prepare the hosts", "all", "host"))
    view.handle(PlayStart("Another play", "all", "host"))
    text = out.getvalue()
    assert text.count("hardware (preflight, 2 host(s)):") == 1
    assert text.index("hardware (preflight") < text.index("== phase host")
    line = hardware_line("gpu01", _gpu_summary("gpu01"))
    assert line.startswith("gpu01: Debian 12.11, kernel 6.18.44-fc-v669 · 2 CPUs, 23.5 GiB, NUMA 2")
    assert (
        "GPUs 8 (NVIDIA H100 80GB HBM3) · NVSwitches 4 · driver 570.133.20 · RDMA NICs 8 (InfiniBand)"
        " · IOMMU on · Secure Boot unknown · DGX OS · 1 problem(s)"
    ) in line
    assert text.count("  gpu01: ") == 1 and text.count("  gpu02: ") == 1


def test_runs_shows_a_past_runs_hardware(tmp_path: Path) -> None:
    state = events.RunState()
    state.apply(HardwareSummary("gpu01", _gpu_summary("gpu01")))
    folder = runstore.new_run_folder(tmp_path, "up")
    now = datetime.now(UTC)
    meta = report.RunMeta("up", tmp_path, tmp_path / "hosts.yml", folder, "run.yml", now, now, 0)
    report.write(report.build(state, meta), folder)
    result = CliRunner().invoke(app, ["runs", str(tmp_path), "last"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "hardware (preflight, 1 host(s)):" in result.output
    assert "gpu01: Debian 12.11" in result.output


def test_the_summary_says_what_each_drain_waited_for(tmp_path: Path) -> None:
    """Issue 21 item 14: the node_drain role's reports (tests/fixtures/events/drain.jsonl, recorded from
    the role's own set_fact) give one summary line per drained host, in `up`'s summary and in `gpubring
    runs RUN` alike: who cordoned, what was waited for and how long, what was evicted still running."""
    state = events.RunState()
    raw_events = events.load_events((FIXTURES / "events" / "drain.jsonl").read_text().splitlines())
    raw_events.append(
        {
            "event": "runner_on_ok",
            "event_data": {
                "host": "gpu03",
                "res": {
                    "ansible_facts": {
                        "node_drain_report": {
                            "node": "gpu03",
                            "cordoned_by": "gpubring",
                            "operator_cordon_kept": False,
                            "waited_for": ["PyTorchJob research/llama-pretrain"],
                            "waited_seconds": 0,
                            "still_running_at_bound": [],
                            "drained": False,
                        }
                    }
                },
            },
        }
    )
    for raw in raw_events:
        for event in events.parse_all(raw):
            state.apply(event)
    folder = runstore.new_run_folder(tmp_path, "upgrade")
    now = datetime.now(UTC)
    meta = report.RunMeta("upgrade", tmp_path, tmp_path / "hosts.yml", folder, "run.yml", now, now, 0)
    built = report.RunReport.of(state, meta)
    out = io.StringIO()
    print_summary(Console(file=out, width=100, force_terminal=False, color_system=None), built)
    expected = [
        "drained gpu01: operator's cordon kept; waited 3600 s for Job team-a/bert-finetune (Kueue), Job"
        " team-b/nightly-eval, Kueue pod group team-c/sweep, Volcano Job research/mpi-bench, PyTorchJob"
        " research/llama-pretrain, KAI PodGroup vision/pg-resnet-train-0c4e; evicted still running at the"
        " bound: Job team-a/bert-finetune (Kueue), Job team-b/nightly-eval",
        "drained gpu02: cordoned by gpubring; no workload wait",
        "would drain gpu03 (check mode): cordoned by gpubring; would wait for PyTorchJob"
        " research/llama-pretrain",
    ]
    lines = out.getvalue().splitlines()
    assert [line for line in lines if "drain" in line] == expected  # one line each, never wrapped
    report.write(built, folder)
    result = CliRunner().invoke(app, ["runs", str(tmp_path), "last"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert [line for line in result.output.splitlines() if "drain" in line] == expected
