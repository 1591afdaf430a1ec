"""An operator's -e key that no role, setting or known variable declares gets a warning on stderr
(with a did-you-mean when a declared key is close) before anything runs; the run goes on."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpubring.app import app
from gpubring.options import extra_vars_warnings
from gpubring.run import process
from gpubring.run.settings import RunSettings
from helpers import DATA

TYPO = "warning: -e nvidia_driver_brnach: no role or setting declares it; did you mean nvidia_driver_branch?"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (
            "nvidia_driver_brnach",
            "-e nvidia_driver_brnach: no role or setting declares it; did you mean nvidia_driver_branch?",
        ),
        ("gpubring_cnii", "-e gpubring_cnii: no role or setting declares it; did you mean gpubring_cni?"),
        (
            "nvidai_driver_branch",
            "-e nvidai_driver_branch: no role or setting declares it; did you mean nvidia_driver_branch?",
        ),
        ("change_ticket", "-e change_ticket: no role or setting declares it"),
    ],
)
def test_an_undeclared_key_is_named_with_a_did_you_mean(key: str, expected: str) -> None:
    assert extra_vars_warnings([{key: "1"}]) == [expected]


@pytest.mark.parametrize(
    "key",
    [
        "nvidia_driver_branch",  # a role input (argument spec)
        "helm_wait_timeouts",  # a role default
        "gpubring_serial",  # a settings.yml setting
        "gpubring_matrix",  # the vars plugin's
        "ansible_user",  # Ansible's connection variables
        "ansible_become_password",
        "inventory_hostname",  # Ansible's magic variables
    ],
)
def test_a_declared_or_ansible_key_is_not_warned_about(key: str) -> None:
    assert extra_vars_warnings([{key: "1"}]) == []


def test_every_source_is_looked_at_once_per_key(tmp_path: Path) -> None:
    vault = tmp_path / "secret.yml"
    sources = [{"site_a": "1"}, {"site_a": "2", "site_b": {"x": 1}}, vault]
    assert extra_vars_warnings(sources) == [
        "-e site_a: no role or setting declares it",
        "-e site_b: no role or setting declares it",
    ]


def test_the_warning_comes_before_the_run_which_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hosts are never reached: process.run stands in for the run, and says when it starts."""
    inventory = tmp_path / "inventory"
    shutil.copytree(DATA / "inventories" / "localhost", inventory)
    started: list[object] = []

    def run(settings: RunSettings, **_: object) -> None:
        started.append(settings.options.extra_vars)
        print("run started", file=sys.stderr)
        raise typer.Exit(code=0)

    monkeypatch.setattr(process, "run", run)
    args = ["up", str(inventory), "-e", "nvidia_driver_brnach=580", "-e", "ansible_user=root"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert started == [({"nvidia_driver_brnach": "580"}, {"ansible_user": "root"})]
    lines = result.stderr.splitlines()
    assert lines.index(TYPO) < lines.index("run started"), lines
    assert not [line for line in lines if "ansible_user" in line]


def test_the_warning_is_printed_even_when_validation_stops_the_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["up", str(tmp_path / "missing"), "-e", "nvidia_driver_brnach=580"])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0] == TYPO
    assert lines[1].startswith("error: ")
