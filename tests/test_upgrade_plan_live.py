"""Issue 21 item 10: `gpubring upgrade INVENTORY --check` shows kubeadm's own upgrade plan.

After gpubring's plan (from its record), when the phases an upgrade runs include `cluster`, the
check reads the first control plane with playbooks/upgrade_plan.yml (read-only, through the same
executor as every verb, in check mode) and prints what roles/cluster_upgrade/tasks/kubeadm_plan.yml
published. An inventory that leaves the cluster phase out (the e2e lab's) reaches no host; an
unreachable first control plane leaves gpubring's plan standing (exit 0, said in a line).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.run import steps

LAB_PHASES = (
    "gpubring_phases: [preflight, host, verify]\n"
    "gpubring_phases_skipped_reason: a lab of containers has no cluster\n"
    "gpubring_phases_check_only: [cluster, platform]\n"
)
HEAD = "nothing is changed; with the cluster phase, the first control plane is read"


def cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["upgrade", *map(str, args)], env={"COLUMNS": "300"})
    return result.exit_code, result.output


def capture(monkeypatch: pytest.MonkeyPatch, code: ExitCode = ExitCode.OK) -> list[Any]:
    """The executor replaced: the steps it is given are kept; it answers `code`."""
    ran: list[Any] = []

    def run_steps(_inv: Any, todo: list[Any], options: Any, **_kw: Any) -> Any:
        ran.append((todo, options))
        return SimpleNamespace(exit_code=code, last=None)

    monkeypatch.setattr(steps, "run_steps", run_steps)
    return ran


def test_the_check_reads_kubeadms_plan_only_with_the_cluster_phase(
    make_inventory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = capture(monkeypatch)
    inventory = make_inventory()
    code, out = cli(inventory, "--check")
    assert code == 0, out
    assert HEAD in out and "no host is reached" not in out
    assert "first control plane cp-1" in out  # gpubring's own plan first
    assert len(ran) == 1, ran
    todo, options = ran[0]
    assert [step.settings.playbook.name for step in todo] == ["upgrade_plan.yml"]
    assert options.check is True  # the executor runs it in check mode
    assert todo[0].record is None  # a read records nothing in installed.json


def test_the_labs_inventory_without_the_cluster_phase_reaches_no_host(
    make_inventory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = capture(monkeypatch)
    inventory = make_inventory({"group_vars/all/phases.yml": LAB_PHASES})
    code, out = cli(inventory, "--check")
    assert code == 0, out
    assert "first control plane cp-1" in out
    assert ran == []
    assert not (inventory / ".gpubring" / "runs").exists()


@pytest.mark.parametrize(
    ("answer", "exit_code", "said"),
    [
        (ExitCode.UNREACHABLE, ExitCode.OK, "the cluster could not be reached (cp-1 unreachable)"),
        (ExitCode.TASK_FAILED, ExitCode.TASK_FAILED, ""),
        (ExitCode.CANCELLED, ExitCode.CANCELLED, ""),
    ],
)
def test_an_unreachable_cluster_leaves_the_plan_standing(
    make_inventory: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    answer: ExitCode,
    exit_code: ExitCode,
    said: str,
) -> None:
    capture(monkeypatch, answer)
    code, out = cli(make_inventory(), "--check")
    assert code == exit_code, out
    assert "first control plane cp-1" in out
    if said:
        assert said in out and "gpubring's plan above stands" in out
    else:
        assert "could not be reached" not in out


def test_the_plan_playbook_says_when_there_is_no_cluster_yet_and_changes_nothing(tmp_path: Path) -> None:
    """playbooks/upgrade_plan.yml run for real by `gpubring upgrade --check` (ansible-runner, local
    connection): no admin kubeconfig, so it says there is no cluster yet, runs no kubeadm, changes
    nothing, and the exit code is 0."""
    root = tmp_path / "inventory"
    root.mkdir()
    missing = tmp_path / "kubernetes" / "admin.conf"
    (root / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        '    ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
        "    ansible_become: false\n"  # this machine's user runs it; no sudo here
        f"    cluster_upgrade_kubeconfig: {missing}\n"
        "  children:\n    control_plane:\n      hosts:\n        cp-1: {}\n"
        "    gpu_nodes:\n      hosts:\n        gpu-1: {}\n",
        encoding="utf-8",
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out = cli(root, "--check")
    assert code == 0, out
    assert f"cp-1: no cluster yet on cp-1 ({missing} is missing): kubeadm upgrade plan not run" in out, out
    assert "would change 0 (check mode)" in out, out
    assert "failed 0 · unreachable 0" in out, out
    runs = sorted((root / ".gpubring" / "runs").iterdir())
    assert len(runs) == 1 and "upgrade-plan" in runs[0].name, runs
    # Nothing made outside the inventory's own .gpubring (the run folder).
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not missing.parent.exists()
