"""`gpubring up`: bad input stops before any host, real runs on localhost, secrets, cancel by SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpubring.app import app
from gpubring.options import targeted_run_options
from gpubring.runopts import RunOptions
from helpers import DATA

TEST_PHASES = DATA / "phases"
ALLOWED = "the phases are preflight, host, cluster, platform, verify"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """A one-node inventory on this machine (local connection), in a temporary folder."""
    root = tmp_path / "inventory"
    shutil.copytree(DATA / "inventories" / "localhost", root)
    return root


def up(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["up", *map(str, args)])
    return result.exit_code, result.output


def runs_of(root: Path) -> list[Path]:
    base = root / ".gpubring" / "runs"
    return sorted(base.iterdir()) if base.is_dir() else []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "preflight,hots"], f"--only: unknown phase hots; {ALLOWED}"),
        (["--from", "clutser"], f"--from: unknown phase clutser; {ALLOWED}"),
        (["--only", "host", "--from", "cluster"], "--only and --from cannot be used together"),
        (["-e", "@missing-vars.yml"], "missing-vars.yml: no such file"),
        (["-e", "not-a-pair"], "'not-a-pair' is not KEY=VALUE"),
        (["--limit", "gpu-9*"], "--limit gpu-9*: matches no host of this inventory"),
    ],
)
def test_bad_input_exits_2_before_any_host(inventory: Path, args: list[str], message: str) -> None:
    code, output = up(inventory, *args)
    assert code == 2
    assert message in output
    assert "Traceback" not in output
    assert runs_of(inventory) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param([], RunOptions(), id="defaults"),
        pytest.param(
            [
                *("-l", "gpu-*", "-t", "a,b", "--skip-tags", "c", "-C", "-D", "-e", "k=v", "-e", "{j: 1}"),
                *("-f", "3", "--json", "r.json", "--no-accelerate", "-vv"),
            ],
            RunOptions(
                extra_vars=({"k": "v"}, {"j": 1}),
                limit="gpu-*",
                tags="a,b",
                skip_tags="c",
                check=True,
                diff=True,
                forks=3,
                verbosity=2,
                accelerate=False,
                json_report=Path("r.json"),
            ),
            id="every-option",
        ),
    ],
)
def test_the_run_options_reach_the_command_as_one_value(args: list[str], expected: RunOptions) -> None:
    seen: list[RunOptions] = []
    probe = typer.Typer()

    @probe.command()
    @targeted_run_options
    def command(*, run: RunOptions) -> None:
        seen.append(run)

    result = CliRunner().invoke(probe, args)
    assert result.exit_code == 0, result.output
    assert seen == [expected]


def test_bad_extra_vars_file_exits_2(inventory: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("password: [unclosed\nother: 1\n")
    code, output = up(inventory, "-e", f"@{bad}")
    assert code == 2
    assert f"-e @{bad}: invalid YAML/JSON at line 2" in output
    assert runs_of(inventory) == []


def test_invalid_inventory_exits_2_before_any_host(inventory: Path) -> None:
    hosts = inventory / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("    gpu_nodes:\n      hosts:\n        node1:\n", ""))
    code, output = up(inventory, "--only", "preflight")
    assert code == 2
    assert "gpu_nodes" in output
    assert runs_of(inventory) == []


def test_inventory_phases_leave_nothing_to_run(inventory: Path) -> None:
    group_vars = inventory / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    (group_vars / "phases.yml").write_text(
        "---\ngpubring_phases: [preflight, host]\n"
        "gpubring_phases_skipped_reason: containers cannot run a kubelet\n"
    )
    code, output = up(inventory, "--from", "cluster")
    assert code == 2
    assert "no phase left to run" in output
    assert "cluster: the inventory leaves it out: containers cannot run a kubelet" in output
    assert runs_of(inventory) == []


def test_up_only_preflight_end_to_end(inventory: Path, tmp_path: Path) -> None:
    """The real phase playbook and role over the local connection, as an operator runs it."""
    copy = tmp_path / "out" / "report.json"
    copy.parent.mkdir()  # --json writes into an existing folder (a missing one is bad input)
    code, output = up(inventory, "--only", "preflight", "--json", copy)
    assert code == 0, output
    assert "phases: preflight" in output
    assert "skipping host, cluster, platform, verify: not asked for (--only preflight)" in output
    assert "== phase preflight" in output
    assert "-- play: Preflight checks on every host [all]" in output
    assert "ok (exit 0)" in output
    [folder] = runs_of(inventory)
    assert folder.name.endswith("-up")
    for path in (inventory / ".gpubring", folder.parent, folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    data = json.loads((folder / "report.json").read_text())
    assert json.loads(copy.read_text()) == data
    assert copy.stat().st_mode & 0o777 == 0o600
    assert data["command"] == "up"
    assert data["inventory"] == str(inventory.resolve())
    assert data["status"] == "ok"
    assert data["phases"] == {
        "run": ["preflight"],
        "skipped": [
            {"phase": p, "reason": "not asked for (--only preflight)"}
            for p in ("host", "cluster", "platform", "verify")
        ],
    }
    assert data["stats"]["node1"]["failed"] == 0
    assert data["stats"]["node1"]["ok"] >= 1
    assert data["failures"] == []
    run_yml = (folder / "project" / "run.yml").read_text()
    assert "playbooks/preflight.yml" in run_yml
    assert "host.yml" not in run_yml


def test_secrets_never_reach_output_or_run_folder(inventory: Path, tmp_path: Path) -> None:
    secret_file = tmp_path / "secrets.yml"
    secret_file.write_text("gpubring_test_file_secret: F1le-S3cr3t\n")
    code, output = up(
        inventory,
        "--playbooks-dir",
        TEST_PHASES,
        "--only",
        "preflight",
        "-e",
        "gpubring_test_secret=S3cr3t-VALUE",
        "-e",
        f"@{secret_file}",
        "-v",  # ansible's own output on stdout too
    )
    # exit 0: the play asserted both secrets arrived, then printed and used them under no_log
    assert code == 0, output
    assert "output has been hidden" in output
    [folder] = runs_of(inventory)
    for secret in ("S3cr3t-VALUE", "F1le-S3cr3t"):
        assert secret not in output
        for path in folder.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path
    report = json.loads((folder / "report.json").read_text())
    assert report["options"]["extra_vars"] == ["gpubring_test_secret", "gpubring_test_file_secret"]


def _left_running(marker: str) -> list[str]:
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    left.append(entry.name)
            except OSError:
                continue
    return left


def test_sigterm_cancels_and_says_where_it_stopped(inventory: Path, tmp_path: Path) -> None:
    marker = tmp_path / "waiting"
    args = ["up", str(inventory), "--playbooks-dir", str(TEST_PHASES), "--only", "host"]
    args += ["-e", f"marker={marker}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpubring", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        deadline = time.monotonic() + 180  # a safety net for a broken run, not a timing assertion
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), proc.communicate(timeout=60)[0] if proc.poll() is not None else "no marker"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, output
    assert "cancelling (SIGTERM received)" in output
    assert "stopped in phase host, play Wait for a signal:" in output
    assert "node1: during Wait for the signal" in output
    assert "cancelled (exit 3)" in output
    [folder] = runs_of(inventory)
    data = json.loads((folder / "report.json").read_text())
    assert data["status"] == "cancelled"
    assert data["exit_code"] == 3
    assert data["stopped_at"]["phase"] == "host"
    assert data["stopped_at"]["hosts"]["node1"]["task"] == "Wait for the signal"
    assert data["stopped_at"]["hosts"]["node1"]["finished"] is False
    assert _left_running(str(folder)) == []
