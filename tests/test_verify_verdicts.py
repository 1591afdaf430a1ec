"""The verdicts of the verify role's cluster smoke tests (plugins/module_utils/verify_verdicts.py).

verify_checks judges each smoke test once: the role's asserts fail on its statuses and
tasks/cluster_results.yml publishes them as verify_results. The inputs here are recorded: the values
the smoke tests register (tests/fixtures/conformance/registered.yml) and variants of them for each
status (passed, failed, skipped because the tests stopped early or no GPU node was tested).

The last test proves the move changed nothing: the Jinja that judged them before (cluster_results.yml
at ddf5444, kept in git) and the role's new cluster_results.yml run in one ansible-playbook on the same
inputs, and publish the same verify_results, compared as the same JSON text. And the role's asserts,
run on recorded values, fail exactly where the function says `failed`, each with its message.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import FIXTURES, REPO, ansible_playbook, collection_module, module_utils
from test_autoscaling_checks import AUTOSCALING_FAILED

V = module_utils("verify_verdicts")
REGISTERED: dict[str, Any] = yaml.safe_load((FIXTURES / "conformance" / "registered.yml").read_text())
SETTINGS: dict[str, Any] = {
    "verify_time_slicing_replicas": "1",
    "verify_dra": True,
    "verify_dra_group": "gpu_nodes",
    "verify_dra_driver_name": "gpu.nvidia.com",
    "verify_gang_volcano": True,
    "verify_gang_kueue": False,
    "verify_gang_size": 3,
    "verify_kueue_cluster_queue": "gpu-cluster-queue",
    "verify_dcgm_metrics": True,
    "verify_dcgm_selector": "app=nvidia-dcgm-exporter",
    "verify_dcgm_namespace": "gpu-operator",
    "verify_dcgm_port": 9400,
    # Gang, DRA claim and secure access (module_utils/verify_scheduling.py, tests/test_verify_scheduling.py).
    "verify_gang_kai": False,
    "verify_kai_queue": "default-queue",
    "verify_gang_held_seconds": 60,
    "verify_dra_device_class": "gpu.nvidia.com",
    # Autoscaling and service metrics (module_utils/verify_autoscaling.py, tests/test_autoscaling_checks.py).
    "verify_resource_metrics": False,
    "verify_hpa_gpu": False,
    "verify_service_monitor": False,
    # The KubeRay test (module_utils/verify_controller.py, tests/test_kuberay_verdicts.py).
    "verify_kuberay": False,
    "verify_kuberay_cluster": "verify-ray",
    "verify_namespace": "gpubring-verify",
    # The inference ingress test (module_utils/verify_inference.py, tests/test_ai_inference_verify.py).
    "verify_inference": False,
    "verify_inference_requests": 200,
    "verify_inference_weight_b": 20,
    "verify_inference_tolerance": 10,
    "verify_inference_gateway": "inference",
    "verify_inference_gateway_namespace": "envoy-gateway-system",
}
# The commit whose cluster_results.yml still judged in Jinja.
BEFORE = "ddf5444"


def gathered(registered: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in registered.items() if k.startswith("__verify_")}


def settings(registered: dict[str, Any]) -> dict[str, Any]:
    return {**SETTINGS, **{k: v for k, v in registered.items() if k in SETTINGS}}


def by_name(registered: dict[str, Any]) -> dict[str, dict[str, Any]]:
    checks = V.verify_checks(gathered(registered), settings(registered))
    assert [c["name"] for c in checks] == list(V.CHECK_NAMES)
    return {c["name"]: c for c in checks}


# -- the scenarios: recorded values and variants of them ------------------------------------------


def recorded() -> dict[str, Any]:
    return copy.deepcopy(REGISTERED)


def stopped_after_plan() -> dict[str, Any]:
    """A GPU node without allocatable GPUs: the plan's assert stopped the tests."""
    keep = ("__verify_test_nodes", "__verify_dra_nodes", "__verify_dp_nodes", "__verify_plan")
    data = {k: v for k, v in recorded().items() if not k.startswith("__") or k in keep}
    data["__verify_plan"][1]["resource"] = ""
    data["__verify_plan"][1]["allocatable"] = 0
    return data


