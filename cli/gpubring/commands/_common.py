"""What the commands share: the bad-input exit (one `error:` line per Problem on stderr, exit code 2)
and the inventory's run lock of the verbs that change hosts (hold_run_lock).

The modules below commands/ raise (InventoryError, YamlError, ...) and never print or exit; the
commands turn the problems into this exit.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from gpubring.exitcodes import ExitCode

if TYPE_CHECKING:
    from gpubring.model import Inventory
    from gpubring.yamlfile import Problem


def exit_with(problems: Iterable[Problem]) -> NoReturn:
    """Print each problem as `error: <file>: <key>: <expected>` on stderr and exit with code 2."""
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    raise typer.Exit(code=ExitCode.BAD_INPUT) from None


def json_target(value: str | Path | None) -> str | Path | None:
    """Callback of every `--json PATH` option: PATH must be a file in an existing folder (or `-` for
    stdout where the command offers it), checked before anything runs, so a typo is exit 2 with a
    message instead of a traceback after the work is done."""
    if value is None or str(value) == "-":
        return value
    path = Path(value)
    if path.is_dir():
        raise typer.BadParameter(f"{value} is a folder; give a file name in it")
    if not path.parent.is_dir():
        raise typer.BadParameter(f"the folder {path.parent} does not exist")
    return value


def hold_run_lock(ctx: typer.Context, inventory_root: Path) -> None:
    """Take the inventory's run lock (gpubring.lock) for the rest of this command, or exit 2 naming
    the run that holds it; never waits. Every verb that changes hosts calls it after validation,
    before the first host is reached, with the `ctx: typer.Context` typer gives it; read-only verbs
    and --check runs do not (they never wait).

    Released when the command ends, however it ends: the lock is a resource of the command's
    context (Context.with_resource), which typer closes on return, typer.Exit, an exception or
    Ctrl-C; the kernel drops the flock if the process dies (SIGKILL). Ctrl-C and SIGTERM during the
    run are the runner's cancel (exit 3), after which the command ends through the same close."""
    import sys

    from gpubring import lock

    try:
        held = ctx.with_resource(lock.held(inventory_root, lock.command_line(sys.argv)))
    except lock.LockError as exc:
        first, *rest = exc.lines()
        typer.echo(f"error: {first}", err=True)
        for line in rest:
            typer.echo(line, err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    if held.taken_over is not None:
        typer.echo(
            "notice: took over the run lock of this inventory from a run that was killed: "
            f"{held.taken_over.describe()}",
            err=True,
        )


def load_or_exit(path: Path, *, check_rules: bool = True) -> Inventory:
    """The inventory, or one `error:` line per problem on stderr and exit code 2."""
    from gpubring.inventory import InventoryError, load_inventory  # not at import: `--help` stays light

    try:
        return load_inventory(path, check_rules=check_rules)
    except InventoryError as exc:
        exit_with(exc.problems)
