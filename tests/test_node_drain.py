"""The node_drain role's decisions, through its filter plugin (plugins/filter/node_drain.py), on Node and
Pod objects in the API's shape (tests/fixtures/node_drain: what `kubectl get node -o json` and `kubectl
get pods -A --field-selector spec.nodeName=... -o json` return, written by hand with the labels and
annotations the upstream controllers set, cited in the plugin): who cordoned a node, which pods a
GPU-aware drain waits for, which pods keep a node from being empty. Then the inventory checks of the
role's inputs (meta/formats.yml) and the filters by FQCN inside a real Ansible run."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from gpubring.inventory import InventoryError, load_inventory
from helpers import FIXTURES, REPO, ansible_playbook, collection_module

FILTERS: dict[str, Callable[..., Any]] = collection_module("filter.node_drain").FilterModule().filters()
cordoned_by = FILTERS["node_drain_cordoned_by"]
workloads = FILTERS["node_drain_workloads"]
workload_names = FILTERS["node_drain_workload_names"]
remaining = FILTERS["node_drain_remaining_pods"]

DATA = FIXTURES / "node_drain"
KEY = "gpubring.io/cordoned-by"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("node-schedulable.json", ""),
        # cordoned with `kubectl cordon` by an operator (an XID error): no annotation of gpubring's
        ("node-operator-cordoned.json", "operator"),
        ("node-gpubring-cordoned.json", "gpubring"),
    ],
)
def test_who_cordoned_the_node(fixture: str, expected: str) -> None:
    assert cordoned_by(load(fixture), KEY, "gpubring") == expected


def test_an_annotation_of_another_value_is_not_gpubrings() -> None:
    node = load("node-gpubring-cordoned.json")
    node["metadata"]["annotations"][KEY] = "someone-else"
    assert cordoned_by(node, KEY, "gpubring") == "operator"
    # an annotation left on a schedulable node (uncordoned by hand) makes it schedulable, not gpubring's
    node["spec"]["unschedulable"] = False
    assert cordoned_by(node, KEY, "gpubring") == ""


def test_the_workloads_a_gpu_aware_drain_waits_for() -> None:
    found = workloads(load("pods-training.json"))
    assert [(w["namespace"], w["pod"], w["kind"], w["marker"]) for w in found] == [
        ("team-a", "bert-finetune-0-q8s7d", "kueue", "kueue.x-k8s.io/podset"),
        ("team-b", "nightly-eval-2b7xk", "job", "ownerReferences"),
        ("team-c", "sweep-worker-3", "kueue", "kueue.x-k8s.io/pod-group-name"),
        ("research", "mpi-bench-mpi-0", "volcano", "volcano.sh/job-name"),
        ("research", "llama-pretrain-worker-1", "kubeflow", "training.kubeflow.org/job-name"),
        ("vision", "resnet-train-0-kd92j", "kai", "pod-group-name"),
    ]
    assert workload_names(found) == [
        "Job team-a/bert-finetune (Kueue)",
        "Job team-b/nightly-eval",
        "Kueue pod group team-c/sweep",
        "Volcano Job research/mpi-bench",
        "PyTorchJob research/llama-pretrain",
        "KAI PodGroup vision/pg-resnet-train-0c4e",
    ]


def test_services_daemonsets_and_finished_pods_are_not_waited_for() -> None:
    # A Deployment's pod that KAI annotated with its pod group, DaemonSet pods: nothing to wait for.
    assert workloads(load("pods-services.json")) == []
    pods = load("pods-training.json")
    finished = [p for p in pods["items"] if p["status"]["phase"] == "Succeeded"]
    assert finished and workloads(finished) == []
    # a terminating pod goes anyway: the drain's own wait covers it
    job = dict(
        pods["items"][4],
        metadata={**pods["items"][4]["metadata"], "deletionTimestamp": "2026-11-27T10:00:00Z"},
    )
    assert workloads([job]) == []


def test_a_volcano_podgroup_alone_is_a_gang() -> None:
    pod = load("pods-training.json")["items"][7]
    pod["metadata"]["labels"].pop("volcano.sh/job-name")
    pod["metadata"]["annotations"].pop("volcano.sh/job-name")
    [found] = workloads([pod])
    assert found["workload"] == "Volcano PodGroup research/mpi-bench-5b2f0c1e"


def test_the_pods_that_keep_a_node_from_being_empty() -> None:
    pods = load("pods-training.json")
    mirror = {
        "metadata": {
            "name": "kube-vip-gpu01",
            "namespace": "kube-system",
            "annotations": {"kubernetes.io/config.mirror": "5d1f"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "gpu01", "controller": True}],
        },
        "status": {"phase": "Running"},
    }
    left = remaining({"items": [*pods["items"], mirror]})
    assert left == [
        "inference/triton-6d9f7c8b5-4hz2m",
        "team-a/bert-finetune-0-q8s7d",
        "team-b/nightly-eval-2b7xk",
        "team-c/sweep-worker-3",
        "research/mpi-bench-mpi-0",
        "research/llama-pretrain-worker-1",
        "vision/resnet-train-0-kd92j",
    ]
    assert remaining({"items": pods["items"][:2]}) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cordoned_by("gpu01", KEY), "node_drain_cordoned_by: expected a Node object"),
        (lambda: workloads("no pods"), "node_drain_workloads: expected a PodList"),
        (lambda: workloads({"items": ["x"]}), "node_drain_workloads: expected a Pod"),
        (lambda: remaining(None), "node_drain_remaining_pods: expected a PodList"),
        (lambda: workload_names("x"), "node_drain_workload_names: expected node_drain_workloads' list"),
    ],
)
def test_filters_refuse_what_is_not_an_api_object(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        call()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node_drain_timeout: 0s\n", "node_drain_timeout: expected a positive duration such as 90s"),
        ("node_drain_timeout: 600\n", "node_drain_timeout: expected a positive duration such as 90s"),
        ("node_drain_workload_wait_timeout: -5\n", "node_drain_workload_wait_timeout: expected a number"),
        ("node_drain_workload_wait_timeout: 172800\n", "node_drain_workload_wait_timeout: expected a number"),
        ("node_drain_pods_gone_timeout: 0\n", "node_drain_pods_gone_timeout: expected a number"),
        ("node_drain_wait_for_workloads: sometimes\n", "node_drain_wait_for_workloads: expected"),
        (
            "node_drain_workload_timeout_action: skip\n",
            "node_drain_workload_timeout_action: expected one of drain, fail",
        ),
    ],
)
def test_bad_drain_inputs_are_refused_before_any_host(
    make_inventory: Callable[..., Path], text: str, expected: str
) -> None:
    inventory = make_inventory({"group_vars/all/drain.yml": text})
    with pytest.raises(InventoryError) as err:
        load_inventory(inventory)
    messages = [str(p) for p in err.value.problems]
    assert any(m.startswith(f"group_vars/all/drain.yml: {expected}") for m in messages), messages


def test_good_drain_inputs_pass(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory(
        {
            "group_vars/all/drain.yml": "node_drain_timeout: 1h30m\nnode_drain_wait_for_workloads: true\n"
            "node_drain_workload_wait_timeout: 7200\nnode_drain_workload_timeout_action: fail\n"
        }
    )
    assert load_inventory(inventory).hosts


def test_filters_by_fqcn_in_ansible(tmp_path: Path) -> None:
    """The role's plan step (tasks_from: plan) in a real ansible-playbook run, on the recorded objects."""
    play = tmp_path / "plan.yml"
    play.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "ansible.builtin.include_role": {
                                "name": "gpubring.core.node_drain",
                                "tasks_from": "plan",
                            },
                            "vars": {
                                "node_drain_wait_for_workloads": True,
                                "__node_drain_node_object": load("node-operator-cordoned.json"),
                                "__node_drain_pod_list": load("pods-training.json"),
                            },
                        },
                        {"ansible.builtin.debug": {"var": "__node_drain_plan"}},
                    ],
                }
            ]
        )
    )
    done = ansible_playbook("-i", "localhost,", "-c", "local", play)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "was cordoned by an operator (no gpubring.io/cordoned-by annotation): the cordon is kept"
        in done.stdout
    )
    assert re.search(r"\bcordon: false", done.stdout) and re.search(r"\buncordon: false", done.stdout), (
        done.stdout
    )
    assert (
        "for 6 workload(s) to finish (Job team-a/bert-finetune (Kueue), Job team-b/nightly-eval,"
        in done.stdout
    )


