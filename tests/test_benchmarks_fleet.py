"""benchmarks/fleet_noop.py's pure parts: the fleet inventory it derives from a lab's, the /proc
sampling of a process tree (on a /proc tree built here), and the projection's arithmetic. The timed
runs themselves need a lab and are the benchmark's job (docs/fleet.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    # As when it runs as a script: benchmarks/ on the path (it imports lab_noop's helpers).
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("fleet_noop", REPO / "benchmarks" / "fleet_noop.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_noop"] = module
    spec.loader.exec_module(module)
    return module


fleet = _load()
TICK = fleet.CLK_TCK


# --- the fleet inventory ------------------------------------------------------------------------------

LAB_HOSTS = {
    "all": {
        "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": "/lab/.ssh/id_ed25519"},
        "children": {
            "control_plane": {"hosts": {"fl-cp1": {"ansible_host": "127.0.0.1", "ansible_port": 2201}}},
            "gpu_nodes": {"hosts": {"fl-gpu1": {"ansible_host": "127.0.0.1", "ansible_port": 2202}}},
            "cpu_nodes": {"hosts": {"fl-cpu1": {"ansible_host": "127.0.0.1", "ansible_port": 2203}}},
        },
    }
}


def test_alias_names_are_distinct_dns_labels_in_order() -> None:
    assert fleet.alias_names("fl-gpu1", 3) == ["fl-gpu1-a00", "fl-gpu1-a01", "fl-gpu1-a02"]
    many = fleet.alias_names("n", 120)
    assert len(set(many)) == 120
    assert many[0] == "n-a000"
    assert many[-1] == "n-a119"
    with pytest.raises(ValueError, match="aliases: expected 1 or more"):
        fleet.alias_names("n", 0)


def test_alias_plan_gives_control_planes_an_odd_count() -> None:
    plan = fleet.alias_plan(LAB_HOSTS, 10)
    assert plan["fl-cp1"] == ["fl-cp1-a00", "fl-cp1-a01", "fl-cp1-a02"]  # 1 or an odd number of them
    assert len(plan["fl-gpu1"]) == len(plan["fl-cpu1"]) == 10
    assert fleet.alias_plan(LAB_HOSTS, 2)["fl-cp1"] == ["fl-cp1-a00"]
    assert fleet.alias_plan(LAB_HOSTS, 1) == {h: [f"{h}-a00"] for h in ("fl-cp1", "fl-gpu1", "fl-cpu1")}


def test_fleet_hosts_names_each_alias_as_its_own_ssh_host() -> None:
    lab = {"all": {**LAB_HOSTS["all"], "vars": {
        **LAB_HOSTS["all"]["vars"],
        "ansible_ssh_common_args": "-o UserKnownHostsFile=/lab/.ssh/known_hosts -o StrictHostKeyChecking=yes",
    }}}  # fmt: skip
    plan = fleet.alias_plan(lab, 2)
    hosts = fleet.fleet_hosts(lab, plan, "/fleet/ssh_config")
    top = hosts["all"]["vars"]
    assert top["ansible_ssh_common_args"] == (
        "-F /fleet/ssh_config -o UserKnownHostsFile=/lab/.ssh/known_hosts -o StrictHostKeyChecking=yes"
    )  # the lab's known_hosts, host key checking stays on
    assert top["ansible_user"] == "root"
    children = hosts["all"]["children"]
    assert set(children) == {"control_plane", "gpu_nodes", "cpu_nodes"}
    assert children["gpu_nodes"]["hosts"] == {
        "fl-gpu1-a00": {"ansible_port": 2202},
        "fl-gpu1-a01": {"ansible_port": 2202},
    }
    assert list(children["control_plane"]["hosts"]) == ["fl-cp1-a00"]
    # The lab's own data is not changed (the next alias count derives from it again).
    assert LAB_HOSTS["all"]["children"]["gpu_nodes"]["hosts"]["fl-gpu1"]["ansible_host"] == "127.0.0.1"
    assert fleet.ssh_config_lines(lab, plan) == [
        "Host fl-cp1-a00", "  HostName 127.0.0.1",
        "Host fl-gpu1-a00", "  HostName 127.0.0.1",
        "Host fl-gpu1-a01", "  HostName 127.0.0.1",
        "Host fl-cpu1-a00", "  HostName 127.0.0.1",
        "Host fl-cpu1-a01", "  HostName 127.0.0.1",
    ]  # fmt: skip


def _lab_folder(tmp_path: Path) -> Path:
    lab = tmp_path / "lab"
    (lab / "group_vars" / "all").mkdir(parents=True)
    (lab / "group_vars" / "all" / "lab.yml").write_text("gpubring_serial: 100%\n")
    (lab / "host_vars" / "fl-gpu1").mkdir(parents=True)
    (lab / "host_vars" / "fl-gpu1" / "lab.yml").write_text("nvidia_driver_kernel_modules: proprietary\n")
    (lab / "hosts.yml").write_text(yaml.safe_dump(LAB_HOSTS))
    return lab


def test_write_fleet_inventory_copies_group_and_host_vars_per_alias(tmp_path: Path) -> None:
    lab = _lab_folder(tmp_path)
    out = tmp_path / "fleet"
    (out / "stale").mkdir(parents=True)  # a previous fleet's folder is replaced, not merged
    plan = fleet.alias_plan(LAB_HOSTS, 3)
    names = fleet.write_fleet_inventory(lab, out, plan)
    assert len(names) == 9
    assert not (out / "stale").exists()
    written = yaml.safe_load((out / "hosts.yml").read_text())
    assert sorted(h for g in written["all"]["children"].values() for h in g["hosts"]) == names
    assert written["all"]["vars"]["ansible_ssh_common_args"] == f"-F {(out / 'ssh_config').resolve()}"
    assert (out / "ssh_config").read_text().count("  HostName 127.0.0.1\n") == 9
    assert (out / "group_vars" / "all" / "lab.yml").read_text() == "gpubring_serial: 100%\n"
    assert yaml.safe_load((out / "group_vars" / "all" / "fleet.yml").read_text()) == {
        "preflight_check_collisions": False,
        "ansible_ssh_timeout": 60,
    }
    assert sorted(p.name for p in (out / "host_vars").iterdir()) == fleet.alias_names("fl-gpu1", 3)
    assert (out / "host_vars" / "fl-gpu1-a02" / "lab.yml").read_text().startswith("nvidia_driver_kernel")


def test_gpubring_accepts_the_fleet_inventory_and_refuses_aliases_on_one_endpoint(tmp_path: Path) -> None:
    """gpubring's own validation: aliases sharing ansible_host and port are refused (one host twice),
    the fleet's names, each its own SSH host, load."""
    from helpers import inventory_problems

    lab = _lab_folder(tmp_path)
    out = tmp_path / "fleet"
    fleet.write_fleet_inventory(lab, out, fleet.alias_plan(LAB_HOSTS, 3))
    assert inventory_problems(out) == []
    naive = yaml.safe_load((out / "hosts.yml").read_text())
    for group in naive["all"]["children"].values():
        for hostvars in group["hosts"].values():
            hostvars["ansible_host"] = "127.0.0.1"
    (out / "hosts.yml").write_text(yaml.safe_dump(naive))
    assert any("expected an address no other host uses" in p for p in inventory_problems(out))


