"""`gpubring node add | replace | remove`: one node's lifecycle, without re-running the cluster.

Validation first (-e, inventory, node names): bad input touches no host (exit 2). The logic lives in
gpubring.nodeops; each run has the view, summary, run folder and exit codes of `gpubring up`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpubring.commands._common import hold_run_lock
from gpubring.commands.etcd import NoSnapshot
from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg, run_options
from gpubring.runopts import RunOptions

app = typer.Typer(
    help="Add, replace or remove nodes: only these nodes are touched (the cluster is not re-run).",
    no_args_is_help=True,
)

Nodes = Annotated[list[str], typer.Argument(help="Hosts of the inventory to add (one or more).")]
NodeArg = Annotated[str, typer.Argument(help="A host of the inventory.")]
Force = Annotated[
    bool,
    typer.Option("--force", help="The node is unreachable (dead hardware): remove it without touching it."),
]


def _run(
    ctx: typer.Context,
    action: str,
    inventory: Path,
    nodes: list[str],
    run: RunOptions,
    *,
    force: bool = False,
    snapshot: bool = False,
) -> None:
    """Validate, then run the steps of `action` on `nodes`; with `snapshot`, an etcd snapshot first when
    a control plane is among them."""
    # Imported here: `gpubring --help` must not load the inventory model, rich or the runner.
    from gpubring import nodeops
    from gpubring.commands._common import load_or_exit
    from gpubring.commands.runs import warn_orphans
    from gpubring.run import steps

    inv = load_or_exit(inventory)
    try:
        checked = nodeops.check_nodes(inv, nodes, removing=action != "add")
        phases = nodeops.node_phases(inv, run.check)
        planned = nodeops.with_phases(nodeops.plan(action, checked, force=force), phases)
    except nodeops.NodeError as exc:
        for line in str(exc).splitlines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    if not run.check:  # check mode changes nothing: it neither takes the run lock nor waits for it
        hold_run_lock(ctx, inv.root)
    warn_orphans(inventory, inv.root)
    control_planes = inv.groups.get("control_plane") or ()
    if snapshot and any(name in control_planes for name in checked):
        from gpubring.commands.etcd import take_snapshot_first

        take_snapshot_first(
            inv, run, control_planes, checked, f"node {action} {inventory} {' '.join(checked)}"
        )
    outcome = steps.run_steps(
        inv,
        nodeops.runs(inv, planned, run, phases),
        run,
        title=f"gpubring node {action} {inventory} {' '.join(checked)}",
        phases=phases,
    )
    raise typer.Exit(code=int(outcome.exit_code))


@app.command("add")
@run_options
def add(ctx: typer.Context, inventory: InventoryArg, nodes: Nodes, *, run: RunOptions) -> None:
    """Add hosts already in the inventory: preflight, host roles, join, labels, verify; nothing else.

    Exit 1 when a task failed, 4 when a host was unreachable, 3 when cancelled, 2 on bad input.
    """
    _run(ctx, "add", inventory, nodes, run)


@app.command("replace")
@run_options
def replace(ctx: typer.Context, inventory: InventoryArg, node: NodeArg, *, run: RunOptions) -> None:
    """Bring back a host after a fresh OS install: remove its stale Node object, then add it.

    Two runs (see `gpubring runs`); the add does not start when the removal failed.
    """
    _run(ctx, "replace", inventory, [node], run)


@app.command("remove")
@run_options
def remove(
    ctx: typer.Context,
    inventory: InventoryArg,
    node: NodeArg,
    *,
    force: Force = False,
    no_snapshot: NoSnapshot = False,
    run: RunOptions,
) -> None:
    """Remove a node from the cluster: drain, kubeadm reset, etcd member, Node object.

    With --force for an unreachable node: nothing runs on it (cordon, etcd member, Node object).
    Take the host out of hosts.yml afterwards. A control plane: an etcd snapshot first (unless
    --no-snapshot); its etcd member is removed from the first control plane before its reset, and the
    run stops, naming it, when etcd refuses.
    """
    _run(ctx, "remove", inventory, [node], run, force=force, snapshot=not no_snapshot)
