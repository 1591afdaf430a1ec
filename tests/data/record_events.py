"""Record tests/fixtures/events/mixed.jsonl: run playbooks/mixed.yml with ansible-runner against
inventories/record.yml (localhost and an unreachable host) and keep the job events, one JSON object
a line, with the bulky display fields trimmed.

    .venv/bin/python tests/data/record_events.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import ansible_runner

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "fixtures" / "events" / "mixed.jsonl"


def main() -> int:
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory() as tmp:
        runner = ansible_runner.run(
            private_data_dir=tmp,
            playbook=str(HERE / "playbooks" / "mixed.yml"),
            inventory=[str(HERE / "inventories" / "record.yml")],
            envvars=env,
            quiet=True,
        )
        lines = []
        for event in runner.events:
            event.pop("stdout", None)
            data = event.get("event_data", {})
            data.pop("task_path", None)
            if "playbook" in data:
                data["playbook"] = Path(data["playbook"]).name
            if isinstance(data.get("res"), dict):
                data["res"].pop("invocation", None)
            lines.append(json.dumps(event, sort_keys=True))
        summary = f"{len(lines)} events, rc {runner.rc}, stats {runner.stats}"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