# --- /proc sampling -------------------------------------------------------------------------------------


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int, *, start: int = 1000) -> str:
    # Fields 3.. of proc(5): state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    # stime cutime cstime priority nice threads itrealvalue starttime ...
    rest = [ppid, 1, 1, 0, -1, 0, 0, 0, 0, 0, utime, stime, 0, 0, 20, 0, 1, 0, start, 1, 1]
    return f"{pid} ({comm}) S " + " ".join(map(str, rest)) + "\n"


def _proc(root: Path, procs: dict[int, tuple[str, int, int, int, str]]) -> None:
    """Write /proc/<pid>/{stat,cmdline} for (comm, ppid, utime, stime, cmdline) entries; others removed."""
    for old in root.glob("[0-9]*"):
        if int(old.name) not in procs:
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
    for pid, (comm, ppid, utime, stime, cmdline) in procs.items():
        d = root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "stat").write_text(_stat(pid, comm, ppid, utime, stime))
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")


def test_parse_stat_reads_names_with_spaces_and_parentheses() -> None:
    st = fleet.parse_stat(_stat(42, "odd) name (x", 7, 150, 50, start=4321))
    assert (st.pid, st.comm, st.ppid, st.cpu_ticks, st.start) == (42, "odd) name (x", 7, 200, 4321)


