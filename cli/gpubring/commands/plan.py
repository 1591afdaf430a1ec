"""`gpubring plan INVENTORY`: what `gpubring up` would do, touching no host."""

from __future__ import annotations

from typing import Annotated

import typer

from gpubring.options import InventoryArg

JsonOut = Annotated[
    str | None,
    typer.Option(
        "--json", metavar="PATH|-", help="Also write the plan as JSON to PATH; `-` prints only JSON."
    ),
]


def command(inventory: InventoryArg, json_out: JsonOut = None) -> None:
    """Validate the inventory, then show the phases with their roles and hosts, the effective
    versions with every compatibility rule, and the Helm releases. Touches no host."""
    # Imported here: `gpubring --help` does not pay for YAML, Jinja2 and the inventory model.
    from rich.console import Console

    from gpubring import planning
    from gpubring.inventory import InventoryError, exit_with, load_or_exit
    from gpubring.phases import PlaybookError
    from gpubring.specs import Problem

    inv = load_or_exit(inventory)
    try:
        plan = planning.build_plan(inv)
    except PlaybookError as exc:
        exit_with([Problem("playbooks", "phases", f"expected readable phase playbooks ({exc})")])
    except InventoryError as exc:  # release inputs that only the releases module can check
        exit_with(exc.problems)
    console = Console()
    if json_out is not None:
        planning.write_json(planning.plan_document(plan), json_out, console)
    if json_out != "-":
        planning.render_plan(plan, console)
