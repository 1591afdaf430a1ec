"""The run report: one JSON document per run, written to <run folder>/report.json (and --json PATH).

Built from the same RunState the live view shows, as a typed RunReport (frozen dataclasses: per-host
HostCounts, Failures, where a cancelled run stopped, drains, reboots, acceptance verdicts); `to_json()` gives
the document written to disk and `RunReport.from_json()` reads one back, an older one with missing
fields included (`gpubring runs`). Fields (REPORT_FIELDS) and their meaning:

- command, inventory (its folder), hosts_file, run_folder, playbook: what ran where;
- started, ended (UTC ISO 8601), duration_s;
- status: ok | failed | unreachable | cancelled; exit_code: 0 | 1 | 4 | 3 (see gpubring.exitcodes);
- phases: {"run": [...], "skipped": [{"phase", "reason"}]};
- stats: {host: {ok, changed, failed, unreachable, skipped, rescued, ignored}} from ansible's recap
  (`ok` counts changed tasks too, as ansible's recap does); totals: the same summed over hosts;
- failures: [{host, task, role, status, message, phase, play}] (status failed or unreachable);
- ignored: the same for failures a task let pass (ignore_errors), such as a download check mode
  could not reach;
- stopped_at: where a cancelled run was ({phase, play, hosts: {host: {phase, play, task, role,
  finished}}}), null otherwise;
- cancel_wait: after a cancel that left tasks in flight, the wait for those hosts' package work
  ({timeout_s, outcome: finished | timed_out | stopped | unchecked | not_waited, reason (what stopped
  it), duration_s, hosts: {host: {task, outcome: idle | finished | timed_out | stopped | unchecked |
  not_waited, holders, busy, message}}}: `holders` is what was busy when the wait first looked, `busy`
  what still was at its end, one line per process); null when there was no such wait;
- options: check, diff, limit, tags, skip_tags, forks, strategy, extra_vars (names only, never values);
- check: true for a check-mode run (a dry run: its `changed` counts are what would change);
- partial: what narrowed the run, as typed (`--only preflight`, `--limit gpu01`, `--tags x`,
  `--skip-tags y`); empty for a full run;
- hardware: {host: preflight_summary} for each host preflight read (GPUs, NVSwitches, RDMA NICs,
  NUMA, IOMMU, Secure Boot, ...), empty when preflight did not run;
- drains: {host: {"cordoned_by": "gpubring" | "operator", "operator_cordon_kept": bool, "waited_for":
  [workload, ...], "waited_seconds": int, "still_running_at_bound": [workload, ...], "drained": bool}}
  for each host the node_drain role drained (its `node_drain_report`; the last drain of the run when
  one drained a host twice): who cordoned it (an operator's cordon is kept), the Jobs and gang
  workloads a GPU-aware drain waited for and how long, those evicted still running at the bound;
  `drained` is false in check mode (what it would do); empty when nothing was drained;
- host_state: {host: {"unchanged": bool, "reasons": [...]}} for each host the host phase's first play
  compared with the record of its last complete host phase (gpubring.core.host_state): unchanged hosts
  were left out of the host phase's roles; the reasons say why the others went through them ("no
  record", "inputs", "files", "packages", "sysctl", "kernel", "devices", "units", "blocker <path>");
  empty when the host phase did not run or compared nothing (`up --full`, --tags, a plain playbook);
- rebooted: {host: [reason, ...]} for each host the reboot play (roles/reboot) rebooted and verified;
- reboot_pending: {host: {"reasons": [...], "because": "gpubring_reboot_allowed is false"}} for each host
  that needs a reboot the run did not do (not allowed, a role's own setting, check mode);
- acceptance: {host: {"verdict": "passed" | "failed" | "skipped-only" | null, "failed": [{"name",
  "reason"}], "skipped": [{"name", "reason"}], "admission": str | null}} for each GPU node the
  gpu_acceptance role judged (playbooks/verify.yml: `up`'s verify phase, `node add`, `verify
  --acceptance`): the checks that failed and those skipped with why, and what its gate did
  (`accepted`: the taint gpubring.io/acceptance removed, `failed`: tainted =failed, `pending`: kept
  =pending, `no-cluster`, `off`, `check`; null when the role published none); empty when it did not run;
- errors: what ansible printed as an error outside any task; ansible_rc: ansible-playbook's exit status;
- notices: what gpubring said once during the run (an accelerator fallback, for example).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpubring import __version__
from gpubring.events import (
    AcceptanceCheck,
    AcceptanceVerdict,
    DrainReport,
    Failure,
    HostCounts,
    HostPhaseState,
    RunState,
    drain_from,
)
from gpubring.exitcodes import ExitCode
from gpubring.runstore import REPORT_NAME, write_private

REPORT_FIELDS = (
    "gpubring_version",
    "command",
    "inventory",
    "hosts_file",
    "run_folder",
    "playbook",
    "started",
    "ended",
    "duration_s",
    "status",
    "exit_code",
    "ansible_rc",
    "phases",
    "stats",
    "totals",
    "failures",
    "ignored",
    "stopped_at",
    "cancel_wait",
    "options",
    "check",
    "partial",
    "hardware",
    "drains",
    "host_state",
    "rebooted",
    "reboot_pending",
    "acceptance",
    "errors",
    "notices",
)
COUNT_KEYS = ("ok", "changed", "failed", "unreachable", "skipped")


@dataclass(frozen=True)
class RunMeta:
    """What the report says about the run besides its events."""

    command: str
    inventory: Path
    hosts_file: Path
    run_folder: Path
    playbook: str
    started: datetime
    ended: datetime
    ansible_rc: int | None
    phases_run: Sequence[str] = ()
    phases_skipped: Sequence[tuple[str, str]] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    partial: Sequence[str] = ()


def outcome(state: RunState, ansible_rc: int | None) -> tuple[str, ExitCode]:
    """Status and exit code: cancelled (3) before unreachable (4) before failed (1), else ok (0)."""
    if state.cancelled:
        return "cancelled", ExitCode.CANCELLED
    counts = state.host_counts()
    if any(c.unreachable for c in counts.values()):
        return "unreachable", ExitCode.UNREACHABLE
    if any(c.failed for c in counts.values()) or state.final_failures() or state.errors:
        return "failed", ExitCode.TASK_FAILED
    if ansible_rc not in (0, None):
        return "failed", ExitCode.TASK_FAILED
    return "ok", ExitCode.OK


def totals(counts: Mapping[str, HostCounts]) -> HostCounts:
    summed = dict.fromkeys(HostCounts().as_dict(), 0)
    for row in counts.values():
        for key, value in row.as_dict().items():
            summed[key] += value
    return HostCounts(**summed)


@dataclass(frozen=True)
class Phases:
    """The phases run, in order, and those skipped with the reason."""

    run: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StoppedHost:
    """A host's last task when a cancelled run stopped; `finished`: that task was over."""

    phase: str = ""
    play: str = ""
    task: str = ""
    role: str = ""
    finished: bool = False


