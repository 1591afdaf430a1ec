"""`gpubring node add | replace | remove`: one node's lifecycle, without re-running the cluster.

Validation first (inventory, node names, -e): bad input touches no host (exit 2). The logic lives in
gpubring.nodeops; each run has the view, summary, run folder and exit codes of `gpubring up`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from gpubring.exitcodes import ExitCode
from gpubring.options import Accelerate, Check, Diff, ExtraVars, Forks, InventoryArg, JsonReport, Verbose

app = typer.Typer(
    help="Add, replace or remove nodes: only these nodes are touched (the cluster is not re-run).",
    no_args_is_help=True,
)

Nodes = Annotated[list[str], typer.Argument(help="Hosts of the inventory to add (one or more).")]
NodeArg = Annotated[str, typer.Argument(help="A host of the inventory.")]
Force = Annotated[
    bool,
    typer.Option("--force", help="The node is unreachable (dead hardware): remove it without touching it."),
]


def _run(action: str, args: Mapping[str, Any]) -> None:
    """Validate, then run the steps of `action`; `args` are the command's parameters."""
    # Imported here: `gpubring --help` must not load the inventory model, rich or the runner.
    from gpubring import nodeops, runner
    from gpubring.inventory import load_or_exit

    inv = load_or_exit(args["inventory"])
    try:
        nodes = nodeops.check_nodes(inv, args["nodes"] if "nodes" in args else [args["node"]])
        sources = runner.parse_extra_vars(args["extra_vars"] or [])
    except (nodeops.NodeError, runner.ExtraVarsError) as exc:
        for line in str(exc).splitlines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    options = nodeops.RunOptions(
        extra_vars=sources,
        check=args["check"],
        diff=args["diff"],
        forks=args["forks"],
        verbosity=args["verbose"],
        accelerate=args["accelerate"],
    )
    code = nodeops.run_steps(
        inv,
        nodeops.plan(action, nodes, force=args.get("force", False)),
        options,
        title=f"gpubring node {action} {args['inventory']} {' '.join(nodes)}",
        json_report=args["json_report"],
    )
    raise typer.Exit(code=int(code))


@app.command("add")
def add(
    inventory: InventoryArg,
    nodes: Nodes,
    *,
    extra_vars: ExtraVars = None,
    check: Check = False,
    diff: Diff = False,
    forks: Forks = 10,
    json_report: JsonReport = None,
    accelerate: Accelerate = True,
    verbose: Verbose = 0,
) -> None:
    """Add hosts already in the inventory: preflight, host roles, join, labels, verify; nothing else.

    Exit 1 when a task failed, 4 when a host was unreachable, 3 when cancelled, 2 on bad input.
    """
    _run("add", locals())


@app.command("replace")
def replace(
    inventory: InventoryArg,
    node: NodeArg,
    *,
    extra_vars: ExtraVars = None,
    check: Check = False,
    diff: Diff = False,
    forks: Forks = 10,
    json_report: JsonReport = None,
    accelerate: Accelerate = True,
    verbose: Verbose = 0,
) -> None:
    """Bring back a host after a fresh OS install: remove its stale Node object, then add it.

    Two runs (see `gpubring runs`); the add does not start when the removal failed.
    """
    _run("replace", locals())


@app.command("remove")
def remove(
    inventory: InventoryArg,
    node: NodeArg,
    *,
    force: Force = False,
    extra_vars: ExtraVars = None,
    check: Check = False,
    diff: Diff = False,
    forks: Forks = 10,
    json_report: JsonReport = None,
    accelerate: Accelerate = True,
    verbose: Verbose = 0,
) -> None:
    """Remove a node from the cluster: drain, kubeadm reset, etcd member, Node object.

    With --force for an unreachable node: nothing runs on it (cordon, etcd member, Node object).
    Take the host out of hosts.yml afterwards.
    """
    _run("remove", locals())
