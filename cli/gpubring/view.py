"""What the operator sees: a live view while a run goes, then the summary.

On a terminal, a rich Live table shows the current phase and play, each host's current task and its
counts (ok / changed / failed / unreachable / skipped), with phase, play and failure lines printed
above it. Elsewhere (CI logs, pipes) the same lines are printed plainly, one per phase, play start and
failed or unreachable result. A cancel adds the hosts that still had a task in flight, what their
package manager was busy with, and how the wait for it ended. When preflight has read the hosts (at
the next play, or at the recap), the hardware summary is printed once, one line per host. The view
folds the same events as the report (events.RunState); `summary()` renders a report.RunReport (read
back from report.json by `gpubring runs RUN`), so a past run shows exactly as `up` showed it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpubring.events import (
    MAYBE_BUSY,
    AnsibleError,
    Cancelled,
    CancelWait,
    CancelWaitEnd,
    Event,
    HardwareSummary,
    HostResult,
    Notice,
    Output,
    PackageWait,
    PlaybookStats,
    PlayStart,
    RunState,
    TaskStart,
    task_label,
)

if TYPE_CHECKING:
    from gpubring.events import AcceptanceCheck, DrainReport, HostCounts
    from gpubring.report import RunReport

COUNT_COLUMNS = ("ok", "changed", "failed", "unreachable", "skipped")
HEARTBEAT_S = 30.0
"""Without a terminal, a line at least this often while a task runs, so a CI log never looks stuck."""
_STYLE = {"ok": "green", "changed": "yellow", "failed": "red", "unreachable": "magenta", "skipped": "cyan"}


def console() -> Console:
    """The operator's console (stdout) as every command opens it."""
    return Console(highlight=False)


def error(message: str) -> None:
    """One `error: ...` line on stderr, as it is (never wrapped, no markup)."""
    _stderr_line(f"error: {message}")


def warning(message: str) -> None:
    """One `warning: ...` line on stderr, as it is."""
    _stderr_line(f"warning: {message}")


def _stderr_line(text: str) -> None:
    Console(stderr=True, highlight=False, soft_wrap=True).print(text, markup=False, emoji=False)


def skipped_lines(skipped: Sequence[tuple[str, str]], verb: str) -> list[str]:
    """One line per reason: `skipping host, cluster: not asked for (--only preflight)`."""
    by_reason: dict[str, list[str]] = {}
    for phase, reason in skipped:
        by_reason.setdefault(reason, []).append(phase)
    return [f"{verb} {', '.join(phases)}: {reason}" for reason, phases in by_reason.items()]


def _yes_no(value: Any, yes: str = "on", no: str = "off") -> str:
    if value is None or value == "":
        return "unknown"
    if isinstance(value, str):
        value = value.strip().lower() in ("true", "yes", "1", "on")
    return yes if value else no


def hardware_line(host: str, summary: Mapping[str, Any]) -> str:
    """One host's preflight summary on one line: what an operator compares across 200 GPU nodes."""
    try:
        memory_text = f"{int(str(summary.get('memory_mib'))) / 1024:.1f} GiB"
    except (TypeError, ValueError):
        memory_text = "? GiB"
    models = summary.get("gpu_models") or []
    gpus = f"GPUs {summary.get('gpu_count', 0)}"
    if models:
        gpus += f" ({', '.join(str(m) for m in models)})"
    nics = [str(n) for n in summary.get("rdma_nics") or []]
    links = sorted({n.split()[2] for n in nics if len(n.split()) > 2})
    nic_text = f"RDMA NICs {len(nics)}" + (f" ({', '.join(links)})" if links else "")
    problems = len(summary.get("failures") or []) + len(summary.get("warnings") or [])
    parts = [
        f"{summary.get('os', '?')}, kernel {summary.get('kernel', '?')}",
        f"{summary.get('cpus', '?')} CPUs, {memory_text}, NUMA {summary.get('numa_nodes', '?')}",
        gpus,
        f"NVSwitches {summary.get('nvswitch_count', 0)}",
        f"driver {summary.get('driver') or 'none loaded'}",
        nic_text,
        f"IOMMU {_yes_no(summary.get('iommu'))}",
        f"Secure Boot {_yes_no(summary.get('secure_boot'))}",
    ]
    if _yes_no(summary.get("dgx_os")) == "on":
        parts.append("DGX OS")
    if problems:
        parts.append(f"{problems} problem(s)")
    return f"{host}: " + " · ".join(parts)


