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

from gpubring import paths, runstore, versions, yamlfile
from gpubring.inventory import Inventory, InventoryError
from gpubring.phases import PhasePlan, PlaybookError, plan_phases
from gpubring.validation.checks import gpu_sharing
from gpubring.yamlfile import Problem

NO_RELEASES = "no Helm releases defined yet"
RUN_TIME = "rendered at run time"
SHOWN_HOSTS = 8


def plan_releases(inv: Inventory) -> tuple[list[Any], str]:
    """The Helm releases of gpubring.releases (when that module exists) as it returns them, or ([], why
    there are none). A release that does not render raises InventoryError naming where."""
    if importlib.util.find_spec("gpubring.releases") is None:
        return [], NO_RELEASES
    module = importlib.import_module("gpubring.releases")
    render_error: type[Exception] = getattr(module, "ReleaseRenderError", ValueError)
    try:
        releases = list(module.plan_releases(inv))
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


DISTRIBUTION_PACKAGE = "distribution package"


@dataclass(frozen=True)
class HostSource:
    """What the hosts that share one source of a component get instead of (or as) its pin."""

    pin: str  # the matrix path it stands for, e.g. nvidia_driver.version
    source: str  # e.g. "nvidia_driver_source: distribution"
    version: str  # the pin, DISTRIBUTION_PACKAGE, or the version the inventory holds the package at
    hosts: tuple[str, ...]


def _role_defaults(role: str) -> dict[str, Any]:
    try:
        rel = f"roles/{role}/defaults/main.yml"
        data = yamlfile.read(paths.roles_dir().parent / rel, rel)
    except yamlfile.YamlError:
        return {}
    return dict(data) if isinstance(data, Mapping) else {}


def _hosts_by_role(inv: Inventory) -> dict[str, tuple[str, ...]] | None:
    """The hosts the phase playbooks run each role on (in inventory order); None without playbooks."""
    try:
        phases = plan_phases(inv)
    except PlaybookError:
        return None
    chosen: dict[str, set[str]] = {}
    for play in (pl for p in phases for pl in p.plays):
        hosts = set(play.hosts)
        for role in play.roles:
            chosen.setdefault(role, set()).update(hosts)
    return {role: tuple(h for h in inv.hosts if h in members) for role, members in chosen.items()}


def _literal(value: Any) -> str | None:
    """A setting's value when it is not a template (a template renders from the matrix at run time)."""
    text = "" if value is None else str(value)
    return None if not text or "{{" in text or "{%" in text else text


def host_sources(inv: Inventory) -> list[HostSource]:
    """Per group of hosts that share it, what the components whose source each host's inputs choose
    really install: the NVIDIA driver (nvidia_driver_source), containerd (containerd_source) and the
    container toolkit (nvidia_container_toolkit_owner). A distribution source installs the
    distribution's package, not the pin (Debian 12 carries driver 535 and containerd 1.6)."""
    matrix = inv.versions
    out: list[HostSource] = []
    by_role = _hosts_by_role(inv)

    def add(pin: str, role: str, hosts: Sequence[str], pick: Any, keys: Sequence[str]) -> None:
        defaults = _role_defaults(role)
        groups: dict[tuple[str, str], list[str]] = {}
        for host in hosts if by_role is None else by_role.get(role, ()):
            own = inv.hosts[host].vars
            settings = {k: own[k] if k in own else defaults.get(k) for k in keys}
            groups.setdefault(pick(settings), []).append(host)
        out.extend(HostSource(pin, src, ver, tuple(members)) for (src, ver), members in groups.items())

    def pick_driver(field: str) -> Any:
        def pick(v: Mapping[str, Any]) -> tuple[str, str]:
            source = str(v.get("nvidia_driver_source") or "cuda_repo")
            if source == "distribution":
                held = _literal(v.get("nvidia_driver_distribution_version")) if field == "version" else None
                return f"nvidia_driver_source: {source}", held or DISTRIBUTION_PACKAGE
            pin = _literal(v.get(f"nvidia_driver_{field}")) or str(
                matrix.get("nvidia_driver", {}).get(field, "")
            )
            return f"nvidia_driver_source: {source}", pin

        return pick

    def containerd(v: Mapping[str, Any]) -> tuple[str, str]:
        source = str(v.get("containerd_source") or "distribution")
        if source == "distribution":
            return f"containerd_source: {source}", DISTRIBUTION_PACKAGE
        pin = _literal(v.get("containerd_version")) or str(matrix.get("containerd", {}).get("version", ""))
        return f"containerd_source: {source}", pin

    def toolkit(v: Mapping[str, Any]) -> tuple[str, str]:
        owner = str(v.get("nvidia_container_toolkit_owner") or "host")
        if owner == "operator":
            chart = matrix.get("gpu_operator", {}).get("chart", "")
            return f"nvidia_container_toolkit_owner: {owner}", f"the GPU Operator's toolkit (chart {chart})"
        pin = _literal(v.get("nvidia_container_toolkit_version"))
        return f"nvidia_container_toolkit_owner: {owner}", pin or str(
            matrix.get("nvidia_container_toolkit", {}).get("version", "")
        )

    gpu, everyone = inv.groups.get("gpu_nodes", ()), tuple(inv.hosts)
    for field in ("branch", "version"):
        keys = ("nvidia_driver_source", "nvidia_driver_distribution_version", f"nvidia_driver_{field}")
        add(f"nvidia_driver.{field}", "nvidia_driver", gpu, pick_driver(field), keys)
    add("containerd.version", "containerd", everyone, containerd, ("containerd_source", "containerd_version"))
    toolkit_keys = ("nvidia_container_toolkit_owner", "nvidia_container_toolkit_version")
    add("nvidia_container_toolkit.version", "nvidia_container_toolkit", gpu, toolkit, toolkit_keys)
    return out


