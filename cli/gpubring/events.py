"""Typed events of a run, parsed from ansible-runner's event dicts, and the state they fold into.

`parse()` turns one ansible-runner event (the dicts its `event_handler` receives and its
artifacts/<ident>/job_events/ hold) into one small frozen dataclass, or None for events nothing
here needs. `RunState` folds those events into what the live view, the summary and the JSON report
show: the current phase and play, each host's current task and counts, the failures, where each
host was when a run is cancelled, which hosts still had a task in flight then (`RunState.in_flight`)
and what the wait for their package work found (`CancelWait`, `PackageWait`, `CancelWaitEnd`). The
view and the report read the same `RunState`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Status = Literal["ok", "changed", "failed", "unreachable", "skipped"]

# ansible-runner's display callback replaces the result of a no_log task by {"censored": CENSORED}.
CENSORED_MESSAGE = "output hidden (no_log: true)"
MAX_MESSAGE = 4000


@dataclass(frozen=True)
class PlaybookStart:
    playbook: str


@dataclass(frozen=True)
class PlayStart:
    name: str
    pattern: str
    phase: str = ""


@dataclass(frozen=True)
class TaskStart:
    host: str
    task: str
    role: str = ""


@dataclass(frozen=True)
class HostResult:
    host: str
    task: str
    status: Status
    role: str = ""
    message: str = ""
    ignored: bool = False
    # A failed result that was the connection lost under Mitogen (MITOGEN_LOST_HOST), counted unreachable.
    lost: bool = False


@dataclass(frozen=True)
class HostCounts:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "ok": self.ok,
            "changed": self.changed,
            "failed": self.failed,
            "unreachable": self.unreachable,
            "skipped": self.skipped,
            "rescued": self.rescued,
            "ignored": self.ignored,
        }


@dataclass(frozen=True)
class PlaybookStats:
    """The per-host recap of `playbook_on_stats` (ansible's own counts: ok includes changed)."""

    hosts: Mapping[str, HostCounts]


@dataclass(frozen=True)
class HardwareSummary:
    """A host's hardware as preflight read it: the `preflight_summary` fact its set_fact published
    (roles/preflight/tasks/report.yml): OS, kernel, CPUs, memory, NUMA, GPUs, NVSwitches, driver,
    RDMA NICs, IOMMU, Secure Boot, DGX OS, disk."""

    host: str
    summary: Mapping[str, Any]


@dataclass(frozen=True)
class RebootState:
    """What the reboot role (roles/reboot) published for a host: the reasons of a reboot it did and
    verified (`gpubring_rebooted`), or of one it did not do (`gpubring_reboot_pending`, with
    `gpubring_reboot_pending_because`: "gpubring_reboot_allowed is false", "check mode (--check)", ...)."""

    host: str
    rebooted: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    because: str = ""


@dataclass(frozen=True)
class HostPhaseState:
    """What host.yml's first play found of a host (gpubring.core.host_state, its fact
    `gpubring_host_state`): left as its last complete host phase left it (`unchanged`: the roles do not
    run on it), or why it goes through the roles (`reasons`: "no record", "inputs", "files", ...)."""

    host: str
    unchanged: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class DrainReport:
    """What the node_drain role (roles/node_drain/tasks/drain.yml) published for a host it drained, its
    `node_drain_report` fact: who cordoned the node (`gpubring`, or `operator`: that cordon was kept
    and no uncordon of gpubring's undoes it), the Jobs and gang workloads a GPU-aware drain waited for
    (node_drain_wait_for_workloads) and for how many seconds, those still running at the bound
    (node_drain_workload_timeout_action: drain evicted them), and whether it drained (false in check
    mode: it only said what it would do)."""

    host: str
    cordoned_by: str = ""
    operator_cordon_kept: bool = False
    waited_for: tuple[str, ...] = ()
    waited_seconds: int = 0
    still_running_at_bound: tuple[str, ...] = ()
    drained: bool = False

    def as_dict(self) -> dict[str, Any]:
        """As report.json's `drains` holds it (the host is the key there)."""
        return {
            "cordoned_by": self.cordoned_by,
            "operator_cordon_kept": self.operator_cordon_kept,
            "waited_for": list(self.waited_for),
            "waited_seconds": self.waited_seconds,
            "still_running_at_bound": list(self.still_running_at_bound),
            "drained": self.drained,
        }


@dataclass(frozen=True)
class AcceptanceCheck:
    """One check of a node's acceptance that did not pass: its name and why (None: no reason given)."""

    name: str
    reason: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class AcceptanceVerdict:
    """What the gpu_acceptance role published for a host: its verdict (`gpu_acceptance_result`:
    passed, failed or skipped-only) with the checks that failed and those skipped, and the admission
    its gate applied (`gpu_acceptance_admission`: accepted, failed, pending, no-cluster, off, check).

    Either may come alone (the admission is a later set_fact, and older roles have none): `verdict`
    is None when the result carried no verdict, `admission` None when it carried no admission. The
    checks' `expected` and `measured` figures stay in the role's fact, not here."""

    host: str
    verdict: str | None = None
    failed: tuple[AcceptanceCheck, ...] = ()
    skipped: tuple[AcceptanceCheck, ...] = ()
    admission: str | None = None


@dataclass(frozen=True)
class Cancelled:
    """The run was cancelled (Ctrl-C, SIGTERM or a caller's cancel flag); emitted by the runner."""

    reason: str = "cancelled"


@dataclass(frozen=True)
class CancelWait:
    """After a cancel, once gpubring's own processes are stopped: the hosts that still had a task in
    flight (host -> `role : task`), whose package work gpubring waits for up to `timeout_s` seconds
    (gpubring_cancel_wait_timeout; 0: it does not wait). Emitted by the runner."""

    hosts: Mapping[str, str]
    timeout_s: int


@dataclass(frozen=True)
class PackageWait:
    """What the wait found on a host (the `preflight_package_wait` fact of preflight's
    package_wait.yml): `holders`, the package work going on when it looked first (one line per process:
    pid, lock or "(running)", command line); `busy`, what still was when it looked last; `done`, the
    wait for this host is over (`busy` empty: the work finished)."""

    host: str
    holders: tuple[str, ...] = ()
    busy: tuple[str, ...] = ()
    done: bool = False


@dataclass(frozen=True)
class CancelWaitEnd:
    """The wait after a cancel is over: `stopped`, why it was stopped before its end (a second Ctrl-C,
    SIGTERM or SIGHUP), empty when it was not; `timed_out`, gpubring's own bound on the wait passed;
    `unchecked`, the hosts the wait could not look at (host -> why: unreachable, a failed probe);
    `not_waited`, gpubring_cancel_wait_timeout is 0. Emitted by the runner."""

    duration_s: float = 0.0
    stopped: str = ""
    timed_out: bool = False
    unchecked: Mapping[str, str] = field(default_factory=dict)
    not_waited: bool = False


@dataclass(frozen=True)
class Notice:
    """Something the operator should read once (an accelerator fallback, for example)."""

    message: str


@dataclass(frozen=True)
class Output:
    """A block of ansible's own output, passed on when the run is verbose (-v)."""

    text: str


@dataclass(frozen=True)
class AnsibleError:
    """An error ansible printed outside any task (a syntax error, a missing role, bad options).

    ansible prints such an error line by line; `continued` marks the line that says where (Origin).
    """

    text: str
    continued: bool = False


Event = (
    PlaybookStart
    | PlayStart
    | TaskStart
    | HostResult
    | PlaybookStats
    | HardwareSummary
    | RebootState
    | HostPhaseState
    | DrainReport
    | AcceptanceVerdict
    | Cancelled
    | CancelWait
    | PackageWait
    | CancelWaitEnd
    | Notice
    | Output
    | AnsibleError
)

_RESULT_STATUS: dict[str, Status] = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def failure_message(res: Any) -> str:
    """The message of a failed or unreachable result: `msg`, with stderr when it says more."""
    if not isinstance(res, Mapping):
        return ""
    if "censored" in res:
        return CENSORED_MESSAGE
    msg = _text(res.get("msg")).strip()
    results = res.get("results")
    if isinstance(results, list):
        for item in results:
            if isinstance(item, Mapping) and (item.get("failed") or "censored" in item):
                item_msg = failure_message(item)
                label = _text(item.get("item", "")) if "censored" not in item else ""
                detail = f"item {label}: {item_msg}" if label else item_msg
                msg = f"{msg}: {detail}" if msg else detail
                break
    stderr = _text(res.get("stderr") or res.get("module_stderr")).strip()
    if stderr and stderr not in msg:
        msg = f"{msg}: {stderr}" if msg else stderr
    if not msg:
        stdout = _text(res.get("module_stdout") or res.get("stdout")).strip()
        msg = stdout or "failed without a message"
    if len(msg) > MAX_MESSAGE:
        msg = msg[: MAX_MESSAGE - 1] + "…"
    return msg


# Mitogen's open bug mitogen-hq/mitogen#1314: a host that dies while the controller pushes it a module
# fails that task with this AttributeError, raised in mitogen/service.py, instead of being unreachable
# (docs/operations.md). gpubring counts such a failure as the host unreachable, which it is.
MITOGEN_LOST_HOST = ("'NoneType' object has no attribute 'protocol'", "mitogen/service.py")
MITOGEN_LOST_NOTE = (
    "the connection to the host was lost while Mitogen sent it the task (mitogen-hq/mitogen#1314)"
)


def mitogen_lost_host(res: Any) -> bool:
    """Whether a failed result is Mitogen's lost connection (MITOGEN_LOST_HOST), not the task's failure."""
    if not isinstance(res, Mapping):
        return False
    text = "\n".join(_text(res.get(key)) for key in ("msg", "exception", "module_stderr", "stderr"))
    return all(part in text for part in MITOGEN_LOST_HOST)


def _stats(data: Mapping[str, Any]) -> PlaybookStats:
    keys = {
        "ok": "ok",
        "changed": "changed",
        "failures": "failed",
        "dark": "unreachable",
        "skipped": "skipped",
        "rescued": "rescued",
        "ignored": "ignored",
    }
    counts: dict[str, dict[str, int]] = {}
    for source in ("processed", *keys):
        per_host = data.get(source) or {}
        if not isinstance(per_host, Mapping):
            continue
        for host, value in per_host.items():
            row = counts.setdefault(str(host), {})
            if source in keys:
                row[keys[source]] = int(value)
    return PlaybookStats(hosts={host: HostCounts(**row) for host, row in sorted(counts.items())})


def parse(event: Mapping[str, Any]) -> Event | None:
    """One ansible-runner event dict as a typed event, or None when nothing here needs it."""
    kind = event.get("event")
    data = event.get("event_data") or {}
    if not isinstance(data, Mapping):
        data = {}
    if kind == "playbook_on_start":
        return PlaybookStart(playbook=_text(data.get("playbook")))
    if kind == "playbook_on_play_start":
        pattern = _text(data.get("pattern") or data.get("play_pattern"))
        name = _text(data.get("name") or data.get("play")).strip() or pattern
        return PlayStart(name=name, pattern=pattern)
    if kind == "runner_on_start":
        return TaskStart(
            host=_text(data.get("host")), task=_text(data.get("task")), role=_text(data.get("role"))
        )
    if kind in _RESULT_STATUS:
        status = _RESULT_STATUS[kind]
        res = data.get("res")
        if status == "ok" and isinstance(res, Mapping) and res.get("changed"):
            status = "changed"
        message = failure_message(res) if status in ("failed", "unreachable") else ""
        lost = status == "failed" and mitogen_lost_host(res)
        if lost:
            status, message = "unreachable", f"{MITOGEN_LOST_NOTE}: {message}"
        return HostResult(
            host=_text(data.get("host")),
            task=_text(data.get("task")),
            role=_text(data.get("role")),
            status=status,
            message=message,
            ignored=bool(data.get("ignore_errors")) and status == "failed",
            lost=lost,
        )
    if kind == "playbook_on_stats":
        return _stats(data)
    if kind in ("verbose", "error"):
        line = _text(event.get("stdout")).strip()
        if line.startswith(("[ERROR]", "ERROR!", "The command was not found or was not executable")):
            return AnsibleError(text=line)
        if line.startswith("Origin: "):
            return AnsibleError(text=line, continued=True)
    return None


SUMMARY_FACT = "preflight_summary"
FAILURES_FACT = "preflight_failures"
WARNINGS_FACT = "preflight_warnings"


def hardware_summary(event: Mapping[str, Any]) -> HardwareSummary | None:
    """The preflight hardware summary a result carries (the set_fact of `preflight_summary`), or None,
    with the failures and warnings the same set_fact published beside it (`preflight_failures`,
    `preflight_warnings`) as its `failures` and `warnings` (the role does not render them twice).

    ansible-runner gives the set_fact's result whole, so the summary arrives with the result itself."""
    found = _result_facts(event)
    summary = found[1].get(SUMMARY_FACT) if found else None
    if found is None or not isinstance(summary, Mapping):
        return None
    merged = dict(summary)
    for key, fact in (("failures", FAILURES_FACT), ("warnings", WARNINGS_FACT)):
        lines = found[1].get(fact)
        if key not in merged and isinstance(lines, list):
            merged[key] = lines
    return HardwareSummary(host=found[0], summary=merged)


def _result_facts(event: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """(host, the facts a set_fact published) of a successful result, or None: how the preflight
    summary, the reboot verdict, the drain report and the acceptance verdict reach gpubring."""
    if event.get("event") != "runner_on_ok":
        return None
    data = event.get("event_data") or {}
    res = data.get("res") if isinstance(data, Mapping) else None
    facts = res.get("ansible_facts") if isinstance(res, Mapping) else None
    if not isinstance(facts, Mapping):
        return None
    return _text(data.get("host")), facts


REBOOTED_FACT = "gpubring_rebooted"
REBOOT_PENDING_FACT = "gpubring_reboot_pending"
REBOOT_BECAUSE_FACT = "gpubring_reboot_pending_because"


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(_text(item) for item in value if _text(item).strip())


def reboot_state(event: Mapping[str, Any]) -> RebootState | None:
    """The reboot role's verdict for a host that a result carries (its set_fact of `gpubring_rebooted`
    or `gpubring_reboot_pending`), or None. Like the hardware summary, it arrives with the result."""
    found = _result_facts(event)
    if found is None or not ({REBOOTED_FACT, REBOOT_PENDING_FACT} & set(found[1])):
        return None
    host, facts = found
    return RebootState(
        host=host,
        rebooted=_texts(facts.get(REBOOTED_FACT)),
        pending=_texts(facts.get(REBOOT_PENDING_FACT)),
        because=_text(facts.get(REBOOT_BECAUSE_FACT)).strip(),
    )


HOST_STATE_FACT = "gpubring_host_state"


def host_phase_state(event: Mapping[str, Any]) -> HostPhaseState | None:
    """The host_state module's verdict on a host that a result carries, or None."""
    found = _result_facts(event)
    fact = found[1].get(HOST_STATE_FACT) if found else None
    if found is None or not isinstance(fact, Mapping):
        return None
    unchanged = fact.get("unchanged") is True
    return HostPhaseState(host=found[0], unchanged=unchanged, reasons=_texts(fact.get("reasons")))


DRAIN_REPORT_FACT = "node_drain_report"


def _flag(value: Any) -> bool:
    # A fact templated as text by an older Ansible says "True"/"False".
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "yes"))


