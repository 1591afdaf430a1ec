"""`gpubring upgrade`: what an upgrade to the inventory's pins does, worked out without reaching a host.

The starting point is the record gpubring keeps of what it installed (INVENTORY/.gpubring/installed.json):
after every run that succeeded and was not in check mode, the pins of that run for each host it
covered (Kubernetes after the cluster phase; containerd, the NVIDIA driver and the container toolkit
after the host phase) and the chart versions of the platform releases (after the platform phase).
A reset or a removed node drops its entries. The record says what gpubring last put there, not what
a host runs now: the upgrade playbook reads every node again (the cluster's version on the first
control plane, each Node's kubelet version, the installed packages) and skips what is already at the
pins, which is also how an interrupted upgrade continues where it stopped.

The plan: Kubernetes one minor at a time (a skip or a downgrade is refused with the hops to take), the
first control plane (kubeadm upgrade plan, then apply), the other control planes one at a time
(kubeadm upgrade node), then the workers in gpubring_serial batches, each node drained once for
everything it gets (Kubernetes packages, containerd, driver, toolkit); then the platform releases
whose chart pin changed.

This module is pure: no ansible, no I/O except the record's file and the roles' declarations of their
releases (gpubring.catalog: which releases the platform phase applies, and their chart pins).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpubring import catalog, runstore
from gpubring.model import Inventory
from gpubring.phases import PHASES
from gpubring.runstore import RUNS_SUBDIR
from gpubring.versions import get_path, parse_version

__all__ = [
    "COMPONENTS",
    "Change",
    "Installed",
    "NodePlan",
    "UpgradeError",
    "UpgradePlan",
    "batches",
    "forget_hosts",
    "load_installed",
    "network_operator_hops",
    "plan_lines",
    "plan_upgrade",
    "record_run",
    "release_pins",
]

INSTALLED_NAME = "installed.json"
RECORD_FORMAT = 1


@dataclass(frozen=True)
class Component:
    """A per-host component an upgrade can change: its pin, the group it is installed on (None:
    every node), the phase that installs it, and the host setting that hands it to someone else."""

    pin: str
    group: str | None
    phase: str
    owner_key: str = ""
    owner_value: str = ""  # the owner_key value under which the pin applies
    owner_default: str = ""


#: In the order a drained node gets them.
COMPONENTS: dict[str, Component] = {
    "kubernetes": Component("kubernetes.version", None, "cluster"),
    # containerd_source "distribution" (the default) installs the distribution's containerd: no pin.
    "containerd": Component(
        "containerd.version", None, "host", "containerd_source", "docker", "distribution"
    ),
    "nvidia_driver": Component("nvidia_driver.version", "gpu_nodes", "host"),
    "nvidia_container_toolkit": Component(
        "nvidia_container_toolkit.version",
        "gpu_nodes",
        "host",
        "nvidia_container_toolkit_owner",
        "host",
        "host",
    ),
}


def release_pins(root: Path | None = None) -> dict[str, str]:
    """The platform releases an upgrade knows: release name -> its chart pin (versions.yml), in the
    order the platform phase applies them, as the roles declare them (gpubring.catalog). The CNI's
    releases are not here: playbooks/upgrade.yml runs the cni role after the control planes (its
    release at the chart pin); switching to another pod network is not done by gpubring."""
    return {r.name: r.pin for r in catalog.declared_releases(root) if r.phase == "platform" and r.pin}


CLUSTER_GROUPS = ("control_plane", "gpu_nodes", "cpu_nodes")


class UpgradeError(ValueError):
    """An upgrade that must not run (a skipped minor, a downgrade); the message says what to do."""


# --- the record -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """What gpubring last installed: host -> component -> version, release -> chart version."""

    hosts: Mapping[str, Mapping[str, str]]
    releases: Mapping[str, str]
    runs: Mapping[str, str]  # host or "platform" -> the run folder that recorded it last
    path: Path

    @property
    def empty(self) -> bool:
        return not self.hosts and not self.releases


def record_path(inventory_root: Path) -> Path:
    return inventory_root.resolve() / RUNS_SUBDIR.parent / INSTALLED_NAME


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {
        str(k): str(v)
        for k, v in value.items()
        if isinstance(v, str | int | float) and not isinstance(v, bool)
    }


def load_installed(inventory_root: Path) -> Installed:
    """The record, or an empty one when there is none. A record that cannot be read (hand-edited,
    truncated) counts as none: it only ever makes the plan say less, the playbook reads the hosts."""
    path = record_path(inventory_root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, Mapping) or data.get("format") != RECORD_FORMAT:
        data = {}
    raw_hosts = data.get("hosts")
    hosts = (
        {str(h): _strings(v) for h, v in raw_hosts.items() if isinstance(v, Mapping)}
        if isinstance(raw_hosts, Mapping)
        else {}
    )
    return Installed(hosts, _strings(data.get("releases")), _strings(data.get("runs")), path)


def _write(installed: Installed) -> None:
    """Write the record whole (runstore.write_private: a temporary file renamed over it, 0600): a
    killed gpubring leaves the old one or the new one, never half of either."""
    data = {
        "format": RECORD_FORMAT,
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
        "hosts": {h: dict(sorted(v.items())) for h, v in sorted(installed.hosts.items()) if v},
        "releases": dict(sorted(installed.releases.items())),
        "runs": dict(sorted(installed.runs.items())),
    }
    installed.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    runstore.write_private(installed.path, json.dumps(data, indent=2) + "\n")


def _pin(inv: Inventory, dotted: str) -> str:
    value = get_path(inv.versions, dotted)
    return "" if value is None or isinstance(value, Mapping) else str(value)


def _applies(inv: Inventory, host: str, component: Component) -> bool:
    info = inv.hosts[host]
    if component.group is not None and component.group not in info.groups:
        return False
    if component.group is None and not set(info.groups) & set(CLUSTER_GROUPS):
        return False
    if component.owner_key:
        owner = info.vars.get(component.owner_key, component.owner_default)
        if str(owner) != component.owner_value:
            return False
    return bool(_pin(inv, component.pin))


#: What a pending reboot's reasons say about the NVIDIA driver that runs (report.json reboot_pending):
#: the cluster_upgrade role's (roles/cluster_upgrade/tasks/driver.yml) and the nvidia_driver role's
#: (roles/nvidia_driver/tasks/reboot_flag.yml) words, loaded module first, installed driver second.
_DRIVER_PENDING = (
    re.compile(r"^cluster_upgrade: kept cordoned, the NVIDIA module (\S+) runs and (\S+) is installed"),
    re.compile(r"^nvidia_driver: .*the loaded nvidia module is (\S+), the installed driver (\S+?)(?:;|$)"),
)


def _driver_running(report: Mapping[str, Any], host: str) -> tuple[str, str] | None:
    """(loaded, installed) when the run left `host` waiting for a reboot with a driver module that is
    not the installed one; ("", "") when it waits for the driver's reboot without saying which runs."""
    pending = (report.get("reboot_pending") or {}).get(host)
    reasons = pending.get("reasons") if isinstance(pending, Mapping) else None
    if not isinstance(reasons, list | tuple):
        return None
    waits = False
    for reason in map(str, reasons):
        for pattern in _DRIVER_PENDING:
            if found := pattern.search(reason):
                return found.group(1), found.group(2)
        waits = waits or reason.startswith(("nvidia_driver:", "cluster_upgrade:"))
    return ("", "") if waits else None