def test_tree_sampler_keeps_each_descendant_and_counts_the_reparented(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "self").mkdir()  # not a pid: ignored
    _proc(proc, {
        1: ("init", 0, 5000, 5000, "/sbin/init"),
        100: ("python", 1, 100, 0, "python -m gpubring up inv"),
        101: ("ansible-playboo", 100, 300, 100, "ansible-playbook run.yml"),
        102: ("ansible-playboo", 101, 20, 0, "ansible-playbook run.yml"),
        103: ("ssh", 102, 1, 0, "ssh -o ControlMaster=auto host"),
        500: ("other", 1, 9000, 0, "someone else"),
    })  # fmt: skip
    sampler = fleet.TreeSampler(100, proc)
    sampler.sample(1.0)
    assert {pid for pid, _ in sampler.seen} == {100, 101, 102, 103}
    # The ssh client forked its ControlPersist master (104); then the worker and the client end and the
    # master is re-parented to init, and gpubring ends before its ansible-playbook (re-parented too).
    _proc(proc, {
        1: ("init", 0, 5000, 5000, "/sbin/init"),
        100: ("python", 1, 110, 0, "python -m gpubring up inv"),
        101: ("ansible-playboo", 100, 600, 200, "ansible-playbook run.yml"),
        102: ("ansible-playboo", 101, 20, 0, "ansible-playbook run.yml"),
        103: ("ssh", 102, 1, 0, "ssh -o ControlMaster=auto host"),
        104: ("ssh", 103, 3, 0, "ssh: /tmp/cp/host [mux]"),
        500: ("other", 1, 9900, 0, "someone else"),
    })  # fmt: skip
    sampler.sample(2.0)
    _proc(proc, {
        1: ("init", 0, 5000, 5000, "/sbin/init"),
        101: ("ansible-playboo", 1, 600, 200, "ansible-playbook run.yml"),
        104: ("ssh", 1, 7, 1, "ssh: /tmp/cp/host [mux]"),
    })  # fmt: skip
    sampler.sample()
    assert {pid for pid, _ in sampler.seen} == {100, 101, 102, 103, 104}
    assert 500 not in {pid for pid, _ in sampler.seen}
    # 104 was seen in the tree, then under init: its last reading counts; nobody of ours reaps it.
    assert sampler.orphaned_seconds() == pytest.approx((8 + 800) / TICK)
    # 101 was also seen under init once 100 ended: re-parented, so it counts as well.
    assert sampler.seen[(101, 1000)].orphaned
    busiest, seconds = sampler.busiest()
    assert busiest == "ansible-playbook run.yml"
    assert seconds == pytest.approx(800 / TICK)
    assert sampler.busiest("ssh") == ("ssh: /tmp/cp/host [mux]", pytest.approx(8 / TICK))
    assert sampler.root_seconds() == pytest.approx(110 / TICK)
    assert sampler.first_seen("ssh") == 1.0
    assert sampler.first_seen("none") is None
    by_command = sampler.by_command()
    assert by_command["ansible-playboo"] == pytest.approx(820 / TICK)
    assert by_command["ssh"] == pytest.approx(9 / TICK)
    assert by_command["python"] == pytest.approx(110 / TICK)


def test_tree_sampler_tells_a_reused_pid_from_the_first(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "stat").write_text(_stat(7, "python", 1, 10, 0, start=1))
    (proc / "8").mkdir()
    (proc / "8" / "stat").write_text(_stat(8, "worker", 7, 30, 0, start=2))
    sampler = fleet.TreeSampler(7, proc)
    sampler.sample()
    (proc / "8" / "stat").write_text(_stat(8, "worker", 7, 5, 0, start=9))  # pid 8 again, a new process
    sampler.sample()
    assert sorted(t.stat.cpu_ticks for (pid, _), t in sampler.seen.items() if pid == 8) == [5, 30]