def stopped_before_plan() -> dict[str, Any]:
    """Nothing registered: the namespace of an earlier run could not be deleted."""
    return {k: v for k, v in recorded().items() if not k.startswith("__")}


_SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
_NO_ITEMS = {"changed": False, "skipped": True, "skipped_reason": "No items in the list", "results": []}


def no_gpu_node() -> dict[str, Any]:
    """No GPU node in the run (a gang test still runs), and no DRA node."""
    data = recorded()
    data.update(
        {
            "verify_dra": False,
            "__verify_test_nodes": [],
            "__verify_dra_nodes": [],
            "__verify_dp_nodes": [],
            "__verify_plan": [],
            "__verify_pod_objects": [],
            "__verify_pods_state": dict(_SKIPPED),
            "__verify_exec_rdma": dict(_NO_ITEMS),
            "__verify_dra_slices": dict(_NO_ITEMS),
            "__verify_dcgm_pods": dict(_SKIPPED),
            "__verify_dcgm_metrics": dict(_SKIPPED),
        }
    )
    del data["__verify_seen"]
    return data


def failures() -> dict[str, Any]:
    """Every test fails, each on one node or pod (one item, so that ansible-core's set-ordered
    difference and intersect give one order)."""
    data = recorded()
    data["verify_gang_kueue"] = True
    data["__verify_plan"][1]["resource"] = ""
    pending = data["__verify_pods_state"]["resources"][4]
    pending["status"]["phase"] = "Pending"
    pending["metadata"]["annotations"] = {"gpubring.io/verify-node": "gpu-02"}
    seen = data["__verify_seen"]
    seen["verify-no-gpu-2"]["nvidia_devices"] = ["nvidia0", "nvidiactl"]
    seen["verify-no-gpu-2"]["rc"] = 1
    seen["verify-gpu-2"].update(uuids=["GPU-a", "GPU-b"], uuid_count=2)
    seen["verify-pair-1"]["uuids"] = list(seen["verify-gpu-rdma-1"]["uuids"])
    data["__verify_exec_rdma"]["results"][0].update(stdout="rdma_cm\numad0", rc=0)
    data["__verify_exec_rdma"]["results"].append(
        {
            "item": {
                "metadata": {
                    "name": "verify-gpu-rdma-2",
                    "annotations": {"gpubring.io/verify-node": "gpu-02"},
                }
            },
            "msg": "pod not found",
            "failed": False,
        }
    )
    data["__verify_dra_slices"]["results"][0]["resources"][0]["spec"]["devices"] = []
    data["__verify_dra_slices"]["results"][0]["msg"] = "Failed to find any resource"
    data["__verify_volcano_job"]["resources"][0]["status"].update(running=1, pending=2)
    data["__verify_kueue_job"] = {
        "changed": False,
        "resources": [{"spec": {"suspend": True, "parallelism": 3}, "status": {}}],
    }
    data["__verify_dcgm_pods"]["resources"].pop(2)
    data["__verify_dcgm_metrics"]["results"][2].update(
        rc=1, stdout="", stderr="Traceback\nURLError: refused\n"
    )
    scheduling_failed(data)
    data.update(AUTOSCALING_FAILED)
    data.update(INFERENCE_FAILED)
    data.update(KUBERAY_FAILED)
    return data


def _pods(test: str, *phases: str) -> dict[str, Any]:
    """What the k8s_info watch of a held gang registered: its pods in these phases."""
    return {
        "attempts": 12,
        "resources": [
            {"metadata": {"name": f"verify-{test}-worker-{n}"}, "status": {"phase": phase}}
            for n, phase in enumerate(phases)
        ],
    }


