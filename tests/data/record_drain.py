"""Record tests/fixtures/events/drain.jsonl: ansible-runner runs, on two local hosts, the node_drain
role's decision (tasks_from: plan, on the Node and Pod objects of tests/fixtures/node_drain) and then
the very task of roles/node_drain/tasks/drain.yml that publishes `node_drain_report` (read from that
file, not copied), so the recorded set_fact has the shape the role gives it. No API server runs here:
the cordon, the wait and the drain between the two are not run; what the wait found is set as
wait.yml sets it (`__node_drain_waited`: seconds, workloads left at the bound).

    gpu01  an operator's cordon, kept; waited 3600 s for its Jobs and gang workloads, two still ran
           at the bound (node_drain_workload_timeout_action: drain evicted them)
    gpu02  schedulable (gpubring cordons it), no workload wait

    .venv/bin/python tests/data/record_drain.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

from gpubring.paths import collections_path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OBJECTS = HERE.parent / "fixtures" / "node_drain"
OUT = HERE.parent / "fixtures" / "events" / "drain.jsonl"
PUBLISH = "Publish the drain's report (node_drain_report)"


def publish_task() -> dict[str, Any]:
    """drain.yml's task that sets node_drain_report, as the role has it."""
    drain = yaml.safe_load((REPO / "roles" / "node_drain" / "tasks" / "drain.yml").read_text())
    for task in drain:
        for inner in task.get("block") or ():
            if inner.get("name") == PUBLISH:
                return dict(inner)
    raise SystemExit(f"no task {PUBLISH!r} in roles/node_drain/tasks/drain.yml")


def playbook() -> list[dict[str, Any]]:
    def load(name: str) -> Any:
        return json.loads((OBJECTS / name).read_text())

    return [
        {
            "name": "Drain reports as node_drain publishes them",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "__node_drain_node": "{{ inventory_hostname }}",
                "__objects": {
                    "gpu01": [load("node-operator-cordoned.json"), load("pods-training.json"), True],
                    "gpu02": [load("node-schedulable.json"), load("pods-services.json"), False],
                },
            },
            "tasks": [
                {
                    "name": "Decide the drain from the Node and its pods",
                    "ansible.builtin.include_role": {
                        "name": "gpubring.core.node_drain",
                        "tasks_from": "plan",
                    },
                    "vars": {
                        "node_drain_wait_for_workloads": "{{ __objects[inventory_hostname][2] }}",
                        "__node_drain_node_object": "{{ __objects[inventory_hostname][0] }}",
                        "__node_drain_pod_list": "{{ __objects[inventory_hostname][1] }}",
                    },
                },
                {
                    "name": "Note how long the wait took and what still runs (as wait.yml does)",
                    "ansible.builtin.set_fact": {
                        "__node_drain_waited": {
                            "seconds": "{{ 3600 | int }}",
                            "left": "{{ __node_drain_plan.workloads[:2] }}",
                        }
                    },
                    "when": "__node_drain_plan.wait | bool",
                },
                publish_task(),
            ],
        }
    ]


def main() -> int:
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections_path()),
    }
    inventory = {"all": {"hosts": {h: {"ansible_connection": "local"} for h in ("gpu01", "gpu02")}}}
    with tempfile.TemporaryDirectory() as tmp:
        play = Path(tmp) / "drain.yml"
        play.write_text(json.dumps(playbook()))
        runner = ansible_runner.run(
            private_data_dir=tmp,
            playbook=str(play),
            inventory=json.dumps(inventory),
            envvars=env,
            quiet=True,
        )
        lines = []
        for event in runner.events:
            event.pop("stdout", None)
            for key in ("uuid", "parent_uuid", "created", "pid", "runner_ident", "start_line", "end_line"):
                event.pop(key, None)
            data = event.get("event_data", {})
            for key in ("task_path", "uuid", "parent_uuid", "playbook_uuid", "play_uuid", "task_uuid"):
                data.pop(key, None)
            if "playbook" in data:
                data["playbook"] = Path(data["playbook"]).name
            if isinstance(data.get("res"), dict):
                data["res"].pop("invocation", None)
                # The role's path on the recording machine (argument validation): relative to the checkout.
                context = data["res"].get("validate_args_context")
                if isinstance(context, dict) and str(context.get("path", "")).startswith(str(REPO)):
                    context["path"] = str(Path(context["path"]).relative_to(REPO))
            lines.append(json.dumps(event, sort_keys=True))
        summary = f"{len(lines)} events, rc {runner.rc}, stats {runner.stats}"
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {summary}")
    return 0 if runner.rc == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
