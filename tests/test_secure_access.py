"""Secure accelerator access (issue 23 item 5): which device requests the NVIDIA toolkit honours.

- roles/nvidia_container_toolkit tasks/config.yml, run by Ansible on a config.toml in the package's
  layout and on a missing one: the two top-level keys are set (TOML still parses, every table kept),
  and a second run changes nothing.
- roles/gpu_operator's values: DEVICE_LIST_STRATEGY=volume-mounts for the device plugin when CDI is off
  (the toolkit then reads only volume mounts), nothing when CDI is on (the operator sets its CDI
  strategy), and the toolkit container's two settings when the GPU Operator owns the toolkit.
"""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpubring import releases
from gpubring.inventory import load_inventory
from helpers import DATA, FIXTURES, REPO, ansible_playbook

ROLE = REPO / "roles" / "nvidia_container_toolkit"
ENVVAR = "accept-nvidia-visible-devices-envvar-when-unprivileged"
MOUNTS = "accept-nvidia-visible-devices-as-volume-mounts"

_PLAY = """\
- name: The toolkit's device-request settings
  hosts: localhost
  gather_facts: false
  vars_files:
    - {role}/defaults/main.yml
  tasks:
    - name: Set them in each file
      ansible.builtin.include_tasks: {role}/tasks/config.yml
      vars:
        # Task vars rank above the role defaults of vars_files: nothing outside tmp_path is written.
        nvidia_container_toolkit_config: "{{{{ __path }}}}"
      loop: {paths}
      loop_control:
        loop_var: __path
"""


def run_config(tmp_path: Path, *paths: Path) -> int:
    """Run tasks/config.yml on each file; how many of them it changed."""
    play = tmp_path / "play.yml"
    # owner/group root cannot be set by a user: the task's ownership is the only thing left out.
    text = (ROLE / "tasks" / "config.yml").read_text(encoding="utf-8")
    tasks = tmp_path / "role" / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / "config.yml").write_text(
        text.replace("    owner: root\n    group: root\n", ""), encoding="utf-8"
    )
    shutil.copytree(ROLE / "defaults", tmp_path / "role" / "defaults", dirs_exist_ok=True)
    play.write_text(
        _PLAY.format(role=tmp_path / "role", paths=json.dumps([str(p) for p in paths])), encoding="utf-8"
    )
    done = ansible_playbook(
        *("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"), play
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    recap = done.stdout[done.stdout.rindex("PLAY RECAP") :]
    return int(recap.split("changed=")[1].split()[0])


def test_the_role_writes_only_what_it_owns() -> None:
    text = (ROLE / "tasks" / "config.yml").read_text(encoding="utf-8")
    assert text.count("    owner: root\n    group: root\n") == 1  # what run_config leaves out
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults["nvidia_container_toolkit_accept_envvar_unprivileged"] is False
    assert defaults["nvidia_container_toolkit_accept_volume_mounts"] is True
    # The role runs it: main.yml includes the host-owned steps (host.yml), which include config.yml.
    assert "include_tasks: host.yml" in (ROLE / "tasks" / "main.yml").read_text(encoding="utf-8")
    assert "include_tasks: config.yml" in (ROLE / "tasks" / "host.yml").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_toolkit_config_is_set_and_converges(tmp_path: Path) -> None:
    packaged = tmp_path / "config.toml"
    shutil.copy(FIXTURES / "toolkit" / "config.toml", packaged)
    before = tomllib.loads(packaged.read_text(encoding="utf-8"))
    assert ENVVAR not in before  # commented out: the toolkit's defaults (true, false) apply
    missing = tmp_path / "absent" / "config.toml"
    missing.parent.mkdir()
    assert run_config(tmp_path, packaged, missing) == 2
    after = tomllib.loads(packaged.read_text(encoding="utf-8"))
    assert (after[ENVVAR], after[MOUNTS]) == (False, True)
    # Everything else of the file is kept, the keys stay top-level (before the first table).
    assert {k: v for k, v in after.items() if k not in (ENVVAR, MOUNTS)} == before
    # No package installed (nvidia_container_toolkit_install_packages: false): the file holds the two
    # keys; the toolkit fills the rest with its defaults.
    assert tomllib.loads(missing.read_text(encoding="utf-8")) == {ENVVAR: False, MOUNTS: True}
    assert run_config(tmp_path, packaged, missing) == 0


def values(inventory: str, **host_vars: Any) -> dict[str, Any]:
    inv = load_inventory(
        REPO / "inventories" / "prod" if inventory == "prod" else DATA / "inventories" / inventory
    )
    text = releases.render_template(
        inv, "gpu_operator/templates/releases/gpu-operator/values.yml.j2", host_vars=host_vars
    )
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def test_the_device_plugin_hands_gpus_as_the_toolkit_reads_them() -> None:
    cdi = values("prod")
    assert "env" not in cdi["devicePlugin"]  # CDI on: the operator sets cdi-annotations,cdi-cri
    no_cdi = values("prod", gpu_operator_cdi=False)
    assert no_cdi["devicePlugin"]["env"] == [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]
    assert no_cdi["devicePlugin"]["enabled"] is True
    # Back to the toolkit's defaults: the device plugin's default strategy (envvar) again.
    legacy = values("prod", gpu_operator_cdi=False, nvidia_container_toolkit_accept_volume_mounts=False)
    assert "env" not in legacy["devicePlugin"]
    assert "env" not in cdi["toolkit"]


def test_the_operator_owned_toolkit_gets_the_same_settings() -> None:
    operator = values("mig-timeslicing")
    assert operator["toolkit"]["enabled"] is True
    assert operator["toolkit"]["env"] == [
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"},
    ]
    # The time-slicing config stays the device plugin's too.
    assert operator["devicePlugin"]["config"]["name"] == "time-slicing-config"
