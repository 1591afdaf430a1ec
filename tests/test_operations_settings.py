"""The settings of the admission gate and of the package manager wait (settings.yml) refuse bad values
before any host is touched: exit 2, the file, the key and what was expected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import inventory_problems, refused

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py
SITE = "group_vars/all/zz-operations.yml"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("gpubring_package_lock_timeout: 0", "gpubring_package_lock_timeout: expected a number >= 1, got 0"),
        (
            "gpubring_package_lock_timeout: soon",
            "gpubring_package_lock_timeout: expected an integer, got 'soon'",
        ),
        (
            "gpubring_acceptance_taint: Bad_Prefix/acceptance",
            "gpubring_acceptance_taint: expected a Kubernetes label key such as example.com/name",
        ),
        (
            "gpubring_acceptance_taint: gpubring.io/",
            "gpubring_acceptance_taint: expected a Kubernetes label key",
        ),
        ("gpubring_acceptance_gate: maybe", "gpubring_acceptance_gate: expected a boolean (true or false)"),
        # The unchanged-host check (issue 26): a typo must not silently run every role, or none.
        ("gpubring_host_fast: fast", "gpubring_host_fast: expected a boolean (true or false)"),
        ("gpubring_host_fast: [true]", "gpubring_host_fast: expected a boolean (true or false)"),
    ],
)
def test_a_bad_operations_setting_is_refused_before_any_host(
    make_inventory: MakeInventory, line: str, expected: str
) -> None:
    root = make_inventory({SITE: f"---\n{line}\n"})
    stderr = refused("check", root)
    assert f"error: {SITE}: {expected}" in stderr, stderr


@pytest.mark.parametrize("value", ["true", "false", "yes", "no"])
def test_a_good_host_fast_setting_is_taken(make_inventory: MakeInventory, value: str) -> None:
    assert inventory_problems(make_inventory({SITE: f"---\ngpubring_host_fast: {value}\n"})) == []
