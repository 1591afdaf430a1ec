"""`gpubring runs INVENTORY [RUN]`: past runs of an inventory, or one run's summary and failures."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg

RunArg = Annotated[
    str | None, typer.Argument(help="A run: its folder name, a unique prefix of it, or `last`.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def command(inventory: InventoryArg, run: RunArg = None, json_out: JsonFlag = False) -> None:
    """List past runs: start, command, status, duration, changed per host (newest first).

    With RUN, show that run's per-host summary, its failures and where it stopped.
    """
    from rich.console import Console

    from gpubring import runstore, view

    if not inventory.exists():
        typer.echo(f"error: {inventory}: no such inventory folder or file", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT)
    base = runstore.runs_dir(inventory if inventory.is_dir() else inventory.parent)
    console = Console(highlight=False)
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
        view.summary(console, record.report)
