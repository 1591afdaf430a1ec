"""Shared fixtures: the repository root, the sample inventory and temporary inventories."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from helpers import REPO

SAMPLE_INVENTORY = REPO / "inventories" / "prod"
SAMPLE_HOST_FILES = ("group_vars/all/teams.yml", "group_vars/all/gpu_sharing.yml")


@pytest.fixture
def sample_inventory() -> Path:
    """inventories/prod: the documented sample (3 control planes, 4 GPU nodes, 1 CPU node)."""
    return SAMPLE_INVENTORY


@pytest.fixture
def make_inventory(tmp_path: Path) -> Callable[..., Path]:
    """A temporary inventory: a copy of the sample (or nothing with copy_sample=False), then the given
    files written over it (text as is) or removed (None)."""

    def make(files: Mapping[str, str | None] | None = None, *, copy_sample: bool = True) -> Path:
        root = tmp_path / "inventory"
        if root.exists():
            shutil.rmtree(root)
        if copy_sample:
            shutil.copytree(SAMPLE_INVENTORY, root, ignore=shutil.ignore_patterns(".gpubring", "README.md"))
            if "hosts.yml" in (files or {}):
                # The sample's files that name its own hosts: the teams' quotas (its 4 GPU nodes) and
                # the GPU sharing of its node groups. A test's own hosts.yml comes without them
                # (unless the test writes them).
                for rel in SAMPLE_HOST_FILES:
                    if rel not in (files or {}):
                        (root / rel).unlink()
        root.mkdir(exist_ok=True)
        for rel, text in (files or {}).items():
            path = root / rel
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return root

    return make
