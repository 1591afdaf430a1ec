"""One run: ansible-runner started on the run folder with the session's callbacks, the signals that
cancel it, the wait after the cancel, and the report written in every case (see gpubring.run).

Nothing in this module imports ansible or ansible_runner at module level."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpubring import report, runstore
from gpubring.events import (
    Event,
    Notice,
)
from gpubring.run import shards
from gpubring.run.accelerate import Accelerator, accelerator
from gpubring.run.cancel import CancelFlag
from gpubring.run.cancelwait import wait_after_cancel
from gpubring.run.folder import LOCAL_TEMP, cmdline, environment, prepare, remove_run_files
from gpubring.run.leftovers import clear_leftovers
from gpubring.run.proctable import process_start
from gpubring.run.session import Session
from gpubring.run.settings import RunResult, RunSettings
from gpubring.run.strategy import for_runs
from gpubring.runopts import extra_var_names


def utc_now() -> datetime:
    return datetime.now(UTC)


def _options(settings: RunSettings, accel: Accelerator) -> dict[str, Any]:
    return {
        "check": settings.options.check,
        "diff": settings.options.diff,
        "limit": settings.options.limit,
        "tags": settings.options.tags,
        "skip_tags": settings.options.skip_tags,
        "forks": settings.options.forks,
        "strategy": accel.strategy,
        "extra_vars": extra_var_names(settings.options.extra_vars),
    }


def _run_playbook(
    settings: RunSettings,
    folder: Path,
    session: Session,
    playbook: Path,
    inventories: Sequence[Path],
    *,
    ident: str | None = None,
    limit: str | None = None,
    args: str | None = None,
) -> tuple[int | None, str]:
    """ansible-runner's run of the playbook: ansible-playbook's exit status and ansible-runner's status.

    A shard of a sharded run (gpubring.run.shards) gives its own ident, --limit and -e arguments;
    ansible-runner then keeps every job's artifacts (the run folder is pruned as a whole)."""
    import ansible_runner

    shard = ident is not None
    runner = ansible_runner.run(
        private_data_dir=str(folder),
        ident=ident or folder.name,
        playbook=str(playbook),
        inventory=[str(p) for p in inventories],
        cmdline=args if args is not None else cmdline(settings, folder),
        envvars=dict(session.envvars),
        limit=limit if shard else settings.options.limit,
        tags=settings.options.tags,
        skip_tags=settings.options.skip_tags,
        forks=settings.options.forks,
        verbosity=settings.options.verbosity or None,
        quiet=True,
        suppress_env_files=True,
        rotate_artifacts=0 if shard else settings.keep_runs,
        # Not "jsonfile": ansible-runner would point the cache into this run's artifacts.
        fact_cache_type="memory",
        event_handler=session.event_handler,
        status_handler=session.status_handler,
        cancel_callback=session.cancel_callback,
    )
    return (runner.rc if isinstance(runner.rc, int) else None), str(runner.status)


def _shard_job(
    settings: RunSettings,
    folder: Path,
    session: Session,
    playbook: Path,
    inventories: Sequence[Path],
    *,
    ident: str,
    limit: str | None,
    args: str,
) -> tuple[int | None, str]:
    return _run_playbook(
        settings, folder, session, playbook, inventories, ident=ident, limit=limit, args=args
    )


def run(
    settings: RunSettings,
    on_event: Callable[[Event], None] | None = None,
    cancel: CancelFlag | None = None,
) -> RunResult:
    """Run the playbook (or phases) of `settings`; events go to `on_event` as they arrive.

    Ctrl-C, SIGTERM and SIGHUP (when called from the main thread) and `cancel` stop the run; the
    report is written to <run folder>/report.json in every case.

    A cancel then waits, up to gpubring_cancel_wait_timeout, for the package work of the hosts that
    had a task in flight (the module's docstring); a second signal, or `cancel.set()` again, stops
    that wait. The report says what it found (`cancel_wait`).
    """
    cancel = cancel or CancelFlag()
    started = utc_now()
    inventory_root = settings.inventory_root.resolve()
    folder = settings.run_folder or runstore.new_run_folder(inventory_root, settings.command, started)
    folder = folder.resolve()
    me = os.getpid()
    runstore.write_owner(folder, runstore.Owner(pid=me, start=process_start(me) or 0))
    runstore.prune(runstore.runs_dir(inventory_root), settings.keep_runs, protect=folder)
    leftovers = clear_leftovers(inventory_root, exclude=folder)
    accel = for_runs(accelerator(settings.options.accelerate))
    playbook, plays, inventories = prepare(settings, folder)
    try:
        sharding = shards.plan(settings)
    except shards.ShardsError as exc:  # `gpubring check` refuses it first; never a traceback here
        sharding = None
        session_notice = f"{exc}: one process"
    else:
        session_notice = ""
    envvars = environment(settings, accel, folder)
    session = Session(settings, folder, plays, envvars, on_event=on_event, cancel=cancel)
    if leftovers:
        runs = ", ".join(sorted({p.parent.parent.name for p in leftovers}))
        session.emit(Notice(f"removed {len(leftovers)} -e file(s) left by killed run(s): {runs}"))
    if accel.notice:
        session.emit(Notice(accel.notice))
    if session_notice:
        session.emit(Notice(session_notice))
    (folder / LOCAL_TEMP).mkdir(mode=0o700, exist_ok=True)
    ansible_rc: int | None = None
    runner_status = ""
    try:
        # One signal handler from the start of the run to the end of the wait after its cancel: a
        # second Ctrl-C stops that wait, and no Ctrl-C can interrupt the cleanup in between.
        with cancel.on_signals():
            try:
                if sharding is None:
                    ansible_rc, runner_status = _run_playbook(
                        settings, folder, session, playbook, inventories
                    )
                else:
                    ansible_rc, runner_status = shards.run(
                        settings,
                        folder,
                        session,
                        sharding,
                        inventories=inventories,
                        run_one=functools.partial(_shard_job, settings, folder),
                    )
            finally:
                session.finish(runner_status)
                remove_run_files(folder)
            if session.state.cancelled:
                wait_after_cancel(settings, folder, session, cancel)
    finally:
        meta = report.RunMeta(
            command=settings.command,
            inventory=inventory_root,
            hosts_file=settings.hosts_file.resolve(),
            run_folder=folder,
            playbook=str(playbook),
            started=started,
            ended=utc_now(),
            ansible_rc=ansible_rc,
            phases_run=settings.phases,
            phases_skipped=settings.phases_skipped,
            options=_options(settings, accel),
            partial=runstore.partial_by(
                limit=settings.options.limit,
                tags=settings.options.tags,
                skip_tags=settings.options.skip_tags,
                phases=settings.phase_option,
            ),
        )
        data = report.RunReport.of(session.state, meta)
        report_path = report.write(data, folder)
    status, code = report.outcome(session.state, ansible_rc)
    return RunResult(
        run_folder=folder,
        report_path=report_path,
        status=status,
        exit_code=code,
        report=data,
        state=session.state,
    )
