# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filter of the monitoring role: the text of a Grafana dashboard kept in roles/monitoring/files/.

Filter (FQCN gpubring.core.monitoring_dashboard):

monitoring_dashboard(name) -> str
    The file's text, unchanged, after checking that it is a Grafana dashboard (a JSON object with a
    title and panels). Not a template: a dashboard's legends hold Grafana's own `{{gpu}}`, which Jinja
    would evaluate, and not a lookup: `gpubring plan` renders the releases without lookups
    (cli/gpubring/releases.py), and this renders the same there as in a run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

# The collection's root: plugins/filter/<this file> -> ../../
_FILES = Path(__file__).resolve().parents[2] / "roles" / "monitoring" / "files"


def monitoring_dashboard(name: Any) -> str:
    if not isinstance(name, str) or not name.endswith(".json") or Path(name).name != name:
        raise AnsibleFilterError(
            f"monitoring_dashboard: expected the name of a .json file of roles/monitoring/files, got {name!r}"
        )
    path = _FILES / name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AnsibleFilterError(
            f"monitoring_dashboard: cannot read {path} ({exc.strerror or exc})"
        ) from None
    try:
        board = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnsibleFilterError(f"monitoring_dashboard: {name} is not JSON ({exc})") from None
    if not isinstance(board, dict) or not board.get("title") or not isinstance(board.get("panels"), list):
        raise AnsibleFilterError(f"monitoring_dashboard: {name} is not a Grafana dashboard (title, panels)")
    return text


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"monitoring_dashboard": monitoring_dashboard}