def record_run(inv: Inventory, report: Mapping[str, Any], phases: Iterable[str]) -> bool:
    """After a run: record the pins of `phases` for the hosts it covered. Only a run that succeeded
    (exit 0), was not in check mode and left no task out by --tags/--skip-tags counts. A GPU node left
    waiting for the reboot its new driver needs records what runs: `nvidia_driver` is the loaded
    module (absent when unknown) and `nvidia_driver_installed` the driver installed. Returns whether
    the record changed."""
    if report.get("exit_code") != 0 or report.get("check"):
        return False
    for mark in report.get("partial") or ():
        flag, _, value = str(mark).partition(" ")
        # Phases the inventory leaves out reach node operations and upgrades as --skip-tags of phases.
        if flag == "--tags" or (flag == "--skip-tags" and not set(value.split(",")) <= set(PHASES)):
            return False
    done = set(phases)
    stats = report.get("stats") or {}
    covered = [h for h in stats if h in inv.hosts]
    current = load_installed(inv.root)
    hosts = {h: dict(v) for h, v in current.hosts.items()}
    releases = dict(current.releases)
    runs = dict(current.runs)
    run_name = Path(str(report.get("run_folder", ""))).name
    changed = False
    for host in covered:
        for name, component in COMPONENTS.items():
            if component.phase in done and _applies(inv, host, component):
                hosts.setdefault(host, {})[name] = _pin(inv, component.pin)
                runs[host] = run_name
                changed = True
        driver = _driver_running(report, host)
        entry = hosts.get(host)
        if entry is not None and "nvidia_driver" in entry:
            entry.pop("nvidia_driver_installed", None)
            if driver is not None:
                loaded, installed = driver
                entry["nvidia_driver_installed"] = installed or entry["nvidia_driver"]
                if loaded:
                    entry["nvidia_driver"] = loaded
                else:
                    del entry["nvidia_driver"]
    if "platform" in done:
        for name, pin in release_pins().items():
            version = _pin(inv, pin)
            if version:
                releases[name] = version
        runs["platform"] = run_name
        changed = True
    if changed:
        _write(Installed(hosts, releases, runs, current.path))
    return changed