def hardware_lines(hardware: Mapping[str, Mapping[str, Any]]) -> list[Text]:
    """The hardware block: a heading and one line per host (empty without hosts)."""
    if not hardware:
        return []
    lines = [Text(f"hardware (preflight, {len(hardware)} host(s)):", style="bold")]
    lines += [Text(f"  {hardware_line(host, summary)}") for host, summary in hardware.items()]
    return lines


def _hosts_with_reasons(items: Sequence[tuple[str, Sequence[str]]]) -> str:
    return ", ".join(f"{host} ({'; '.join(str(r) for r in reasons)})" for host, reasons in items)


def drain_line(host: str, drain: DrainReport) -> Text:
    """One drained host: `drained gpu01: operator's cordon kept; waited 3600 s for Job a/x, PyTorchJob
    b/y; evicted still running at the bound: Job a/x`, or `drained gpu02: cordoned by gpubring; no
    workload wait`; in check mode `would drain gpu03 (check mode): ...; would wait for ...`."""
    head = f"drained {host}" if drain.drained else f"would drain {host} (check mode)"
    if drain.operator_cordon_kept or drain.cordoned_by == "operator":
        parts = ["operator's cordon kept"]
    else:
        parts = [f"cordoned by {drain.cordoned_by or 'gpubring'}"]
    waited = ", ".join(drain.waited_for)
    if not drain.waited_for:
        parts.append("no workload wait")
    elif drain.drained:
        parts.append(f"waited {drain.waited_seconds} s for {waited}")
    else:
        parts.append(f"would wait for {waited}")
    if drain.still_running_at_bound:
        parts.append(f"evicted still running at the bound: {', '.join(drain.still_running_at_bound)}")
    return Text(f"{head}: {'; '.join(parts)}", style="yellow" if drain.still_running_at_bound else "")


def drain_lines(report: RunReport) -> list[Text]:
    """One line per host the node_drain role drained (report.drains), by host."""
    return [drain_line(host, drain) for host, drain in report.drains.items()]


def host_state_lines(report: RunReport) -> list[Text]:
    """What the host phase's first play found: `left as they were (host phase skipped): N host(s)` and
    one line per reason the others went through the roles, `host phase ran (files): gpu01, gpu02`."""
    unchanged = [host for host, entry in report.host_state.items() if entry.unchanged]
    lines: list[Text] = []
    if unchanged:
        lines.append(
            Text(
                f"left as their last complete host phase left them (its roles skipped; --full runs them): "
                f"{len(unchanged)} host(s): {', '.join(unchanged)}",
                style="dim",
            )
        )
    by_reasons: dict[str, list[str]] = {}
    for host, entry in report.host_state.items():
        if not entry.unchanged:
            by_reasons.setdefault(", ".join(entry.reasons) or "unknown", []).append(host)
    for reasons, hosts in by_reasons.items():
        lines.append(Text(f"host phase ran ({reasons}): {', '.join(hosts)}", style="dim"))
    return lines


def reboot_lines(report: RunReport) -> list[Text]:
    """What the reboot play did: `rebooted: host (reasons), ...`, and one line per reason it did not
    reboot: `reboot needed (gpubring_reboot_allowed is false): host1 (reasons), host2 (reasons)`."""
    lines: list[Text] = []
    if report.rebooted:
        lines.append(Text(f"rebooted: {_hosts_with_reasons(list(report.rebooted.items()))}", style="green"))
    by_because: dict[str, list[tuple[str, Sequence[str]]]] = {}
    for host, pending in report.reboot_pending.items():
        by_because.setdefault(pending.because, []).append((host, pending.reasons))
    for because, items in by_because.items():
        head = f"reboot needed ({because})" if because else "reboot needed"
        lines.append(Text(f"{head}: {_hosts_with_reasons(items)}", style="bold yellow"))
    return lines


