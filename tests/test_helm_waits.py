"""The release engine's waits (roles/helm/tasks/manifest.yml and ready.yml), and what `gpubring plan`
says each release waits for.

The engine runs here for real on localhost (ansible-playbook, kubernetes.core and its kubernetes
client) against an API server address where nothing listens: what can be proven without a cluster
is that a refusal fails at once with what was refused, and that a readiness wait looks again until
its timeout from helm_wait_timeouts and then names what it waited for. That the dry run is retried
while a CRD is not yet established or a webhook not yet answering needs a real API server (no
kube-apiserver can be had on the build machines); the pinned chart proves below that the case is
real: the nv-ipam IPPool CRD is not in the Network Operator chart.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import upstream
from helpers import BIN, DATA, REPO, ansible_playbook, unreachable_kubeconfig

IPPOOL = {
    "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
    "kind": "IPPool",
    "metadata": {"name": "rdma-roce", "namespace": "nvidia-network-operator"},
    "spec": {"subnet": "192.168.100.0/24", "perNodeBlockSize": 64},
}
CLUSTER_POLICY = {
    "api_version": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "name": "cluster-policy",
    "state": "ready",
    "why": "every operand is ready",
}


def _run_engine(
    tmp_path: Path, tasks_from: str, engine_vars: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    play = [
        {
            "name": "Run one piece of the release engine",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {
                "ansible_python_interpreter": sys.executable,
                "helm_kubeconfig": str(unreachable_kubeconfig(tmp_path)),
                "helm_no_log": False,
                "helm_wait_timeouts": {"accept": 3, "default": 3},
                "helm_wait_delay": 1,
                "__helm_release": {"name": "network-operator"},
                **engine_vars,
            },
            "tasks": [
                {
                    "name": "The engine",
                    "ansible.builtin.include_role": {"name": "gpubring.core.helm", "tasks_from": tasks_from},
                }
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play))
    return ansible_playbook("-i", "localhost,", playbook)


@pytest.mark.skipif(shutil.which("ansible-playbook", path=str(BIN)) is None, reason="no ansible-playbook")
def test_an_object_the_api_server_refuses_fails_at_once_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes", reason="kubernetes.core's client library (pip install kubernetes)")
    result = _run_engine(tmp_path, "manifest.yml", {"__helm_manifest": IPPOOL})
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert (
        "release network-operator: nv-ipam.nvidia.com/v1alpha1 IPPool rdma-roce was refused by the API server"
        in out
    )
    # Not a "not served yet" answer: no second look, and the object is never applied.
    assert "FAILED - RETRYING" not in out, out
    assert "Apply IPPool/rdma-roce" not in out, out


@pytest.mark.skipif(shutil.which("ansible-playbook", path=str(BIN)) is None, reason="no ansible-playbook")
def test_a_refusal_stays_hidden_while_helm_no_log(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes", reason="kubernetes.core's client library (pip install kubernetes)")
    secret = {**IPPOOL, "metadata": {**IPPOOL["metadata"], "annotations": {"token": "s3cr3t-value-91"}}}
    result = _run_engine(tmp_path, "manifest.yml", {"__helm_manifest": secret, "helm_no_log": True})
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "was refused by the API server (set helm_no_log=false to see its answer)" in out
    assert "s3cr3t-value-91" not in out


@pytest.mark.skipif(shutil.which("ansible-playbook", path=str(BIN)) is None, reason="no ansible-playbook")
def test_a_readiness_wait_looks_again_until_its_timeout_and_names_what_it_waited_for(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes", reason="kubernetes.core's client library (pip install kubernetes)")
    result = _run_engine(
        tmp_path,
        "ready.yml",
        {"__helm_ready_check": CLUSTER_POLICY, "__helm_release": {"name": "gpu-operator"}},
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "FAILED - RETRYING" in out, out  # looked again, every helm_wait_delay
    assert (
        "release gpu-operator: waited 3 s (helm_wait_timeouts) for ClusterPolicy cluster-policy "
        "status.state=ready: every operand is ready;" in " ".join(out.split())
    ), out


# -- what plan says ---------------------------------------------------------------------------------


def _plan(inventory: Path) -> dict[str, Any]:
    out = inventory.parent / "plan.json"
    result = subprocess.run(
        [str(BIN / "gpubring"), "plan", str(inventory), "--json", str(out)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return {r["name"]: r for r in json.loads(out.read_text())["releases"]}


def test_plan_shows_what_each_release_waits_for_in_apply_order(tmp_path: Path) -> None:
    inv = tmp_path / "all-on"
    shutil.copytree(DATA / "inventories" / "all-on", inv)
    releases = _plan(inv)
    network = releases["network-operator"]["waits"]
    accept = next(w for w in network if w.startswith("the API server accepts"))
    assert "(<= 300 s each)" in accept
    # The NicClusterPolicy first: the operator creates the IPPool CRD only once it reconciles it.
    assert accept.index("NicClusterPolicy/nic-cluster-policy") < accept.index("IPPool/")
    assert network[-1].startswith("NicClusterPolicy nic-cluster-policy status.state=ready")
    assert network[-1].endswith("(<= 900 s)")
    assert releases["gpu-operator"]["waits"][-1].endswith("(<= 1200 s)")
    dra = releases["nvidia-dra-driver-gpu"]["waits"][-1]
    # all-on hands out GPUs through DRA on every GPU node: one ResourceSlice publisher each.
    assert dra.startswith("at least 4 ResourceSlice (spec.driver=gpu.nvidia.com): every node of gpu_nodes")


def test_every_wait_timeout_comes_from_one_setting(tmp_path: Path) -> None:
    inv = tmp_path / "all-on"
    shutil.copytree(DATA / "inventories" / "all-on", inv)
    (inv / "group_vars" / "all" / "waits.yml").write_text(
        "helm_wait_timeouts: {accept: 30, default: 45, gpu-operator: 60, network-operator: 75}\n"
    )
    releases = _plan(inv)
    assert releases["gpu-operator"]["waits"][-1].endswith("(<= 60 s)")
    assert releases["network-operator"]["waits"][-1].endswith("(<= 75 s)")
    assert releases["nvidia-dra-driver-gpu"]["waits"][-1].endswith("(<= 45 s)")
    assert any("(<= 30 s each)" in w for w in releases["network-operator"]["waits"])


def test_the_ippool_crd_is_created_by_the_operator_not_shipped_in_the_chart() -> None:
    """Why the engine waits before each custom resource (issue 12.4): at the pinned Network Operator
    the nv-ipam IPPool CRD is not in the chart; the operator applies it from
    manifests/state-nv-ipam-cni when it reconciles NicClusterPolicy.spec.nvIpam
    (shared/upstream/charts/SOURCES.md)."""
    pins = yaml.safe_load((REPO / "versions.yml").read_text())["gpubring_versions"]
    chart = upstream.chart_dir("network-operator", str(pins["network_operator"]["chart"]), to_render=False)
    crds = [
        doc["metadata"]["name"]
        for path in chart.rglob("*.yaml")
        if "{{" not in (text := path.read_text())
        for doc in yaml.safe_load_all(text)
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]
    assert "nicclusterpolicies.mellanox.com" in crds  # the chart's own CRDs are found
    assert "ippools.nv-ipam.nvidia.com" not in crds
    runtime = chart.parent / f"{chart.name}-nv-ipam-crds"
    assert any("kind: IPPool" in p.read_text() for p in runtime.glob("*.yaml"))
