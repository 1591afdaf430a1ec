"""`gpubring certs INVENTORY`: when the control planes' certificates expire (kubeadm certs
check-expiration on each), and with `--renew --yes` renew them one control plane at a time.

--renew without --yes prints the plan and changes nothing; --check runs the playbook in check mode.
Validation comes first: bad input touches no host (exit 2). The playbook is playbooks/certs.yml;
the expiry is read and judged by the collection's cert_expiry filters (module_utils/cert_expiry.py),
published per control plane as the fact `gpubring_certs`, and printed here from the run's job events.

`up` and `verify` print the warnings the verify phase published (`gpubring_cert_warnings`, see
print_cert_warnings) after their summary.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpubring.commands._common import hold_run_lock
from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg, targeted_run_options
from gpubring.runopts import RunOptions

if TYPE_CHECKING:
    from gpubring.model import Inventory

PLAYBOOK = "certs.yml"
CERTS_FACT = "gpubring_certs"
WARNINGS_FACT = "gpubring_cert_warnings"
STATIC_PODS = "kube-apiserver, kube-controller-manager, kube-scheduler, etcd"

Renew = Annotated[
    bool,
    typer.Option(
        "--renew",
        help="Renew the certificates (kubeadm certs renew all) and restart the static pods, one control "
        "plane at a time; needs --yes (without it: print the plan).",
    ),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Renew for real (without it: print the plan).")]


def _bad_input(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=ExitCode.BAD_INPUT) from None


def control_planes(inv: Inventory, limit: str | None) -> tuple[str, ...]:
    """The control planes the run works on, in inventory order (the order of the renewal); raises
    ValueError naming the problem when there is none, or --limit selects another host."""
    from gpubring.phases import resolve_pattern

    planes = tuple(inv.groups.get("control_plane") or ())
    if not planes:
        raise ValueError(f"{inv.hosts_file}: the group control_plane has no host")
    if not limit:
        return planes
    if limit.startswith("@"):
        try:
            wanted = {line.strip() for line in Path(limit[1:]).read_text(encoding="utf-8").splitlines()}
        except OSError as exc:
            raise ValueError(f"--limit {limit}: {exc.strerror or exc}") from None
        chosen = tuple(h for h in inv.hosts if h in wanted)
    else:
        chosen = resolve_pattern(limit, inv.groups, list(inv.hosts))
    if not chosen:
        raise ValueError(f"--limit {limit}: matches no host of this inventory")
    others = [h for h in chosen if h not in planes]
    if others:
        raise ValueError(
            f"--limit {limit}: {', '.join(others)} is not a control plane; certificates are the control "
            f"planes' ({', '.join(planes)})"
        )
    return tuple(h for h in planes if h in chosen)


def plan_lines(inventory: Path, planes: Sequence[str], limit: str | None) -> list[str]:
    """What `--renew --yes` does, in order (printed by --renew without --yes)."""
    lines = [
        f"gpubring certs {inventory} --renew: nothing is changed without --yes",
        f"control planes, one at a time, each done before the next starts ({len(planes)}):",
    ]
    for number, name in enumerate(planes, start=1):
        lines.append(
            f"  {number}. {name}: kubeadm certs renew all; restart {STATIC_PODS} (manifests moved aside "
            "until the kubelet stopped them, then back); wait for its API server (/readyz)"
        )
    if len(planes) == 1:
        lines.append("  a single control plane: the API and etcd are down while it restarts")
    lines += [
        "then: the admin kubeconfig is copied again to /root/.kube/config on each control plane and, when "
        "kubeadm_control_plane_fetch_kubeconfig is set, to that path on the controller",
        "not renewed: the CAs (ca, etcd-ca, front-proxy-ca: ten years; kubeadm never renews them) and the "
        "kubelets' client certificates (the kubelet rotates them itself)",
        "a control plane whose API server does not come back stops the run; the others are not touched",
    ]
    again = f" --limit {shlex.quote(limit)}" if limit else ""
    lines.append(f"next: gpubring certs {inventory}{again} --renew --yes")
    return lines


def _facts_by_host(events: Iterable[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """host -> the last value of fact `name` its set_fact results carried."""
    found: dict[str, Any] = {}
    for event in events:
        if event.get("event") != "runner_on_ok":
            continue
        data = event.get("event_data")
        res = data.get("res") if isinstance(data, Mapping) else None
        facts = res.get("ansible_facts") if isinstance(res, Mapping) else None
        if isinstance(facts, Mapping) and name in facts and isinstance(data, Mapping):
            found[str(data.get("host") or "")] = facts[name]
    return found


def _days(expires: str, now: datetime) -> float | None:
    try:
        moment = datetime.fromisoformat(expires.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment - now).total_seconds() / 86400


def expiry_lines(certs: Mapping[str, Any], warn_days: int, now: datetime | None = None) -> list[str]:
    """One block per control plane: each certificate, its expiry and days left, marked when it
    expires within warn_days (`!`), has expired or is missing."""
    now = now or datetime.now(UTC)
    lines: list[str] = []
    for host in sorted(certs):
        value = certs[host]
        entries = value.get("entries") if isinstance(value, Mapping) else None
        lines.append(f"{host}:")
        if not isinstance(entries, list) or not entries:
            lines.append("  (kubeadm listed no certificate)")
            continue
        width = max(len(str(e.get("name", ""))) for e in entries if isinstance(e, Mapping))
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            name = str(entry.get("name", "")).ljust(width)
            kind = "CA  " if entry.get("kind") == "ca" else "cert"
            if entry.get("missing"):
                lines.append(f"  ! {kind} {name}  MISSING")
                continue
            expires = str(entry.get("expires", ""))
            left = _days(expires, now)
            if left is None:
                lines.append(f"  ? {kind} {name}  {expires}")
                continue
            mark, note = " ", f"{left:.0f} days left"
            if left < 0:
                mark, note = "!", f"EXPIRED {-left:.0f} days ago"
            elif left <= warn_days and not entry.get("externally_managed"):
                mark, note = "!", f"{left:.0f} days left, within gpubring_cert_warn_days ({warn_days})"
            managed = " (externally managed)" if entry.get("externally_managed") else ""
            signer = f", signed by {entry['ca']}" if entry.get("ca") else ""
            lines.append(f"  {mark} {kind} {name}  {expires}  {note}{signer}{managed}")
    return lines


def cert_warnings(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The warnings the verify phase published (`gpubring_cert_warnings`, per control plane)."""
    out: list[str] = []
    for _host, lines in sorted(_facts_by_host(events, WARNINGS_FACT).items()):
        if isinstance(lines, list):
            out += [str(line) for line in lines if str(line).strip()]
    return out


