"""The fabric test's verdict (module_utils/nccl_log) on real all_reduce_perf / NCCL_DEBUG=INFO logs,
and its Job and MPIJob rendered through Ansible's templating (roles/fabric_test).

Fixtures (tests/fixtures/nccl, sources in SOURCES.md), worked out by hand:
- multi-node-2x-p40-roce-net-ib-koordinator: 2 nodes x 1 P40 over ConnectX-5 RoCE through NCCL's
  IB verbs plugin (``Using network IBext_v8``); 11 sizes 2M..2G, busbw 2.84 GB/s at 2G, avg 2.61937.
- single-node-8x-a100-sxm4-40gb-table-only-superbench: 8 A100 SXM4 in one process, 34 rows 0..8G,
  busbw 235.26 GB/s at 8G, avg 68.4048; no transport lines (run without NCCL_DEBUG=INFO).
- single-node-8x-a100-hgx-nvswitch-p2p-ipc-read: the channel lines of an HGX A100 run (via
  P2P/IPC/read), no table (the issue printed it apart).
- socket-fallback-2-node-16-rank-no-ib-device: 2 nodes x 8 GPUs, ``NET/IB : No device found`` then
  ``Using network Socket``, channels via NET/Socket/0 between nodes and P2P/IPC inside.
Floors (gpu_expect, from tests/fixtures/hw): one A100 HGX node: 12 NVLinks x 25 GB/s = 300 -> 0.7 x
300 = 210 GB/s; 8 A100 with 8 HDR rails (Azure ND A100 v4 ibstat): min(300, 8 x 200 / 8 / 8 = 25)
-> 17.5 GB/s; one P40 per node (PCIe Gen3 x16 = 15.754 GB/s) with one 25 Gb/s RoCE port (the
source's own ibstat): min(15.754, 25 / 8 = 3.125) -> 2.188 GB/s.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

import upstream
from _render import schema_version
from gpubring import releases
from gpubring.inventory import Inventory, load_inventory
from helpers import DATA, FIXTURES, HW, REPO, collection_module, module_utils

N = module_utils("nccl_log")
E = module_utils("gpu_expect")
P = module_utils("gpu_parsers")
NCCL = FIXTURES / "nccl"
ROLE = REPO / "roles" / "fabric_test"

IB = "multi-node-2x-p40-roce-net-ib-koordinator.txt"
TABLE = "single-node-8x-a100-sxm4-40gb-table-only-superbench.txt"
P2P = "single-node-8x-a100-hgx-nvswitch-p2p-ipc-read.txt"
SOCKET = "socket-fallback-2-node-16-rank-no-ib-device.txt"
GDRDMA = "multi-node-h100-ibext-gdrdma-channels-nccl-1453.txt"
GDR_DISABLED = "multi-node-roce-gdr-disabled-nccl-1537.txt"


def log(name: str) -> str:
    return (NCCL / name).read_text()


# -- floors from the hardware captures ---------------------------------------------------------------


def a100_one_node_floor() -> dict[str, Any]:
    topo = P.parse_nvidia_smi_topo(
        (HW / "nvidia-smi-topo/8x-a100-sxm4-40gb-10nic-dual-epyc-7742.txt").read_text()
    )
    links = E.nvlink_links_per_gpu(P.topo_gpu_gpu_links(topo))
    per_gpu = E.nvlink_expectation(min(links.values()), architecture="ampere")["gpu_gbs"]
    return E.nccl_allreduce_floor(gpu_count=len(links), nvlink_gpu_gbs=per_gpu)


def a100_hdr_multi_node_floor() -> dict[str, Any]:
    cas = P.parse_ibstat((HW / "ibstat/8x-connectx6-vf-hdr200-azure-nd-a100-v4.txt").read_text())
    rates = [p["rate_gbps"] for p in E.ports_from_ibstat(cas) if p["rate_gbps"]]
    return E.nccl_allreduce_floor(gpu_count=8, nvlink_gpu_gbs=300.0, nodes=2, rail_rates_gbps=rates)


def p40_roce_multi_node_floor() -> dict[str, Any]:
    return E.nccl_allreduce_floor(
        gpu_count=1,
        nvlink_gpu_gbs=None,
        pcie_gpu_gbs=E.pcie_bandwidth_gbs(3, 16),
        nodes=2,
        rail_rates_gbps=[25.0],
    )


def test_the_floors() -> None:
    assert (a100_one_node_floor()["floor_gbs"], a100_one_node_floor()["limited_by"]) == (210.0, "nvlink")
    assert (a100_hdr_multi_node_floor()["floor_gbs"], a100_hdr_multi_node_floor()["limited_by"]) == (
        17.5,
        "rails",
    )
    assert (p40_roce_multi_node_floor()["floor_gbs"], p40_roce_multi_node_floor()["limited_by"]) == (
        2.188,
        "rails",
    )


# -- the parser on every fixture ---------------------------------------------------------------------


def test_multi_node_ib_log() -> None:
    parsed = N.parse_all_reduce_log(log(IB))
    assert parsed["sizes"] == [2097152 * 2**i for i in range(11)]
    assert (parsed["busbw_gbs"], parsed["avg_busbw_gbs"], parsed["out_of_bounds"]) == (2.84, 2.61937, 0)
    assert parsed["largest"]["in_place"] == {"time_us": 757311.0, "algbw_gbs": 2.84, "busbw_gbs": 2.84}
    assert (parsed["nccl_version"], parsed["ranks"], parsed["wrong"]) == ("2.21.5+cuda12.4", 2, [])
    transport = parsed["transport"]
    assert (transport["network"], transport["networks"], transport["socket_channels"]) == ("IB", ["IB"], 0)
    assert transport["ib_devices"] == [{"device": "mlx5_2", "port": 1, "link_layer": "RoCE"}]


def test_single_node_table_without_debug_lines() -> None:
    parsed = N.parse_all_reduce_log(log(TABLE))
    assert len(parsed["rows"]) == 34 and parsed["sizes"][0] == 0 and parsed["sizes"][-1] == 8589934592
    assert (parsed["busbw_gbs"], parsed["avg_busbw_gbs"], parsed["ranks"]) == (235.26, 68.4048, 8)
    assert parsed["rows"][-1]["out_of_place_wrong"] is None  # validation off: N/A
    assert parsed["transport"]["channels"] == {} and parsed["transport"]["network"] is None


def test_single_node_p2p_lines() -> None:
    transport = N.parse_transport(log(P2P))
    assert transport["channels"] == {"P2P/IPC": 4}
    assert (transport["network"], transport["shm_channels"]) == (None, 0)
    assert N.transport_problem(transport, nodes=1) is None
    assert N.parse_all_reduce_log(log(P2P))["rows"] == []


def test_socket_fallback_lines() -> None:
    transport = N.parse_transport(log(SOCKET))
    assert (transport["network"], transport["no_ib_device"]) == ("Socket", True)
    assert transport["channels"] == {"NET/Socket": 6, "P2P/IPC": 4}
    assert N.parse_all_reduce_log(log(SOCKET))["ranks"] == 16


def test_a_socket_bootstrap_line_is_no_fallback() -> None:
    # NCCL always names the socket interface it bootstraps through; the data path is "Using network".
    assert "NET/Socket" not in log(IB)
    lines = log(SOCKET).splitlines()
    bootstrap_only = "\n".join(line for line in lines if "NET/Socket : Using" in line) + "\n" + log(IB)
    assert N.parse_transport(bootstrap_only)["network"] == "IB"


# -- the verdict -------------------------------------------------------------------------------------


def test_one_node_passes_its_floor_only_with_a_known_transport() -> None:
    floor = a100_one_node_floor()
    passed = N.all_reduce_check(log(TABLE), floor, nodes=1, require_debug=False)
    assert passed["status"] == "passed" and passed["measured"]["busbw_gbs"] == 235.26
    assert passed["expected"]["min_busbw_gbs"] == 210.0
    failed = N.all_reduce_check(log(TABLE), floor, nodes=1)
    assert failed["status"] == "failed"
    assert failed["reason"] == "no P2P channel (via P2P/IPC, P2P/CUMEM, P2P/direct) or NVLS in the log"
    assert set(failed) == {"name", "status", "expected", "measured", "reason"}


def test_multi_node_ib_against_the_floors() -> None:
    own = N.all_reduce_check(log(IB), p40_roce_multi_node_floor(), nodes=2)
    assert (own["status"], own["name"], own["measured"]["network"]) == (
        "passed",
        "nccl_all_reduce:multi_node",
        "IB",
    )
    eight_rails = N.all_reduce_check(log(IB), a100_hdr_multi_node_floor(), nodes=2)
    assert eight_rails["status"] == "failed"
    assert (
        eight_rails["reason"]
        == "busbw 2.84 GB/s at 2147483648 bytes < floor 17.5 GB/s (of 25.0 GB/s, limited by rails)"
    )


def test_socket_fallback_fails_even_when_its_bandwidth_passes() -> None:
    floor = p40_roce_multi_node_floor()
    alone = N.all_reduce_check(log(SOCKET), floor, nodes=2)
    assert alone["status"] == "failed"
    assert alone["reason"].startswith("NCCL fell back to TCP sockets (NET/Socket) (NET/IB : No device found)")
    # The real IB run's table (2.84 GB/s, above its 2.188 floor) with the real socket-fallback lines.
    info = "\n".join(line for line in log(SOCKET).splitlines() if "NCCL INFO" in line)
    table = "\n".join(line for line in log(IB).splitlines() if "NCCL INFO" not in line)
    mixed = N.all_reduce_check(info + "\n" + table, floor, nodes=2)
    assert mixed["measured"]["busbw_gbs"] == 2.84 > floor["floor_gbs"]
    assert (mixed["status"], mixed["reason"]) == (
        "failed",
        "NCCL fell back to TCP sockets (NET/Socket) (NET/IB : No device found): RDMA is not in use",
    )


def test_no_floor_is_a_skip_with_the_reason_and_no_rows_a_failure() -> None:
    skipped = N.all_reduce_check(
        log(IB), E.nccl_allreduce_floor(gpu_count=8, nvlink_gpu_gbs=300.0, nodes=2), nodes=2
    )
    assert (skipped["status"], skipped["reason"]) == (
        "skipped",
        "no busbw floor: no active rail NIC with a known rate",
    )
    empty = N.all_reduce_check("", a100_one_node_floor(), nodes=1)
    assert empty["status"] == "failed" and "no all_reduce_perf result row in the log" in empty["reason"]


# -- GPUDirect RDMA (fabric_test_gdrdma) -----------------------------------------------------------


def _ib_table() -> str:
    """The real 2-node IB run's table and INFO lines (no channel lines: its GDRDMA cannot be told)."""
    return log(IB)


