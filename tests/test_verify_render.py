"""The verify role's cluster smoke tests, proven by rendering: they need a cluster with GPUs to run.

Every template under roles/verify/templates/smoke/ is rendered for the sample inventory and the two
variant inventories of tests/data/inventories (MIG + time-slicing + Volcano; DRA + Kueue + RDMA), with
the role's defaults resolved through each inventory as Ansible resolves them
(gpubring.releases.render_template), and once with Ansible itself, which must agree:

- core objects (Namespace, Pod, batch/v1 Job) validate with kubernetes-validate at the pinned Kubernetes;
- the Volcano Job and the Kueue LocalQueue validate against the upstream CRDs (GPUBRING_UPSTREAM_DIR);
- the pods are what the tests need: pinned to their node, the GPU request only where a GPU is tested,
  the RDMA resource and IPC_LOCK only on RDMA nodes (in a namespace whose Pod Security admits them),
  the second one-GPU pod only where two GPUs exist and no time-slicing shares them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import upstream
from _render import run_play, schema_version
from gpubring import releases
from gpubring.inventory import Inventory, load_inventory
from helpers import DATA, REPO

ROLE = REPO / "roles" / "verify"
SMOKE = ROLE / "templates" / "smoke"
VARIANTS = DATA / "inventories"
INVENTORIES = {
    "prod": REPO / "inventories" / "prod",
    "mig-timeslicing": VARIANTS / "mig-timeslicing",
    "dra-kueue-rdma": VARIANTS / "dra-kueue-rdma",
}
CORE_GROUPS = ("v1", "apps/v1", "batch/v1", "resource.k8s.io/v1")
GPUS_PER_NODE = 8


@pytest.fixture(scope="module")
def inventories() -> dict[str, Inventory]:
    return {name: load_inventory(root) for name, root in INVENTORIES.items()}


def role_vars(inv: Inventory) -> Any:
    """The verify role's variables for the first control plane (where the smoke tests render)."""
    host = inv.groups["control_plane"][0]
    return releases.host_variables(inv, host, ("verify",))


def templates() -> dict[str, str]:
    names = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))["__verify_templates"]
    assert isinstance(names, dict)
    return {str(k): str(v) for k, v in names.items()}


def plan_for(inv: Inventory) -> list[dict[str, Any]]:
    """__verify_plan as cluster_plan.yml builds it: the device-plugin GPU nodes (every GPU node but the
    DRA group's when DRA is on), each with GPUS_PER_NODE of a resource (a MIG profile on the MIG groups of
    gpu_operator_mig_configs with the mixed strategy), RDMA where the role's verify_rdma_pods says so
    (every node of the sample inventories has RDMA NICs here)."""
    variables = role_vars(inv)
    dra_group = set(inv.groups.get(variables["verify_dra_group"], ())) if variables["verify_dra"] else set()
    mixed_groups = variables.get("gpu_operator_mig_configs") or {}
    mixed = variables.get("gpu_operator_mig_strategy") == "mixed"
    plan = []
    for node in inv.groups["gpu_nodes"]:
        if node in dra_group:
            continue
        mig = mixed and any(node in inv.groups.get(g, ()) for g in mixed_groups)
        plan.append(
            {
                "node": node,
                "resource": "nvidia.com/mig-1g.10gb" if mig else variables["verify_gpu_resource"],
                "allocatable": GPUS_PER_NODE,
                "rdma": bool(variables["verify_rdma_pods"]),
            }
        )
    return plan


