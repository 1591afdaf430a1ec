"""The operator's run options: the one type `gpubring up` and `gpubring node` build from the command
line and the runner takes (runner.RunSettings.options). A leaf: it imports nothing from gpubring."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_FORKS = 10

# One -e argument, parsed (runner.parse_extra_vars): a mapping, or a file ansible reads itself
# (vault-encrypted, or holding !vault / !unsafe values).
ExtraVarsSource = Mapping[str, Any] | Path


@dataclass(frozen=True)
class RunOptions:
    """How to run, as the operator asked: -e, --limit, --tags, --skip-tags, --check, --diff, --forks,
    -v, --accelerate and --json. The same for every run of a command (node replace runs two)."""

    extra_vars: tuple[ExtraVarsSource, ...] = ()
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    check: bool = False
    diff: bool = False
    forks: int = DEFAULT_FORKS
    verbosity: int = 0
    accelerate: bool = True
    json_report: Path | None = None
