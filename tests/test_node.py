"""`gpubring node add | replace | remove`: argument checks before any host, and real runs of the node
playbooks' guards through the runner on this machine (local connection).

The runs stop at the playbooks' own guards, which need no cluster: node_add.yml and node_remove.yml
refuse the first control plane and a run without --limit, and node_remove.yml stops when the first
control plane has no admin kubeconfig. Nothing beyond those guards runs here (node_add.yml would run
the host roles on this machine).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import nodeops, paths
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.run import process
from gpubring.run.settings import RunResult, RunSettings
from gpubring.runopts import RunOptions

ADMIN_CONF = Path("/etc/kubernetes/admin.conf")

LOCAL_HOSTS = """\
---
# Two hosts on this machine over the local connection: node1 is the first control plane, node2 a
# GPU node. root already; su needs no password for root.
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    ansible_become_method: su
  children:
    control_plane:
      hosts:
        node1:
          ansible_host: 127.0.0.1
    gpu_nodes:
      hosts:
        node2:
          ansible_host: 127.0.0.2
"""


def node(*args: str | Path) -> tuple[int, str]:
    # Wide enough that rich does not wrap the lines the tests look for.
    result = CliRunner().invoke(app, ["node", *map(str, args)], env={"COLUMNS": "300"})
    return result.exit_code, result.output


def runs_of(root: Path) -> list[Path]:
    base = root / ".gpubring" / "runs"
    return sorted(base.iterdir()) if base.is_dir() else []


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    root = tmp_path / "local"
    root.mkdir()
    (root / "hosts.yml").write_text(LOCAL_HOSTS, encoding="utf-8")
    return root


# -- bad input: exit 2, no run ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "gpu-9"], "error: gpu-9 is not a host of"),
        (["add", "gpu-2", "gpu-1x"], "hosts.yml; did you mean gpu-1?; a new node goes into hosts.yml"),
        (["replace", "cpu1"], "error: cpu1 is not a host of"),
        (["remove", "gpu_4"], "did you mean gpu-4?"),
        (["add", "cp-1"], "error: cp-1 is the first control plane (control_plane[0])"),
        (["replace", "cp-1"], "To replace or remove it, put another control plane first in hosts.yml."),
        (["remove", "cp-1", "--force"], "error: cp-1 is the first control plane"),
        (["add", "gpu-1", "-e", "not-a-pair"], "'not-a-pair' is not KEY=VALUE"),
        (["remove", "gpu-1", "-e", "@no-such-vars.yml"], "no-such-vars.yml: no such file"),
    ],
)
def test_bad_input_exits_2_before_any_host(
    make_inventory: Callable[..., Path], args: list[str], message: str
) -> None:
    inventory = make_inventory()
    action, *rest = args
    code, output = node(action, inventory, *rest)
    assert code == ExitCode.BAD_INPUT, output
    assert message in output
    assert "Traceback" not in output
    assert runs_of(inventory) == []


def test_every_bad_name_is_reported(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    code, output = node("add", inventory, "gpu-9", "cp-1", "gpu-2", "cpu-7")
    assert code == ExitCode.BAD_INPUT
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert [e.split()[1] for e in errors] == ["gpu-9", "cpu-7", "cp-1"]


def test_an_invalid_inventory_exits_2(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory({"group_vars/all/typo.yml": "verify_clustr: false\n"})
    code, output = node("add", inventory, "gpu-1")
    assert code == ExitCode.BAD_INPUT
    assert "group_vars/all/typo.yml: verify_clustr: unknown key" in output
    assert "did you mean verify_cluster?" in output
    assert runs_of(inventory) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add"], "Missing argument"),
        (["replace", "gpu-1", "gpu-2"], "unexpected extra argument(s) (gpu-2)"),
        (["add", "gpu-1", "--force"], "No such option: --force"),
    ],
)
def test_arguments_are_checked_by_the_command_line(
    make_inventory: Callable[..., Path], args: list[str], message: str
) -> None:
    inventory = make_inventory()
    action, *rest = args
    code, output = node(action, inventory, *rest)
    assert code == ExitCode.BAD_INPUT
    assert message in output


# -- what each action runs -------------------------------------------------------------------------


FORCE = {"node_remove_force": True}


@pytest.mark.parametrize(
    ("action", "nodes", "force", "steps"),
    [
        ("add", ["gpu-2", "cpu-1"], False, [("node-add", "node_add.yml", "gpu-2,cpu-1", {})]),
        (
            "replace",
            ["gpu-3"],
            False,
            [
                ("node-replace", "node_remove.yml", "gpu-3", FORCE),  # the stale Node object, through the API
                ("node-replace", "node_add.yml", "gpu-3", {}),
            ],
        ),
        ("remove", ["gpu-4"], True, [("node-remove", "node_remove.yml", "gpu-4", FORCE)]),
        ("remove", ["gpu-4"], False, [("node-remove", "node_remove.yml", "gpu-4", {})]),
    ],
)
def test_the_steps_of_each_action(
    action: str, nodes: list[str], force: bool, steps: list[tuple[str, str, str, dict[str, bool]]]
) -> None:
    book = paths.playbooks_dir().resolve()
    planned = nodeops.plan(action, nodes, force=force)
    assert [(s.command, s.playbook, s.limit, dict(s.extra_vars)) for s in planned] == [
        (command, book / playbook, limit, extra) for command, playbook, limit, extra in steps
    ]


def test_nodes_are_checked_once_each_in_order(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    assert nodeops.check_nodes(inv, ["gpu-2", "cpu-1", "gpu-2"]) == ("gpu-2", "cpu-1")


def test_a_steps_settings_are_the_operators_options_with_its_limit_and_variables(
    sample_inventory: Path,
) -> None:
    inv = load_inventory(sample_inventory)
    stale, _ = nodeops.plan("replace", ["gpu-3"])
    operator = RunOptions(extra_vars=({"node_remove_force": False},), check=True, limit="ignored")
    settings = nodeops.settings(inv, stale, operator)
    # The step's own variable comes after the operator's -e, so it wins.
    assert settings.options.extra_vars == ({"node_remove_force": False}, {"node_remove_force": True})
    assert (settings.options.limit, settings.options.check) == ("gpu-3", True)
    assert settings.command == "node-replace"


# -- real runs of the playbooks' guards ------------------------------------------------------------


def _run_playbook(inventory: Path, playbook: str, limit: str | None) -> RunResult:
    inv = load_inventory(inventory)
    return process.run(
        RunSettings(
            inventory_root=inv.root,
            hosts_file=inv.hosts_file,
            command="node-test",
            playbook=paths.playbooks_dir() / playbook,
            options=RunOptions(limit=limit),
        )
    )


@pytest.mark.parametrize(
    ("playbook", "limit", "message"),
    [
        (
            "node_add.yml",
            "node1",
            "The first control plane (node1) initialises the cluster and cannot be added",
        ),
        ("node_add.yml", None, "node_add.yml adds the hosts named with --limit"),
        (
            "node_remove.yml",
            "node1,node2",
            "The first control plane (node1) runs the removal and cannot remove itself",
        ),
    ],
)
def test_the_node_playbooks_refuse_the_first_control_plane(
    local_inventory: Path, playbook: str, limit: str | None, message: str
) -> None:
    result = _run_playbook(local_inventory, playbook, limit)
    assert result.exit_code == ExitCode.TASK_FAILED
    failures = result.report.failures
    assert failures, result.report
    assert all(
        f.task == "Refuse a run without --limit, or one that includes the first control plane"
        for f in failures
    )
    assert message in failures[0].message
    # The guard is the first task: no host ran anything else.
    assert all(row.ok == 0 and row.changed == 0 for row in result.report.stats.values())


@pytest.mark.skipif(ADMIN_CONF.exists(), reason=f"{ADMIN_CONF} exists: this machine runs a cluster")
def test_remove_force_runs_node_remove_and_stops_without_a_cluster(
    local_inventory: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "report.json"
    code, output = node("remove", local_inventory, "node2", "--force", "--json", copy)
    assert code == ExitCode.TASK_FAILED, output
    assert f"gpubring node remove {local_inventory} node2: remove node2 from the cluster" in output
    assert "node1 has no /etc/kubernetes/admin.conf: there is no cluster to remove node2 from" in output
    [folder] = runs_of(local_inventory)
    assert folder.name.endswith("-node-remove")
    data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert json.loads(copy.read_text(encoding="utf-8")) == data
    assert data["command"] == "node-remove"
    assert data["playbook"] == str(paths.playbooks_dir().resolve() / "node_remove.yml")
    assert data["options"]["limit"] == "node2"
    assert data["options"]["extra_vars"] == ["node_remove_force"]
    assert list(data["stats"]) == ["node2"]
    [failure] = data["failures"]
    assert failure["task"] == "Stop when there is no cluster to remove the node from"


@pytest.mark.skipif(ADMIN_CONF.exists(), reason=f"{ADMIN_CONF} exists: this machine runs a cluster")
@pytest.mark.parametrize("force", [False, True])
def test_remove_in_check_mode_without_a_cluster_says_what_a_run_would_do(
    local_inventory: Path, tmp_path: Path, force: bool
) -> None:
    """A dry run before there is a cluster (the lab's check-only cluster phase): exit 0, nothing
    changed, and the run says what it would do to the node instead of failing."""
    copy = tmp_path / "report.json"
    extra = ["--force"] if force else []
    code, output = node("remove", local_inventory, "node2", "--check", *extra, "--json", copy)
    assert code == ExitCode.OK, output
    data = json.loads(copy.read_text(encoding="utf-8"))
    assert data["failures"] == [] and data["stats"]["node2"]["changed"] == 0, data
    how = (
        "cordon node2, skip its reset (--force), and delete its Node object."
        if force
        else "drain node2, kubeadm reset it, and delete its Node object."
    )
    messages = " ".join(
        str((json.loads(e.read_text()).get("event_data", {}).get("res") or {}).get("msg", ""))
        for e in Path(data["run_folder"]).glob("artifacts/*/job_events/*.json")
    )
    assert f"Check mode: no cluster on node1 (/etc/kubernetes/admin.conf is missing); a run would {how}" in (
        " ".join(messages.split())
    ), output


@pytest.mark.skipif(ADMIN_CONF.exists(), reason=f"{ADMIN_CONF} exists: this machine runs a cluster")
def test_replace_stops_before_the_add_when_the_removal_fails(local_inventory: Path) -> None:
    code, output = node("replace", local_inventory, "node2")
    assert code == ExitCode.TASK_FAILED, output
    assert "[1/2]: remove the stale Node object (and etcd member) of node2 through the API" in output
    assert "not run: host roles, join, labels and verify of node2" in output
    [folder] = runs_of(local_inventory)  # the add never started
    data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert data["command"] == "node-replace"
    assert data["playbook"].endswith("node_remove.yml")
    assert data["options"]["extra_vars"] == ["node_remove_force"]
