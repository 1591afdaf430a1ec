"""What `gpubring plan` and `gpubring versions` show: documents for --json and their renderings.

Rich tables on a terminal, plain aligned lines otherwise (logs, CI, pipes). Touches no host.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from gpubring import paths, versions
from gpubring.inventory import Inventory, InventoryError
from gpubring.phases import PhasePlan, plan_phases
from gpubring.specs import Problem

NO_RELEASES = "no Helm releases defined yet"
RUN_TIME = "rendered at run time"
SHOWN_HOSTS = 8


def plan_releases(inv: Inventory) -> tuple[list[dict[str, Any]], str]:
    """The Helm releases of gpubring.releases (when that module exists) as dicts, or ([], why there
    are none). A release that does not render raises InventoryError naming where."""
    if importlib.util.find_spec("gpubring.releases") is None:
        return [], NO_RELEASES
    module = importlib.import_module("gpubring.releases")
    render_error: type[Exception] = getattr(module, "ReleaseRenderError", ValueError)
    try:
        releases = [_as_dict(r) for r in module.plan_releases(inv)]
    except render_error as exc:
        where = str(getattr(exc, "where", "releases"))
        raise InventoryError([Problem(where, "helm release", str(getattr(exc, "message", exc)))]) from None
    return releases, "" if releases else "no Helm release is enabled"


def _as_dict(obj: Any) -> dict[str, Any]:
    if callable(getattr(obj, "as_dict", None)):
        return dict(obj.as_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    return dict(vars(obj))


def hosts_text(hosts: Sequence[str]) -> str:
    if not hosts:
        return "(no hosts)"
    shown = ", ".join(hosts[:SHOWN_HOSTS])
    more = f" … (+{len(hosts) - SHOWN_HOSTS} more)" if len(hosts) > SHOWN_HOSTS else ""
    return f"{shown}{more} [{len(hosts)}]"


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


# Documents ---------------------------------------------------------------------------------------


def versions_document(inv: Inventory, pinned: Mapping[str, Any]) -> dict[str, Any]:
    pins = dict(versions.flatten(pinned))
    return {
        "inventory": str(inv.root),
        "versions": inv.versions,
        "matrix": [
            {"path": path, "version": value, "overridden": path in inv.overridden, "pinned": pins.get(path)}
            for path, value in versions.flatten(inv.versions)
        ],
        "rules": [
            {"id": r.id, "message": r.message, "verdict": r.verdict, "ok": r.ok, "detail": r.detail}
            for r in inv.rule_results
        ],
    }


@dataclass(frozen=True)
class Plan:
    inv: Inventory
    phases: tuple[PhasePlan, ...]
    pinned: Mapping[str, Any]
    releases: tuple[dict[str, Any], ...]
    releases_note: str


def build_plan(inv: Inventory) -> Plan:
    """Everything `gpubring plan` shows; PlaybookError when a phase playbook cannot be read."""
    releases, note = plan_releases(inv)
    return Plan(inv, tuple(plan_phases(inv)), versions.load_pinned(), tuple(releases), note)


def plan_document(plan: Plan) -> dict[str, Any]:
    inv, phases = plan.inv, plan.phases
    root = paths.project_root()
    return {
        "inventory": str(inv.root),
        "hosts_file": str(inv.hosts_file),
        "hosts": [
            {"name": h.name, "address": h.address, "port": h.port, "user": h.user, "groups": list(h.groups)}
            for h in inv.hosts.values()
        ],
        "groups": {g: list(members) for g, members in inv.groups.items()},
        "settings": inv.settings,
        "phases": [
            {
                "phase": p.phase,
                "playbook": _relative(p.playbook, root),
                "enabled": p.enabled,
                "plays": [
                    {
                        "name": pl.name,
                        "hosts_pattern": pl.hosts_pattern,
                        "hosts": list(pl.hosts),
                        "roles": list(pl.roles),
                    }
                    for pl in p.plays
                ],
            }
            for p in phases
        ],
        "phases_skipped_reason": inv.phases_skipped_reason,
        "phases_check_only": list(inv.phases_check_only),
        **{k: v for k, v in versions_document(inv, plan.pinned).items() if k != "inventory"},
        "releases": list(plan.releases),
        "releases_note": plan.releases_note,
    }


def write_json(doc: Mapping[str, Any], target: str, console: Console) -> None:
    """`-` prints the document on stdout; a path writes it there."""
    text = json.dumps(doc, indent=2, default=str)
    if target == "-":
        console.file.write(text + "\n")
    else:
        Path(target).write_text(text + "\n", encoding="utf-8")


# Renderings --------------------------------------------------------------------------------------


def _say(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _table(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    if console.is_terminal:
        table = Table(title=title, title_justify="left", show_lines=False)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    _say(console, f"{title}:")
    for row in [list(columns), *rows]:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        _say(console, f"  {line}")


def render_versions(inv: Inventory, pinned: Mapping[str, Any], console: Console) -> None:
    doc = versions_document(inv, pinned)
    matrix = [
        [
            m["path"],
            str(m["version"]),
            f"inventory override (pinned {m['pinned']})" if m["overridden"] else "",
        ]
        for m in doc["matrix"]
    ]
    _table(console, "Effective versions", ["pin", "version", "source"], matrix)
    rules = [[r["verdict"], r["id"], r["detail"]] for r in doc["rules"]]
    _table(console, "Compatibility rules", ["verdict", "rule", "detail"], rules)


def render_plan(plan: Plan, console: Console) -> None:
    inv = plan.inv
    counts = ", ".join(
        f"{g} {len(inv.groups[g])}" for g in ("control_plane", "gpu_nodes", "cpu_nodes") if g in inv.groups
    )
    _say(console, f"Inventory {inv.root}: {len(inv.hosts)} hosts ({counts})")
    rows: list[list[str]] = []
    for p in plan.phases:
        state = "" if p.enabled else f" (skipped: {inv.phases_skipped_reason or 'not in gpubring_phases'})"
        if p.phase in inv.phases_check_only:
            state = " (check mode only: gpubring up --check)"
        for pl in p.plays:
            rows.append(
                [p.phase + state, pl.name, f"{pl.hosts_pattern}: {hosts_text(pl.hosts)}", ", ".join(pl.roles)]
            )
    _table(console, "Phases", ["phase", "play", "hosts", "roles"], rows)
    render_versions(inv, plan.pinned, console)
    releases = plan.releases
    if not releases:
        _say(console, f"Helm releases:\n  {plan.releases_note}")
        return
    rel_rows = [
        [str(r.get("name", "")), RUN_TIME, "", ""]
        if r.get("deferred")
        else [
            str(r.get("name", "")),
            str(r.get("chart", "")),
            str(r.get("version", "")),
            str(r.get("namespace", "")),
        ]
        for r in releases
    ]
    _table(console, "Helm releases", ["release", "chart", "version", "namespace"], rel_rows)
    for r in releases:
        if r.get("deferred"):
            # A lookup runs only in a run (it may run commands on the controller): plan does not call it.
            _say(console, f"  values of {r.get('name', '')}: {RUN_TIME} ({r['deferred']})")
            continue
        values = yaml.safe_dump(r.get("values") or {}, sort_keys=False, default_flow_style=False).rstrip()
        body = "\n".join(f"    {line}" for line in values.splitlines())
        _say(console, f"  values of {r.get('name', '')}:\n{body}")
