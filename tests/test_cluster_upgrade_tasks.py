"""The order and conditions of the upgrade of one node (roles/cluster_upgrade/tasks/node.yml) and of
playbooks/upgrade.yml, read from the files (issue 21 items 2, 3, 5, 8, 13): what Molecule's
cluster_upgrade scenario cannot reach without an API server. Each decision these tasks take is tested
on values in tests/test_cluster_upgrade_filters.py and molecule/cluster_upgrade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from helpers import REPO

TASKS = REPO / "roles" / "cluster_upgrade" / "tasks"


def _tasks(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for task in yaml.safe_load(path.read_text()) or []:
        out.append(task)
        out.extend(task.get("block") or [])
    return out


def _names(tasks: list[dict[str, Any]]) -> list[str]:
    return [str(t.get("name", "")) for t in tasks]


def _when(task: dict[str, Any]) -> str:
    when = task.get("when", [])
    return " and ".join(when) if isinstance(when, list) else str(when)


def _index(tasks: list[dict[str, Any]], start: str) -> int:
    return next(i for i, name in enumerate(_names(tasks)) if name.startswith(start))


def test_no_ready_wait_on_a_stale_condition() -> None:
    for path in TASKS.glob("*.yml"):
        code = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
        assert not [line for line in code if "--for=condition=Ready" in line], path


def test_the_node_is_uncordoned_only_after_the_checks_and_not_while_its_driver_waits() -> None:
    tasks = _tasks(TASKS / "node.yml")
    uncordon = _index(tasks, "Uncordon the node")
    checks = (
        "Check that containerd has the nvidia runtime",
        "Wait until the node's new kubelet is Ready",
        "Tell whether the NVIDIA driver that runs is the installed one",
    )
    for check in checks:
        assert _index(tasks, check) < uncordon, check
    assert "__cluster_upgrade_driver.reboot_needed" in _when(tasks[uncordon])
    gate = tasks[_index(tasks, "Wait until the node's new kubelet is Ready")]
    assert gate["ansible.builtin.include_tasks"] == "gate.yml"


def test_the_restart_time_is_read_before_anything_restarts_the_kubelet() -> None:
    tasks = _tasks(TASKS / "node.yml")
    names = _names(tasks)
    times = [i for i, n in enumerate(names) if n.startswith("Read the node's clock")]
    assert times and times[0] < _index(tasks, "Install the new kubelet and kubectl")
    assert times[-1] < _index(tasks, "Upgrade containerd") < _index(tasks, "Restart what the upgrade changed")


def test_the_drop_in_is_written_again_when_containerd_changes() -> None:
    tasks = _tasks(TASKS / "node.yml")
    rewrite = tasks[_index(tasks, "Write the nvidia runtime drop-in again")]
    assert rewrite["ansible.builtin.include_role"]["name"] == "gpubring.core.nvidia_container_toolkit"
    assert "'containerd' in __cluster_upgrade_changes" in _when(rewrite)
    assert "'nvidia_runtime' in __cluster_upgrade_changes" in _when(rewrite)
    assert _index(tasks, "Upgrade containerd") < _index(tasks, "Write the nvidia runtime drop-in again")


def test_kubeadm_config_and_kubeconfigs_follow_the_upgrade() -> None:
    tasks = _tasks(TASKS / "node.yml")
    config = tasks[_index(tasks, "Rewrite kubeadm-config.yaml")]
    assert config["ansible.builtin.include_role"] == {
        "name": "gpubring.core.kubeadm_control_plane",
        "tasks_from": "upgrade_config",
    }
    assert config["vars"]["kubeadm_control_plane_kubernetes_version"] == "{{ cluster_upgrade_version }}"
    assert _index(tasks, "Upgrade the control plane (kubeadm upgrade apply)") < _index(
        tasks, "Rewrite kubeadm-config"
    )
    fetch = tasks[_index(tasks, "Copy the admin kubeconfigs again")]
    assert fetch["ansible.builtin.include_role"]["tasks_from"] == "kubeconfig"
    # The same template as kubeadm init's.
    init = yaml.safe_load((REPO / "roles/kubeadm_control_plane/tasks/init.yml").read_text())
    upgrade = yaml.safe_load((REPO / "roles/kubeadm_control_plane/tasks/upgrade_config.yml").read_text())
    src = {t["ansible.builtin.template"]["src"] for t in init + upgrade if "ansible.builtin.template" in t}
    assert "etc/kubernetes/kubeadm/kubeadm-config.yaml.j2" in src


def test_the_upgrade_playbook_gates_upgrades_the_cni_and_stops_at_a_failed_node() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "upgrade.yml").read_text())
    names = [p.get("name", "") for p in plays]
    cni = names.index("Upgrade the pod network")
    assert names.index("Upgrade the other control planes, one at a time") < cni
    assert cni < names.index("Upgrade the workers, in batches")
    assert [r["role"] for r in plays[cni]["roles"]] == ["gpubring.core.cni"]
    assert plays[cni]["hosts"] == "control_plane[0]"
    for play in plays:
        if "roles" in play and any(r["role"] == "gpubring.core.cluster_upgrade" for r in play["roles"]):
            assert play["max_fail_percentage"] == 0, play["name"]
    cluster = _tasks(TASKS / "cluster.yml")
    assert tasks_include(cluster, "gates.yml")


def tasks_include(tasks: list[dict[str, Any]], name: str) -> bool:
    return any(t.get("ansible.builtin.include_tasks") == name for t in tasks)
