"""What a real GPU showed: outputs captured on the lent NVIDIA H200 machine (tests/fixtures/gpu-device,
SOURCES.md there), read back by the parsers gpu_facts uses, and held against
what the gpu_facts module itself returned there and what the driver verify and gpu_acceptance said."""

from __future__ import annotations

import json
import re
from typing import Any

from helpers import FIXTURES, module_utils

gpu_parsers = module_utils("gpu_parsers")
DRIVER = "580.159.04"


def _read(name: str) -> str:
    return (FIXTURES / "gpu-device" / name).read_text(encoding="utf-8")


def _facts() -> Any:
    return json.loads(_read("h200-1x-580.159.04-device.json"))["ansible_facts"]["gpubring_gpu_facts"]


def test_the_xml_of_a_real_h200_reads_as_gpu_facts_read_it_there() -> None:
    smi = gpu_parsers.parse_nvidia_smi_xml(_read("h200-1x-580.159.04-device.xml"))
    assert (smi["driver_version"], smi["cuda_version"], smi["attached_gpus"]) == (DRIVER, "13.0", 1)
    (gpu,) = smi["gpus"]
    assert (gpu["model"], gpu["architecture"], gpu["pci_address"]) == (
        "NVIDIA H200",
        "Hopper",
        "0000:00:06.0",
    )
    assert (gpu["vendor_id"], gpu["device_id"], gpu["memory_total_mib"]) == ("10de", "2335", 143771)
    facts = _facts()
    assert facts["gpu_count"] == 1 and facts["gpu_models"] == [gpu["model"]]
    assert facts["driver"]["version"] == facts["driver"]["nvidia_smi_version"] == DRIVER
    assert facts["driver"]["flavor"] == "open" and facts["driver"]["loaded"] is True
    assert facts["gpus"][0]["pci_address"] == gpu["pci_address"]


def test_the_query_csv_agrees_with_the_xml() -> None:
    header, row = _read("h200-1x-580.159.04-device.csv").strip().splitlines()
    fields = dict(
        zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")], strict=True)
    )
    assert fields["name"] == "NVIDIA H200" and fields["driver_version"] == DRIVER
    assert fields["memory.total [MiB]"] == "143771 MiB" and fields["compute_cap"] == "9.0"


def test_the_topology_of_a_lone_gpu_without_nvlink_or_nic() -> None:
    topo = gpu_parsers.parse_nvidia_smi_topo(_read("h200-1x-580.159.04-device.txt"))
    assert topo["gpus"] == ["GPU0"] and topo["nics"] == [] and topo["links"] == {"GPU0": {}}
    assert topo["cpu_affinity"] == {"GPU0": "0-15"} and topo["numa_affinity"] == {"GPU0": [0]}
    assert _facts()["gpu_nic_affinity"]["nvlink"] is False
    numa = gpu_parsers.parse_numactl_hardware(_read("h200-vm-16cpu-device.txt"))
    assert [n["cpulist"] for n in numa["nodes"]] == ["0-15"]


def test_the_driver_verify_passed_and_acceptance_said_what_it_skipped_and_why() -> None:
    verify = _read("h200-nvidia-driver-verify.txt")
    for task in ("Check that nvidia-smi answers with the pinned driver version on every GPU",
                 "Check that /dev/nvidia-uvm exists"):  # fmt: skip
        assert re.search(re.escape(task) + r".*\n+ok: \[localhost\]", verify), task
    checks = _read("h200-gpu-acceptance-checks.txt")
    verdicts = dict(re.findall(r"name: (\S+)\n(?:.*\n)*?\s+status: (\w+)", checks))
    assert verdicts == {
        "dcgm_diag": "skipped",
        "gpu_health:0000:00:06.0": "passed",
        "gpu_xid": "passed",
        "nvlink:0000:00:06.0": "skipped",
        "nic_link": "skipped",
        "pcie:0000:00:06.0": "passed",
        "rdma_write_bw": "skipped",
    }
    assert "dcgmi (DCGM) is not installed" in checks
