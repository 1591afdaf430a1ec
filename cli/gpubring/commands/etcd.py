"""`gpubring etcd snapshot | restore`: etcd snapshots of the control planes' stacked etcd.

    snapshot  playbooks/etcd_snapshot.yml: after the health and alarm checks, a snapshot saved on the
              first control plane, copied to INVENTORY/.gpubring/etcd-snapshots/etcd-<UTC time>.db
              (mode 0600, folder 0700) with <file>.json beside it (sha256, etcd version, members and
              their health), the newest gpubring_etcd_snapshot_keep kept.
    restore   playbooks/etcd_restore.yml: the snapshot's sha256 and record checked here first; without
              --yes the plan is printed and nothing changes.

`gpubring reset` and `gpubring node remove` of control planes take a snapshot first (take_snapshot_first)
unless --no-snapshot, and check the quorum guard again with etcd's live members from its record. A
snapshot holds every Secret of the cluster: its bytes never reach a log (the tasks that move it are
no_log) and nothing here prints them.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpubring.commands._common import hold_run_lock
from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg, run_options
from gpubring.runopts import RunOptions

if TYPE_CHECKING:
    from gpubring.model import Inventory

app = typer.Typer(
    help="etcd of the control planes: snapshots to the controller, and a restore from one.",
    no_args_is_help=True,
)

SNAPSHOT_PLAYBOOK = "etcd_snapshot.yml"
RESTORE_PLAYBOOK = "etcd_restore.yml"
SNAPSHOT_DIR = Path(".gpubring") / "etcd-snapshots"
RECORD_SUFFIX = ".json"

SnapshotArg = Annotated[
    Path, typer.Argument(help="A snapshot file gpubring etcd snapshot wrote (its .json beside it).")
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Restore for real (without it: print the plan).")]
NoSnapshot = Annotated[
    bool,
    typer.Option("--no-snapshot", help="Do not take an etcd snapshot first (control planes only)."),
]


class SnapshotError(ValueError):
    """A snapshot that cannot be restored; the message says why."""


def _bad_input(message: str) -> NoReturn:
    for line in message.splitlines():
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(code=ExitCode.BAD_INPUT) from None


def snapshot_dest(root: Path, now: datetime.datetime | None = None) -> Path:
    """Where the next snapshot goes on the controller: INVENTORY/.gpubring/etcd-snapshots/etcd-<UTC>.db."""
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%SZ")
    return (root / SNAPSHOT_DIR / f"etcd-{stamp}.db").resolve()


def snapshot_plan_line(inventory: Path, snapshot: bool, then: str = "") -> str:
    """The plan's line about the etcd snapshot a verb takes first (reset, upgrade), or its --no-snapshot."""
    if not snapshot:
        return "no etcd snapshot first (--no-snapshot)"
    return f"first: an etcd snapshot to {inventory / SNAPSHOT_DIR} (gpubring etcd snapshot){then}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_snapshot(snapshot: Path, control_planes: Sequence[str]) -> dict[str, Any]:
    """The record of `snapshot` (<snapshot>.json) once the file, its sha256 and its members are checked
    against the inventory's control planes. SnapshotError says what is wrong."""
    if not snapshot.is_file():
        raise SnapshotError(f"{snapshot}: no such snapshot file")
    record_path = snapshot.with_name(snapshot.name + RECORD_SUFFIX)
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SnapshotError(
            f"{record_path}: missing; gpubring etcd snapshot writes it beside the snapshot (sha256, members)"
        ) from None
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"{record_path}: not a snapshot record ({exc})") from None
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        raise SnapshotError(f"{record_path}: sha256: expected the snapshot's sha256 (a string)")
    members = record.get("members")
    if not isinstance(members, list) or not all(
        isinstance(m, dict) and isinstance(m.get("name"), str) and isinstance(m.get("peer_urls"), list)
        for m in members
    ):
        raise SnapshotError(f"{record_path}: members: expected a list of {{name, peer_urls}}")
    actual = sha256_of(snapshot)
    if actual != record["sha256"]:
        raise SnapshotError(
            f"{snapshot}: sha256 {actual} does not match the record's {record['sha256']} ({record_path}): "
            "the file changed after the snapshot; nothing was restored"
        )
    names = sorted(str(m["name"]) for m in members)
    if names != sorted(control_planes):
        raise SnapshotError(
            f"{record_path}: the snapshot's etcd members ({', '.join(names) or 'none'}) are not the "
            f"inventory's control planes ({', '.join(control_planes) or 'none'}); a restore makes every "
            "control plane a member as the record has it"
        )
    return dict(record)


def restore_plan(inventory: Path, snapshot: Path, record: dict[str, Any]) -> list[str]:
    members = [str(m["name"]) for m in record["members"]]
    return [
        f"gpubring etcd restore {inventory} {snapshot}: nothing is changed without --yes",
        f"snapshot: {snapshot} (sha256 {record['sha256']}, etcd {record.get('etcd_version', '?')}, "
        f"taken through {record.get('taken_through', '?')})",
        f"on every control plane at once ({', '.join(members)}):",
        "  1. stop etcd and kube-apiserver (their static pod manifests go to "
        "/etc/kubernetes/gpubring-stopped)",
        "  2. copy the snapshot there (0600), check its sha256, restore it as a new etcd cluster of "
        f"{', '.join(members)} (peer URLs from the record)",
        "  3. keep the current /var/lib/etcd as /var/lib/etcd.before-restore-<time>, put the restored "
        "data in place",
        "  4. start etcd and kube-apiserver again, then check etcd's health and alarms",
        "everything written to the cluster after the snapshot is lost (Pods, Secrets, leases, CRs)",
        f"next: gpubring etcd restore {shlex.quote(str(inventory))} {shlex.quote(str(snapshot))} --yes",
    ]


