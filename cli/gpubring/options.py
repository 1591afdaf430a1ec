"""Options shared by the commands that run playbooks, defined once."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import typer

from gpubring.commands._common import json_target

if TYPE_CHECKING:
    from gpubring.runner import ExtraVarsSource

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
Verbose = Annotated[
    int,
    typer.Option(
        "--verbose", "-v", count=True, help="Pass -v to ansible and show its output (repeat for more)."
    ),
]


class RunFields(TypedDict):
    """The runner.RunSettings fields (and nodeops.RunOptions) that the run options give."""

    extra_vars: tuple[ExtraVarsSource, ...]
    check: bool
    diff: bool
    forks: int
    verbosity: int
    accelerate: bool


@dataclass(frozen=True)
class RunArgs:
    """The run options of a command that runs playbooks, as given on the command line."""

    extra_vars: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    forks: int = 10
    json_report: Path | None = None
    accelerate: bool = True
    verbose: int = 0

    def fields(self) -> RunFields:
        """The run settings these give, -e parsed (raises runner.ExtraVarsError)."""
        from gpubring import runner

        return RunFields(
            extra_vars=runner.parse_extra_vars(self.extra_vars),
            check=self.check,
            diff=self.diff,
            forks=self.forks,
            verbosity=self.verbose,
            accelerate=self.accelerate,
        )


def _keyword(name: str, annotation: object, default: object) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


# In `gpubring --help` order; the defaults are RunArgs'.
_RUN_PARAMETERS = (
    _keyword("check", Check, RunArgs.check),
    _keyword("diff", Diff, RunArgs.diff),
    _keyword("extra_vars", ExtraVars, None),
    _keyword("forks", Forks, RunArgs.forks),
    _keyword("json_report", JsonReport, RunArgs.json_report),
    _keyword("accelerate", Accelerate, RunArgs.accelerate),
    _keyword("verbose", Verbose, RunArgs.verbose),
)


def run_options(func: Callable[..., None]) -> Callable[..., None]:
    """Give a command the run options (--check, --diff, -e, --forks, --json, --accelerate, -v).

    Typer sees them after the command's own parameters; the command receives them as `run: RunArgs`.
    """
    own = inspect.signature(func, eval_str=True)
    parameters = [p for p in own.parameters.values() if p.name != "run"] + list(_RUN_PARAMETERS)

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> None:
        given = {p.name: kwargs.pop(p.name) for p in _RUN_PARAMETERS if p.name in kwargs}
        given["extra_vars"] = tuple(given.get("extra_vars") or ())
        func(*args, run=RunArgs(**given), **kwargs)

    # Typer reads the signature and the type hints.
    command.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    return command
