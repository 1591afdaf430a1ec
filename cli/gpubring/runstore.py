"""Run folders: one per run under <inventory root>/.gpubring/runs/<UTC timestamp>-<command>/.

Each folder is the ansible-runner private_data_dir of one run (mode 0700) and ends with the run's
report.json; owner.json records the gpubring process that runs it (pid and start time), so a later
start can tell a run that is over (its gpubring gone) from one still going. This module creates them,
prunes the oldest beyond a bound, lists them and finds one by name, unique prefix or `last`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RUNS_SUBDIR = Path(".gpubring") / "runs"
REPORT_NAME = "report.json"
OWNER_NAME = "owner.json"
DEFAULT_KEEP = 50
TIMESTAMP_FORMAT = "%Y%m%dT%H%M%SZ"
_NAME = re.compile(r"^(?P<stamp>\d{8}T\d{6}Z)-(?P<command>[a-z][a-z0-9_-]*?)(?:-(?P<seq>\d+))?$")


class RunNotFoundError(LookupError):
    """No run, or more than one, matches what was asked for."""


def runs_dir(inventory_root: Path) -> Path:
    return inventory_root.resolve() / RUNS_SUBDIR


def _private_mkdir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=False, exist_ok=True)
    path.chmod(0o700)


def new_run_folder(inventory_root: Path, command: str, now: datetime | None = None) -> Path:
    """Create the folder of a new run, mode 0700 (and its parents .gpubring/ and runs/ too)."""
    base = runs_dir(inventory_root)
    _private_mkdir(base.parent)
    _private_mkdir(base)
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime(TIMESTAMP_FORMAT)
    name = f"{stamp}-{command}"
    for seq in range(1, 1000):
        folder = base / (name if seq == 1 else f"{name}-{seq}")
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue
        folder.chmod(0o700)
        return folder
    raise RuntimeError(f"could not create a run folder under {base}")


def _is_run_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and _NAME.match(path.name) is not None


def _sort_key(path: Path) -> tuple[str, int, str]:
    match = _NAME.match(path.name)
    assert match is not None
    return (match["stamp"], int(match["seq"] or 1), path.name)


def run_folders(base: Path) -> list[Path]:
    """Run folders under `base`, oldest first."""
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if _is_run_folder(p)), key=_sort_key)


def prune(base: Path, keep: int = DEFAULT_KEEP, protect: Path | None = None) -> list[Path]:
    """Remove the oldest run folders so that at most `keep` remain; never `protect`."""
    folders = [f for f in run_folders(base) if protect is None or f != protect]
    budget = keep - (1 if protect is not None else 0)
    removed = folders[: max(len(folders) - max(budget, 0), 0)]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600), replacing it atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Owner:
    """The gpubring process of a run: its pid and its start time (clock ticks after boot, field 22
    of /proc/<pid>/stat), so that a reused pid is not taken for it."""

    pid: int
    start: int


def write_owner(folder: Path, owner: Owner) -> None:
    write_private(folder / OWNER_NAME, json.dumps({"pid": owner.pid, "start": owner.start}))


def read_owner(folder: Path) -> Owner | None:
    """The recorded owner of a run, or None (none recorded, or not readable)."""
    try:
        data = json.loads((folder / OWNER_NAME).read_text(encoding="utf-8"))
        return Owner(pid=int(data["pid"]), start=int(data["start"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


@dataclass(frozen=True)
class RunRecord:
    name: str
    folder: Path
    report: dict[str, Any] | None

    @property
    def command(self) -> str:
        match = _NAME.match(self.name)
        return str(self.report.get("command", "")) if self.report else (match["command"] if match else "")

    @property
    def status(self) -> str:
        """The report's status; `running` (or interrupted) when the run wrote no report."""
        return str(self.report.get("status", "unknown")) if self.report else "running"

    @property
    def started(self) -> str:
        if self.report and self.report.get("started"):
            return str(self.report["started"])
        match = _NAME.match(self.name)
        if not match:
            return ""
        return datetime.strptime(match["stamp"], TIMESTAMP_FORMAT).replace(tzinfo=UTC).isoformat()