def scheduling_failed(data: dict[str, Any]) -> None:
    """The gang, DRA-claim and secure-access tests fail: a held gang starts a pod with each scheduler,
    KAI runs one pod of three, the claim gets a device no DRA node publishes, and a pod without a GPU
    request sees a GPU through NVIDIA_VISIBLE_DEVICES=all."""
    data["verify_gang_kai"] = True
    data["__verify_seen"]["verify-env-no-gpu-1"] = {
        "node": "gpu-01", "rc": 0, "output": "nvidia0\nnvidiactl\nGPU 0: NVIDIA H100 (UUID: GPU-x)",
        "nvidia_devices": ["nvidia0", "nvidiactl"], "uuids": ["GPU-x"], "uuid_count": 1,
    }  # fmt: skip
    for scheduler in ("volcano", "kueue", "kai"):
        # The gang of two pods that cannot fit on gpu-01 (gpu-02 has no allocatable GPU here).
        data[f"__verify_held_{scheduler}"] = _pods(f"held-{scheduler}", "Running", "Pending")
    data["__verify_kai_job"] = {"resources": [{"status": {"ready": 1, "active": 3}}]}
    data["__verify_dra_claim"] = {
        "resources": [{"status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-09", "device": "gpu-0"},
        ]}}}}]
    }  # fmt: skip
    data["__verify_dra_pod"] = {"resources": [{"status": {"phase": "Running"}}]}


# The inference ingress test, on, with a skewed split and a header match that reaches backend A.
_ACCEPTED = {"parents": [{"conditions": [{"type": "Accepted", "status": "True"}]}]}
INFERENCE_FAILED: dict[str, Any] = {
    "verify_inference": True,
    "__verify_inference_routes": {
        "resources": [
            {"metadata": {"name": "verify-inference-weighted"}, "status": _ACCEPTED},
            {"metadata": {"name": "verify-inference-header"}, "status": _ACCEPTED},
        ]
    },
    "__verify_inference_service": {"resources": [{"spec": {"clusterIP": "10.96.0.80"}}]},
    "__verify_inference_job": {"resources": [{"status": {"succeeded": 1}}]},
    "__verify_inference_log": {
        "log": "weighted a=100 b=100 failed=0\nheader a=200 b=0 failed=0\nno_header a=200 b=0 failed=0\n"
    },
}

# The KubeRay test, on: the invalid RayCluster accepted, the deleted head Service never created again.
KUBERAY_FAILED: dict[str, Any] = {
    "verify_kuberay": True,
    "__verify_kuberay_rejected": {"changed": True, "failed": False},
    "__verify_kuberay_service": {
        "resources": [{"metadata": {"name": "verify-ray-head-svc", "uid": "uid-1"}}]
    },
    "__verify_kuberay_deleted": {"changed": True},
    "__verify_kuberay_recreated": {"resources": []},
}


def time_slicing() -> dict[str, Any]:
    """Time-slicing: no pair pod; Kueue on and admitting, Volcano and DRA off."""
    data = recorded()
    data.update(
        verify_time_slicing_replicas="4", verify_gang_volcano=False, verify_gang_kueue=True, verify_dra=False
    )
    del data["__verify_seen"]["verify-pair-1"]
    data["__verify_pod_objects"] = [
        o for o in data["__verify_pod_objects"] if o["metadata"]["name"] != "verify-pair-1"
    ]
    data["__verify_dra_nodes"] = []
    data["__verify_dra_slices"] = dict(_NO_ITEMS)
    data["__verify_volcano_job"] = dict(_SKIPPED)
    data["__verify_kueue_job"] = {
        "changed": False,
        "resources": [{"spec": {"suspend": False}, "status": {"ready": 3, "active": 3}}],
    }
    data["__verify_exec_rdma"] = dict(_NO_ITEMS)
    return data


def stopped_after_pods() -> dict[str, Any]:
    """The pods' assert stopped the run: nothing after __verify_pods_state was registered."""
    data = recorded()
    data["__verify_pods_state"]["resources"].pop(1)
    for key in ("__verify_seen", "__verify_exec_rdma", "__verify_dra_slices", "__verify_volcano_job"):
        del data[key]
    for key in ("__verify_kueue_job", "__verify_dcgm_pods", "__verify_dcgm_metrics"):
        del data[key]
    return data