ADMISSION_LABELS = {
    "accepted": "taint removed",
    "failed": "tainted failed",
    "pending": "kept pending",
    "no-cluster": "no cluster",
    "off": "gate off",
    "check": "check mode",
}
"""What the gpu_acceptance gate did (`gpu_acceptance_admission`), as the summary says it."""
_ACCEPTANCE_HEADS = {
    "passed": ("acceptance passed", "green"),
    "failed": ("acceptance failed", "bold red"),
    "skipped-only": ("acceptance measured nothing", "yellow"),
}


def _acceptance_checks(checks: Sequence[AcceptanceCheck]) -> str:
    return "; ".join(f"{c.name}: {c.reason}" if c.reason else c.name for c in checks)


def acceptance_lines(report: RunReport) -> list[Text]:
    """The gpu_acceptance verdicts: `acceptance passed: gpu-1, gpu-2`, `acceptance failed: gpu-3
    (nvlink: 2 links down; gpu_xid: Xid 79) [tainted failed]`, `acceptance measured nothing: gpu-4
    (dcgm_diag: ...; ...) [kept pending]`, the gate's admission in brackets when the role said it.

    A line's parenthesis and brackets hold for every host it names: hosts of one verdict that failed
    (or skipped) the same checks for the same reasons and were gated alike share a line, others get
    their own, so 100 nodes read as a few lines and each failed node's reasons stay on one line.
    Passed hosts list no checks."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for host, entry in report.acceptance.items():
        verdict = str(entry.verdict or "")
        if verdict == "failed":
            detail = _acceptance_checks(entry.failed)
        elif verdict == "passed":
            detail = ""
        else:
            detail = _acceptance_checks(entry.skipped)
        admission = str(entry.admission or "")
        groups.setdefault((verdict, detail, admission), []).append(host)
    order = list(_ACCEPTANCE_HEADS)
    lines: list[Text] = []
    for verdict, detail, admission in sorted(
        groups, key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[0], groups[k][0])
    ):
        head, style = _ACCEPTANCE_HEADS.get(
            verdict, (f"acceptance {verdict}" if verdict else "acceptance without a verdict", "")
        )
        text = f"{head}: {', '.join(groups[verdict, detail, admission])}"
        if detail:
            text += f" ({detail})"
        if admission:
            text += f" [{ADMISSION_LABELS.get(admission, admission)}]"
        lines.append(Text(text, style=style))
    return lines


def cancel_wait_head(data: Mapping[str, Any]) -> Text | None:
    """One line for the wait after a cancel (report.json's `cancel_wait`), naming the hosts that may
    still be busy: `stopped waiting (SIGINT received) after 4 s: gpu01, gpu02 may still be busy`,
    `done waiting (12 s): no package work left on gpu01`, ...; None while the wait goes."""
    hosts = data.get("hosts") or {}
    outcome = str(data.get("outcome") or "")
    busy = [str(h) for h, e in hosts.items() if isinstance(e, Mapping) and e.get("outcome") in MAYBE_BUSY]
    named = ", ".join(busy)
    took = f"{round(float(data.get('duration_s') or 0))} s"
    if outcome == "not_waited":
        return Text(
            f"not waiting (gpubring_cancel_wait_timeout is 0): {named} may still be busy", style="bold yellow"
        )
    if outcome == "stopped":
        why = str(data.get("reason") or "cancelled again")
        return Text(f"stopped waiting ({why}) after {took}: {named} may still be busy", style="bold yellow")
    if outcome == "timed_out":
        return Text(
            f"gave up waiting after {data.get('timeout_s')} s (gpubring_cancel_wait_timeout): "
            f"{named} may still be busy",
            style="bold yellow",
        )
    if outcome == "unchecked":
        return Text(f"done waiting ({took}); could not check {named}: may still be busy", style="yellow")
    if outcome == "finished":
        return Text(f"done waiting ({took}): no package work left on {', '.join(hosts)}", style="green")
    return None


def cancel_wait_lines(data: Mapping[str, Any] | None) -> list[Text]:
    """The wait after a cancel as the summary shows it: the head line, then one line per host that
    may still be busy, with what was busy or why it could not be checked."""
    head = cancel_wait_head(data) if data else None
    if data is None or head is None:
        return []
    lines = [Text("after the cancel: ", style="bold").append_text(head)]
    for host, entry in (data.get("hosts") or {}).items():
        if not isinstance(entry, Mapping) or entry.get("outcome") not in MAYBE_BUSY:
            continue
        what = "; ".join(str(b) for b in entry.get("busy") or entry.get("holders") or [])
        detail = str(entry.get("message") or "") or what or "its task was in flight"
        lines.append(Text(f"  {host} ({entry.get('task')}): {detail}"))
    return lines


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


class RunView:
    """Receives events (use `handle` as the runner's on_event) and draws them."""

    def __init__(
        self,
        console: Console | None = None,
        live: bool | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console or Console(highlight=False)
        self.live_enabled = self.console.is_terminal if live is None else live
        self.state = RunState()
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self._live: Live | None = None
        self._phase = ""
        self._task_started: dict[str, float] = {}
        self._last_line = clock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._hardware: dict[str, Mapping[str, Any]] = {}

    def print(self, renderable: RenderableType) -> None:
        self.console.print(renderable)
        self._last_line = self.clock()

    # -- lifecycle ---------------------------------------------------------------------------------

    def intro(
        self,
        title: str,
        phases_run: Sequence[str],
        phases_skipped: Sequence[tuple[str, str]],
        *,
        check: bool = False,
        partial: Sequence[str] = (),
    ) -> None:
        """The banner: the title, then the scope when the run is a dry run or narrowed (`check mode:
        nothing is changed`, `partial: --only preflight, --limit gpu01, --tags x`), the phases."""
        self.print(Text(title, style="bold"))
        if check:
            self.print(Text("check mode (--check): nothing is changed; changed counts are what would change"))
        if partial:
            self.print(Text(f"partial: {', '.join(partial)}"))
        if phases_run:
            self.print(Text(f"phases: {', '.join(phases_run)}"))
        for line in skipped_lines(phases_skipped, "skipping"):
            self.print(Text(line, style="dim"))

    def __enter__(self) -> RunView:
        if self.live_enabled:
            self._live = Live(
                get_renderable=self.render,
                console=self.console,
                refresh_per_second=4,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        elif self.heartbeat_s > 0:
            self._stop.clear()
            self._beat = threading.Thread(target=self._heartbeat_loop, name="gpubring-heartbeat", daemon=True)
            self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._flush_hardware()
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._beat is not None:
            self._stop.set()
            self._beat.join(timeout=5)
            self._beat = None

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(min(self.heartbeat_s, 5.0)):
            line = self.heartbeat()
            if line is not None:
                self.print(line)

    def heartbeat(self) -> Text | None:
        """The progress line that is due (nothing printed for `heartbeat_s`), or None: each host of the
        current play that still runs a task, with the task and how long it has run."""
        now = self.clock()
        if now - self._last_line < self.heartbeat_s:
            return None
        running = [
            f"{name}: {task_label(host.task, host.role)} ({_elapsed(now - self._task_started[name])})"
            for name, host in sorted(self.state.hosts.items())
            if not host.done and host.play == self.state.play and name in self._task_started
        ]
        if not running:
            return None
        return Text(f"… still running: {'; '.join(running)}", style="dim")

    # -- events ------------------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        self.state.apply(event)
        if isinstance(event, HardwareSummary):
            self._hardware[event.host] = event.summary
        elif isinstance(event, PlayStart | PlaybookStats):
            # preflight's play is over: its hosts' hardware, once.
            self._flush_hardware()
        if isinstance(event, TaskStart):
            self._task_started[event.host] = self.clock()
        line = self._line(event)
        if line is not None:
            self.print(line)

    def _flush_hardware(self) -> None:
        pending, self._hardware = self._hardware, {}
        for line in hardware_lines(pending):
            self.print(line)

    def _line(self, event: Event) -> Text | None:
        if isinstance(event, PlayStart):
            text = Text()
            if event.phase and event.phase != self._phase:
                self._phase = event.phase
                text.append(f"== phase {event.phase}\n", style="bold blue")
            text.append(f"-- play: {event.name}", style="bold")
            if event.pattern and event.pattern != event.name:
                text.append(f" [{event.pattern}]", style="dim")
            return text
        if isinstance(event, HostResult) and event.status in ("failed", "unreachable"):
            if event.ignored:
                return Text(
                    f"failed (ignored) {event.host}: {task_label(event.task, event.role)}", style="dim"
                )
            label = "FAILED" if event.status == "failed" else "UNREACHABLE"
            text = Text(f"{label} ", style=f"bold {_STYLE[event.status]}")
            text.append(f"{event.host}: {task_label(event.task, event.role)}: ", style="bold")
            text.append(event.message)
            return text
        if isinstance(event, Notice):
            return Text(f"note: {event.message}", style="yellow")
        if isinstance(event, AnsibleError):
            return Text(event.text, style="red")
        if isinstance(event, Cancelled):
            return Text(f"cancelling ({event.reason}): stopping ansible…", style="bold yellow")
        if isinstance(event, Output):
            return Text(event.text.replace("\r\n", "\n").strip("\n"))
        return self._cancel_wait_line(event)

    def _cancel_wait_line(self, event: Event) -> Text | None:
        if isinstance(event, CancelWait):
            hosts = "; ".join(f"{host} ({task})" for host, task in event.hosts.items())
            text = Text(f"a task was still running on {len(event.hosts)} host(s): {hosts}")
            text.stylize("bold yellow")
            if event.timeout_s > 0:
                text.append(
                    f"\nwaiting up to {event.timeout_s} s (gpubring_cancel_wait_timeout) for their package"
                    " manager and DKMS builds to finish; Ctrl-C again stops waiting…",
                    style="yellow",
                )
            return text
        if isinstance(event, PackageWait) and not event.done and event.holders:
            return Text(f"{event.host} is busy: {'; '.join(event.holders)}", style="yellow")
        if isinstance(event, CancelWaitEnd) and self.state.cancel_wait is not None:
            return cancel_wait_head(self.state.cancel_wait.as_dict())
        return None

    # -- live table --------------------------------------------------------------------------------

    def render(self) -> RenderableType:
        state = self.state
        header = Text()
        header.append(f"phase {state.phase or '-'}", style="bold blue")
        header.append(f"  play {state.play or '-'}", style="bold")
        table = Table(box=None, pad_edge=False, expand=False)
        table.add_column("host", no_wrap=True)
        table.add_column("task", overflow="ellipsis", no_wrap=True, max_width=60)
        table.add_column("for", justify="right", no_wrap=True)
        for name in COUNT_COLUMNS:
            table.add_column(name, justify="right", style=_STYLE[name])
        room = max(self.console.height - 6, 3)
        hosts = sorted(state.hosts.items(), key=lambda kv: (-(kv[1].failed + kv[1].unreachable), kv[0]))
        now = self.clock()
        for name, host in hosts[:room]:
            # A host outside the current play waits for its next play; its last task is over.
            waiting = host.play != state.play
            started = self._task_started.get(name)
            table.add_row(
                name,
                Text("waiting", style="dim") if waiting else task_label(host.task, host.role),
                "" if waiting or host.done or started is None else _elapsed(now - started),
                *(str(getattr(host, col)) for col in COUNT_COLUMNS),
            )
        parts: list[RenderableType] = [header, table]
        if len(hosts) > room:
            parts.append(Text(f"… and {len(hosts) - room} more hosts", style="dim"))
        return Group(*parts)


# --- the summary (from a report dict) -------------------------------------------------------------


def summary_table(stats: Mapping[str, HostCounts]) -> Table:
    table = Table(title="per host (ansible's recap: ok includes changed)", title_justify="left")
    table.add_column("host", no_wrap=True)
    for name in COUNT_COLUMNS:
        table.add_column(name, justify="right")
    for host, row in stats.items():
        cells = []
        for name in COUNT_COLUMNS:
            value = int(getattr(row, name))
            cells.append(Text(str(value), style=_STYLE[name] if value and name != "ok" else ""))
        table.add_row(host, *cells)
    return table


def summary(console: Console, report: RunReport) -> None:
    """Print the summary of a run report: per-host table, failures, where it stopped and what the wait
    after the cancel found, the drains, the reboots done and pending, the GPU nodes' acceptance verdicts, the
    verdict."""
    if report.stats:
        console.print(summary_table(report.stats))
    else:
        console.print(Text("no host ran a task", style="dim"))
    if report.failures:
        console.print(Text(f"{len(report.failures)} failure(s):", style="bold red"))
        for failure in report.failures:
            where = " / ".join(p for p in (failure.phase, failure.play) if p)
            head = Text(f"  {failure.status.upper()} ", style="bold red")
            head.append(f"{failure.host}: {task_label(failure.task, failure.role)}")
            if where:
                head.append(f"  ({where})", style="dim")
            console.print(head)
            console.print(Text(f"    {failure.message}"))
    if report.ignored:
        # In check mode these are what could not be checked (a repository out of reach, for example).
        console.print(
            Text(f"{len(report.ignored)} failure(s) let pass by their task (ignore_errors):", style="yellow")
        )
        for item in report.ignored:
            label = task_label(item.task, item.role)
            message = item.message.splitlines()[0][:160] if item.message else ""
            console.print(Text(f"  {item.host}: {label}: {message}", style="dim"))
    for error in report.errors:
        console.print(Text(error, style="red"))
    stopped = report.stopped_at
    if stopped:
        console.print(
            Text(f"stopped in phase {stopped.phase or '-'}, play {stopped.play or '-'}:", style="bold yellow")
        )
        for host, last in stopped.hosts.items():
            state = "after" if last.finished else "during"
            console.print(Text(f"  {host}: {state} {task_label(last.task, last.role)}"))
    for wait_line in cancel_wait_lines(report.cancel_wait):
        console.print(wait_line, soft_wrap=True)
    for drain_text in drain_lines(report):
        # One line each however long, so that `grep 'drained gpu01'` finds all it says.
        console.print(drain_text, soft_wrap=True)
    for state_line in host_state_lines(report):
        console.print(state_line, soft_wrap=True)
    for reboot_line in reboot_lines(report):
        console.print(reboot_line)
    for acceptance_line in acceptance_lines(report):
        # One line each however long, so that `grep 'acceptance failed'` finds a node and its reasons.
        console.print(acceptance_line, soft_wrap=True)
    for line in skipped_lines(report.phases.skipped, "skipped"):
        console.print(Text(line, style="dim"))
    totals = report.totals
    verdict = Text()
    changed = f"would change {totals.changed} (check mode)" if report.check else f"changed {totals.changed}"
    verdict.append(
        f"{report.status} (exit {report.exit_code})", style="bold " + _verdict_style(report.status)
    )
    verdict.append(
        f" · {len(report.stats)} host(s) · {changed} · failed {totals.failed}"
        f" · unreachable {totals.unreachable} · {report.duration_s} s"
    )
    if report.partial:
        verdict.append(f" · partial: {', '.join(report.partial)}", style="dim")
    console.print(verdict)
    if report.run_folder:
        console.print(Text(f"run folder: {report.run_folder}", style="dim"))


def _verdict_style(status: str) -> str:
    return {"ok": "green", "failed": "red", "unreachable": "magenta", "cancelled": "yellow"}.get(status, "")


def runs_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """The `gpubring runs` list: one row per run, newest first."""
    table = Table(box=None, pad_edge=False)
    wrapped = ("scope", "changed per host", "acceptance")
    for column in ("run", "started", "command", "status", "duration", *wrapped):
        table.add_column(column, no_wrap=column not in wrapped)
    for row in rows:
        status = str(row.get("status", ""))
        verdicts = str(row.get("acceptance", ""))
        table.add_row(
            str(row.get("run", "")),
            str(row.get("started", "")),
            str(row.get("command", "")),
            Text(status, style=_verdict_style(status)),
            str(row.get("duration", "")),
            Text(str(row.get("scope", "")), style="" if row.get("scope") == "full" else "yellow"),
            str(row.get("changed", "")),
            Text(verdicts, style=_acceptance_style(verdicts)),
        )
    return table


def _acceptance_style(cell: str) -> str:
    if " failed" in cell:
        return "red"
    if " passed" in cell and "," not in cell:
        return "green"
    return "" if cell in ("", "-") else "yellow"
