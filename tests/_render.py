"""Shared by the rendering tests: a play run on this machine, kubernetes-validate's schemas (the light
helpers, ansible_playbook among them, are in helpers.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes_validate import utils as kv_utils
from packaging.version import Version

from gpubring.inventory import Inventory
from helpers import ansible_playbook


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