def test_cpu_times_and_busy_share_from_proc_stat(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n")
    before = fleet.cpu_times(tmp_path)
    assert before == (150, 1000)
    (tmp_path / "stat").write_text("cpu  190 0 80 840 50 0 0 0 0 0\n")
    after = fleet.cpu_times(tmp_path)
    assert fleet.busy_share(before, after) == pytest.approx(120 / 160)


# --- the projection -----------------------------------------------------------------------------------


COST = fleet.Cost(
    per_host_cpu=1.6, root_per_host=0.05, once_per_host=0.02, host_per_host=0.4, checks_per_host=0.2,
    measured_shards=2, per_process_cpu=0.0, startup_s=3.0, round_s=0.02, tasks_once=10, tasks_host=200,
    tasks_checks=40,
)  # fmt: skip


def test_project_takes_the_longest_of_cpu_over_cores_the_busiest_process_and_the_task_rounds() -> None:
    p = fleet.project(COST, hosts=100, cores=16, shards=16, forks=10)
    assert p.check_shards == 12  # gpubring_shards auto: one per 8 hosts
    assert p.cpu_bound_s == pytest.approx(10.0)  # 160 CPU-s over 16 cores
    assert p.serial_bound_s == pytest.approx(100 * (0.02 + 0.4 * 2 / 16 + 0.2 * 2 / 12))
    # 10 tasks in 10 rounds (once, 10 forks), 200 in one round (16 x 10 forks), 40 in one (12 x 10)
    assert p.latency_bound_s == pytest.approx(0.02 * (10 * 10 + 200 * 1 + 40 * 1))
    assert p.wall_s == pytest.approx(3.0 + 100 * (0.02 + 0.05 + 0.4 / 12))  # the path: 10.3 s > 10 s
    assert p.wall_upper_s == pytest.approx(3.0 + p.serial_bound_s + p.latency_bound_s)
    big = fleet.project(COST, hosts=1000, cores=16, shards=16, forks=10)
    assert big.check_shards == 16
    assert big.latency_bound_s == pytest.approx(0.02 * (10 * 100 + 200 * 7 + 40 * 7))  # ceil(1000/160)
    assert big.wall_s == pytest.approx(3.0 + 100.0)  # 1,600 CPU-s over 16 cores
    many_forks = fleet.project(COST, hosts=1000, cores=16, shards=16, forks=50)
    assert many_forks.latency_bound_s == pytest.approx(0.02 * (10 * 20 + 200 * 2 + 40 * 2))
    one_process = fleet.project(COST, hosts=1000, cores=16, shards=1, forks=10)
    assert one_process.check_shards == 1
    assert one_process.serial_bound_s == pytest.approx(1000 * (0.02 + 0.8 + 0.4))  # nothing split


def test_project_shards_preflight_and_verify_as_gpubring_shards_auto_does() -> None:
    assert [fleet.auto_check_shards(n, 16) for n in (1, 15, 16, 23, 100, 1000)] == [1, 1, 2, 2, 12, 16]
    assert fleet.auto_check_shards(100, 4) == 4  # never more than the host phase's
    small = fleet.project(COST, hosts=10, cores=16, shards=10, forks=10)
    assert small.check_shards == 1  # below 16 hosts preflight and verify run as one process
    assert small.serial_bound_s == pytest.approx(10 * (0.02 + 0.4 * 2 / 10 + 0.2 * 2))
    asked = fleet.project(COST, hosts=10, cores=16, shards=10, forks=10, check_shards=10)
    assert asked.serial_bound_s == pytest.approx(10 * (0.02 + 0.4 * 2 / 10 + 0.2 * 2 / 10))


def test_project_adds_what_each_further_playbook_process_costs() -> None:
    costly = fleet.Cost(**{**COST.__dict__, "per_process_cpu": 4.0})
    p = fleet.project(costly, hosts=100, cores=16, shards=16, forks=10)
    assert p.processes == 16 + 2 * 12 + 1  # host phase, preflight, verify, the once-only step
    assert p.cpu_bound_s == pytest.approx((160 + 40 * 4.0) / 16)
    assert fleet.project(costly, hosts=1, cores=16, shards=1, forks=10).processes == 1
    assert fleet.project(costly, hosts=10, cores=16, shards=10, forks=10).processes == 12  # checks whole
    assert [fleet.playbook_processes(s, c) for s, c in ((1, 1), (2, 1), (2, 2), (16, 16))] == [1, 4, 7, 49]


def test_project_never_splits_gpubrings_own_process() -> None:
    heavy_root = fleet.Cost(**{**COST.__dict__, "root_per_host": 0.5})
    p = fleet.project(heavy_root, hosts=100, cores=16, shards=16, forks=50)
    assert p.serial_bound_s == pytest.approx(50.0)  # 0.5 s per host in the one gpubring process
    assert p.wall_s == pytest.approx(53.0)


def test_split_costs_tells_the_once_steps_the_host_phase_and_the_sharded_checks_apart() -> None:
    def seg(step: int, busiest: float, parts: list[str]) -> dict[str, object]:
        return {"playbook": f"run-{step}.yml", "busiest_s": busiest, "total_s": busiest, "parts": parts}

    row = {
        "hosts": 10,
        "segments": [
            seg(1, 2.0, ["preflight"]), seg(1, 2.5, ["preflight"]),  # preflight's shards
            seg(2, 5.0, ["preflight_collisions", "host"]), seg(2, 6.0, ["preflight_collisions", "host"]),
            seg(3, 1.0, ["verify_hosts"]), seg(3, 1.5, ["verify_hosts"]),
            seg(4, 0.7, ["verify_smoke", "verify_fabric"]),  # once, one process
        ],
    }  # fmt: skip
    assert fleet.split_costs(row) == (pytest.approx(0.07), pytest.approx(0.6), pytest.approx(0.4))
    # a row measured before the parts were recorded: a sharded step is the host phase's, as then
    old = {"hosts": 10, "segments": [
        {"playbook": "/r/segment-1.yml", "busiest_s": 2.0, "total_s": 3.0},
        {"playbook": "/r/segment-2.yml", "busiest_s": 5.0, "total_s": 6.0},
        {"playbook": "/r/segment-2.yml", "busiest_s": 6.0, "total_s": 7.0},
    ]}  # fmt: skip
    assert fleet.split_costs(old) == (pytest.approx(0.2), pytest.approx(0.6), 0.0)


def test_step_parts_reads_the_generated_step_playbook(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    step = [
        {"name": "Phase preflight", "ansible.builtin.import_playbook": "/p/preflight_collisions.yml"},
        {"name": "Phase host (host)", "ansible.builtin.import_playbook": "/p/host.yml"},
    ]
    (tmp_path / "project" / "run-2.yml").write_text(yaml.safe_dump(step))
    assert fleet.step_parts(Path("run-2.yml"), tmp_path) == ["preflight_collisions", "host"]
    assert fleet.step_parts(tmp_path / "project" / "run-2.yml") == ["preflight_collisions", "host"]
    assert fleet.step_parts(Path("run-9.yml"), tmp_path) == []


def test_play_phases_maps_every_play_of_the_phase_parts_and_nothing_else() -> None:
    plays = fleet.play_phases(REPO / "playbooks")
    assert plays["Preflight checks on every host"] == "preflight"
    assert plays["Compare host names and addresses across the hosts of preflight"] == "preflight_collisions"
    assert plays["Host setup on every node"] == "host"
    assert plays["Verify every host and the cluster"] == "verify_hosts"
    assert plays["Test the cluster once after the verify shards"] == "verify_smoke"
    assert plays["Test the GPU fabric in the cluster"] == "verify_fabric"
    assert set(plays.values()) <= set(fleet.PART_PHASE)  # no node_add.yml, upgrade.yml, site.yml
    assert "Verify every host" not in plays  # verify.yml's import entry is no play
    kinds = [fleet.task_kind(p) for p in ("host", "preflight", "verify_hosts", "verify_smoke", "?")]
    assert kinds == ["host", "checks", "checks", "once", "once"]


def test_segments_groups_forks_under_their_main_process(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    _proc(proc, {
        10: ("python", 1, 50, 0, "python -m gpubring up inv"),
        11: ("ansible-playboo", 10, 300, 0, "ansible-playbook -i hosts.yml /r/project/segment-2.yml"),
        12: ("ansible-playboo", 11, 40, 0, "ansible-playbook -i hosts.yml /r/project/segment-2.yml"),
        13: ("ansible-playboo", 10, 200, 0, "ansible-playbook -l a,b /r/project/segment-2.yml"),
        14: ("ssh", 12, 5, 0, "ssh host"),
    })  # fmt: skip
    sampler = fleet.TreeSampler(10, proc)
    sampler.sample(0.0)
    segments = sorted(sampler.segments(fleet.PLAYBOOK), key=lambda g: -g["busiest_s"])
    seg = "/r/project/segment-2.yml"
    assert segments == [
        {"playbook": seg, "busiest_s": pytest.approx(300 / TICK), "total_s": pytest.approx(340 / TICK)},
        {"playbook": seg, "busiest_s": pytest.approx(200 / TICK), "total_s": pytest.approx(200 / TICK)},
    ]


def test_phase_tasks_counts_results_per_phase_and_host_from_the_job_events(tmp_path: Path) -> None:
    events = tmp_path / "run" / "artifacts" / "job1" / "job_events"
    events.mkdir(parents=True)
    results = [("preflight", "h1", "runner_on_ok"), ("preflight", "h1", "runner_on_skipped"),
               ("preflight", "h2", "runner_on_ok"), ("host", "h1", "runner_on_ok"),
               ("host", "h2", "runner_on_ok"), ("host", "h2", "runner_on_failed"),
               ("host", "h2", "playbook_on_task_start"),
               ("verify", "h1", "runner_on_unreachable")]  # fmt: skip
    for n, (phase, host, event) in enumerate(results):
        play = {"preflight": "Preflight checks on every host", "host": "GPU host setup on GPU nodes"}.get(
            phase
        )
        data = {
            "event": event,
            "event_data": {"playbook": "/run/project/run.yml", "play": play, "host": host},
        }
        (events / f"{n}-x.json").write_text(json.dumps(data))
    (events / "broken.json").write_text("{")
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"run_folder": str(tmp_path / "run")}))
    # verify's play here has no name of playbooks/verify.yml: the event's playbook names it then
    assert fleet.phase_tasks(report) == {"preflight": 2, "host": 2, "run": 1}


