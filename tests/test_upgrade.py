"""`gpubring upgrade`: the plan from gpubring's record (hops, batches, what each node gets), the hop rule
(the CLI's and the role's, on one table), the record kept by successful runs, and the refusals before
any host. The playbook itself runs on the lab in tests/test_e2e_lab.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from gpubring import hops, upgrade, versions
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from helpers import REPO

# The scenarios follow versions.yml's pins (a pin change must not break them): the Kubernetes pin and
# releases one, two and three minor releases below it, one above, and a major below.
PIN = str(versions.load_pinned()["kubernetes"]["version"])
_MAJOR, _MINOR, _PATCH = (int(part) for part in PIN.split("."))


def _release(minor: int, patch: int, major: int = _MAJOR) -> str:
    return f"{major}.{minor}.{patch}"


def _path(*minors: int) -> str:
    return " -> ".join(f"{_MAJOR}.{m}" for m in minors)


ONE_BELOW = _release(_MINOR - 1, 5)  # one minor release below the pin: a supported upgrade
TWO_BELOW = _release(_MINOR - 2, 7)  # two below: kubeadm refuses the skipped minor release
THREE_BELOW = _release(_MINOR - 3, 0)
OLD_DRIVER = "580.82.07"  # an older release of the 580 branch than the pin (test_the_pin_is_... checks)
CPS = ("cp-1", "cp-2", "cp-3")
GPUS = ("gpu-1", "gpu-2", "gpu-3", "gpu-4")


def cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["upgrade", *map(str, args)], env={"COLUMNS": "300"})
    return result.exit_code, result.output


def write_record(
    root: Path, hosts: dict[str, dict[str, str]], releases: dict[str, str] | None = None
) -> None:
    path = root / ".gpubring" / "installed.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": 1, "hosts": hosts, "releases": releases or {}, "runs": {}}
    path.write_text(json.dumps(data))


def at_pins(inventory: Path) -> dict[str, dict[str, str]]:
    """The record of a cluster at the pins, as a successful `gpubring up` leaves it."""
    inv = load_inventory(inventory)
    report = {"exit_code": 0, "check": False, "partial": [], "stats": {key: {} for key in inv.hosts}}
    assert upgrade.record_run(inv, report, ("host", "cluster", "platform"))
    return upgrade.load_installed(inventory).hosts  # type: ignore[return-value]


def test_the_pin_is_what_the_tests_assume(sample_inventory: Path) -> None:
    """The sample inventory runs at versions.yml's pins, and the derived scenarios mean what they say."""
    inv = load_inventory(sample_inventory)
    assert inv.versions["kubernetes"]["version"] == PIN
    assert _MINOR >= 3, "the scenarios need three minor releases below the pin"
    driver = str(inv.versions["nvidia_driver"]["version"])
    old, new = versions.parse_version(OLD_DRIVER), versions.parse_version(driver)
    assert old and new and old[0] == new[0] and old < new, (OLD_DRIVER, driver)


# -- the hop rule: the CLI's check_hop and the role's hop.yml agree ---------------------------------

HOPS = [
    (ONE_BELOW, PIN, None),
    (_release(_MINOR, 0), PIN, None),
    (PIN, PIN, None),
    (TWO_BELOW, PIN, "2 minor releases at once"),
    (THREE_BELOW, PIN, _path(_MINOR - 3, _MINOR - 2, _MINOR - 1, _MINOR)),
    (_release(_MINOR, _PATCH + 1), PIN, "downgrade"),
    (_release(_MINOR + 1, 0), PIN, "downgrade"),
    (_release(_MINOR, _PATCH, _MAJOR - 1), PIN, "major"),
]


@pytest.mark.parametrize(("current", "target", "refused"), HOPS)
def test_the_cli_hop_rule(current: str, target: str, refused: str | None) -> None:
    if refused is None:
        upgrade.check_hop(current, target, "cp-1")
        return
    with pytest.raises(upgrade.UpgradeError, match=refused):
        upgrade.check_hop(current, target, "cp-1")