def snapshot_step(inv: Inventory, purpose: str = "etcd snapshot to the controller") -> Any:
    """The nodeops.Step of a snapshot of the inventory's etcd (no --limit: the first control plane)."""
    from gpubring import nodeops, paths

    dest = snapshot_dest(inv.root)
    return nodeops.Step(
        "etcd-snapshot",
        (paths.playbooks_dir() / SNAPSHOT_PLAYBOOK).resolve(),
        "",
        purpose,
        {"etcd_snapshot_dest": str(dest)},
    )


def take_snapshot_first(
    inv: Inventory, run: RunOptions, control_planes: Sequence[str], removing: Sequence[str], title: str
) -> None:
    """Before a reset or removal of control planes: an etcd snapshot, then the quorum guard again with
    etcd's live members from its record. Exits with the run's code when the snapshot failed, 2 when the
    live members refuse the removal. Nothing in check mode (a snapshot changes nothing to check)."""
    from gpubring import guards, nodeops
    from gpubring.run import steps

    if run.check:
        return
    step = snapshot_step(inv, f"etcd snapshot before {title}")
    outcome = steps.run_steps(inv, nodeops.runs(inv, [step], run), run, title=f"gpubring {title}")
    if outcome.exit_code != ExitCode.OK:
        typer.echo(
            "error: the etcd snapshot failed: nothing was reset or removed "
            "(--no-snapshot goes on without one)",
            err=True,
        )
        raise typer.Exit(code=int(outcome.exit_code))
    dest = Path(step.extra_vars["etcd_snapshot_dest"])
    try:
        live = guards.live_members(json.loads(dest.with_name(dest.name + RECORD_SUFFIX).read_text("utf-8")))
    except (OSError, ValueError):
        return
    problem = guards.quorum_problem(control_planes, removing, live)
    if problem:
        _bad_input(problem)


@app.command("snapshot")
@run_options
def snapshot(ctx: typer.Context, inventory: InventoryArg, *, run: RunOptions) -> None:
    """Save an etcd snapshot on the first control plane and copy it to INVENTORY/.gpubring/etcd-snapshots/
    (0600), with its sha256, etcd version and members beside it; keep the newest gpubring_etcd_snapshot_keep.

    Health and alarm checks first. Exit 1 when a task failed, 4 when a host was unreachable, 2 on bad input.
    """
    from gpubring import nodeops
    from gpubring.commands._common import load_or_exit
    from gpubring.run import steps

    inv = load_or_exit(inventory)
    if not inv.groups.get("control_plane"):
        _bad_input(f"{inv.hosts_file}: control_plane: no host; etcd runs on the control planes")
    if not run.check:
        hold_run_lock(ctx, inv.root)
    step = snapshot_step(inv)
    outcome = steps.run_steps(
        inv, nodeops.runs(inv, [step], run), run, title=f"gpubring etcd snapshot {inventory}"
    )
    if outcome.exit_code == ExitCode.OK and not run.check:
        typer.echo(f"snapshot: {step.extra_vars['etcd_snapshot_dest']} (record beside it: .json)")
    raise typer.Exit(code=int(outcome.exit_code))


@app.command("restore")
@run_options
def restore(
    ctx: typer.Context, inventory: InventoryArg, snapshot: SnapshotArg, *, yes: Yes = False, run: RunOptions
) -> None:
    """Restore etcd on every control plane from SNAPSHOT (written by gpubring etcd snapshot).

    The snapshot's sha256 and members are checked first (exit 2 on a mismatch). Without --yes: print the
    plan and change nothing. Everything written after the snapshot is lost. Runbook: docs/operations.md.
    """
    from gpubring import nodeops, paths
    from gpubring.commands._common import load_or_exit
    from gpubring.run import steps

    inv = load_or_exit(inventory)
    control_planes = list(inv.groups.get("control_plane") or ())
    try:
        record = read_snapshot(snapshot, control_planes)
    except SnapshotError as exc:
        _bad_input(str(exc))
    if not yes and not run.check:
        for line in restore_plan(inventory, snapshot, record):
            typer.echo(line)
        raise typer.Exit(code=ExitCode.OK)
    if not run.check:
        hold_run_lock(ctx, inv.root)
    step = nodeops.Step(
        "etcd-restore",
        (paths.playbooks_dir() / RESTORE_PLAYBOOK).resolve(),
        "",
        f"restore etcd of {', '.join(control_planes)} from {snapshot.name}",
        {
            "etcd_restore_confirm": "yes",
            "etcd_restore_snapshot": str(snapshot.resolve()),
            "etcd_restore_sha256": record["sha256"],
            "etcd_restore_members": [
                {"name": m["name"], "peer_urls": m["peer_urls"]} for m in record["members"]
            ],
        },
    )
    outcome = steps.run_steps(
        inv, nodeops.runs(inv, [step], run), run, title=f"gpubring etcd restore {inventory}"
    )
    raise typer.Exit(code=int(outcome.exit_code))