def _seconds(value: Any) -> int:
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def drain_from(host: str, report: Mapping[str, Any]) -> DrainReport:
    """A DrainReport from the role's `node_drain_report` (or report.json's `drains` entry): what
    lacks or has the wrong type takes the default."""
    return DrainReport(
        host=host,
        cordoned_by=_text(report.get("cordoned_by")).strip(),
        operator_cordon_kept=_flag(report.get("operator_cordon_kept")),
        waited_for=_texts(report.get("waited_for")),
        waited_seconds=_seconds(report.get("waited_seconds")),
        still_running_at_bound=_texts(report.get("still_running_at_bound")),
        drained=_flag(report.get("drained")),
    )


def drain_report(event: Mapping[str, Any]) -> DrainReport | None:
    """The node_drain role's report for a host that a result carries (its set_fact of
    `node_drain_report`), or None. Like the reboot verdict, it arrives with the result."""
    found = _result_facts(event)
    fact = found[1].get(DRAIN_REPORT_FACT) if found else None
    if found is None or not isinstance(fact, Mapping):
        return None
    return drain_from(found[0], fact)


ACCEPTANCE_FACT = "gpu_acceptance_result"
ADMISSION_FACT = "gpu_acceptance_admission"


def _checks(checks: Any, status: str) -> tuple[AcceptanceCheck, ...]:
    if not isinstance(checks, list | tuple):
        return ()
    return tuple(
        AcceptanceCheck(name=_text(c.get("name")), reason=_text(c.get("reason")).strip() or None)
        for c in checks
        if isinstance(c, Mapping) and c.get("status") == status
    )


