"""Kubelet NUMA settings (module_utils/gpu_topology) on the NUMA layouts of the captured hosts:
the dual Xeon Platinum 8468 H100 node (numactl -H and lscpu, 2 nodes, no SMT) and the dual EPYC 7742
A100 node (lscpu, 8 nodes in NPS4, SMT on)."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import HW, module_utils

P = module_utils("gpu_parsers")
T = module_utils("gpu_topology")

EPYC_NODE_FIRST_CPUS = [0, 16, 32, 48, 64, 80, 96, 112]


@pytest.fixture(scope="module")
def epyc() -> list[dict[str, Any]]:
    lscpu = P.parse_lscpu((HW / "lscpu/dual-epyc-7742-dgx-a100-class-8gpu.txt").read_text())
    return T.numa_layout_from_lscpu(lscpu, P.lscpu_core_groups(lscpu))


@pytest.fixture(scope="module")
def xeon_numactl() -> list[dict[str, Any]]:
    return T.numa_layout_from_numactl(
        P.parse_numactl_hardware((HW / "numactl/dual-xeon-platinum-8468-8x-h100-sxm-node.txt").read_text())
    )


@pytest.fixture(scope="module")
def xeon_lscpu() -> list[dict[str, Any]]:
    lscpu = P.parse_lscpu((HW / "lscpu/dual-xeon-platinum-8468-8x-h100-sxm-node.txt").read_text())
    return T.numa_layout_from_lscpu(lscpu, P.lscpu_core_groups(lscpu))


# ------------------------------------------------------------------------------------- layouts


def test_layouts(epyc: list[dict[str, Any]], xeon_numactl: list[dict[str, Any]]) -> None:
    assert [n["id"] for n in epyc] == list(range(8))
    assert epyc[0]["cores"][:2] == [[0, 128], [1, 129]]
    assert len(epyc[3]["cores"]) == 16
    assert [(n["id"], len(n["cpus"]), n["memory_mb"], n["cores"]) for n in xeon_numactl] == [
        (0, 48, 515020, None),
        (1, 48, 516037, None),
    ]


# -------------------------------------------------------------------------- reservedSystemCPUs


def test_reserved_cpus_epyc_whole_cores(epyc: list[dict[str, Any]]) -> None:
    # 2 CPUs per node = one core and its sibling on each of the 8 nodes
    cpus = T.reserved_system_cpus(epyc, 2)
    assert cpus == EPYC_NODE_FIRST_CPUS + [c + 128 for c in EPYC_NODE_FIRST_CPUS]
    assert T.reserved_system_cpus_string(epyc, 2) == "0,16,32,48,64,80,96,112,128,144,160,176,192,208,224,240"
    # 1 CPU per node still takes the whole core; 3 CPUs take two cores (4 CPUs)
    assert T.reserved_system_cpus(epyc, 1) == cpus
    assert T.reserved_system_cpus_string(epyc, 3) == ",".join(
        f"{c}-{c + 1}" for c in EPYC_NODE_FIRST_CPUS + [c + 128 for c in EPYC_NODE_FIRST_CPUS]
    )
    assert len(T.reserved_system_cpus(epyc, 3)) == 32


def test_reserved_cpus_without_known_siblings(epyc: list[dict[str, Any]]) -> None:
    unknown = [dict(node, cores=None) for node in epyc]
    assert T.reserved_system_cpus_string(unknown, 2) == ",".join(f"{c}-{c + 1}" for c in EPYC_NODE_FIRST_CPUS)


def test_reserved_cpus_xeon_interleaved_numbering(
    xeon_numactl: list[dict[str, Any]], xeon_lscpu: list[dict[str, Any]]
) -> None:
    # node 0 has the even CPUs, node 1 the odd ones
    assert T.reserved_system_cpus(xeon_numactl, 2) == [0, 1, 2, 3]
    assert T.reserved_system_cpus_string(xeon_numactl, 4) == "0-7"
    assert T.reserved_system_cpus(xeon_lscpu, 2) == [0, 1, 2, 3]  # no SMT: cores of one CPU
    assert T.reserved_system_cpus(xeon_numactl, 0) == []


def test_reserved_cpus_refuses_whole_nodes(xeon_numactl: list[dict[str, Any]]) -> None:
    with pytest.raises(ValueError, match="all 48 CPUs of NUMA node 0"):
        T.reserved_system_cpus(xeon_numactl, 48)
    with pytest.raises(ValueError, match="whole number"):
        T.reserved_system_cpus(xeon_numactl, -1)


def test_reserved_cpus_skip_memory_only_nodes() -> None:
    nodes = [{"id": 0, "cpus": [0, 1, 2, 3], "cores": None}, {"id": 1, "cpus": [], "cores": []}]
    assert T.reserved_system_cpus(nodes, 1) == [0]


# ------------------------------------------------------------------------------------ quantities


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Gi", 2**30),
        ("100Mi", 100 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("512Ki", 512 * 1024),
        ("1G", 10**9),
        ("500M", 500 * 10**6),
        ("1e3", 1000),
        ("1048576", 2**20),
        (2048, 2048),
    ],
)
def test_parse_quantity(text: str | int, expected: int) -> None:
    assert T.parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["abc", "-1Gi", "10%", "1.5", "1Xi", "", True])
def test_parse_quantity_rejects(text: Any) -> None:
    with pytest.raises(ValueError):
        T.parse_quantity(text)


def test_format_quantity() -> None:
    assert T.format_quantity(1124 * 2**20) == "1124Mi"
    assert T.format_quantity(2 * 2**30) == "2Gi"
    assert T.format_quantity(1536) == "1536"
    assert T.format_quantity(3 * 2**10) == "3Ki"
    assert T.format_quantity(0) == "0"


# -------------------------------------------------------------------------------- reservedMemory


def test_reserved_memory_total_follows_kubelet_defaults() -> None:
    mi = 2**20
    # evictionHard unset: memory.available defaults to 100Mi
    assert T.reserved_memory_total({"memory": "512Mi", "cpu": "500m"}, {"memory": "512Mi"}) == 1124 * mi
    # evictionHard set without memory.available: the kubelet uses 0 for it
    assert T.reserved_memory_total({"memory": "1Gi"}, None, {"nodefs.available": "10%"}) == 1024 * mi
    assert T.reserved_memory_total("1Gi", "1Gi", {"memory.available": "500Mi"}) == 2548 * mi
    with pytest.raises(ValueError, match="percentage"):
        T.reserved_memory_total({"memory": "1Gi"}, None, {"memory.available": "5%"})
    with pytest.raises(ValueError, match="kube-reserved memory"):
        T.reserved_memory_total({"memory": "lots"}, None)


def test_split_reserved_memory_xeon(xeon_numactl: list[dict[str, Any]]) -> None:
    total = T.reserved_memory_total({"memory": "512Mi"}, {"memory": "512Mi"})
    entries = T.split_reserved_memory(total, [n["id"] for n in xeon_numactl])
    assert entries == [
        {"numaNode": 0, "limits": {"memory": "562Mi"}},
        {"numaNode": 1, "limits": {"memory": "562Mi"}},
    ]
    assert T.split_reserved_memory(total, [1, 0], "first") == [
        {"numaNode": 0, "limits": {"memory": "1124Mi"}},
        {"numaNode": 1, "limits": {"memory": "0"}},
    ]


def test_split_reserved_memory_epyc_adds_up_exactly(epyc: list[dict[str, Any]]) -> None:
    total = T.reserved_memory_total({"memory": "512Mi"}, {"memory": "512Mi"})
    entries = T.split_reserved_memory(total, [n["id"] for n in epyc])
    # 1124Mi / 8 = 140.5Mi: four nodes get 141Mi, four 140Mi
    assert [e["limits"]["memory"] for e in entries] == ["141Mi"] * 4 + ["140Mi"] * 4
    assert sum(T.parse_quantity(e["limits"]["memory"]) for e in entries) == total
    assert (
        T.check_reserved_memory(entries, {"memory": "512Mi"}, {"memory": "512Mi"}, None, list(range(8))) == []
    )


def test_split_reserved_memory_odd_byte_total() -> None:
    total = T.reserved_memory_total({"memory": "1G"}, None)  # 10^9 + 100Mi bytes, not whole Ki
    entries = T.split_reserved_memory(total, [0, 1, 2])
    assert sum(T.parse_quantity(e["limits"]["memory"]) for e in entries) == total
    with pytest.raises(ValueError, match="even or first"):
        T.split_reserved_memory(total, [0], "spread")
    with pytest.raises(ValueError, match="no NUMA nodes"):
        T.split_reserved_memory(total, [])


def test_check_reserved_memory_problems() -> None:
    kube, system = {"memory": "512Mi"}, {"memory": "512Mi"}
    wrong_sum = [
        {"numaNode": 0, "limits": {"memory": "512Mi"}},
        {"numaNode": 1, "limits": {"memory": "512Mi"}},
    ]
    [problem] = T.check_reserved_memory(wrong_sum, kube, system, None, [0, 1])
    assert "adds up to 1Gi" in problem
    assert "evictionHard memory.available (100Mi) = 1124Mi" in problem

    bad = [
        {"numaNode": 0, "limits": {"memory": "1124Mi"}},
        {"numaNode": 0, "limits": {"memory": "0"}},
        {"numaNode": 3, "limits": {"memory": "0"}},
        {"numaNode": "one", "limits": {"memory": "0"}},
        {"numaNode": 1, "limits": {"memory": "lots"}},
        {"numaNode": 1},
        "node 2",
    ]
    problems = T.check_reserved_memory(bad, kube, system, None, [0, 1])
    assert problems == [
        "reservedMemory[1].numaNode: NUMA node 0 is listed twice",
        "reservedMemory[2].numaNode: NUMA node 3 does not exist on this host (nodes: 0-1)",
        "reservedMemory[3].numaNode must be a NUMA node id (an integer >= 0), got 'one'",
        "reservedMemory[4].limits.memory: 'lots' is not a Kubernetes quantity",
        "reservedMemory[5].numaNode: NUMA node 1 is listed twice",
        "reservedMemory[5].limits.memory is missing",
        "reservedMemory[6] must be a mapping with numaNode and limits",
    ]
    assert T.check_reserved_memory([], kube, system) == [
        "reservedMemory must be a non-empty list of {numaNode, limits: {memory}} entries"
    ]
    assert T.check_reserved_memory(wrong_sum, kube, system, {"memory.available": "10%"})[0].startswith(
        "evictionHard memory.available '10%' is a percentage"
    )


# ------------------------------------------------------------------------------ Topology Manager


def test_topology_manager_options(epyc: list[dict[str, Any]]) -> None:
    # 8 NUMA nodes is still within the Topology Manager's default limit
    assert T.max_allowable_numa_nodes(len(epyc)) is None
    assert T.topology_manager_policy_options(len(epyc), {"prefer-closest-numa-nodes": True}) == {
        "prefer-closest-numa-nodes": "true"
    }
    # two EPYC 9004 sockets in NPS4 with L3-as-NUMA report 16 nodes
    assert T.max_allowable_numa_nodes(16) == 16
    assert T.topology_manager_policy_options(16) == {"max-allowable-numa-nodes": "16"}
    assert T.topology_manager_policy_options(16, {"max-allowable-numa-nodes": "10"}) == {
        "max-allowable-numa-nodes": "16"
    }
    assert T.topology_manager_policy_options(16, {"max-allowable-numa-nodes": 32}) == {
        "max-allowable-numa-nodes": "32"
    }


def test_kubelet_numa_settings(xeon_numactl: list[dict[str, Any]], epyc: list[dict[str, Any]]) -> None:
    xeon = T.kubelet_numa_settings(
        xeon_numactl,
        2,
        kube_reserved={"memory": "1Gi"},
        system_reserved={"memory": "1Gi"},
        eviction_hard={"memory.available": "500Mi"},
    )
    assert xeon == {
        "reservedSystemCPUs": "0-3",
        "reservedMemory": [
            {"numaNode": 0, "limits": {"memory": "1274Mi"}},
            {"numaNode": 1, "limits": {"memory": "1274Mi"}},
        ],
        "topologyManagerPolicyOptions": {},
    }
    amd = T.kubelet_numa_settings(epyc, 2, kube_reserved={"memory": "2Gi"}, system_reserved={"memory": "1Gi"})
    assert amd["reservedSystemCPUs"] == "0,16,32,48,64,80,96,112,128,144,160,176,192,208,224,240"
    assert (
        sum(T.parse_quantity(e["limits"]["memory"]) for e in amd["reservedMemory"])
        == (3 * 1024 + 100) * 2**20
    )
    assert len(amd["reservedMemory"]) == 8
