"""`gpubring plan INVENTORY`: what `gpubring up` would do, touching no host."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpubring.commands._common import json_target
from gpubring.options import InventoryArg

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from gpubring.inventory import Inventory
    from gpubring.manifests import ManifestsResult
    from gpubring.releases import Release

JsonOut = Annotated[
    str | None,
    typer.Option(
        "--json",
        callback=json_target,
        metavar="PATH|-",
        help="Also write the plan as JSON to PATH; `-` prints only JSON.",
    ),
]
ManifestsOut = Annotated[
    Path | None,
    typer.Option(
        "--manifests",
        metavar="DIR",
        help="Also write every release's rendered objects, in apply order, to DIR/<release>.yaml "
        "(charts rendered offline by Helm's engine from local charts; needs gpubring[render]).",
    ),
]
DownloadsFlag = Annotated[
    bool,
    typer.Option(
        "--downloads",
        help="Also show every download of a run (apt sources, files, charts, images) and where it "
        "comes from: upstream, or the mirror variable that covers it (JSON: `downloads`).",
    ),
]
ChartsDir = Annotated[
    Path | None,
    typer.Option(
        "--charts",
        metavar="DIR",
        help="With --manifests: a folder of local charts, <chart>-<version>/ or <chart>-<version>.tgz.",
    ),
]


def _fail(message: str) -> None:
    from gpubring.exitcodes import ExitCode

    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=ExitCode.BAD_INPUT) from None


def command(
    inventory: InventoryArg,
    json_out: JsonOut = None,
    manifests: ManifestsOut = None,
    charts: ChartsDir = None,
    downloads: DownloadsFlag = False,
) -> None:
    """Validate the inventory, then show the phases with their roles and hosts, the effective
    versions with every compatibility rule, and the Helm releases. Touches no host.

    With --manifests DIR, also write each release's objects as a run applies them (its namespace,
    gpubring's objects, the chart rendered by Helm, gpubring's custom resources) to DIR/<release>.yaml,
    to review or diff; a release whose chart is not available locally is named, with why."""
    # Imported here: `gpubring --help` does not pay for YAML, Jinja2 and the inventory model.
    from rich.console import Console

    from gpubring import planning
    from gpubring.commands._common import exit_with, load_or_exit
    from gpubring.inventory import InventoryError
    from gpubring.phases import PlaybookError
    from gpubring.yamlfile import Problem

    if charts is not None and manifests is None:
        _fail("--charts is read only with --manifests DIR")
    if manifests is not None:
        from gpubring import manifests as rendering

        try:
            rendering.engine()
            rendering.check_folder(manifests)
        except (rendering.EngineMissing, rendering.FolderError) as exc:
            _fail(f"--manifests: {exc}")
        if charts is not None and not charts.is_dir():
            _fail(f"--charts {charts}: expected a folder of <chart>-<version>/ or <chart>-<version>.tgz")

    inv = load_or_exit(inventory)
    try:
        plan = planning.build_plan(inv)
    except PlaybookError as exc:
        exit_with([Problem("playbooks", "phases", f"expected readable phase playbooks ({exc})")])
    except InventoryError as exc:  # release inputs that only the releases module can check
        exit_with(exc.problems)
    console = Console()
    from gpubring import support  # support windows of the pins (issue 22)

    found = _downloads(inv) if downloads else None
    if json_out is not None:
        document = planning.plan_document(plan)
        document["support"] = support.document(inv.versions)
        if found is not None:
            document["downloads"] = found
        planning.write_json(document, json_out, console)
    if json_out != "-":
        planning.render_plan(plan, console)
        for line in support.lines(inv.versions):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        if found is not None:
            planning.render_downloads(found, console)
    if manifests is not None:
        result = _write_manifests(inv, plan.rendered, manifests, charts)
        _show(result, console if json_out != "-" else Console(stderr=True))


def _downloads(inv: Inventory) -> list[dict[str, object]]:
    from gpubring import planning
    from gpubring.commands._common import exit_with
    from gpubring.releases import ReleaseRenderError
    from gpubring.yamlfile import Problem

    try:
        return planning.plan_downloads(inv)
    except ReleaseRenderError as exc:
        exit_with([Problem(exc.where, "downloads", exc.message)])


def _write_manifests(
    inv: Inventory, releases: Sequence[Release], folder: Path, charts: Path | None
) -> ManifestsResult:
    """The releases build_plan rendered, written to folder (--manifests)."""
    from gpubring import manifests as rendering

    try:
        return rendering.write_manifests(
            releases,
            folder,
            kube_version=str(inv.versions["kubernetes"]["version"]),
            inventory_root=inv.root,
            charts=charts,
        )
    except (rendering.EngineMissing, rendering.FolderError) as exc:
        _fail(f"--manifests: {exc}")
        raise  # not reached: _fail exits
    except OSError as exc:
        _fail(f"--manifests {folder}: cannot write ({exc.strerror or exc})")
        raise


def _show(result: ManifestsResult, console: Console) -> None:
    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    say(f"Manifests in {result.folder} (Kubernetes {result.kube_version}, in apply order):")
    for r in result.releases:
        if not r.file:
            say(f"  {r.release}: nothing written: {r.problem}")
            continue
        if r.problem:
            what = f"{r.objects} object(s) of gpubring only, chart not rendered"
        elif r.chart:
            what = f"{r.objects} object(s), {r.chart_objects} of {r.chart} from {r.origin}"
        else:
            what = f"{r.objects} object(s) of gpubring (no chart)"
        say(f"  {r.file}: {what}")
        for note in r.notes:
            say(f"    note: {note}")
    for name in result.removed:
        say(f"  {name}: removed (written by an earlier run; no release writes it now)")
    if result.unrendered:
        say("Charts not rendered:")
        for r in result.unrendered:
            say(f"  {r.problem}")