def test_the_role_refuses_what_the_cli_refuses(tmp_path: Path) -> None:
    """roles/cluster_upgrade/tasks/hop.yml, run by ansible-playbook on each case of the same table."""
    case = tmp_path / "case.yml"
    case.write_text(
        "- block:\n"
        f"    - ansible.builtin.include_tasks: {REPO}/roles/cluster_upgrade/tasks/hop.yml\n"
        "    - ansible.builtin.set_fact: {results: \"{{ results + [''] }}\"}\n"
        "  rescue:\n"
        '    - ansible.builtin.set_fact: {results: "{{ results + [ansible_failed_result.msg] }}"}\n'
    )
    play = tmp_path / "play.yml"
    cases = [{"from": c, "to": t} for c, t, _ in HOPS]
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  vars:\n    results: []\n"
        f"    cases: {json.dumps(cases)}\n"
        "  tasks:\n"
        "    - ansible.builtin.include_tasks: case.yml\n"
        "      vars: {__cluster_upgrade_from: '{{ item.from }}', cluster_upgrade_version: '{{ item.to }}',"
        " __cluster_upgrade_what: the cluster}\n"
        "      loop: '{{ cases }}'\n"
        "    - ansible.builtin.debug: {var: results}\n"
    )
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
        capture_output=True,
        text=True,
        check=False,
        env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout)
    results = out["plays"][0]["tasks"][-1]["hosts"]["localhost"]["results"]
    assert len(results) == len(HOPS)
    for (current, target, refused), said in zip(HOPS, results, strict=True):
        if refused is None:
            assert said == "", (current, target, said)
        else:
            assert refused in said, (current, target, said)
            assert "the cluster runs Kubernetes " + current in said, said


# -- batches: what Ansible makes of a play's serial -------------------------------------------------


@pytest.mark.parametrize(
    ("count", "serial"),
    [
        (5, "25%"),
        (8, "25%"),
        (3, "25%"),
        (10, "3"),
        (10, "1"),
        (7, "100%"),
        (10, "[1, 30%]"),
        (9, "['1', '2', 50%]"),
    ],
)
def test_batches_are_ansibles(count: int, serial: str) -> None:
    """Against ansible-core's own PlaybookExecutor._get_serialized_batches."""
    import yaml
    from ansible.executor.playbook_executor import PlaybookExecutor

    hosts = [f"w{i}" for i in range(count)]
    executor = PlaybookExecutor.__new__(PlaybookExecutor)
    executor._inventory = SimpleNamespace(get_hosts=lambda *_a, **_k: list(hosts))  # type: ignore[assignment]
    value = yaml.safe_load(serial)
    play: Any = SimpleNamespace(hosts="all", order=None, serial=value if isinstance(value, list) else [value])
    theirs = [tuple(batch) for batch in executor._get_serialized_batches(play)]
    assert upgrade.batches(hosts, serial) == theirs


# -- the plan ---------------------------------------------------------------------------------------


def test_without_a_record_every_node_is_listed_in_order(sample_inventory: Path) -> None:
    plan = upgrade.plan_upgrade(
        load_inventory(sample_inventory), upgrade.Installed({}, {}, {}, Path("/none"))
    )
    assert plan.first is not None and plan.first.name == "cp-1"
    assert [n.name for n in plan.control_planes] == ["cp-2", "cp-3"]
    workers = [n.name for batch in plan.worker_batches for n in batch]
    assert workers == [*GPUS, "cpu-1"]
    # gpubring_serial 25% of 5 workers: int(1.25) = 1 a batch
    assert [len(b) for b in plan.worker_batches] == [1, 1, 1, 1, 1]
    gpu = next(n for n in plan.nodes if n.name == "gpu-1")
    assert {c.component for c in gpu.changes} >= {"kubernetes", "nvidia_driver", "nvidia_container_toolkit"}
    cpu = next(n for n in plan.nodes if n.name == "cpu-1")
    assert "nvidia_driver" not in {c.component for c in cpu.changes}
    lines = "\n".join(upgrade.plan_lines(plan))
    assert "record: none yet" in lines and f"Kubernetes -> {PIN}" in lines


