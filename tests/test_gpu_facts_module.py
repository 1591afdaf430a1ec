"""The gpu_facts module run for real through ansible on this machine (which has no GPU), in check
mode, and on a fake sysfs tree through its ``root`` option; plus its documentation through ansible-doc."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpubring.paths import project_root
from helpers import BIN, collection_env, module_utils

# Managed hosts run their own python3 (3.10 or newer), not the controller's venv.
TARGET_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def _env(tmp_path: Path) -> dict[str, str]:
    return collection_env(
        {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"),
        ANSIBLE_REMOTE_TMP=str(tmp_path / "remote-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
    )


def run_module(tmp_path: Path, *extra: str) -> dict[str, Any]:
    """``ansible localhost -m gpubring.core.gpu_facts`` (run outside the checkout, so the project's
    ansible.cfg and its fact cache stay untouched); returns the module result."""
    command = [
        str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
        "-m", "gpubring.core.gpu_facts", "-e", "ansible_python_interpreter=" + TARGET_PYTHON, *extra,
    ]  # fmt: skip
    proc = subprocess.run(
        command, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300, check=False
    )
    match = re.search(r"^localhost \| (\w+) => ", proc.stdout, re.MULTILINE)
    assert match, f"no result in ansible's output:\n{proc.stdout}\n{proc.stderr}"
    assert match.group(1) == "SUCCESS", proc.stdout
    assert proc.returncode == 0
    result: dict[str, Any] = json.JSONDecoder().raw_decode(proc.stdout[match.end() :])[0]
    return result


def _pci_gpus_here() -> list[str]:
    """NVIDIA display-class functions on this machine's PCI bus, read independently of the module."""
    found = []
    for entry in sorted(Path("/sys/bus/pci/devices").glob("*")):
        vendor = (entry / "vendor").read_text().strip()
        klass = (entry / "class").read_text().strip()
        if vendor == "0x10de" and klass[:6] in ("0x0300", "0x0302"):
            found.append(entry.name)
    return found