SCENARIOS = {
    "recorded": recorded,
    "stopped_before_plan": stopped_before_plan,
    "stopped_after_plan": stopped_after_plan,
    "stopped_after_pods": stopped_after_pods,
    "no_gpu_node": no_gpu_node,
    "failures": failures,
    "time_slicing": time_slicing,
}


# -- each check and status -------------------------------------------------------------------------


def statuses(checks: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: check["status"] for name, check in checks.items()}


def test_recorded_run() -> None:
    checks = by_name(recorded())
    assert statuses(checks) == {
        "gpu_allocatable": "passed",
        "pods_running": "passed",
        "no_gpu_without_request": "passed",
        "one_gpu_per_pod": "passed",
        "distinct_gpus": "passed",
        "rdma_pods": "passed",
        "dra_resourceslices": "passed",
        "gang_volcano": "passed",
        "gang_kueue": "skipped",
        "dcgm_exporters": "passed",
        "dcgm_metrics": "failed",
        # Recorded before these tests existed (tests/test_autoscaling_checks.py runs them).
        "resource_metrics": "skipped",
        "hpa_gpu_metric": "skipped",
        "service_monitor_scrape": "skipped",
        # Recorded before these tests existed (tests/test_verify_scheduling.py runs them).
        "visible_devices_env_ignored": "skipped",
        "dra_claim_allocated": "skipped",
        "gang_held_volcano": "skipped",
        "gang_held_kueue": "skipped",
        "gang_kai": "skipped",
        "gang_held_kai": "skipped",
        "inference_gateway_weighted": "skipped",
        "inference_gateway_header": "skipped",
        # Recorded before KubeRay existed: off (tests/test_kuberay_verdicts.py runs them).
        "kuberay_webhook_rejects": "skipped",
        "kuberay_recreates": "skipped",
    }
    # The partner of verify-pair-1 is the first verify-gpu-* pod of its node: verify-gpu-rdma-1.
    assert checks["distinct_gpus"]["output"] == {
        "verify-pair-1": ["GPU-9c2d7e10-3b4a-4c8f-8e55-6d1f0a9b2c02"],
        "verify-gpu-rdma-1": ["GPU-5e1b6a3c-0f2d-4f6e-9a41-0c8e2b7d1a01"],
        "shared": [],
    }
    assert checks["distinct_gpus"]["reason"] == ""
    assert checks["gpu_allocatable"]["output"] == REGISTERED["__verify_plan"]
    assert checks["pods_running"]["output"] == {p: "Running" for p in REGISTERED["__verify_seen"]}
    assert checks["one_gpu_per_pod"]["output"]["verify-pair-1"] == {
        k: REGISTERED["__verify_seen"]["verify-pair-1"][k] for k in ("node", "rc", "output", "uuids")
    }
    assert checks["rdma_pods"]["output"] == {"verify-gpu-rdma-1": "rdma_cm\numad0\nuverbs0"}
    assert checks["dra_resourceslices"]["output"] == {
        "api": "resource.k8s.io/v1",
        "driver": "gpu.nvidia.com",
        "devices": {"gpu-03": 4},
        "errors": {},
    }
    assert checks["gang_volcano"]["output"] == {
        "phase": "Running",
        "running": 3,
        "pending": 0,
        "min_available": 3,
    }
    assert checks["gang_kueue"]["reason"] == "Kueue is off (schedulers_kueue_enabled)"
    assert checks["dcgm_metrics"]["reason"] == "no DCGM_FI_* sample from gpu-02"
    assert checks["dcgm_metrics"]["output"] == {"gpu-01": "736", "gpu-02": "0", "gpu-03": "368"}


