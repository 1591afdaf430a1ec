"""Support windows: is the pinned Kubernetes minor (and the NVIDIA driver branch) still supported upstream?

versions.yml's `gpubring_support_windows` holds, sourced there, each Kubernetes minor's maintenance-mode
and end-of-life dates and the driver branch's end of life. `gpubring versions`, `gpubring plan` and the
end of `gpubring up` print what `notes` says about the inventory's pins on a given day: nothing alarming
inside support, a note in maintenance mode (only critical fixes from then on), a warning past the end of
life; each names the next minor `gpubring upgrade` can take (kubeadm upgrades one minor at a time).

The day is today's (UTC) unless GPUBRING_TODAY=YYYY-MM-DD says another (for tests and for planning ahead).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from gpubring.versions import get_path, parse_version, read_section

WINDOWS_KEY = "gpubring_support_windows"
TODAY_ENV = "GPUBRING_TODAY"


class SupportError(ValueError):
    """GPUBRING_TODAY or versions.yml's support windows cannot be read; the message says which."""


@dataclass(frozen=True)
class Window:
    name: str  # "Kubernetes 1.34", "NVIDIA driver branch 580"
    maintenance: date | None
    end_of_life: date | None
    source: str


@dataclass(frozen=True)
class Note:
    level: str  # "ok", "maintenance", "end-of-life", "unknown"
    text: str

    @property
    def alarming(self) -> bool:
        return self.level in ("maintenance", "end-of-life")


def today(environ: Mapping[str, str] | None = None) -> date:
    """The day to judge by: GPUBRING_TODAY (YYYY-MM-DD) when set, else today's date in UTC."""
    env = os.environ if environ is None else environ
    text = env.get(TODAY_ENV, "").strip()
    if not text:
        return datetime.now(UTC).date()
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise SupportError(f"{TODAY_ENV}={text}: expected a date YYYY-MM-DD") from None


def _date(value: Any, where: str) -> date | None:
    if value is None or value == "":
        return None
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise SupportError(f"versions.yml: {where}: expected a date YYYY-MM-DD, got {value}") from None


def load_windows(file: Path | None = None) -> dict[str, dict[str, Window]]:
    """{"kubernetes": {"1.34": Window}, "nvidia_driver": {"580": Window}} from versions.yml."""
    try:
        section = read_section(WINDOWS_KEY, file)
    except ValueError as exc:
        raise SupportError(str(exc)) from None
    out: dict[str, dict[str, Window]] = {}
    for kind, sub, label in (
        ("kubernetes", "minors", "Kubernetes {}"),
        ("nvidia_driver", "branches", "NVIDIA driver branch {}"),
    ):
        entries = get_path(section, f"{kind}.{sub}")
        if not isinstance(entries, Mapping):
            raise SupportError(f"versions.yml: {WINDOWS_KEY}.{kind}.{sub}: expected a mapping")
        source = str(get_path(section, f"{kind}.source") or "")
        out[kind] = {}
        for key, entry in entries.items():
            where = f"{WINDOWS_KEY}.{kind}.{sub}.{key}"
            if not isinstance(entry, Mapping):
                raise SupportError(f"versions.yml: {where}: expected a mapping of dates")
            out[kind][str(key)] = Window(
                label.format(key),
                _date(entry.get("maintenance"), f"{where}.maintenance"),
                _date(entry.get("end_of_life"), f"{where}.end_of_life"),
                source,
            )
    return out


def _minor(version: str) -> str | None:
    parsed = parse_version(version)
    return f"{parsed[0]}.{parsed[1]}" if parsed and len(parsed) >= 2 else None


def next_minor(minor: str) -> str:
    major, _, rest = minor.partition(".")
    return f"{major}.{int(rest) + 1}"


def _judge(window: Window, day: date, advice: str) -> Note:
    if window.end_of_life and day > window.end_of_life:
        return Note(
            "end-of-life",
            f"WARNING: {window.name} reached its end of life on {window.end_of_life.isoformat()}: no more "
            f"upstream fixes, security fixes included. {advice}",
        )
    if window.maintenance and day >= window.maintenance:
        eol = f" until its end of life on {window.end_of_life.isoformat()}" if window.end_of_life else ""
        return Note(
            "maintenance",
            f"note: {window.name} is in maintenance mode since {window.maintenance.isoformat()} (critical "
            f"fixes only{eol}). {advice}",
        )
    if window.maintenance and window.end_of_life:
        until = f" until {window.maintenance.isoformat()}, end of life {window.end_of_life.isoformat()}"
    elif window.end_of_life:
        until = f" until its end of life {window.end_of_life.isoformat()}"
    else:
        until = ""
    return Note("ok", f"{window.name}: supported upstream{until}")


def kubernetes_note(version: str, day: date, windows: Mapping[str, Mapping[str, Window]]) -> Note:
    minor = _minor(version)
    if minor is None:
        return Note("unknown", f"Kubernetes {version}: not a version gpubring can judge")
    window = windows.get("kubernetes", {}).get(minor)
    if window is None:
        return Note(
            "unknown",
            f"Kubernetes {minor}: no support window in versions.yml ({WINDOWS_KEY}.kubernetes.minors)",
        )
    nxt = next_minor(minor)
    after = windows.get("kubernetes", {}).get(nxt)
    known = f" (supported until {after.end_of_life.isoformat()})" if after and after.end_of_life else ""
    advice = (
        f"The next minor `gpubring upgrade` can take is {nxt}{known}: pin its newest patch "
        f"(gpubring_versions.kubernetes.version) and run `gpubring upgrade` (kubeadm upgrades one minor "
        "release at a time)."
    )
    return _judge(window, day, advice)


def driver_note(branch: str, day: date, windows: Mapping[str, Mapping[str, Window]]) -> Note:
    window = windows.get("nvidia_driver", {}).get(str(branch))
    if window is None:
        return Note(
            "unknown",
            f"NVIDIA driver branch {branch}: no support window in versions.yml "
            f"({WINDOWS_KEY}.nvidia_driver.branches)",
        )
    return _judge(window, day, "Pin a supported branch (gpubring_versions.nvidia_driver).")


def notes(
    matrix: Mapping[str, Any],
    day: date | None = None,
    windows: Mapping[str, Mapping[str, Window]] | None = None,
) -> list[Note]:
    """What the support windows say about the effective matrix (an inventory's `versions`) on `day`."""
    day = day or today()
    windows = windows if windows is not None else load_windows()
    out: list[Note] = []
    version = get_path(matrix, "kubernetes.version")
    if version is not None:
        out.append(kubernetes_note(str(version), day, windows))
    branch = get_path(matrix, "nvidia_driver.branch")
    if branch is not None:
        out.append(driver_note(str(branch), day, windows))
    return out


def document(matrix: Mapping[str, Any]) -> dict[str, Any]:
    """The notes for --json: the day and each note's level and text (or the error)."""
    try:
        day = today()
        return {"day": day.isoformat(), "notes": [vars(n) for n in notes(matrix, day)]}
    except SupportError as exc:
        return {"error": str(exc)}


def lines(matrix: Mapping[str, Any], *, only_alarming: bool = False) -> list[str]:
    """The notes as text for the CLI; a broken GPUBRING_TODAY or windows section is one line that says so."""
    try:
        day = today()
        found = notes(matrix, day)
    except SupportError as exc:
        return [f"support windows: {exc}"]
    shown = [n for n in found if n.alarming or not only_alarming]
    if not shown:
        return []
    return [f"Support windows on {day.isoformat()}:"] + [f"  {n.text}" for n in shown]