def test_gdrdma_channel_lines_are_read() -> None:
    transport = N.parse_transport(log(GDRDMA))
    assert transport["channels"] == {"NET/IB": 12}
    assert (transport["gdrdma"], transport["gdrdma_channels"], transport["ib_plain_channels"]) == (
        True,
        12,
        0,
    )
    disabled = N.parse_transport(log(GDR_DISABLED))
    assert disabled["gdr_disabled"] == ["mlx5_0", "mlx5_1"] and disabled["network"] == "IB"
    assert disabled["gdrdma"] is False
    # PXN (a proxied send prints the proxy rank) and the PCI mode keep their GDRDMA (net.cc's formats).
    pxn = N.parse_transport("NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/2(3)/GDRDMA(PCI)")
    assert (pxn["gdrdma_channels"], pxn["ib_plain_channels"]) == (1, 0)
    plain = N.parse_transport("NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0")
    assert (plain["gdrdma_channels"], plain["ib_plain_channels"]) == (0, 1)


def test_gdrdma_expected_passes_only_with_gdrdma_channels() -> None:
    floor = p40_roce_multi_node_floor()
    with_gdr = N.all_reduce_check(_ib_table() + log(GDRDMA), floor, nodes=2, gdrdma=True)
    assert with_gdr["status"] == "passed", with_gdr["reason"]
    assert with_gdr["measured"]["gdrdma_channels"] == 12
    assert with_gdr["expected"]["transport"] == "NET/IB with GPUDirect RDMA (via NET/IB/<dev>/GDRDMA)"
    # The same run without the channel lines: GPUDirect cannot be told, so it fails when expected...
    untold = N.all_reduce_check(_ib_table(), floor, nodes=2, gdrdma=True)
    assert untold["status"] == "failed"
    assert "no NET/IB channel line (via NET/IB/<dev>/GDRDMA) in the log" in untold["reason"]
    # ... and passes as before when it is not expected.
    assert N.all_reduce_check(_ib_table(), floor, nodes=2)["status"] == "passed"


