"""Event parsing and folding, fed from a recorded ansible-runner event stream.

tests/fixtures/events/mixed.jsonl was recorded by tests/data/record_events.py: ansible-runner ran
tests/data/playbooks/mixed.yml on localhost (ok in a role, changed, skipped, failed) and on a host
nobody answers for (unreachable).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpubring import events, report
from gpubring.events import (
    AnsibleError,
    HostCounts,
    HostResult,
    PhasePlay,
    PhaseTracker,
    PlaybookStart,
    PlaybookStats,
    PlayStart,
    RunState,
    TaskStart,
)
from gpubring.exitcodes import ExitCode
from helpers import FIXTURES

FIXTURE = FIXTURES / "events" / "mixed.jsonl"


@pytest.fixture(scope="module")
def raw_events() -> list[dict[str, Any]]:
    return events.load_events(FIXTURE.read_text(encoding="utf-8").splitlines())


@pytest.fixture(scope="module")
def parsed(raw_events: list[dict[str, Any]]) -> list[events.Event]:
    return [e for e in (events.parse(raw) for raw in raw_events) if e is not None]


def test_recorded_stream_parses_into_typed_events(parsed: list[events.Event]) -> None:
    assert parsed[0] == PlaybookStart(playbook="mixed.yml")
    assert parsed[1] == PlayStart(name="Mixed results", pattern="all")
    assert TaskStart(host="localhost", task="Say hello", role="hello") in parsed
    results = [e for e in parsed if isinstance(e, HostResult)]
    per_host: dict[str, list[tuple[str, str, str]]] = {}
    for r in results:
        per_host.setdefault(r.host, []).append((r.task, r.status, r.role))
    assert per_host == {
        "localhost": [
            ("Say hello", "ok", "hello"),
            ("Change something", "changed", ""),
            ("Never runs", "skipped", ""),
            ("Break on purpose", "failed", ""),
        ],
        "nobody": [("Say hello", "ok", "hello"), ("Change something", "unreachable", "")],
    }
    failed = next(r for r in results if r.status == "failed")
    assert failed.message == "gpubring-test failure message"
    assert not failed.ignored
    unreachable = next(r for r in results if r.status == "unreachable")
    assert "port 1: Connection refused" in unreachable.message


def test_recorded_stats(parsed: list[events.Event]) -> None:
    stats = parsed[-1]
    assert isinstance(stats, PlaybookStats)
    assert stats.hosts == {
        "localhost": HostCounts(ok=2, changed=1, failed=1, skipped=1),
        "nobody": HostCounts(ok=1, unreachable=1),
    }


def test_fold_gives_failures_counts_and_position(parsed: list[events.Event]) -> None:
    state = RunState()
    for event in parsed:
        state.apply(event)
    assert sorted((f.host, f.task, f.status) for f in state.final_failures()) == [
        ("localhost", "Break on purpose", "failed"),
        ("nobody", "Change something", "unreachable"),
    ]
    live = state.hosts["localhost"]
    assert (live.ok, live.changed, live.failed, live.skipped) == (2, 1, 1, 1)
    assert state.host_counts()["localhost"].failed == 1
    stopped = state.stopped_at()
    assert stopped["play"] == "Mixed results"
    assert stopped["hosts"]["localhost"]["task"] == "Break on purpose"
    assert stopped["hosts"]["localhost"]["finished"] is True
    # unreachable outranks a failed task
    assert report.outcome(state, 4) == ("unreachable", ExitCode.UNREACHABLE)


def test_outcome_precedence() -> None:
    failed = HostResult(host="h", task="t", status="failed", message="boom")
    down = HostResult(host="g", task="t", status="unreachable", message="no route")
    state = RunState()
    state.apply(failed)
    assert report.outcome(state, 2) == ("failed", ExitCode.TASK_FAILED)
    state.apply(down)
    assert report.outcome(state, 4) == ("unreachable", ExitCode.UNREACHABLE)
    state.apply(events.Cancelled("SIGTERM received"))
    assert report.outcome(state, 254) == ("cancelled", ExitCode.CANCELLED)
    assert report.outcome(RunState(), 0) == ("ok", ExitCode.OK)
    # ansible failing before any task (a syntax error) is a failure too
    assert report.outcome(RunState(), 4) == ("failed", ExitCode.TASK_FAILED)


def test_ignored_and_rescued_failures_are_not_failures() -> None:
    state = RunState()
    state.apply(HostResult(host="h", task="probe", status="failed", message="x", ignored=True))
    assert state.failures == []
    # Kept apart, for the report's `ignored` (what check mode could not reach, for example).
    assert [(f.task, f.message) for f in state.ignored] == [("probe", "x")]
    state.apply(HostResult(host="h", task="in block", status="failed", message="y"))
    state.apply(PlaybookStats(hosts={"h": HostCounts(ok=3, rescued=1)}))
    assert len(state.failures) == 1
    assert state.final_failures() == []
    assert report.outcome(state, 0) == ("ok", ExitCode.OK)


def _raw(kind: str, **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": data}


def test_failure_messages() -> None:
    censored = _raw("runner_on_failed", host="h", task="t", res={"censored": "hidden"})
    result = events.parse(censored)
    assert isinstance(result, HostResult)
    assert result.message == events.CENSORED_MESSAGE
    cmd = events.parse(
        _raw("runner_on_failed", host="h", task="t", res={"msg": "non-zero return code", "stderr": "E: nope"})
    )
    assert isinstance(cmd, HostResult)
    assert cmd.message == "non-zero return code: E: nope"
    loop = {
        "msg": "One or more items failed",
        "results": [{"item": "a", "failed": False}, {"item": "b", "failed": True, "msg": "bad b"}],
    }
    assert events.failure_message(loop) == "One or more items failed: item b: bad b"
    hidden_loop = {"msg": "One or more items failed", "results": [{"censored": "hidden"}]}
    assert events.failure_message(hidden_loop) == f"One or more items failed: {events.CENSORED_MESSAGE}"
    assert events.failure_message({"module_stdout": "Traceback ..."}) == "Traceback ..."
    assert events.failure_message({}) == "failed without a message"
    assert len(events.failure_message({"msg": "x" * 10000})) == events.MAX_MESSAGE


# The failed result of a lab GPU node killed while Mitogen pushed it preflight's lock task (the e2e
# node-dies test under load, 2026-11-28 00:54, its summary in the run's output): mitogen-hq/mitogen#1314.
MITOGEN_LOST = {
    "msg": "Task failed: builtins.AttributeError: 'NoneType' object has no attribute 'protocol'",
    "exception": (
        "Traceback (most recent call last):\n"
        '  File "/work/main/.venv/lib/python3.11/site-packages/mitogen/service.py", line 619, in '
        "_on_service_call\n"
        "    return invoker.invoke(method_name, kwargs, msg)\n"
        '  File "/work/main/.venv/lib/python3.11/site-packages/mitogen/service.py", line 712, in _forward\n'
        "    child = self.router.context_by_id(stream.protocol.remote_id)\n"
        "AttributeError: 'NoneType' object has no attribute 'protocol'\n"
    ),
}


def test_a_host_lost_under_mitogen_is_unreachable_not_failed() -> None:
    """Mitogen's lost connection (a failed result, ansible's recap counting it failed) is the host
    unreachable: exit 4, as when the connection plugin itself says so; the message says what happened."""
    task = "preflight : Find who holds the package manager's locks"
    lost = events.parse(_raw("runner_on_failed", host="gpu1", task=task, res=MITOGEN_LOST))
    assert isinstance(lost, HostResult) and (lost.status, lost.lost) == ("unreachable", True)
    assert lost.message.startswith(events.MITOGEN_LOST_NOTE + ": Task failed: builtins.AttributeError")
    state = RunState()
    state.apply(HostResult(host="cp1", task=task, status="ok"))
    state.apply(lost)
    state.apply(PlaybookStats(hosts={"cp1": HostCounts(ok=3), "gpu1": HostCounts(ok=2, failed=1)}))
    assert state.host_counts() == {"cp1": HostCounts(ok=3), "gpu1": HostCounts(ok=2, unreachable=1)}
    assert [(f.host, f.status) for f in state.final_failures()] == [("gpu1", "unreachable")]
    assert report.outcome(state, 2) == ("unreachable", ExitCode.UNREACHABLE)
    # The same words without Mitogen's frame, or Mitogen's frame with another error, are a failure.
    for res in (
        {"msg": MITOGEN_LOST["msg"]},
        {
            **MITOGEN_LOST,
            "msg": "Task failed: KeyError: 'x'",
            "exception": MITOGEN_LOST["exception"].replace("'protocol'", "'router'"),
        },
    ):
        plain = events.parse(_raw("runner_on_failed", host="gpu1", task=task, res=res))
        assert isinstance(plain, HostResult) and (plain.status, plain.lost) == ("failed", False)


def test_changed_ok_skipped_and_ignored_results() -> None:
    changed = events.parse(_raw("runner_on_ok", host="h", task="t", res={"changed": True}))
    assert isinstance(changed, HostResult) and changed.status == "changed"
    ignored = events.parse(_raw("runner_on_failed", host="h", task="t", res={"msg": "m"}, ignore_errors=True))
    assert isinstance(ignored, HostResult) and ignored.ignored
    assert events.parse(_raw("runner_item_on_ok", host="h", task="t", res={})) is None
    assert events.parse({"event": "playbook_on_no_hosts_matched"}) is None


def test_ansible_errors_outside_tasks() -> None:
    state = RunState()
    for line in ("[ERROR]: the role 'nope' was not found", "Origin: /p/site.yml:5:7", "3   hosts: all"):
        parsed = events.parse({"event": "verbose", "stdout": line})
        if parsed is not None:
            state.apply(parsed)
    assert state.errors == ["[ERROR]: the role 'nope' was not found\nOrigin: /p/site.yml:5:7"]
    assert events.parse({"event": "verbose", "stdout": "ERROR! old style"}) == AnsibleError(
        "ERROR! old style"
    )
    assert report.outcome(state, 1) == ("failed", ExitCode.TASK_FAILED)


def test_phase_tracker_follows_the_import_order() -> None:
    tracker = PhaseTracker(
        [
            PhasePlay("preflight", "Preflight checks on every host"),
            PhasePlay("host", "Setup"),
            PhasePlay("cluster", "Setup"),
            PhasePlay("cluster", "Join"),
        ]
    )
    assert tracker.play_started(PlayStart("Preflight checks on every host", "all")).phase == "preflight"
    assert tracker.play_started(PlayStart("Setup", "all")).phase == "host"
    assert tracker.play_started(PlayStart("Setup", "all")).phase == "cluster"
    # a name the playbooks do not have (templated, say) keeps the current phase
    assert tracker.play_started(PlayStart("Something else", "all")).phase == "cluster"
    assert tracker.play_started(PlayStart("Join", "workers")).phase == "cluster"
    state = RunState()
    for phase, name in (("preflight", "a"), ("host", "b"), ("host", "c")):
        state.apply(PlayStart(name, "all", phase))
    assert state.phases_started == ["preflight", "host"]


def test_summary_lists_the_failures_tasks_let_pass() -> None:
    from rich.console import Console

    from gpubring import view
    from gpubring.report import RunReport

    console = Console(record=True, width=200, color_system=None)
    view.summary(
        console,
        RunReport.from_json(
            {
                "stats": {"cp1": {"ok": 5, "ignored": 1}},
                "ignored": [
                    {
                        "host": "cp1",
                        "task": "Download and verify (sha256) Helm 3.19.0",
                        "role": "helm",
                        "message": "Request failed: <urlopen error [Errno -3] name resolution>\nmore",
                    }
                ],
                "status": "ok",
                "exit_code": 0,
            }
        ),
    )
    out = console.export_text()
    assert "1 failure(s) let pass by their task (ignore_errors):" in out
    assert "  cp1: helm : Download and verify (sha256) Helm 3.19.0: Request failed: <urlopen error" in out
    assert "more" not in out  # the first line of the message only


# --- the node_drain role's report (issue 21 item 14) -------------------------------------------------
# tests/fixtures/events/drain.jsonl was recorded by tests/data/record_drain.py: ansible-runner ran the
# node_drain role's decision (tasks_from: plan) on tests/fixtures/node_drain's objects, then drain.yml's
# own task that publishes node_drain_report, on gpu01 (an operator's cordon, a GPU-aware wait that
# reached its bound) and gpu02 (schedulable, no wait).
DRAIN = FIXTURES / "events" / "drain.jsonl"
WAITED_FOR = (
    "Job team-a/bert-finetune (Kueue)",
    "Job team-b/nightly-eval",
    "Kueue pod group team-c/sweep",
    "Volcano Job research/mpi-bench",
    "PyTorchJob research/llama-pretrain",
    "KAI PodGroup vision/pg-resnet-train-0c4e",
)


def _drain_events() -> list[dict[str, Any]]:
    return events.load_events(DRAIN.read_text(encoding="utf-8").splitlines())


def _folded(raw_events: list[dict[str, Any]]) -> RunState:
    state = RunState()
    for raw in raw_events:
        for event in events.parse_all(raw):
            state.apply(event)
    return state


def test_the_recorded_fact_has_the_keys_drain_yml_sets() -> None:
    import yaml

    from helpers import REPO

    drain = yaml.safe_load((REPO / "roles" / "node_drain" / "tasks" / "drain.yml").read_text())
    [publish] = [
        task
        for block in drain
        for task in block.get("block") or ()
        if "node_drain_report" in (task.get("ansible.builtin.set_fact") or {})
    ]
    keys = set(publish["ansible.builtin.set_fact"]["node_drain_report"])
    recorded = [
        raw["event_data"]["res"]["ansible_facts"]["node_drain_report"]
        for raw in _drain_events()
        if "node_drain_report" in ((raw.get("event_data") or {}).get("res") or {}).get("ansible_facts", {})
    ]
    assert len(recorded) == 2 and all(set(fact) == keys for fact in recorded)
    assert {"node"} | set(events.DrainReport("x").as_dict()) == keys


def test_the_drain_report_folds_into_the_state() -> None:
    state = _folded(_drain_events())
    assert state.drains == {
        "gpu01": events.DrainReport(
            host="gpu01",
            cordoned_by="operator",
            operator_cordon_kept=True,
            waited_for=WAITED_FOR,
            waited_seconds=3600,
            still_running_at_bound=WAITED_FOR[:2],
            drained=True,
        ),
        "gpu02": events.DrainReport(host="gpu02", cordoned_by="gpubring", drained=True),
    }
    # Only the result that carries node_drain_report gives one.
    assert [events.drain_report(raw) for raw in _drain_events()].count(None) == len(_drain_events()) - 2


def _drain_fact(host: str, fact: Any) -> dict[str, Any]:
    return {
        "event": "runner_on_ok",
        "event_data": {
            "host": host,
            "task": "Publish the drain's report (node_drain_report)",
            "role": "node_drain",
            "res": {"changed": False, "ansible_facts": {"node_drain_report": fact}},
        },
    }


def test_the_last_drain_of_a_host_wins() -> None:
    # An upgrade drains a node twice (its control-plane batch, then its driver): the summary says the last.
    first = {
        "node": "gpu01",
        "cordoned_by": "gpubring",
        "operator_cordon_kept": False,
        "waited_for": ["Job ml/train"],
        "waited_seconds": 120,
        "still_running_at_bound": ["Job ml/train"],
        "drained": True,
    }
    second = first | {"waited_for": [], "waited_seconds": 0, "still_running_at_bound": []}
    state = _folded([_drain_fact("gpu01", first), _drain_fact("gpu02", first), _drain_fact("gpu01", second)])
    assert state.drains["gpu01"] == events.DrainReport("gpu01", cordoned_by="gpubring", drained=True)
    assert state.drains["gpu02"].still_running_at_bound == ("Job ml/train",)
    # A fact of the wrong shape, or one that an older Ansible templated as text, still reads.
    assert events.drain_report(_drain_fact("gpu03", "not a mapping")) is None
    texts = events.drain_report(
        _drain_fact("gpu03", {"operator_cordon_kept": "True", "drained": "False", "waited_seconds": "7"})
    )
    assert texts == events.DrainReport("gpu03", operator_cordon_kept=True, waited_seconds=7)