def forget_hosts(inv: Inventory, names: Iterable[str], *, whole_cluster: bool = False) -> None:
    """A reset or removed node: it runs no Kubernetes of gpubring's any more; a reset of the whole
    cluster also drops the releases. The host setup (driver, containerd, toolkit) stays recorded."""
    gone = set(names)
    current = load_installed(inv.root)
    if current.empty:
        return
    hosts = {
        h: {k: v for k, v in comps.items() if not (h in gone and k == "kubernetes")}
        for h, comps in current.hosts.items()
    }
    _write(Installed(hosts, {} if whole_cluster else current.releases, current.runs, current.path))


# --- the plan ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    component: str
    old: str | None  # None: not recorded
    new: str

    def __str__(self) -> str:
        return f"{self.component} {self.old or '(not recorded)'} -> {self.new}"


@dataclass(frozen=True)
class NodePlan:
    name: str
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class UpgradePlan:
    kubernetes_from: str | None  # the first control plane's recorded version
    kubernetes_to: str
    first: NodePlan | None
    control_planes: tuple[NodePlan, ...]  # after the first, one at a time
    worker_batches: tuple[tuple[NodePlan, ...], ...]
    releases: tuple[Change, ...]
    serial: str
    record: Installed

    @property
    def nodes(self) -> tuple[NodePlan, ...]:
        first = (self.first,) if self.first else ()
        return first + self.control_planes + tuple(n for batch in self.worker_batches for n in batch)

    @property
    def changing(self) -> tuple[NodePlan, ...]:
        return tuple(n for n in self.nodes if n.changes)


def _serial_items(serial: str) -> list[str]:
    text = serial.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [part.strip().strip("'\"") for part in text.split(",") if part.strip()]


def batches(hosts: Sequence[str], serial: str | int) -> list[tuple[str, ...]]:
    """The batches Ansible makes of `hosts` for a play's `serial` (a count, a percentage of the play's
    hosts, or a list of them whose last item repeats), as ansible-core's
    PlaybookExecutor._get_serialized_batches does: a percentage rounds down, and never below 1."""
    items = _serial_items(str(serial)) or ["100%"]
    sizes: list[int] = []
    for item in items:
        size = int(len(hosts) * float(item[:-1]) / 100.0) if item.endswith("%") else int(item)
        sizes.append(max(size, 1))
    out: list[tuple[str, ...]] = []
    rest = list(hosts)
    index = 0
    while rest:
        size = sizes[min(index, len(sizes) - 1)]
        out.append(tuple(rest[:size]))
        rest = rest[size:]
        index += 1
    return out


