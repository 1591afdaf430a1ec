"""Shared fixtures: the repository root, the sample inventory and temporary inventories."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from helpers import REPO

SAMPLE_INVENTORY = REPO / "inventories" / "prod"
SAMPLE_HOST_FILES = ("group_vars/all/teams.yml", "group_vars/all/gpu_sharing.yml")
# _render.RELEASES_CACHE_ENV (not imported: _render pulls in Ansible and kubernetes-validate).
RELEASES_CACHE_ENV = "GPUBRING_TEST_RELEASES_CACHE"
_RELEASES_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The session's folder for _render.planned_releases: made by the session (or xdist's controller),
    whose workers inherit it through the environment; never one a caller's environment names."""
    if hasattr(config, "workerinput"):  # an xdist worker: its controller made the folder
        return
    folder = tempfile.mkdtemp(prefix="gpubring-test-releases-")
    config.stash[_RELEASES_CACHE] = folder
    os.environ[RELEASES_CACHE_ENV] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_RELEASES_CACHE, "")
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(RELEASES_CACHE_ENV, None)


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