def rendered(inv: Inventory, name: str, plan: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    text = releases.render_template(
        inv,
        f"verify/templates/{templates()[name]}",
        # DRA: the claim's pod on the first GPU node (the DRA group's nodes in a run).
        host_vars={
            "__verify_plan": plan_for(inv) if plan is None else plan,
            "__verify_dra_nodes": list(inv.groups["gpu_nodes"])[:1],
        },
    )
    objects = yaml.safe_load(text)
    assert isinstance(objects, list), f"{name}: expected a YAML list of objects"
    return objects


def all_objects(inv: Inventory) -> list[dict[str, Any]]:
    return [obj for name in templates() for obj in rendered(inv, name)]


# -- the templates ---------------------------------------------------------------------------------


def test_every_smoke_template_is_listed_and_used() -> None:
    on_disk = {p.relative_to(ROLE / "templates").as_posix() for p in SMOKE.glob("*.j2")}
    assert set(templates().values()) == on_disk
    tasks = "".join(p.read_text(encoding="utf-8") for p in (ROLE / "tasks").glob("*.yml"))
    for key in templates():
        assert f"__verify_templates.{key}" in tasks, f"no task renders the {key} template"


def test_role_defaults_follow_the_platform_inputs(inventories: dict[str, Inventory]) -> None:
    prod, mig, dra = (role_vars(inventories[n]) for n in ("prod", "mig-timeslicing", "dra-kueue-rdma"))
    assert prod["verify_control_plane"] == "cp-1"
    # The sample turns Volcano, Kueue and the Network Operator on: their checks follow.
    assert (prod["verify_gang_volcano"], prod["verify_gang_kueue"], prod["verify_rdma_pods"]) == (True,) * 3
    assert prod["verify_dra"] is False and prod["verify_dcgm_metrics"] is True
    assert prod["verify_dcgm_namespace"] == "gpu-operator"
    assert prod["verify_rdma_resource"] == "rdma/rdma_shared_device_a"
    assert mig["verify_gang_volcano"] is True and mig["verify_gang_kueue"] is False
    assert int(mig["verify_time_slicing_replicas"]) == 4
    assert dra["verify_gang_kueue"] is True and dra["verify_kueue_cluster_queue"] == "gpu-cluster-queue"
    # ComputeDomains only: the GPUs stay with the device plugin, tested through pods on every GPU node.
    assert dra["verify_dra"] is False and dra["verify_dra_group"] == "gpu_dra"
    # GPUs through DRA (all-on): every GPU node is tested through its ResourceSlices.
    all_on = load_inventory(VARIANTS / "all-on")
    assert (role_vars(all_on)["verify_dra"], role_vars(all_on)["verify_dra_group"]) == (True, "gpu_nodes")
    # KAI on in all-on: its gangs run in the first team queue of schedulers_kai_queues, else the chart's.
    kai = role_vars(all_on)
    leaves = [q["name"] for q in kai.get("schedulers_kai_queues") or [] if q.get("parent")]
    assert kai["verify_gang_kai"] is True and kai["verify_kai_queue"] == (leaves or ["default-queue"])[0]
    # KAI on in the sample, whose KAI queues are its teams' (no default-queue): it names one.
    assert prod["verify_gang_kai"] is True and prod["verify_kai_queue"] == "ml-training"
    assert prod["verify_gang_held_seconds"] == 60 and prod["verify_dra_device_class"] == "gpu.nvidia.com"
    assert plan_for(all_on) == []
    assert dra["verify_rdma_pods"] is True


def test_sample_pods(inventories: dict[str, Inventory]) -> None:
    inv = inventories["prod"]
    pods = rendered(inv, "pods")
    names = [p["metadata"]["name"] for p in pods]
    nodes = list(inv.groups["gpu_nodes"])
    expected = []
    for n, _node in enumerate(nodes, start=1):
        # The sample's Network Operator: each one-GPU pod also asks for the RDMA device.
        expected += [f"verify-no-gpu-{n}", f"verify-env-no-gpu-{n}", f"verify-gpu-rdma-{n}"]
        expected += ["verify-pair-1"] if n == 1 else []
    assert names == expected
    for pod in pods:
        node = pod["metadata"]["annotations"]["gpubring.io/verify-node"]
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
        assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["spec"]["tolerations"]
        (container,) = pod["spec"]["containers"]
        assert container["image"] == "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04"
        limits = container["resources"].get("limits")
        name = pod["metadata"]["name"]
        if name.startswith("verify-gpu-rdma-"):  # RDMA needs locked memory
            assert container["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}
        else:
            assert "capabilities" not in container["securityContext"]
        if name.startswith(("verify-no-gpu-", "verify-env-no-gpu-")):
            assert limits is None  # asks for no GPU: it must see none
        elif name.startswith("verify-gpu-rdma-"):
            assert limits == {"nvidia.com/gpu": 1, "rdma/rdma_shared_device_a": 1}
        else:
            assert limits == {"nvidia.com/gpu": 1}
        # visible_devices_env_ignored: the env pods and the one-GPU pods ask for every GPU by variable.
        env = container.get("env")
        if name.startswith(("verify-env-no-gpu-", "verify-gpu-")):
            assert env == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], name
        else:
            assert env is None, name
    pair = next(p for p in pods if p["metadata"]["name"] == "verify-pair-1")
    assert pair["metadata"]["annotations"]["gpubring.io/verify-node"] == nodes[0]
    (namespace,) = rendered(inv, "namespace")
    # IPC_LOCK of the RDMA pods is beyond baseline: the verify namespace is privileged with RDMA.
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_pair_pod_needs_two_gpus_on_one_node(inventories: dict[str, Inventory]) -> None:
    one_each = [
        {"node": "gpu-1", "resource": "nvidia.com/gpu", "allocatable": 1, "rdma": False},
        {"node": "gpu-2", "resource": "nvidia.com/gpu", "allocatable": 2, "rdma": False},
    ]
    names = [p["metadata"]["name"] for p in rendered(inventories["prod"], "pods", one_each)]
    assert names == [
        "verify-no-gpu-1", "verify-env-no-gpu-1", "verify-gpu-1",
        "verify-no-gpu-2", "verify-env-no-gpu-2", "verify-gpu-2", "verify-pair-2",
    ]  # fmt: skip
    assert rendered(inventories["prod"], "pods", []) == []


def test_time_slicing_skips_the_pair_and_mig_nodes_ask_for_mig_devices(
    inventories: dict[str, Inventory],
) -> None:
    inv = inventories["mig-timeslicing"]
    pods = rendered(inv, "pods")
    assert not [p for p in pods if p["metadata"]["name"].startswith("verify-pair-")]
    gpu_pods = [p for p in pods if p["metadata"]["name"].startswith("verify-gpu-")]
    limits = {
        p["metadata"]["annotations"]["gpubring.io/verify-node"]: p["spec"]["containers"][0]["resources"]
        for p in gpu_pods
    }
    mig = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"nvidia.com/mig-1g.10gb": 1}}
    assert limits == {"a100-1": mig, "a100-2": mig, "h100-1": mig}