def test_every_check_fails_with_its_reason() -> None:
    checks = by_name(failures())
    assert set(statuses(checks).values()) == {"failed"}
    assert {name: c["reason"] for name, c in checks.items()} == {
        "gpu_allocatable": "no allocatable GPU on gpu-02",
        "pods_running": "not Running: verify-gpu-2",
        "no_gpu_without_request": "sees GPU devices or failed: verify-no-gpu-2",
        "one_gpu_per_pod": "not exactly one GPU: verify-gpu-2",
        "distinct_gpus": (
            "verify-pair-1 and verify-gpu-rdma-1 both see GPU-5e1b6a3c-0f2d-4f6e-9a41-0c8e2b7d1a01"
        ),
        "rdma_pods": "no uverbs device: verify-gpu-rdma-2, verify-gpu-rdma-1",
        "dra_resourceslices": "no device published for gpu-03",
        "gang_volcano": "running 1 of 3",
        "gang_kueue": "suspended: True, ready 0 of 3",
        "dcgm_exporters": "no exporter on gpu-03",
        "dcgm_metrics": "no DCGM_FI_* sample from gpu-03, gpu-02",
        # verify-gpu-2, with NVIDIA_VISIBLE_DEVICES=all, sees two GPUs.
        "visible_devices_env_ignored": (
            "sees GPUs it did not ask for or failed: verify-env-no-gpu-1, verify-gpu-2"
        ),
        "dra_claim_allocated": (
            "allocated a device that no ResourceSlice of a DRA node publishes: gpu-09/gpu-0"
        ),
        "gang_held_volcano": "started 1 of 2: verify-held-volcano-worker-0",
        "gang_held_kueue": "started 1 of 2: verify-held-kueue-worker-0",
        "gang_kai": "ready 1 of 3",
        "gang_held_kai": "started 1 of 2: verify-held-kai-worker-0",
        "kuberay_webhook_rejects": (
            "the API server accepted a RayCluster with spec.managedBy 'gpubring.io/not-a-manager': the "
            "RayCluster CRD in the cluster does not carry the v1.7.0 rule on spec.managedBy (an older CRD "
            "kept by Helm?)"
        ),
        "kuberay_recreates": "verify-ray-head-svc was not created again after its deletion",
        "resource_metrics": "no NodeMetrics (cpu, memory) for gpu-02",
        "hpa_gpu_metric": "custom.metrics.k8s.io returns no pod_gpu_utilization for a pod of verify-hpa-gpu",
        "service_monitor_scrape": (
            "Prometheus has no series of verify-metrics-app but its own (is the ServiceMonitor selected?)"
        ),
        "inference_gateway_weighted": "skewed split: backend B got 50.0% (100 of 200), expected 20% ± 10",
        "inference_gateway_header": (
            "with x-gpubring-route: b, 0 of 200 reached backend B (200 went to A, 0 failed)"
        ),
    }
    # The whole stderr, as the Jinja before gave it (it split on a literal backslash-n).
    assert checks["dcgm_metrics"]["output"]["gpu-03"] == "Traceback\nURLError: refused"
    assert checks["rdma_pods"]["output"]["verify-gpu-rdma-2"] == "pod not found"
    assert checks["dra_resourceslices"]["output"]["errors"] == {"gpu-03": "Failed to find any resource"}
    assert checks["distinct_gpus"]["output"]["shared"] == ["GPU-5e1b6a3c-0f2d-4f6e-9a41-0c8e2b7d1a01"]


def test_a_gpu_node_without_allocatable_gpus() -> None:
    checks = by_name(stopped_after_plan())
    assert checks["gpu_allocatable"]["status"] == "failed"
    assert checks["gpu_allocatable"]["reason"] == "no allocatable GPU on gpu-02"
    rest = {name: c["status"] for name, c in checks.items() if name != "gpu_allocatable"}
    assert set(rest.values()) == {"skipped"}
    for name in (
        "pods_running",
        "no_gpu_without_request",
        "dra_resourceslices",
        "gang_volcano",
        "dcgm_metrics",
    ):
        assert checks[name]["reason"] == V.STOPPED, name
    assert checks["gang_kueue"]["reason"] == "Kueue is off (schedulers_kueue_enabled)"
    assert checks["pods_running"]["output"] is None and checks["dcgm_exporters"]["output"] is None


