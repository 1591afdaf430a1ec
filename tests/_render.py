"""Shared by the rendering tests: ansible-playbook runs on this machine, kubernetes-validate's schemas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes_validate import utils as kv_utils
from packaging.version import Version

from gpubring import paths
from gpubring.inventory import Inventory


def ansible_playbook(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The venv's ansible-playbook, run from the repository with its ansible.cfg and the collection."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(paths.project_root() / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(paths.collections_path()),
        "ANSIBLE_CACHE_PLUGIN": "memory",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), *map(str, args)],
        cwd=paths.project_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def run_play(playbook: Path, inventory: Path, extra: Mapping[str, Any]) -> None:
    """Run `playbook` on `inventory` with `extra` as -e (written to extra.json beside it); it must pass."""
    extra_file = playbook.with_name("extra.json")
    extra_file.write_text(json.dumps(extra), encoding="utf-8")
    result = ansible_playbook("-i", inventory, "-e", f"@{extra_file}", playbook)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def nearest_schema_version(pinned: str, available: list[str]) -> str:
    """The kubernetes-validate schema for a Kubernetes version: same minor, else the newest older
    one, else the oldest shipped (validation of a newer cluster with an older schema is stricter)."""
    want = Version(pinned)
    versions = sorted({Version(v) for v in available})
    same = [v for v in versions if (v.major, v.minor) == (want.major, want.minor)]
    older = [v for v in versions if (v.major, v.minor) < (want.major, want.minor)]
    chosen = same[-1] if same else older[-1] if older else versions[0]
    return str(chosen)


def schema_version(inv: Inventory) -> str:
    """The kubernetes-validate schema for the inventory's pinned Kubernetes."""
    return nearest_schema_version(inv.versions["kubernetes"]["version"], kv_utils.all_versions())
