"""The collection stands on its own: built as the execution environment builds it, installed away from
this checkout, its vars plugin gives plain Ansible the settings defaults and the version matrix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import BIN, REPO

SAMPLE = REPO / "inventories" / "prod"


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed next to {sys.executable}: pip install -e '.[test]'")
    return str(path)


@pytest.fixture(scope="module")
def ee_context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`ansible-builder create`: the build context an EE image is built from (no image is built here:
    no container registry is reachable)."""
    context = tmp_path_factory.mktemp("ee") / "context"
    subprocess.run(
        [
            _tool("ansible-builder"),
            "create",
            "-f",
            str(REPO / "execution-environment.yml"),
            "-c",
            str(context),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return context


@pytest.fixture(scope="module")
def installed(ee_context: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collection built and installed from the EE context, as the image's final stage does."""
    dist = tmp_path_factory.mktemp("dist")
    target = tmp_path_factory.mktemp("collections")
    galaxy = _tool("ansible-galaxy")
    # Away from the checkout, whose ansible.cfg links gpubring.core (galaxy would call it installed).
    away = {"PATH": os.environ["PATH"], "HOME": str(dist), "ANSIBLE_CONFIG": str(dist / "none.cfg")}
    subprocess.run(
        [
            galaxy,
            "collection",
            "build",
            str(ee_context / "_build" / "collection"),
            "--output-path",
            str(dist),
        ],
        cwd=dist,
        env=away,
        check=True,
        capture_output=True,
    )
    (tarball,) = dist.glob("gpubring-core-*.tar.gz")
    subprocess.run(
        [galaxy, "collection", "install", "--offline", str(tarball), "-p", str(target)],
        cwd=dist,
        env=away,
        check=True,
        capture_output=True,
    )
    assert (
        target / "ansible_collections" / "gpubring" / "core" / "plugins" / "vars" / "defaults.py"
    ).is_file()
    return target


def test_the_image_installs_the_collection_and_enables_its_vars_plugin(ee_context: Path) -> None:
    dockerfile = next(p for p in (ee_context / "Dockerfile", ee_context / "Containerfile") if p.exists())
    final = dockerfile.read_text().split("AS final", 1)[1]
    assert "ansible-galaxy collection install --offline" in final
    assert "ENV ANSIBLE_VARS_ENABLED=host_group_vars,gpubring.core.defaults" in final
    shipped = ee_context / "_build" / "collection"
    for part in (
        "plugins/vars/defaults.py",
        "versions.yml",
        "settings.yml",
        "roles/nvidia_driver",
        "playbooks/site.yml",
    ):
        assert (shipped / part).exists(), part


def test_plain_ansible_gets_defaults_and_matrix_from_the_installed_collection(
    installed: Path, tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(SAMPLE, inventory, ignore=shutil.ignore_patterns(".gpubring"))
    assert "gpubring_cluster_name: prod-gpu" in (inventory / "group_vars" / "all" / "cluster.yml").read_text()
    overrides = {"gpubring_versions": {"kubernetes": {"version": "1.34.9"}}}
    (inventory / "group_vars" / "all" / "versions.yml").write_text(yaml.safe_dump(overrides))
    pins = yaml.safe_load((REPO / "versions.yml").read_text())["gpubring_versions"]
    settings = yaml.safe_load((REPO / "settings.yml").read_text())["options"]
    gpu_groups = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"][
        "children"
    ]
    host = gpu_groups["gpu_train"]["hosts"]  # the sample's GPU nodes are in child groups
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        # Away from the checkout: no ansible.cfg, only the installed collection.
        "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(installed),
        "ANSIBLE_VARS_ENABLED": "host_group_vars,gpubring.core.defaults",
    }
    probe = tmp_path / "probe.yml"
    probe.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": next(iter(host)),
                    "gather_facts": False,
                    "tasks": [
                        {
                            "ansible.builtin.copy": {
                                "dest": str(tmp_path / "out.json"),
                                "content": "{{ {'matrix': gpubring_matrix, 'svc': gpubring_service_cidr,"
                                " 'name': gpubring_cluster_name, 'serial': gpubring_serial} | to_json }}",
                            },
                            "delegate_to": "localhost",
                        }
                    ],
                }
            ]
        )
    )
    done = subprocess.run(
        [_tool("ansible-playbook"), "-i", str(inventory / "hosts.yml"), str(probe), "-c", "local"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["matrix"]["kubernetes"]["version"] == "1.34.9"  # the inventory's override
    assert out["matrix"]["helm"] == pins["helm"]  # every other pin as versions.yml says
    assert out["serial"] == settings["gpubring_serial"]["default"]  # a default nobody overrode
    assert (
        out["name"] == "prod-gpu" != settings["gpubring_cluster_name"]["default"]
    )  # group_vars beat defaults
