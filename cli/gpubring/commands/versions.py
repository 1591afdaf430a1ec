"""`gpubring versions INVENTORY`: the effective version matrix and every compatibility rule's verdict."""

from __future__ import annotations

from typing import Annotated

import typer

from gpubring.commands._common import json_target
from gpubring.options import InventoryArg

JsonOut = Annotated[
    str | None,
    typer.Option(
        "--json",
        callback=json_target,
        metavar="PATH|-",
        help="Also write the matrix and verdicts as JSON to PATH; `-` prints only JSON.",
    ),
]


def command(inventory: InventoryArg, json_out: JsonOut = None) -> None:
    """Print the pinned versions after the inventory's overrides (gpubring_versions) and the verdict of
    every rule of versions.yml. Exit code 2 when the inventory is invalid or a rule fails."""
    # Imported here: `gpubring --help` does not pay for YAML and the inventory model.
    from rich.console import Console

    from gpubring import planning, support
    from gpubring import versions as matrix
    from gpubring.commands._common import exit_with, load_or_exit

    inv = load_or_exit(inventory, check_rules=False)
    console = Console()
    pinned = matrix.load_pinned()
    if json_out is not None:
        document = planning.versions_document(inv, pinned)
        document["support"] = support.document(inv.versions)  # support windows (issue 22)
        planning.write_json(document, json_out, console)
    if json_out != "-":
        planning.render_versions(inv, pinned, console)
        for line in support.lines(inv.versions):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if inv.version_problems:
        exit_with(list(inv.version_problems))