# --- rows saved as measured, the summary and the goals ---------------------------------------------------


def _row(aliases: int, shards: int, hosts: int, **figures: object) -> dict[str, object]:
    row: dict[str, object] = {
        "aliases": aliases, "shards": shards, "shard_label": f"--shards {shards}", "hosts": hosts,
        "wall_s": 100.0, "changed": 0, "tasks_per_host": 298, "controller_cpu_s": 10.0 * hosts,
        "busiest_cpu_s": 3.0 * hosts, "root_cpu_s": 0.5 * hosts, "cpu_busy": 0.87, "nodes_cpu_s": 70.0,
        "startup_s": 4.0, "segments": [], "phase_tasks": {},
    }  # fmt: skip
    row.update(figures)
    return row


NOOP_TASKS = {
    "preflight": 16, "preflight_collisions": 1, "host": 4, "verify_hosts": 60, "verify_smoke": 3,
    "verify_fabric": 216,
}  # fmt: skip
ONE_SHARD = _row(10, 1, 23, phase_tasks=NOOP_TASKS)
TWO_SHARDS = _row(10, 2, 23, busiest_cpu_s=1.5 * 23, controller_cpu_s=11.0 * 23, cpu_busy=0.95, segments=[
    {"playbook": "/r/up-1.yml", "busiest_s": 0.2 * 23, "total_s": 0.3 * 23},
    {"playbook": "/r/up-2.yml", "busiest_s": 1.5 * 23, "total_s": 4.0 * 23},
    {"playbook": "/r/up-2.yml", "busiest_s": 1.4 * 23, "total_s": 4.0 * 23},
    {"playbook": "/r/up-3.yml", "busiest_s": 0.5 * 23, "total_s": 1.0 * 23},
])  # fmt: skip
# the small fleet's first run of its inventory: the host phase's roles ran (not left out)
SMALL = _row(1, 1, 3, wall_s=24.0, phase_tasks={**NOOP_TASKS, "host": 180, "verify_fabric": 40})


