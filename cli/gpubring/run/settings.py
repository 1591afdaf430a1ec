"""What one run is given (RunSettings: what to run, where, with the operator's options) and what it
gives back (RunResult)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpubring import runstore
from gpubring.events import RunState
from gpubring.exitcodes import ExitCode
from gpubring.report import RunReport
from gpubring.runopts import RunOptions


@dataclass(frozen=True)
class RunSettings:
    """One run: what to run (either `playbook`, run as is, or `phases`, imported from `playbooks_dir`
    in order) and where, with the operator's `options`."""

    inventory_root: Path
    hosts_file: Path
    command: str = "up"
    playbook: Path | None = None
    phases: tuple[str, ...] = ()
    phases_skipped: tuple[tuple[str, str], ...] = ()
    playbooks_dir: Path | None = None
    serial: str | None = None
    options: RunOptions = field(default_factory=RunOptions)
    keep_runs: int = runstore.DEFAULT_KEEP
    run_folder: Path | None = None
    # The --only/--from the operator gave, as typed (`--only preflight,host`): the run is partial.
    phase_option: str = ""
    # Seconds a cancelled run waits for the package work of the hosts that had a task in flight;
    # None: -e gpubring_cancel_wait_timeout, else the inventory's setting (settings.yml: 300).
    cancel_wait_timeout: int | None = None
    # `up --full`: every host goes through the host phase's roles, even one whose record says it is
    # unchanged since its last complete run (gpubring.run.hoststate, playbooks/host.yml).
    host_full: bool = False


@dataclass(frozen=True)
class RunResult:
    run_folder: Path
    report_path: Path
    status: str
    exit_code: ExitCode
    report: RunReport
    state: RunState
