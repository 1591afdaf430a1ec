"""Each GPU node's acceptance verdict (issue 14 item 3, the reporting half): the gpu_acceptance role's
`gpu_acceptance_result` and its gate's `gpu_acceptance_admission` reach report.json, the run's summary
and `gpubring runs`.

tests/fixtures/events/acceptance.jsonl was recorded by tests/data/record_acceptance.py: ansible-runner
ran the role for real (tests/data/playbooks/acceptance.yml) on three local hosts, two of them reading
a synthetic sysfs tree through gpu_facts' root option: gpu-1 passed (its Xid check read this machine's
kernel log, its NDR rail is ACTIVE), gpu-2 failed (one rail trained at HDR, one DOWN) and gpu-3, this
machine as it is, measured nothing. The recording playbook then set_facts
`gpu_acceptance_admission: no-cluster` as the role's gate does on hosts that are no cluster's nodes.
"""

from __future__ import annotations

import copy
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpubring import events, report, runstore, view
from helpers import FIXTURES
from helpers import folded as _state
from helpers import runs_cli as runs

RECORDED = FIXTURES / "events" / "acceptance.jsonl"
START = datetime(2026, 3, 1, 9, 30, 0, tzinfo=UTC)

NO_GPU = "no NVIDIA GPU on the PCI bus (gpu_facts found none)"
NO_RDMA = "no RDMA device (/sys/class/infiniband is empty)"
NO_PCIE = "sysfs shows no PCIe link for the GPUs and NICs (virtual functions?)"
GPU_1_SKIPPED = [
    {"name": "dcgm_diag", "reason": "dcgmi (DCGM) is not installed"},
    {"name": "gpu_health", "reason": "nvidia-smi is not installed"},
    {"name": "nvlink", "reason": "nvidia-smi is not installed"},
    {"name": "pcie", "reason": NO_PCIE},
    {"name": "rdma_write_bw", "reason": "ib_write_bw (perftest) is not installed"},
]
GPU_2_FAILED = [
    {"name": "nic_link:mlx5_1/1", "reason": "link trained at 200.0 Gb/s, expected 400.0"},
    {"name": "nic_link:mlx5_2/1", "reason": "port 1 of mlx5_2 is DOWN"},
]
GPU_3_SKIPPED = [
    {"name": "dcgm_diag", "reason": f"{NO_GPU}; dcgmi (DCGM) is not installed"},
    {"name": "gpu_health", "reason": f"{NO_GPU}; nvidia-smi is not installed"},
    {"name": "gpu_xid", "reason": NO_GPU},
    {"name": "nvlink", "reason": f"{NO_GPU}; nvidia-smi is not installed"},
    {"name": "nic_link", "reason": NO_RDMA},
    {"name": "pcie", "reason": "no NVIDIA GPU or RDMA NIC on the PCI bus"},
    {"name": "rdma_write_bw", "reason": f"{NO_RDMA}; ib_write_bw (perftest) is not installed"},
]
ACCEPTANCE = {
    "gpu-1": {"verdict": "passed", "failed": [], "skipped": GPU_1_SKIPPED, "admission": "no-cluster"},
    "gpu-2": {
        "verdict": "failed",
        "failed": GPU_2_FAILED,
        "skipped": GPU_1_SKIPPED,
        "admission": "no-cluster",
    },
    "gpu-3": {"verdict": "skipped-only", "failed": [], "skipped": GPU_3_SKIPPED, "admission": "no-cluster"},
}


def _detail(checks: list[dict[str, str]]) -> str:
    return "; ".join(f"{c['name']}: {c['reason']}" for c in checks)


SUMMARY_LINES = [
    "acceptance passed: gpu-1 [no cluster]",
    f"acceptance failed: gpu-2 ({_detail(GPU_2_FAILED)}) [no cluster]",
    f"acceptance measured nothing: gpu-3 ({_detail(GPU_3_SKIPPED)}) [no cluster]",
]


def recorded() -> list[dict[str, Any]]:
    return events.load_events(RECORDED.read_text().splitlines())


def _report(state: events.RunState, folder: Path, started: datetime = START) -> dict[str, Any]:
    meta = report.RunMeta(
        "verify", folder, folder / "hosts.yml", folder, "run.yml", started, started + timedelta(seconds=14), 2
    )
    return report.build(state, meta)


