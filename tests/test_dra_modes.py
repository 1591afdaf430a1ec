"""NVIDIA's DRA driver in the two ways the pinned releases support, and the mixed one refused.

- ComputeDomains on a group (tests/data/inventories/dra-kueue-rdma): covered in
  test_releases_render.py; the device plugin stays on every GPU node.
- GPUs through DRA on every GPU node (tests/data/inventories/all-on, `dra_driver_gpus: true`): the
  GPU Operator's device plugin is off cluster-wide, the chart gets gpuResourcesEnabledOverride (chart
  25.8.0 templates/validation.yaml fails without it) and the release waits for one ResourceSlice per
  GPU node.
- GPUs through DRA on some nodes with the device plugin on the others: GPU Operator v25.10.0's
  validator waits for nvidia.com/gpu on every node it runs on (cmd/nvidia-validator/main.go,
  validateGPUResource) and drops that step only with the device plugin off cluster-wide
  (controllers/object_controls.go, TransformValidator): `check` and `plan` refuse it, exit 2, before
  any host; so does the dra_driver role for a hand-run playbook.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from _render import planned_releases
from gpubring.app import app
from gpubring.inventory import load_inventory
from gpubring.validation import specs
from helpers import DATA, REPO, ansible_playbook

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py
SITE = "group_vars/all/zz-dra.yml"


def test_gpus_through_dra_on_every_gpu_node_switch_the_device_plugin_off() -> None:
    inv = load_inventory(DATA / "inventories" / "all-on")
    releases = {r.name: r for r in planned_releases(inv)}
    assert releases["gpu-operator"].values["devicePlugin"]["enabled"] is False
    dra = releases["nvidia-dra-driver-gpu"]
    assert dra.values["resources"]["gpus"] == {"enabled": True}
    assert dra.values["gpuResourcesEnabledOverride"] is True
    # The chart's own affinity (nodes with an NVIDIA PCI device) is kept on every GPU node.
    assert "affinity" not in dra.values["kubeletPlugin"]
    (slices,) = dra.ready
    assert slices["kind"] == "ResourceSlice"
    assert slices["field_selectors"] == ["spec.driver=gpu.nvidia.com"]
    assert slices["min_count"] == len(inv.groups["gpu_nodes"])


def test_the_sample_keeps_gpus_through_dra_off_by_default() -> None:
    """The default follows the pinned chart, which calls GPUs through DRA not yet supported."""
    inv = load_inventory(REPO / "inventories" / "prod")
    host = inv.groups["control_plane"][0]
    assert specs.load_specs().defaults()["dra_driver_gpus"] is False
    assert "dra_driver_gpus" not in inv.hosts[host].vars


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        pytest.param(
            "dra_driver_enabled: true\ndra_driver_gpus: true\ndra_driver_group: gpu_some\n",
            "dra_driver_group",
            "expected dra_driver_group gpu_nodes with dra_driver_gpus on, not 'gpu_some': the GPU "
            "Operator's validator (v25.10.0) waits for nvidia.com/gpu on every GPU node",
            id="gpus-on-a-subset",
        ),
        pytest.param(
            "dra_driver_enabled: true\n",
            "dra_driver_enabled",
            "expected dra_driver_gpus and/or dra_driver_compute_domains on with dra_driver_enabled",
            id="hands-out-nothing",
        ),
        pytest.param(
            "dra_driver_enabled: true\ndra_driver_compute_domains: true\ndra_driver_group: gb200\n",
            "dra_driver_group",
            "expected an inventory group with hosts for the DRA kubelet plugin; 'gb200' has none",
            id="no-such-group",
        ),
    ],
)
@pytest.mark.parametrize("command", ["check", "plan"])
def test_a_dra_setup_that_never_becomes_ready_is_refused(
    make_inventory: MakeInventory, command: str, text: str, key: str, expected: str
) -> None:
    hosts = (REPO / "inventories" / "prod" / "hosts.yml").read_text(encoding="utf-8")
    last_group = "\n    cpu_nodes:\n      hosts:\n        cpu-1:\n          ansible_host: 203.0.113.31\n"
    assert hosts.endswith(last_group), "the sample's hosts.yml no longer ends with its cpu_nodes group"
    # Two of the GPU nodes in a group of their own, under all.children.
    some = hosts + "    gpu_some:\n      hosts:\n        gpu-3: {}\n        gpu-4: {}\n"
    root = make_inventory({SITE: "---\n" + text, "hosts.yml": some})
    result = CliRunner().invoke(app, [command, str(root)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert f"error: {SITE}: {key}: {expected}" in result.stderr, result.stderr


def test_compute_domains_on_a_group_pass(make_inventory: MakeInventory) -> None:
    text = "---\ndra_driver_enabled: true\ndra_driver_compute_domains: true\n"
    result = CliRunner().invoke(app, ["plan", str(make_inventory({SITE: text}))])
    assert result.exit_code == 0, result.output


_PLAY = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: The dra_driver role's checks, before its release
      ansible.builtin.include_role:
        name: {role}
        tasks_from: main
"""


@pytest.mark.slow
def test_the_role_refuses_gpus_on_a_subset_when_run_by_hand(tmp_path: Path) -> None:
    """A plain ansible-playbook run (no gpubring check) stops at the role's assert, before any release."""
    (tmp_path / "play.yml").write_text(_PLAY.format(role=REPO / "roles" / "dra_driver"), encoding="utf-8")
    inventory = DATA / "inventories" / "dra-kueue-rdma"
    extra: dict[str, Any] = {
        "dra_driver_gpus": True,
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
    }
    extra_file = tmp_path / "extra.json"
    extra_file.write_text(json.dumps(extra), encoding="utf-8")
    result = ansible_playbook("-i", inventory, "-e", f"@{extra_file}", tmp_path / "play.yml")
    assert result.returncode != 0
    assert "dra_driver_group 'gpu_nodes' when dra_driver_gpus is on" in result.stdout, result.stdout
    assert "dra_driver_group gpu_dra (2 hosts)" in result.stdout, result.stdout
    assert "Apply the DRA driver release" not in result.stdout
