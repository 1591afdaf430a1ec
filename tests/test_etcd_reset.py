"""Reset and node remove of a control plane never delete the etcd data of a member still registered
(issue 21, item 1).

- kubeadm_join's reset entry point on a control plane with etcd data stops before anything unless the
  playbook says the member is out of the cluster (kubeadm_join_reset_etcd_member_gone). Run for real on
  localhost in check mode (nothing on this machine changes either way), with the etcd data folder in a
  temp folder: at ddf5444 it went on to delete /var/lib/etcd whatever kubeadm reset did.
- playbooks/reset.yml and node_remove.yml remove the member (kubeadm_control_plane's
  etcd_member_remove, proven on a real etcd in tests/test_etcd_real.py) before the host's reset and
  hand its verdict to the reset.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import BIN, REPO, ansible_playbook, localhost_inventory

needs_ansible = pytest.mark.skipif(
    shutil.which("ansible-playbook", path=str(BIN)) is None, reason="no ansible-playbook in the venv"
)


def _reset_check_mode(tmp_path: Path, role_vars: dict[str, Any]) -> tuple[int, str]:
    inventory = localhost_inventory(tmp_path)
    play = [
        {
            "name": "kubeadm_join reset of a control plane, check mode",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "The reset entry point",
                    "ansible.builtin.include_role": {
                        "name": "gpubring.core.kubeadm_join",
                        "tasks_from": "reset",
                    },
                    "vars": role_vars,
                }
            ],
        }
    ]
    playbook = tmp_path / "reset.yml"
    playbook.write_text(yaml.safe_dump(play))
    result = ansible_playbook("-i", inventory, playbook, "--check")
    return result.returncode, " ".join((result.stdout + result.stderr).split())


@needs_ansible
def test_a_control_plane_whose_member_is_not_confirmed_gone_is_not_reset(tmp_path: Path) -> None:
    data = tmp_path / "var-lib-etcd"
    (data / "member").mkdir(parents=True)
    code, out = _reset_check_mode(tmp_path, {"kubeadm_join_reset_etcd_data_dir": str(data)})
    assert code != 0, out[-3000:]
    assert f"localhost is a control plane with etcd data ({data})" in out, out[-3000:]
    assert "its etcd member was not confirmed out of the cluster: nothing was reset" in out
    assert "Reset Kubernetes on this host with kubeadm reset" not in out, "it went on after the stop"
    assert (data / "member").is_dir()


@needs_ansible
def test_a_control_plane_whose_member_is_out_is_reset(tmp_path: Path) -> None:
    data = tmp_path / "var-lib-etcd"
    (data / "member").mkdir(parents=True)
    code, out = _reset_check_mode(
        tmp_path, {"kubeadm_join_reset_etcd_data_dir": str(data), "kubeadm_join_reset_etcd_member_gone": True}
    )
    assert code == 0, out[-3000:]
    assert "was not confirmed out of the cluster" not in out
    # Check mode: the removal is reported, the folder stays.
    assert str(data) in out and (data / "member").is_dir()


def _tasks(playbook: str, play_hosts: str) -> list[dict[str, Any]]:
    plays = yaml.safe_load((REPO / "playbooks" / playbook).read_text())
    play = next(p for p in plays if p.get("hosts") == play_hosts)
    return list(play["tasks"])


def _index(tasks: list[dict[str, Any]], entry: str) -> int:
    return next(
        i
        for i, task in enumerate(tasks)
        if task.get("ansible.builtin.include_role", {}).get("tasks_from") == entry
    )


@pytest.mark.parametrize(("playbook", "hosts"), [("reset.yml", "control_plane"), ("node_remove.yml", "all")])
def test_the_member_goes_before_the_reset_and_the_reset_gets_the_verdict(playbook: str, hosts: str) -> None:
    tasks = _tasks(playbook, hosts)
    member, reset = _index(tasks, "etcd_member_remove"), _index(tasks, "reset")
    assert member < reset, f"{playbook}: the host is reset before its etcd member is removed"
    gone = str(tasks[reset].get("vars", {}).get("kubeadm_join_reset_etcd_member_gone", ""))
    assert "__kubeadm_control_plane_etcd_member_gone" in gone, (
        f"{playbook}: the reset does not get the verdict"
    )


def test_only_a_whole_cluster_reset_lets_the_last_member_go() -> None:
    tasks = _tasks("reset.yml", "control_plane")
    member = tasks[_index(tasks, "etcd_member_remove")]
    assert (
        member["vars"]["kubeadm_control_plane_etcd_last_member"]
        == "{{ ansible_limit | default('') | length == 0 }}"
    )