def test_stopped_before_anything_ran() -> None:
    checks = by_name(stopped_before_plan())
    assert set(statuses(checks).values()) == {"skipped"}
    assert checks["gpu_allocatable"]["reason"] == V.STOPPED
    assert checks["dcgm_exporters"]["reason"] == V.STOPPED
    # What the pods saw is an empty mapping when they saw nothing; the other outputs are null.
    outputs = {n: c["output"] for n, c in checks.items()}
    assert outputs == dict.fromkeys(V.CHECK_NAMES) | {
        "no_gpu_without_request": {}, "one_gpu_per_pod": {}, "rdma_pods": {},
    }  # fmt: skip


def test_stopped_after_the_pods() -> None:
    checks = by_name(stopped_after_pods())
    assert checks["pods_running"]["status"] == "failed"
    assert checks["pods_running"]["reason"] == "not Running: verify-gpu-rdma-1"
    assert checks["no_gpu_without_request"]["reason"] == V.STOPPED
    assert checks["dcgm_exporters"] | {"expected": ""} == {
        "name": "dcgm_exporters", "expected": "", "output": None, "status": "skipped", "reason": V.STOPPED,
    }  # fmt: skip


def test_no_gpu_node() -> None:
    checks = by_name(no_gpu_node())
    assert checks["gang_volcano"]["status"] == "passed"
    skipped = {name: c["reason"] for name, c in checks.items() if name != "gang_volcano"}
    assert skipped == {
        "gpu_allocatable": "no device-plugin GPU node in this run",
        "pods_running": V.NO_GPU_NODE,
        "no_gpu_without_request": V.NO_GPU_NODE,
        "one_gpu_per_pod": V.NO_GPU_NODE,
        "distinct_gpus": V.NO_GPU_NODE,
        "rdma_pods": (
            "no RDMA pod: the Network Operator is off (verify_rdma_pods) or no tested node has RDMA NICs"
        ),
        "dra_resourceslices": "DRA is off (dra_driver_enabled)",
        "gang_kueue": "Kueue is off (schedulers_kueue_enabled)",
        "dcgm_exporters": V.NO_GPU_NODE,
        "dcgm_metrics": V.NO_GPU_NODE,
        "visible_devices_env_ignored": V.NO_GPU_NODE,
        "dra_claim_allocated": "DRA is off (dra_driver_enabled)",
        "gang_held_volcano": V.STOPPED,
        "gang_held_kueue": "Kueue is off (schedulers_kueue_enabled)",
        "gang_kai": "KAI is off (schedulers_kai_enabled)",
        "gang_held_kai": "KAI is off (schedulers_kai_enabled)",
        "kuberay_webhook_rejects": "the KubeRay operator is off (kuberay_enabled)",
        "kuberay_recreates": "the KubeRay operator is off (kuberay_enabled)",
        "resource_metrics": "metrics-server is off (metrics_server_enabled)",
        "hpa_gpu_metric": "prometheus-adapter is off (monitoring_enabled, monitoring_adapter)",
        "service_monitor_scrape": "kube-prometheus-stack is off (monitoring_enabled, monitoring_stack)",
        "inference_gateway_weighted": "the inference ingress is off (ai_inference_enabled)",
        "inference_gateway_header": "the inference ingress is off (ai_inference_enabled)",
    }
    assert {c["status"] for n, c in checks.items() if n != "gang_volcano"} == {"skipped"}
    assert checks["pods_running"]["output"] == {}


def test_time_slicing_and_kueue() -> None:
    checks = by_name(time_slicing())
    assert checks["distinct_gpus"]["status"] == "skipped"
    assert checks["distinct_gpus"]["reason"] == "time-slicing shares GPUs (4 replicas)"
    assert checks["gang_kueue"]["status"] == "passed"
    assert checks["gang_kueue"]["output"] == {
        "suspend": False, "ready": 3, "parallelism": 3, "cluster_queue": "gpu-cluster-queue",
    }  # fmt: skip
    assert checks["gang_volcano"]["reason"] == "Volcano is off (schedulers_volcano_enabled)"
    assert checks["dra_resourceslices"]["reason"] == "DRA is off (dra_driver_enabled)"
    data = time_slicing()
    data["verify_time_slicing_replicas"] = 1
    assert by_name(data)["distinct_gpus"]["reason"] == "no tested node has two allocatable GPUs"


