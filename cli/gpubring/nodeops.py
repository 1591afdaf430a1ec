"""Node lifecycle: what `gpubring node add | replace | remove` run, as steps of the executor.

    add      playbooks/node_add.yml --limit NODE[,NODE...]: preflight, the host roles (driver,
             toolkit, RDMA, kubelet topology on GPU nodes), the Kubernetes packages, the join, the GPU
             labels and taint, and the verify phase, for these nodes only (GPU_NOTES 1). The cluster
             is not re-run.
    replace  a fresh OS install of a host the inventory already has: first node_remove.yml's API part
             (-e node_remove_force=true: nothing runs on the node; its stale Node object, and for a
             control plane its etcd member, are removed through the first control plane), then the
             same as add.
    remove   node_remove.yml --limit NODE: drain, kubeadm reset, etcd member, Node object; with
             --force (-e node_remove_force=true) for a node that is gone: nothing runs on it
             (GPU_NOTES 3).
    reset    reset.yml on every host (the whole cluster) or on --limit's hosts: workers first, then the
             control planes one at a time, the first one last; -e reset_confirm=yes, and with
             --purge-host -e reset_purge_host=true. A --limit that would take etcd below quorum, or
             reset the first control plane while other hosts stay, is refused before any host.

Every step is one run (its own run folder and report.json) with the view, summary and exit codes of
`gpubring up`; a step that does not succeed stops the next. The first control plane is refused: it
initialises the cluster and makes the API calls of the other steps.

Nothing here imports ansible or ansible_runner at module level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpubring import paths
from gpubring.guards import quorum_problem
from gpubring.model import Inventory
from gpubring.phases import PhaseError, PhaseSelection, resolve_pattern, select_phases
from gpubring.run import steps as run_steps
from gpubring.run.settings import RunSettings
from gpubring.runopts import RunOptions
from gpubring.yamlfile import did_you_mean

ACTIONS = ("add", "replace", "remove")
ADD_PLAYBOOK = "node_add.yml"
REMOVE_PLAYBOOK = "node_remove.yml"
FORCE_VAR = "node_remove_force"
RESET_PLAYBOOK = "reset.yml"
UPGRADE_PLAYBOOK = "upgrade.yml"
CONFIRM_VAR = "reset_confirm"
PURGE_VAR = "reset_purge_host"

# What a reset does on each host (roles/kubeadm_join/tasks/reset.yml and reset_purge.yml), as the plan
# of `gpubring reset` says it.
RESET_REMOVES = (
    "kubeadm reset (when kubeadm is installed): static pods, a control plane's etcd member",
    "kubeadm's files in /etc/kubernetes (manifests, pki, *.conf), gpubring's /etc/kubernetes/kubeadm",
    "/var/lib/kubelet (kubelet stopped, pod mounts unmounted), /var/lib/etcd on control planes",
    "the CNI configuration /etc/cni/net.d/* and IPAM state /var/lib/cni, root's ~/.kube/config",
    "firewall chains KUBE-*, CNI-*, cali-*, CILIUM_*, FLANNEL-* and the jumps to them; nftables "
    "tables kube-proxy, calico (every other rule stays)",
)
RESET_KEEPS = (
    "containerd and its configuration, the NVIDIA driver, fabric manager and container toolkit, RDMA, "
    "kernel settings, the Kubernetes packages and kubelet's drop-ins (/etc/kubernetes/kubelet.conf.d)"
)
PURGE_REMOVES = (
    "the packages kubeadm, kubelet, kubectl, kubernetes-cni, cri-tools (holds lifted), their "
    "repository and key, /etc/kubernetes, /etc/default/kubelet, /opt/cni, gpubring's "
    "/etc/containerd/config.toml and registry mirror (containerd restarts on its defaults)",
    "still kept: the containerd package and images, the NVIDIA driver and toolkit, RDMA, kernel settings",
)


class NodeError(ValueError):
    """Node names that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Step:
    """One playbook run of a node operation."""

    command: str  # the run folder's command name: node-add, node-replace, node-remove, reset
    playbook: Path
    limit: str  # empty: every host of the inventory
    purpose: str
    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    skip_tags: tuple[str, ...] = ()  # the phases the inventory leaves out (node_phases)