def _summary(doc: dict[str, Any]) -> list[str]:
    out = io.StringIO()
    view.summary(
        Console(file=out, width=1000, force_terminal=False, color_system=None),
        report.RunReport.from_json(doc),
    )
    return out.getvalue().splitlines()


def _acceptance_lines(doc: dict[str, Any]) -> list[str]:
    return [line for line in _summary(doc) if line.startswith("acceptance ")]


# --- the parser -----------------------------------------------------------------------------------


def test_the_recorded_stream_has_the_verdict_then_the_admission_in_a_later_result() -> None:
    found = [(i, v) for i, raw in enumerate(recorded()) if (v := events.acceptance_verdict(raw)) is not None]
    by_host: dict[str, list[tuple[int, events.AcceptanceVerdict]]] = {}
    for index, verdict in found:
        by_host.setdefault(verdict.host, []).append((index, verdict))
    assert sorted(by_host) == ["gpu-1", "gpu-2", "gpu-3"]
    for host, ((first, result), (later, gate)) in by_host.items():
        assert first < later, host
        # The role's set_fact of gpu_acceptance_result: a verdict, no admission yet.
        assert result.verdict == ACCEPTANCE[host]["verdict"] and result.admission is None
        # The gate's set_fact of gpu_acceptance_admission alone: no verdict.
        assert (gate.verdict, gate.failed, gate.skipped, gate.admission) == (None, (), (), "no-cluster")


def test_parse_all_folds_each_hosts_verdict_and_admission() -> None:
    state = _state(recorded())
    assert sorted(state.acceptance) == ["gpu-1", "gpu-2", "gpu-3"]
    for host, want in ACCEPTANCE.items():
        got = state.acceptance[host]
        assert got.verdict == want["verdict"]
        assert [c.as_dict() for c in got.failed] == want["failed"]
        assert [c.as_dict() for c in got.skipped] == want["skipped"]
        assert got.admission == "no-cluster"
    # Neither the checks' expected and measured figures nor the role's `expected` dump are kept.
    kept = repr(state.acceptance)
    assert "rate_gbps" not in kept and "ib_write_bw_min_gbps" not in kept and "pairs" not in kept
    # The role failed gpu-2 after publishing its verdict; that failure is the run's, as any other.
    [failure] = state.final_failures()
    assert (failure.host, failure.task) == ("gpu-2", "Fail the host when a check failed")


def _set_fact(host: str, facts: dict[str, Any], event: str = "runner_on_ok") -> dict[str, Any]:
    return {
        "event": event,
        "event_data": {
            "host": host,
            "task": "Publish",
            "role": "gpu_acceptance",
            "res": {"ansible_facts": facts},
        },
    }


def _recorded_result(host: str) -> dict[str, Any]:
    """The gpu_acceptance_result fact the recorded run published for `host`."""
    for raw in recorded():
        facts = (raw["event_data"].get("res") or {}).get("ansible_facts") or {}
        if raw["event_data"].get("host") == host and "gpu_acceptance_result" in facts:
            return copy.deepcopy(facts["gpu_acceptance_result"])
    raise AssertionError(f"no gpu_acceptance_result for {host}")


def test_the_last_word_wins_per_host() -> None:
    result = _recorded_result("gpu-3")
    state = _state(
        [
            _set_fact("gpu-3", {"gpu_acceptance_result": result}),
            _set_fact("gpu-3", {"gpu_acceptance_admission": "pending"}),
            _set_fact("gpu-3", {"gpu_acceptance_admission": "check"}),
            # Both facts in one result.
            _set_fact(
                "gpu-1",
                {"gpu_acceptance_result": _recorded_result("gpu-1"), "gpu_acceptance_admission": "accepted"},
            ),
            # An admission with no verdict (older role, or the role stopped between): kept, verdict None.
            _set_fact("gpu-4", {"gpu_acceptance_admission": "off"}),
            # The role ran again on gpu-2: its new verdict starts over, without the earlier admission.
            _set_fact("gpu-2", {"gpu_acceptance_result": _recorded_result("gpu-2")}),
            _set_fact("gpu-2", {"gpu_acceptance_admission": "failed"}),
            _set_fact("gpu-2", {"gpu_acceptance_result": _recorded_result("gpu-1")}),
        ]
    )
    got = {host: (v.verdict, v.admission) for host, v in state.acceptance.items()}
    assert got == {
        "gpu-3": ("skipped-only", "check"),
        "gpu-1": ("passed", "accepted"),
        "gpu-4": (None, "off"),
        "gpu-2": ("passed", None),
    }


