"""`gpubring upgrade INVENTORY`: upgrade the cluster to the versions the inventory now pins.

Validation first: the inventory and its version matrix (`gpubring versions` rules), then the plan
(gpubring.upgrade): a Kubernetes minor release skipped, or a downgrade, is refused with the hops to
take (exit 2), before any host. --check prints the plan and reaches no host. Otherwise
playbooks/upgrade.yml runs as one step, with the view, run folder and exit codes of `gpubring up`.
"""

from __future__ import annotations

import typer

from gpubring.commands._common import hold_run_lock
from gpubring.commands.etcd import NoSnapshot
from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg, run_options
from gpubring.runopts import RunOptions


@run_options
def command(
    ctx: typer.Context, inventory: InventoryArg, *, run: RunOptions, no_snapshot: NoSnapshot = False
) -> None:
    """Upgrade to the versions the inventory pins: Kubernetes (one minor release at a time), the NVIDIA
    driver, container toolkit and containerd, each node drained once; then the platform releases.

    --check prints the plan (hops, batches, what each node gets) and changes nothing. A re-run of an
    interrupted upgrade continues where it stopped: nodes already at the pins are left alone. An etcd
    snapshot is taken first, to INVENTORY/.gpubring/etcd-snapshots (unless --no-snapshot).

    Exit 1 when a task failed, 4 when a host was unreachable, 3 when cancelled, 2 on bad input.
    """
    # Imported here: `gpubring --help` must not load the inventory model, rich or the runner.
    from gpubring import nodeops, paths, upgrade
    from gpubring.commands._common import load_or_exit
    from gpubring.commands.runs import warn_orphans
    from gpubring.phases import PHASES
    from gpubring.run import steps

    inv = load_or_exit(inventory)
    try:
        plan = upgrade.plan_upgrade(inv)
    except upgrade.UpgradeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    if run.check:
        typer.echo(f"gpubring upgrade {inventory} --check: the plan; nothing is changed, no host is reached")
        typer.echo(
            f"first: an etcd snapshot to {inventory}/.gpubring/etcd-snapshots (gpubring etcd snapshot)"
            if not no_snapshot
            else "no etcd snapshot first (--no-snapshot)"
        )
        for line in upgrade.plan_lines(plan):
            typer.echo(line)
        typer.echo(f"next: gpubring upgrade {inventory}")
        raise typer.Exit(code=ExitCode.OK)
    from gpubring import hops  # an operator that must move one major line at a time (issue 22)

    try:
        found = hops.roads(plan.releases)
    except hops.HopsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    if any(road.via for road in found):
        typer.echo(f"error: {hops.refusal(found)}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT)
    try:
        phases = nodeops.node_phases(inv, False, PHASES)
    except nodeops.NodeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    skipped = dict(phases.skipped)
    if "cluster" in skipped:
        typer.echo(
            f"error: an upgrade is the cluster phase, and {skipped['cluster']}; "
            f"`gpubring upgrade {inventory} --check` prints the plan",
            err=True,
        )
        raise typer.Exit(code=ExitCode.BAD_INPUT)
    hold_run_lock(ctx, inv.root)  # --check printed the plan above and reached no host: no lock there
    warn_orphans(inventory, inv.root)
    step = nodeops.Step(
        "upgrade",
        (paths.playbooks_dir() / nodeops.UPGRADE_PLAYBOOK).resolve(),
        "",
        f"upgrade to the pins: {len(plan.changing)} node(s) to change, {len(plan.releases)} release(s)",
        skip_tags=tuple(phase for phase, _ in phases.skipped),
    )
    # etcd snapshot first (issue 21 item 11): the restore point if the control planes' upgrade fails;
    # the steps stop at the first that fails, so a failed snapshot upgrades nothing.
    from gpubring.commands.etcd import snapshot_step

    todo = [step] if no_snapshot else [snapshot_step(inv, "etcd snapshot before the upgrade"), step]
    outcome = steps.run_steps(
        inv, nodeops.runs(inv, todo, run, phases), run, title=f"gpubring upgrade {inventory}", phases=phases
    )
    raise typer.Exit(code=int(outcome.exit_code))