#: The phases of the node playbooks, by the tag their plays carry: node_add.yml imports preflight.yml,
#: host.yml and verify.yml and tags its package, join and label plays `cluster`; node_remove.yml is
#: all cluster phase (drain, reset, delete through the API).
NODE_PHASES = ("preflight", "host", "cluster", "verify")


def node_phases(inv: Inventory, check: bool, phases: Sequence[str] = NODE_PHASES) -> PhaseSelection:
    """The phases of `phases` a node operation (or an upgrade) runs, chosen as `gpubring up` chooses
    them: the inventory's gpubring_phases, and the ones in gpubring_phases_check_only only with
    --check. Raises NodeError when none is left."""
    try:
        return select_phases(
            phases,
            None,
            None,
            inv.phases,
            inv.phases_skipped_reason,
            check=check,
            check_only=inv.phases_check_only,
        )
    except PhaseError as exc:
        raise NodeError(str(exc)) from None


def with_phases(steps: Sequence[Step], selection: PhaseSelection) -> list[Step]:
    """The steps as the phases allow: each skips the phases left out by their tags (--skip-tags);
    a step of node_remove.yml, all cluster phase, is dropped when that phase is left out. Raises
    NodeError when no step is left (node remove on an inventory without the cluster phase)."""
    skipped = tuple(phase for phase, _ in selection.skipped)
    out = [
        replace(step, skip_tags=skipped)
        for step in steps
        if not (step.playbook.name == REMOVE_PLAYBOOK and "cluster" in skipped)
    ]
    if not out:
        why = dict(selection.skipped)["cluster"]
        raise NodeError(f"nothing to run: removing a node is the cluster phase, and {why}")
    return out


def first_control_plane(inv: Inventory) -> str:
    members = inv.groups.get("control_plane") or ()
    return members[0] if members else ""


def check_nodes(inv: Inventory, names: Sequence[str], *, removing: bool = False) -> tuple[str, ...]:
    """The nodes asked for, each once, in order. NodeError for a name that is not a host of the
    inventory (with a did-you-mean) or for the first control plane; when `removing` them (remove,
    replace), also when that would take etcd below quorum (guards.quorum_problem)."""
    nodes = tuple(dict.fromkeys(names))
    problems = [
        f"{name} is not a host of {inv.hosts_file}{did_you_mean(name, inv.hosts)}; a new node goes into "
        "hosts.yml (gpu_nodes, cpu_nodes or control_plane) first"
        for name in nodes
        if name not in inv.hosts
    ]
    first = first_control_plane(inv)
    if first in nodes:
        problems.append(
            f"{first} is the first control plane (control_plane[0]): it initialises the cluster and makes "
            "the API calls of node add, replace and remove. To replace or remove it, put another control "
            "plane first in hosts.yml."
        )
    quorum = quorum_problem(inv.groups.get("control_plane") or (), nodes) if removing else None
    if quorum and not problems:
        problems.append(quorum)
    if problems:
        raise NodeError("\n".join(problems))
    return nodes


def plan(
    action: str, nodes: Sequence[str], *, force: bool = False, playbooks_dir: Path | None = None
) -> list[Step]:
    """The steps of a node operation on already checked nodes."""
    base = (playbooks_dir or paths.playbooks_dir()).resolve()
    limit = ",".join(nodes)
    shown = ", ".join(nodes)
    add = Step(
        f"node-{action}",
        base / ADD_PLAYBOOK,
        limit,
        f"host roles, join, labels and verify of {shown}",
    )
    if action == "add":
        return [add]
    if action == "replace":
        stale = Step(
            "node-replace",
            base / REMOVE_PLAYBOOK,
            limit,
            f"remove the stale Node object (and etcd member) of {shown} through the API",
            {FORCE_VAR: True},
        )
        return [stale, add]
    if action == "remove":
        how = "without touching it (--force)" if force else "drain, reset, delete"
        return [
            Step(
                "node-remove",
                base / REMOVE_PLAYBOOK,
                limit,
                f"remove {shown} from the cluster: {how}",
                {FORCE_VAR: True} if force else {},
            )
        ]
    raise ValueError(f"unknown node action {action!r}; the actions are {', '.join(ACTIONS)}")


