"""Expected performance (module_utils/gpu_expect) on every captured output in tests/fixtures/hw.

Each fixture has one case below; the numbers are worked out by hand from the capture:
- NIC: ibstat ``Rate: 400`` = NDR 4x = 400 Gb/s -> ib_write_bw floor 0.8 x 400 = 320 Gb/s; HDR 4x =
  200 -> 160; FDR 4x = 56 -> 44.8; ibv_devinfo -vv ``50.0 Gbps (64)`` x ``4X`` = 200 -> 160.
- NVLink: 18 links x 25 GB/s (H100) = 450 GB/s per GPU and direction; 12 x 25 (A100) = 300.
- NCCL busbw floor: one node 0.7 x per-GPU NVLink (H100 315, A100 210); N nodes min(that, rails
  sum / 8 / GPUs): 8 x 400 Gb/s / 8 / 8 GPUs = 50 GB/s -> 35; 8 x 200 -> 25 -> 17.5.
- PCIe: Gen5 x16 = 32 GT/s x 16 x 128/130 / 8 = 63.015 GB/s; Gen4 x16 31.508; Gen3 x16 15.754;
  Gen4 x2 (NVSwitch management link) 3.938.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import HW, collection_module, module_utils

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "hw"

E = module_utils("gpu_expect")
P = module_utils("gpu_parsers")


def text(name: str) -> str:
    return (HW / name).read_text()


def nics_from_ibstat(name: str) -> list[dict]:
    return E.nic_expectations(E.ports_from_ibstat(P.parse_ibstat(text(name))))


def summary(nics: list[dict]) -> dict[str, tuple]:
    return {
        n["device"] + "/" + str(n["port"]): (n["state"], n["rate_gbps"], n["ib_write_bw_min_gbps"])
        for n in nics
    }


# --------------------------------------------------------------------------------------------
# ibstat, ibstatus, ibv_devinfo


def check_ibstat_ndr400_h100(name: str) -> None:
    nics = nics_from_ibstat(name)
    ib = [n for n in nics if n["link_layer"] == "InfiniBand"]
    assert [n["device"] for n in ib] == [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)]
    assert {(n["rate_gbps"], n["ib_write_bw_min_gbps"], n["rate_ok"]) for n in ib} == {(400.0, 320.0, True)}
    bond = next(n for n in nics if n["device"] == "mlx5_bond_0")
    assert (bond["link_layer"], bond["rate_gbps"], bond["ib_write_bw_min_gbps"]) == ("Ethernet", 200.0, 160.0)
    # the same host's lspci -vvv (Dell HGX H100): 8 rails of NDR 400 under 8 H100 with 18 NVLinks
    one = E.nccl_allreduce_floor(
        gpu_count=8, nvlink_gpu_gbs=E.nvlink_expectation(18, architecture="hopper")["gpu_gbs"]
    )
    multi = E.nccl_allreduce_floor(
        gpu_count=8, nvlink_gpu_gbs=450.0, nodes=2, rail_rates_gbps=[n["rate_gbps"] for n in ib]
    )
    assert (one["theoretical_gbs"], one["floor_gbs"], one["limited_by"]) == (450.0, 315.0, "nvlink")
    assert (multi["theoretical_gbs"], multi["floor_gbs"], multi["limited_by"]) == (50.0, 35.0, "rails")


def check_ibstat_polling(name: str) -> None:
    nics = {n["device"]: n for n in nics_from_ibstat(name)}
    assert len(nics) == 12
    down = sorted(d for d, n in nics.items() if not n["active"])
    assert down == ["mlx5_11", "mlx5_5"]
    assert nics["mlx5_5"]["reason"] == "port 1 of mlx5_5 is DOWN"
    assert nics["mlx5_5"]["ib_write_bw_min_gbps"] is None
    cx7 = sorted(d for d, n in nics.items() if n["rate_gbps"] == 400.0)
    cx6dx = sorted(d for d, n in nics.items() if n["rate_gbps"] == 100.0)
    assert cx7 == ["mlx5_0", "mlx5_10", "mlx5_3", "mlx5_4", "mlx5_6", "mlx5_9"]
    assert cx6dx == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
    assert {nics[d]["ib_write_bw_min_gbps"] for d in cx7} == {320.0}
    assert {nics[d]["ib_write_bw_min_gbps"] for d in cx6dx} == {80.0}
    assert {n["link_layer"] for n in nics.values()} == {"Ethernet"}


def check_ibstat_azure_hdr(name: str) -> None:
    nics = nics_from_ibstat(name)
    assert summary(nics) == {f"mlx5_{i}/1": ("ACTIVE", 200.0, 160.0) for i in range(8)}
    # Azure ND A100 v4 (lspci fixture of the same VM size): 8 A100 SXM4 behind 6 NVSwitches
    one = E.nccl_allreduce_floor(
        gpu_count=8, nvlink_gpu_gbs=E.nvlink_expectation(12, architecture="ampere")["gpu_gbs"]
    )
    multi = E.nccl_allreduce_floor(gpu_count=8, nvlink_gpu_gbs=300.0, nodes=4, rail_rates_gbps=[200.0] * 8)
    assert (one["theoretical_gbs"], one["floor_gbs"]) == (300.0, 210.0)
    assert (multi["theoretical_gbs"], multi["floor_gbs"], multi["limited_by"]) == (25.0, 17.5, "rails")


def check_ibstat_fdr(name: str) -> None:
    assert summary(nics_from_ibstat(name)) == {"mlx4_0/1": ("ACTIVE", 56.0, 44.8)}


def check_ibstat_mixed(name: str) -> None:
    nics = nics_from_ibstat(name)
    assert summary(nics) == {f"mlx5_{i}/1": ("ACTIVE", 200.0, 160.0) for i in range(9)}
    assert [n["device"] for n in nics if n["link_layer"] == "Ethernet"] == ["mlx5_0"]


def check_ibstatus_azure(name: str) -> None:
    nics = E.nic_expectations(E.parse_ibstatus(text(name)))
    expected = {f"mlx5_{i}/1": ("ACTIVE", 200.0, 160.0) for i in range(8)}
    expected["mlx5_8/1"] = ("ACTIVE", 40.0, 32.0)
    assert summary(nics) == expected


def check_devinfo_cx3(name: str) -> None:
    nics = E.nic_expectations(E.ports_from_ibv_devinfo(P.parse_ibv_devinfo(text(name))))
    by = summary(nics)
    # plain ibv_devinfo prints no speed: the port is up but there is no figure, and the reason says so
    assert by == {
        "mlx4_1/1": ("ACTIVE", None, None),
        "mlx4_1/2": ("DOWN", None, None),
        "mlx4_0/1": ("ACTIVE", None, None),
        "mlx4_0/2": ("DOWN", None, None),
    }
    assert "no link rate" in nics[0]["reason"]
    assert nics[1]["reason"] == "port 2 of mlx4_1 is DOWN"


def check_devinfo_dell_ndr200(name: str) -> None:
    ports = E.ports_from_ibv_devinfo(P.parse_ibv_devinfo(text(name)))
    unknown = E.nic_expectations(ports)
    assert {n["ib_write_bw_min_gbps"] for n in unknown} == {None}
    # the poster's 200 Gb/s as the operator's expected rate (gpu_acceptance_nic_rate_gbps)
    given = E.nic_expectations(ports, expected_rate_gbps=200)
    assert [n["device"] for n in given] == [f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)]
    assert {(n["expected_rate_gbps"], n["ib_write_bw_min_gbps"], n["rate_ok"]) for n in given} == {
        (200.0, 160.0, False)
    }


def check_devinfo_vv_hdr(name: str) -> None:
    nics = E.nic_expectations(E.ports_from_ibv_devinfo(P.parse_ibv_devinfo(text(name))))
    assert summary(nics) == {"mlx5_0/1": ("ACTIVE", 200.0, 160.0), "mlx5_1/1": ("DOWN", None, None)}


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m: NVLink links per GPU and the NUMA-local GPU/NIC pairs


def topo(name: str) -> dict:
    return P.parse_nvidia_smi_topo(text(name))


def pairs_of(name: str) -> list[tuple]:
    return [
        (p["gpu"], p["nic"], p["link"], p["numa_local"])
        for p in E.numa_local_pairs(P.topo_gpu_nic_links(topo(name)))
    ]


def check_topo_1x_h100(name: str) -> None:
    assert E.nvlink_links_per_gpu(P.topo_gpu_gpu_links(topo(name))) == {"GPU0": 0}
    assert pairs_of(name) == [("GPU0", None, None, False)]
    assert (
        E.nccl_allreduce_floor(gpu_count=1, nvlink_gpu_gbs=None)["reason"]
        == "one GPU: an all-reduce moves no data"
    )


def check_topo_2x_a100_pcie(name: str) -> None:
    assert E.nvlink_links_per_gpu(P.topo_gpu_gpu_links(topo(name))) == {"GPU0": 0, "GPU1": 0}
    assert pairs_of(name) == [("GPU0", "mlx5_0", "NODE", True), ("GPU1", "mlx5_1", "NODE", True)]
    # no NVLink: one node is bounded by PCIe Gen4 x16 (A100 PCIe)
    floor = E.nccl_allreduce_floor(gpu_count=2, nvlink_gpu_gbs=None, pcie_gpu_gbs=E.pcie_bandwidth_gbs(4, 16))
    assert (floor["theoretical_gbs"], floor["floor_gbs"], floor["limited_by"]) == (31.508, 22.056, "pcie")


def check_topo_4x_v100(name: str) -> None:
    # NV3 pairs (GPU0-GPU1, GPU2-GPU3), point to point: 3 links to the peer GPU
    assert E.nvlink_links_per_gpu(P.topo_gpu_gpu_links(topo(name))) == {f"GPU{i}": 3 for i in range(4)}
    assert E.nvlink_expectation(3, architecture=E.gpu_architecture("Tesla V100-SXM2-32GB"))["gpu_gbs"] == 75.0
    assert pairs_of(name) == [(f"GPU{i}", f"mlx5_{i}", "NODE", True) for i in range(4)]


def check_topo_8x_a100(name: str) -> None:
    links = E.nvlink_links_per_gpu(P.topo_gpu_gpu_links(topo(name)))
    assert links == {f"GPU{i}": 12 for i in range(8)}  # NV12 to every peer through NVSwitch
    assert E.nvlink_expectation(12, architecture="ampere") == {
        "links": 12,
        "link_gbs": 25.0,
        "gpu_gbs": 300.0,
    }
    # 10 NICs: the 8 next to the GPUs (PXB) are the rails, mlx5_8/9 (storage) are left out
    assert pairs_of(name) == [(f"GPU{i}", f"mlx5_{i}", "PXB", True) for i in range(8)]


def check_topo_8x_h100_dell(name: str) -> None:
    assert set(E.nvlink_links_per_gpu(P.topo_gpu_gpu_links(topo(name))).values()) == {
        0
    }  # topo -mp: PCIe only
    nics = [0, 3, 4, 5, 6, 9, 10, 11]  # one PIX ConnectX-7 each (GPU0 has three: mlx5_0..2)
    assert pairs_of(name) == [(f"GPU{i}", f"mlx5_{n}", "PIX", True) for i, n in enumerate(nics)]


def check_topo_8x_h100_6nic(name: str) -> None:
    assert E.nvlink_links_per_gpu(P.topo_gpu_gpu_links(topo(name))) == {f"GPU{i}": 18 for i in range(8)}
    pairs = E.numa_local_pairs(P.topo_gpu_nic_links(topo(name)))
    got = [(p["gpu"], p["nic"], p["link"], p["shared"]) for p in pairs]
    assert got == [
        ("GPU0", "mlx5_0", "PIX", True),
        ("GPU1", "mlx5_1", "NODE", True),
        ("GPU2", "mlx5_4", "NODE", False),
        ("GPU3", "mlx5_2", "PIX", False),
        ("GPU4", "mlx5_3", "PIX", False),
        ("GPU5", "mlx5_0", "NODE", True),  # 8 GPUs, 6 NICs: two GPUs share
        ("GPU6", "mlx5_5", "PIX", False),
        ("GPU7", "mlx5_1", "NODE", True),
    ]
    assert all(p["numa_local"] for p in pairs)


# --------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s


def check_nvlink_h100(name: str) -> None:
    gpus = E.parse_nvlink_status(text(name))
    assert [(g["index"], g["active_links"], g["link_gbs"]) for g in gpus] == [(0, 18, 26.562)]
    # the reported 26.562 GB/s is signalling; the data rate stays 25 GB/s per link
    nv = E.nvlink_expectation(
        gpus[0]["active_links"], architecture=E.gpu_architecture(gpus[0]["model"]), link_gbs=26.562
    )
    assert nv == {"links": 18, "link_gbs": 25.0, "gpu_gbs": 450.0}


def check_nvlink_a100_one(name: str) -> None:
    gpus = E.parse_nvlink_status(text(name))
    assert [(g["index"], g["active_links"], g["link_gbs"]) for g in gpus] == [(7, 12, 25.0)]


def check_nvlink_a100_eight(name: str) -> None:
    gpus = E.parse_nvlink_status(text(name))
    assert [(g["index"], g["active_links"], g["link_gbs"]) for g in gpus] == [(i, 12, 25.0) for i in range(8)]
    per_gpu = E.nvlink_expectation(12, architecture=E.gpu_architecture(gpus[0]["model"]), link_gbs=25.0)[
        "gpu_gbs"
    ]
    assert E.nccl_allreduce_floor(gpu_count=8, nvlink_gpu_gbs=per_gpu)["floor_gbs"] == 210.0


# --------------------------------------------------------------------------------------------
# PCIe: nvidia-smi -q -x, lspci -vvv, --query-gpu CSV


def xml_pcie(name: str) -> list[tuple]:
    return [
        (
            link["expected_gen"],
            link["expected_width"],
            link["expected_gbs"],
            link["current_gen"],
            link["current_width"],
            link["ok"],
        )
        for link in E.pcie_links_from_nvidia_smi_xml(text(name))
    ]


GEN4_X16 = (4, 16, 31.508)
GEN3_X16 = (3, 16, 15.754)
XML_PCIE = {
    # file: [(expected gen, width, GB/s, current gen, current width, ok)] per GPU; GPUs idle at Gen1,
    # so only the width decides ("ok" False = the GPU runs on fewer lanes than it has)
    "2x-rtx-a5000-590.44.01.xml": [(*GEN4_X16, 1, 16, True)] * 2,
    "4x-tesla-k80-430.26.xml": [(*GEN3_X16, 3, 16, True)] * 2 + [(*GEN3_X16, 1, 16, True)] * 2,
    "8x-tesla-v100s-pcie-32gb-460.73.01.xml": [(*GEN3_X16, 3, 16, True)] * 8,
    "a100-sxm4-80gb-mig-enabled-535.54.03.xml": [(*GEN4_X16, 4, 16, True)],
    "a10g-515.105.01.xml": [(*GEN4_X16, 1, 8, False)],
    "geforce-gtx-1050-pascal-515.65.01.xml": [(*GEN3_X16, 3, 8, False)],
    "geforce-rtx-3060-570.124.04.xml": [(*GEN4_X16, 1, 16, True)],
    "geforce-rtx-3080-595.58.03.xml": [(*GEN4_X16, 4, 16, True)],
    "quadro-p2000-pascal-525.125.06.xml": [(*GEN3_X16, 1, 8, False)],
    "rtx-pro-6000-blackwell-maxq-590.44.01.xml": [(*GEN4_X16, 1, 16, True)],
    "tesla-t4-515.105.01.xml": [(*GEN3_X16, 3, 8, False)],
    "tesla-v100-pcie-32gb-460.39.xml": [(*GEN3_X16, 3, 16, True)],
}


def check_xml(name: str) -> None:
    assert xml_pcie(name) == XML_PCIE[Path(name).name]


def check_lspci_vvv_hgx(name: str) -> None:
    links = E.pcie_links_from_lspci_vvv(text(name))
    gpus = [link for link in links if link["device_class"] == "3D controller"]
    nics = [link for link in links if link["device_class"] == "Ethernet controller"]
    bridges = [link for link in links if link["device_class"] == "Bridge"]
    assert len(gpus) == 8 and len(bridges) == 4 and len(nics) == 12
    assert {
        (g["expected_gen"], g["expected_gts"], g["expected_width"], g["expected_gbs"], g["ok"]) for g in gpus
    } == {(5, 32.0, 16, 63.015, True)}
    cx7 = [n for n in nics if n["expected_gen"] == 5]
    cx6dx = [n for n in nics if n["expected_gen"] == 4]
    assert (len(cx7), len(cx6dx)) == (8, 4)
    assert {(n["expected_width"], n["expected_gbs"], n["ok"]) for n in cx7} == {(16, 63.015, True)}
    assert {(n["expected_width"], n["expected_gbs"]) for n in cx6dx} == {(16, 31.508)}
    assert {(b["expected_gen"], b["expected_width"], b["expected_gbs"]) for b in bridges} == {(4, 2, 3.938)}


def lspci_classes(name: str) -> dict[str, int]:
    classes = P.classify_pci_devices(P.parse_lspci(text(name)))
    return {key: len(value) for key, value in classes.items()}


def check_lspci_azure(name: str) -> None:
    assert E.pcie_links_from_lspci_vvv(text(name)) == []  # -nn has no link lines: the role reads sysfs
    assert lspci_classes(name) == {"gpus": 8, "nvswitches": 6, "nics": 9}
    gpu_links = {f"GPU{i}": {f"GPU{j}": "NV12" for j in range(8) if j != i} for i in range(8)}
    assert E.nvlink_links_per_gpu(gpu_links, nvswitch=True) == {f"GPU{i}": 12 for i in range(8)}


def check_lspci_gb200(name: str) -> None:
    assert E.pcie_links_from_lspci_vvv(text(name)) == []
    assert lspci_classes(name)["gpus"] == 4
    nv = E.nvlink_expectation(18, architecture=E.gpu_architecture("NVIDIA GB200"))
    assert nv == {"links": 18, "link_gbs": 50.0, "gpu_gbs": 900.0}
    assert E.nccl_allreduce_floor(gpu_count=4, nvlink_gpu_gbs=nv["gpu_gbs"])["floor_gbs"] == 630.0


def check_lspci_a10(name: str) -> None:
    assert E.pcie_links_from_lspci_vvv(text(name)) == []
    assert lspci_classes(name) == {"gpus": 1, "nvswitches": 0, "nics": 1}
    assert E.nccl_allreduce_floor(gpu_count=1, nvlink_gpu_gbs=None)["floor_gbs"] is None


def check_query_h100(name: str) -> None:
    rows = E.parse_nvidia_smi_csv(text(name))
    links = E.pcie_links_from_query_csv(rows)
    assert [
        (x["pci_address"], x["expected_gen"], x["expected_width"], x["expected_gbs"], x["ok"]) for x in links
    ] == [("0000:00:09.0", 5, 16, 63.015, True)]
    assert rows[0]["mig.mode.current"] == ("Enabled" if "mig" in name else "Disabled")


def check_query_2080(name: str) -> None:
    links = E.pcie_links_from_query_csv(E.parse_nvidia_smi_csv(text(name)))
    # GPU max Gen3, host max Gen4: Gen3 expected; idle at Gen1, full width
    assert [
        (x["expected_gen"], x["expected_width"], x["expected_gbs"], x["current_gen"], x["ok"]) for x in links
    ] == [(3, 16, 15.754, 1, True)]


def check_compute_apps(name: str) -> None:
    assert E.busy_gpus(E.parse_nvidia_smi_csv(text(name))) == {
        "0000:00:09.0": ["/root/tools/memhog", "/root/tools/memhog", "./gpu_burn"]
    }


def check_list(count: int, migs: list[int]) -> Callable[[str], None]:
    def check(name: str) -> None:
        listed = E.parse_nvidia_smi_list(text(name))
        assert listed["gpu_count"] == count
        assert [len(g["mig_devices"]) for g in listed["gpus"]] == migs

    return check


# --------------------------------------------------------------------------------------------
# nvidia-smi -q (text): health


def check_q_h100(name: str) -> None:
    gpus = E.parse_nvidia_smi_q_text(text(name))
    assert len(gpus) == 8
    # every GPU of this capture has HW Slowdown / HW Power Brake Slowdown active: a real finding
    assert {tuple(E.gpu_health_findings(g)) for g in gpus} == {
        (f"{g['bus_id']}: clocks slowed down by HW Slowdown, HW Power Brake Slowdown",) for g in gpus
    } and len({g["bus_id"] for g in gpus}) == 8
    links = E.pcie_links_from_q_text(gpus)
    assert {(x["expected_gen"], x["expected_width"], x["expected_gbs"], x["ok"]) for x in links} == {
        (5, 16, 63.015, True)
    }


def check_q_titan_v(name: str) -> None:
    gpus = E.parse_nvidia_smi_q_text(text(name))
    assert [E.gpu_health_findings(g) for g in gpus] == [[]]  # Idle is the only active reason
    links = E.pcie_links_from_q_text(gpus)
    assert [(x["expected_gen"], x["expected_width"], x["current_gen"], x["ok"]) for x in links] == [
        (3, 16, 1, True)
    ]


def check_page_retirement(name: str) -> None:
    original = text(name)
    gpus = E.parse_nvidia_smi_q_text(original)
    assert [g["bus_id"] for g in gpus] == [f"000{i}:00:00.0" for i in range(1, 9)]
    assert [E.gpu_health_findings(g) for g in gpus] == [[]] * 8
    broken = original.replace(
        "Double Bit ECC                    : 0", "Double Bit ECC                    : 2", 1
    )
    broken = broken.replace(
        "Pending Page Blacklist            : No", "Pending Page Blacklist            : Yes", 1
    )
    assert E.gpu_health_findings(E.parse_nvidia_smi_q_text(broken)[0]) == [
        "0001:00:00.0: 2 pages retired for double-bit ECC errors",
        "0001:00:00.0: a page retirement is pending (reset the GPU)",
    ]


# --------------------------------------------------------------------------------------------
# numactl -H, lscpu: the NUMA nodes a bandwidth test is bound to


def check_numactl_xeon(name: str) -> None:
    layout = E.numa_layout(
        module_utils("gpu_topology").numa_layout_from_numactl(P.parse_numactl_hardware(text(name)))
    )
    assert layout == {"numa_node_count": 2, "numa_node_ids": [0, 1], "cpus_per_node": {0: 48, 1: 48}}


def check_lscpu(count: int, per_node: int) -> Callable[[str], None]:
    def check(name: str) -> None:
        lscpu = P.parse_lscpu(text(name))
        layout = E.numa_layout(module_utils("gpu_topology").numa_layout_from_lscpu(lscpu, None))
        assert layout["numa_node_ids"] == list(range(count))
        assert set(layout["cpus_per_node"].values()) == {per_node}

    return check


CASES: dict[str, Callable[[str], None]] = {
    "ibstat/8x-connectx6-vf-hdr200-azure-nd-a100-v4.txt": check_ibstat_azure_hdr,
    "ibstat/8x-connectx7-h100-some-ports-polling.txt": check_ibstat_polling,
    "ibstat/8x-connectx7-ndr400-h100-server.txt": check_ibstat_ndr400_h100,
    "ibstat/connectx3-mlx4-single-port-fdr.txt": check_ibstat_fdr,
    "ibstat/mixed-connectx6dx-roce-and-ib-a100-server.txt": check_ibstat_mixed,
    "ibv_devinfo/2x-connectx3-mlx4-dual-port-fdr.txt": check_devinfo_cx3,
    "ibv_devinfo/8x-connectx7-dell-ndr200-h100-server.txt": check_devinfo_dell_ndr200,
    "ibv_devinfo/connectx6-dual-port-hdr-vv-8gpu-node.txt": check_devinfo_vv_hdr,
    "lscpu/dual-epyc-7742-dgx-a100-class-8gpu.txt": check_lscpu(8, 32),
    "lscpu/dual-xeon-platinum-8468-8x-h100-sxm-node.txt": check_lscpu(2, 48),
    "lspci/lspci-gb200-nvl-compute-tray.txt": check_lspci_gb200,
    "lspci/lspci-nn-a10-single-gpu-vm.txt": check_lspci_a10,
    "lspci/lspci-nn-azure-nd96amsr-a100-v4-8gpu-6nvswitch-8cx6vf.txt": check_lspci_azure,
    "lspci/lspci-vvv-dell-hgx-h100-8gpu-4nvswitch-cx7.txt": check_lspci_vvv_hgx,
    "misc/ibstatus-8x-connectx6-vf-azure-nd-a100-v4.txt": check_ibstatus_azure,
    "misc/nvidia-smi-nvlink-s-1x-h100-sxm-590.48.01.txt": check_nvlink_h100,
    "misc/nvidia-smi-nvlink-s-i7-a100-sxm4-80gb-azure.txt": check_nvlink_a100_one,
    "misc/nvidia-smi-nvlink-status-8x-a100-sxm4-80gb.txt": check_nvlink_a100_eight,
    "misc/nvidia-smi-q-d-page-retirement-8gpu-azure-535.86.10.txt": check_page_retirement,
    "misc/nvidia-smi-q-text-8x-h100-80gb-hbm3-535.161.08.txt": check_q_h100,
    "misc/nvidia-smi-q-text-titan-v-volta-560.35.03.txt": check_q_titan_v,
    "numactl/dual-xeon-platinum-8468-8x-h100-sxm-node.txt": check_numactl_xeon,
    **{f"nvidia-smi-q-x/{name}": check_xml for name in XML_PCIE},
    "nvidia-smi-query/nvidia-smi-L-1x-h100-mig-mixed-profiles-590.48.01-masked.txt": check_list(1, [4]),
    "nvidia-smi-query/nvidia-smi-L-1x-h200-mig-mixed-profiles-590.48.01-masked.txt": check_list(1, [5]),
    "nvidia-smi-query/nvidia-smi-L-8x-h100-80gb-mig-7x1g.10gb.txt": check_list(8, [7] * 8),
    "nvidia-smi-query/query-compute-apps-csv-1x-h100-590.48.01-load.txt": check_compute_apps,
    "nvidia-smi-query/query-gpu-allfields-csv-1x-h100-80gb-590.48.01-idle.txt": check_query_h100,
    "nvidia-smi-query/query-gpu-allfields-csv-1x-h100-mig-590.48.01-idle.txt": check_query_h100,
    "nvidia-smi-query/query-gpu-allfields-csv-rtx-2080-super-595.71.05-idle.txt": check_query_2080,
    "nvidia-smi-topo/1x-h100-80gb-hbm3-590.48.01-ansi-header.txt": check_topo_1x_h100,
    "nvidia-smi-topo/2x-a100-pcie-2nic-2socket-della.txt": check_topo_2x_a100_pcie,
    "nvidia-smi-topo/4x-v100-sxm2-nv3-4nic-power9-traverse.txt": check_topo_4x_v100,
    "nvidia-smi-topo/8x-a100-sxm4-40gb-10nic-dual-epyc-7742.txt": check_topo_8x_a100,
    "nvidia-smi-topo/8x-h100-12nic-topo-mp-pcie-only-dell.txt": check_topo_8x_h100_dell,
    "nvidia-smi-topo/8x-h100-sxm-6nic-dual-xeon-8468-545.23.08.txt": check_topo_8x_h100_6nic,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture(name: str) -> None:
    CASES[name](name)


def test_every_fixture_has_a_case() -> None:
    local = {str(p.relative_to(HW)) for p in HW.rglob("*") if p.is_file() and p.name != "SOURCES.md"}
    assert local == set(CASES)
    if SHARED.is_dir():  # the project's shared collection: everything in it is copied and covered
        shared = {
            str(p.relative_to(SHARED)) for p in SHARED.rglob("*") if p.is_file() and p.name != "SOURCES.md"
        }
        assert shared <= local
    sources = (HW / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in local)


# --------------------------------------------------------------------------------------------
# the pieces without a captured output


@pytest.mark.parametrize(
    ("speed", "width", "gbps"),
    [
        ("25.0 Gbps (32)", "4X (2)", 100.0),
        ("100.0 Gbps (128)", "4X (2)", 400.0),
        ("14.0 Gbps (16)", "4X (2)", 56.0),
        ("NDR", "4X", 400.0),
        ("HDR", "2X", 100.0),
        ("invalid speed (0)", "4X (2)", None),
        (None, "4X", None),
    ],
)
def test_rate_from_speed_and_width(speed: str | None, width: str, gbps: float | None) -> None:
    assert E.ib_rate_from_speed_width(speed, width) == gbps


def test_rates_from_sysfs_and_netdev() -> None:
    assert E.ib_rate_gbps("400 Gb/sec (4X NDR)") == 400.0
    assert E.ib_rate_gbps("0 GB/sec") is None
    assert E.netdev_speed_gbps("100000") == 100.0
    assert E.netdev_speed_gbps(-1) is None


def test_fractions_are_parameters() -> None:
    ports = [
        {"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE", "rate_gbps": 400.0}
    ]
    assert E.nic_expectations(ports, ib_write_bw_fraction=0.9)[0]["ib_write_bw_min_gbps"] == 360.0
    assert E.nccl_allreduce_floor(gpu_count=8, nvlink_gpu_gbs=450.0, fraction=0.8)["floor_gbs"] == 360.0
    assert (
        E.nccl_allreduce_floor(gpu_count=8, nvlink_gpu_gbs=450.0, nodes=2)["reason"]
        == "no active rail NIC with a known rate"
    )


def test_expectations_from_facts() -> None:
    gpus = [
        {
            "index": i,
            "pci_address": f"0000:{i + 1:02x}:00.0",
            "model": "NVIDIA H100 80GB HBM3",
            "architecture": "Hopper",
        }
        for i in range(8)
    ]
    nics = [
        {
            "name": f"mlx5_{i}",
            "pci_address": f"0000:{i + 0x81:02x}:00.0",
            "netdevs": [f"ib{i}"],
            "ports": [
                {"port": 1, "state": "ACTIVE", "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)"}
            ],
        }
        for i in range(8)
    ]
    facts = {
        "gpus": gpus,
        "nvswitch_count": 4,
        "rdma_devices": nics,
        "gpu_nic_affinity": {
            "gpu_links": {
                g["pci_address"]: {o["pci_address"]: "NV18" for o in gpus if o is not g} for g in gpus
            },
            "gpus": [
                {
                    "gpu": g["pci_address"],
                    "links": {f"mlx5_{j}": ("PIX" if j == i else "SYS") for j in range(8)},
                }
                for i, g in enumerate(gpus)
            ],
        },
    }
    result = E.expectations_from_facts(facts)
    assert [n["ib_write_bw_min_gbps"] for n in result["nics"]] == [320.0] * 8
    assert {(n["links"], n["gpu_gbs"]) for n in result["nvlink"]} == {(18, 450.0)}
    assert [(p["nic"], p["numa_local"]) for p in result["pairs"]] == [(f"mlx5_{i}", True) for i in range(8)]
    assert result["nccl_one_node"]["floor_gbs"] == 315.0
    assert result["nccl_multi_node"]["floor_gbs"] == 35.0
    # GPU 5's topo row lost a link (NV17 to every peer): it is still expected at the board's 18
    for peer, _ in facts["gpu_nic_affinity"]["gpu_links"][gpus[5]["pci_address"]].items():
        facts["gpu_nic_affinity"]["gpu_links"][gpus[5]["pci_address"]][peer] = "NV17"
    assert E.expectations_from_facts(facts)["nvlink"][5]["links"] == 18
    # one rail trained at HDR among NDR rails: expected at the rails' highest rate, and its check fails
    nics[3]["ports"][0]["rate"] = "200 Gb/sec (4X HDR)"
    slow = E.expectations_from_facts(facts)["nics"][3]
    assert (slow["expected_rate_gbps"], slow["rate_gbps"], slow["rate_ok"]) == (400.0, 200.0, False)
    assert slow["ib_write_bw_min_gbps"] == 320.0
    assert E.nic_checks([slow])[0]["reason"] == "link trained at 200.0 Gb/s, expected 400.0"


def test_xid_lines() -> None:
    log = (
        "Nov 24 10:00:00 gpu1 kernel: NVRM: Xid (PCI:0000:19:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "Nov 24 10:00:01 gpu1 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n"
    )
    events = E.parse_xid_lines(log)
    assert [(e["xid"], e["detail"]) for e in events] == [(79, "pid=1234, GPU has fallen off the bus.")]


def test_ib_write_bw_and_dcgmi() -> None:
    out = (
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        " 65536      5000             392.11             391.87               0.747446\n"
    )
    assert E.parse_ib_write_bw(out) == 391.87
    diag = (
        '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": ['
        '{"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Pass"}]},'
        '{"name": "Diagnostic", "results": [{"gpu_id": "0", "status": "Fail"}]}]}]}}'
    )
    parsed = E.parse_dcgmi_diag_json(diag)
    assert (parsed["parsed"], parsed["failed"], parsed["passed"]) == (True, ["Diagnostic"], 1)


def test_sysfs_pcie_links() -> None:
    out = "\n".join(
        [
            "/sys/bus/pci/devices/0000:19:00.0/max_link_speed:32.0 GT/s PCIe",
            "/sys/bus/pci/devices/0000:19:00.0/current_link_speed:2.5 GT/s PCIe",
            "/sys/bus/pci/devices/0000:19:00.0/max_link_width:16",
            "/sys/bus/pci/devices/0000:19:00.0/current_link_width:16",
            "/sys/bus/pci/devices/0000:1a:00.0/max_link_speed:32.0 GT/s PCIe",
            "/sys/bus/pci/devices/0000:1a:00.0/current_link_speed:16.0 GT/s PCIe",
            "/sys/bus/pci/devices/0000:1a:00.0/max_link_width:16",
            "/sys/bus/pci/devices/0000:1a:00.0/current_link_width:16",
        ]
    )
    links = E.parse_sysfs_pcie_links(out, gpu_addresses=["0000:19:00.0"])
    assert [(x["pci_address"], x["expected_gen"], x["current_gen"], x["ok"]) for x in links] == [
        ("0000:19:00.0", 5, 1, True),  # an idle GPU at Gen1: width decides
        ("0000:1a:00.0", 5, 4, False),  # a NIC trained at Gen4 in a Gen5 slot
    ]


# --------------------------------------------------------------------------------------------
# acceptance checks built from the captured outputs (what the gpu_acceptance role reports)


def test_health_checks_on_the_h100_capture() -> None:
    checks = E.health_checks(text("misc/nvidia-smi-q-text-8x-h100-80gb-hbm3-535.161.08.txt"))
    assert [c["status"] for c in checks] == ["failed"] * 8
    assert checks[0]["name"] == "gpu_health:0000:19:00.0"
    assert checks[0]["reason"] == "0000:19:00.0: clocks slowed down by HW Slowdown, HW Power Brake Slowdown"
    assert E.verdict(checks) == "failed"
    assert [
        c["status"] for c in E.health_checks(text("misc/nvidia-smi-q-text-titan-v-volta-560.35.03.txt"))
    ] == ["passed"]
    assert E.health_checks(None, rc=9)[0]["status"] == "failed"


def test_nvlink_checks_on_the_a100_capture() -> None:
    status = text("misc/nvidia-smi-nvlink-status-8x-a100-sxm4-80gb.txt")
    expected = [
        dict(E.nvlink_expectation(12, architecture="ampere"), gpu=f"0000:{i:02x}:00.0", index=i)
        for i in range(8)
    ]
    checks = E.nvlink_checks(status, expected)
    assert [c["status"] for c in checks] == ["passed"] * 8
    assert checks[0]["expected"] == {"active_links": 12, "min_link_gbs": 22.5}
    assert checks[0]["measured"] == {"active_links": 12, "min_link_gbs": 25.0}
    # GPU 0 with one link down
    degraded = status.replace("Link 11: 25 GB/s", "Link 11: <inactive>", 1)
    first = E.nvlink_checks(degraded, expected)[0]
    assert (first["status"], first["reason"]) == ("failed", "11 of 12 NVLinks active")


def test_nic_checks_on_the_polling_capture() -> None:
    nics = nics_from_ibstat("ibstat/8x-connectx7-h100-some-ports-polling.txt")
    rails = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    at_400 = [dict(n, expected_rate_gbps=400.0, rate_ok=n["rate_gbps"] == 400.0) for n in nics]
    by = {c["name"]: c for c in E.nic_checks(at_400, rails)}
    assert by["nic_link:mlx5_5/1"]["status"] == "failed"  # a rail that is down
    assert by["nic_link:mlx5_11/1"]["reason"] == "port 1 of mlx5_11 is DOWN"
    assert by["nic_link:mlx5_0/1"]["status"] == "passed"
    assert by["nic_link:mlx5_1/1"]["status"] == "failed"  # not a rail, but up at 100 of 400
    assert by["nic_link:mlx5_1/1"]["reason"] == "link trained at 100.0 Gb/s, expected 400.0"


def test_pcie_and_bandwidth_checks() -> None:
    links = E.pcie_links_from_lspci_vvv(text("lspci/lspci-vvv-dell-hgx-h100-8gpu-4nvswitch-cx7.txt"))
    checks = E.pcie_checks(links)
    assert len(checks) == 24 and {c["status"] for c in checks} == {"passed"}
    assert checks[0]["expected"] == {"gen": 5, "width": 16, "gbs": 63.015}
    out = " 65536      5000             392.11             391.87               0.747446\n"
    assert E.ib_write_bw_check("mlx5_0", 0, out, 320.0)["status"] == "passed"
    low = E.ib_write_bw_check("mlx5_0", 0, out.replace("391.87", "190.02"), 320.0)
    assert (low["status"], low["reason"]) == ("failed", "190.02 Gb/s < 320.0 Gb/s")
    assert E.ib_write_bw_check("mlx5_0", 1, "", 320.0)["reason"] == "ib_write_bw exited 1 without a result"
    assert E.verdict([E.check("x", "skipped", reason="no tool")]) == "skipped-only"
    down = E.dcgm_check(255, "Error: unable to establish a connection to the specified host: localhost\n", 2)
    assert (down["status"], down["reason"]) == (
        "failed",
        "dcgmi exited 255: Error: unable to establish a connection to the specified host: localhost",
    )
    with pytest.raises(ValueError, match="needs the reason"):
        E.check("x", "skipped")


def test_rdma_bandwidth_targets() -> None:
    expected = {
        "nics": E.nic_expectations(
            [
                {"device": "mlx5_0", "port": 1, "state": "ACTIVE", "rate_gbps": 400.0},
                {"device": "mlx5_1", "port": 1, "state": "DOWN", "rate_gbps": None},
            ]
        ),
        "rails": ["mlx5_0", "mlx5_1"],
        "pairs": [{"gpu": "0000:19:00.0", "nic": "mlx5_0"}, {"gpu": "0000:3b:00.0", "nic": "mlx5_1"}],
    }
    facts = {
        "gpus": [{"pci_address": "0000:19:00.0", "index": 0}, {"pci_address": "0000:3b:00.0", "index": 1}],
        "rdma_nics": [{"rdma_device": "mlx5_0", "numa_node": 0}, {"rdma_device": "mlx5_1", "numa_node": 0}],
    }
    assert E.rdma_bandwidth_targets(expected, facts) == [
        {"device": "mlx5_0", "port": 1, "link_layer": None, "min_gbps": 320.0, "numa_node": 0, "gpu_index": 0}
    ]


def test_the_published_result_renders_the_checks_once() -> None:
    """gpu_acceptance_result: the role's published result, its verdict from the same checks it carries
    (the role rendered its checks once for the verdict and once more for the list before, issue 26)."""
    filters = collection_module("filter.gpu_expect").FilterModule().filters()
    checks = E.health_checks(text("misc/nvidia-smi-q-text-8x-h100-80gb-hbm3-535.161.08.txt"))
    found = filters["gpu_acceptance_result"](checks, {"nics": []})
    assert found == {"verdict": "failed", "checks": checks, "expected": {"nics": []}}
    assert found["verdict"] == filters["gpu_acceptance_verdict"](checks)
    skipped = [E.check("x", "skipped", reason="no tool")]
    assert filters["gpu_acceptance_result"](skipped)["verdict"] == "skipped-only"
    empty = filters["gpu_acceptance_result"](None)
    assert empty == {"verdict": E.verdict([]), "checks": [], "expected": None}