def _minor(version: str) -> tuple[int, int] | None:
    parsed = parse_version(version)
    return (parsed[0], parsed[1]) if parsed and len(parsed) >= 2 else None


def check_hop(current: str, target: str, what: str) -> None:
    """UpgradeError unless `target` is `current` or at most one minor release after it."""
    have, want = _minor(current), _minor(target)
    if have is None or want is None:
        return
    full_have, full_want = parse_version(current) or (), parse_version(target) or ()
    if full_want < full_have:
        raise UpgradeError(
            f"{what} runs Kubernetes {current} and the pin is {target}: a downgrade, which kubeadm does "
            f"not do. Pin {current} or newer in group_vars/all/versions.yml "
            "(gpubring_versions.kubernetes.version)."
        )
    if want[0] != have[0]:
        raise UpgradeError(
            f"{what}: Kubernetes {current} -> {target} changes the major version; not supported"
        )
    skipped = want[1] - have[1]
    if skipped > 1:
        hops = [f"{have[0]}.{m}" for m in range(have[1] + 1, want[1] + 1)]
        path = [f"{have[0]}.{have[1]}", *hops]
        steps = "; ".join(
            f"pin the newest {hop}.x patch and run `gpubring upgrade`"
            if hop != hops[-1]
            else f"then pin {target}"
            for hop in hops
        )
        raise UpgradeError(
            f"{what} runs Kubernetes {current} and the pin is {target}: {skipped} minor releases at once. "
            'kubeadm upgrades one minor release at a time (kubeadm upgrade docs: "Skipping MINOR versions '
            f'when upgrading is unsupported"), so this takes {len(hops)} upgrades: {" -> ".join(path)}. '
            f"{steps[0].upper()}{steps[1:]}."
        )


#: The NVIDIA Network Operator's release lines (its calendar versions YY.MM; YY.MM.PP is a patch of the
#: line YY.MM). Mellanox/network-operator-docs, docs/life-cycle-management.rst at v25.10.0, "Network
#: Operator Versioning" and "Network Operator Life Cycle": a new line puts the previous one in
#: maintenance and the one before it out of support (EOL); the upgrade it documents is `helm upgrade`
#: from the line before. A line comes out every three months (the repository's tags: v24.4.0, v24.7.0,
#: v24.10.0, v25.1.0, v25.4.0, v25.7.0, v25.10.0, v26.1.0), the months 1, 4, 7 and 10.
NETWORK_OPERATOR_RELEASE = "network-operator"
_NETWORK_OPERATOR_MONTHS = (1, 4, 7, 10)


def _network_operator_line(version: str) -> tuple[int, int] | None:
    parsed = parse_version(version)
    if not parsed or len(parsed) < 2 or parsed[1] not in _NETWORK_OPERATOR_MONTHS:
        return None
    return parsed[0], parsed[1]


def _next_line(line: tuple[int, int]) -> tuple[int, int]:
    year, month = line
    return (year + 1, 1) if month == _NETWORK_OPERATOR_MONTHS[-1] else (year, month + 3)


def network_operator_hops(current: str, target: str) -> list[str]:
    """The Network Operator chart upgrade from `current` to `target` as release lines: [] when
    `target` is on the same line or the next one (one `helm upgrade`), else every line from
    `current`'s to `target`'s (each a separate upgrade). Raises UpgradeError for a downgrade to an
    older line or a version that is not a release line."""
    have, want = _network_operator_line(current), _network_operator_line(target)
    if have is None or want is None:
        bad = current if have is None else target
        raise UpgradeError(
            f"Network Operator chart {bad} is not a release line YY.MM.PP with MM in 1, 4, 7, 10 "
            "(network-operator-docs, life-cycle-management.rst: calendar versions)"
        )
    if want < have:
        raise UpgradeError(
            f"Network Operator chart {current} -> {target} goes back to an older release line, which the "
            "Network Operator's life-cycle documents do not cover; pin a chart of the line "
            f"{have[0]}.{have[1]} or newer"
        )
    lines = [have]
    while lines[-1] < want:
        lines.append(_next_line(lines[-1]))
    return [] if len(lines) <= 2 else [f"{y}.{m}" for y, m in lines]