def settings(inv: Inventory, step: Step, options: RunOptions) -> RunSettings:
    """The runner settings of one step: the operator's options with the step's --limit, and the
    step's own variables after the operator's -e."""
    extra = (*options.extra_vars, dict(step.extra_vars)) if step.extra_vars else options.extra_vars
    skip_tags = ",".join(filter(None, (options.skip_tags, *step.skip_tags))) or None
    return RunSettings(
        inventory_root=inv.root,
        hosts_file=inv.hosts_file,
        command=step.command,
        playbook=step.playbook,
        serial=str(inv.settings["gpubring_serial"]),
        options=replace(options, extra_vars=extra, limit=step.limit or None, skip_tags=skip_tags),
    )


def runs(
    inv: Inventory, steps: Sequence[Step], options: RunOptions, phases: PhaseSelection | None = None
) -> list[run_steps.Step]:
    """The steps as the executor (gpubring.run.steps) runs them: each with its settings, its purpose,
    and what its success records (gpubring.upgrade): an added node, an upgrade, gets the pins of the
    phases run; a removed or reset node loses its Kubernetes (every host when the step has no limit)."""
    ran = phases.run if phases else NODE_PHASES
    out: list[run_steps.Step] = []
    for step in steps:
        record = None
        if step.playbook.name in (ADD_PLAYBOOK, UPGRADE_PLAYBOOK):
            record = run_steps.Record(pins=tuple(ran))
        elif step.playbook.name in (REMOVE_PLAYBOOK, RESET_PLAYBOOK):
            names = tuple(n for n in step.limit.split(",") if n) or tuple(inv.hosts)
            record = run_steps.Record(forget=names, whole_cluster=not step.limit)
        out.append(run_steps.Step(settings(inv, step, options), step.purpose, record))
    return out


# --- reset ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResetPlan:
    """What `gpubring reset` runs: the hosts in the order they are reset, and the one step."""

    workers: tuple[str, ...]  # reset first, in parallel (up to --forks)
    control_planes: tuple[str, ...]  # then one at a time, the first control plane last
    whole_cluster: bool
    purge_host: bool
    step: Step
    first_control_plane: str = ""

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.workers + self.control_planes


def _limit_hosts(inv: Inventory, limit: str) -> tuple[str, ...]:
    """The hosts of the inventory that an Ansible --limit selects (`@FILE`: one host a line)."""
    if limit.startswith("@"):
        try:
            text = Path(limit[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise NodeError(f"--limit {limit}: {exc.strerror or exc}") from None
        wanted = {line.strip() for line in text.splitlines() if line.strip()}
        return tuple(h for h in inv.hosts if h in wanted)
    return resolve_pattern(limit, inv.groups, list(inv.hosts))


def plan_reset(
    inv: Inventory, limit: str | None, *, purge_host: bool = False, playbooks_dir: Path | None = None
) -> ResetPlan:
    """The reset of every host (limit None) or of the hosts `limit` selects. NodeError when the limit
    selects no host, would reset the first control plane while other hosts stay, or would take etcd
    below quorum (the arithmetic in the message). Nothing is reached."""
    chosen = _limit_hosts(inv, limit) if limit else tuple(inv.hosts)
    if not chosen:
        raise NodeError(f"--limit {limit}: matches no host of {inv.hosts_file}")
    control_planes = tuple(inv.groups.get("control_plane") or ())
    whole = set(chosen) == set(inv.hosts)
    if not whole:
        problem = quorum_problem(control_planes, chosen)
        first = first_control_plane(inv)
        if problem is None and first in chosen:
            problem = (
                f"{first} is the first control plane (control_plane[0]): the other hosts stay in its "
                "cluster and gpubring makes its API calls there. Reset the whole cluster (no --limit), or "
                "put another control plane first in hosts.yml and remove it with `gpubring node remove`."
            )
        if problem:
            raise NodeError(problem)
    workers = tuple(h for h in inv.hosts if h in chosen and h not in control_planes)
    cps = tuple(h for h in reversed(control_planes) if h in chosen)
    variables: dict[str, Any] = {CONFIRM_VAR: "yes"}
    if purge_host:
        variables[PURGE_VAR] = True
    base = (playbooks_dir or paths.playbooks_dir()).resolve()
    shown = "every host (the whole cluster)" if whole else ", ".join(workers + cps)
    step = Step(
        "reset",
        base / RESET_PLAYBOOK,
        "" if whole else ",".join(workers + cps),
        f"reset {shown}" + (" and purge the Kubernetes packages" if purge_host else ""),
        variables,
    )
    return ResetPlan(workers, cps, whole, purge_host, step, first_control_plane(inv))