def test_fleet_hosts_leaves_out_the_lab_hosts_the_plan_does_not_name() -> None:
    plan = {"fl-cp1": ["fl-cp1-a00"], "fl-gpu1": ["fl-gpu1-a00", "fl-gpu1-a01"]}
    hosts = fleet.fleet_hosts(LAB_HOSTS, plan, "/fleet/ssh_config")["all"]["children"]
    assert hosts["cpu_nodes"]["hosts"] == {}
    assert list(hosts["gpu_nodes"]["hosts"]) == ["fl-gpu1-a00", "fl-gpu1-a01"]
    assert len(fleet.ssh_config_lines(LAB_HOSTS, plan)) == 6


def test_rows_are_saved_as_measured_and_summarised_from_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fleet.json"
    fleet.save_rows(out, [ONE_SHARD], 10, 10, done=False)  # a run killed after its first row
    assert json.loads(out.read_text())["complete"] is False
    assert not out.with_name("fleet.json.tmp").exists()
    rows, aliases, forks = fleet.load_rows(out)
    assert (rows, aliases, forks) == ([ONE_SHARD], 10, 10)
    fleet.summarise(rows, aliases, forks, out)
    printed = capsys.readouterr().out
    assert "| 23 | --shards 1 | 100.0 | 0 | 298 | 10.00 | 3.00 | 30% | 0.50 | 87% | 70 |" in printed
    assert "projected 1000 host(s) on 16 cores, 16 shard(s) of 50 forks" in printed
    assert "shards: no sharded row measured" in printed
    assert "controller CPU per host per no-op 10.00 s (goal <= 2 s): not met" in printed
    saved = json.loads(out.read_text())
    assert saved["rows"] == [ONE_SHARD]  # the rows stay; the projection is added beside them
    assert saved["cost"]["per_host_cpu"] == pytest.approx(10.0)
    assert len(saved["projections"]) == 6  # 1, 100, 1,000 hosts at forks 10 and 50