def test_rdma_pods_and_their_namespace(inventories: dict[str, Inventory]) -> None:
    inv = inventories["dra-kueue-rdma"]
    pods = rendered(inv, "pods")
    gpu_pods = [p for p in pods if p["metadata"]["name"].startswith("verify-gpu-")]
    # ComputeDomains on the DRA group (gb200-*) leave the GPUs to the device plugin: a pod on each GPU node.
    assert [p["metadata"]["annotations"]["gpubring.io/verify-node"] for p in gpu_pods] == [
        "gb200-1", "gb200-2", "h100-1", "h100-2",
    ]  # fmt: skip
    for pod in gpu_pods:
        assert pod["metadata"]["name"].startswith("verify-gpu-rdma-")
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 1, "rdma/rdma_shared_device_a": 1}
        assert container["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}
    for pod in pods:
        if pod not in gpu_pods:
            assert "capabilities" not in pod["spec"]["containers"][0]["securityContext"]
    (namespace,) = rendered(inv, "namespace")
    # IPC_LOCK is not among the capabilities Pod Security "baseline" admits.
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def by_name(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod template's spec of a Volcano Job (its one task) or a batch/v1 Job."""
    if obj["apiVersion"].startswith("batch.volcano.sh/"):
        (task,) = obj["spec"]["tasks"]
        spec = task["template"]["spec"]
    else:
        spec = obj["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def test_gang_jobs_are_all_or_nothing(inventories: dict[str, Inventory]) -> None:
    gang = by_name(rendered(inventories["mig-timeslicing"], "gang"))
    volcano = gang["verify-gang-volcano"]
    assert volcano["spec"]["schedulerName"] == "volcano"
    (task,) = volcano["spec"]["tasks"]
    assert volcano["spec"]["minAvailable"] == task["replicas"] == 3
    gang = by_name(rendered(inventories["dra-kueue-rdma"], "gang"))
    local_queue, job = gang["gpubring-verify"], gang["verify-gang-kueue"]
    assert local_queue["kind"] == "LocalQueue" and local_queue["spec"]["clusterQueue"] == "gpu-cluster-queue"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == local_queue["metadata"]["name"]
    assert job["spec"]["suspend"] is True
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 3
    # KAI (docs/batch/README.md at v0.17.0): the min-member annotation makes the Job one gang.
    kai = gang["verify-gang-kai"]
    assert kai["metadata"]["annotations"] == {"kai.scheduler/batch-min-member": "3"}
    assert kai["spec"]["parallelism"] == kai["spec"]["completions"] == 3
    assert pod_spec(kai)["schedulerName"] == "kai-scheduler"
    assert kai["spec"]["template"]["metadata"]["labels"]["kai.scheduler/queue"] == "default-queue"
    for obj in gang.values():
        assert obj["metadata"]["namespace"] == "gpubring-verify"
    for name in ("verify-gang-volcano", "verify-gang-kueue", "verify-gang-kai"):
        (container,) = pod_spec(gang[name])["containers"]
        assert container["resources"]["limits"] == {"cpu": "100m", "memory": "64Mi"}  # no GPU: it fits


def test_the_held_gangs_cannot_fit(inventories: dict[str, Inventory]) -> None:
    """More GPUs per pod x pods than the tested nodes have: pods of more than half the largest node's
    allocatable (no node holds two, one alone fits),
    pinned to the nodes of that resource, one pod more than there are such nodes."""
    plan = [
        {"node": "gpu-1", "resource": "nvidia.com/gpu", "allocatable": 8, "rdma": False},
        {"node": "gpu-2", "resource": "nvidia.com/gpu", "allocatable": 4, "rdma": False},
        {"node": "mig-1", "resource": "nvidia.com/mig-1g.10gb", "allocatable": 7, "rdma": False},
    ]
    gang = by_name(rendered(inventories["prod"], "gang", plan))
    for scheduler in ("volcano", "kueue", "kai"):
        held = gang[f"verify-held-{scheduler}"]
        spec = pod_spec(held)
        (container,) = spec["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 5}, scheduler
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1", "gpu-2"]}]}
        ]
        size = held["spec"]["minAvailable"] if scheduler == "volcano" else held["spec"]["parallelism"]
        assert size == 3, scheduler  # two nodes of nvidia.com/gpu, room for one 5-GPU pod at most
        assert held["metadata"]["labels"]["gpubring.io/verify-test"] == f"held-{scheduler}"
    assert gang["verify-held-volcano"]["spec"]["tasks"][0]["replicas"] == 3
    assert gang["verify-held-kueue"]["spec"]["suspend"] is True
    assert gang["verify-held-kai"]["metadata"]["annotations"] == {"kai.scheduler/batch-min-member": "3"}
    # No device-plugin GPU node (all GPUs through DRA): no gang that cannot fit, the fitting ones stay.
    names = set(by_name(rendered(inventories["prod"], "gang", [])))
    assert names == {"verify-gang-volcano", "gpubring-verify", "verify-gang-kueue", "verify-gang-kai"}


def test_the_dra_claim_and_its_pod() -> None:
    all_on = load_inventory(VARIANTS / "all-on")
    node = all_on.groups["gpu_nodes"][0]
    claim, pod = rendered_dra(all_on, [node])
    assert claim["apiVersion"] == "resource.k8s.io/v1" and claim["kind"] == "ResourceClaim"
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
    }
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["claims"] == [{"name": request["name"]}]
    assert "limits" not in container["resources"]  # the GPU comes through the claim only
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [node]
    version = schema_version(all_on)
    for obj in (claim, pod):
        kubernetes_validate.validate(obj, version, strict=True)
    # The schema at the pinned Kubernetes knows resource.k8s.io/v1: a misspelt field is refused.
    request["exactly"]["deviceClass"] = request["exactly"].pop("deviceClassName")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(claim, version, strict=True)
    assert rendered_dra(all_on, []) == []


def rendered_dra(inv: Inventory, dra_nodes: list[str]) -> list[dict[str, Any]]:
    text = releases.render_template(
        inv,
        f"verify/templates/{templates()['dra']}",
        host_vars={"__verify_plan": [], "__verify_dra_nodes": dra_nodes},
    )
    objects = yaml.safe_load(text)
    assert isinstance(objects, list)
    return objects


# -- schemas ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("inventory", list(INVENTORIES))
def test_core_objects_validate_at_the_pinned_kubernetes(
    inventories: dict[str, Inventory], inventory: str
) -> None:
    inv = inventories[inventory]
    version = schema_version(inv)
    core = [obj for obj in all_objects(inv) if obj["apiVersion"] in CORE_GROUPS]
    # The checks of other components add their own core objects (Services, Deployments...).
    assert {obj["kind"] for obj in core} >= {"Namespace", "Pod", "Job", "ResourceClaim"}
    for obj in core:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{inventory} {obj['kind']}/{obj['metadata']['name']}: {exc.message}")


@pytest.mark.parametrize("inventory", list(INVENTORIES))
def test_custom_resources_match_the_upstream_crds(inventories: dict[str, Inventory], inventory: str) -> None:
    custom = [obj for obj in all_objects(inventories[inventory]) if obj["apiVersion"] not in CORE_GROUPS]
    assert {(obj["apiVersion"], obj["kind"]) for obj in custom} >= {
        ("batch.volcano.sh/v1alpha1", "Job"),
        ("kueue.x-k8s.io/v1beta2", "LocalQueue"),  # the storage version of Kueue 0.19's CRD
    }
    crds = upstream.crds()
    for obj in custom:
        assert (obj["apiVersion"], obj["kind"]) in crds, (
            f"no upstream CRD serves {obj['apiVersion']} {obj['kind']}"
        )
        assert upstream.crd_errors(obj) == [], f"{obj['kind']}/{obj['metadata']['name']}"
        # In the version the CRD stores, not an older one it still serves (Kueue 0.19: v1beta2).
        assert crds[(obj["apiVersion"], obj["kind"])].storage, f"{obj['apiVersion']} {obj['kind']}"


def test_the_crd_check_catches_a_misspelled_field(inventories: dict[str, Inventory]) -> None:
    volcano = by_name(rendered(inventories["prod"], "gang"))["verify-held-volcano"]
    volcano["spec"]["minAvaliable"] = volcano["spec"].pop("minAvailable")
    errors = upstream.crd_errors(volcano)
    assert any("minAvaliable" in e for e in errors), errors


# -- Ansible renders the same ----------------------------------------------------------------------

_ANSIBLE_PLAY = """\
- name: Render the smoke-test templates as the verify role does
  hosts: cp-1
  gather_facts: false
  vars_files:
    - {role}/defaults/main.yml
    - {role}/vars/main.yml
  tasks:
    - name: Render
      ansible.builtin.copy:
        content: >-
          {{{{ lookup('ansible.builtin.template', '{role}/templates/' ~ item.value) | from_yaml | to_json }}}}
        dest: "{out}/{{{{ item.key }}}}.json"
        mode: "0600"
      loop: "{{{{ __verify_templates | dict2items }}}}"
      delegate_to: localhost
"""


@pytest.mark.slow
def test_ansible_renders_the_templates_the_same(inventories: dict[str, Inventory], tmp_path: Path) -> None:
    inv = inventories["dra-kueue-rdma"]
    plan = plan_for(inv)
    (tmp_path / "play.yml").write_text(_ANSIBLE_PLAY.format(role=ROLE, out=tmp_path), encoding="utf-8")
    extra = {
        "__verify_plan": plan,
        "__verify_dra_nodes": list(inv.groups["gpu_nodes"])[:1],
        "gpubring_versions": inv.versions,
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
    }
    run_play(tmp_path / "play.yml", INVENTORIES["dra-kueue-rdma"], extra)
    for name in templates():
        by_ansible = json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))
        assert by_ansible == rendered(inv, name, plan), name
