"""The typed run report (report.RunReport): built from the events, written as report.json with the
fields and order it always had, and read back, an older or partial report.json included."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpubring import events, report
from helpers import FIXTURES

START = datetime(2026, 3, 1, 9, 30, 0, tzinfo=UTC)


def _state(fixture: str, *, cancel: bool = False) -> events.RunState:
    state = events.RunState()
    for raw in events.load_events((FIXTURES / "events" / fixture).read_text().splitlines()):
        for parsed in events.parse_all(raw):
            if not (cancel and isinstance(parsed, events.PlaybookStats)):
                state.apply(parsed)
    if cancel:
        state.apply(events.Cancelled("SIGTERM received"))
    return state


def _meta(folder: Path) -> report.RunMeta:
    return report.RunMeta(
        command="up",
        inventory=folder,
        hosts_file=folder / "hosts.yml",
        run_folder=folder,
        playbook="run.yml",
        started=START,
        ended=START + timedelta(seconds=42.5),
        ansible_rc=2,
        phases_run=("preflight", "verify"),
        phases_skipped=(("host", "not asked for (--only preflight,verify)"),),
        options={"check": False, "limit": None, "extra_vars": ["x"]},
        partial=("--only preflight,verify",),
    )


@pytest.mark.parametrize(
    ("fixture", "cancel"),
    [("mixed.jsonl", False), ("mixed.jsonl", True), ("acceptance.jsonl", False), ("drain.jsonl", False)],
)
def test_the_report_reads_back_as_it_was_written(fixture: str, cancel: bool, tmp_path: Path) -> None:
    built = report.RunReport.of(_state(fixture, cancel=cancel), _meta(tmp_path))
    data = built.to_json()
    assert list(data) == list(report.REPORT_FIELDS)
    assert report.build(_state(fixture, cancel=cancel), _meta(tmp_path)) == data
    path = report.write(built, tmp_path)
    text = path.read_text()
    assert text == report.dumps(data)
    back = report.RunReport.from_json(json.loads(text))
    assert back == built
    assert report.dumps(back) == text  # byte for byte


def test_the_typed_report_holds_what_report_json_says(tmp_path: Path) -> None:
    built = report.RunReport.of(_state("mixed.jsonl", cancel=True), _meta(tmp_path))
    data = built.to_json()
    assert built.status == data["status"] == "cancelled"
    assert built.exit_code == data["exit_code"] == 3
    assert {host: row.as_dict() for host, row in built.stats.items()} == data["stats"]
    assert built.totals.as_dict() == data["totals"]
    assert [f.as_dict() for f in built.failures] == data["failures"]
    assert built.stopped_at is not None and built.stopped_at.play == data["stopped_at"]["play"]
    assert built.phases.skipped == (("host", "not asked for (--only preflight,verify)"),)


def test_an_old_or_partial_report_reads_with_defaults() -> None:
    old = report.RunReport.from_json(
        {
            "status": "ok",
            "options": {"check": True},
            "stats": {"gpu01": {"ok": 3, "changed": 1}, "bad": "not a row"},
            "failures": [{"host": "gpu01", "task": "t"}, "not a failure"],
            "acceptance": {"gpu01": {"verdict": "failed", "failed": [{"name": "nvlink", "reason": "down"}]}},
            "stopped_at": {},
        }
    )
    assert old.check is True  # from options, as reports before the top-level `check` said it
    assert list(old.stats) == ["gpu01"]
    assert (old.stats["gpu01"].ok, old.stats["gpu01"].changed, old.stats["gpu01"].failed) == (3, 1, 0)
    assert [(f.host, f.task, f.status) for f in old.failures] == [("gpu01", "t", "failed")]
    assert old.acceptance["gpu01"].failed == (events.AcceptanceCheck("nvlink", "down"),)
    assert old.stopped_at is None and old.cancel_wait is None
    assert old.exit_code is None and old.duration_s == 0 and old.run_folder == ""
    assert report.RunReport.from_json({}).status == "?"


def test_the_drains_reach_report_json_and_read_back(tmp_path: Path) -> None:
    """Issue 21 item 14: each drained host's node_drain_report (tests/fixtures/events/drain.jsonl) is in
    report.json's `drains`, after `hardware`, and reads back as it was written."""
    built = report.RunReport.of(_state("drain.jsonl"), _meta(tmp_path))
    data = built.to_json()
    assert list(data).index("drains") == list(data).index("hardware") + 1
    assert data["drains"] == {
        "gpu01": {
            "cordoned_by": "operator",
            "operator_cordon_kept": True,
            "waited_for": [
                "Job team-a/bert-finetune (Kueue)",
                "Job team-b/nightly-eval",
                "Kueue pod group team-c/sweep",
                "Volcano Job research/mpi-bench",
                "PyTorchJob research/llama-pretrain",
                "KAI PodGroup vision/pg-resnet-train-0c4e",
            ],
            "waited_seconds": 3600,
            "still_running_at_bound": ["Job team-a/bert-finetune (Kueue)", "Job team-b/nightly-eval"],
            "drained": True,
        },
        "gpu02": {
            "cordoned_by": "gpubring",
            "operator_cordon_kept": False,
            "waited_for": [],
            "waited_seconds": 0,
            "still_running_at_bound": [],
            "drained": True,
        },
    }
    back = report.RunReport.from_json(json.loads(report.dumps(built)))
    assert back.drains == built.drains and back.drains["gpu01"].host == "gpu01"
    # A run that drained nothing says so with an empty mapping; an older report.json has none.
    assert report.RunReport.of(_state("mixed.jsonl"), _meta(tmp_path)).to_json()["drains"] == {}
    assert report.RunReport.from_json({"drains": {"gpu01": "bad", "gpu02": {}}}).drains == {
        "gpu02": events.DrainReport("gpu02")
    }
