"""Options shared by the commands that run playbooks, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
JsonReport = Annotated[Path | None, typer.Option("--json", help="Also write the run report as JSON here.")]
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
