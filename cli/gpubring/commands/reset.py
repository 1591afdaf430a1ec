"""`gpubring reset INVENTORY`: undo kubeadm on every host (the whole cluster) or on --limit's hosts.

Destructive: without --yes it prints the plan (hosts in order, what goes, what stays) and changes
nothing; --check runs the playbook in check mode instead. Validation and the quorum guard come first:
bad input touches no host (exit 2). The logic lives in gpubring.nodeops.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpubring.commands._common import hold_run_lock
from gpubring.commands.etcd import NoSnapshot, snapshot_plan_line
from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg, targeted_run_options
from gpubring.runopts import RunOptions

if TYPE_CHECKING:
    from gpubring.nodeops import ResetPlan

Yes = Annotated[bool, typer.Option("--yes", "-y", help="Reset for real (without it: print the plan).")]
PurgeHost = Annotated[
    bool,
    typer.Option(
        "--purge-host",
        help="Also remove the Kubernetes packages, their repository and gpubring's containerd config.",
    ),
]


def _print_plan(inventory: Path, plan: ResetPlan, limit: str | None, *, snapshot: bool = True) -> None:
    from gpubring import nodeops

    scope = "every host: the whole cluster" if plan.whole_cluster else f"--limit {limit}"
    typer.echo(f"gpubring reset {inventory} ({scope}): nothing is changed without --yes")
    if plan.control_planes:
        typer.echo(
            snapshot_plan_line(inventory, snapshot, ", and the quorum guard again with etcd's live members")
        )
        typer.echo(
            "each control plane's etcd member is removed from the first control plane before its reset; "
            "the run stops, naming the member and keeping its data, when etcd refuses"
        )
    typer.echo(f"hosts, in this order ({len(plan.hosts)}):")
    number = 0
    if plan.workers:
        number = len(plan.workers)
        span = "1." if number == 1 else f"1-{number}."
        typer.echo(f"  {span} workers, in parallel (up to --forks): {', '.join(plan.workers)}")
    for name in plan.control_planes:
        number += 1
        last = " (the first control plane, last)" if name == plan.first_control_plane else ""
        typer.echo(f"  {number}. control plane {name}{last}")
    typer.echo("on each host, removed:")
    for line in nodeops.RESET_REMOVES:
        typer.echo(f"  - {line}")
    if not plan.purge_host:
        typer.echo(f"kept: {nodeops.RESET_KEEPS}")
    else:
        typer.echo("--purge-host, also removed:")
        for line in nodeops.PURGE_REMOVES:
            typer.echo(f"  - {line}")
    if not plan.whole_cluster:
        typer.echo(
            "the API is not called: the Node objects of these hosts stay (NotReady); to take a node out of "
            "a running cluster use `gpubring node remove`"
        )
    again = f" --limit {shlex.quote(limit)}" if limit else ""
    purge = " --purge-host" if plan.purge_host else ""
    typer.echo(f"next: gpubring reset {inventory}{again}{purge} --yes")


@targeted_run_options
def command(
    ctx: typer.Context,
    inventory: InventoryArg,
    *,
    yes: Yes = False,
    purge_host: PurgeHost = False,
    no_snapshot: NoSnapshot = False,
    run: RunOptions,
) -> None:
    """Reset Kubernetes on every host (the whole cluster) or on --limit's hosts: kubeadm reset, kubelet
    and etcd data, CNI configuration, kube-proxy's and the CNI's firewall chains.

    Without --yes: print the plan and change nothing. Workers go first, then the control planes one
    at a time, the first one last. The host setup (containerd, driver, RDMA) stays unless
    --purge-host. A --limit that would take etcd below quorum is refused (exit 2). With control planes,
    an etcd snapshot is taken first (unless --no-snapshot) and each etcd member is removed from the
    first control plane before its host is reset.

    Exit 1 when a task failed, 4 when a host was unreachable, 3 when cancelled, 2 on bad input.
    """
    # Imported here: `gpubring --help` must not load the inventory model, rich or the runner.
    from gpubring import nodeops
    from gpubring.commands._common import load_or_exit
    from gpubring.commands.runs import warn_orphans
    from gpubring.run import steps

    inv = load_or_exit(inventory)
    try:
        plan = nodeops.plan_reset(inv, run.limit, purge_host=purge_host)
    except nodeops.NodeError as exc:
        for line in str(exc).splitlines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    if not yes and not run.check:
        _print_plan(inventory, plan, run.limit, snapshot=not no_snapshot)
        raise typer.Exit(code=ExitCode.OK)
    if not run.check:  # the plan (no --yes) and check mode change nothing: no run lock, no wait
        hold_run_lock(ctx, inv.root)
    warn_orphans(inventory, inv.root)
    if plan.control_planes and not no_snapshot:  # etcd snapshot first, then the live quorum guard
        from gpubring.commands.etcd import take_snapshot_first

        take_snapshot_first(
            inv,
            run,
            inv.groups.get("control_plane") or (),
            () if plan.whole_cluster else plan.control_planes,
            f"reset {inventory}",
        )
    outcome = steps.run_steps(
        inv, nodeops.runs(inv, [plan.step], run), run, title=f"gpubring reset {inventory}"
    )
    raise typer.Exit(code=int(outcome.exit_code))