def test_gdrdma_disabled_fails_although_the_bandwidth_passes() -> None:
    floor = p40_roce_multi_node_floor()
    mixed = N.all_reduce_check(log(GDR_DISABLED) + _ib_table(), floor, nodes=2, gdrdma=True)
    assert mixed["measured"]["busbw_gbs"] == 2.84 > floor["floor_gbs"]
    assert (mixed["status"], mixed["reason"]) == (
        "failed",
        "GPUDirect RDMA expected (Network Operator RDMA device, nvidia-peermem) but not in use: NCCL says "
        "GPU Direct RDMA Disabled for HCA mlx5_0, mlx5_1 (is nvidia-peermem loaded on every node?)",
    )
    plain = "x NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n"
    half = N.all_reduce_check(_ib_table() + log(GDRDMA) + plain, floor, nodes=2, gdrdma=True)
    assert "1 of 13 NET/IB channels without /GDRDMA" in half["reason"]
    # One node never asks for GPUDirect RDMA.
    one = N.all_reduce_check(log(TABLE), a100_one_node_floor(), nodes=1, require_debug=False, gdrdma=True)
    assert one["status"] == "passed"


def test_the_filters() -> None:
    filters = collection_module("filter.nccl_log").FilterModule().filters()
    assert filters["nccl_log_parse"](log(IB))["busbw_gbs"] == 2.84
    check = filters["nccl_log_check"](log(IB), p40_roce_multi_node_floor(), 2, "nccl_all_reduce:multi_node")
    assert check["status"] == "passed"
    # gdrdma as the role passes it (a Jinja bool, or its string form).
    for expected in (True, "true", "True"):
        gdr = filters["nccl_log_check"](log(IB), p40_roce_multi_node_floor(), 2, None, True, expected)
        assert gdr["status"] == "failed", expected
    assert (
        filters["nccl_log_check"](log(IB), p40_roce_multi_node_floor(), 2, None, True, "false")["status"]
        == "passed"
    )


