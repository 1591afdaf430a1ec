"""`gpubring runs INVENTORY [RUN]`: past runs of an inventory, or one run's summary and failures.

`--kill-orphans` stops the ansible-playbook processes that earlier runs of the inventory left running
when their gpubring was killed (`gpubring up` and `gpubring node` point at it; see `warn_orphans`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg

RunArg = Annotated[
    str | None, typer.Argument(help="A run: its folder name, a unique prefix of it, or `last`.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
KillOrphans = Annotated[
    bool,
    typer.Option(
        "--kill-orphans",
        help="Stop (SIGKILL) the ansible-playbook processes earlier runs left running when their "
        "gpubring was killed.",
    ),
]


def interactive() -> bool:
    """Whether the operator can answer a question (stdin and stderr are terminals)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def warn_orphans(inventory: Path, inventory_root: Path) -> None:
    """Before a run: say which ansible-playbook processes earlier runs of this inventory left running
    (their gpubring is gone). On a terminal ask whether to stop them (default no); elsewhere print
    the command that does, and go on."""
    from gpubring.run.leftovers import find_orphans, kill_orphans

    orphans = find_orphans(inventory_root)
    if not orphans:
        return
    typer.echo(
        f"warning: {len(orphans)} ansible-playbook process(es) left running by earlier gpubring runs of "
        "this inventory (their gpubring is gone); they may still be changing hosts:",
        err=True,
    )
    for orphan in orphans:
        typer.echo(f"  {orphan.describe()}", err=True)
    if interactive():
        if typer.confirm("Stop them now (SIGKILL)?", default=False, err=True):
            typer.echo(f"stopped {kill_orphans(orphans)} process(es)", err=True)
        return
    typer.echo(f"  to stop them: gpubring runs {inventory} --kill-orphans", err=True)


def command(
    inventory: InventoryArg, run: RunArg = None, json_out: JsonFlag = False, kill_orphans: KillOrphans = False
) -> None:
    """List past runs: start, command, status, duration, scope (check, partial), changed per host,
    GPU acceptance verdicts (newest first).

    With RUN, show that run's per-host summary, its hardware (preflight), its failures, where it
    stopped, its reboots and each GPU node's acceptance verdict. With --kill-orphans, stop what
    earlier runs left running when their gpubring was killed.
    """
    from rich.console import Console

    from gpubring import runstore, view
    from gpubring.report import RunReport

    if not inventory.exists():
        typer.echo(f"error: {inventory}: no such inventory folder or file", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT)
    root = inventory if inventory.is_dir() else inventory.parent
    base = runstore.runs_dir(root)
    console = Console(highlight=False)
    if kill_orphans:
        _kill_orphans(root)
        return
    if run is None:
        rows = [runstore.summary_row(record) for record in runstore.list_runs(base)]
        if json_out:
            typer.echo(json.dumps(rows, indent=2))
        elif not rows:
            console.print(f"no runs yet under {base}")
        else:
            console.print(view.runs_table([{**row, **runstore.display_cells(row)} for row in rows]))
        return
    try:
        record = runstore.find_run(base, run)
    except runstore.RunNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    if json_out:
        typer.echo(json.dumps(record.report or {"run": record.name, "status": record.status}, indent=2))
    elif record.report is None:
        console.print(f"{record.name}: no report (the run is still going or was killed)")
    else:
        console.print(f"run {record.name}: gpubring {record.command}, started {record.started}")
        past = RunReport.from_json(record.report)
        for line in view.hardware_lines(past.hardware):
            console.print(line)
        view.summary(console, past)


def _kill_orphans(root: Path) -> None:
    from gpubring.run.leftovers import find_orphans, kill_orphans

    orphans = find_orphans(root)
    if not orphans:
        typer.echo("no ansible-playbook left running by an earlier run of this inventory")
        return
    for orphan in orphans:
        typer.echo(f"stopping {orphan.describe()}")
    typer.echo(f"stopped {kill_orphans(orphans)} process(es)")
