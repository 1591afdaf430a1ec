"""Check-mode and partial runs are marked in the banner, in report.json and in `gpubring runs`, so a
dry run's "would change" never reads as a change and a --limit run never reads as the whole cluster."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpubring import events, report, runstore
from gpubring.app import app
from helpers import DATA, FIXTURES
from helpers import runs_cli as runs

START = datetime(2026, 3, 1, 9, 30, 0, tzinfo=UTC)


def recorded_state() -> events.RunState:
    state = events.RunState()
    for raw in events.load_events((FIXTURES / "events" / "mixed.jsonl").read_text().splitlines()):
        parsed = events.parse(raw)
        if parsed is not None:
            state.apply(parsed)
    return state


def store_run(root: Path, started: datetime, options: dict[str, Any], partial: list[str]) -> dict[str, Any]:
    folder = runstore.new_run_folder(root, "up", started)
    meta = report.RunMeta(
        command="up",
        inventory=root,
        hosts_file=root / "hosts.yml",
        run_folder=folder,
        playbook="run.yml",
        started=started,
        ended=started + timedelta(seconds=5),
        ansible_rc=2,
        options=options,
        partial=partial,
    )
    data = report.build(recorded_state(), meta)
    report.write(data, folder)
    return data


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    root = tmp_path / "inventory"
    root.mkdir()
    store_run(root, START, {"check": False}, [])
    store_run(root, START + timedelta(hours=1), {"check": True}, [])
    store_run(root, START + timedelta(hours=2), {"check": False}, ["--only host", "--limit gpu01"])
    store_run(root, START + timedelta(hours=3), {"check": True}, ["--tags driver"])
    # A report written before `check` and `partial` existed: read from its options.
    old = runstore.new_run_folder(root, "up", START + timedelta(hours=4))
    report.write({"status": "ok", "options": {"check": True, "limit": "gpu02", "tags": None}}, old)
    return root


def test_report_marks_check_and_partial_runs(inventory: Path) -> None:
    data = store_run(inventory, START + timedelta(hours=5), {"check": True}, ["--limit gpu01"])
    assert set(report.REPORT_FIELDS) <= set(data)
    assert data["check"] is True
    assert data["partial"] == ["--limit gpu01"]


def test_partial_by_lists_what_narrowed_the_run() -> None:
    assert runstore.partial_by() == []
    assert runstore.partial_by(limit="gpu01", tags="driver", skip_tags="slow", phases="--only host") == [
        "--only host",
        "--limit gpu01",
        "--tags driver",
        "--skip-tags slow",
    ]


def test_the_listing_marks_check_and_partial_runs(inventory: Path) -> None:
    code, output = runs(inventory)
    assert code == 0, output
    lines = {line.split()[0][9:13]: line for line in output.splitlines() if line.startswith("2026")}
    assert "check; partial: --limit gpu02" in lines["1330"]
    assert "check; partial: --tags driver" in lines["1230"]
    assert "would change: localhost=1, 1 unchanged" in lines["1230"]
    assert "partial: --only host, --limit gpu01" in lines["1130"]
    assert "would change" not in lines["1130"] and "localhost=1, 1 unchanged" in lines["1130"]
    assert "check" in lines["1030"] and "would change: localhost=1" in lines["1030"]
    assert " full " in lines["0930"] and "would change" not in lines["0930"]


def test_the_json_listing_has_check_and_partial(inventory: Path) -> None:
    code, output = runs(inventory, "--json")
    assert code == 0, output
    rows = json.loads(output)
    assert [(r["check"], r["partial"]) for r in rows] == [
        (True, ["--limit gpu02"]),
        (True, ["--tags driver"]),
        (False, ["--only host", "--limit gpu01"]),
        (True, []),
        (False, []),
    ]


def test_one_check_run_says_would_change(inventory: Path) -> None:
    code, output = runs(inventory, "20260301T123000Z")
    assert code == 0, output
    assert "would change 1 (check mode)" in output
    assert "partial: --tags driver" in output


def test_up_banner_shows_check_and_what_narrows_the_run(tmp_path: Path) -> None:
    """The real preflight phase on this machine: the banner, the hardware summary, the report."""
    root = tmp_path / "inventory"
    shutil.copytree(DATA / "inventories" / "localhost", root)
    args = ["up", str(root), "--only", "preflight", "--limit", "node1", "--tags", "preflight", "--check"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    output = result.output
    assert result.exit_code == 0, output
    lines = output.splitlines()
    banner = lines[: lines.index("phases: preflight") + 1]
    assert banner == [
        f"gpubring up {root} (check mode)",
        "check mode (--check): nothing is changed; changed counts are what would change",
        "partial: --only preflight, --limit node1, --tags preflight",
        "phases: preflight",
    ]
    assert "would change 0 (check mode)" in output
    # preflight's hardware summary, once, one line for the host
    assert output.count("hardware (preflight, 1 host(s)):") == 1
    [line] = [x for x in lines if x.startswith("  node1: ")]
    assert "GPUs 0 · NVSwitches 0 · driver none loaded · RDMA NICs 0" in line
    [folder] = runstore.run_folders(runstore.runs_dir(root))
    data = json.loads((folder / "report.json").read_text())
    assert data["check"] is True
    assert data["partial"] == ["--only preflight", "--limit node1", "--tags preflight"]
    assert data["hardware"]["node1"]["gpu_count"] == 0


def test_a_run_without_check_has_no_check_line(tmp_path: Path) -> None:
    root = tmp_path / "inventory"
    shutil.copytree(DATA / "inventories" / "localhost", root)
    phases = str(DATA / "phases")
    args = ["up", str(root), "--playbooks-dir", phases, "--only", "preflight", "-e", "gpubring_test_secret=x"]
    result = CliRunner().invoke(app, args)
    assert "partial: --only preflight" in result.output
    assert "check mode" not in result.output