def acceptance_verdict(event: Mapping[str, Any]) -> AcceptanceVerdict | None:
    """The gpu_acceptance verdict and/or admission a result carries (its set_fact of
    `gpu_acceptance_result` or `gpu_acceptance_admission`), or None. Like the reboot verdict, it
    arrives with the result; only the verdict and the failed and skipped checks' names and reasons
    are kept."""
    found = _result_facts(event)
    if found is None:
        return None
    host, facts = found
    result = facts.get(ACCEPTANCE_FACT)
    admission = facts.get(ADMISSION_FACT)
    has_verdict = isinstance(result, Mapping) and bool(_text(result.get("verdict")).strip())
    has_admission = isinstance(admission, str) and bool(admission.strip())
    if not has_verdict and not has_admission:
        return None
    verdict = AcceptanceVerdict(host=host)
    if has_verdict and isinstance(result, Mapping):
        checks = result.get("checks")
        verdict = replace(
            verdict,
            verdict=_text(result.get("verdict")).strip(),
            failed=_checks(checks, "failed"),
            skipped=_checks(checks, "skipped"),
        )
    if has_admission and isinstance(admission, str):
        verdict = replace(verdict, admission=admission.strip())
    return verdict


PACKAGE_WAIT_FACT = "preflight_package_wait"


