"""`gpubring up INVENTORY`: validate, then run the phases through ansible-runner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from gpubring.commands._common import hold_run_lock
from gpubring.exitcodes import ExitCode
from gpubring.options import FromPhase, InventoryArg, Only, phase_run_options
from gpubring.runopts import RunOptions

# For tests and playbook development: run phase playbooks (preflight.yml, ...) from another folder.
PlaybooksDir = Annotated[Path | None, typer.Option("--playbooks-dir", hidden=True)]
Full = Annotated[
    bool,
    typer.Option(
        "--full",
        help="Run the host phase's roles on every host, also on those unchanged since their last complete "
        "run (which a run otherwise leaves out: docs/operations.md, 'Hosts left as they are').",
    ),
]


def _bad_input(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=ExitCode.BAD_INPUT) from None


@phase_run_options
def command(
    ctx: typer.Context,
    inventory: InventoryArg,
    *,
    only: Only = None,
    from_phase: FromPhase = None,
    playbooks_dir: PlaybooksDir = None,
    full: Full = False,
    run: RunOptions,
) -> None:
    """Bring the cluster up: preflight, host, cluster, platform, verify (or the phases asked for).

    Validates the inventory first: bad input touches no host (exit 2).

    Exit 1 when a task failed, 4 when a host was unreachable, 3 when cancelled (Ctrl-C, SIGTERM).

    Each run keeps its folder and report.json under INVENTORY/.gpubring/runs/ (see `gpubring runs`).
    """
    # Imported here: `gpubring --help` must not load the inventory model, rich's live view or ansible.
    from gpubring.commands._common import load_or_exit
    from gpubring.commands.runs import warn_orphans
    from gpubring.phases import PHASES, PhaseError, resolve_pattern, select_phases
    from gpubring.run import steps
    from gpubring.run.settings import RunSettings

    inv = load_or_exit(inventory)
    try:
        selection = select_phases(
            PHASES,
            only,
            from_phase,
            inv.phases,
            inv.phases_skipped_reason,
            check=run.check,
            check_only=inv.phases_check_only,
        )
    except PhaseError as exc:
        _bad_input(str(exc))
    limit = run.limit
    if limit and not limit.startswith("@") and not resolve_pattern(limit, inv.groups, list(inv.hosts)):
        _bad_input(f"--limit {limit}: matches no host of this inventory")
    if playbooks_dir is not None and not playbooks_dir.is_dir():
        _bad_input(f"--playbooks-dir {playbooks_dir}: not a folder")
    if not run.check:  # check mode changes nothing: it neither takes the run lock nor waits for it
        hold_run_lock(ctx, inv.root)
    warn_orphans(inventory, inv.root)
    phase_option = f"--only {only}" if only else f"--from {from_phase}" if from_phase else ""

    settings = RunSettings(
        inventory_root=inv.root,
        hosts_file=inv.hosts_file,
        command="up",
        phases=selection.run,
        phases_skipped=selection.skipped,
        playbooks_dir=playbooks_dir,
        serial=str(inv.settings["gpubring_serial"]),
        options=run,
        phase_option=phase_option,
        host_full=full,
    )
    step = steps.Step(settings, record=steps.Record(pins=selection.run))
    outcome = steps.run_steps(
        inv, [step], run, title=f"gpubring up {inventory}", phases=selection, scope=True
    )
    if outcome.last is not None:  # certificates that expire within gpubring_cert_warn_days (verify phase)
        from gpubring.commands.certs import print_cert_warnings

        print_cert_warnings(outcome.last.run_folder)
    from gpubring import support  # the end of `up` says when the pins leave upstream support

    for line in support.lines(inv.versions, only_alarming=True):
        typer.echo(line)
    raise typer.Exit(code=int(outcome.exit_code))
