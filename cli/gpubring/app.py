"""The typer application: one module per verb under gpubring.commands.

Nothing imported here may import ansible or ansible_runner: `gpubring --help` must stay fast.
"""

from __future__ import annotations

import typer

from gpubring import __version__
from gpubring.commands import check, dev, lab, node, plan, runs, up, versions

app = typer.Typer(
    name="gpubring",
    help="Bring up GPU Kubernetes clusters on bare metal: preflight, host, cluster, platform, verify.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help text: importing typer's rich formatter costs ~0.1 s of every start-up.
    rich_markup_mode=None,
)

app.command("up")(up.command)
app.command("plan")(plan.command)
app.command("check")(check.command)
app.command("versions")(versions.command)
app.command("runs")(runs.command)
app.add_typer(lab.app, name="lab")
app.add_typer(dev.app, name="dev")
app.add_typer(node.app, name="node")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpubring {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """gpubring: one command from a fresh OS install to a GPU Kubernetes cluster."""


def main() -> None:
    app()
