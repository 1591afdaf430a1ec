"""Cluster-phase roles run for real on localhost at the edges a lab cannot reach: a first control plane
that has the cluster's admin kubeconfig (its API server address answers nothing here), or none at all.

- cni with Flannel in check mode on a cluster whose manifest cache is empty (a dry run before the first
  real run, or after a version change): it says what a run would do and writes nothing, where it used
  to fail on the cache folder check mode had not created.
- node_labels in a real run without a cluster: it stops at once naming the missing kubeconfig, where it
  used to retry the Node lookup for minutes before a client library error.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import BIN, ansible_playbook, localhost_inventory, unreachable_kubeconfig

pytestmark = pytest.mark.skipif(
    shutil.which("ansible-playbook", path=str(BIN)) is None, reason="no ansible-playbook in the venv"
)


def _play(
    tmp_path: Path,
    role: str,
    role_vars: dict[str, Any],
    *args: str,
    groups: tuple[str, ...] = ("control_plane",),
) -> tuple[int, str]:
    """One play on localhost (this machine, as it is, in `groups`) that includes `role` with `role_vars`."""
    inventory = localhost_inventory(tmp_path, groups)
    play = [
        {
            "name": f"Run {role} here",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": role_vars,
            "tasks": [
                {
                    "name": f"The {role} role",
                    "ansible.builtin.include_role": {"name": f"gpubring.core.{role}"},
                }
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play))
    result = ansible_playbook("-i", inventory, playbook, *args)
    return result.returncode, result.stdout + result.stderr


def test_flannel_in_check_mode_without_a_cached_manifest_says_what_a_run_would_do(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code, out = _play(
        tmp_path,
        "cni",
        {
            "gpubring_cni": "flannel",
            "cni_kubeconfig": str(unreachable_kubeconfig(tmp_path)),
            "cni_cache_dir": str(cache),
        },
        "--check",
    )
    assert code == 0, out[-4000:]
    text = " ".join(out.split())
    assert "Check mode: kube-flannel.yml v" in text and f"is not in {cache} on localhost yet" in text, out
    assert "a run downloads it from https://" in text and "with the pod network" in text, out
    assert not cache.exists(), "check mode created the manifest cache"
    assert "changed=0" in out and "failed=0" in out, out[-2000:]


def test_node_labels_without_a_cluster_stops_at_once_naming_the_kubeconfig(tmp_path: Path) -> None:
    """This machine as a GPU node (gpu_facts reads its PCI bus for real: no NVIDIA GPU here) and its
    own first control plane, without the admin kubeconfig."""
    missing = tmp_path / "no-admin.conf"
    code, out = _play(
        tmp_path,
        "node_labels",
        {"node_labels_kubeconfig": str(missing)},
        groups=("control_plane", "gpu_nodes"),
    )
    text = " ".join(out.split())
    assert code != 0, out[-4000:]
    assert (
        f"node_labels: localhost has no {missing}: there is no cluster to label localhost in. Run the "
        "cluster phase first" in text
    ), out[-4000:]
    assert "FAILED - RETRYING" not in out, out[-4000:]  # the Node lookup's retries never started
