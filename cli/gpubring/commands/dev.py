"""`gpubring dev`: commands for people who work on gpubring's roles (Molecule scenarios)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpubring import scenarios

app = typer.Typer(no_args_is_help=True)


@app.callback()
def _dev() -> None:
    """Developer tools: which Molecule scenarios a change touches, and running them."""


ChangedSince = Annotated[
    str | None,
    typer.Option(
        "--changed-since",
        metavar="REV",
        help="Only the scenarios that the changes since REV touch (REV, or a range A..B). Default: all.",
    ),
]
Run = Annotated[bool, typer.Option("--run", help="Run the selected scenarios with scripts/molecule-all.sh.")]
ListAll = Annotated[
    bool, typer.Option("--list", help="List every scenario with the roles and plugins it depends on.")
]
Explain = Annotated[bool, typer.Option("--explain", help="Say which changed file selected each scenario.")]
Root = Annotated[
    Path | None,
    typer.Option("--root", help="Repository (default: the git work tree of the current folder)."),
]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"gpubring dev scenarios: {message}", err=True)
    return typer.Exit(code=2)


@app.command("scenarios")
def scenarios_command(
    changed_since: ChangedSince = None,
    run: Run = False,
    list_all: ListAll = False,
    explain: Explain = False,
    root: Root = None,
) -> None:
    """Print the Molecule scenarios a change touches (one name a line); --run runs them."""
    try:
        repo = (root or scenarios.repository_root(Path.cwd())).resolve()
        if not (repo / "molecule").is_dir():
            raise _fail(f"{repo}: no molecule/ folder (use --root)")
        if list_all:
            for name in scenarios.discover(repo):
                deps = scenarios.dependencies(repo, name)
                used = ", ".join(
                    [*(f"roles/{r}" for r in deps.roles), *deps.plugins, *deps.module_utils, *deps.images]
                )
                typer.echo(f"{name}: {used or '(own folder and shared files only)'}")
            return
        if changed_since is None:
            selected = {name: "all scenarios" for name in scenarios.discover(repo)}
        else:
            selected = scenarios.select(repo, scenarios.changed_paths(repo, changed_since))
        for name, reason in selected.items():
            typer.echo(f"{name}\t{reason}" if explain else name)
        if not run:
            return
        if not selected:
            typer.echo("no scenario touched: nothing to run", err=True)
            return
        code = scenarios.run(repo, list(selected))
    except scenarios.ScenarioError as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(code=code)
