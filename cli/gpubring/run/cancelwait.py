"""The wait after a cancel: the hosts that still had a task in flight, and a second, short
ansible-runner run of playbooks/wait_idle.yml limited to them, up to gpubring_cancel_wait_timeout
seconds, that waits for their package work (see gpubring.run)."""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpubring import paths
from gpubring.events import (
    CancelWait,
    CancelWaitEnd,
    package_wait,
)
from gpubring.run.accelerate import Accelerator
from gpubring.run.cancel import CancelFlag
from gpubring.run.folder import LOCAL_TEMP, environment, extra_vars_args, remove_run_files
from gpubring.run.session import Session
from gpubring.run.settings import RunSettings

if TYPE_CHECKING:
    from gpubring.model import Inventory


# The wait after a cancel: its setting and that setting's default in settings.yml (used when the
# inventory cannot be read), the playbook, and how long past the setting gpubring lets the wait run
# go on (connecting, ansible-playbook's start) before it stops it.
CANCEL_WAIT_SETTING = "gpubring_cancel_wait_timeout"
CANCEL_WAIT_DEFAULT_S = 300
WAIT_PLAYBOOK = "wait_idle.yml"
WAIT_GRACE_S = 60


def _seconds(value: Any) -> int | None:
    """A timeout setting as whole seconds >= 0, or None when it is not one."""
    if isinstance(value, bool):
        return None
    try:
        seconds = int(str(value).strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def cancel_wait_timeout(settings: RunSettings, inventory_settings: Mapping[str, Any] | None = None) -> int:
    """The seconds a cancelled run waits for its hosts' package work: the run's own
    `cancel_wait_timeout`, else the last -e that sets gpubring_cancel_wait_timeout (it wins in Ansible
    too), else the inventory's setting, else settings.yml's default."""
    if settings.cancel_wait_timeout is not None:
        return max(settings.cancel_wait_timeout, 0)
    for source in reversed(settings.options.extra_vars):
        if isinstance(source, Mapping) and CANCEL_WAIT_SETTING in source:
            seconds = _seconds(source[CANCEL_WAIT_SETTING])
            if seconds is not None:
                return seconds
    seconds = _seconds((inventory_settings or {}).get(CANCEL_WAIT_SETTING))
    return CANCEL_WAIT_DEFAULT_S if seconds is None else seconds


def _inventory_of(settings: RunSettings) -> Inventory | None:
    """The run's inventory (its hosts and cluster-wide settings), or None when it cannot be read: the
    wait then takes every host in flight and settings.yml's default."""
    from gpubring.inventory import InventoryError, load_inventory

    try:
        return load_inventory(settings.inventory_root, check_rules=False)
    except (InventoryError, OSError):
        return None


def wait_after_cancel(settings: RunSettings, folder: Path, session: Session, cancel: CancelFlag) -> None:
    """Name the inventory hosts that still had a task in flight when the run was cancelled, and wait
    for their package work (`_wait_run`); events CancelWait, PackageWait and CancelWaitEnd."""
    flight = session.state.in_flight()
    if not flight:
        return
    inventory = _inventory_of(settings)
    if inventory is not None:
        # A play on the controller (implicit localhost) left nothing on a host: the reaper stopped it.
        flight = {host: task for host, task in flight.items() if host in inventory.hosts}
        if not flight:
            return
    timeout = cancel_wait_timeout(settings, inventory.settings if inventory is not None else None)
    session.emit(CancelWait(hosts=flight, timeout_s=timeout))
    began = time.monotonic()
    if timeout == 0:
        end = CancelWaitEnd(not_waited=True)
    elif cancel.is_set_again():
        end = CancelWaitEnd(stopped=cancel.again_reason)
    else:
        try:
            end = _wait_run(settings, folder, session, cancel, flight=flight, timeout=timeout)
        except Exception as exc:  # the cancelled run still ends with its report and exit code 3
            why = f"the wait could not run: {type(exc).__name__}: {exc}"
            end = CancelWaitEnd(unchecked=dict.fromkeys(flight, why))
    session.emit(replace(end, duration_s=time.monotonic() - began))


def _wait_run(
    settings: RunSettings,
    folder: Path,
    session: Session,
    cancel: CancelFlag,
    *,
    flight: Mapping[str, str],
    timeout: int,
) -> CancelWaitEnd:
    """The second ansible-runner run: playbooks/wait_idle.yml limited to the hosts in flight, with the
    run's inventory, -e (0600 files under the run folder again, removed after) and connection
    settings, the linear strategy (no Mitogen), ident <run>-wait. What the hosts publish
    (PackageWait) goes to the run's events as it arrives; nothing else of this run does."""
    import ansible_runner

    ident = f"{folder.name}-wait"
    deadline = time.monotonic() + timeout + WAIT_GRACE_S
    ran_out = threading.Event()

    def should_stop() -> bool:
        if time.monotonic() > deadline:
            ran_out.set()
        return cancel.is_set_again() or ran_out.is_set()

    envvars = environment(settings, Accelerator(strategy="linear", env={}), folder)
    waiting = Session(
        settings, folder, (), envvars, on_event=None, cancel=cancel, ident=ident, should_stop=should_stop
    )

    def event_handler(raw: dict[str, Any]) -> bool:
        waiting.event_handler(raw)
        found = package_wait(raw)
        if found is not None and found.host in flight:
            session.emit(found)
        return True

    args = extra_vars_args(settings.options.extra_vars, folder / "vars")
    # Last: what gpubring waits for is what the play waits for, whatever an -e said.
    args += ["-e", json.dumps({CANCEL_WAIT_SETTING: timeout})]
    (folder / LOCAL_TEMP).mkdir(mode=0o700, exist_ok=True)
    status = ""
    try:
        runner = ansible_runner.run(
            private_data_dir=str(folder),
            ident=ident,
            playbook=str(paths.playbooks_dir().resolve() / WAIT_PLAYBOOK),
            inventory=[str(settings.hosts_file.resolve())],
            cmdline=shlex.join(args),
            envvars=dict(envvars),
            limit=",".join(flight),
            forks=settings.options.forks,
            quiet=True,
            suppress_env_files=True,
            fact_cache_type="memory",
            event_handler=event_handler,
            status_handler=waiting.status_handler,
            cancel_callback=waiting.cancel_callback,
        )
        status = str(runner.status)
    finally:
        waiting.finish(status)
        remove_run_files(folder)
    stopped = cancel.again_reason if cancel.is_set_again() else ""
    unchecked = {f.host: f.message for f in waiting.state.failures if f.host in flight}
    if waiting.state.errors and not stopped:
        for host in flight:
            unchecked.setdefault(host, waiting.state.errors[0])
    return CancelWaitEnd(stopped=stopped, timed_out=ran_out.is_set() and not stopped, unchecked=unchecked)
