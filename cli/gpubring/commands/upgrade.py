"""`gpubring upgrade INVENTORY`: upgrade the cluster to the versions the inventory now pins.

Validation first: the inventory and its version matrix (`gpubring versions` rules), then the plan
(gpubring.upgrade): a Kubernetes minor release skipped, or a downgrade, is refused with the hops to
take (exit 2), before any host. --check prints the plan and changes nothing; when the inventory's
phases include `cluster`, it then reads kubeadm's own plan on the first control plane
(playbooks/upgrade_plan.yml, read-only, in check mode). Otherwise playbooks/upgrade.yml runs as one
step, with the view, run folder and exit codes of `gpubring up`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpubring.commands._common import hold_run_lock
from gpubring.commands.etcd import NoSnapshot, snapshot_plan_line, snapshot_step
from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg, run_options
from gpubring.runopts import RunOptions

if TYPE_CHECKING:
    from gpubring.model import Inventory
    from gpubring.run.settings import RunResult


@run_options
def command(
    ctx: typer.Context, inventory: InventoryArg, *, run: RunOptions, no_snapshot: NoSnapshot = False
) -> None:
    """Upgrade to the versions the inventory pins: Kubernetes (one minor release at a time), the NVIDIA
    driver, container toolkit and containerd, each node drained once; then the platform releases.

    --check prints the plan (hops, batches, what each node gets) and changes nothing; with the cluster
    phase, the first control plane is read: kubeadm's upgrade plan of the running cluster, by the
    installed kubeadm (exit 0 with a line saying so when the host cannot be reached). A re-run of an
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
        typer.echo(
            f"gpubring upgrade {inventory} --check: the plan; nothing is changed; "
            "with the cluster phase, the first control plane is read"
        )
        typer.echo(snapshot_plan_line(inventory, not no_snapshot))
        for line in upgrade.plan_lines(plan):
            typer.echo(line)
        typer.echo(f"next: gpubring upgrade {inventory}")
        raise typer.Exit(code=_kubeadm_plan(inv, inventory, run))
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
    todo = [step] if no_snapshot else [snapshot_step(inv, "etcd snapshot before the upgrade"), step]
    outcome = steps.run_steps(
        inv, nodeops.runs(inv, todo, run, phases), run, title=f"gpubring upgrade {inventory}", phases=phases
    )
    _print_kubeadm_plan(outcome.last)  # the new kubeadm's plan for the pin, as the first control plane ran it
    raise typer.Exit(code=int(outcome.exit_code))


PLAN_PLAYBOOK = "upgrade_plan.yml"
PLAN_FACT = "cluster_upgrade_kubeadm_plan"  # roles/cluster_upgrade/tasks/kubeadm_plan.yml publishes it


def _kubeadm_plan(inv: Inventory, inventory: Path, run: RunOptions) -> ExitCode:
    """After gpubring's plan (--check): kubeadm's own plan of the running cluster, read on the first
    control plane by playbooks/upgrade_plan.yml, when the phases an upgrade runs include `cluster`
    (the lab, which leaves it out, reaches no host). The exit code: 0 when read, or when the host
    could not be reached (gpubring's plan stands; a line says the cluster was not read); 1 when
    kubeadm's plan failed there (what kubeadm says the upgrade would meet); 3 when cancelled."""
    from gpubring import nodeops, paths
    from gpubring.phases import PHASES
    from gpubring.run import steps

    try:
        phases = nodeops.node_phases(inv, False, PHASES)
    except nodeops.NodeError:
        return ExitCode.OK  # no phase an upgrade could run: gpubring's plan is all there is
    first = nodeops.first_control_plane(inv)
    if "cluster" not in phases.run or not first:
        return ExitCode.OK
    step = nodeops.Step(
        "upgrade-plan",
        (paths.playbooks_dir() / PLAN_PLAYBOOK).resolve(),
        "",
        f"kubeadm's upgrade plan, read on {first}",
    )
    outcome = steps.run_steps(
        inv, nodeops.runs(inv, [step], run), run, title=f"gpubring upgrade {inventory} --check"
    )
    _print_kubeadm_plan(outcome.last)
    if outcome.exit_code == ExitCode.UNREACHABLE:
        typer.echo(
            f"the cluster could not be reached ({first} unreachable): kubeadm's upgrade plan was not read; "
            "gpubring's plan above stands"
        )
        return ExitCode.OK
    return outcome.exit_code


def _print_kubeadm_plan(result: RunResult | None) -> None:
    """After the run's summary: what kubeadm_plan.yml published (kubeadm's plan, or why there is none)."""
    from gpubring import verifyfacts

    if result is None:
        return
    for host, lines in _published(verifyfacts.job_events(result.run_folder), PLAN_FACT).items():
        typer.echo(f"{host}: " + "\n".join(lines))


def _published(events: Iterable[Mapping[str, Any]], name: str) -> dict[str, list[str]]:
    """host -> the lines of the last value of fact `name` (a list of lines) its set_fact carried."""
    found: dict[str, list[str]] = {}
    for event in events:
        data = event.get("event_data")
        res = data.get("res") if isinstance(data, Mapping) and event.get("event") == "runner_on_ok" else None
        facts = res.get("ansible_facts") if isinstance(res, Mapping) else None
        value = facts.get(name) if isinstance(facts, Mapping) and isinstance(data, Mapping) else None
        if isinstance(value, list) and isinstance(data, Mapping):
            found[str(data.get("host") or "")] = [str(line) for line in value]
    return found