def package_wait(event: Mapping[str, Any]) -> PackageWait | None:
    """What preflight's package_wait.yml found on a host, as its set_fact of `preflight_package_wait`
    published it, or None. Only the wait after a cancel reads it (the runner's second run)."""
    found = _result_facts(event)
    fact = found[1].get(PACKAGE_WAIT_FACT) if found else None
    if found is None or not isinstance(fact, Mapping):
        return None
    return PackageWait(
        host=found[0],
        holders=tuple(line.strip() for line in _texts(fact.get("holders"))),
        busy=tuple(line.strip() for line in _texts(fact.get("busy"))),
        done=fact.get("done") is True,
    )


def parse_all(event: Mapping[str, Any]) -> list[Event]:
    """`parse()`'s event, then the hardware summary, the reboot verdict, the drain report and the
    acceptance verdict the same result carries."""
    parsed = parse(event)
    summary = hardware_summary(event)
    reboot = reboot_state(event)
    drain = drain_report(event)
    acceptance = acceptance_verdict(event)
    host_state = host_phase_state(event)
    return [e for e in (parsed, summary, reboot, drain, acceptance, host_state) if e is not None]


def load_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Event dicts from JSON lines (a recorded stream), blank lines skipped."""
    return [json.loads(line) for line in lines if line.strip()]


@dataclass(frozen=True)
class PhasePlay:
    phase: str
    play: str


class PhaseTracker:
    """Tells which phase a play belongs to, from the plays of each phase playbook in run order.

    Plays start in the order the generated playbook imports them, so the tracker walks that list:
    a play start matches the next expected play of that name; an unknown name keeps the phase.
    """

    def __init__(self, plays: Iterable[PhasePlay]) -> None:
        self._plays = list(plays)
        self._cursor = 0
        self.phase = self._plays[0].phase if self._plays else ""

    def play_started(self, event: PlayStart) -> PlayStart:
        for index in range(self._cursor, len(self._plays)):
            if self._plays[index].play == event.name:
                self._cursor = index + 1
                self.phase = self._plays[index].phase
                break
        return replace(event, phase=self.phase)


@dataclass
class HostState:
    task: str = ""
    role: str = ""
    phase: str = ""
    play: str = ""
    done: bool = False
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0

    def counts(self) -> HostCounts:
        return HostCounts(
            ok=self.ok,
            changed=self.changed,
            failed=self.failed,
            unreachable=self.unreachable,
            skipped=self.skipped,
        )


@dataclass(frozen=True)
class Failure:
    host: str
    task: str
    role: str
    status: Status
    message: str
    phase: str
    play: str

    def as_dict(self) -> dict[str, str]:
        return {
            "host": self.host,
            "task": self.task,
            "role": self.role,
            "status": self.status,
            "message": self.message,
            "phase": self.phase,
            "play": self.play,
        }


def task_label(task: str, role: str) -> str:
    """`role : task` as ansible prints it, or whichever of the two there is."""
    return f"{role} : {task}" if role and task else task or role


# What the wait after a cancel says of a host: its package work was over when the wait first looked
# (idle) or ended during the wait (finished); it was still going when the wait ran out (timed_out) or
# was stopped (stopped); the wait could not look (unchecked); gpubring did not wait (not_waited).
WAIT_OUTCOMES = ("idle", "finished", "timed_out", "stopped", "unchecked", "not_waited")
MAYBE_BUSY = frozenset({"timed_out", "stopped", "unchecked", "not_waited"})


@dataclass
class WaitedHost:
    task: str
    outcome: str = "waiting"
    holders: tuple[str, ...] = ()
    busy: tuple[str, ...] = ()
    message: str = ""
    done: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "outcome": self.outcome,
            "holders": list(self.holders),
            "busy": list(self.busy),
            "message": self.message,
        }


@dataclass
class CancelWaitState:
    """The wait after a cancel: the hosts that had a task in flight and what the wait found on each.

    `outcome` (when the wait is over): not_waited (gpubring_cancel_wait_timeout is 0), stopped (a
    second signal), timed_out (a host was still busy at the end), unchecked (a host could not be
    looked at), else finished; "waiting" while it goes."""

    timeout_s: int
    hosts: dict[str, WaitedHost] = field(default_factory=dict)
    outcome: str = "waiting"
    reason: str = ""
    duration_s: float = 0.0

    def maybe_busy(self) -> list[str]:
        """The hosts whose package work may still be going on."""
        return [name for name, host in self.hosts.items() if host.outcome in MAYBE_BUSY]

    def found(self, event: PackageWait) -> None:
        host = self.hosts.get(event.host)
        if host is None:
            return
        host.holders = event.holders or host.holders
        host.busy, host.done = event.busy, event.done

    def end(self, event: CancelWaitEnd) -> None:
        self.duration_s = round(event.duration_s, 3)
        self.reason = event.stopped
        for name, host in self.hosts.items():
            if event.not_waited:
                host.outcome = "not_waited"
            elif host.done:
                host.outcome = "timed_out" if host.busy else "finished" if host.holders else "idle"
            elif name in event.unchecked:
                host.outcome, host.message = "unchecked", event.unchecked[name]
            elif event.stopped:
                host.outcome = "stopped"
            elif event.timed_out:
                host.outcome = "timed_out"
            else:
                host.outcome, host.message = "unchecked", "the wait ended without a word from the host"
        outcomes = {host.outcome for host in self.hosts.values()}
        for outcome in ("not_waited", "stopped", "timed_out", "unchecked"):
            if outcome in outcomes:
                self.outcome = outcome
                break
        else:
            self.outcome = "finished"

    def as_dict(self) -> dict[str, Any]:
        return {
            "timeout_s": self.timeout_s,
            "outcome": self.outcome,
            "reason": self.reason,
            "duration_s": self.duration_s,
            "hosts": {name: host.as_dict() for name, host in sorted(self.hosts.items())},
        }


@dataclass
class RunState:
    """Everything the view and the report need, folded from the events of one run."""

    phase: str = ""
    play: str = ""
    phases_started: list[str] = field(default_factory=list)
    hosts: dict[str, HostState] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    # Failures a task let pass (ignore_errors): what check mode could not check, for example.
    ignored: list[Failure] = field(default_factory=list)
    stats: PlaybookStats | None = None
    # host -> its failed results that were Mitogen's lost connection: ansible's recap counts them failed.
    lost: dict[str, int] = field(default_factory=dict)
    cancelled: bool = False
    errors: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    # host -> the preflight hardware summary, in the order hosts reported it.
    hardware: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    # host -> the reasons of the reboot the reboot role did and verified.
    rebooted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # host -> (the reasons of a reboot not done, why not).
    reboot_pending: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    # host -> what host.yml's first play found: left as it was, or why it went through the roles.
    host_state: dict[str, HostPhaseState] = field(default_factory=dict)
    # host -> what node_drain said of its drain (the last drain of the run: upgrade batches may drain twice).
    drains: dict[str, DrainReport] = field(default_factory=dict)
    # host -> its gpu_acceptance verdict and admission, merged over the results that carried them.
    acceptance: dict[str, AcceptanceVerdict] = field(default_factory=dict)
    # The wait after a cancel for the package work of the hosts that had a task in flight.
    cancel_wait: CancelWaitState | None = None

    def host(self, name: str) -> HostState:
        state = self.hosts.get(name)
        if state is None:
            state = self.hosts[name] = HostState()
        return state

    def apply(self, event: Event) -> None:
        if isinstance(event, PlayStart):
            self.play = event.name
            if event.phase:
                self.phase = event.phase
                if not self.phases_started or self.phases_started[-1] != event.phase:
                    self.phases_started.append(event.phase)
        elif isinstance(event, TaskStart):
            state = self.host(event.host)
            state.task, state.role, state.phase, state.play = event.task, event.role, self.phase, self.play
            state.done = False
        elif isinstance(event, HostResult):
            self._result(event)
        elif isinstance(event, PlaybookStats):
            self.stats = event
        elif isinstance(event, Cancelled):
            self.cancelled = True
        elif isinstance(event, CancelWait):
            self.cancel_wait = CancelWaitState(
                timeout_s=event.timeout_s,
                hosts={host: WaitedHost(task=task) for host, task in event.hosts.items()},
            )
        elif isinstance(event, PackageWait):
            if self.cancel_wait is not None:
                self.cancel_wait.found(event)
        elif isinstance(event, CancelWaitEnd):
            if self.cancel_wait is not None:
                self.cancel_wait.end(event)
        elif isinstance(event, AnsibleError):
            if event.continued and self.errors:
                self.errors[-1] += f"\n{event.text}"
            elif not event.continued:
                self.errors.append(event.text)
        elif isinstance(event, Notice):
            self.notices.append(event.message)
        elif isinstance(event, HardwareSummary):
            self.hardware[event.host] = event.summary
        elif isinstance(event, RebootState):
            self._reboot(event)
        elif isinstance(event, HostPhaseState):
            self.host_state[event.host] = event
        elif isinstance(event, DrainReport):
            # The last word wins: a node drained again later in the run says what that drain did.
            self.drains[event.host] = event
        elif isinstance(event, AcceptanceVerdict):
            self._acceptance(event)

    def _acceptance(self, event: AcceptanceVerdict) -> None:
        # The last word wins, per part: the admission set_fact that follows a verdict completes it.
        # A new verdict (the role ran again) starts over: its admission is the one its gate says next.
        known = self.acceptance.get(event.host)
        if known is None or event.verdict is not None:
            self.acceptance[event.host] = event
        elif event.admission is not None:
            self.acceptance[event.host] = replace(known, admission=event.admission)

    def _reboot(self, event: RebootState) -> None:
        # The last word wins: a host rebooted after an earlier batch said pending is not pending.
        if event.rebooted:
            self.rebooted[event.host] = event.rebooted
        if event.pending:
            self.reboot_pending[event.host] = (event.pending, event.because)
        else:
            self.reboot_pending.pop(event.host, None)

    def _result(self, event: HostResult) -> None:
        state = self.host(event.host)
        state.task, state.role = event.task or state.task, event.role or state.role
        state.phase, state.play = state.phase or self.phase, state.play or self.play
        state.done = True
        if event.status in ("ok", "changed"):
            state.ok += 1
            state.changed += event.status == "changed"
        elif event.status == "skipped":
            state.skipped += 1
        elif event.status == "unreachable":
            state.unreachable += 1
            if event.lost:
                self.lost[event.host] = self.lost.get(event.host, 0) + 1
        elif not event.ignored:
            state.failed += 1
        if event.status in ("failed", "unreachable"):
            (self.ignored if event.ignored else self.failures).append(
                Failure(
                    host=event.host,
                    task=event.task,
                    role=event.role,
                    status=event.status,
                    message=event.message,
                    phase=self.phase,
                    play=self.play,
                )
            )

    def host_counts(self) -> dict[str, HostCounts]:
        """Per-host counts: ansible's recap when the run reached it, else what the events showed. A
        failure that was Mitogen's lost connection counts as unreachable in both."""
        if self.stats is not None:
            return {host: self._lost_as_unreachable(host, row) for host, row in self.stats.hosts.items()}
        return {name: state.counts() for name, state in sorted(self.hosts.items())}

    def _lost_as_unreachable(self, host: str, row: HostCounts) -> HostCounts:
        moved = min(self.lost.get(host, 0), row.failed)
        if not moved:
            return row
        return replace(row, failed=row.failed - moved, unreachable=row.unreachable + moved)

    def final_failures(self) -> list[Failure]:
        """The failures, without those of hosts the recap shows as recovered (a block's rescue)."""
        if self.stats is None:
            return list(self.failures)
        recap = self.host_counts()
        return [
            failure
            for failure in self.failures
            if failure.host not in recap or recap[failure.host].failed or recap[failure.host].unreachable
        ]

    def in_flight(self) -> dict[str, str]:
        """The hosts with a task started and no result for it yet (host -> `role : task`), by name:
        where a cancel may have left work going on (an apt install, a DKMS build)."""
        return {
            name: task_label(state.task, state.role)
            for name, state in sorted(self.hosts.items())
            if name and state.task and not state.done
        }

    def stopped_at(self) -> dict[str, Any]:
        """Where the run was: the phase and play, and each host's last task."""
        return {
            "phase": self.phase,
            "play": self.play,
            "hosts": {
                name: {
                    "phase": state.phase,
                    "play": state.play,
                    "task": state.task,
                    "role": state.role,
                    "finished": state.done,
                }
                for name, state in sorted(self.hosts.items())
                if state.task
            },
        }