def test_every_fixture_is_covered_and_sourced() -> None:
    names = {p.name for p in NCCL.glob("*.txt")}
    assert names == {IB, TABLE, P2P, SOCKET, GDRDMA, GDR_DISABLED}
    sources = (NCCL / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in names)


# -- rendering: the Job and the MPIJob ---------------------------------------------------------------

INVENTORIES = {
    "prod": REPO / "inventories" / "prod",
    "dra-kueue-rdma": DATA / "inventories" / "dra-kueue-rdma",
    # Neither the Network Operator nor the fabric test turned on.
    "mig-timeslicing": DATA / "inventories" / "mig-timeslicing",
}
IMAGE = "registry.example.internal/hpc/nccl-tests:2.13.11-cuda12.6"
PINS = yaml.safe_load((REPO / "versions.yml").read_text(encoding="utf-8"))["gpubring_versions"]
ALL_REDUCE_PERF = PINS["nccl_tests"]["all_reduce_perf"]


@pytest.fixture(scope="module")
def inventories() -> dict[str, Inventory]:
    return {name: load_inventory(root) for name, root in INVENTORIES.items()}


def templates() -> dict[str, str]:
    names = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))[
        "__fabric_test_templates"
    ]
    return {str(k): str(v) for k, v in names.items()}


def plan_for(inv: Inventory) -> dict[str, Any]:
    nodes = [n for n in inv.groups["gpu_nodes"] if not n.startswith("gb200")][:2]
    return {"nodes": nodes, "gpus": 8, "max_bytes": "8G"}


