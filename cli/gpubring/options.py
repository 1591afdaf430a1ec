"""Options shared by the commands that run playbooks, defined once."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gpubring.commands._common import json_target
from gpubring.exitcodes import ExitCode
from gpubring.runopts import ExtraVarsSource, RunOptions

InventoryArg = Annotated[
    Path,
    typer.Argument(help="Inventory folder (with hosts.yml and group_vars/) or an inventory file."),
]
Limit = Annotated[
    str | None, typer.Option("--limit", "-l", help="Run only on these hosts (Ansible pattern).")
]
Tags = Annotated[
    str | None, typer.Option("--tags", "-t", help="Run only tasks with these tags (comma list).")
]
SkipTags = Annotated[str | None, typer.Option("--skip-tags", help="Skip tasks with these tags (comma list).")]
Check = Annotated[bool, typer.Option("--check", "-C", help="Check mode: report what would change.")]
Diff = Annotated[bool, typer.Option("--diff", "-D", help="Show differences in changed files.")]
ExtraVars = Annotated[
    list[str] | None,
    typer.Option("--extra-vars", "-e", help="KEY=VALUE or @file (YAML/JSON); may repeat."),
]
Forks = Annotated[int, typer.Option("--forks", "-f", min=1, help="Hosts worked on in parallel.")]
JsonReport = Annotated[
    Path | None,
    typer.Option("--json", callback=json_target, help="Also write the run report as JSON here."),
]
Only = Annotated[
    str | None,
    typer.Option("--only", metavar="PHASES", help="Run only these phases (comma list, e.g. preflight,host)."),
]
FromPhase = Annotated[
    str | None, typer.Option("--from", metavar="PHASE", help="Run from this phase through the last one.")
]
Accelerate = Annotated[
    bool,
    typer.Option(
        "--accelerate/--no-accelerate",
        help="Use Mitogen's strategy when it is installed and supports this ansible-core; else linear.",
    ),
]
Shards = Annotated[
    int | None,
    typer.Option(
        "--shards",
        min=1,
        help="ansible-playbook processes for the host phase, over disjoint slices of the hosts "
        "(default: the inventory's gpubring_shards, auto = the controller's cores).",
    ),
]
Verbose = Annotated[
    int,
    typer.Option(
        "--verbose", "-v", count=True, help="Pass -v to ansible and show its output (repeat for more)."
    ),
]


def _keyword(name: str, annotation: object, default: object) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


# In `gpubring --help` order; the defaults are RunOptions'.
_TARGET_PARAMETERS = (
    _keyword("limit", Limit, RunOptions.limit),
    _keyword("tags", Tags, RunOptions.tags),
    _keyword("skip_tags", SkipTags, RunOptions.skip_tags),
)
_RUN_PARAMETERS = (
    _keyword("check", Check, RunOptions.check),
    _keyword("diff", Diff, RunOptions.diff),
    _keyword("extra_vars", ExtraVars, None),
    _keyword("forks", Forks, RunOptions.forks),
    _keyword("json_report", JsonReport, RunOptions.json_report),
    _keyword("accelerate", Accelerate, RunOptions.accelerate),
    _keyword("verbose", Verbose, RunOptions.verbosity),
)


def _run_options(func: Callable[..., None], added: tuple[inspect.Parameter, ...]) -> Callable[..., None]:
    own = inspect.signature(func, eval_str=True)
    parameters = [p for p in own.parameters.values() if p.name != "run"] + list(added)

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> None:
        given = {p.name: kwargs.pop(p.name) for p in added if p.name in kwargs}
        func(*args, run=build(**given), **kwargs)

    # Typer reads the signature and the type hints.
    command.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    return command


def build(*, extra_vars: Sequence[str] | None = None, verbose: int = 0, **given: Any) -> RunOptions:
    """The RunOptions of the options given on the command line, -e parsed. A bad -e is bad input:
    `error: ...` on stderr and exit 2, before anything runs."""
    # Not at import: `gpubring --help` reads no YAML.
    from gpubring.runopts import ExtraVarsError, parse_extra_vars

    try:
        parsed = parse_extra_vars(extra_vars or ())
    except ExtraVarsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=ExitCode.BAD_INPUT) from None
    for warning in extra_vars_warnings(parsed):
        typer.echo(f"warning: {warning}", err=True)
    return RunOptions(extra_vars=parsed, verbosity=verbose, **given)


def extra_vars_warnings(sources: Sequence[ExtraVarsSource]) -> list[str]:
    """One line per -e key that nothing declares (no role's argument spec or defaults, no
    settings.yml setting, no version rule, not the vars plugin's, not Ansible's own ansible_* or
    magic variables), with a did-you-mean when a declared key is close. A warning, not an error:
    operators pass their own variables; a typo of a role input would otherwise do nothing, silently.
    The keys of a vault-encrypted -e @file are not known here and not looked at."""
    from gpubring.validation import specs  # not at import: `gpubring --help` reads no YAML

    table = specs.load_specs()
    out: list[str] = []
    seen: set[str] = set()
    for source in sources:
        if isinstance(source, Path):
            continue
        for raw_key in source:
            key = str(raw_key)
            message = None if key in seen else table.undeclared_message(key)
            seen.add(key)
            if message is not None:
                out.append(f"-e {key}: {message}")
    return out


def phase_run_options(func: Callable[..., None]) -> Callable[..., None]:
    """targeted_run_options with --shards (`gpubring up`: the host phase runs sharded)."""
    return _run_options(func, _TARGET_PARAMETERS + _RUN_PARAMETERS + (_keyword("shards", Shards, None),))


def run_options(func: Callable[..., None]) -> Callable[..., None]:
    """Give a command the run options (--check, --diff, -e, --forks, --json, --accelerate, -v).

    Typer sees them after the command's own parameters; the command receives them as
    `run: RunOptions` (gpubring.runopts), -e parsed.
    """
    return _run_options(func, _RUN_PARAMETERS)


def targeted_run_options(func: Callable[..., None]) -> Callable[..., None]:
    """run_options with --limit, --tags and --skip-tags first (`gpubring up`)."""
    return _run_options(func, _TARGET_PARAMETERS + _RUN_PARAMETERS)
