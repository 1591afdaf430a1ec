"""`gpubring verify INVENTORY`: run the verify phase (as `up --only verify`), and with --report DIR
write the conformance evidence (DIR/conformance.json, DIR/conformance.md, DIR/conformance-product.yaml)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from gpubring.commands._common import hold_run_lock, load_or_exit
from gpubring.exitcodes import ExitCode
from gpubring.options import InventoryArg, targeted_run_options
from gpubring.runopts import RunOptions

ACCEPTANCE_TAG = "gpu_acceptance"
REPORT_FILES = ("conformance.json", "conformance.md", "conformance-product.yaml")


def report_dir(value: Path | None) -> Path | None:
    """Callback of --report: DIR is a folder, or a name in an existing folder (created 0700 before the
    run), and gpubring may write there; checked before anything runs (exit 2)."""
    if value is None:
        return None
    if value.exists():
        if not value.is_dir():
            raise typer.BadParameter(f"{value} is not a folder")
        if not os.access(value, os.W_OK | os.X_OK):
            raise typer.BadParameter(f"{value}: not writable")
        taken = [name for name in REPORT_FILES if (value / name).is_dir()]
        if taken:
            raise typer.BadParameter(f"{value / taken[0]} is a folder")
        return value
    if not value.parent.is_dir():
        raise typer.BadParameter(f"the folder {value.parent} does not exist")
    if not os.access(value.parent, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"cannot create {value}: {value.parent} is not writable")
    return value


Acceptance = Annotated[
    bool,
    typer.Option(
        "--acceptance",
        help="Also run the GPU node acceptance checks (gpu_acceptance play); skipped otherwise.",
    ),
]
Report = Annotated[
    Path | None,
    typer.Option(
        "--report",
        metavar="DIR",
        callback=report_dir,
        help="Write DIR/conformance.json and DIR/conformance.md: each CNCF AI Conformance requirement, "
        "its check on this cluster, result and output; DIR/conformance-product.yaml: status, evidence and "
        "notes in the CNCF product file's fields (created 0700 if missing; files 0600).",
    ),
]
PlaybooksDir = Annotated[Path | None, typer.Option("--playbooks-dir", hidden=True)]


def _bad_input(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=ExitCode.BAD_INPUT) from None


def _skip_acceptance(run: RunOptions) -> RunOptions:
    tags = [t.strip() for t in (run.skip_tags or "").split(",") if t.strip()]
    if ACCEPTANCE_TAG not in tags:
        tags.append(ACCEPTANCE_TAG)
    return dataclasses.replace(run, skip_tags=",".join(tags))


@targeted_run_options
def command(
    ctx: typer.Context,
    inventory: InventoryArg,
    *,
    acceptance: Acceptance = False,
    report: Report = None,
    playbooks_dir: PlaybooksDir = None,
    run: RunOptions,
) -> None:
    """Verify the cluster: the per-host checks and the cluster smoke tests (DRA, GPU pods, gang
    scheduling, DCGM metrics) of the verify phase; --acceptance adds the GPU node acceptance checks.

    With --report DIR, also writes the conformance evidence: each CNCF Kubernetes AI Conformance
    requirement, the check that proves it, its result and raw output, or why gpubring does not cover
    it; the acceptance verdict of every node; the version matrix; and conformance-product.yaml, each
    requirement's status, evidence and notes in the fields of the CNCF submission's product file.

    Validates the inventory and --report first: bad input touches no host (exit 2).
    Exit 1 when a check failed, 4 when a host was unreachable, 3 when cancelled.
    """
    # Imported here: `gpubring --help` must not load the inventory model, rich's live view or ansible.
    from gpubring import view
    from gpubring.commands.runs import warn_orphans
    from gpubring.phases import PHASES, PhaseError, PhaseSelection, resolve_pattern, select_phases
    from gpubring.run import steps
    from gpubring.run.settings import RunSettings

    inv = load_or_exit(inventory)
    try:
        selection = select_phases(
            PHASES,
            "verify",
            None,
            inv.phases,
            inv.phases_skipped_reason,
            check=run.check,
            check_only=inv.phases_check_only,
        )
    except PhaseError as exc:
        _bad_input(str(exc))
    limit = run.limit
    if limit and not limit.startswith("@") and not resolve_pattern(limit, inv.groups, list(inv.hosts)):
        _bad_input(f"--limit {limit}: matches no host of this inventory")
    if playbooks_dir is not None and not playbooks_dir.is_dir():
        _bad_input(f"--playbooks-dir {playbooks_dir}: not a folder")
    if report is not None:
        try:
            report.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            _bad_input(f"--report {report}: {exc.strerror or exc}")
    if acceptance and not run.check:  # the acceptance checks load the GPUs: one such run at a time
        hold_run_lock(ctx, inv.root)
    warn_orphans(inventory, inv.root)
    if not acceptance:
        run = _skip_acceptance(run)

    settings = RunSettings(
        inventory_root=inv.root,
        hosts_file=inv.hosts_file,
        command="verify",
        phases=selection.run,
        phases_skipped=(),
        playbooks_dir=playbooks_dir,
        serial=str(inv.settings["gpubring_serial"]),
        options=run,
    )
    console = view.console()
    step = steps.Step(settings)
    outcome = steps.run_steps(
        inv,
        [step],
        run,
        title=f"gpubring verify {inventory}",
        phases=PhaseSelection(run=selection.run, skipped=()),
        scope=True,
        console=console,
    )
    result = outcome.last
    if result is not None:  # certificates that expire within gpubring_cert_warn_days
        from gpubring.commands.certs import print_cert_warnings

        print_cert_warnings(result.run_folder)
    if report is not None and result is not None:
        try:
            written = write_conformance(report, result.report.to_json(), result.run_folder, inv)
        except OSError as exc:
            typer.echo(f"error: --report {report}: {exc.strerror or exc}", err=True)
        else:
            console.print(f"Conformance evidence: {', '.join(str(p) for p in written)}")
    raise typer.Exit(code=int(outcome.exit_code))


def write_conformance(folder: Path, run_data: Any, run_folder: Path, inv: Any) -> list[Path]:
    """DIR/conformance.json, .md and conformance-product.yaml (0600) from the run's report and its verify
    facts."""
    import json

    from gpubring import conformance, runstore, verifyfacts
    from gpubring import versions as matrix

    facts = verifyfacts.from_run_folder(run_folder)
    pinned = dict(matrix.flatten(matrix.load_pinned()))
    rows = [
        {"path": path, "version": value, "overridden": path in inv.overridden, "pinned": pinned.get(path)}
        for path, value in matrix.flatten(inv.versions)
    ]
    doc = conformance.build({**run_data, **facts.report_fields()}, rows)
    out = [folder / name for name in REPORT_FILES]
    runstore.write_private(out[0], json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n")
    runstore.write_private(out[1], conformance.to_markdown(doc))
    runstore.write_private(out[2], conformance.product_yaml(doc))
    return out
