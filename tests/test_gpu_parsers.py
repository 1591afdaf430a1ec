"""gpu_facts parsers on real captured outputs (tests/fixtures/hw, sources in SOURCES.md), the sysfs
readers on fake sysfs trees built in tmp_path, and the facts assembly (gpu_collect) on both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from helpers import HW, REPO, module_utils

P = module_utils("gpu_parsers")
C = module_utils("gpu_collect")


def fixture(relative: str) -> str:
    return (HW / relative).read_text(encoding="utf-8")


def test_module_utils_come_from_the_collection_path() -> None:
    assert Path(P.__file__).resolve() == (REPO / "plugins/module_utils/gpu_parsers.py").resolve()
    assert P.__name__.startswith("ansible_collections.gpubring.core.")


# ------------------------------------------------------------------------------------ helpers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("00001580:00:00.0", "1580:00:00.0"),
        ("07:00.0", "0000:07:00.0"),
        ("0000:C1:00.0", "0000:c1:00.0"),
        ("10000:e1:00.1", "10000:e1:00.1"),
        ("not-a-bus-id", None),
        ("", None),
    ],
)
def test_normalize_pci_address(text: str, expected: str | None) -> None:
    assert P.normalize_pci_address(text) == expected


def test_cpulist_round_trip() -> None:
    assert P.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert P.parse_cpulist("0 2 4 6") == [0, 2, 4, 6]
    assert P.format_cpulist([11, 10, 8, 3, 2, 1, 0]) == "0-3,8,10-11"
    assert P.format_cpulist([0, 2, 4]) == "0,2,4"
    assert P.format_cpulist([]) == ""


# ------------------------------------------------------------------------------- nvidia-smi -q -x


def test_xml_a100_mig_enabled() -> None:
    smi = P.parse_nvidia_smi_xml(fixture("nvidia-smi-q-x/a100-sxm4-80gb-mig-enabled-535.54.03.xml"))
    assert (smi["driver_version"], smi["cuda_version"]) == ("535.54.03", "12.2")
    # the header says 4 GPUs, the contributor kept one <gpu>
    assert smi["attached_gpus"] == 4
    assert len(smi["gpus"]) == 1
    gpu = smi["gpus"][0]
    assert gpu["pci_address"] == "0000:01:00.0"
    assert gpu["model"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert (gpu["vendor_id"], gpu["device_id"]) == ("10de", "20b2")
    assert (gpu["mig_mode"], gpu["mig_pending"], gpu["mig_devices"]) == ("enabled", "enabled", 4)
    assert gpu["architecture"] == "Ampere"
    # fb_memory_usage, not the first <total> (which belongs to a MIG device)
    assert gpu["memory_total_mib"] == 81920


def test_xml_tesla_t4() -> None:
    smi = P.parse_nvidia_smi_xml(fixture("nvidia-smi-q-x/tesla-t4-515.105.01.xml"))
    [gpu] = smi["gpus"]
    assert smi["driver_version"] == "515.105.01"
    assert (gpu["pci_address"], gpu["device_id"], gpu["model"]) == ("0000:00:1e.0", "1eb8", "Tesla T4")
    assert gpu["uuid"] == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert gpu["mig_mode"] is None  # "N/A": the T4 has no MIG
    assert P.gpu_generation(gpu["device_id"], gpu["architecture"], gpu["model"]) == "turing_or_newer"


def test_xml_a10g_masked_device_id_falls_back_to_architecture() -> None:
    [gpu] = P.parse_nvidia_smi_xml(fixture("nvidia-smi-q-x/a10g-515.105.01.xml"))["gpus"]
    assert gpu["pci_address"] == "0000:00:1e.0"
    assert (gpu["vendor_id"], gpu["device_id"]) == (None, None)  # the VM reports pci_device_id 000000DE
    assert gpu["uuid"] == "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
    assert gpu["memory_total_mib"] == 23028
    assert P.gpu_generation(gpu["device_id"], gpu["architecture"], gpu["model"]) == "turing_or_newer"


@pytest.mark.parametrize(
    ("name", "address", "device_id", "driver", "model"),
    [
        ("quadro-p2000-pascal-525.125.06.xml", "0000:17:00.0", "1c30", "525.125.06", "Quadro P2000"),
        (
            "geforce-gtx-1050-pascal-515.65.01.xml",
            "0000:01:00.0",
            "1c8d",
            "515.65.01",
            "NVIDIA GeForce GTX 1050",
        ),
    ],
)
def test_xml_pascal_needs_proprietary_modules(
    name: str, address: str, device_id: str, driver: str, model: str
) -> None:
    smi = P.parse_nvidia_smi_xml(fixture("nvidia-smi-q-x/" + name))
    [gpu] = smi["gpus"]
    assert (gpu["pci_address"], gpu["device_id"], smi["driver_version"], gpu["model"]) == (
        address,
        device_id,
        driver,
        model,
    )
    assert gpu["architecture"] == "Pascal"
    generation = P.gpu_generation(gpu["device_id"], gpu["architecture"], gpu["model"])
    assert generation == "pre_turing"
    assert P.kernel_module_for(generation) == "proprietary"


def test_xml_two_rtx_a5000_v13() -> None:
    smi = P.parse_nvidia_smi_xml(fixture("nvidia-smi-q-x/2x-rtx-a5000-590.44.01.xml"))
    assert (smi["driver_version"], smi["cuda_version"], smi["attached_gpus"]) == ("590.44.01", "13.1", 2)
    assert [g["pci_address"] for g in smi["gpus"]] == ["0000:81:00.0", "0000:c1:00.0"]
    assert [g["uuid"] for g in smi["gpus"]] == [
        "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
        "GPU-12345678-aaaa-bbbb-cccc-0123456789cd",
    ]
    # nvidia-smi's order (the index) is PCI order, not the minor number
    assert [(g["index"], g["minor_number"]) for g in smi["gpus"]] == [(0, 1), (1, 0)]
    assert {g["device_id"] for g in smi["gpus"]} == {"2231"}
    assert {g["memory_total_mib"] for g in smi["gpus"]} == {24564}


def test_xml_blackwell() -> None:
    [gpu] = P.parse_nvidia_smi_xml(fixture("nvidia-smi-q-x/rtx-pro-6000-blackwell-maxq-590.44.01.xml"))[
        "gpus"
    ]
    assert gpu["model"] == "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert (gpu["pci_address"], gpu["device_id"], gpu["architecture"]) == (
        "0000:61:00.0",
        "2bb4",
        "Blackwell",
    )
    assert gpu["memory_total_mib"] == 97887
    assert P.gpu_generation(gpu["device_id"], gpu["architecture"]) == "turing_or_newer"


def test_xml_eight_v100s_in_a_vm() -> None:
    smi = P.parse_nvidia_smi_xml(fixture("nvidia-smi-q-x/8x-tesla-v100s-pcie-32gb-460.73.01.xml"))
    assert smi["driver_version"] == "460.73.01"
    assert len(smi["gpus"]) == smi["attached_gpus"] == 8
    assert [g["pci_address"] for g in smi["gpus"]] == [
        "0000:00:0d.0", "0000:00:0e.0", "0000:00:0f.0", "0000:00:10.0",
        "0000:00:11.0", "0000:00:12.0", "0000:00:13.0", "0000:00:14.0",
    ]  # fmt: skip
    assert smi["gpus"][0]["uuid"] == "GPU-76098dc1-d3bc-9a1b-7ea6-f7b48837829e"
    assert smi["gpus"][7]["uuid"] == "GPU-1d955959-c95b-4f40-2cac-100d3006ffe2"
    assert {g["model"] for g in smi["gpus"]} == {"Tesla V100S-PCIE-32GB"}
    assert {g["mig_mode"] for g in smi["gpus"]} == {None}
    # no architecture element in DTD v11: the device id decides (Volta GV100 is below 0x1e00)
    assert {g["architecture"] for g in smi["gpus"]} == {None}
    assert {P.gpu_generation(g["device_id"], None, g["model"]) for g in smi["gpus"]} == {"pre_turing"}


def test_xml_four_k80_with_pci_domains() -> None:
    smi = P.parse_nvidia_smi_xml(fixture("nvidia-smi-q-x/4x-tesla-k80-430.26.xml"))
    assert smi["driver_version"] == "430.26"
    assert smi["cuda_version"] is None  # "Not Found"
    assert [g["pci_address"] for g in smi["gpus"]] == [
        "1580:00:00.0",
        "2df7:00:00.0",
        "4968:00:00.0",
        "f8d6:00:00.0",
    ]
    assert [g["minor_number"] for g in smi["gpus"]] == [1, 2, 3, 0]
    assert smi["gpus"][3]["uuid"] == "GPU-3341aba2-f01d-2c1f-7dd4-e389779faec2"
    assert {g["device_id"] for g in smi["gpus"]} == {"102d"}
    assert {g["mig_mode"] for g in smi["gpus"]} == {None}  # no <mig_mode> at all in DTD v10
    assert P.gpu_generation("102d") == "pre_turing"


def test_xml_rejects_other_text() -> None:
    with pytest.raises(ValueError, match="not nvidia-smi XML"):
        P.parse_nvidia_smi_xml("No devices were found\n")


# ------------------------------------------------------------------------------ generation rule


@pytest.mark.parametrize(
    ("device_id", "architecture", "name", "expected"),
    [
        (None, "Hopper", None, "turing_or_newer"),
        (None, "Volta", None, "pre_turing"),
        ("1dbf", None, None, "pre_turing"),  # last Volta id range
        ("1e02", None, None, "turing_or_newer"),  # TITAN RTX, first Turing
        ("2330", None, None, "turing_or_newer"),  # H100 SXM
        ("2941", None, None, "turing_or_newer"),  # GB200
        (None, None, "Tesla K80", "pre_turing"),
        (None, None, "Tesla V100-PCIE-32GB", "pre_turing"),
        (None, None, "NVIDIA TITAN V", "pre_turing"),
        (None, None, "NVIDIA A100-SXM4-80GB", "turing_or_newer"),
        (None, None, "NVIDIA H100 80GB HBM3", "turing_or_newer"),
        (None, None, "NVIDIA GeForce GTX 1650", "turing_or_newer"),
        (None, None, "NVIDIA L40S", "turing_or_newer"),
        (None, None, "Some Future Accelerator", "unknown"),
        (None, None, None, "unknown"),
    ],
)
def test_gpu_generation_rule(
    device_id: str | None, architecture: str | None, name: str | None, expected: str
) -> None:
    assert P.gpu_generation(device_id, architecture, name) == expected


# -------------------------------------------------------------------------------- topo -m


def test_topo_8x_a100_dual_epyc() -> None:
    topo = P.parse_nvidia_smi_topo(fixture("nvidia-smi-topo/8x-a100-sxm4-40gb-10nic-dual-epyc-7742.txt"))
    assert topo["gpus"] == [f"GPU{i}" for i in range(8)]
    assert topo["nics"] == [f"NIC{i}" for i in range(10)]
    assert topo["nic_names"]["NIC9"] == "mlx5_9"
    assert topo["links"]["GPU0"]["GPU7"] == "NV12"
    assert topo["links"]["GPU0"]["NIC0"] == "PXB"
    assert topo["links"]["GPU0"]["NIC2"] == "SYS"
    assert topo["links"]["NIC8"]["NIC9"] == "PIX"
    assert topo["cpu_affinity"]["GPU0"] == "48-63,176-191"
    assert topo["numa_affinity"]["GPU0"] == [3]
    assert topo["numa_affinity"]["GPU6"] == [5]
    assert topo["gpu_numa_id"] == {}  # pre-535 drivers print no GPU NUMA ID column
    links = P.topo_gpu_nic_links(topo)
    assert links["GPU2"] == {
        "mlx5_0": "SYS", "mlx5_1": "SYS", "mlx5_2": "PXB", "mlx5_3": "PXB", "mlx5_4": "SYS",
        "mlx5_5": "SYS", "mlx5_6": "SYS", "mlx5_7": "SYS", "mlx5_8": "SYS", "mlx5_9": "SYS",
    }  # fmt: skip
    assert set(P.topo_gpu_gpu_links(topo)["GPU3"].values()) == {"NV12"}


def test_topo_8x_h100_empty_cpu_affinity() -> None:
    topo = P.parse_nvidia_smi_topo(fixture("nvidia-smi-topo/8x-h100-sxm-6nic-dual-xeon-8468-545.23.08.txt"))
    assert len(topo["gpus"]) == 8
    assert topo["nic_names"] == {f"NIC{i}": f"mlx5_{i}" for i in range(6)}
    assert topo["links"]["GPU0"]["GPU1"] == "NV18"
    links = P.topo_gpu_nic_links(topo)
    assert links["GPU0"]["mlx5_0"] == links["GPU0"]["mlx5_1"] == "PIX"
    assert links["GPU3"]["mlx5_2"] == "PIX"
    assert links["GPU6"]["mlx5_5"] == "PIX"
    assert links["GPU5"] == {f"mlx5_{i}": "NODE" for i in range(6)}
    # the job's cgroup hid the CPUs of GPU0-3: the cell is empty, the NUMA column still there
    assert topo["cpu_affinity"]["GPU0"] == ""
    assert topo["cpu_affinity"]["GPU4"] == "1"
    assert topo["numa_affinity"]["GPU0"] == [0]
    assert topo["numa_affinity"]["GPU7"] == [1]
    assert topo["gpu_numa_id"]["GPU0"] is None  # N/A


def test_topo_mp_pcie_only_12_nics() -> None:
    topo = P.parse_nvidia_smi_topo(fixture("nvidia-smi-topo/8x-h100-12nic-topo-mp-pcie-only-dell.txt"))
    assert len(topo["gpus"]) == 8
    assert len(topo["nics"]) == 12
    assert topo["nic_names"]["NIC11"] == "mlx5_11"
    assert topo["links"]["GPU0"]["GPU1"] == "NODE"  # -p: PCIe paths only, no NV#
    assert topo["links"]["GPU0"]["GPU4"] == "SYS"
    links = P.topo_gpu_nic_links(topo)
    assert [nic for nic, link in links["GPU0"].items() if link == "PIX"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert links["GPU7"]["mlx5_11"] == "PIX"
    assert topo["cpu_affinity"]["GPU4"] == "1,3,5,7,9,11"
    assert topo["numa_affinity"]["GPU4"] == [1]


def test_topo_older_format_nic_columns_named_by_device() -> None:
    topo = P.parse_nvidia_smi_topo(fixture("nvidia-smi-topo/4x-v100-sxm2-nv3-4nic-power9-traverse.txt"))
    assert topo["nics"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert topo["nic_names"]["mlx5_2"] == "mlx5_2"
    assert topo["links"]["GPU0"]["GPU1"] == "NV3"
    assert topo["links"]["GPU0"]["GPU2"] == "SYS"
    assert topo["links"]["mlx5_0"]["mlx5_1"] == "PIX"
    assert P.topo_gpu_nic_links(topo)["GPU2"] == {
        "mlx5_0": "SYS",
        "mlx5_1": "SYS",
        "mlx5_2": "NODE",
        "mlx5_3": "NODE",
    }
    assert topo["numa_affinity"]["GPU3"] == [8]  # POWER9: the second socket is NUMA node 8


def test_topo_two_sockets() -> None:
    topo = P.parse_nvidia_smi_topo(fixture("nvidia-smi-topo/2x-a100-pcie-2nic-2socket-della.txt"))
    assert topo["links"]["GPU0"]["GPU1"] == "SYS"
    assert P.topo_gpu_nic_links(topo) == {
        "GPU0": {"mlx5_0": "NODE", "mlx5_1": "SYS"},
        "GPU1": {"mlx5_0": "SYS", "mlx5_1": "NODE"},
    }
    assert topo["cpu_affinity"] == {"GPU0": "0-63", "GPU1": "64-127", "mlx5_0": "", "mlx5_1": ""}


def test_topo_copy_without_tabs() -> None:
    text = fixture("nvidia-smi-topo/2x-a100-pcie-2nic-2socket-della.txt")
    spaced = P.parse_nvidia_smi_topo(text.expandtabs(8))
    tabbed = P.parse_nvidia_smi_topo(text)
    assert spaced["devices"] == tabbed["devices"] == ["GPU0", "GPU1", "mlx5_0", "mlx5_1"]
    assert spaced["links"] == tabbed["links"]
    assert spaced["cpu_affinity"]["GPU1"] == "64-127"
    assert spaced["numa_affinity"]["GPU1"] == [1]


def test_topo_ansi_header_single_gpu() -> None:
    text = fixture("nvidia-smi-topo/1x-h100-80gb-hbm3-590.48.01-ansi-header.txt")
    assert "\x1b[4m" in text
    topo = P.parse_nvidia_smi_topo(text)
    assert topo["devices"] == ["GPU0"]
    assert topo["links"] == {"GPU0": {}}
    assert topo["cpu_affinity"] == {"GPU0": "0-19"}
    assert topo["numa_affinity"] == {"GPU0": [0]}
    assert topo["gpu_numa_id"] == {"GPU0": None}


def test_topo_without_gpus() -> None:
    assert P.parse_nvidia_smi_topo("No devices were found\n")["gpus"] == []


@pytest.mark.parametrize(
    ("link", "rank_below"),
    [("NV18", "PIX"), ("PIX", "PXB"), ("PXB", "PHB"), ("PHB", "NODE"), ("NODE", "SYS")],
)
def test_link_rank_orders_nearest_first(link: str, rank_below: str) -> None:
    assert P.link_rank(link) < P.link_rank(rank_below)


# ---------------------------------------------------------------------------------------- lspci


def test_lspci_vvv_hgx_h100() -> None:
    devices = P.parse_lspci(fixture("lspci/lspci-vvv-dell-hgx-h100-8gpu-4nvswitch-cx7.txt"))
    assert len(devices) == 517
    found = P.classify_pci_devices(devices)
    gpus, nvswitches, nics = found["gpus"], found["nvswitches"], found["nics"]
    assert [(g["pci_address"], g["numa_node"]) for g in gpus] == [
        ("0000:19:00.0", 0), ("0000:3b:00.0", 0), ("0000:4c:00.0", 0), ("0000:5d:00.0", 0),
        ("0000:9b:00.0", 1), ("0000:bb:00.0", 1), ("0000:cb:00.0", 1), ("0000:db:00.0", 1),
    ]  # fmt: skip
    # no -nn: vendor from the name, device id from "Device 2330" (old pci.ids), class from its name
    assert {(g["vendor_id"], g["device_id"], g["class_id"], g["driver"]) for g in gpus} == {
        ("10de", "2330", "0302", "nvidia")
    }
    assert {(g["link_speed"], g["link_width"]) for g in gpus} == {("32GT/s", 16)}
    assert [s["pci_address"] for s in nvswitches] == [
        "0000:83:00.0",
        "0000:84:00.0",
        "0000:85:00.0",
        "0000:86:00.0",
    ]
    assert {(s["device_id"], s["class_id"], s["driver"], s["numa_node"]) for s in nvswitches} == {
        ("22a3", "0680", "nvidia-nvswitch", 1)
    }
    assert len(nics) == 12  # 8 ConnectX-7 + 2 dual-port ConnectX-6 Dx
    assert sum(1 for n in nics if n["device_name"] == "MT2910 Family [ConnectX-7]") == 8
    assert [n["pci_address"] for n in nics if "ConnectX-6 Dx" in n["device_name"]] == [
        "0000:1b:00.0", "0000:1b:00.1", "0000:9d:00.0", "0000:9d:00.1",
    ]  # fmt: skip
    assert {n["driver"] for n in nics} == {"mlx5_core"}
    assert P.pci_model_name(None, nics[0]["device_name"]) == "ConnectX-7"
    assert P.pci_model_name(None, gpus[0]["device_name"]) is None  # "Device 2330" names nothing
    bridge = next(d for d in devices if d["pci_address"] == "0000:16:00.0")
    assert bridge["class_id"] == "0604"
    assert bridge["description"] == "Broadcom / LSI PEX890xx PCIe Gen 5 Switch"
    assert sum(1 for d in devices if d.get("acs_enabled")) == 6


def test_lspci_nn_azure_a100() -> None:
    found = P.classify_pci_devices(
        P.parse_lspci(fixture("lspci/lspci-nn-azure-nd96amsr-a100-v4-8gpu-6nvswitch-8cx6vf.txt"))
    )
    assert [g["pci_address"] for g in found["gpus"]] == [
        "0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0004:00:00.0",
        "000b:00:00.0", "000c:00:00.0", "000d:00:00.0", "000e:00:00.0",
    ]  # fmt: skip
    assert {(g["vendor_id"], g["device_id"], g["class_id"]) for g in found["gpus"]} == {
        ("10de", "20b2", "0302")
    }
    assert P.pci_model_name(None, found["gpus"][0]["device_name"]) == "A100 SXM4 80GB"
    assert len(found["nvswitches"]) == 6
    assert {s["device_id"] for s in found["nvswitches"]} == {"1af1"}
    # 8 ConnectX-6 VFs for InfiniBand and the ConnectX-4 Lx VF of the Azure accelerated network
    assert len(found["nics"]) == 9
    assert sum(1 for n in found["nics"] if (n["device_id"], n["class_id"]) == ("101c", "0207")) == 8
    assert [n["pci_address"] for n in found["nics"] if n["device_id"] == "1016"] == ["c941:00:02.0"]


def test_lspci_nn_a10_vm() -> None:
    devices = P.parse_lspci(fixture("lspci/lspci-nn-a10-single-gpu-vm.txt"))
    found = P.classify_pci_devices(devices)
    [gpu] = found["gpus"]
    assert (gpu["pci_address"], gpu["device_id"], gpu["revision"]) == ("0000:06:00.0", "2236", "a1")
    assert P.pci_model_name(gpu["description"], gpu["device_name"]) == "A10"
    [nic] = found["nics"]
    assert (nic["pci_address"], nic["vendor_id"], nic["device_id"], nic["class_id"]) == (
        "0000:05:00.0",
        "15b3",
        "101e",
        "0200",
    )
    # the virtio VGA (vendor 1af4) is not an NVIDIA GPU
    assert next(d for d in devices if d["class_id"] == "0300")["vendor_id"] == "1af4"


def test_lspci_plain_gb200_tray() -> None:
    found = P.classify_pci_devices(P.parse_lspci(fixture("lspci/lspci-gb200-nvl-compute-tray.txt")))
    assert [g["pci_address"] for g in found["gpus"]] == [
        "0008:01:00.0",
        "0009:01:00.0",
        "0018:01:00.0",
        "0019:01:00.0",
    ]
    assert {g["device_id"] for g in found["gpus"]} == {"2941"}
    assert P.gpu_generation(found["gpus"][0]["device_id"]) == "turing_or_newer"
    assert found["nvswitches"] == []  # Grace root ports are PCI bridges (0604), not NVSwitches
    # 4 ConnectX-7 (InfiniBand) and 2 BlueField-3 with 2 Ethernet functions each; bridges and DMA excluded
    assert [(n["pci_address"], n["class_id"]) for n in found["nics"]] == [
        ("0000:03:00.0", "0207"), ("0002:03:00.0", "0207"),
        ("0006:03:00.0", "0200"), ("0006:03:00.1", "0200"),
        ("0010:03:00.0", "0207"), ("0012:03:00.0", "0207"),
        ("0016:03:00.0", "0200"), ("0016:03:00.1", "0200"),
    ]  # fmt: skip


# ------------------------------------------------------------------------------ ibv_devinfo, ibstat


def test_ibv_devinfo_eight_connectx7() -> None:
    hcas = P.parse_ibv_devinfo(fixture("ibv_devinfo/8x-connectx7-dell-ndr200-h100-server.txt"))
    assert [h["hca_id"] for h in hcas] == [
        "mlx5_0",
        "mlx5_3",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_9",
        "mlx5_10",
        "mlx5_11",
    ]
    assert {(h["vendor_part_id"], h["fw_ver"], h["board_id"]) for h in hcas} == {
        (4129, "28.41.1000", "DEL0000000036")
    }
    assert hcas[0]["node_guid"] == "58a2:e103:001a:677e"
    assert {(p["state"], p["link_layer"], p["active_mtu"]) for h in hcas for p in h["ports"]} == {
        ("PORT_ACTIVE", "InfiniBand", 4096)
    }
    assert hcas[1]["ports"][0]["port_lid"] == 3705


def test_ibv_devinfo_two_port_connectx3() -> None:
    hcas = P.parse_ibv_devinfo(fixture("ibv_devinfo/2x-connectx3-mlx4-dual-port-fdr.txt"))
    assert [h["hca_id"] for h in hcas] == ["mlx4_1", "mlx4_0"]
    assert hcas[1]["node_guid"] == "e41d:2d03:00e0:c740"
    assert hcas[0]["phys_port_cnt"] == 2
    assert [(p["port"], p["state"], p["link_layer"]) for p in hcas[0]["ports"]] == [
        (1, "PORT_ACTIVE", "InfiniBand"),
        (2, "PORT_DOWN", "InfiniBand"),
    ]


def test_ibv_devinfo_verbose_skips_capability_lists() -> None:
    hcas = P.parse_ibv_devinfo(fixture("ibv_devinfo/connectx6-dual-port-hdr-vv-8gpu-node.txt"))
    assert [h["hca_id"] for h in hcas] == ["mlx5_0", "mlx5_1"]
    assert hcas[0]["vendor_part_id"] == 4123
    assert hcas[0]["phys_port_cnt"] == 1
    [port] = hcas[0]["ports"]
    assert (port["state"], port["phys_state"], port["active_width"], port["active_speed"]) == (
        "PORT_ACTIVE", "LINK_UP", "4X (2)", "50.0 Gbps (64)",
    )  # fmt: skip
    assert hcas[1]["ports"][0]["state"] == "PORT_DOWN"
    assert "max_tso" not in hcas[0]  # a -vv sub-key, not a device attribute


def test_ibstat_ndr400_with_bond() -> None:
    cas = P.parse_ibstat(fixture("ibstat/8x-connectx7-ndr400-h100-server.txt"))
    assert len(cas) == 9
    ib = [c for c in cas if c["ports"][0]["link_layer"] == "InfiniBand"]
    assert len(ib) == 8
    assert {(c["ca_type"], c["ports"][0]["rate"]) for c in ib} == {("MT4129", 400)}
    [bond] = [c for c in cas if c["ports"][0]["link_layer"] == "Ethernet"]
    assert bond["ca"] == "mlx5_bond_0"
    assert cas[0]["node_guid"] == "0x58a2e10300a7820e"


def test_ibstat_mixed_roce_and_ib() -> None:
    cas = P.parse_ibstat(fixture("ibstat/mixed-connectx6dx-roce-and-ib-a100-server.txt"))
    assert [(c["ca"], c["ports"][0]["link_layer"]) for c in cas][:2] == [
        ("mlx5_0", "Ethernet"),
        ("mlx5_1", "InfiniBand"),
    ]
    assert sum(1 for c in cas if c["ports"][0]["link_layer"] == "InfiniBand") == 8
    assert cas[0]["firmware_version"] == "22.35.2302"


def test_ibstat_polling_ports() -> None:
    cas = P.parse_ibstat(fixture("ibstat/8x-connectx7-h100-some-ports-polling.txt"))
    assert len(cas) == 12
    down = {
        (c["ca"], c["ports"][0]["state"], c["ports"][0]["physical_state"])
        for c in cas
        if c["ports"][0]["state"] != "Active"
    }
    assert down == {("mlx5_11", "Down", "Polling"), ("mlx5_5", "Down", "Disabled")}
    assert {c["ports"][0]["link_layer"] for c in cas} == {"Ethernet"}


def test_ibstat_ignores_trailing_ibpanic() -> None:
    cas = P.parse_ibstat(fixture("ibstat/8x-connectx6-vf-hdr200-azure-nd-a100-v4.txt"))
    assert [c["ca"] for c in cas] == [f"mlx5_{i}" for i in range(8)]
    assert {(c["ca_type"], c["ports"][0]["rate"], c["ports"][0]["link_layer"]) for c in cas} == {
        ("MT4124", 200, "InfiniBand")
    }


def test_ibstat_single_connectx3() -> None:
    [ca] = P.parse_ibstat(fixture("ibstat/connectx3-mlx4-single-port-fdr.txt"))
    assert (ca["ca"], ca["ca_type"], ca["number_of_ports"]) == ("mlx4_0", "MT4099", 1)
    assert (ca["ports"][0]["rate"], ca["ports"][0]["base_lid"]) == (56, 1)


# ---------------------------------------------------------------------------------- numactl, lscpu


def test_numactl_dual_xeon_8468() -> None:
    numa = P.parse_numactl_hardware(fixture("numactl/dual-xeon-platinum-8468-8x-h100-sxm-node.txt"))
    assert [n["id"] for n in numa["nodes"]] == [0, 1]
    assert numa["nodes"][0]["cpus"] == list(range(0, 96, 2))
    assert numa["nodes"][1]["cpus"] == list(range(1, 96, 2))
    assert (numa["nodes"][0]["size_mb"], numa["nodes"][1]["size_mb"]) == (515020, 516037)
    assert numa["nodes"][1]["free_mb"] == 489964
    assert numa["distances"] == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}


def test_lscpu_dual_epyc_7742_nps4() -> None:
    cpu = P.parse_lscpu(fixture("lscpu/dual-epyc-7742-dgx-a100-class-8gpu.txt"))
    assert (cpu["cpus"], cpu["threads_per_core"], cpu["cores_per_socket"], cpu["sockets"]) == (256, 2, 64, 2)
    assert cpu["numa_node_count"] == 8
    assert P.format_cpulist(cpu["numa_nodes"][0]) == "0-15,128-143"
    assert P.format_cpulist(cpu["numa_nodes"][7]) == "112-127,240-255"
    assert cpu["model_name"] == "AMD EPYC 7742 64-Core Processor"
    # the Flags value was wrapped at the terminal width, mid-word: joined back
    assert {"nonstop_tsc", "stibp", "overflow_recov", "abm", "smca"} <= set(cpu["flags"])
    groups = P.lscpu_core_groups(cpu)
    assert groups is not None
    assert groups[0] == [0, 128]
    assert groups[200] == [72, 200]


def test_lscpu_dual_xeon_8468_no_smt() -> None:
    cpu = P.parse_lscpu(fixture("lscpu/dual-xeon-platinum-8468-8x-h100-sxm-node.txt"))
    assert (cpu["cpus"], cpu["threads_per_core"], cpu["numa_node_count"]) == (96, 1, 2)
    assert cpu["numa_nodes"][1] == list(range(1, 96, 2))
    assert cpu["model_name"] == "Intel(R) Xeon(R) Platinum 8468"
    assert "amx_tile" in cpu["flags"]
    groups = P.lscpu_core_groups(cpu)
    assert groups is not None
    assert groups[5] == [5]


def test_lscpu_sectioned_format() -> None:
    # util-linux >= 2.38 nests keys under section headers such as "NUMA:"
    text = (
        "Architecture:             x86_64\n"
        "CPU(s):                   8\n"
        "  On-line CPU(s) list:    0-7\n"
        "Vendor ID:                GenuineIntel\n"
        "  Model name:             Test CPU\n"
        "    Thread(s) per core:   2\n"
        "    Core(s) per socket:   4\n"
        "    Socket(s):            1\n"
        "NUMA:\n"
        "  NUMA node(s):           1\n"
        "  NUMA node0 CPU(s):      0-7\n"
    )
    cpu = P.parse_lscpu(text)
    assert (cpu["cpus"], cpu["threads_per_core"], cpu["numa_node_count"]) == (8, 2, 1)
    assert cpu["numa_nodes"] == {0: list(range(8))}
    assert P.lscpu_core_groups(cpu) == {
        0: [0, 4],
        4: [0, 4],
        1: [1, 5],
        5: [1, 5],
        2: [2, 6],
        6: [2, 6],
        3: [3, 7],
        7: [3, 7],
    }


# ---------------------------------------------------------------------- small text formats


def test_kernel_cmdline_and_iommu() -> None:
    args = P.parse_kernel_cmdline(
        "BOOT_IMAGE=/vmlinuz root=UUID=1 ro intel_iommu=on iommu=pt quiet -- init-arg\n"
    )
    assert args["intel_iommu"] == "on"
    assert args["quiet"] is None
    assert "init-arg" not in args
    iommu = P.iommu_from_cmdline(args)
    assert (iommu["requested"], iommu["passthrough"]) == (True, True)
    assert iommu["args"] == ["intel_iommu=on", "iommu=pt"]
    assert (
        P.iommu_from_cmdline(P.parse_kernel_cmdline("amd_iommu=on iommu.passthrough=0"))["passthrough"]
        is False
    )


def test_mokutil_and_dgx_release_and_proc_version() -> None:
    assert P.parse_mokutil_sb_state("SecureBoot enabled\n") is True
    assert P.parse_mokutil_sb_state("SecureBoot disabled\nPlatform is in Setup Mode\n") is False
    assert P.parse_mokutil_sb_state("EFI variables are not supported on this system\n") is None
    fields = P.parse_dgx_release('DGX_NAME="DGX Server"\nDGX_SWBUILD_VERSION="6.0.11"\n# comment\n')
    assert fields == {"DGX_NAME": "DGX Server", "DGX_SWBUILD_VERSION": "6.0.11"}
    open_line = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release Build\n"
    assert P.parse_nvidia_proc_version(open_line) == {"version": "550.127.05", "flavor": "open"}
    closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Jan 30 22:35:49 UTC 2024\n"
    assert P.parse_nvidia_proc_version(closed) == {"version": "535.161.08", "flavor": "proprietary"}


# ------------------------------------------------------------------------------ fake sysfs trees


class FakeHost:
    """Builds a sysfs-like tree under tmp_path with the same symlink layout as the kernel's."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "sys/bus/pci/devices").mkdir(parents=True)
        (root / "sys/class/net").mkdir(parents=True)
        (root / "sys/class/infiniband").mkdir(parents=True)
        (root / "proc").mkdir(parents=True)
        (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro\n")

    def _link(self, link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(target, link.parent))

    def pci(
        self,
        path: str,
        vendor: str = "0x8086",
        device: str = "0x0000",
        klass: str = "0x060400",
        numa: int = -1,
    ) -> Path:
        """path: host bridge then functions, e.g. "pci0000:15/0000:15:01.0/0000:16:00.0"."""
        real = self.root / "sys/devices" / path
        real.mkdir(parents=True, exist_ok=True)
        for name, value in (
            ("vendor", vendor),
            ("device", device),
            ("class", klass),
            ("numa_node", str(numa)),
        ):
            (real / name).write_text(value + "\n")
        self._link(self.root / "sys/bus/pci/devices" / real.name, real)
        return real

    def rdma(self, pci_dir: Path, name: str, link_layer: str, netdev: str | None = None) -> None:
        ib = pci_dir / "infiniband" / name
        (ib / "ports/1").mkdir(parents=True)
        (ib / "ports/1/link_layer").write_text(link_layer + "\n")
        (ib / "ports/1/state").write_text("4: ACTIVE\n")
        (ib / "ports/1/phys_state").write_text("5: LinkUp\n")
        (ib / "node_guid").write_text(f"a088:c203:0000:{len(name):04x}\n")
        self._link(ib / "device", pci_dir)
        self._link(self.root / "sys/class/infiniband" / name, ib)
        if netdev:
            net = pci_dir / "net" / netdev
            net.mkdir(parents=True)
            self._link(net / "device", pci_dir)
            self._link(self.root / "sys/class/net" / netdev, net)

    def numa(self, nodes: dict[int, str], siblings: dict[int, str], mem_kb: int) -> None:
        for node_id, cpulist in nodes.items():
            node = self.root / f"sys/devices/system/node/node{node_id}"
            node.mkdir(parents=True)
            (node / "cpulist").write_text(cpulist + "\n")
            (node / "meminfo").write_text(
                f"Node {node_id} MemTotal:       {mem_kb} kB\nNode {node_id} MemFree: 1 kB\n"
            )
            distances = " ".join("10" if other == node_id else "21" for other in nodes)
            (node / "distance").write_text(distances + "\n")
        for cpu, sibling_list in siblings.items():
            topo = self.root / f"sys/devices/system/cpu/cpu{cpu}/topology"
            topo.mkdir(parents=True)
            (topo / "thread_siblings_list").write_text(sibling_list + "\n")


@pytest.fixture
def hgx(tmp_path: Path) -> FakeHost:
    """A two-socket GPU server in miniature (synthetic tree, not a capture):

    NUMA 0, host bridge 15: root port 15:01.0 - switch (16:00.0 up, 17:0x.0 down) with GPU 19:00.0,
        ConnectX-7 1a:00.0 (mlx5_0, IB) and a dual-port ConnectX-6 Dx 1b:00.0/1 (mlx5_1/2, RoCE)
    NUMA 0, host bridge 37: root port 37:01.0 - switch 38 - port 39:00.0 - second switch 3a - 3b:00.0
        with GPU 3c:00.0, and port 39:01.0 with ConnectX-7 3d:00.0 (mlx5_3)
    NUMA 1, host bridge 97: GPU 9b:00.0 on root port 97:01.0, ConnectX-7 9c:00.0 (mlx5_4) on 97:02.0
    NUMA 1, host bridge 80: an NVSwitch 83:00.0; NUMA 0: an ASPEED VGA (not an NVIDIA GPU)
    """
    host = FakeHost(tmp_path)
    sw0 = "pci0000:15/0000:15:01.0/0000:16:00.0"
    host.pci("pci0000:15/0000:15:01.0", numa=0)
    host.pci(sw0, numa=0)
    for port in ("0000:17:00.0", "0000:17:01.0", "0000:17:02.0"):
        host.pci(f"{sw0}/{port}", numa=0)
    host.pci(sw0 + "/0000:17:00.0/0000:19:00.0", "0x10de", "0x2330", "0x030200", 0)
    nic0 = host.pci(sw0 + "/0000:17:01.0/0000:1a:00.0", "0x15b3", "0x1021", "0x020700", 0)
    host.rdma(nic0, "mlx5_0", "InfiniBand", "ibp26s0")
    for fn, name, netdev in (("0", "mlx5_1", "ens1f0np0"), ("1", "mlx5_2", "ens1f1np1")):
        nic = host.pci(sw0 + "/0000:17:02.0/0000:1b:00." + fn, "0x15b3", "0x101d", "0x020000", 0)
        host.rdma(nic, name, "Ethernet", netdev)
    sw1 = "pci0000:37/0000:37:01.0/0000:38:00.0"
    host.pci("pci0000:37/0000:37:01.0", numa=0)
    host.pci(sw1, numa=0)
    host.pci(sw1 + "/0000:39:00.0", numa=0)
    host.pci(sw1 + "/0000:39:01.0", numa=0)
    host.pci(sw1 + "/0000:39:00.0/0000:3a:00.0", numa=0)
    host.pci(sw1 + "/0000:39:00.0/0000:3a:00.0/0000:3b:00.0", numa=0)
    host.pci(sw1 + "/0000:39:00.0/0000:3a:00.0/0000:3b:00.0/0000:3c:00.0", "0x10de", "0x2330", "0x030200", 0)
    nic3 = host.pci(sw1 + "/0000:39:01.0/0000:3d:00.0", "0x15b3", "0x1021", "0x020700", 0)
    host.rdma(nic3, "mlx5_3", "InfiniBand", "ibp61s0")
    host.pci("pci0000:97/0000:97:01.0", numa=1)
    host.pci("pci0000:97/0000:97:02.0", numa=1)
    host.pci("pci0000:97/0000:97:01.0/0000:9b:00.0", "0x10de", "0x2330", "0x030200", 1)
    nic4 = host.pci("pci0000:97/0000:97:02.0/0000:9c:00.0", "0x15b3", "0x1021", "0x020700", 1)
    host.rdma(nic4, "mlx5_4", "InfiniBand")
    host.pci("pci0000:80/0000:80:01.0", numa=1)
    host.pci("pci0000:80/0000:80:01.0/0000:83:00.0", "0x10de", "0x22a3", "0x068000", 1)
    host.pci("pci0000:00/0000:00:1c.0", numa=0)
    host.pci("pci0000:00/0000:00:1c.0/0000:03:00.0", "0x1a03", "0x2000", "0x030000", 0)
    host.numa(
        {0: "0-1,4-5", 1: "2-3,6-7"},
        {0: "0,4", 4: "0,4", 1: "1,5", 5: "1,5", 2: "2,6", 6: "2,6", 3: "3,7", 7: "3,7"},
        16777216,
    )
    return host


def test_read_pci_devices(hgx: FakeHost) -> None:
    devices = {d["pci_address"]: d for d in P.read_pci_devices(str(hgx.root))}
    gpu = devices["0000:19:00.0"]
    assert (gpu["vendor_id"], gpu["device_id"], gpu["class_id"], gpu["numa_node"]) == (
        "10de",
        "2330",
        "0302",
        0,
    )
    assert gpu["chain"] == ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:19:00.0"]
    assert devices["0000:15:01.0"]["numa_node"] == 0
    found = P.classify_pci_devices(list(devices.values()))
    assert [g["pci_address"] for g in found["gpus"]] == ["0000:19:00.0", "0000:3c:00.0", "0000:9b:00.0"]
    assert [s["pci_address"] for s in found["nvswitches"]] == ["0000:83:00.0"]
    assert len(found["nics"]) == 5


def test_read_infiniband_and_netdevs(hgx: FakeHost) -> None:
    ib = {d["name"]: d for d in P.read_infiniband(str(hgx.root))}
    assert sorted(ib) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"]
    assert ib["mlx5_0"]["pci_address"] == "0000:1a:00.0"
    assert ib["mlx5_0"]["netdevs"] == ["ibp26s0"]
    assert ib["mlx5_2"]["ports"] == [
        {"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "link_layer": "Ethernet", "rate": None}
    ]
    assert P.read_netdevs(str(hgx.root)) == {
        "0000:1a:00.0": ["ibp26s0"],
        "0000:1b:00.0": ["ens1f0np0"],
        "0000:1b:00.1": ["ens1f1np1"],
        "0000:3d:00.0": ["ibp61s0"],
    }


def test_read_numa_nodes_with_siblings(hgx: FakeHost) -> None:
    nodes = P.read_numa_nodes(str(hgx.root))
    assert [(n["id"], n["cpus"], n["cpulist"], n["memory_mb"]) for n in nodes] == [
        (0, [0, 1, 4, 5], "0-1,4-5", 16384),
        (1, [2, 3, 6, 7], "2-3,6-7", 16384),
    ]
    assert nodes[0]["cores"] == [[0, 4], [1, 5]]
    assert nodes[1]["distances"] == [21, 10]


def test_read_numa_nodes_without_numa_support(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-3\n")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:        8388608 kB\nMemFree: 1 kB\n")
    [node] = P.read_numa_nodes(str(tmp_path))
    assert (node["id"], node["cpus"], node["memory_mb"], node["cores"]) == (0, [0, 1, 2, 3], 8192, None)


def test_pci_link_types_from_the_tree(hgx: FakeHost) -> None:
    devices = {d["pci_address"]: d for d in P.read_pci_devices(str(hgx.root))}

    def link(a: str, b: str) -> str:
        da, db = devices[a], devices[b]
        return P.pci_link_type(da["chain"], db["chain"], da["numa_node"], db["numa_node"])

    assert link("0000:19:00.0", "0000:1a:00.0") == "PIX"  # same PCIe switch
    assert link("0000:1b:00.0", "0000:1b:00.1") == "PIX"  # two functions of one NIC
    assert link("0000:3c:00.0", "0000:3d:00.0") == "PXB"  # through two levels of switches
    assert link("0000:9b:00.0", "0000:9c:00.0") == "PHB"  # two root ports of one host bridge
    assert link("0000:19:00.0", "0000:3d:00.0") == "NODE"  # two host bridges, one NUMA node
    assert link("0000:19:00.0", "0000:9c:00.0") == "SYS"  # across sockets
    assert P.pci_link_type([], devices["0000:19:00.0"]["chain"]) == "SYS"


def test_iommu_secure_boot_dgx_and_driver(tmp_path: Path) -> None:
    root = str(tmp_path)
    off = P.read_iommu(root)
    assert (off["enabled"], off["passthrough"], off["groups"]) == (False, False, 0)
    assert P.read_secure_boot(root) is False  # no EFI: Secure Boot cannot be on
    assert P.read_dgx_release(root) == {"dgx_os": False, "release": None, "fields": {}}
    assert P.read_nvidia_driver(root)["loaded"] is False

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt\n")
    (tmp_path / "sys/class/iommu/dmar0").mkdir(parents=True)
    for group in ("0", "1"):
        (tmp_path / "sys/kernel/iommu_groups" / group).mkdir(parents=True)
        (tmp_path / "sys/kernel/iommu_groups" / group / "type").write_text("identity\n")
    on = P.read_iommu(root)
    assert (on["enabled"], on["passthrough"], on["groups"], on["units"]) == (True, True, 2, ["dmar0"])
    assert on["cmdline_args"] == ["intel_iommu=on", "iommu=pt"]
    (tmp_path / "sys/kernel/iommu_groups/1/type").write_text("DMA-FQ\n")
    assert P.read_iommu(root)["passthrough"] is False

    efivars = tmp_path / "sys/firmware/efi/efivars"
    efivars.mkdir(parents=True)
    assert P.read_secure_boot(root) is None  # EFI, but the variable is not readable
    (efivars / ("SecureBoot-" + P.EFI_GLOBAL_GUID)).write_bytes(b"\x06\x00\x00\x00\x01")
    assert P.read_secure_boot(root) is True
    (efivars / ("SecureBoot-" + P.EFI_GLOBAL_GUID)).write_bytes(b"\x06\x00\x00\x00\x00")
    assert P.read_secure_boot(root) is False

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/dgx-release").write_text('DGX_NAME="DGX Server"\nDGX_SWBUILD_VERSION="6.0.11"\n')
    dgx = P.read_dgx_release(root)
    assert (dgx["dgx_os"], dgx["fields"]["DGX_SWBUILD_VERSION"]) == (True, "6.0.11")

    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release Build\n"
        "GCC version: gcc 12\n"
    )
    (tmp_path / "proc/driver/nvidia-nvswitch/devices/0000:83:00.0").mkdir(parents=True)
    (tmp_path / "sys/module/nouveau").mkdir(parents=True)
    driver = P.read_nvidia_driver(root)
    assert driver == {
        "loaded": True,
        "version": "550.127.05",
        "flavor": "open",
        "nouveau_loaded": True,
        "nvswitch_devices": 1,
    }


# ------------------------------------------------------------------------- facts assembly


def test_build_facts_from_pci_topology(hgx: FakeHost) -> None:
    facts = C.build_facts(str(hgx.root), {})
    assert facts["gpu_count"] == 3
    assert [
        (g["pci_address"], g["numa_node"], g["generation"], g["kernel_module"]) for g in facts["gpus"]
    ] == [
        ("0000:19:00.0", 0, "turing_or_newer", "open"),
        ("0000:3c:00.0", 0, "turing_or_newer", "open"),
        ("0000:9b:00.0", 1, "turing_or_newer", "open"),
    ]
    assert facts["gpus"][0]["uuid"] is None  # no nvidia-smi
    assert [s["pci_address"] for s in facts["nvswitches"]] == ["0000:83:00.0"]
    nics = {n["rdma_device"]: n for n in facts["rdma_nics"]}
    assert sorted(nics) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"]
    assert (nics["mlx5_0"]["netdev"], nics["mlx5_0"]["link_layer"], nics["mlx5_0"]["state"]) == (
        "ibp26s0",
        "InfiniBand",
        "ACTIVE",
    )
    assert (nics["mlx5_2"]["pci_address"], nics["mlx5_2"]["link_layer"]) == ("0000:1b:00.1", "Ethernet")
    assert (nics["mlx5_4"]["netdev"], nics["mlx5_4"]["numa_node"]) == (None, 1)
    affinity = facts["gpu_nic_affinity"]
    assert affinity["source"] == "pci-topology"
    rows = {row["gpu"]: row for row in affinity["gpus"]}
    assert rows["0000:19:00.0"]["links"] == {
        "mlx5_0": "PIX",
        "mlx5_1": "PIX",
        "mlx5_2": "PIX",
        "mlx5_3": "NODE",
        "mlx5_4": "SYS",
    }
    assert rows["0000:19:00.0"]["nearest_nics"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert (rows["0000:3c:00.0"]["nearest_nic"], rows["0000:3c:00.0"]["nearest_link"]) == ("mlx5_3", "PXB")
    assert (rows["0000:9b:00.0"]["nearest_nic"], rows["0000:9b:00.0"]["nearest_link"]) == ("mlx5_4", "PHB")
    assert {row["same_numa_node"] for row in affinity["gpus"]} == {True}
    assert facts["numa_node_count"] == 2
    assert facts["driver"]["loaded"] is False
    assert facts["driver"]["recommended_kernel_module"] == "open"
    assert facts["warnings"] == []


def test_build_facts_nearest_nic_on_another_numa_node(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.pci("pci0000:97/0000:97:01.0", numa=1)
    host.pci("pci0000:97/0000:97:01.0/0000:9b:00.0", "0x10de", "0x20b2", "0x030200", 1)
    host.pci("pci0000:15/0000:15:01.0", numa=0)
    nic = host.pci("pci0000:15/0000:15:01.0/0000:16:00.0", "0x15b3", "0x101b", "0x020700", 0)
    host.rdma(nic, "mlx5_0", "InfiniBand", "ib0")
    host.numa({0: "0-1", 1: "2-3"}, {}, 1048576)
    [row] = C.build_facts(str(tmp_path), {})["gpu_nic_affinity"]["gpus"]
    assert (row["nearest_nic"], row["nearest_link"], row["gpu_numa_node"], row["nearest_nic_numa_node"]) == (
        "mlx5_0",
        "SYS",
        1,
        0,
    )
    assert row["same_numa_node"] is False


def _ok(stdout: str) -> dict[str, Any]:
    return {"rc": 0, "stdout": stdout, "stderr": ""}


def test_build_facts_with_nvidia_smi(tmp_path: Path) -> None:
    """Composite: a fake tree with the two GPUs of the 2x RTX A5000 capture (81:00.0 on NUMA 0,
    c1:00.0 on NUMA 1) and the two NICs of the two-socket Della topology; nvidia-smi's own outputs
    are the captures. GPUn of topo -m is the n-th GPU of -q -x."""
    host = FakeHost(tmp_path)
    for bridge, gpu, nic, numa, name in (("80", "81", "82", 0, "mlx5_0"), ("c0", "c1", "c2", 1, "mlx5_1")):
        host.pci(f"pci0000:{bridge}/0000:{bridge}:01.0", numa=numa)
        host.pci(f"pci0000:{bridge}/0000:{bridge}:02.0", numa=numa)
        host.pci(f"pci0000:{bridge}/0000:{bridge}:01.0/0000:{gpu}:00.0", "0x10de", "0x2231", "0x030000", numa)
        port = host.pci(
            f"pci0000:{bridge}/0000:{bridge}:02.0/0000:{nic}:00.0", "0x15b3", "0x101b", "0x020700", numa
        )
        host.rdma(port, name, "InfiniBand")
    host.numa({0: "0-63", 1: "64-127"}, {}, 268435456)
    outputs = {
        "nvidia_smi_xml": _ok(fixture("nvidia-smi-q-x/2x-rtx-a5000-590.44.01.xml")),
        "nvidia_smi_topo": _ok(fixture("nvidia-smi-topo/2x-a100-pcie-2nic-2socket-della.txt")),
    }
    facts = C.build_facts(str(tmp_path), outputs)
    assert [(g["index"], g["pci_address"], g["uuid"], g["model"]) for g in facts["gpus"]] == [
        (0, "0000:81:00.0", "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "NVIDIA RTX A5000"),
        (1, "0000:c1:00.0", "GPU-12345678-aaaa-bbbb-cccc-0123456789cd", "NVIDIA RTX A5000"),
    ]
    assert {(g["driver_version"], g["architecture"], g["memory_total_mib"]) for g in facts["gpus"]} == {
        ("590.44.01", "Ampere", 24564)
    }
    assert facts["gpu_models"] == ["NVIDIA RTX A5000"]
    assert facts["driver"]["nvidia_smi_ok"] is True
    assert facts["driver"]["nvidia_smi_version"] == "590.44.01"
    affinity = facts["gpu_nic_affinity"]
    assert affinity["source"] == "nvidia-smi"
    assert affinity["gpu_links"] == {
        "0000:81:00.0": {"0000:c1:00.0": "SYS"},
        "0000:c1:00.0": {"0000:81:00.0": "SYS"},
    }
    assert affinity["nvlink"] is False
    rows = {row["gpu"]: row for row in affinity["gpus"]}
    assert rows["0000:81:00.0"]["links"] == {"mlx5_0": "NODE", "mlx5_1": "SYS"}
    assert (rows["0000:c1:00.0"]["nearest_nic"], rows["0000:c1:00.0"]["same_numa_node"]) == ("mlx5_1", True)

    # a topology that does not cover the GPUs nvidia-smi -q lists is not trusted
    outputs["nvidia_smi_topo"] = _ok(fixture("nvidia-smi-topo/8x-h100-sxm-6nic-dual-xeon-8468-545.23.08.txt"))
    facts = C.build_facts(str(tmp_path), outputs)
    assert facts["gpu_nic_affinity"]["source"] == "pci-topology"
    assert any("topo -m lists 8 GPUs" in w for w in facts["warnings"])
    rows = {row["gpu"]: row for row in facts["gpu_nic_affinity"]["gpus"]}
    assert rows["0000:81:00.0"]["links"] == {"mlx5_0": "PHB", "mlx5_1": "SYS"}


def test_build_facts_nvidia_smi_failing(hgx: FakeHost) -> None:
    failed = {
        "rc": 9,
        "stdout": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
        "stderr": "",
    }
    facts = C.build_facts(str(hgx.root), {"nvidia_smi_xml": failed})
    assert facts["gpu_count"] == 3  # the GPUs are still known from sysfs
    assert facts["driver"]["nvidia_smi_ok"] is False
    assert facts["warnings"] == ["nvidia-smi failed (rc 9): " + failed["stdout"].strip()]


def test_build_facts_from_lspci_when_sysfs_has_no_pci(tmp_path: Path) -> None:
    facts = C.build_facts(
        str(tmp_path),
        {"lspci": _ok(fixture("lspci/lspci-nn-azure-nd96amsr-a100-v4-8gpu-6nvswitch-8cx6vf.txt"))},
    )
    assert facts["gpu_count"] == 8
    assert facts["gpu_models"] == ["A100 SXM4 80GB"]
    assert {g["generation"] for g in facts["gpus"]} == {"turing_or_newer"}
    assert facts["nvswitch_count"] == 6
    assert len(facts["rdma_nics"]) == 9
    assert {n["link_layer"] for n in facts["rdma_nics"] if n["device_id"] == "101c"} == {"InfiniBand"}
    assert facts["gpu_nic_affinity"]["source"] == "pci-topology"
    assert {row["nearest_link"] for row in facts["gpu_nic_affinity"]["gpus"]} == {"SYS"}  # nothing is known


def test_build_facts_single_numa_node_fills_unknown_device_nodes(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.pci("pci0000:00/0000:00:02.0")
    host.pci("pci0000:00/0000:00:02.0/0000:01:00.0", "0x10de", "0x1eb8", "0x030200")  # numa_node -1
    host.numa({0: "0-3"}, {}, 1048576)
    [gpu] = C.build_facts(str(tmp_path), {})["gpus"]
    assert gpu["numa_node"] == 0


def test_build_facts_empty_host(tmp_path: Path) -> None:
    facts = C.build_facts(str(tmp_path), {})
    assert (facts["gpus"], facts["nvswitches"], facts["rdma_nics"], facts["numa_nodes"]) == ([], [], [], [])
    assert facts["gpu_nic_affinity"]["source"] is None
    assert facts["driver"]["recommended_kernel_module"] is None
    assert facts["secure_boot"] is False
    assert facts["secure_boot_source"] == "no-efi"
