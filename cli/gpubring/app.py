"""The typer application: one module per verb under gpubring.commands.

Nothing imported here may import ansible or ansible_runner: `gpubring --help` must stay fast.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO, cast

import typer

from gpubring import __version__
from gpubring.commands import (
    bundle,
    certs,
    check,
    dev,
    etcd,
    lab,
    node,
    plan,
    reset,
    runs,
    up,
    upgrade,
    verify,
    versions,
)

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
app.command("reset")(reset.command)
app.command("upgrade")(upgrade.command)
app.command("verify")(verify.command)
app.command("certs")(certs.command)
app.add_typer(lab.app, name="lab")
app.add_typer(dev.app, name="dev")
app.add_typer(node.app, name="node")
app.add_typer(etcd.app, name="etcd")
app.add_typer(bundle.app, name="bundle")


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


# Without a terminal (CI logs, pipes, files) rich would wrap every table at 80 columns
# (`reachabl e`); a log is read wide, so tables get this many columns unless COLUMNS says otherwise.
UNWRAPPED_COLUMNS = "250"


class _ReaderMayLeave:
    """stdout for a reader that may go away (`gpubring plan … | head`): once the pipe is closed, what is
    left to print is dropped, and the command goes on and exits with its own code (a run's exit code
    stays the run's, as in its report.json), with no BrokenPipeError traceback."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())  # Python's own flush at exit finds a sink too
        os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main() -> None:
    if not sys.stdout.isatty():
        os.environ.setdefault("COLUMNS", UNWRAPPED_COLUMNS)
        sys.stdout = cast("TextIO", _ReaderMayLeave(sys.stdout))
    app()