def _numa_nodes_here() -> list[tuple[int, str, int]]:
    nodes = []
    for entry in Path("/sys/devices/system/node").glob("node[0-9]*"):
        cpulist = (entry / "cpulist").read_text().strip()
        kb = re.search(r"MemTotal:\s+(\d+) kB", (entry / "meminfo").read_text())
        assert kb
        nodes.append((int(entry.name[4:]), cpulist, int(kb.group(1)) // 1024))
    return sorted(nodes)


@pytest.fixture(scope="module")
def facts_here(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result = run_module(tmp_path_factory.mktemp("gpu-facts"))
    assert result["changed"] is False
    facts: dict[str, Any] = result["ansible_facts"]["gpubring_gpu_facts"]
    return facts


def test_this_machine_has_no_gpu(facts_here: dict[str, Any]) -> None:
    assert _pci_gpus_here() == []  # the premise: a build machine without GPUs
    assert facts_here["gpus"] == []
    assert facts_here["gpu_count"] == 0
    assert facts_here["nvswitches"] == []
    assert facts_here["driver"]["loaded"] is False
    assert facts_here["driver"]["loaded"] == (
        Path("/sys/module/nvidia").exists() or Path("/proc/driver/nvidia").exists()
    )
    assert facts_here["driver"]["nvidia_smi_ok"] is False
    assert facts_here["driver"]["recommended_kernel_module"] is None
    assert facts_here["gpu_nic_affinity"]["source"] is None
    if shutil.which("lspci"):
        assert facts_here["tools"]["lspci"] == shutil.which("lspci")
    if shutil.which("nvidia-smi") is None:
        assert "nvidia_smi_xml" not in facts_here["tools"]
    else:  # a driver package without a GPU: nvidia-smi runs, fails, and says so in a warning
        assert any(w.startswith("nvidia-smi failed") for w in facts_here["warnings"])
    assert facts_here["schema"] == 1


def test_numa_nodes_match_sysfs(facts_here: dict[str, Any]) -> None:
    here = _numa_nodes_here()
    assert here, "this machine exposes /sys/devices/system/node"
    assert [(n["id"], n["cpulist"], n["memory_mb"]) for n in facts_here["numa_nodes"]] == here
    assert facts_here["numa_node_count"] == len(here)
    for node in facts_here["numa_nodes"]:
        assert node["cpus"] == [int(c) for c in node["cpus"]]
        assert sorted(c for core in node["cores"] for c in core) == node["cpus"]


def test_host_state_matches_this_machine(facts_here: dict[str, Any]) -> None:
    assert facts_here["dgx_os"] is Path("/etc/dgx-release").exists()
    assert facts_here["iommu"]["enabled"] is bool(
        list(Path("/sys/class/iommu").glob("*")) or list(Path("/sys/kernel/iommu_groups").glob("*"))
    )
    if not Path("/sys/firmware/efi").exists():
        assert (facts_here["secure_boot"], facts_here["secure_boot_source"]) == (False, "no-efi")
    infiniband = sorted(p.name for p in Path("/sys/class/infiniband").glob("*"))
    assert [d["name"] for d in facts_here["rdma_devices"]] == infiniband


@pytest.mark.skipif(shutil.which("lspci") is None, reason="pciutils is not installed")
def test_lspci_and_sysfs_agree_here() -> None:
    """Two independent sources on a real machine: ``lspci -Dnn`` parsed, and sysfs read."""
    parsers = module_utils("gpu_parsers")
    listed = subprocess.run(["lspci", "-Dnn"], capture_output=True, text=True, check=True).stdout
    from_lspci = {
        (d["pci_address"], d["vendor_id"], d["device_id"], d["class_id"]) for d in parsers.parse_lspci(listed)
    }
    from_sysfs = {
        (d["pci_address"], d["vendor_id"], d["device_id"], d["class_id"])
        for d in parsers.read_pci_devices("/")
    }
    assert from_lspci
    assert from_lspci == from_sysfs


def test_check_mode_gives_the_same_facts(tmp_path: Path, facts_here: dict[str, Any]) -> None:
    result = run_module(tmp_path, "--check")
    assert result["changed"] is False
    checked = result["ansible_facts"]["gpubring_gpu_facts"]
    for key in ("gpus", "nvswitches", "rdma_nics", "numa_nodes", "iommu", "secure_boot", "dgx_os", "driver"):
        assert checked[key] == facts_here[key], key


def _fake_tree(root: Path) -> None:
    """One H100 on NUMA node 1 behind root port 97:01.0 (synthetic tree in the kernel's layout)."""
    bridge = root / "sys/devices/pci0000:97/0000:97:01.0"
    gpu = bridge / "0000:9b:00.0"
    for device, values in (
        (bridge, ("0x8086", "0x352a", "0x060400")),
        (gpu, ("0x10de", "0x2330", "0x030200")),
    ):
        device.mkdir(parents=True)
        for name, value in zip(("vendor", "device", "class"), values, strict=True):
            (device / name).write_text(value + "\n")
        (device / "numa_node").write_text("1\n")
        link = root / "sys/bus/pci/devices" / device.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(device, link.parent))
    for node, cpulist in ((0, "0-3"), (1, "4-7")):
        entry = root / f"sys/devices/system/node/node{node}"
        entry.mkdir(parents=True)
        (entry / "cpulist").write_text(cpulist + "\n")
        (entry / "meminfo").write_text(f"Node {node} MemTotal:       4194304 kB\n")


def test_root_option_reads_another_tree(tmp_path: Path) -> None:
    tree = tmp_path / "host"
    _fake_tree(tree)
    result = run_module(tmp_path, "-a", f"root={tree}")
    facts = result["ansible_facts"]["gpubring_gpu_facts"]
    assert facts["tools"] == {}  # commands describe the running host: not run for another root
    [gpu] = facts["gpus"]
    assert (gpu["pci_address"], gpu["device_id"], gpu["numa_node"], gpu["generation"]) == (
        "0000:9b:00.0",
        "2330",
        1,
        "turing_or_newer",
    )
    assert [(n["id"], n["cpulist"], n["memory_mb"]) for n in facts["numa_nodes"]] == [
        (0, "0-3", 4096),
        (1, "4-7", 4096),
    ]
    assert facts["driver"]["recommended_kernel_module"] == "open"


def test_bad_root_fails_cleanly(tmp_path: Path) -> None:
    command = [
        str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
        "-m", "gpubring.core.gpu_facts", "-a", "root={}".format(tmp_path / "missing"),
        "-e", "ansible_python_interpreter=" + TARGET_PYTHON,
    ]  # fmt: skip
    proc = subprocess.run(
        command, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode != 0
    assert "is not a directory" in proc.stdout


def test_documentation_through_ansible_doc(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), "-j", "gpubring.core.gpu_facts"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    doc = json.loads(proc.stdout)["gpubring.core.gpu_facts"]
    assert set(doc["doc"]["options"]) == {"root", "run_commands", "command_timeout"}
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"
    returned = doc["return"]["ansible_facts"]["contains"]["gpubring_gpu_facts"]["contains"]
    for key in (
        "gpus",
        "nvswitches",
        "rdma_nics",
        "numa_nodes",
        "gpu_nic_affinity",
        "iommu",
        "secure_boot",
        "dgx_os",
        "driver",
        "warnings",
    ):
        assert key in returned, key


def test_managed_side_code_parses_as_python_310() -> None:
    root = project_root()
    for relative in (
        "plugins/modules/gpu_facts.py",
        "plugins/module_utils/gpu_parsers.py",
        "plugins/module_utils/gpu_collect.py",
        "plugins/module_utils/gpu_topology.py",
    ):
        ast.parse((root / relative).read_text(), relative, feature_version=(3, 10))
