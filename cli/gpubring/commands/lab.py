"""`gpubring lab up|status|down`: systemd containers reached over real SSH (the logic is gpubring.lab)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpubring import lab
from gpubring.exitcodes import ExitCode

app = typer.Typer(
    help="A lab of systemd test-host containers on 127.0.0.1 SSH ports, with an inventory for `gpubring up`.",
    no_args_is_help=True,
)

InventoryDir = Annotated[
    Path,
    typer.Option(
        "--inventory-dir",
        envvar="GPUBRING_LAB_DIR",
        help="Folder of the lab's generated inventory (its key and known_hosts live in .ssh/ inside).",
    ),
]
Prefix = Annotated[
    str | None,
    typer.Option(
        "--prefix",
        envvar="GPUBRING_LAB_PREFIX",
        help=f"Name prefix of the lab's containers [default: the folder's lab, else {lab.DEFAULT_PREFIX}].",
        show_default=False,
    ),
]


def _say(line: str) -> None:
    typer.echo(line)


def _fail(err: lab.LabError) -> typer.Exit:
    typer.echo(f"lab: error: {err}", err=True)
    code = ExitCode.BAD_INPUT if isinstance(err, lab.LabInputError) else ExitCode.TASK_FAILED
    return typer.Exit(code=int(code))


@app.command("up")
def up_command(
    *,
    nodes: Annotated[int, typer.Option("--nodes", "-n", help="Number of nodes (containers).")] = 3,
    control_planes: Annotated[
        int, typer.Option("--control-planes", "-m", help="How many nodes are control planes (1, 3, 5...).")
    ] = 1,
    cpu_nodes: Annotated[int, typer.Option("--cpu-nodes", help="How many nodes are CPU-only workers.")] = 0,
    distro: Annotated[
        str, typer.Option("--distro", help=f"Test-host image: {' or '.join(lab.DISTROS)}.")
    ] = lab.DISTROS[0],
    gpu_distro: Annotated[
        str | None,
        typer.Option(
            "--gpu-distro",
            help=f"Test-host image of the GPU nodes, when not --distro's: {' or '.join(lab.DISTROS)}.",
            show_default=False,
        ),
    ] = None,
    prefix: Prefix = None,
    inventory_dir: InventoryDir = lab.DEFAULT_INVENTORY_DIR,
    airgap: Annotated[
        Path | None,
        typer.Option(
            "--airgap",
            metavar="BUNDLE_DIR",
            help="Air-gapped: the nodes on an internal network with no route out, a mirror container serving "
            "this bundle as their only apt source and the inventory's chart and binary mirror. A new or "
            "empty folder (or one lab up built) gets the apt part of the lab's nodes built into it first "
            "(`gpubring bundle --only apt` of the lab's inventory; a second lab up resumes it); a bundle of "
            "yours is served as it is [default: the folder's lab's; `lab down` first to go back online].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start (or reuse) the lab's containers and write its inventory for `gpubring up`.

    Of the --nodes containers, --control-planes are control planes, --cpu-nodes CPU workers and the
    rest GPU nodes; with no GPU node left (--nodes 1) the control planes are GPU nodes too. The GPU
    nodes run --gpu-distro when given (one lab, two Debian releases), the others --distro. A second
    `lab up` with the same shape reuses the running containers.
    """
    # An air-gapped lab stays one (a node added or replaced included) until `lab down`.
    recorded = (lab.read_marker(inventory_dir) or {}).get("airgap")
    if airgap is None and isinstance(recorded, str) and recorded:
        airgap = Path(recorded)
    spec = lab.LabSpec(
        prefix=lab.resolve_prefix(prefix, inventory_dir),
        airgap=airgap,
        nodes=nodes,
        control_planes=control_planes,
        cpu_nodes=cpu_nodes,
        distro=distro,
        gpu_distro=gpu_distro,
        inventory_dir=inventory_dir,
    )
    # The nodes the lab had before: one of them created again (its container was removed) is a
    # fresh OS install of a known host, which `node replace` takes, as on a real cluster.
    before = lab.read_marker(inventory_dir) or {}
    known = {str(n.get("name")) for n in before.get("nodes") or () if isinstance(n, dict)}
    try:
        plan = lab.up(spec, out=_say)
    except lab.LabError as err:
        raise _fail(err) from None
    added = [p.node.name for p in plan.nodes if p.action == "create"]
    grown = bool(added) and len(added) < len(plan.nodes) and not plan.remove
    if not grown:
        typer.echo(f"next: gpubring up {inventory_dir}")
        return
    # Nodes added to a lab that kept its others: join them alone, as on a real cluster.
    for name in added:
        verb = "replace" if name in known else "add"
        typer.echo(f"next: gpubring node {verb} {inventory_dir} {name}")


@app.command("status")
def status_command(prefix: Prefix = None, inventory_dir: InventoryDir = lab.DEFAULT_INVENTORY_DIR) -> None:
    """The lab's containers: state, SSH port, group, and whether SSH answers (with host key checking)."""
    from rich.console import Console
    from rich.table import Table

    try:
        name = lab.find_prefix(prefix, inventory_dir)
        rows = lab.status(name, inventory_dir) if name else []
    except lab.LabError as err:
        raise _fail(err) from None
    if name is None:
        typer.echo(f"no lab for {inventory_dir} (give --prefix to look up a lab by name)")
        return
    if not rows:
        typer.echo(f"no lab {name!r} (no containers); start one with `gpubring lab up`")
        return
    airgap = (lab.read_marker(inventory_dir) or {}).get("airgap")
    title = f"lab {name} — inventory {inventory_dir}"
    if airgap:
        title += f" — air-gapped: {lab.mirror_state(name)} serves {airgap}"
    table = Table(title=title)
    for column in ("node", "group", "state", "ssh", "answers"):
        table.add_column(column)
    for row in rows:
        ssh = "-" if row.ssh is None else ("answers" if row.ssh else "[red]no answer[/red]")
        port = f"{row.address}:{row.port}" if row.port else "-"
        table.add_row(row.name, row.group, row.state, port, ssh)
    Console().print(table)


@app.command("down")
def down_command(
    prefix: Prefix = None,
    inventory_dir: InventoryDir = lab.DEFAULT_INVENTORY_DIR,
    *,
    purge: Annotated[
        bool, typer.Option("--purge", help="Also remove the run history (.gpubring/runs) of the lab.")
    ] = False,
) -> None:
    """Remove the lab's containers, its key and its generated inventory (fine when there is no lab).

    The run history (INVENTORY/.gpubring/runs, see `gpubring runs`) stays unless --purge.
    """
    try:
        name = lab.find_prefix(prefix, inventory_dir)
        if name is None:
            typer.echo(
                f"no lab for {inventory_dir}: nothing to remove (give --prefix to remove a lab by name)"
            )
            return
        lab.down(name, inventory_dir, out=_say, purge=purge)
    except lab.LabError as err:
        raise _fail(err) from None
    typer.echo(f"lab {name}: down")