def test_the_dcgm_exporter_turned_off() -> None:
    data = recorded()
    data["verify_dcgm_metrics"] = "false"
    checks = by_name(data)
    off = "the GPU Operator runs no DCGM exporter (gpu_operator_dcgm_exporter)"
    assert (checks["dcgm_exporters"]["status"], checks["dcgm_exporters"]["reason"]) == ("skipped", off)
    assert (checks["dcgm_metrics"]["status"], checks["dcgm_metrics"]["reason"]) == ("skipped", off)


def test_the_filter_exposes_the_function() -> None:
    plugin = collection_module("filter.verify_verdicts")
    filters = plugin.FilterModule().filters()
    assert filters["verify_checks"](gathered(REGISTERED), SETTINGS) == V.verify_checks(
        gathered(REGISTERED), SETTINGS
    )
    with pytest.raises(Exception, match="must be mappings"):
        filters["verify_checks"]([], SETTINGS)


# -- the role's Jinja before the move and the function agree ---------------------------------------

_PLAY = """\
- name: "{name}"
  hosts: localhost
  gather_facts: false
  vars_files:
    - {repo}/roles/verify/defaults/main.yml
    - {repo}/roles/verify/vars/main.yml
    - {scenario}
  tasks:
    - name: The Jinja before the move
      ansible.builtin.include_tasks: {before}

    - name: Write what it published
      ansible.builtin.copy:
        content: "{{{{ verify_results | to_json }}}}"
        dest: {out}/{name}.before.json
        mode: "0600"

    - name: The role's tasks now
      ansible.builtin.include_tasks: {repo}/roles/verify/tasks/cluster_results.yml

    - name: Write what it published
      ansible.builtin.copy:
        content: "{{{{ verify_results | to_json }}}}"
        dest: {out}/{name}.after.json
        mode: "0600"
"""