def rendered(inv: Inventory, name: str, plan: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    text = releases.render_template(
        inv,
        f"fabric_test/templates/{templates()[name]}",
        host_vars={"__fabric_test_plan": plan or plan_for(inv), "fabric_test_image": IMAGE},
    )
    objects = yaml.safe_load(text)
    assert isinstance(objects, list), f"{name}: expected a YAML list of objects"
    return objects


def test_every_template_is_listed_and_used() -> None:
    on_disk = {p.relative_to(ROLE / "templates").as_posix() for p in (ROLE / "templates").rglob("*.j2")}
    assert set(templates().values()) == on_disk
    tasks = "".join(p.read_text(encoding="utf-8") for p in (ROLE / "tasks").glob("*.yml"))
    for key in templates():
        assert f"__fabric_test_templates.{key}" in tasks


@pytest.mark.parametrize("inventory", list(INVENTORIES))
def test_one_node_jobs_validate_at_the_pinned_kubernetes(
    inventories: dict[str, Inventory], inventory: str
) -> None:
    inv = inventories[inventory]
    jobs = rendered(inv, "one_node")
    (namespace,) = rendered(inv, "namespace")
    assert [j["metadata"]["annotations"]["gpubring.io/fabric-node"] for j in jobs] == plan_for(inv)["nodes"]
    for job in jobs:
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["command"] == [ALL_REDUCE_PERF, "-b", "8", "-e", "8G", "-f", "2", "-g", "8"]
        assert {"name": "NCCL_DEBUG", "value": "INFO"} in container["env"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
        assert container["image"] == IMAGE
    for obj in [namespace, *jobs]:
        try:
            kubernetes_validate.validate(obj, schema_version(inv), strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{inventory} {obj['kind']}/{obj['metadata']['name']}: {exc.message}")


def test_mpijob_structure_with_rdma(inventories: dict[str, Inventory]) -> None:
    inv = inventories["dra-kueue-rdma"]
    (mpijob,) = rendered(inv, "multi_node")
    assert (mpijob["apiVersion"], mpijob["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    specs = mpijob["spec"]["mpiReplicaSpecs"]
    assert (specs["Launcher"]["replicas"], specs["Worker"]["replicas"], mpijob["spec"]["slotsPerWorker"]) == (
        1,
        2,
        8,
    )
    (launcher,) = specs["Launcher"]["template"]["spec"]["containers"]
    assert launcher["command"][:4] == ["mpirun", "--allow-run-as-root", "-np", "16"]
    assert launcher["command"][-9:] == [ALL_REDUCE_PERF, "-b", "8", "-e", "8G", "-f", "2", "-g", "1"]
    assert "NCCL_DEBUG=INFO" in launcher["command"] and "limits" not in launcher["resources"]
    worker = specs["Worker"]["template"]
    (container,) = worker["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": 1}
    assert container["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}
    assert worker["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/networks": "team-a/rdma-roce,team-b/rdma-ib"
    }
    terms = worker["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["h100-1", "h100-2"]
    assert worker["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (namespace,) = rendered(inv, "namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_mpijob_without_the_network_operator_and_with_one_node(inventories: dict[str, Inventory]) -> None:
    inv = inventories["mig-timeslicing"]
    (mpijob,) = rendered(inv, "multi_node")
    (container,) = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert "securityContext" not in container
    assert "annotations" not in mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert rendered(inv, "multi_node", {"nodes": ["gpu-1"], "gpus": 8, "max_bytes": "8G"}) == []


MPIJOB_CRD = FIXTURES / "crds" / "kubeflow.org_mpijobs-v0.8.0.yaml"


def test_the_mpijob_validates_against_the_mpi_operators_crd(inventories: dict[str, Inventory]) -> None:
    """gpubring pins no MPI operator: the CRD of its v0.8.0 release (tests/fixtures/crds/SOURCES.md)
    stands in for the pinned charts' CRDs, checked the same way (unknown fields are errors)."""
    crd = upstream.crd_from_file(MPIJOB_CRD)[("kubeflow.org/v2beta1", "MPIJob")]
    for name in ("dra-kueue-rdma", "prod"):
        (mpijob,) = rendered(inventories[name], "multi_node")
        assert upstream.crd_errors(mpijob, crd) == [], name
    # A mistake the API server would refuse is caught.
    (mpijob,) = rendered(inventories["prod"], "multi_node")
    mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["replica"] = 2
    assert any("replica" in e for e in upstream.crd_errors(mpijob, crd))


def test_defaults_follow_the_network_operator(inventories: dict[str, Inventory]) -> None:
    off = releases.host_variables(inventories["mig-timeslicing"], None, ("fabric_test",))
    rdma = releases.host_variables(inventories["dra-kueue-rdma"], None, ("fabric_test",))
    assert off["fabric_test_enabled"] is False
    assert off["fabric_test_image"] == PINS["nccl_tests"]["image"] == rdma["fabric_test_image"]
    assert off["fabric_test_rdma"] is False and rdma["fabric_test_rdma"] is True
    # GPUDirect RDMA is expected with the Network Operator's RDMA device (and nvidia-peermem not turned off).
    assert off["fabric_test_gdrdma"] is False and rdma["fabric_test_gdrdma"] is True
    # The sample runs the fabric test on its whole-GPU group with RDMA and GPUDirect RDMA expected.
    prod = releases.host_variables(inventories["prod"], None, ("fabric_test",))
    assert (prod["fabric_test_enabled"], prod["fabric_test_rdma"], prod["fabric_test_gdrdma"]) == (True,) * 3
    assert prod["fabric_test_gpu_group"] == "gpu_train"
    assert rdma["fabric_test_rdma_resource"] == "rdma/rdma_shared_device_a"
    assert [n["name"] for n in rdma["fabric_test_networks"]] == ["rdma-roce", "rdma-ib"]
