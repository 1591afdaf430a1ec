"""The decisions of the cluster_upgrade role (plugins/filter/cluster_upgrade.py) on API objects and
command outputs: the Ready gate after a kubelet restart (issue 21 item 3), the driver that waits for a
reboot (item 2), the containerd config version and the nvidia runtime in `containerd config dump`
(item 5), the pre-upgrade gates (item 13: nodes Ready, PodDisruptionBudgets, deprecated APIs).

Fixtures (tests/fixtures/cluster_upgrade, SOURCES.md there): Node objects in `kubectl get node -o json`
form, a PDB and a pod list, an API server /metrics excerpt, and `containerd config dump` recorded from
containerd 1.6.20 with and without the nvidia_container_toolkit role's drop-in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import collection_module

F: dict[str, Callable[..., Any]] = collection_module("filter.cluster_upgrade").FilterModule().filters()
FIX = Path(__file__).parent / "fixtures" / "cluster_upgrade"
RESTART = "2026-11-27T10:05:00Z"  # the node's clock, read just before the kubelet restart


def node(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIX / f"{name}.json").read_text())
    return data


# --- the Ready gate (item 3) -------------------------------------------------------------------------


def test_ready_gate_refuses_the_old_kubelets_status() -> None:
    # What `kubectl wait --for=condition=Ready` passed on: Ready=True, from the kubelet before the restart.
    verdict = F["cluster_upgrade_node_ready"](node("node-gpu-1"), "1.34.2", RESTART)
    assert verdict["ready"] is False
    assert "v1.33.5, not v1.34.2" in verdict["why"]


def test_ready_gate_refuses_a_stale_heartbeat_even_at_the_new_version() -> None:
    verdict = F["cluster_upgrade_node_ready"](
        node("node-gpu-1-new-version-stale-heartbeat"), "1.34.2", RESTART
    )
    assert verdict["ready"] is False
    assert "no Ready heartbeat since the restart" in verdict["why"]
    assert "2026-11-27T10:00:40Z" in verdict["why"]


def test_ready_gate_refuses_a_new_kubelet_that_is_not_ready() -> None:
    verdict = F["cluster_upgrade_node_ready"](node("node-gpu-1-upgraded-notready"), "1.34.2", RESTART)
    assert verdict == {"ready": False, "why": "Ready is False (KubeletNotReady)"}


def test_ready_gate_passes_the_new_kubelets_heartbeat() -> None:
    verdict = F["cluster_upgrade_node_ready"](node("node-gpu-1-upgraded"), "v1.34.2", RESTART)
    assert verdict["ready"] is True
    # A restart time with an offset is the same instant.
    assert F["cluster_upgrade_node_ready"](
        node("node-gpu-1-upgraded"), "1.34.2", "2026-11-27T11:05:00+01:00"
    )["ready"]
    # The heartbeat must be newer than the restart, not equal.
    assert not F["cluster_upgrade_node_ready"](node("node-gpu-1-upgraded"), "1.34.2", "2026-11-27T10:05:21Z")[
        "ready"
    ]


def test_ready_gate_without_node_or_time() -> None:
    assert F["cluster_upgrade_node_ready"](None, "1.34.2", RESTART)["why"] == "the Node object is missing"
    assert not F["cluster_upgrade_node_ready"](node("node-gpu-1-upgraded"), "1.34.2", "")["ready"]


def test_every_node_ready_gate() -> None:
    nodes = [node("node-gpu-1-upgraded"), node("node-gpu-1-upgraded-notready")]
    nodes[1]["metadata"]["name"] = "gpu-2"
    assert F["cluster_upgrade_not_ready"](nodes) == ["gpu-2"]
    assert F["cluster_upgrade_not_ready"]([]) == []


# --- the driver that waits for a reboot (item 2) --------------------------------------------------


@pytest.mark.parametrize(
    ("loaded", "installed", "needed"),
    [
        ("570.133.20", "580.105.08", True),  # new user space and module on disk, old module running
        ("580.105.08", "580.105.08", False),
        ("", "580.105.08", False),  # no module loaded: the driver role loads it, no reboot
        ("580.105.08\n", " 580.105.08", False),
        ("570.133.20", "", False),  # nothing installed for this kernel: nothing to compare
    ],
)
def test_driver_state(loaded: str, installed: str, needed: bool) -> None:
    state = F["cluster_upgrade_driver_state"](loaded, installed)
    assert state["reboot_needed"] is needed
    assert state["loaded"] == loaded.strip()


# --- containerd (item 5) -----------------------------------------------------------------------------


def test_containerd_config_version() -> None:
    f = F["cluster_upgrade_containerd_config_version"]
    assert [f("1.7.28"), f("v1.6.20"), f("2.1.4"), f("v2.0.0"), f("")] == [2, 2, 3, 3, 2]


def test_dropin_version() -> None:
    f = F["cluster_upgrade_toml_version"]
    assert f("# gpubring\nversion = 2\n[plugins]\n") == 2
    assert f("version = 3") == 3
    assert f("[plugins]\n  x = 1\n") is None


def test_runtimes_of_a_recorded_config_dump() -> None:
    f = F["cluster_upgrade_containerd_runtimes"]
    assert f((FIX / "containerd-1.6-dump-nvidia.toml").read_text()) == ["nvidia"]
    plain = f((FIX / "containerd-1.6-dump-plain.toml").read_text())
    assert "runc" in plain
    assert "nvidia" not in plain
    assert f("not = toml = at all") == []
    # containerd 2.x's CRI runtime plugin (config version 3 names it io.containerd.cri.v1.runtime).
    v3 = (
        "version = 3\n"
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n"
        "  runtime_type = 'io.containerd.runc.v2'\n"
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\n"
        "  runtime_type = 'io.containerd.runc.v2'\n"
    )
    assert f(v3) == ["runc", "nvidia"]


# --- PodDisruptionBudgets and deprecated APIs (item 13) ---------------------------------------------


def test_pdb_blockers() -> None:
    pdbs = json.loads((FIX / "pdbs.json").read_text())["items"]
    pods = json.loads((FIX / "pods.json").read_text())["items"]
    f = F["cluster_upgrade_pdb_blockers"]
    every = f(pdbs, pods, ["gpu-1", "gpu-2", "gpu-3", "gpu-4"])
    assert every == [
        {"namespace": "ml", "name": "trainer", "pods": ["ml/trainer-0 on gpu-1"]},
        {"namespace": "serve", "name": "inference", "pods": ["serve/infer-a on gpu-3"]},
    ]
    # coredns's budget allows one disruption; a DaemonSet's pod and a finished pod are not evicted.
    assert f(pdbs, pods, ["gpu-2", "gpu-4"]) == []
    assert f(pdbs, pods, []) == []


def test_pdb_selector_semantics() -> None:
    f = F["cluster_upgrade_pdb_blockers"]
    pod = {
        "metadata": {"name": "p", "namespace": "a", "labels": {"x": "1"}},
        "spec": {"nodeName": "n"},
        "status": {},
    }

    def pdb(selector: Any, namespace: str = "a") -> dict[str, Any]:
        return {
            "metadata": {"name": "b", "namespace": namespace},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": 0},
        }

    assert f([pdb({})], [pod], ["n"])  # an empty selector selects every pod of the namespace
    assert not f([pdb(None)], [pod], ["n"])  # a null selector selects none
    assert not f([pdb({}, "other")], [pod], ["n"])
    assert f([pdb({"matchExpressions": [{"key": "x", "operator": "Exists"}]})], [pod], ["n"])
    assert not f(
        [pdb({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["1"]}]})], [pod], ["n"]
    )
    assert not f([pdb({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]})], [pod], ["n"])
    mirror = {**pod, "metadata": {**pod["metadata"], "annotations": {"kubernetes.io/config.mirror": "abc"}}}
    assert not f([pdb({})], [mirror], ["n"])


def test_deprecated_apis_from_metrics() -> None:
    found = F["cluster_upgrade_deprecated_apis"]((FIX / "metrics.txt").read_text())
    assert [d.pop("text") for d in found] == [
        "endpoints v1 (no removal planned)",
        "flowschemas flowcontrol.apiserver.k8s.io/v1beta3 (removed in 1.32)",
    ]
    assert found == [
        {"group": "", "version": "v1", "resource": "endpoints", "removed_release": ""},
        {
            "group": "flowcontrol.apiserver.k8s.io",
            "version": "v1beta3",
            "resource": "flowschemas",
            "removed_release": "1.32",
        },
    ]
    assert F["cluster_upgrade_deprecated_apis"]("") == []