def _check_network_operator(record: Installed, inv: Inventory, pins: Mapping[str, str]) -> None:
    old = record.releases.get(NETWORK_OPERATOR_RELEASE)
    pin = pins.get(NETWORK_OPERATOR_RELEASE)
    new = _pin(inv, pin) if pin else ""
    if not old or not new or old == new:
        return
    hops = network_operator_hops(old, new)
    # The multi-hop planner (gpubring.hops, issue 22) takes the lines in between when versions.yml's
    # gpubring_upgrade_hops has a chart for each: the plan lists the road and `gpubring upgrade` refuses
    # to skip it before any host, naming the pins of the first run. Refused here: a line it has none for.
    from gpubring import hops as roads

    try:
        rule = roads.load_rules().get(NETWORK_OPERATOR_RELEASE)
    except roads.HopsError as exc:  # versions.yml's hop data is broken: a project bug, said plainly
        raise UpgradeError(str(exc)) from None
    known = {f"{v[0]}.{v[1]}" for v in map(parse_version, rule.lines if rule else ()) if v and len(v) >= 2}
    if hops and set(hops[1:-1]) <= known:
        return
    if hops:
        steps = " -> ".join(hops)
        raise UpgradeError(
            f"the Network Operator runs chart {old} and the pin is {new}: "
            f"{len(hops) - 1} release lines at once. "
            "Its life cycle (Mellanox/network-operator-docs, docs/life-cycle-management.rst) keeps only the "
            f"line before the current one in support, so this takes {len(hops) - 1} upgrades: {steps}. "
            f"Pin the newest {hops[1]}.x chart (gpubring_versions.network_operator.chart) and run "
            "`gpubring upgrade`, then the next line."
        )


def _node(inv: Inventory, record: Installed, host: str) -> NodePlan:
    had = record.hosts.get(host, {})
    changes = []
    for name, component in COMPONENTS.items():
        if not _applies(inv, host, component):
            continue
        new, old = _pin(inv, component.pin), had.get(name)
        if old != new:
            changes.append(Change(name, old, new))
    return NodePlan(host, tuple(changes))


def plan_upgrade(inv: Inventory, record: Installed | None = None) -> UpgradePlan:
    """The upgrade of the inventory's cluster to its pins, from the record (load_installed). Raises
    UpgradeError when a recorded node would skip a Kubernetes minor release or go back."""
    record = record if record is not None else load_installed(inv.root)
    target = _pin(inv, "kubernetes.version")
    control_planes = list(inv.groups.get("control_plane") or ())
    cp_set = set(control_planes)
    workers = [h for h in inv.hosts if h not in cp_set and set(inv.hosts[h].groups) & set(CLUSTER_GROUPS)]
    problems = []
    for host in control_planes + workers:
        old = record.hosts.get(host, {}).get("kubernetes")
        if old:
            try:
                check_hop(old, target, host)
            except UpgradeError as exc:
                problems.append(str(exc))
    if problems:
        # The same hop on many nodes says the same thing: once, with the nodes named.
        first_problem = problems[0]
        more = f" ({len(problems) - 1} more node(s) alike)" if len(problems) > 1 else ""
        raise UpgradeError(first_problem + more)
    nodes = {h: _node(inv, record, h) for h in control_planes + workers}
    serial = str(inv.settings.get("gpubring_serial", "25%"))
    first = nodes[control_planes[0]] if control_planes else None
    try:
        pins = release_pins()
    except catalog.CatalogError as exc:  # a role's release cannot be read: a project bug
        raise UpgradeError(f"the platform releases cannot be listed: {exc}") from None
    _check_network_operator(record, inv, pins)
    releases = tuple(
        Change(name, record.releases.get(name), version)
        for name, pin in pins.items()
        if (version := _pin(inv, pin)) and record.releases.get(name) != version
    )
    return UpgradePlan(
        kubernetes_from=record.hosts.get(control_planes[0], {}).get("kubernetes") if control_planes else None,
        kubernetes_to=target,
        first=first,
        control_planes=tuple(nodes[h] for h in control_planes[1:]),
        worker_batches=tuple(tuple(nodes[h] for h in batch) for batch in batches(workers, serial) if batch),
        releases=releases,
        serial=serial,
        record=record,
    )