@pytest.mark.parametrize(
    "raw",
    [
        _set_fact(
            "gpu-1", {"gpu_acceptance_result": {"verdict": "passed", "checks": []}}, "runner_on_skipped"
        ),
        _set_fact("gpu-1", {"preflight_summary": {"os": "Debian 12"}}),
        _set_fact("gpu-1", {"gpu_acceptance_result": "not a mapping", "gpu_acceptance_admission": ""}),
        {"event": "runner_on_ok", "event_data": {"host": "gpu-1", "res": {"changed": False}}},
    ],
    ids=["not-ok", "other-fact", "empty", "no-facts"],
)
def test_results_without_an_acceptance_fact_give_no_verdict(raw: dict[str, Any]) -> None:
    assert events.acceptance_verdict(raw) is None


# --- report.json ----------------------------------------------------------------------------------


def test_report_json_has_each_hosts_acceptance_sorted_by_host(tmp_path: Path) -> None:
    # Hosts reporting gpu-3 first (each host's own results in their order): the report sorts them.
    stream = sorted(recorded(), key=lambda raw: str(raw["event_data"].get("host", "")), reverse=True)
    state = _state(stream)
    assert list(state.acceptance) == ["gpu-3", "gpu-2", "gpu-1"]
    doc = _report(state, tmp_path)
    assert list(report.REPORT_FIELDS) == list(doc)
    assert doc["acceptance"] == ACCEPTANCE
    assert list(doc["acceptance"]) == ["gpu-1", "gpu-2", "gpu-3"]
    path = report.write(doc, tmp_path)
    assert json.loads(path.read_text())["acceptance"] == ACCEPTANCE


def test_a_run_without_acceptance_reports_none(tmp_path: Path) -> None:
    state = _state(events.load_events((FIXTURES / "events" / "mixed.jsonl").read_text().splitlines()))
    doc = _report(state, tmp_path)
    assert doc["acceptance"] == {}
    assert _acceptance_lines(doc) == []


def test_an_older_role_without_a_gate_reports_a_null_admission(tmp_path: Path) -> None:
    stream = [
        raw
        for raw in recorded()
        if "gpu_acceptance_admission" not in ((raw["event_data"].get("res") or {}).get("ansible_facts") or {})
    ]
    doc = _report(_state(stream), tmp_path)
    assert {host: entry["admission"] for host, entry in doc["acceptance"].items()} == dict.fromkeys(
        ACCEPTANCE, None
    )
    assert _acceptance_lines(doc) == [line.removesuffix(" [no cluster]") for line in SUMMARY_LINES]


# --- the run's summary ----------------------------------------------------------------------------


def test_the_summary_says_each_verdict_after_the_reboots(tmp_path: Path) -> None:
    doc = _report(_state(recorded()), tmp_path)
    doc["reboot_pending"] = {"gpu-2": {"reasons": ["nvidia_driver: nouveau is loaded"], "because": "x"}}
    lines = _summary(doc)
    assert [line for line in lines if line.startswith("acceptance ")] == SUMMARY_LINES
    start = lines.index(SUMMARY_LINES[0])
    assert lines[start - 1].startswith("reboot needed (x): gpu-2")
    assert lines[start + 3].startswith("failed (exit 1)")
    styles = [line.style for line in view.acceptance_lines(report.RunReport.from_json(doc))]
    assert styles == ["green", "bold red", "yellow"]


def _with_admissions(doc: dict[str, Any], admissions: dict[str, str]) -> dict[str, Any]:
    # The one place these tests change what the recorded run said: the admission of a host that is
    # a node of a cluster (this machine has none, so the recording says no-cluster everywhere).
    changed = copy.deepcopy(doc)
    for host, admission in admissions.items():
        changed["acceptance"][host]["admission"] = admission
    return changed