def _tasks(node: Any) -> list[dict[str, Any]]:
    """Every task mapping in a parsed playbook or task file, blocks and plays included."""
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for item in node:
            found.extend(_tasks(item))
    elif isinstance(node, dict):
        found.append(node)
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            found.extend(_tasks(node.get(key)))
    return found


def test_every_drain_goes_through_the_drain_role() -> None:
    """No play or role drains with kubernetes.core.k8s_drain (no retry of a refused eviction, no wait for
    the pods before what follows) or its own kubectl drain: node_remove.yml included (issue 21 item 6)."""
    offenders = []
    files = [*(REPO / "playbooks").glob("*.yml"), *(REPO / "roles").glob("*/tasks/*.yml")]
    for path in files:
        if path.parts[-3] == "node_drain":
            continue
        for task in _tasks(yaml.safe_load(path.read_text())):
            drain = task.get("kubernetes.core.k8s_drain")
            if isinstance(drain, dict) and drain.get("state", "drain") == "drain":
                offenders.append(f"{path.relative_to(REPO)}: {task.get('name')}")
            argv = (
                (task.get("ansible.builtin.command") or {})
                if isinstance(task.get("ansible.builtin.command"), dict)
                else {}
            )
            if "drain" in map(str, argv.get("argv") or []) or re.search(
                r"kubectl\b.*\bdrain\b", str(task.get("ansible.builtin.shell", ""))
            ):
                offenders.append(f"{path.relative_to(REPO)}: {task.get('name')}")
    assert offenders == []
    remove = (REPO / "playbooks" / "node_remove.yml").read_text()
    assert "node_remove_drain_timeout" not in remove  # the timeout is the inventory's node_drain_timeout
    drains = [t for t in _tasks(yaml.safe_load(remove)) if t.get("name") == "Drain the node"]
    assert [t["ansible.builtin.include_role"] for t in drains] == [
        {"name": "gpubring.core.node_drain", "tasks_from": "drain"}
    ]


def test_uncordon_undoes_only_gpubrings_cordon_as_read_from_the_node() -> None:
    """Issue 21 item 7: uncordon.yml's only write is conditioned on the decision plan.yml takes from the
    Node it reads (plan.uncordon: gpubring's annotation on a cordoned node), never on whether this run's
    `kubectl drain` reported a change (which it always did: every operator's cordon was undone)."""
    role = REPO / "roles" / "node_drain" / "tasks"
    tasks = _tasks(yaml.safe_load((role / "uncordon.yml").read_text()))
    writes = [
        t
        for t in tasks
        if "ansible.builtin.command" in t and "get" not in t["ansible.builtin.command"]["argv"]
    ]
    assert [t["when"] for t in writes] == ["__node_drain_plan.uncordon | bool"]
    assert "__node_drain_node_found.stdout | from_json" in str(tasks)
    assert (
        "__node_drain_drained" not in (role / "drain.yml").read_text() + (role / "uncordon.yml").read_text()
    )