def _changes(node: NodePlan) -> str:
    return "; ".join(map(str, node.changes)) if node.changes else "nothing (at the pins); not drained"


def plan_lines(plan: UpgradePlan, *, width: int = 20) -> list[str]:
    """The plan as `gpubring upgrade --check` prints it. Batches of more than `width` nodes that get
    the same changes are shown as one line with a count."""
    out: list[str] = []
    rec = plan.record
    if rec.empty:
        out.append(
            f"record: none yet ({rec.path}): no successful gpubring up was recorded, so what each node "
            "runs now is unknown here; the run reads every node and skips what is already at the pins"
        )
    else:
        out.append(f"record: {rec.path} (what gpubring last installed; the run reads every node again)")
    if plan.kubernetes_from and plan.kubernetes_from != plan.kubernetes_to:
        hop = (
            f"Kubernetes {plan.kubernetes_from} -> {plan.kubernetes_to} (one minor release at most: checked)"
        )
    elif plan.kubernetes_from:
        hop = f"Kubernetes stays {plan.kubernetes_to}"
    else:
        hop = f"Kubernetes -> {plan.kubernetes_to} (the run refuses a skipped minor release on the cluster)"
    out.append(hop)
    step = 0
    if plan.first is not None:
        step += 1
        out.append(
            f"{step}. first control plane {plan.first.name}: kubeadm upgrade plan, kubeadm upgrade apply "
            f"v{plan.kubernetes_to} (when the cluster is not there yet); drain, {_changes(plan.first)}; "
            "wait Ready, uncordon"
        )
    for node in plan.control_planes:
        step += 1
        out.append(
            f"{step}. control plane {node.name}, alone: kubeadm upgrade node; drain, {_changes(node)}; "
            "wait Ready, uncordon"
        )
    total = sum(len(b) for b in plan.worker_batches)
    if plan.worker_batches:
        out.append(
            f"workers: {total} in {len(plan.worker_batches)} batch(es) of gpubring_serial {plan.serial}, "
            "each node: drain (PodDisruptionBudgets honoured), kubeadm upgrade node, packages, "
            "restart kubelet, wait Ready, uncordon"
        )
    for batch in plan.worker_batches:
        step += 1
        groups: dict[str, list[str]] = {}
        for node in batch:
            groups.setdefault(_changes(node), []).append(node.name)
        out.append(f"{step}. batch of {len(batch)}:")
        for what, names in groups.items():
            shown = (
                ", ".join(names)
                if len(names) <= width
                else f"{', '.join(names[:3])}, ... ({len(names)} nodes)"
            )
            out.append(f"     {shown}: {what}")
    if plan.releases:
        step += 1
        out.append(
            f"{step}. platform releases (CRDs first where Helm would not upgrade them), then readiness:"
        )
        from gpubring import hops  # the operators' hops and each release's CRDs (issue 22)

        try:
            found = hops.roads(plan.releases)
        except hops.HopsError as exc:  # the releases still listed, the broken hop data named
            out.extend(f"     {change}" for change in plan.releases)
            out.append(f"the upgrade hops cannot be planned: {exc}")
        else:
            out.extend(f"     {road}" for road in found)
            out.extend(hops.run_lines(found))
    else:
        out.append("platform releases: every chart pin as recorded; nothing to upgrade")
    changing = len(plan.changing)
    out.append(f"{changing} of {len(plan.nodes)} node(s) drained once each; the others are left alone")
    return out
