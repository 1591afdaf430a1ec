"""`gpubring bundle`: build the bundle an air-gapped site needs (and, with `serve`, serve it).

`gpubring bundle INVENTORY DIR` is `gpubring bundle build INVENTORY DIR`: the group runs `build` when
its first argument is not one of its commands (so `gpubring bundle serve DIR` stays unambiguous).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from gpubring.options import InventoryArg

if TYPE_CHECKING:
    from rich.console import Console

    from gpubring import bundle
    from gpubring.bundle import fetch


class _BuildByDefault(TyperGroup):
    """A group whose default command is `build`: `bundle INVENTORY DIR` = `bundle build INVENTORY DIR`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # a click Context (typer vendors click)
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["build", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_BuildByDefault,
    help="The bundle of an air-gapped site: `gpubring bundle INVENTORY DIR` builds it "
    "(the same as `gpubring bundle build INVENTORY DIR`).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

BundleDir = Annotated[
    Path,
    typer.Argument(
        metavar="DIR", help="The bundle's folder (created; a second run resumes in it).", show_default=False
    ),
]
ChartsDir = Annotated[
    Path | None,
    typer.Option(
        "--charts",
        metavar="DIR",
        help="Local charts to package instead of fetching them: <chart>-<version>/ or <chart>-<version>.tgz.",
    ),
]


SignKey = Annotated[
    str | None,
    typer.Option(
        "--sign-key",
        metavar="KEYID",
        help="Sign the apt repositories' Release with this gpg key "
        "(default: unsigned, read with [trusted=yes]).",
    ),
]

Only = Annotated[
    str | None,
    typer.Option(
        "--only",
        metavar="PARTS",
        help="Build only these parts, comma-separated: apt, files, charts, images (default: all; the "
        "manifest keeps an earlier run's entries of the others).",
        show_default=False,
    ),
]


def _fail(message: str) -> None:
    from gpubring.exitcodes import ExitCode

    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=ExitCode.BAD_INPUT) from None


@app.command("build")
def build(
    inventory: InventoryArg,
    folder: BundleDir,
    charts: ChartsDir = None,
    sign_key: SignKey = None,
    only: Only = None,
) -> None:
    """Fetch what an offline site needs for INVENTORY into DIR: the files the roles download
    (DIR/files, as gpubring_binary_mirror serves them), the Helm charts at their pins (DIR/charts, a Helm
    repository), the container images (DIR/images, with skopeo, crane or ctr when one is on PATH), the
    apt repositories per OS release, DIR/manifest.json and DIR/hauler-manifest.yaml.

    What cannot be fetched from here is listed with its source and the real error; the rest goes on and
    the exit code is 0. A second run fetches only what is missing or changed."""
    from rich.console import Console

    from gpubring import bundle
    from gpubring.commands._common import exit_with, load_or_exit
    from gpubring.releases import ReleaseRenderError
    from gpubring.yamlfile import Problem

    try:
        parts = bundle.PARTS if only is None else bundle.parse_parts(only)
        bundle.check_folder(folder)
    except bundle.BundleError as exc:
        _fail(str(exc))
    if charts is not None and not charts.is_dir():
        _fail(f"--charts {charts}: expected a folder of <chart>-<version>/ or <chart>-<version>.tgz")
    inv = load_or_exit(inventory)
    console = Console(highlight=False, soft_wrap=True)

    def say(text: str) -> None:
        console.print(text, markup=False)

    try:
        result = bundle.build(
            inv, folder, _bar_output(say, console), charts_dir=charts, sign_key=sign_key, parts=parts
        )
    except bundle.BundleError as exc:
        _fail(str(exc))
        raise
    except ReleaseRenderError as exc:
        exit_with([Problem(exc.where, "releases", exc.message)])
    _summary(result, say)


def _summary(result: Any, say: Any) -> None:
    for entry in result.missing:
        what = entry.name if entry.kind == "image" else f"{entry.name} {entry.version}".rstrip()
        say(f"missing: {entry.kind} {what}: {entry.reason}")
    for note in result.notes:
        say(f"note: {note}")
    say(
        f"{len(result.fetched)} fetched, {len(result.missing)} missing "
        f"(see {result.folder / 'manifest.json'})"
    )


# `gpubring bundle serve DIR`: its own module (gpubring.bundle.serve does the serving).
from gpubring.commands.bundle_serve import serve_command  # noqa: E402 (after the group it joins)

app.command("serve")(serve_command)


def _bar_output(say: Callable[[str], None], console: Console) -> bundle.Output:
    """bundle.Output with a rich progress bar per download on a terminal (plain lines otherwise)."""
    from gpubring import bundle

    class BarOutput(bundle.Output):
        @contextmanager
        def progress(self, label: str) -> Iterator[fetch.Progress | None]:
            if not console.is_terminal:
                with super().progress(label) as plain:
                    yield plain
                return
            from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

            with Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=console,
                transient=True,
            ) as bar:
                task = bar.add_task(label, total=None)

                def update(done: int, total: int | None) -> None:
                    bar.update(task, completed=done, total=total)

                yield update

    return BarOutput(say)
