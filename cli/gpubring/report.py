"""The run report: one JSON document per run, written to <run folder>/report.json (and --json PATH).

Built from the same RunState the live view shows. Fields (REPORT_FIELDS) and their meaning:

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
from gpubring.events import HostCounts, RunState
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


def totals(counts: Mapping[str, HostCounts]) -> dict[str, int]:
    summed = {key: 0 for key in HostCounts().as_dict()}
    for row in counts.values():
        for key, value in row.as_dict().items():
            summed[key] += value
    return summed


def build(state: RunState, meta: RunMeta) -> dict[str, Any]:
    status, code = outcome(state, meta.ansible_rc)
    counts = state.host_counts()
    return {
        "gpubring_version": __version__,
        "command": meta.command,
        "inventory": str(meta.inventory),
        "hosts_file": str(meta.hosts_file),
        "run_folder": str(meta.run_folder),
        "playbook": meta.playbook,
        "started": meta.started.isoformat(),
        "ended": meta.ended.isoformat(),
        "duration_s": round((meta.ended - meta.started).total_seconds(), 3),
        "status": status,
        "exit_code": int(code),
        "ansible_rc": meta.ansible_rc,
        "phases": {
            "run": list(meta.phases_run),
            "skipped": [{"phase": phase, "reason": reason} for phase, reason in meta.phases_skipped],
        },
        "stats": {host: row.as_dict() for host, row in counts.items()},
        "totals": totals(counts),
        "failures": [f.as_dict() for f in state.final_failures()],
        "ignored": [f.as_dict() for f in state.ignored],
        "stopped_at": state.stopped_at() if state.cancelled else None,
        "cancel_wait": state.cancel_wait.as_dict() if state.cancel_wait is not None else None,
        "options": dict(meta.options),
        "check": bool(meta.options.get("check", False)),
        "partial": list(meta.partial),
        "hardware": {host: dict(summary) for host, summary in sorted(state.hardware.items())},
        "rebooted": {host: list(reasons) for host, reasons in sorted(state.rebooted.items())},
        "reboot_pending": {
            host: {"reasons": list(reasons), "because": because}
            for host, (reasons, because) in sorted(state.reboot_pending.items())
        },
        "acceptance": {
            host: {
                "verdict": verdict.verdict,
                "failed": [check.as_dict() for check in verdict.failed],
                "skipped": [check.as_dict() for check in verdict.skipped],
                "admission": verdict.admission,
            }
            for host, verdict in sorted(state.acceptance.items())
        },
        "errors": list(state.errors),
        "notices": list(state.notices),
    }


def dumps(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False) + "\n"


def write(report: Mapping[str, Any], run_folder: Path) -> Path:
    """Write the report into its run folder (0600) and return the path."""
    path = run_folder / REPORT_NAME
    write_private(path, dumps(report))
    return path


def write_copy(report: Mapping[str, Any], path: Path) -> None:
    """The --json PATH copy, 0600 like the run folder's own: it can hold Helm values."""
    write_private(path, dumps(report))