def print_cert_warnings(run_folder: Path | None) -> None:
    """`warning: <host>: certificate ... expires in N day(s)` on stderr for each certificate the run
    found expiring within gpubring_cert_warn_days, and how to renew (up, verify)."""
    if run_folder is None:
        return
    from gpubring import verifyfacts, view

    lines = cert_warnings(verifyfacts.job_events(run_folder))
    for line in lines:
        view.warning(line)
    if lines:
        view.warning(
            "renew them with `gpubring certs INVENTORY --renew` (docs/operations.md, Certificate renewal)"
        )


@targeted_run_options
def command(
    ctx: typer.Context,
    inventory: InventoryArg,
    *,
    renew: Renew = False,
    yes: Yes = False,
    run: RunOptions,
) -> None:
    """Show when each control plane's certificates expire (kubeadm certs check-expiration), marking
    those within gpubring_cert_warn_days; with --renew --yes renew them (kubeadm certs renew all) and
    restart the static pods one control plane at a time, waiting for its API server before the next,
    then copy the admin kubeconfig again where gpubring put it.

    --renew without --yes prints the plan and changes nothing.

    Exit 1 when a task failed, 4 when a host was unreachable, 3 when cancelled, 2 on bad input.
    """
    # Imported here: `gpubring --help` must not load the inventory model, rich or the runner.
    from gpubring import nodeops, paths, verifyfacts, view
    from gpubring.commands._common import load_or_exit
    from gpubring.commands.runs import warn_orphans
    from gpubring.run import steps

    if yes and not renew:
        _bad_input("--yes confirms --renew; without --renew nothing is changed and no confirmation is needed")
    inv = load_or_exit(inventory)
    try:
        planes = control_planes(inv, run.limit)
    except ValueError as exc:
        _bad_input(str(exc))
    if "cluster" not in inv.phases:
        _bad_input(
            f"certificates are the cluster phase's, and this inventory's gpubring_phases leave it out "
            f"({inv.phases_skipped_reason or 'gpubring_phases'})"
        )
    if renew and not yes and not run.check:
        for line in plan_lines(inventory, planes, run.limit):
            typer.echo(line)
        raise typer.Exit(code=ExitCode.OK)
    if renew and not run.check:
        hold_run_lock(ctx, inv.root)
    warn_orphans(inventory, inv.root)
    variables: dict[str, Any] = {"certs_renew": True, "certs_confirm": "yes"} if renew else {}
    purpose = f"renew the certificates of {', '.join(planes)}" if renew else "read the certificates' expiry"
    step = nodeops.Step(
        "certs",
        (paths.playbooks_dir() / PLAYBOOK).resolve(),
        run.limit or "",
        purpose,
        variables,
    )
    console = view.console()
    outcome = steps.run_steps(
        inv, nodeops.runs(inv, [step], run), run, title=f"gpubring certs {inventory}", console=console
    )
    if outcome.last is not None:
        found = _facts_by_host(verifyfacts.job_events(outcome.last.run_folder), CERTS_FACT)
        warn_days = int(inv.settings.get("gpubring_cert_warn_days", 30))
        for line in expiry_lines(found, warn_days):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code=int(outcome.exit_code))
