"""Sharded runs (issue 26 item 2): preflight, the host phase and verify's per-host plays as several
ansible-playbook processes over disjoint slices of the hosts, merged into one run (gpubring.run.shards).

The real runs are real ansible-playbook runs (ansible-runner, as `gpubring up` starts them) of tiny
phase playbooks (tests/data/shards/phases: the host phase's three plays, serial batches included;
preflight and verify's per-host and once parts, with the real collision check) on five inventory names
of this machine over the local connection. The same run with one shard (today's one process) and with
two must give the same per-host stats, failures and exit code; a SIGTERM to a sharded `gpubring up`
stops every shard (exit 3) and leaves no process of the run behind.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from gpubring import formats, view
from gpubring.events import Event, HostCounts, HostResult, PlaybookStats, PlayStart, TaskStart
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.run import process, shards
from gpubring.run.cancel import CancelFlag
from gpubring.run.folder import plays_of
from gpubring.run.session import Session
from gpubring.run.settings import RunResult, RunSettings
from gpubring.runopts import RunOptions, parse_extra_vars
from helpers import DATA, REPO, closed_port, inventory_problems

SHARDS = DATA / "shards"
PHASES = SHARDS / "phases"
HOSTS = ("n1", "n2", "n3", "n4", "n5")
GPU = ("n2", "n3", "n4")
SECRET = "S3cr3t-shard-token"
HOST_PLAYS = ("Host setup on every node", "GPU host setup on GPU nodes", "Reboot the hosts that need it")


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    root = tmp_path / "inventory"
    (root / "group_vars").mkdir(parents=True)
    shutil.copy(SHARDS / "hosts.yml", root / "hosts.yml")
    # A cancel does not wait for package work here (this machine's own dpkg is never looked at).
    # gpubring_serial 100%: one batch per play, so every shard may take its whole slice at once.
    (root / "group_vars" / "all.yml").write_text(
        "---\ngpubring_cancel_wait_timeout: 0\ngpubring_serial: 100%\n"
    )
    return root


# --- the plan: slices, serials, counts (no ansible) ----------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 8])
def test_slices_are_disjoint_complete_balanced_and_spread_the_gpu_nodes(count: int) -> None:
    hosts = [f"h{i:02d}" for i in range(23)]
    gpu = hosts[3:19]
    cut = shards.slices(hosts, gpu, count)
    flat = [h for part in cut for h in part]
    assert sorted(flat) == sorted(hosts) and len(flat) == len(set(flat))
    assert len(cut) == min(count, len(hosts))
    assert max(map(len, cut)) - min(map(len, cut)) <= 1
    per_shard_gpu = [sum(h in gpu for h in part) for part in cut]
    assert max(per_shard_gpu) - min(per_shard_gpu) <= 1
    assert all(list(part) == sorted(part, key=hosts.index) for part in cut)  # inventory order


def test_shard_serials_never_batch_more_hosts_than_one_process() -> None:
    # 25% of 8 hosts is 2 for the reboot play, of 4 GPU nodes 1 for the GPU play: one slot, one shard.
    assert shards.shard_serials("25%", 8, 4, 2) == ["1"]
    assert shards.shard_serials("50%", 20, 10, 2) == ["3", "2"]
    assert shards.shard_serials("1", 20, 10, 4) == ["1"]
    assert shards.shard_serials("100%", 20, 10, 3) == ["100%"] * 3
    assert shards.shard_serials("30", 20, 10, 2) == ["30", "30"]
    assert shards.shard_serials("[1, '50%']", 20, 10, 2) is None
    for serial in ("10%", "25%", "40%", "3", "7"):
        for count in (2, 3, 5):
            parts = shards.shard_serials(serial, 40, 24, count)
            assert parts is not None
            total = sum(int(p) for p in parts if not p.endswith("%"))
            assert total <= min(shards._batch(serial, 40), shards._batch(serial, 24))


def test_shard_count_auto_is_the_cores_and_never_more_than_the_hosts() -> None:
    assert shards.shard_count("auto", 10, cores=2) == 2
    assert shards.shard_count("auto", 1, cores=16) == 1
    assert shards.shard_count(8, 3) == 3
    assert shards.shard_count("auto", 50) == min(50, len(os.sched_getaffinity(0)))
    with pytest.raises(shards.ShardsError, match="gpubring_shards: expected 'auto' or an integer >= 1"):
        shards.shard_count("many", 3)
    assert formats.check("shards", "auto") is None and formats.check("shards", 4) is None
    assert formats.check("shards", 0) and formats.check("shards", "many")


def test_a_bad_gpubring_shards_is_refused_with_the_file_and_key(inventory: Path) -> None:
    (inventory / "group_vars" / "all.yml").write_text("---\ngpubring_shards: many\n")
    assert inventory_problems(inventory) == [
        "group_vars/all.yml: gpubring_shards: expected 'auto' or an integer >= 1, got 'many'"
    ]


def test_the_plan_shards_the_per_host_work_and_keeps_what_compares_hosts_once(inventory: Path) -> None:
    """Over the real playbooks/: preflight, host and verify's per-host plays per slice; the collision
    check first in the step after preflight's shards; cluster and platform, then the smoke tests and the
    fabric test, once each, in order."""
    inv = load_inventory(inventory, check_rules=False)
    base = RunSettings(
        inventory_root=inventory,
        hosts_file=inventory / "hosts.yml",
        phases=("preflight", "host", "cluster", "platform", "verify"),
        options=RunOptions(shards=2),
    )
    plan = shards.plan(base, inv)
    assert plan is not None and plan.shards == 2
    assert [(s.stems, s.sharded) for s in plan.segments] == [
        (("preflight",), True),
        (("preflight_collisions", "host"), True),
        (("cluster", "platform"), False),
        (("verify_hosts",), True),
        (("verify_smoke", "verify_fabric"), False),
    ]
    assert plan.segments[1].phases == ("preflight", "host")
    assert plan.gpu == GPU
    steps = {
        ("preflight",): [(("preflight",), True), (("preflight_collisions",), False)],
        ("verify",): [(("verify_hosts",), True), (("verify_smoke", "verify_fabric"), False)],
        ("preflight", "verify"): [  # two phases never share a sharded step
            (("preflight",), True),
            (("preflight_collisions", "verify_hosts"), True),
            (("verify_smoke", "verify_fabric"), False),
        ],
        ("host", "verify"): [
            (("host",), True),
            (("verify_hosts",), True),
            (("verify_smoke", "verify_fabric"), False),
        ],
    }
    for phases, expected in steps.items():  # --only preflight, --only verify, --from ...
        planned = shards.plan(replace(base, phases=phases), inv)
        assert planned is not None and [(s.stems, s.sharded) for s in planned.segments] == expected
    # verify.yml (one process) is its per-host plays, then the fabric test: the same plays, in order.
    assert plays_of(REPO / "playbooks" / "verify.yml") == [
        *plays_of(REPO / "playbooks" / "verify_hosts.yml"),
        *plays_of(REPO / "playbooks" / "verify_fabric.yml"),
    ]
    one = RunSettings(inventory_root=inventory, hosts_file=inventory / "hosts.yml", phases=("host",))
    assert shards.plan(one, inv, cores=1) is None  # auto on one core: one process
    # auto: preflight and verify per slice only from 8 hosts a slice (a process's start is not worth
    # less); with 5 hosts they are one process each, as before, and only the host phase is sharded.
    auto = shards.plan(replace(base, options=RunOptions()), inv, cores=2)
    assert auto is not None and [(s.stems, s.sharded) for s in auto.segments] == [
        (("preflight",), False),
        (("host",), True),
        (("cluster", "platform", "verify"), False),
    ]
    assert (
        shards.plan(replace(base, phases=("preflight", "verify"), options=RunOptions()), inv, cores=2) is None
    )
    hosts = {f"h{i:02d}": {} for i in range(20)}
    groups = {
        "control_plane": {"hosts": {"h00": {}}},
        "gpu_nodes": {"hosts": {h: {} for h in list(hosts)[1:]}},
    }
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts, "children": groups}}))
    fleet = shards.plan(
        replace(base, options=RunOptions()), load_inventory(inventory, check_rules=False), cores=4
    )
    assert fleet is not None and fleet.shards == 4
    assert [(s.stems, s.shards) for s in fleet.segments if s.sharded] == [
        (("preflight",), 2),  # 20 hosts: two slices of preflight and of verify, four of the host phase
        (("preflight_collisions", "host"), 0),
        (("verify_hosts",), 2),
    ]
    assert shards.plan(replace(base, options=RunOptions(shards=1)), inv) is None
    assert shards.plan(replace(base, phases=("cluster", "platform")), inv) is None  # nothing per host
    # A phase playbooks folder without the split files (another --playbooks-dir): one process, as before.
    segments = shards.segments_of(("preflight", "host", "verify"), SHARDS)
    assert [(s.stems, s.sharded) for s in segments] == [(("preflight", "host", "verify"), False)]
    limited = base.__class__(**{**base.__dict__, "options": RunOptions(shards=4, limit="n1")})
    assert shards.plan(limited, inv) is None  # one host
    by_e = RunOptions(extra_vars=parse_extra_vars(["gpubring_shards=3"]))
    planned = shards.plan(base.__class__(**{**base.__dict__, "options": by_e}), inv)
    assert planned is not None and planned.shards == 3  # -e wins over the inventory, as for every setting


# --- real runs ------------------------------------------------------------------------------------------


def _run(inventory: Path, count: int, phases: tuple[str, ...] = ("host",), **extra: object) -> RunResult:
    settings = RunSettings(
        inventory_root=inventory,
        hosts_file=inventory / "hosts.yml",
        command="test",
        phases=phases,
        playbooks_dir=PHASES,
        serial="100%",
        options=RunOptions(
            accelerate=False,
            shards=count,
            extra_vars=parse_extra_vars([json.dumps(extra)] if extra else []),
        ),
    )
    return process.run(settings)


def _limits(result: RunResult) -> dict[str, str | None]:
    """Each ansible-runner job of the run and the --limit its ansible-playbook got."""
    found: dict[str, str | None] = {}
    for command in sorted(result.run_folder.glob("artifacts/*/command")):
        argv = json.loads(command.read_text())["command"]
        found[command.parent.name] = argv[argv.index("--limit") + 1] if "--limit" in argv else None
    return found


def _summary(result: RunResult) -> str:
    """The summary as printed, without the run's own duration and folder."""
    console = Console(record=True, width=200, file=io.StringIO())
    view.summary(console, result.report)
    text = re.sub(r"[0-9.]+ s\b", "N s", console.export_text())
    # ansible's own words for an ssh refusal vary from run to run (connection refused, broken pipe).
    text = re.sub(r"(UNREACHABLE [^\n]*\n)[^\n]*", r"\1    (ssh's message)", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("run folder:"))