def test_measured_cost_takes_each_figure_from_its_row() -> None:
    cost = fleet.measured_cost([ONE_SHARD, TWO_SHARDS, SMALL], 10)
    assert cost is not None
    assert cost.per_host_cpu == pytest.approx(10.0)  # the one-shard row of the full fleet
    assert cost.once_per_host == pytest.approx(0.7)  # up-1 0.2 + up-3 0.5 (one process each)
    assert cost.host_per_host == pytest.approx(1.5)  # the busiest shard (no parts recorded: host)
    assert cost.checks_per_host == 0.0
    assert cost.measured_shards == 2
    assert cost.per_process_cpu == pytest.approx(23.0 / 3)  # 23 CPU-s more in 4 processes than in 1
    assert cost.startup_s == pytest.approx(4.0)
    assert cost.round_s == pytest.approx(20.0 / 300)  # the small fleet: (24 - 4) s over its 300 tasks
    # the tasks of the no-op: the full fleet's (host phase left out: 4), not the small fleet's (180)
    assert (cost.tasks_once, cost.tasks_host, cost.tasks_checks) == (220, 4, 76)
    assert fleet.measured_cost([SMALL], 10) is None


def test_goal_lines_give_each_goal_its_figure_and_verdict() -> None:
    rows = [ONE_SHARD, TWO_SHARDS, SMALL]
    cost = fleet.measured_cost(rows, 10)
    assert cost is not None
    lines = fleet.goal_lines(rows, 10, fleet.projections_of(cost, 10), 10)
    assert lines[0] == "controller CPU per host per no-op 10.00 s (goal <= 2 s): not met"
    assert lines[1] == (
        "--shards 2: the busiest process carries 50% of the CPU-seconds per host of the busiest with one "
        "shard (goal <= 55 %): met; CPUs 95% busy (goal >= 90 %): met"
    )
    assert [line.split(":")[0] for line in lines[2:]] == [
        "projected 1 host(s) on 16 cores, forks 10",
        "projected 100 host(s) on 16 cores, forks 10",
        "projected 1000 host(s) on 16 cores, forks 10",
    ]
    assert lines[-1].endswith("(goal <= 600 s): not met")  # 10 CPU-s x 1,000 / 16 cores alone: 625 s
    assert fleet._verdict(50.0, 90.0, 120.0) == "met"
    assert fleet._verdict(100.0, 130.0, 120.0).startswith("open")
    assert fleet._verdict(121.0, 130.0, 120.0) == "not met"


