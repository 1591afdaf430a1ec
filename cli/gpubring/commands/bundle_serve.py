"""`gpubring bundle serve DIR`: serve a bundle to an air-gapped site (the logic is gpubring.bundle.serve).

The command function is added to the `bundle` sub-app (commands/bundle.py) as its `serve` command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpubring.exitcodes import ExitCode


def serve_command(
    bundle_dir: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", help="A bundle folder written by `gpubring bundle`.", show_default=False
        ),
    ],
    address: Annotated[
        str, typer.Option("--address", help="Address to listen on (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="HTTP port (0: any free port).", min=0, max=65535)
    ] = 8080,
    registry_port: Annotated[
        int | None,
        typer.Option(
            "--registry-port",
            help="Port of the image registry (docker-registry, when installed) [default: --port + 1].",
            show_default=False,
        ),
    ] = None,
    *,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not log each request.")] = False,
) -> None:
    """Serve DIR's apt repositories, charts and files over HTTP (and its images from Debian's
    docker-registry when installed) and print the mirror variables for the inventory.

    Runs until Ctrl-C or SIGTERM.
    """
    from gpubring.bundle import serve

    def say(line: str) -> None:
        typer.echo(line)

    def log(line: str) -> None:
        typer.echo(line, err=True)

    try:
        serve.serve(bundle_dir, address, port, say, registry_port=registry_port, log=None if quiet else log)
    except serve.ServeError as err:
        typer.echo(f"bundle serve: error: {err}", err=True)
        raise typer.Exit(code=int(ExitCode.BAD_INPUT)) from None