@pytest.mark.slow
def test_the_move_changes_no_result(tmp_path: Path) -> None:
    try:
        old = subprocess.run(
            ["git", "show", f"{BEFORE}:roles/verify/tasks/cluster_results.yml"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no git history to read the Jinja of {BEFORE} from: {exc}")
    before = tmp_path / "cluster_results_before.yml"
    before.write_text(old, encoding="utf-8")
    plays = []
    for name, scenario in SCENARIOS.items():
        path = tmp_path / f"{name}.yml"
        path.write_text(json.dumps(scenario()), encoding="utf-8")
        plays.append(_PLAY.format(name=name, repo=REPO, scenario=path, before=before, out=tmp_path))
    (tmp_path / "play.yml").write_text("---\n" + "\n".join(plays), encoding="utf-8")
    done = ansible_playbook(
        *("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"),
        tmp_path / "play.yml",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name, scenario in SCENARIOS.items():
        old_text = (tmp_path / f"{name}.before.json").read_text(encoding="utf-8")
        new_text = (tmp_path / f"{name}.after.json").read_text(encoding="utf-8")
        # Checks added after the move (the old Jinja has no word of them) are judged by their own tests.
        old_names = {c["name"] for c in json.loads(old_text)["checks"]}
        moved = json.loads(new_text)
        moved["checks"] = [c for c in moved["checks"] if c["name"] in old_names]
        assert json.dumps(moved) == old_text, name
        # And the function called directly, on the same values, gives the same checks.
        data = scenario()
        assert json.loads(new_text)["checks"] == V.verify_checks(gathered(data), settings(data)), name


# -- the role's asserts fail on these verdicts -----------------------------------------------------

_ASSERTS_PLAY = """\
- name: The asserts of the smoke tests on recorded values
  hosts: localhost
  gather_facts: false
  vars_files:
    - {repo}/roles/verify/defaults/main.yml
    - {repo}/roles/verify/vars/main.yml
    - {scenario}
  tasks:
    - name: The asserts
      ansible.builtin.include_tasks: {tasks}

    - name: Write what each did
      ansible.builtin.copy:
        content: "{{{{ __outcomes | to_json }}}}"
        dest: {out}
        mode: "0600"
      vars:
        __outcomes: >-
          {{{{ range({count}) | map('regex_replace', '^', '__assert_') | map('extract', vars) | list }}}}
"""


def _flat(tasks: list[dict[str, Any]], when: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """The tasks, those of blocks in their place, each with its blocks' `when` before its own."""
    flat = []
    for task in tasks:
        own = task.get("when", [])
        conditions = (*when, *(own if isinstance(own, list) else [own]))
        if "block" in task:
            flat += _flat(task["block"], conditions)
        else:
            flat.append(task | ({"when": list(conditions)} if conditions else {}))
    return flat


def assert_tasks() -> list[dict[str, Any]]:
    """Every assert of tasks/cluster_*.yml, registered as __assert_N and not stopping the play."""
    tasks = []
    # Every test's file: cluster.yml runs them, cluster_results.yml publishes (no assert in either).
    names = sorted(p.stem for p in (REPO / "roles" / "verify" / "tasks").glob("cluster_*.yml"))
    for name in names:
        for task in _flat(yaml.safe_load((REPO / "roles" / "verify" / "tasks" / f"{name}.yml").read_text())):
            if "ansible.builtin.assert" in task:
                tasks.append(task | {"register": f"__assert_{len(tasks)}", "ignore_errors": True})
    return tasks


@pytest.mark.slow
def test_each_assert_fails_on_its_checks_verdict(tmp_path: Path) -> None:
    tasks = assert_tasks()
    thats = [t["ansible.builtin.assert"]["that"] for t in tasks]
    named = [next(n for n in V.CHECK_NAMES if f"'{n}'" in str(t)) for t in tasks]
    assert sorted(named) == sorted(V.CHECK_NAMES), "one assert per check, on that check's status"
    assert all("status != 'failed'" in str(that) for that in thats)
    (tmp_path / "asserts.yml").write_text(
        yaml.safe_dump(tasks, sort_keys=False, width=1000), encoding="utf-8"
    )
    messages = {}
    for scenario in (recorded, failures):
        data = scenario()
        # The pins the vars plugin gpubring.core.defaults gives a run (the image of the pods' messages).
        pins = yaml.safe_load((REPO / "versions.yml").read_text(encoding="utf-8"))["gpubring_versions"]
        scenario_file = tmp_path / "scenario.json"
        scenario_file.write_text(json.dumps(data | {"gpubring_matrix": pins}), encoding="utf-8")
        play = _ASSERTS_PLAY.format(
            repo=REPO, scenario=tmp_path / "scenario.json", tasks=tmp_path / "asserts.yml",
            out=tmp_path / "outcomes.json", count=len(tasks),
        )  # fmt: skip
        (tmp_path / "play.yml").write_text(play, encoding="utf-8")
        done = ansible_playbook(
            *("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"),
            tmp_path / "play.yml",
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outcomes = json.loads((tmp_path / "outcomes.json").read_text(encoding="utf-8"))
        verdicts = by_name(data)
        for check, result in zip(named, outcomes, strict=True):
            status, where = verdicts[check]["status"], (scenario.__name__, check, result)
            if result.get("skipped"):
                assert status == "skipped", where
            elif status == "failed":
                assert result["failed"] and result["msg"].startswith("verify: "), where
            else:
                assert not result.get("failed") and result["msg"] == "All assertions passed", where
        messages[scenario.__name__] = {
            c: r["msg"] for c, r in zip(named, outcomes, strict=True) if r.get("failed")
        }
    # The recorded run failed on the DCGM metrics alone, with the message its report carries
    # (tests/test_conformance.py's REPORT); in the other, every assert failed.
    assert messages["recorded"] == {
        "dcgm_metrics": "verify: DCGM exporters that do not answer with DCGM_FI_* metrics on :9400/metrics: "
        "gpu-02 (10.244.2.9): no DCGM_FI_* sample;"
    }
    assert sorted(messages["failures"]) == sorted(V.CHECK_NAMES)