def read_report(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / REPORT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def list_runs(base: Path) -> list[RunRecord]:
    """Every run under `base`, newest first."""
    return [RunRecord(f.name, f, read_report(f)) for f in reversed(run_folders(base))]


def find_run(base: Path, key: str) -> RunRecord:
    """The run named `key`, the only one whose name starts with it, or the newest for `last`."""
    runs = list_runs(base)
    if not runs:
        raise RunNotFoundError(f"no runs under {base}")
    if key == "last":
        return runs[0]
    exact = [r for r in runs if r.name == key]
    if exact:
        return exact[0]
    matches = [r for r in runs if r.name.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFoundError(f"no run named {key!r} under {base} (try `last` or a prefix of a listed name)")
    names = ", ".join(r.name for r in matches[:5])
    more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
    raise RunNotFoundError(f"{key!r} matches {len(matches)} runs ({names}{more}); give more of the name")


def partial_by(
    *, limit: str | None = None, tags: str | None = None, skip_tags: str | None = None, phases: str = ""
) -> list[str]:
    """What made a run partial, as the operator typed it: `--only host`, `--limit gpu01`, `--tags x`.
    Empty for a full run. `phases` is the --only/--from option given (phases the inventory leaves
    out do not make a run partial: that is the inventory's whole run)."""
    marks = [phases] if phases else []
    marks += [f"{flag} {value}" for flag, value in (("--limit", limit), ("--tags", tags)) if value]
    if skip_tags:
        marks.append(f"--skip-tags {skip_tags}")
    return marks


def _scope(report: dict[str, Any]) -> tuple[bool, list[str]]:
    """(check mode, partial_by) of a report; a report written before these fields reads its options."""
    options = report.get("options") or {}
    check = bool(report.get("check", options.get("check", False)))
    partial = report.get("partial")
    if not isinstance(partial, list):
        partial = partial_by(
            limit=options.get("limit"), tags=options.get("tags"), skip_tags=options.get("skip_tags")
        )
    return check, [str(p) for p in partial]


def summary_row(record: RunRecord) -> dict[str, Any]:
    """One run as `gpubring runs` lists it (and prints with --json): `check` marks a check-mode run
    (its `changed` counts are what would change), `partial` what narrowed it (empty: a full run),
    `acceptance` the report's GPU acceptance verdicts ({host: {verdict, failed, skipped, admission}})."""
    report = record.report or {}
    stats = report.get("stats") or {}
    check, partial = _scope(report)
    return {
        "run": record.name,
        "folder": str(record.folder),
        "started": record.started,
        "command": record.command,
        "status": record.status,
        "exit_code": report.get("exit_code"),
        "duration_s": report.get("duration_s"),
        "check": check,
        "partial": partial,
        "changed": {str(host): int(row.get("changed", 0)) for host, row in stats.items()},
        "acceptance": dict(report.get("acceptance") or {}),
    }


ACCEPTANCE_ORDER = ("passed", "failed", "skipped-only")


def acceptance_counts(acceptance: dict[str, Any]) -> dict[str, int]:
    """Hosts per gpu_acceptance verdict, passed, failed, skipped-only first (`no verdict` for a host
    whose gate spoke without a verdict)."""
    counts: dict[str, int] = {}
    for entry in acceptance.values():
        verdict = str(entry.get("verdict") or "no verdict") if isinstance(entry, dict) else "no verdict"
        counts[verdict] = counts.get(verdict, 0) + 1
    order = [v for v in ACCEPTANCE_ORDER if v in counts] + sorted(set(counts) - set(ACCEPTANCE_ORDER))
    return {verdict: counts[verdict] for verdict in order}


def acceptance_text(acceptance: dict[str, Any]) -> str:
    """`2 passed, 1 failed`, or `-` for a run that judged no GPU node."""
    counts = acceptance_counts(acceptance)
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items()) or "-"


def scope_text(check: bool, partial: list[str]) -> str:
    """`check`, `partial: --limit gpu01`, both, or `full`: how much of the inventory a run covered."""
    parts = (["check"] if check else []) + ([f"partial: {', '.join(partial)}"] if partial else [])
    return "; ".join(parts) or "full"


def display_cells(row: dict[str, Any], max_hosts: int = 6) -> dict[str, str]:
    """Human-readable cells for a summary row: short start time, duration, changed per host, the
    acceptance verdicts."""
    started = str(row.get("started") or "")
    with_time = started.replace("T", " ")[:19]
    duration = row.get("duration_s")
    changed: dict[str, int] = row.get("changed") or {}
    if not changed:
        per_host = "-"
    elif not any(changed.values()):
        per_host = f"0 on {len(changed)} host(s)"
    else:
        touched = [f"{h}={n}" for h, n in changed.items() if n]
        unchanged = len(changed) - len(touched)
        per_host = " ".join(touched[:max_hosts])
        if len(touched) > max_hosts:
            per_host += f" +{len(touched) - max_hosts} more"
        if unchanged:
            per_host += f", {unchanged} unchanged"
    if row.get("check") and changed:
        # A dry run changed nothing: its counts are what would change.
        per_host = (
            f"would change: {per_host}"
            if any(changed.values())
            else f"would change 0 on {len(changed)} host(s)"
        )
    return {
        "started": f"{with_time}Z" if with_time else "",
        "duration": f"{duration:.1f} s" if isinstance(duration, int | float) else "",
        "scope": scope_text(bool(row.get("check")), list(row.get("partial") or [])),
        "changed": per_host,
        "acceptance": acceptance_text(dict(row.get("acceptance") or {})),
    }
