# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filter of the helm role: what one readiness check of a release waits for, in words.

helm_ready_text(entry) -> str
    entry is an item of a release's `ready` (roles/helm/meta/argument_specs.yml, entry point
    `release`). The same words appear in the run (the task name, the failure) and in
    `gpubring plan` (cli/gpubring/releases.py renders them through this filter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def helm_ready_text(entry: Mapping[str, Any]) -> str:
    kind = str(entry.get("kind", ""))
    where = f" in {entry['namespace']}" if entry.get("namespace") else ""
    selectors = [*(entry.get("field_selectors") or []), *(entry.get("label_selectors") or [])]
    chosen = f" ({', '.join(str(s) for s in selectors)})" if selectors else ""
    if entry.get("min_count") is not None:
        what = f"at least {int(entry['min_count'])} {kind}{chosen}{where}"
    elif entry.get("condition"):
        what = f"{kind} {entry.get('name', '')}{where}{chosen} condition {entry['condition']}=True"
    else:
        what = f"{kind} {entry.get('name', '')}{where}{chosen} status.state={entry.get('state') or 'ready'}"
    return f"{what}: {entry['why']}" if entry.get("why") else what


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"helm_ready_text": helm_ready_text}