def test_a_cluster_at_the_pins_gets_nothing(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    at_pins(inventory)
    code, out = cli(inventory, "--check")
    assert code == 0, out
    assert f"Kubernetes stays {PIN}" in out
    assert "0 of 8 node(s) drained" in out
    assert "platform releases: every chart pin as recorded" in out
    assert not (inventory / ".gpubring" / "runs").exists(), "--check must not start a run"


def test_one_minor_release_up_is_planned_node_by_node(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    hosts = at_pins(inventory)
    old = {h: {**v, "kubernetes": ONE_BELOW} for h, v in hosts.items()}
    old["gpu-2"]["nvidia_driver"] = OLD_DRIVER
    write_record(inventory, old, {"gpu-operator": "v25.3.4"})
    code, out = cli(inventory, "--check")
    assert code == 0, out
    assert f"Kubernetes {ONE_BELOW} -> {PIN}" in out
    lines = out.splitlines()
    first = next(i for i, ln in enumerate(lines) if "first control plane cp-1" in ln)
    second = next(i for i, ln in enumerate(lines) if "control plane cp-2, alone" in ln)
    workers = next(i for i, ln in enumerate(lines) if "gpu-2:" in ln)
    assert first < second < workers
    gpu2 = lines[workers]
    driver = load_inventory(inventory).versions["nvidia_driver"]["version"]
    assert f"kubernetes {ONE_BELOW} -> {PIN}" in gpu2 and f"nvidia_driver {OLD_DRIVER} -> {driver}" in gpu2
    assert "nvidia_driver" not in next(ln for ln in lines if "gpu-1:" in ln)
    assert "8 of 8 node(s) drained once each" in out
    # the recorded GPU Operator is older than every major line gpubring knows: its road goes through
    # each of them (versions.yml gpubring_upgrade_hops, whose last line is the pin), one line at a time
    rule = hops.load_rules()["gpu-operator"]
    assert rule.lines[-1] == load_inventory(inventory).versions["gpu_operator"]["chart"]
    gpu_op = next(ln.strip() for ln in lines if ln.strip().startswith("gpu-operator "))
    road = " -> ".join(("v25.3.4", *rule.lines))
    assert gpu_op.startswith(f"gpu-operator {road} ({len(rule.lines)} upgrades, one major line at a time)")
    assert "older than the lines gpubring knows" in gpu_op
    assert f"{len(rule.lines)} runs of `gpubring upgrade`" in out
    run1 = next(ln for ln in lines if "run 1: pin" in ln)
    assert f"gpu_operator.chart: {rule.lines[0]}" in run1
    # the run itself refuses the skipped operator line before any host, naming the pin for run 1
    code, out = cli(inventory)
    assert code == ExitCode.BAD_INPUT, out
    assert f"gpu-operator {road}: the operator supports an upgrade only within a major line" in out
    assert f"pin gpu_operator.chart: {rule.lines[0]} under gpubring_versions" in out
    assert "Traceback" not in out
    assert not (inventory / ".gpubring" / "runs").exists(), "a refused upgrade started a run"


def test_a_skipped_minor_release_is_refused_with_the_hops(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    hosts = at_pins(inventory)
    write_record(inventory, {h: {**v, "kubernetes": TWO_BELOW} for h, v in hosts.items()})
    code, out = cli(inventory, "--check")
    assert code == ExitCode.BAD_INPUT, out
    assert f"cp-1 runs Kubernetes {TWO_BELOW} and the pin is {PIN}: 2 minor releases at once" in out
    assert _path(_MINOR - 2, _MINOR - 1, _MINOR) in out
    assert "(7 more node(s) alike)" in out
    assert "Traceback" not in out
    # without --check too, before any host: no run folder
    code, out = cli(inventory)
    assert code == ExitCode.BAD_INPUT, out
    assert not (inventory / ".gpubring" / "runs").exists()


def test_an_etcd_snapshot_comes_first_unless_told_not_to(
    make_inventory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 11: the upgrade's first step saves an etcd snapshot to the controller (the restore
    point when the control planes' upgrade fails); --no-snapshot leaves it out; --check says which."""
    from gpubring.run import steps

    inventory = make_inventory()
    at_pins(inventory)
    code, out = cli(inventory, "--check")
    assert code == 0, out
    assert "first: an etcd snapshot to" in out and "etcd-snapshots" in out
    code, out = cli(inventory, "--check", "--no-snapshot")
    assert code == 0, out
    assert "no etcd snapshot first (--no-snapshot)" in out

    ran: list[list[str]] = []

    def run_steps(_inv: Any, todo: list[Any], _options: Any, **_kw: Any) -> Any:
        ran.append([str(step.settings.playbook.name) for step in todo])
        return SimpleNamespace(exit_code=ExitCode.OK, last=None)

    monkeypatch.setattr(steps, "run_steps", run_steps)
    assert cli(inventory)[0] == 0
    assert cli(inventory, "--no-snapshot")[0] == 0
    assert ran == [["etcd_snapshot.yml", "upgrade.yml"], ["upgrade.yml"]]


def test_an_inventory_without_the_cluster_phase_is_refused(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory({"group_vars/all/phases.yml": "gpubring_phases: [preflight, host]\n"})
    code, out = cli(inventory)
    assert code == ExitCode.BAD_INPUT, out
    assert "an upgrade is the cluster phase" in out and "--check" in out
    assert not (inventory / ".gpubring" / "runs").exists()


def test_a_bad_inventory_is_refused_before_the_plan(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory(
        {"group_vars/all/versions.yml": "gpubring_versions: {kubernetes: {version: 9}}\n"}
    )
    code, out = cli(inventory, "--check")
    assert code == ExitCode.BAD_INPUT, out
    assert "versions.yml" in out and "Traceback" not in out


# -- the record -------------------------------------------------------------------------------------


def _report(inv_hosts: list[str], **over: Any) -> dict[str, Any]:
    return {"exit_code": 0, "check": False, "partial": [], "stats": {key: {} for key in inv_hosts}, **over}


@pytest.mark.parametrize(
    "over",
    [{"exit_code": 1}, {"exit_code": 4}, {"check": True}, {"partial": ["--tags kernel"]},
     {"partial": ["--skip-tags containerd"]}],
)  # fmt: skip
def test_only_a_whole_successful_run_is_recorded(
    sample_inventory: Path, tmp_path: Path, over: dict[str, Any]
) -> None:
    inv = load_inventory(sample_inventory)
    inv = type(inv)(**{**inv.__dict__, "root": tmp_path})
    assert not upgrade.record_run(inv, _report(list(inv.hosts), **over), ("host", "cluster"))
    assert not upgrade.record_path(tmp_path).exists()


def test_the_record_follows_the_phases_and_hosts_of_the_run(sample_inventory: Path, tmp_path: Path) -> None:
    inv = load_inventory(sample_inventory)
    inv = type(inv)(**{**inv.__dict__, "root": tmp_path})
    # a node add of gpu-4 with the inventory's phases left out as --skip-tags: still recorded
    report = _report(["gpu-4", "cp-1"], partial=["--limit gpu-4", "--skip-tags verify"])
    assert upgrade.record_run(inv, report, ("host",))
    rec = upgrade.load_installed(tmp_path)
    assert set(rec.hosts) == {"gpu-4", "cp-1"}
    assert "kubernetes" not in rec.hosts["gpu-4"]  # the cluster phase did not run
    assert rec.hosts["gpu-4"]["nvidia_driver"] == inv.versions["nvidia_driver"]["version"]
    assert "nvidia_driver" not in rec.hosts["cp-1"]  # not a GPU node
    assert rec.releases == {}
    assert upgrade.record_run(inv, _report(list(inv.hosts)), ("cluster", "platform"))
    rec = upgrade.load_installed(tmp_path)
    assert all(rec.hosts[h]["kubernetes"] == PIN for h in inv.hosts)
    assert rec.releases["gpu-operator"] == inv.versions["gpu_operator"]["chart"]
    # a removed node loses its Kubernetes, keeps its host setup; a whole reset loses the releases
    upgrade.forget_hosts(inv, ["gpu-4"])
    rec = upgrade.load_installed(tmp_path)
    assert "kubernetes" not in rec.hosts["gpu-4"] and "nvidia_driver" in rec.hosts["gpu-4"]
    assert rec.hosts["gpu-3"]["kubernetes"] == PIN
    upgrade.forget_hosts(inv, list(inv.hosts), whole_cluster=True)
    rec = upgrade.load_installed(tmp_path)
    assert rec.releases == {} and all("kubernetes" not in v for v in rec.hosts.values())


@pytest.mark.parametrize(
    "text", ["", "{", "[]", '{"format": 2, "hosts": {"a": {"kubernetes": "1"}}}', '{"format": 1, "hosts": 5}']
)
def test_a_broken_record_reads_as_none(tmp_path: Path, text: str) -> None:
    path = upgrade.record_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert upgrade.load_installed(tmp_path).empty


def test_a_large_batch_is_folded(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    node = upgrade.NodePlan("w", (upgrade.Change("kubernetes", ONE_BELOW, PIN),))
    plan = upgrade.plan_upgrade(inv, upgrade.Installed({}, {}, {}, Path("/none")))
    many = tuple(upgrade.NodePlan(f"w{i}", node.changes) for i in range(500))
    lines = upgrade.plan_lines(type(plan)(**{**plan.__dict__, "worker_batches": (many,)}))
    assert any("w0, w1, w2, ... (500 nodes)" in ln for ln in lines), lines


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "cluster_upgrade_version: abc\n",
            "cluster_upgrade_version: expected a Kubernetes release such as 1.34.2",
        ),
        ("cluster_upgrade_version: 1.34\n", "cluster_upgrade_version: expected a Kubernetes release"),
        (
            "cluster_upgrade_ready_timeout: 0\n",
            "cluster_upgrade_ready_timeout: expected a number >= 1, got 0",
        ),
        (
            "kubernetes_packages_install: [kubeadm, kubeproxy]\n",
            "kubernetes_packages_install[1]: expected one of",
        ),
    ],
)
def test_bad_upgrade_inputs_are_refused_naming_file_and_key(
    make_inventory: Callable[..., Path], text: str, expected: str
) -> None:
    inventory = make_inventory({"group_vars/all/cluster_upgrade.yml": text})
    code, out = cli(inventory, "--check")
    assert code == ExitCode.BAD_INPUT, out
    assert f"group_vars/all/cluster_upgrade.yml: {expected}" in out, out
    assert "Traceback" not in out


@pytest.fixture(autouse=True)
def _no_kubeadm_plan_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """`upgrade --check` then reads kubeadm's plan on the first control plane (issue 21 item 10,
    tests/test_upgrade_plan_live.py); these inventories' hosts are documentation addresses, so the
    tests here stop after gpubring's own plan."""
    from gpubring.commands import upgrade as command

    monkeypatch.setattr(command, "_kubeadm_plan", lambda *_args: ExitCode.OK)