# --- node add into inventories of growing size (benchmarks/node_add.py) -----------------------------------


def _load_node_add() -> ModuleType:
    spec = importlib.util.spec_from_file_location("node_add", REPO / "benchmarks" / "node_add.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


node_add = _load_node_add()


def test_node_add_plans_the_converged_nodes_under_aliases_and_one_fresh_node_alone() -> None:
    lab = {"all": {"children": {**LAB_HOSTS["all"]["children"], "cpu_nodes": {"hosts": {
        "fl-cpu1": {"ansible_host": "127.0.0.1", "ansible_port": 2203},
        "fl-cpu2": {"ansible_host": "127.0.0.1", "ansible_port": 2204},
        "fl-cpu3": {"ansible_host": "127.0.0.1", "ansible_port": 2205},
    }}}}}  # fmt: skip
    fresh = node_add.fresh_nodes("fl", 1, 2)
    assert fresh == ["fl-cpu2", "fl-cpu3"]
    plan = node_add.add_plan(lab, 10, fresh, "fl-cpu3")
    assert set(plan) == {"fl-cp1", "fl-gpu1", "fl-cpu1", "fl-cpu3"}  # fl-cpu2 is not in it yet
    assert plan["fl-cpu3"] == ["fl-cpu3-a00"]
    assert node_add.inventory_hosts(plan, "fl-cpu3") == 3 + 10 + 10
    assert node_add.inventory_hosts(node_add.add_plan(lab, 1, fresh, "fl-cpu2"), "fl-cpu2") == 3


def test_node_add_scaling_lines_give_the_ratios_and_the_slope() -> None:
    adds = [
        {"inventory_hosts": 3, "wall_s": 60.0},
        {"inventory_hosts": 23, "wall_s": 61.0},
        {"inventory_hosts": 63, "wall_s": 66.0},
    ]
    lines = node_add.scaling_lines(50.0, adds)
    assert lines[0] == (
        "3 hosts in the inventory: node add 60.0 s, 1.20x the lone node's preflight + host (50.0 s), "
        "1.00x the node add into 3"
    )
    assert lines[2].startswith("63 hosts in the inventory: node add 66.0 s, 1.32x")
    assert lines[2].endswith("1.10x the node add into 3")
    assert lines[3] == "slope: +100 ms per inventory host from 3 to 63 hosts"
    assert node_add.scaling_lines(50.0, []) == []


def test_measured_cost_without_the_small_fleet_counts_the_full_fleets_rounds() -> None:
    cost = fleet.measured_cost([ONE_SHARD], 10, forks=10)
    assert cost is not None
    # 23 hosts at 10 forks: each of the 300 tasks took 3 rounds of the (100 - 4) s
    assert cost.round_s == pytest.approx(96.0 / (300 * 3))
    assert fleet.measured_cost([ONE_SHARD], 10, forks=50).round_s == pytest.approx(96.0 / 300)
    bare = _row(10, 1, 23)  # no job events read: the busiest host's results (298)
    assert fleet.measured_cost([bare], 10, forks=50).round_s == pytest.approx(96.0 / 298)
