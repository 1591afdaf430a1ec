"""The executor: every verb that runs playbooks (up, verify, node add | replace | remove, upgrade, reset)
runs its steps here, and only here is a run started (`process.run`) and drawn (`view.RunView`).

A step is one run: its RunSettings, what it is for, and what its success changes in gpubring's record
of what it installed (gpubring.upgrade). Each step gets the banner, the live view and the summary;
a step that does not succeed stops the next; --json gets the last step's report.

Nothing here imports ansible or ansible_runner at module level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpubring import report, runstore, view
from gpubring.exitcodes import ExitCode
from gpubring.run import process

if TYPE_CHECKING:
    from rich.console import Console

    from gpubring.model import Inventory
    from gpubring.phases import PhaseSelection
    from gpubring.run.settings import RunResult, RunSettings
    from gpubring.runopts import RunOptions


@dataclass(frozen=True)
class Record:
    """What a step that succeeded (not in check mode) changes in gpubring's record of what it
    installed: the pins of the phases it ran (`pins`: up, node add, upgrade), or hosts that run no
    Kubernetes of gpubring's any more (`forget`: node remove, reset; `whole_cluster`: the releases
    go too)."""

    pins: tuple[str, ...] = ()
    forget: tuple[str, ...] = ()
    whole_cluster: bool = False


@dataclass(frozen=True)
class Step:
    """One run of a verb."""

    settings: RunSettings
    purpose: str = ""  # after the title in the banner (`gpubring node add INV gpu-1: host roles, ...`)
    record: Record | None = None


@dataclass(frozen=True)
class Outcome:
    """The exit code of the last step run, and that step's result (None when no step ran)."""

    exit_code: ExitCode
    last: RunResult | None


def run_steps(
    inv: Inventory,
    steps: Sequence[Step],
    options: RunOptions,
    *,
    title: str,
    phases: PhaseSelection | None = None,
    scope: bool = False,
    console: Console | None = None,
) -> Outcome:
    """Run the steps in order, each with the banner, live view and summary; stop at the first step that
    does not succeed. `scope` adds the banner's check-mode and partial lines (up, verify). The options'
    json_report (--json) gets the last step's report."""
    console = console or view.console()
    mode = " (check mode)" if options.check else ""
    code = ExitCode.OK
    last: RunResult | None = None
    for number, step in enumerate(steps, start=1):
        counter = f" [{number}/{len(steps)}]" if len(steps) > 1 else ""
        head = f"{title}{mode}{counter}" + (f": {step.purpose}" if step.purpose else "")
        live = view.RunView(console)
        if scope:
            live.intro(
                head,
                phases.run if phases else (),
                phases.skipped if phases else (),
                check=options.check,
                partial=_partial(step.settings),
            )
        else:
            live.intro(head, phases.run if phases else (), phases.skipped if phases else ())
        with live:
            result = process.run(step.settings, on_event=live.handle)
        view.summary(console, result.report)
        code, last = result.exit_code, result
        if code == ExitCode.OK and not options.check and step.record is not None:
            _record(inv, step.record, result)
        if code != ExitCode.OK:
            if number < len(steps):
                console.print(f"not run: {', '.join(s.purpose for s in steps[number:])}")
            break
    if options.json_report is not None and last is not None:
        try:
            report.write_copy(last.report, options.json_report)
        except OSError as exc:
            view.error(f"--json {options.json_report}: {exc.strerror or exc}")
    return Outcome(code, last)


def _partial(settings: RunSettings) -> list[str]:
    """What narrowed the run, as report.json's `partial` says it."""
    return runstore.partial_by(
        limit=settings.options.limit,
        tags=settings.options.tags,
        skip_tags=settings.options.skip_tags,
        phases=settings.phase_option,
    )


def _record(inv: Inventory, record: Record, result: RunResult) -> None:
    """Keep gpubring's record of what it installed (gpubring.upgrade) true after a step that
    succeeded; a record that cannot be written is a warning, not a failed run."""
    from gpubring import upgrade

    try:
        if record.pins:
            upgrade.record_run(inv, result.report.to_json(), record.pins)
        if record.forget:
            upgrade.forget_hosts(inv, record.forget, whole_cluster=record.whole_cluster)
    except OSError as exc:
        view.warning(f"could not update {upgrade.record_path(inv.root)}: {exc.strerror or exc}")
