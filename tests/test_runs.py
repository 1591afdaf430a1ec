"""`gpubring runs`: past runs listed from their run folders' report.json, and one run shown."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import events, report, runstore
from gpubring.app import app
from helpers import FIXTURES

FIXTURE = FIXTURES / "events" / "mixed.jsonl"
START = datetime(2026, 3, 1, 9, 30, 0, tzinfo=UTC)


def recorded_state(cancel: bool = False) -> events.RunState:
    state = events.RunState()
    for raw in events.load_events(FIXTURE.read_text().splitlines()):
        parsed = events.parse(raw)
        if parsed is not None and not (cancel and isinstance(parsed, events.PlaybookStats)):
            state.apply(parsed)
    if cancel:
        state.apply(events.Cancelled("SIGTERM received"))
    return state


def store_run(root: Path, started: datetime, state: events.RunState, rc: int) -> Path:
    folder = runstore.new_run_folder(root, "up", started)
    meta = report.RunMeta(
        command="up",
        inventory=root,
        hosts_file=root / "hosts.yml",
        run_folder=folder,
        playbook="run.yml",
        started=started,
        ended=started + timedelta(seconds=42.5),
        ansible_rc=rc,
        phases_run=("preflight",),
        phases_skipped=(("host", "not asked for (--only preflight)"),),
    )
    report.write(report.build(state, meta), folder)
    return folder


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """An inventory folder with three finished runs and one without a report (killed or going)."""
    root = tmp_path / "inventory"
    root.mkdir()
    store_run(root, START, recorded_state(), 4)
    store_run(root, START + timedelta(hours=1), events.RunState(), 0)
    store_run(root, START + timedelta(hours=2), recorded_state(cancel=True), 254)
    runstore.new_run_folder(root, "up", START + timedelta(hours=3))
    return root


def runs(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["runs", *map(str, args)], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_list_newest_first(inventory: Path) -> None:
    code, output = runs(inventory)
    assert code == 0, output
    lines = [line for line in output.splitlines() if line.startswith("2026")]
    assert [line.split()[0] for line in lines] == [
        "20260301T123000Z-up",
        "20260301T113000Z-up",
        "20260301T103000Z-up",
        "20260301T093000Z-up",
    ]
    assert "running" in lines[0]
    assert "cancelled" in lines[1]
    assert "ok" in lines[2] and "42.5 s" in lines[2]
    assert "unreachable" in lines[3] and "localhost=1, 1 unchanged" in lines[3]


def test_list_as_json(inventory: Path) -> None:
    code, output = runs(inventory, "--json")
    assert code == 0
    rows = json.loads(output)
    assert [r["status"] for r in rows] == ["running", "cancelled", "ok", "unreachable"]
    oldest = rows[-1]
    assert oldest["command"] == "up"
    assert oldest["exit_code"] == 4
    assert oldest["duration_s"] == 42.5
    assert oldest["changed"] == {"localhost": 1, "nobody": 0}
    assert oldest["started"] == START.isoformat()


def test_show_one_run_with_its_failures(inventory: Path) -> None:
    code, output = runs(inventory, "20260301T09")
    assert code == 0, output
    assert "run 20260301T093000Z-up: gpubring up" in output
    assert "FAILED localhost: Break on purpose" in output
    assert "gpubring-test failure message" in output
    assert "UNREACHABLE nobody: Change something" in output
    assert "unreachable (exit 4)" in output


def test_show_where_a_cancelled_run_stopped(inventory: Path) -> None:
    code, output = runs(inventory, "20260301T113000Z-up")
    assert code == 0, output
    assert "stopped in phase -, play Mixed results:" in output
    assert "localhost: after Break on purpose" in output
    assert "cancelled (exit 3)" in output
    code, output = runs(inventory, "20260301T113000Z-up", "--json")
    assert json.loads(output)["stopped_at"]["hosts"]["localhost"]["task"] == "Break on purpose"


def test_last_is_the_newest(inventory: Path) -> None:
    code, output = runs(inventory, "last")
    assert code == 0
    assert "no report" in output
    code, output = runs(inventory, "last", "--json")
    assert json.loads(output) == {"run": "20260301T123000Z-up", "status": "running"}


@pytest.mark.parametrize(
    ("key", "message"),
    [("2026", "matches 4 runs"), ("1999", "no run named '1999'")],
)
def test_unknown_or_ambiguous_run_exits_2(inventory: Path, key: str, message: str) -> None:
    code, output = runs(inventory, key)
    assert code == 2
    assert message in output


def test_no_runs_and_no_inventory(tmp_path: Path) -> None:
    (tmp_path / "inv").mkdir()
    code, output = runs(tmp_path / "inv")
    assert code == 0
    assert "no runs yet" in output
    code, output = runs(tmp_path / "missing")
    assert code == 2
    assert "no such inventory" in output