def test_a_sharded_run_with_a_failing_and_an_unreachable_host_reports_what_one_process_reports(
    inventory: Path,
) -> None:
    """In the host phase n5 cannot be reached (ssh to a closed port) and n3 fails, each in its shard.
    (What runs after the shards: test_what_stops_a_sharded_run_between_its_steps.)"""
    (inventory / "host_vars").mkdir()
    (inventory / "host_vars" / "n5.yml").write_text(
        f"---\nansible_connection: ssh\nansible_port: {closed_port()}\n"
    )
    one = _run(inventory, 1, fail_host="n3")
    two = _run(inventory, 2, fail_host="n3", operator_token=SECRET)
    for path in two.run_folder.rglob("*"):  # -e files removed, artifacts scrubbed, in every shard
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path
    assert not list(two.run_folder.glob("vars/extra-vars-*"))
    assert one.exit_code == two.exit_code == ExitCode.UNREACHABLE
    assert _summary(two) == _summary(one)
    assert "UNREACHABLE n5: Reach the host" in _summary(two)
    assert "FAILED n3: Fail where asked" in _summary(two)
    assert two.state.host_counts() == one.state.host_counts()
    assert set(two.state.host_counts()) == set(HOSTS)
    assert [f.as_dict() for f in two.state.final_failures()] == [
        f.as_dict() for f in one.state.final_failures()
    ]
    assert two.report.to_json()["stats"] == one.report.to_json()["stats"]
    assert two.report.status == one.report.status == "unreachable"
    # One process today; with two shards: the host phase in two disjoint slices of every host.
    assert list(_limits(one).values()) == [None]
    jobs = _limits(two)
    name = two.run_folder.name
    assert list(jobs) == [f"{name}-1-1", f"{name}-1-2"]
    parts = [set(str(jobs[f"{name}-1-{i}"]).split(",")) for i in (1, 2)]
    assert not parts[0] & parts[1] and parts[0] | parts[1] == set(HOSTS)
    assert all(part & set(GPU) for part in parts)
    for index in (1, 2):  # each shard's own gpubring_serial comes last: no -e of the operator's beats it
        argv = json.loads((two.run_folder / "artifacts" / f"{name}-1-{index}" / "command").read_text())
        extra = [v for k, v in zip(argv["command"], argv["command"][1:], strict=False) if k == "-e"]
        assert extra[-1].endswith(f"gpubring-shard-1-{index}.json"), argv["command"]
    assert any("host phase in 2 shards" in note for note in two.state.notices)
    # The GPU play's batches: each shard took its whole slice at once (serial 100%), as one process did.
    assert two.state.phases_started == one.state.phases_started == ["host"]


