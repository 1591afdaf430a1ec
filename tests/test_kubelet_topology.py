"""The kubelet_topology role's computations, through its filter plugin (plugins/filter/kubelet_topology.py),
on the NUMA layouts of the captured hosts: the dual Xeon Platinum 8468 H100 node (numactl -H, 2 nodes,
even CPUs on node 0 and odd on node 1) and the dual EPYC 7742 A100 node (lscpu, 8 nodes in NPS4, SMT).
Then the inventory validator that refuses a reservedMemory the kubelet would refuse, and the filter by
its FQCN inside a real Ansible run."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpubring.inventory import InventoryError, load_inventory
from gpubring.paths import project_root
from helpers import BIN, HW, collection_env, collection_module

MI = 2**20


P = collection_module("module_utils.gpu_parsers")
T = collection_module("module_utils.gpu_topology")
FILTERS: dict[str, Callable[..., Any]] = collection_module("filter.kubelet_topology").FilterModule().filters()
numa_settings = FILTERS["kubelet_numa_settings"]
memory_problems = FILTERS["kubelet_reserved_memory_problems"]
memory_total = FILTERS["kubelet_reserved_memory_total"]
quantity = FILTERS["k8s_quantity_bytes"]

# The role's defaults (roles/kubelet_topology/defaults/main.yml), read, not copied.
DEFAULTS = yaml.safe_load((project_root() / "roles/kubelet_topology/defaults/main.yml").read_text())
KUBE = DEFAULTS["kubelet_topology_kube_reserved"]
SYSTEM = DEFAULTS["kubelet_topology_system_reserved"]
EVICTION = DEFAULTS["kubelet_topology_eviction_hard"]


@pytest.fixture(scope="module")
def xeon() -> list[dict[str, Any]]:
    text = (HW / "numactl/dual-xeon-platinum-8468-8x-h100-sxm-node.txt").read_text()
    return T.numa_layout_from_numactl(P.parse_numactl_hardware(text))


@pytest.fixture(scope="module")
def epyc() -> list[dict[str, Any]]:
    lscpu = P.parse_lscpu((HW / "lscpu/dual-epyc-7742-dgx-a100-class-8gpu.txt").read_text())
    return T.numa_layout_from_lscpu(lscpu, P.lscpu_core_groups(lscpu))


def _sum(entries: list[dict[str, Any]]) -> int:
    return sum(quantity(e["limits"]["memory"]) for e in entries)


def _cpus(cpuset: str) -> list[int]:
    out: list[int] = []
    for part in cpuset.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


# ------------------------------------------------------------------------------ role defaults


def test_defaults_total_is_kube_plus_system_plus_eviction() -> None:
    # 1Gi + 1Gi + memory.available 100Mi (evictionHard is written whole, so the threshold is explicit)
    assert memory_total(KUBE, SYSTEM, EVICTION) == "2148Mi"


def test_xeon_with_role_defaults(xeon: list[dict[str, Any]]) -> None:
    settings = numa_settings(
        xeon, DEFAULTS["kubelet_topology_reserved_cpus_per_numa"], KUBE, SYSTEM, EVICTION
    )
    # node 0 holds the even CPUs, node 1 the odd ones: 2 per node are 0,2 and 1,3
    assert settings["reservedSystemCPUs"] == "0-3"
    assert [n for n in (0, 1, 2, 3) if n in xeon[0]["cpus"]] == [0, 2]
    assert settings["reservedMemory"] == [
        {"numaNode": 0, "limits": {"memory": "1074Mi"}},
        {"numaNode": 1, "limits": {"memory": "1074Mi"}},
    ]
    assert _sum(settings["reservedMemory"]) == 2148 * MI
    assert settings["topologyManagerPolicyOptions"] == {}
    assert memory_problems(settings["reservedMemory"], KUBE, SYSTEM, EVICTION, [0, 1]) == []


def test_epyc_with_role_defaults(epyc: list[dict[str, Any]]) -> None:
    settings = numa_settings(epyc, 2, KUBE, SYSTEM, EVICTION)
    cpus = _cpus(settings["reservedSystemCPUs"])
    # one physical core (a CPU and its SMT sibling, +128) on each of the 8 NUMA nodes
    assert cpus == [0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240]
    for node in epyc:
        assert len(set(cpus) & set(node["cpus"])) == 2
    # 2148Mi / 8 = 268.5Mi: the first four nodes carry the extra halves
    assert [e["limits"]["memory"] for e in settings["reservedMemory"]] == ["269Mi"] * 4 + ["268Mi"] * 4
    assert _sum(settings["reservedMemory"]) == 2148 * MI
    # 8 NUMA nodes: still within the Topology Manager's default limit
    assert settings["topologyManagerPolicyOptions"] == {}


def test_more_than_eight_numa_nodes_sets_max_allowable(epyc: list[dict[str, Any]]) -> None:
    # two EPYC hosts' worth of nodes (16), as an NPS4 + L3-as-NUMA dual EPYC 9004 reports
    sixteen = epyc + [
        dict(node, id=node["id"] + 8, cpus=[c + 256 for c in node["cpus"]], cores=None) for node in epyc
    ]
    settings = numa_settings(sixteen, 1, KUBE, SYSTEM, EVICTION, "even", {"prefer-closest-numa-nodes": True})
    assert settings["topologyManagerPolicyOptions"] == {
        "prefer-closest-numa-nodes": "true",
        "max-allowable-numa-nodes": "16",
    }
    assert len(settings["reservedMemory"]) == 16
    assert _sum(settings["reservedMemory"]) == 2148 * MI


def test_first_split_puts_everything_on_node_zero(xeon: list[dict[str, Any]]) -> None:
    settings = numa_settings(
        xeon, 1, {"memory": "2Gi"}, {"memory": "512Mi"}, {"memory.available": "512Mi"}, "first"
    )
    assert settings["reservedMemory"] == [
        {"numaNode": 0, "limits": {"memory": "3Gi"}},
        {"numaNode": 1, "limits": {"memory": "0"}},
    ]
    assert settings["reservedSystemCPUs"] == "0-1"


def test_eviction_set_without_memory_counts_zero(xeon: list[dict[str, Any]]) -> None:
    # once evictionHard is set, an absent memory.available is 0 for the kubelet, not 100Mi
    settings = numa_settings(xeon, 1, KUBE, SYSTEM, {"nodefs.available": "10%"})
    assert _sum(settings["reservedMemory"]) == 2048 * MI


# ------------------------------------------------------------------------------ refusals


def test_filter_errors_name_the_problem(xeon: list[dict[str, Any]]) -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="all 48 CPUs of NUMA node 0"):
        numa_settings(xeon, 48, KUBE, SYSTEM, EVICTION)
    with pytest.raises(AnsibleFilterError, match="percentage"):
        numa_settings(xeon, 2, KUBE, SYSTEM, {"memory.available": "5%"})
    with pytest.raises(AnsibleFilterError, match="numa_nodes list of gpubring_gpu_facts"):
        numa_settings([], 2, KUBE, SYSTEM, EVICTION)


def test_user_reserved_memory_checked_on_layout(xeon: list[dict[str, Any]]) -> None:
    ids = [n["id"] for n in xeon]
    good = [{"numaNode": 0, "limits": {"memory": "2048Mi"}}, {"numaNode": 1, "limits": {"memory": "100Mi"}}]
    assert memory_problems(good, KUBE, SYSTEM, EVICTION, ids) == []
    short = [{"numaNode": 0, "limits": {"memory": "1Gi"}}, {"numaNode": 1, "limits": {"memory": "1Gi"}}]
    [problem] = memory_problems(short, KUBE, SYSTEM, EVICTION, ids)
    assert "adds up to 2Gi" in problem and "= 2148Mi" in problem
    on_missing_node = [{"numaNode": 2, "limits": {"memory": "2148Mi"}}]
    assert memory_problems(on_missing_node, KUBE, SYSTEM, EVICTION, ids) == [
        "reservedMemory[0].numaNode: NUMA node 2 does not exist on this host (nodes: 0-1)"
    ]


# ------------------------------------------------------------------------------ inventory validation


def _gpu_vars(text: str) -> dict[str, str]:
    # In place of the sample's topology settings: group_vars files of one group are read in name
    # order, so a separate file would lose to topology.yml's values.
    return {"group_vars/gpu_nodes/topology.yml": text}


def test_validator_refuses_a_bad_sum(make_inventory: Callable[..., Path]) -> None:
    inv = make_inventory(
        _gpu_vars(
            "kubelet_topology_reserved_memory:\n"
            "  - {numaNode: 0, limits: {memory: 1Gi}}\n"
            "  - {numaNode: 1, limits: {memory: 1Gi}}\n"
        )
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(inv)
    messages = [str(p) for p in err.value.problems]
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        "group_vars/gpu_nodes/topology.yml: kubelet_topology_reserved_memory: expected settings the "
        "kubelet's Static memory manager accepts: reservedMemory adds up to 2Gi of memory"
    )
    assert "= 2148Mi" in messages[0]


def test_validator_accepts_a_sum_that_matches(make_inventory: Callable[..., Path]) -> None:
    inv = make_inventory(
        _gpu_vars(
            "kubelet_topology_kube_reserved: {memory: 2Gi}\n"
            "kubelet_topology_reserved_memory:\n"
            "  - {numaNode: 0, limits: {memory: 2Gi}}\n"
            "  - {numaNode: 1, limits: {memory: 1124Mi}}\n"
        )
    )
    assert load_inventory(inv).hosts


def test_validator_refuses_a_percentage_eviction(make_inventory: Callable[..., Path]) -> None:
    inv = make_inventory(_gpu_vars("kubelet_topology_eviction_hard: {memory.available: 5%}\n"))
    with pytest.raises(InventoryError) as err:
        load_inventory(inv)
    [problem] = {str(p) for p in err.value.problems}
    assert problem.startswith("group_vars/gpu_nodes/topology.yml: kubelet_topology_eviction_hard: expected")
    assert "is a percentage" in problem
    # the None policy needs no reservedMemory, so a percentage is fine there
    inv = make_inventory(
        _gpu_vars(
            "kubelet_topology_eviction_hard: {memory.available: 5%}\n"
            "kubelet_topology_memory_manager_policy: None\n"
        )
    )
    assert load_inventory(inv).hosts


# ------------------------------------------------------------------------------ in Ansible


def test_filter_by_fqcn_in_ansible(tmp_path: Path) -> None:
    """The filter resolves as gpubring.core.kubelet_numa_settings in a real ansible run."""
    layout = [
        {"id": 0, "cpus": [0, 1, 2, 3], "cores": [[0, 2], [1, 3]]},
        {"id": 1, "cpus": [4, 5], "cores": None},
    ]
    expr = "{{ layout | gpubring.core.kubelet_numa_settings(1, {'memory': '1Gi'}, {'memory': '1Gi'}) }}"
    env = collection_env(
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
    )
    ansible = BIN / "ansible"
    result = subprocess.run(
        [str(ansible), "localhost", "-m", "ansible.builtin.debug", "-a", f"msg={expr}",
         "-e", json.dumps({"layout": layout})],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout[result.stdout.index("{") :])
    settings = out["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert settings["reservedSystemCPUs"] == "0,2,4"
    assert settings["reservedMemory"] == [
        {"numaNode": 0, "limits": {"memory": "1074Mi"}},
        {"numaNode": 1, "limits": {"memory": "1074Mi"}},
    ]
