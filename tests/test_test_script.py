"""scripts/test.sh's switches: a value it does not take stops it before any step, naming the switch."""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers import REPO


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"GPUBRING_PYTEST_BESIDE": "yes"}, "GPUBRING_PYTEST_BESIDE=yes (expected 0 or 1)"),
        (
            {"GPUBRING_PYTEST_BESIDE": "1", "GPUBRING_PYTEST_BESIDE_WORKERS": "0"},
            "GPUBRING_PYTEST_BESIDE_WORKERS=0 (expected a whole number >= 1)",
        ),
    ],
)
def test_a_bad_switch_stops_it_before_any_step(env: dict[str, str], named: str) -> None:
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "test.sh")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert named in " ".join(result.stderr.split())
    assert "==>" not in result.stdout  # no step ran (setup is the first)