def _waiting(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv and b"-c" in argv:
                found.append(int(entry.name))
    return found


def _left_running(*markers: str) -> list[str]:
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if any(m.encode() in line for m in markers):
                left.append(f"{entry.name}: {line[:200]!r}")
    return left


def test_sigterm_stops_every_shard(inventory: Path, tmp_path: Path) -> None:
    marker = f"gpubring-shards-test-{os.getpid()}-{tmp_path.name}"
    args = ["up", str(inventory), "--playbooks-dir", str(PHASES), "--only", "host", "--shards", "2"]
    args += ["--no-accelerate", "-e", f"wait_marker={marker}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpubring", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        deadline = time.monotonic() + 180  # a safety net for a broken run, not a timing assertion
        while len(_waiting(marker)) < len(HOSTS) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_waiting(marker)) == len(HOSTS), proc.communicate(timeout=60)[0] if proc.poll() else ""
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.CANCELLED, output
    assert output.count("cancelling (SIGTERM received)") == 1, output
    assert "cancelled (exit 3)" in output
    [folder] = (inventory / ".gpubring" / "runs").iterdir()
    data = json.loads((folder / "report.json").read_text())
    assert (data["status"], data["exit_code"]) == ("cancelled", 3)
    assert sorted(data["stopped_at"]["hosts"]) == list(HOSTS)
    assert all(h["task"] == "Wait for the signal" for h in data["stopped_at"]["hosts"].values())
    assert len(list(folder.glob("artifacts/*-1-*"))) == 2  # two shards ran
    assert _left_running(marker, str(folder)) == []


def test_merged_events_sum_the_counts_announce_each_play_once_and_list_failures_task_by_task(
    inventory: Path,
) -> None:
    """Two shards' events, arriving interleaved: the later task's failure (shard b, n3) comes first,
    yet the report lists n5's (an earlier task) first, as one process's linear strategy would."""
    settings = RunSettings(inventory_root=inventory, hosts_file=inventory / "hosts.yml")
    seen: list[Event] = []
    main = Session(settings, inventory, (), {}, on_event=seen.append, cancel=CancelFlag())
    merge = shards._Merge(main, order={h: i for i, h in enumerate(HOSTS)})
    a = Session(settings, inventory, (), {}, on_event=None, cancel=main.cancel, ident="a")
    b = Session(settings, inventory, (), {}, on_event=None, cancel=main.cancel, ident="b")
    a.on_event, b.on_event = merge.forwarder(1, a), merge.forwarder(1, b)
    for shard in (a, b):
        shard.emit(PlayStart(name="Host setup on every node", pattern="all", phase="host"))
    a.emit(TaskStart(host="n5", task="Reach the host"))
    b.emit(TaskStart(host="n3", task="Reach the host"))
    b.emit(HostResult(host="n3", task="Reach the host", status="ok"))
    b.emit(TaskStart(host="n3", task="Fail where asked"))
    b.emit(HostResult(host="n3", task="Fail where asked", status="failed", message="no"))
    a.emit(HostResult(host="n5", task="Reach the host", status="unreachable", message="refused"))
    a.emit(PlaybookStats(hosts={"n5": HostCounts(unreachable=1)}))
    b.emit(PlaybookStats(hosts={"n3": HostCounts(ok=1, failed=1)}))
    b.emit(PlaybookStats(hosts={"n3": HostCounts(ok=2)}))  # a later step of the run
    merge.sort_failures()
    assert [f.host for f in main.state.failures] == ["n5", "n3"]
    assert main.state.host_counts() == {"n3": HostCounts(ok=3, failed=1), "n5": HostCounts(unreachable=1)}
    assert sum(isinstance(e, PlayStart) for e in seen) == 1
    assert merge.dead() == {"n3", "n5"}


def _fake_steps(
    inventory: Path,
    outcome: Callable[[Session, str], tuple[int | None, str]],
    phases: tuple[str, ...] = ("preflight", "host", "verify"),
) -> tuple[tuple[int | None, str], list[str]]:
    """shards.run over `phases` with `outcome` standing in for each ansible-playbook; the idents of the
    processes it started, in order. By default preflight and verify are one process each (their phase
    playbooks without the split files), the host phase two shards."""
    inv = load_inventory(inventory, check_rules=False)
    playbooks = PHASES
    if phases == ("preflight", "host", "verify"):
        playbooks = inventory / "phases"
        playbooks.mkdir(exist_ok=True)
        for name in ("preflight.yml", "host.yml", "verify.yml"):
            shutil.copy(PHASES / name, playbooks / name)
    settings = RunSettings(
        inventory_root=inventory,
        hosts_file=inventory / "hosts.yml",
        phases=phases,
        playbooks_dir=playbooks,
        serial="100%",
        options=RunOptions(shards=2),
    )
    the_plan = shards.plan(settings, inv)
    assert the_plan is not None
    folder = inventory / "run"
    folder.mkdir(exist_ok=True)
    main = Session(settings, folder, (), {}, on_event=None, cancel=CancelFlag())
    started: list[str] = []

    def run_one(session: Session, playbook: Path, inventories: object, **kw: str) -> tuple[int | None, str]:
        started.append(kw["ident"])
        LIMITS[kw["ident"]] = kw["limit"]
        files = [a[1:] for a in kw["args"].split() if a.startswith("@") and "gpubring-shard-" in a]
        VALUES[kw["ident"]] = {k: v for f in files for k, v in json.loads(Path(f).read_text()).items()}
        PLAYBOOKS[kw["ident"]] = [
            Path(p["ansible.builtin.import_playbook"]).stem for p in yaml.safe_load(playbook.read_text())
        ]
        return outcome(session, kw["ident"])

    result = shards.run(settings, folder, main, the_plan, inventories=[], run_one=run_one)
    return result, started


LIMITS: dict[str, str | None] = {}
VALUES: dict[str, dict[str, object]] = {}
PLAYBOOKS: dict[str, list[str]] = {}


def test_what_stops_a_sharded_run_between_its_steps(inventory: Path, tmp_path: Path) -> None:
    def cancel_in_the_host_phase(session: Session, ident: str) -> tuple[int | None, str]:
        if ident.startswith("run-2"):
            session.cancel.set("test")  # as a signal landing just as the host phase ends
        return 0, "successful"

    (rc, status), started = _fake_steps(inventory, cancel_in_the_host_phase)
    assert (status, started) == ("canceled", ["run-1", "run-2-1", "run-2-2"])  # verify never started

    def error_in_preflight(session: Session, ident: str) -> tuple[int | None, str]:
        return 1, "failed"  # ansible-playbook's rc 1: an error, not a host's failure

    root2 = tmp_path / "second"
    shutil.copytree(inventory, root2)
    (rc, status), started = _fake_steps(root2, error_in_preflight)
    assert (rc, started) == (1, ["run-1"])

    def a_shard_stops_early(session: Session, ident: str) -> tuple[int | None, str]:
        if ident == "run-2-1":  # its playbook ended in its first play (a whole batch failed)
            session.emit(PlayStart(name="Host setup on every node", pattern="all", phase="host"))
            return 2, "failed"
        for play in (
            "Host setup on every node",
            "GPU host setup on GPU nodes",
            "Reboot the hosts that need it",
        ):
            session.emit(PlayStart(name=play, pattern="all", phase="host"))
        return 0, "successful"

    root3 = tmp_path / "third"
    shutil.copytree(inventory, root3)
    (rc, status), started = _fake_steps(root3, a_shard_stops_early)
    assert (rc, started) == (2, ["run-1", "run-2-1", "run-2-2"])

    def a_shard_whose_hosts_all_died(session: Session, ident: str) -> tuple[int | None, str]:
        if ident == "run-2-2":  # n1 and n3: both unreachable in the first play, the playbook ends there
            session.emit(PlayStart(name=HOST_PLAYS[0], pattern="all", phase="host"))
            session.emit(
                PlaybookStats(hosts={"n1": HostCounts(unreachable=1), "n3": HostCounts(unreachable=1)})
            )
            return 4, "failed"
        for play in HOST_PLAYS if ident.startswith("run-2") else ():
            session.emit(PlayStart(name=play, pattern="all", phase="host"))
        return 0, "successful"

    root5 = tmp_path / "fifth"
    shutil.copytree(inventory, root5)
    (rc, status), started = _fake_steps(root5, a_shard_whose_hosts_all_died)
    assert (rc, started) == (4, ["run-1", "run-2-1", "run-2-2", "run-3"])  # verify runs on the others
    assert (LIMITS["run-2-2"], LIMITS["run-3"]) == ("n1,n3", "n2,n4,n5")

    def n3_fails_n5_unreachable(session: Session, ident: str) -> tuple[int | None, str]:
        for play in HOST_PLAYS if ident.startswith("run-2") else ():
            session.emit(PlayStart(name=play, pattern="all", phase="host"))
        if ident == "run-2-1":
            session.emit(PlaybookStats(hosts={"n3": HostCounts(failed=1), "n5": HostCounts(unreachable=1)}))
            return 2, "failed"
        return 0, "successful"

    root4 = tmp_path / "fourth"
    shutil.copytree(inventory, root4)
    (rc, status), started = _fake_steps(root4, n3_fails_n5_unreachable)
    # Preflight on the operator's --limit (none), each shard on its slice, verify on the hosts left.
    assert (rc, started) == (2, ["run-1", "run-2-1", "run-2-2", "run-3"])
    assert LIMITS["run-1"] is None
    assert sorted(",".join(filter(None, (LIMITS["run-2-1"], LIMITS["run-2-2"]))).split(",")) == list(HOSTS)
    assert LIMITS["run-3"] == "n1,n2,n4"


def test_preflight_and_verify_shards_then_the_once_steps_on_the_hosts_left(inventory: Path) -> None:
    """--only preflight,verify in two shards (the test's phase playbooks, split as playbooks/ is): n3
    fails preflight in its shard. The step after compares the others with all five hosts preflight read
    (gpubring_preflight_peers), then verify's per-host plays, per slice of the four left; the smoke and
    fabric tests run once on them, without gpubring_sharded (the smoke tests run there, not per shard)."""

    def n3_fails_preflight(session: Session, ident: str) -> tuple[int | None, str]:
        if ident.startswith("run-1-"):  # each shard's playbook ran to its last play
            session.emit(PlayStart(name="Preflight checks on every host", pattern="all", phase="preflight"))
        if ident.startswith("run-1-") and "n3" in str(LIMITS[ident]).split(","):
            session.emit(PlaybookStats(hosts={"n3": HostCounts(failed=1)}))
            return 2, "failed"
        return 0, "successful"

    (rc, _status), started = _fake_steps(inventory, n3_fails_preflight, phases=("preflight", "verify"))
    assert (rc, started) == (2, ["run-1-1", "run-1-2", "run-2-1", "run-2-2", "run-3"])
    assert [PLAYBOOKS[i] for i in ("run-1-1", "run-2-1", "run-3")] == [
        ["preflight"],
        ["preflight_collisions", "verify_hosts"],
        ["verify_smoke", "verify_fabric"],
    ]
    first = [set(str(LIMITS[f"run-1-{i}"]).split(",")) for i in (1, 2)]
    assert first[0] | first[1] == set(HOSTS) and not first[0] & first[1]
    second = [set(str(LIMITS[f"run-2-{i}"]).split(",")) for i in (1, 2)]
    assert second[0] | second[1] == {"n1", "n2", "n4", "n5"} and not second[0] & second[1]
    assert LIMITS["run-3"] == "n1,n2,n4,n5"
    for ident in ("run-1-1", "run-1-2"):
        assert VALUES[ident] == {"gpubring_sharded": True}
    for ident in ("run-2-1", "run-2-2"):
        assert VALUES[ident] == {"gpubring_sharded": True, "gpubring_preflight_peers": list(HOSTS)}
    assert VALUES["run-3"] == {}  # no -e file: the once step is as one process runs it


# What each host reports (host name, default IPv4): n1 (a control plane) and n4 (a GPU node) share a
# host name; the two shards put them apart (slices: n2, n4, n5 and n1, n3).
RECORDED = {
    "n1": ["alpha", "10.0.0.1"],
    "n2": ["beta", "10.0.0.2"],
    "n3": ["gamma", "10.0.0.3"],
    "n4": ["alpha", "10.0.0.4"],
    "n5": ["epsilon", "10.0.0.5"],
}


def _smoke_nodes(result: RunResult) -> list[str]:
    """What the smoke tests' stand-in found to test (the GPU nodes' RDMA devices), from the events."""
    found = []
    for path in sorted(result.run_folder.glob("artifacts/*/job_events/*.json")):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and data.get("task") == "Pick the GPU nodes to test":
            found.append(str(data["res"]["msg"]))
    return found


def test_hosts_that_collide_across_shards_fail_preflight_as_in_one_process(inventory: Path) -> None:
    """The real collision check (playbooks/preflight_collisions.yml,
    roles/preflight/tasks/collisions_apart.yml) after two preflight shards, on the facts they left in
    the fact cache: n1 and n4, read by different shards, both fail with one process's words, naming
    each other, and nothing of verify runs on them; the smoke tests (once, after verify's shards) find
    the GPU nodes left from the verdicts the shards kept. Checked to fail without the step: each shard
    saw one of the two hosts only, and passed it."""
    one = _run(inventory, 1, phases=("preflight", "verify"), recorded=RECORDED)
    two = _run(inventory, 2, phases=("preflight", "verify"), recorded=RECORDED)
    expected = [
        ("n1", "preflight: 1 problem(s) on n1:\nhost name alpha is also the host name of n4 in this play"),
        ("n4", "preflight: 1 problem(s) on n4:\nhost name alpha is also the host name of n1 in this play"),
    ]
    for result in (one, two):
        # the two shards' failures arrive in either order; each host's words are what one process says
        assert sorted((f.host, f.message) for f in result.state.final_failures()) == expected
        assert {f.task for f in result.state.final_failures()} == {
            "Fail a host that is not fit, with every problem"
        }
        assert result.exit_code == ExitCode.TASK_FAILED
        assert _smoke_nodes(result) == ["mlx5_n2 mlx5_n3"]  # the GPU nodes left, once
    assert [f.phase for f in two.state.final_failures()] == ["preflight", "preflight"]
    jobs = _limits(two)
    name = two.run_folder.name
    assert list(jobs) == [f"{name}-1-1", f"{name}-1-2", f"{name}-2-1", f"{name}-2-2", f"{name}-3"]
    assert {jobs[f"{name}-1-1"], jobs[f"{name}-1-2"]} == {"n2,n4,n5", "n1,n3"}  # n1 and n4 apart
    assert jobs[f"{name}-3"] == "n2,n3,n5"  # the smoke and fabric tests on the hosts left
    assert two.state.host_counts()["n1"].failed == two.state.host_counts()["n4"].failed == 1
