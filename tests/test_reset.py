"""`gpubring reset`: the plan without --yes (no run), the quorum guard before any host and the
playbook's own confirmation. A real reset of a converged lab GPU node runs in tests/test_e2e_lab.py, on
the test session's one lab."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import nodeops, paths
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.run import process
from gpubring.run.settings import RunSettings
from gpubring.runopts import RunOptions


def reset(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["reset", *map(str, args)], env={"COLUMNS": "300"})
    return result.exit_code, result.output


def runs_of(root: Path) -> list[Path]:
    base = root / ".gpubring" / "runs"
    return sorted(base.iterdir()) if base.is_dir() else []


# -- the plan: exit 0, no run ----------------------------------------------------------------------


def test_without_yes_it_prints_the_plan_and_runs_nothing(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    code, output = reset(inventory)
    assert code == ExitCode.OK, output
    assert "(every host: the whole cluster): nothing is changed without --yes" in output
    lines = output.splitlines()
    order = [ln.strip() for ln in lines if ln.startswith("  ") and ". " in ln and "control plane" in ln]
    assert order == ["6. control plane cp-3", "7. control plane cp-2",
                     "8. control plane cp-1 (the first control plane, last)"]  # fmt: skip
    assert "1-5. workers, in parallel (up to --forks): gpu-1, gpu-2, gpu-3, gpu-4, cpu-1" in output
    assert "/var/lib/kubelet" in output and "/var/lib/etcd" in output and "KUBE-*" in output
    assert "kept: containerd" in output
    assert f"next: gpubring reset {inventory} --yes" in output
    assert runs_of(inventory) == []


def test_the_plan_of_a_limit_and_purge(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    code, output = reset(inventory, "--limit", "gpu-2,cp-3", "--purge-host")
    assert code == ExitCode.OK, output
    assert "(--limit gpu-2,cp-3)" in output
    assert "1. workers, in parallel (up to --forks): gpu-2" in output
    assert "2. control plane cp-3" in output
    assert "--purge-host, also removed:" in output and "kubeadm, kubelet, kubectl" in output
    assert "kept: containerd" not in output
    assert "the Node objects of these hosts stay (NotReady)" in output
    assert runs_of(inventory) == []


def test_the_steps_variables_and_order(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    whole = nodeops.plan_reset(inv, None)
    assert whole.whole_cluster and whole.step.limit == ""
    assert whole.hosts == ("gpu-1", "gpu-2", "gpu-3", "gpu-4", "cpu-1", "cp-3", "cp-2", "cp-1")
    assert whole.step.playbook == paths.playbooks_dir().resolve() / "reset.yml"
    assert dict(whole.step.extra_vars) == {"reset_confirm": "yes"}
    # A --limit that selects every host is the whole cluster.
    assert nodeops.plan_reset(inv, "all").whole_cluster
    some = nodeops.plan_reset(inv, "gpu_nodes[0:1]", purge_host=True)
    assert (some.whole_cluster, some.step.limit) == (False, "gpu-1,gpu-2")
    assert dict(some.step.extra_vars) == {"reset_confirm": "yes", "reset_purge_host": True}
    settings = nodeops.settings(inv, whole.step, RunOptions(limit=None))
    assert settings.options.limit is None and settings.command == "reset"


# -- the guard: exit 2 before any host -------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("cp-2,cp-3", "error: removing cp-2, cp-3 leaves 1 of 3 etcd members; quorum needs 2 (a majority"),
        ("control_plane", "error: removing cp-1, cp-2, cp-3 leaves no control plane"),
        ("cp-1", "error: cp-1 is the first control plane (control_plane[0])"),
        ("gpu-9", "error: --limit gpu-9: matches no host of"),
    ],
)  # fmt: skip
def test_a_limit_that_breaks_etcd_is_refused(
    make_inventory: Callable[..., Path], limit: str, message: str
) -> None:
    inventory = make_inventory()
    for yes in ([], ["--yes"]):
        code, output = reset(inventory, "--limit", limit, *yes)
        assert code == ExitCode.BAD_INPUT, output
        assert message in output
        assert "Traceback" not in output
    assert runs_of(inventory) == []


def test_five_control_planes_lose_two_at_most(make_inventory: Callable[..., Path]) -> None:
    inv = load_inventory(make_inventory())
    cps = ("cp-1", "cp-2", "cp-3", "cp-4", "cp-5")
    hosts = {**inv.hosts, "cp-4": inv.hosts["cp-3"], "cp-5": inv.hosts["cp-3"]}
    five = dataclasses.replace(inv, hosts=hosts, groups={**inv.groups, "control_plane": cps})
    assert nodeops.plan_reset(five, "cp-4,cp-5").control_planes == ("cp-5", "cp-4")
    with pytest.raises(nodeops.NodeError, match="leaves 2 of 5 etcd members; quorum needs 3"):
        nodeops.plan_reset(five, "cp-3,cp-4,cp-5")
    with pytest.raises(nodeops.NodeError, match="leaves 2 of 5 etcd members; quorum needs 3"):
        nodeops.check_nodes(five, ["cp-3", "cp-4", "cp-5"], removing=True)
    assert nodeops.check_nodes(five, ["cp-4", "cp-5"], removing=True) == ("cp-4", "cp-5")


def test_the_playbook_refuses_a_run_without_confirmation(tmp_path: Path) -> None:
    """reset.yml itself (plain ansible-playbook, AWX) stops at its first task without reset_confirm."""
    root = tmp_path / "local"
    root.mkdir()
    (root / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        '    ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
        "  children:\n    control_plane:\n      hosts:\n        node1: {}\n"
        "    gpu_nodes:\n      hosts:\n        node2: {}\n",
        encoding="utf-8",
    )
    inv = load_inventory(root)
    result = process.run(
        RunSettings(
            inventory_root=inv.root,
            hosts_file=inv.hosts_file,
            command="reset",
            playbook=paths.playbooks_dir() / "reset.yml",
        )
    )
    assert result.exit_code == ExitCode.TASK_FAILED
    [failure] = result.report.failures
    assert failure.task == "Refuse a reset without confirmation"
    assert "Confirm with -e reset_confirm=yes" in failure.message
    assert all(row.changed == 0 for row in result.report.stats.values())