def versions_document(inv: Inventory, pinned: Mapping[str, Any]) -> dict[str, Any]:
    pins = dict(versions.flatten(pinned))
    return {
        "inventory": str(inv.root),
        "versions": inv.versions,
        "matrix": [
            {"path": path, "version": value, "overridden": path in inv.overridden, "pinned": pins.get(path)}
            for path, value in versions.flatten(inv.versions)
        ],
        "per_host": [dataclasses.asdict(s) for s in host_sources(inv)],
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
    # The releases as gpubring.releases returns them: what `plan --manifests` writes, so that one `plan`
    # renders the role templates of its releases once (about 3 s for all-on).
    rendered: tuple[Any, ...]
    releases_note: str

    @property
    def releases(self) -> tuple[dict[str, Any], ...]:
        """The releases as dicts, as the plan shows them."""
        return tuple(_as_dict(r) for r in self.rendered)


def build_plan(inv: Inventory) -> Plan:
    """Everything `gpubring plan` shows; PlaybookError when a phase playbook cannot be read."""
    rendered, note = plan_releases(inv)
    return Plan(inv, tuple(plan_phases(inv)), versions.load_pinned(), tuple(rendered), note)


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
        "own_variables": [{"key": key, "file": file} for key, file in inv.own_keys],
        "warnings": gpu_sharing.sharing_notes(inv),
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
        runstore.write_private(Path(target), text + "\n")  # Helm values can hold secrets: 0600


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
    per_host: dict[str, list[dict[str, Any]]] = {}
    for entry in doc["per_host"]:
        per_host.setdefault(entry["pin"], []).append(entry)
    matrix: list[list[str]] = []
    for m in doc["matrix"]:
        override = f"inventory override (pinned {m['pinned']})" if m["overridden"] else ""
        for entry in per_host.get(m["path"], []):  # what each group of hosts really gets
            note = "; ".join(
                filter(None, [entry["source"], override if entry["version"] == str(m["version"]) else ""])
            )
            matrix.append([m["path"], entry["version"], f"{note} on {hosts_text(entry['hosts'])}"])
        if m["path"] not in per_host:
            matrix.append([m["path"], str(m["version"]), override])
    _table(console, "Effective versions", ["pin", "version", "source"], matrix)
    rules = [[r["verdict"], r["id"], r["detail"]] for r in doc["rules"]]
    _table(console, "Compatibility rules", ["verdict", "rule", "detail"], rules)


def plan_downloads(inv: Inventory) -> list[dict[str, Any]]:
    """Every download of a run on this inventory and where it comes from (gpubring.downloads: upstream,
    or the mirror variable that covers it). Raises gpubring.releases.ReleaseRenderError."""
    from gpubring import downloads

    return downloads.document(downloads.scan(inv), inv.settings)


def render_downloads(found: Sequence[Mapping[str, Any]], console: Console) -> None:
    rows = [
        [
            str(d["kind"]),
            f"{d['name']} {d['version']}" if d["kind"] == "chart" else str(d["upstream"]),
            str(d["from"]),
        ]
        for d in found
    ]
    _table(console, "Downloads: where each comes from", ["kind", "download", "from"], rows)
    upstream = sorted({str(d["variable"]) for d in found if d["via"] == "upstream"})
    if upstream:
        _say(
            console,
            f"  an air-gapped site sets {', '.join(upstream)} (gpubring bundle builds what they serve)",
        )


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
    if inv.own_keys:
        # Not inputs of gpubring: a typo that looks like nothing gpubring knows would be listed here.
        own = ", ".join(f"{key} ({file})" for key, file in inv.own_keys)
        _say(console, f"Variables of your own (no role or setting reads them; a typo?): {own}")
    for note in gpu_sharing.sharing_notes(inv):
        _say(console, note)
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
        if r.get("waits"):
            waits = "\n".join(f"    {i}. {w}" for i, w in enumerate(r["waits"], 1))
            _say(console, f"  a run of {r.get('name', '')} waits for:\n{waits}")
        if r.get("upgrade_crds"):
            _say(
                console,
                f"  on a chart upgrade, the CRDs of {r.get('name', '')} (its chart's crds/, which Helm "
                "does not upgrade) are applied server-side first",
            )