@dataclass(frozen=True)
class StoppedAt:
    """Where a cancelled run was: the phase and play, and each host's last task."""

    phase: str = ""
    play: str = ""
    hosts: Mapping[str, StoppedHost] = field(default_factory=dict)


@dataclass(frozen=True)
class RebootPending:
    """A reboot a host needs that the run did not do: the reasons, and why not."""

    reasons: tuple[str, ...] = ()
    because: str = ""


@dataclass(frozen=True)
class RunReport:
    """One run's report (the module's docstring says each field). Built by `of`, written by
    `to_json`, read back by `from_json`."""

    gpubring_version: str = ""
    command: str = ""
    inventory: str = ""
    hosts_file: str = ""
    run_folder: str = ""
    playbook: str = ""
    started: str = ""
    ended: str = ""
    duration_s: float = 0
    status: str = "?"
    exit_code: int | None = None
    ansible_rc: int | None = None
    phases: Phases = field(default_factory=Phases)
    stats: Mapping[str, HostCounts] = field(default_factory=dict)
    totals: HostCounts = field(default_factory=HostCounts)
    failures: tuple[Failure, ...] = ()
    ignored: tuple[Failure, ...] = ()
    stopped_at: StoppedAt | None = None
    # The wait after a cancel, as events.CancelWaitState.as_dict() gives it (the live view draws the same).
    cancel_wait: Mapping[str, Any] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    check: bool = False
    partial: tuple[str, ...] = ()
    hardware: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    drains: Mapping[str, DrainReport] = field(default_factory=dict)
    host_state: Mapping[str, HostPhaseState] = field(default_factory=dict)
    rebooted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reboot_pending: Mapping[str, RebootPending] = field(default_factory=dict)
    acceptance: Mapping[str, AcceptanceVerdict] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()

    @classmethod
    def of(cls, state: RunState, meta: RunMeta) -> RunReport:
        """The report of a run from the events it folded and what the runner knows of it."""
        status, code = outcome(state, meta.ansible_rc)
        counts = state.host_counts()
        stopped = state.stopped_at() if state.cancelled else None
        return cls(
            gpubring_version=__version__,
            command=meta.command,
            inventory=str(meta.inventory),
            hosts_file=str(meta.hosts_file),
            run_folder=str(meta.run_folder),
            playbook=meta.playbook,
            started=meta.started.isoformat(),
            ended=meta.ended.isoformat(),
            duration_s=round((meta.ended - meta.started).total_seconds(), 3),
            status=status,
            exit_code=int(code),
            ansible_rc=meta.ansible_rc,
            phases=Phases(tuple(meta.phases_run), tuple(meta.phases_skipped)),
            stats=dict(counts),
            totals=totals(counts),
            failures=tuple(state.final_failures()),
            ignored=tuple(state.ignored),
            stopped_at=_stopped_at(stopped) if stopped is not None else None,
            cancel_wait=state.cancel_wait.as_dict() if state.cancel_wait is not None else None,
            options=dict(meta.options),
            check=bool(meta.options.get("check", False)),
            partial=tuple(meta.partial),
            hardware={host: dict(summary) for host, summary in sorted(state.hardware.items())},
            drains=dict(sorted(state.drains.items())),
            host_state=dict(sorted(state.host_state.items())),
            rebooted={host: tuple(reasons) for host, reasons in sorted(state.rebooted.items())},
            reboot_pending={
                host: RebootPending(tuple(reasons), because)
                for host, (reasons, because) in sorted(state.reboot_pending.items())
            },
            acceptance=dict(sorted(state.acceptance.items())),
            errors=tuple(state.errors),
            notices=tuple(state.notices),
        )

    def to_json(self) -> dict[str, Any]:
        """The report as report.json holds it: REPORT_FIELDS, in that order."""
        stopped = self.stopped_at
        return {
            "gpubring_version": self.gpubring_version,
            "command": self.command,
            "inventory": self.inventory,
            "hosts_file": self.hosts_file,
            "run_folder": self.run_folder,
            "playbook": self.playbook,
            "started": self.started,
            "ended": self.ended,
            "duration_s": self.duration_s,
            "status": self.status,
            "exit_code": self.exit_code,
            "ansible_rc": self.ansible_rc,
            "phases": {
                "run": list(self.phases.run),
                "skipped": [{"phase": phase, "reason": reason} for phase, reason in self.phases.skipped],
            },
            "stats": {host: row.as_dict() for host, row in self.stats.items()},
            "totals": self.totals.as_dict(),
            "failures": [f.as_dict() for f in self.failures],
            "ignored": [f.as_dict() for f in self.ignored],
            "stopped_at": None
            if stopped is None
            else {
                "phase": stopped.phase,
                "play": stopped.play,
                "hosts": {
                    host: {
                        "phase": where.phase,
                        "play": where.play,
                        "task": where.task,
                        "role": where.role,
                        "finished": where.finished,
                    }
                    for host, where in stopped.hosts.items()
                },
            },
            "cancel_wait": dict(self.cancel_wait) if self.cancel_wait is not None else None,
            "options": dict(self.options),
            "check": self.check,
            "partial": list(self.partial),
            "hardware": {host: dict(summary) for host, summary in self.hardware.items()},
            "drains": {host: drain.as_dict() for host, drain in self.drains.items()},
            "host_state": {
                host: {"unchanged": entry.unchanged, "reasons": list(entry.reasons)}
                for host, entry in self.host_state.items()
            },
            "rebooted": {host: list(reasons) for host, reasons in self.rebooted.items()},
            "reboot_pending": {
                host: {"reasons": list(pending.reasons), "because": pending.because}
                for host, pending in self.reboot_pending.items()
            },
            "acceptance": {
                host: {
                    "verdict": verdict.verdict,
                    "failed": [check.as_dict() for check in verdict.failed],
                    "skipped": [check.as_dict() for check in verdict.skipped],
                    "admission": verdict.admission,
                }
                for host, verdict in self.acceptance.items()
            },
            "errors": list(self.errors),
            "notices": list(self.notices),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunReport:
        """A report.json read back (`gpubring runs`): what a field lacks, in an older or damaged
        report, takes its default; entries of the wrong shape are left out."""
        options = _mapping(data.get("options"))
        phases = _mapping(data.get("phases"))
        stopped = data.get("stopped_at")
        wait = data.get("cancel_wait")
        return cls(
            gpubring_version=_text(data.get("gpubring_version")),
            command=_text(data.get("command")),
            inventory=_text(data.get("inventory")),
            hosts_file=_text(data.get("hosts_file")),
            run_folder=_text(data.get("run_folder")),
            playbook=_text(data.get("playbook")),
            started=_text(data.get("started")),
            ended=_text(data.get("ended")),
            duration_s=data.get("duration_s", 0),
            status=str(data.get("status", "?")),
            exit_code=data.get("exit_code"),
            ansible_rc=data.get("ansible_rc"),
            phases=Phases(
                tuple(str(p) for p in phases.get("run") or ()),
                tuple(
                    (str(item.get("phase")), str(item.get("reason")))
                    for item in phases.get("skipped") or ()
                    if isinstance(item, Mapping)
                ),
            ),
            stats={
                str(host): _counts(row)
                for host, row in _mapping(data.get("stats")).items()
                if isinstance(row, Mapping)
            },
            totals=_counts(_mapping(data.get("totals"))),
            failures=_failures(data.get("failures")),
            ignored=_failures(data.get("ignored")),
            stopped_at=_stopped_at(stopped) if isinstance(stopped, Mapping) and stopped else None,
            cancel_wait=wait if isinstance(wait, Mapping) and wait else None,
            options=options,
            check=bool(data.get("check", options.get("check", False))),
            partial=tuple(str(p) for p in data.get("partial") or ()),
            hardware={
                str(host): summary
                for host, summary in _mapping(data.get("hardware")).items()
                if isinstance(summary, Mapping)
            },
            drains={
                str(host): drain_from(str(host), entry)
                for host, entry in _mapping(data.get("drains")).items()
                if isinstance(entry, Mapping)
            },
            host_state={
                str(host): HostPhaseState(
                    str(host), entry.get("unchanged") is True, tuple(map(str, entry.get("reasons") or ()))
                )
                for host, entry in _mapping(data.get("host_state")).items()
                if isinstance(entry, Mapping)
            },
            rebooted={
                str(host): tuple(str(r) for r in reasons or ())
                for host, reasons in _mapping(data.get("rebooted")).items()
            },
            reboot_pending={
                str(host): RebootPending(
                    tuple(str(r) for r in entry.get("reasons") or ()), str(entry.get("because") or "")
                )
                for host, entry in _mapping(data.get("reboot_pending")).items()
                if isinstance(entry, Mapping)
            },
            acceptance={
                str(host): AcceptanceVerdict(
                    host=str(host),
                    verdict=entry.get("verdict"),
                    failed=_checks(entry.get("failed")),
                    skipped=_checks(entry.get("skipped")),
                    admission=entry.get("admission"),
                )
                for host, entry in _mapping(data.get("acceptance")).items()
                if isinstance(entry, Mapping)
            },
            errors=tuple(str(e) for e in data.get("errors") or ()),
            notices=tuple(str(n) for n in data.get("notices") or ()),
        )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _counts(row: Mapping[str, Any]) -> HostCounts:
    values = {}
    for key in HostCounts().as_dict():
        try:
            values[key] = int(row.get(key, 0) or 0)
        except (TypeError, ValueError):
            values[key] = 0
    return HostCounts(**values)


def _failures(items: Any) -> tuple[Failure, ...]:
    return tuple(
        Failure(
            host=_text(item.get("host")),
            task=_text(item.get("task")),
            role=_text(item.get("role")),
            status=item.get("status") or "failed",
            message=_text(item.get("message")),
            phase=_text(item.get("phase")),
            play=_text(item.get("play")),
        )
        for item in items or ()
        if isinstance(item, Mapping)
    )


def _checks(items: Any) -> tuple[AcceptanceCheck, ...]:
    if not isinstance(items, list):
        return ()
    return tuple(
        AcceptanceCheck(name=str(item.get("name")), reason=item.get("reason"))
        for item in items
        if isinstance(item, Mapping)
    )


def _stopped_at(data: Mapping[str, Any]) -> StoppedAt:
    hosts = {
        str(host): StoppedHost(
            phase=_text(where.get("phase")),
            play=_text(where.get("play")),
            task=_text(where.get("task")),
            role=_text(where.get("role")),
            finished=bool(where.get("finished")),
        )
        for host, where in _mapping(data.get("hosts")).items()
        if isinstance(where, Mapping)
    }
    return StoppedAt(phase=_text(data.get("phase")), play=_text(data.get("play")), hosts=hosts)


def build(state: RunState, meta: RunMeta) -> dict[str, Any]:
    """The report's JSON document (RunReport.of(...).to_json())."""
    return RunReport.of(state, meta).to_json()


def dumps(report: RunReport | Mapping[str, Any]) -> str:
    data = report.to_json() if isinstance(report, RunReport) else report
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def write(report: RunReport | Mapping[str, Any], run_folder: Path) -> Path:
    """Write the report into its run folder (0600) and return the path."""
    path = run_folder / REPORT_NAME
    write_private(path, dumps(report))
    return path


def write_copy(report: RunReport | Mapping[str, Any], path: Path) -> None:
    """The --json PATH copy, 0600 like the run folder's own: it can hold Helm values."""
    write_private(path, dumps(report))
