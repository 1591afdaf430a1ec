"""_render.planned_releases: the session's one render of an inventory's releases, handed out as fresh
copies, and a new render for an inventory whose files differ."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import _render
from gpubring.inventory import load_inventory
from gpubring.releases import plan_releases
from helpers import REPO

SAMPLE = REPO / "inventories" / "prod"


def test_each_call_hands_out_its_own_copy_of_the_one_render() -> None:
    assert os.environ.get(_render.RELEASES_CACHE_ENV), "conftest.py makes the session's folder"
    inv = load_inventory(SAMPLE)
    first, second = _render.planned_releases(inv), _render.planned_releases(inv)
    assert first == second == plan_releases(inv)
    first[0].values["changed by a test"] = True
    assert "changed by a test" not in second[0].values
    assert "changed by a test" not in _render.planned_releases(inv)[0].values


def test_the_key_is_the_folder_and_every_file_in_it(tmp_path: Path) -> None:
    copy = tmp_path / "prod"
    shutil.copytree(SAMPLE, copy, ignore=shutil.ignore_patterns(".gpubring"))
    key = _render._inventory_key(copy)
    assert key != _render._inventory_key(SAMPLE)  # another folder
    (copy / ".gpubring").mkdir()
    (copy / ".gpubring" / "state.json").write_text("{}")
    assert _render._inventory_key(copy) == key  # gpubring's own state is no input
    settings = copy / "group_vars" / "all" / "zz-site.yml"
    settings.write_text("---\nmonitoring_enabled: false\n")
    assert _render._inventory_key(copy) != key


def test_without_the_sessions_folder_it_renders_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_render.RELEASES_CACHE_ENV)
    calls: list[object] = []
    monkeypatch.setattr(_render, "plan_releases", lambda inv: calls.append(inv) or [])
    inv = load_inventory(SAMPLE)
    assert _render.planned_releases(inv) == [] and _render.planned_releases(inv) == []
    assert calls == [inv, inv]
