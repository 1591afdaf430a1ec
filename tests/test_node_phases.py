"""The node verbs run the phases `gpubring up` runs: the inventory's gpubring_phases, and those in
gpubring_phases_check_only only with --check (issue 13.7). On the lab (preflight, host, verify; cluster
and platform check-only) `node add` runs the new node's host phases for real and leaves the join to a
real cluster, instead of failing at the Kubernetes repository key."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import nodeops
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.model import Inventory
from gpubring.runopts import RunOptions
from helpers import ansible_playbook

LAB_PHASES = """\
gpubring_phases: [preflight, host, verify]
gpubring_phases_skipped_reason: a lab of containers has no kubelet
gpubring_phases_check_only: [cluster, platform]
"""


@pytest.fixture
def lab_like(make_inventory: Callable[..., Path]) -> Inventory:
    return load_inventory(make_inventory({"group_vars/all/zz-phases.yml": LAB_PHASES}))


def test_add_skips_the_phases_the_inventory_leaves_out(lab_like: Inventory) -> None:
    phases = nodeops.node_phases(lab_like, check=False)
    assert phases.run == ("preflight", "host", "verify")
    (cluster,) = phases.skipped
    assert cluster[0] == "cluster" and "gpubring up --check" in cluster[1]
    (step,) = nodeops.with_phases(nodeops.plan("add", ["gpu-1"]), phases)
    assert step.skip_tags == ("cluster",)
    settings = nodeops.settings(lab_like, step, RunOptions(skip_tags="gpu_acceptance"))
    assert settings.options.skip_tags == "gpu_acceptance,cluster"
    assert settings.options.limit == "gpu-1"


def test_with_check_the_check_only_phases_run_too(lab_like: Inventory) -> None:
    phases = nodeops.node_phases(lab_like, check=True)
    assert phases.run == nodeops.NODE_PHASES
    steps = nodeops.with_phases(nodeops.plan("replace", ["gpu-1"]), phases)
    assert [s.playbook.name for s in steps] == ["node_remove.yml", "node_add.yml"]
    assert all(s.skip_tags == () for s in steps)
    assert nodeops.settings(lab_like, steps[1], RunOptions()).options.skip_tags is None


def test_replace_without_the_cluster_phase_keeps_only_the_host_work(lab_like: Inventory) -> None:
    phases = nodeops.node_phases(lab_like, check=False)
    steps = nodeops.with_phases(nodeops.plan("replace", ["gpu-1"]), phases)
    assert [s.playbook.name for s in steps] == ["node_add.yml"]


def test_remove_without_the_cluster_phase_is_refused_before_any_host(
    make_inventory: Callable[..., Path],
) -> None:
    root = make_inventory({"group_vars/all/zz-phases.yml": LAB_PHASES})
    result = CliRunner().invoke(app, ["node", "remove", str(root), "gpu-1"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "nothing to run: removing a node is the cluster phase" in result.output
    assert "gpubring up --check" in result.output
    assert not (root / ".gpubring" / "runs").exists()


def test_a_full_inventory_runs_every_phase(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    phases = nodeops.node_phases(inv, check=False)
    assert phases.run == nodeops.NODE_PHASES and phases.skipped == ()


def _listed_roles(*extra: str) -> set[str]:
    result = ansible_playbook(
        "-i", "inventories/prod", "--list-tasks", "--limit", "gpu-1", *extra, "playbooks/node_add.yml"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return set(re.findall(r"gpubring\.core\.(\w+) :", result.stdout))


CLUSTER_ROLES = {"kubernetes_packages", "kubeadm_control_plane", "kubeadm_join", "node_labels"}


def test_the_phase_tags_cover_every_play_of_node_add() -> None:
    """What --skip-tags leaves is exactly the other phases' roles: every play of node_add.yml carries
    its phase's tag, so skipping `cluster` leaves no join, and skipping the others leaves only it."""
    every = _listed_roles()
    assert every >= CLUSTER_ROLES
    without_cluster = _listed_roles("--skip-tags", "cluster")
    assert not CLUSTER_ROLES & without_cluster
    assert {"preflight", "nvidia_driver", "verify"} <= without_cluster
    only_cluster = _listed_roles("--skip-tags", "preflight,host,verify")
    assert only_cluster and only_cluster <= CLUSTER_ROLES