def test_the_summary_says_what_the_gate_did(tmp_path: Path) -> None:
    doc = _with_admissions(
        _report(_state(recorded()), tmp_path), {"gpu-1": "accepted", "gpu-2": "failed", "gpu-3": "pending"}
    )
    assert _acceptance_lines(doc) == [
        "acceptance passed: gpu-1 [taint removed]",
        f"acceptance failed: gpu-2 ({_detail(GPU_2_FAILED)}) [tainted failed]",
        f"acceptance measured nothing: gpu-3 ({_detail(GPU_3_SKIPPED)}) [kept pending]",
    ]
    for admission, label in (("off", "gate off"), ("check", "check mode"), ("new-word", "new-word")):
        lines = _acceptance_lines(_with_admissions(doc, {"gpu-1": admission}))
        assert lines[0] == f"acceptance passed: gpu-1 [{label}]"


def test_a_hundred_nodes_read_as_a_few_lines(tmp_path: Path) -> None:
    recorded_doc = _report(_state(recorded()), tmp_path)
    entries = recorded_doc["acceptance"]
    doc = dict(recorded_doc)
    # 96 nodes like gpu-1, 2 like gpu-2, 2 like gpu-3 (the recorded entries under other names).
    doc["acceptance"] = {
        f"gpu-{n:03d}": copy.deepcopy(entries["gpu-1" if n <= 96 else "gpu-2" if n <= 98 else "gpu-3"])
        for n in range(1, 101)
    }
    doc["acceptance"]["gpu-098"]["failed"] = [{"name": "gpu_xid", "reason": "Xid 79 on 0000:9b:00.0"}]
    lines = _acceptance_lines(doc)
    passed = ", ".join(f"gpu-{n:03d}" for n in range(1, 97))
    assert lines == [
        f"acceptance passed: {passed} [no cluster]",
        f"acceptance failed: gpu-097 ({_detail(GPU_2_FAILED)}) [no cluster]",
        "acceptance failed: gpu-098 (gpu_xid: Xid 79 on 0000:9b:00.0) [no cluster]",
        f"acceptance measured nothing: gpu-099, gpu-100 ({_detail(GPU_3_SKIPPED)}) [no cluster]",
    ]
    # No passed host lists its checks.
    assert "dcgm_diag" not in lines[0]


# --- gpubring runs --------------------------------------------------------------------------------


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """Two runs: `verify --acceptance` as recorded, then one that judged no GPU node."""
    root = tmp_path / "inventory"
    root.mkdir()
    for started, state in ((START, _state(recorded())), (START + timedelta(hours=1), events.RunState())):
        folder = runstore.new_run_folder(root, "verify", started)
        report.write(_report(state, folder, started), folder)
    return root


def test_the_listing_counts_the_verdicts(inventory: Path) -> None:
    code, output = runs(inventory)
    assert code == 0, output
    header = next(line for line in output.splitlines() if line.startswith("run "))
    assert header.split()[-1] == "acceptance"
    rows = {line.split()[0]: line for line in output.splitlines() if line.startswith("2026")}
    assert rows["20260301T093000Z-verify"].endswith("1 passed, 1 failed, 1 skipped-only")
    assert rows["20260301T103000Z-verify"].rstrip().endswith(" -")
    assert runstore.acceptance_text(ACCEPTANCE | {"gpu-4": dict(ACCEPTANCE["gpu-1"])}) == (
        "2 passed, 1 failed, 1 skipped-only"
    )


def test_the_json_listing_has_the_reports_acceptance(inventory: Path) -> None:
    code, output = runs(inventory, "--json")
    assert code == 0, output
    rows = json.loads(output)
    assert [row["acceptance"] for row in rows] == [{}, ACCEPTANCE]


def test_one_run_shows_the_summarys_acceptance_lines(inventory: Path) -> None:
    code, output = runs(inventory, "20260301T093000Z-verify")
    assert code == 0, output
    assert [line for line in output.splitlines() if line.startswith("acceptance ")] == SUMMARY_LINES
    code, output = runs(inventory, "20260301T093000Z-verify", "--json")
    assert code == 0, output
    assert json.loads(output)["acceptance"] == ACCEPTANCE
