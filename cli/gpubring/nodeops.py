"""Node lifecycle: what `gpubring node add | replace | remove` run, as steps through the runner.

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

Every step is one run (its own run folder and report.json) with the view, summary and exit codes of
`gpubring up`; a step that does not succeed stops the next. The first control plane is refused: it
initialises the cluster and makes the API calls of the other steps.

Nothing here imports ansible or ansible_runner at module level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpubring import paths, report, runner, view
from gpubring.exitcodes import ExitCode
from gpubring.model import Inventory
from gpubring.runopts import RunOptions
from gpubring.yamlfile import did_you_mean

if TYPE_CHECKING:
    from rich.console import Console

ACTIONS = ("add", "replace", "remove")
ADD_PLAYBOOK = "node_add.yml"
REMOVE_PLAYBOOK = "node_remove.yml"
FORCE_VAR = "node_remove_force"


class NodeError(ValueError):
    """Node names that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Step:
    """One playbook run of a node operation."""

    command: str  # the run folder's command name: node-add, node-replace, node-remove
    playbook: Path
    limit: str
    purpose: str
    extra_vars: Mapping[str, Any] = field(default_factory=dict)


def first_control_plane(inv: Inventory) -> str:
    members = inv.groups.get("control_plane") or ()
    return members[0] if members else ""


def check_nodes(inv: Inventory, names: Sequence[str]) -> tuple[str, ...]:
    """The nodes asked for, each once, in order. NodeError for a name that is not a host of the
    inventory (with a did-you-mean) or for the first control plane."""
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


def settings(inv: Inventory, step: Step, options: RunOptions) -> runner.RunSettings:
    """The runner settings of one step: the operator's options with the step's --limit, and the
    step's own variables after the operator's -e."""
    extra = (*options.extra_vars, dict(step.extra_vars)) if step.extra_vars else options.extra_vars
    return runner.RunSettings(
        inventory_root=inv.root,
        hosts_file=inv.hosts_file,
        command=step.command,
        playbook=step.playbook,
        serial=str(inv.settings["gpubring_serial"]),
        options=replace(options, extra_vars=extra, limit=step.limit),
    )


def run_steps(
    inv: Inventory,
    steps: Sequence[Step],
    options: RunOptions,
    *,
    title: str,
    console: Console | None = None,
) -> ExitCode:
    """Run the steps in order, each with the live view and summary of `gpubring up`; stop at the
    first step that does not succeed. Returns the exit code of the last step run; the options'
    json_report (--json) gets that step's report."""
    console = console or view.console()
    mode = " (check mode)" if options.check else ""
    code = ExitCode.OK
    last: Mapping[str, Any] | None = None
    for number, step in enumerate(steps, start=1):
        counter = f" [{number}/{len(steps)}]" if len(steps) > 1 else ""
        live = view.RunView(console)
        live.intro(f"{title}{mode}{counter}: {step.purpose}", (), ())
        with live:
            result = runner.run(settings(inv, step, options), on_event=live.handle)
        view.summary(console, result.report)
        code, last = result.exit_code, result.report
        if code != ExitCode.OK:
            if number < len(steps):
                console.print(f"not run: {', '.join(s.purpose for s in steps[number:])}")
            break
    if options.json_report is not None and last is not None:
        try:
            report.write_copy(last, options.json_report)
        except OSError as exc:
            view.error(f"--json {options.json_report}: {exc.strerror or exc}")
    return code
