"""`gpubring check INVENTORY`: validate, then probe every host over SSH (reach, login, sudo, OS, kernel).

A host whose /etc/os-release meta/os_support.yml does not list fails (problem `os`, "unsupported OS").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpubring.commands._common import json_target
from gpubring.exitcodes import ExitCode
from gpubring.options import ExtraVars, InventoryArg, Limit

if TYPE_CHECKING:
    from rich.console import Console

    from gpubring.probe import ProbeResult, ToolVersion

JsonOut = Annotated[
    str | None,
    typer.Option(
        "--json", callback=json_target, metavar="PATH|-", help="Also write the results as JSON ('-': stdout)."
    ),
]
AcceptNew = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys",
        help="Record unknown host keys in the known_hosts file in use (changed keys are still refused).",
    ),
]
Timeout = Annotated[float, typer.Option("--timeout", min=0.5, help="Seconds allowed per host.")]
Parallel = Annotated[int, typer.Option("--parallel", min=1, help="Hosts probed at once.")]


def command(
    inventory: InventoryArg,
    *,
    limit: Limit = None,
    extra_vars: ExtraVars = None,
    json_out: JsonOut = None,
    accept_new_host_keys: AcceptNew = False,
    timeout: Timeout = 10.0,
    parallel: Parallel = 16,
) -> None:
    """Check every host is reachable over SSH, accepts the key, has passwordless sudo, runs a supported OS."""
    from rich.console import Console

    from gpubring import probe
    from gpubring.commands._common import load_or_exit
    from gpubring.yamlfile import YamlError

    inv = load_or_exit(inventory)
    overrides = _extra_vars(extra_vars or [])
    try:
        hosts = probe.select_hosts(inv, limit)
    except probe.LimitError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    if not hosts:
        typer.echo(f"error: --limit {limit!r} matches no host of {inventory}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    # With `--json -` stdout carries the JSON alone; the human view goes to stderr.
    console = Console(stderr=json_out == "-", highlight=False)
    settings = probe.ProbeSettings(
        timeout=timeout, parallel=parallel, accept_new_host_keys=accept_new_host_keys
    )
    try:
        targets = [probe.target_for(h, overrides) for h in hosts]
    except probe.SshConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    try:
        supported = probe.supported_os()
    except YamlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    with console.status(f"probing {len(targets)} host(s), {min(parallel, len(targets))} at a time"):
        results = probe.probe_hosts(targets, settings, supported=supported)
    tools, collections = probe.tool_versions(), probe.collection_versions()
    render(console, results, tools, collections)
    if json_out:
        document = report(inv.root, results, tools, collections)
        text = json.dumps(document, indent=2) + "\n"
        if json_out == "-":
            sys.stdout.write(text)
        else:
            try:
                from gpubring.runstore import write_private

                write_private(Path(json_out), text)  # it names hosts and users: 0600
            except OSError as exc:
                typer.echo(f"error: cannot write --json {json_out}: {exc.strerror}", err=True)
                raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    if not all(r.ok for r in results):
        raise typer.Exit(code=ExitCode.UNREACHABLE)


def _extra_vars(args: list[str]) -> dict[str, Any]:
    """-e as `gpubring up` parses it, merged as Ansible merges it (a later key replaces); its
    ansible_* connection variables beat the inventory's, as in a run."""
    from gpubring.runopts import ExtraVarsError, parse_extra_vars

    merged: dict[str, Any] = {}
    try:
        for source in parse_extra_vars(args):
            if isinstance(source, Path):
                raise ExtraVarsError(
                    f"-e @{source}: vault-encrypted (or holds !vault/!unsafe values); gpubring check "
                    "cannot read it: pass the connection variables it sets as KEY=VALUE"
                )
            merged.update(source)
    except ExtraVarsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    return merged


def _mark(value: bool | None) -> str:
    return {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]-[/]"}[value]


def render(
    console: Console, results: list[ProbeResult], tools: list[ToolVersion], collections: dict[str, str | None]
) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="gpubring check", title_justify="left")
    for column in ("host", "address", "reachable", "auth", "sudo", "OS", "kernel", "problem"):
        table.add_column(column, overflow="fold")
    for r in results:
        sudo = {"root": "[green]root[/]", "passwordless": "[green]yes[/]", "no": "[red]no[/]"}
        os_name = (r.os.pretty_name or f"{r.os.id} {r.os.version_id}") if r.os else "-"
        unsupported = r.problem is not None and r.problem.kind == "os"
        table.add_row(
            escape(r.name),
            f"{r.address}:{r.port}",
            _mark(r.reachable),
            _mark(r.authenticated),
            sudo.get(r.sudo or "", "[dim]-[/]"),
            f"[red]{escape(os_name)}[/]" if unsupported else escape(os_name),
            escape(r.kernel or "-"),
            f"[red]{escape(r.problem.label)}[/]" if r.problem else "[green]ok[/]",
        )
    console.print(table)
    for r in results:
        if r.problem:
            console.print(f"[red]{escape(r.name)}[/]: {escape(r.problem.message)}", soft_wrap=True)
    described = [f"{t.name} {t.describe()}" for t in tools]
    described += [f"{name} {version or 'not installed'}" for name, version in collections.items()]
    console.print("tools: " + ", ".join(described), soft_wrap=True, style="dim")
    failed = sum(not r.ok for r in results)
    verdict = (
        "[green]all hosts ready[/]" if not failed else f"[red]{failed} of {len(results)} host(s) not ready[/]"
    )
    console.print(verdict)


def report(
    root: Path, results: list[ProbeResult], tools: list[ToolVersion], collections: dict[str, str | None]
) -> dict[str, Any]:
    from dataclasses import asdict

    from gpubring.probe import result_to_json

    return {
        "inventory": str(root),
        "ok": all(r.ok for r in results),
        "summary": {"hosts": len(results), "ok": sum(r.ok for r in results)},
        "hosts": [result_to_json(r) for r in results],
        "tools": [asdict(t) for t in tools],
        "collections": collections,
    }
