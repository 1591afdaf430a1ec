#!/usr/bin/python
# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""gpubring.core.gpu_facts: GPUs, NVSwitches, RDMA NICs, NUMA layout and GPU-NIC affinity."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather GPU, NVSwitch, RDMA NIC, NUMA and GPU-NIC affinity facts
description:
  - Reads sysfs (C(/sys/bus/pci), C(/sys/class/infiniband), C(/sys/class/net),
    C(/sys/devices/system/node), C(/sys/kernel/iommu_groups), EFI variables) and C(/etc/dgx-release).
  - Runs C(lspci -Dnn), C(nvidia-smi -q -x), C(nvidia-smi topo -m), C(ibv_devinfo) and
    C(mokutil --sb-state) only when they are installed; a failing C(nvidia-smi) is reported in
    C(driver.nvidia_smi_ok) and C(warnings), never as a module failure.
  - Never fails on a host without GPUs; it reports empty lists instead.
  - The GPU-NIC affinity comes from C(nvidia-smi topo -m) when it covers every GPU, else it is
    computed from the PCI topology in sysfs (common PCIe switch - PIX/PXB, same root complex - PHB,
    same NUMA node - NODE, else SYS).
  - "GPU generation rule: Turing and newer GPUs run NVIDIA's open kernel modules, Volta, Pascal and
    older need the proprietary ones. The architecture reported by nvidia-smi decides; without it the
    PCI device id (0x1e00 and above is Turing or newer), then the product name; else C(unknown)."
version_added: "0.1.0"
author: gpubring maintainers (!UNKNOWN)
options:
  root:
    description:
      - The host's root directory whose C(sys), C(proc) and C(etc) are read.
      - Commands are run only when this is C(/), since they describe the running host.
    type: path
    default: /
  run_commands:
    description:
      - Run lspci, nvidia-smi, ibv_devinfo and mokutil when they are installed.
      - With C(false) only sysfs and files are read.
    type: bool
    default: true
  command_timeout:
    description:
      - Seconds each command may run (through coreutils C(timeout) when it is installed); a GPU in a
        bad state can make C(nvidia-smi) hang. A command that times out is reported in C(warnings).
    type: int
    default: 120
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
notes:
  - Sets the fact C(gpubring_gpu_facts).
  - The module only reads; it behaves the same in check mode.
"""

EXAMPLES = r"""
- name: Gather GPU facts
  gpubring.core.gpu_facts:

- name: Fail when a GPU node has no GPU
  ansible.builtin.assert:
    that: ansible_facts.gpubring_gpu_facts.gpu_count > 0
    fail_msg: "{{ inventory_hostname }}: no NVIDIA GPU found on the PCI bus"

- name: Warn when a GPU's nearest RDMA NIC sits on another NUMA node
  ansible.builtin.debug:
    msg: "GPU {{ item.gpu }} (NUMA {{ item.gpu_numa_node }}) is nearest to {{ item.nearest_nic }} (NUMA {{ item.nearest_nic_numa_node }})"
  loop: "{{ ansible_facts.gpubring_gpu_facts.gpu_nic_affinity.gpus | selectattr('same_numa_node', 'false') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpubring_gpu_facts:
      description: What the host has. PCI addresses are in the sysfs form C(0000:07:00.0).
      returned: always
      type: dict
      contains:
        schema:
          description: Version of this layout.
          type: int
          sample: 1
        gpu_count:
          description: Number of NVIDIA GPUs (vendor 10de, class 0300 or 0302) on the PCI bus.
          type: int
          sample: 8
        gpu_models:
          description: Distinct GPU model names.
          type: list
          elements: str
          sample: ["NVIDIA H100 80GB HBM3"]
        gpus:
          description:
            - One entry per GPU in PCI order, which is nvidia-smi's order (C(index) is the C(GPUn) of nvidia-smi).
            - uuid, driver_version, mig_mode, mig_pending, memory_total_mib and architecture need a
              working nvidia-smi and are null otherwise. mig_mode is C(enabled), C(disabled) or null (no MIG).
            - generation is C(turing_or_newer), C(pre_turing) or C(unknown); kernel_module is C(open),
              C(proprietary) or null accordingly.
            - numa_node is the device's NUMA node from sysfs; on a host with one NUMA node an unreported
              node (-1) is that node; on a multi-node host it stays null and a warning names the device.
          type: list
          elements: dict
          sample:
            - index: 0
              pci_address: "0000:19:00.0"
              vendor_id: "10de"
              device_id: "2330"
              model: "NVIDIA H100 80GB HBM3"
              numa_node: 0
              uuid: "GPU-5f1b0c1e-0000-0000-0000-000000000000"
              driver_version: "550.127.05"
              mig_mode: "disabled"
              mig_pending: "disabled"
              memory_total_mib: 81559
              architecture: "Hopper"
              generation: "turing_or_newer"
              kernel_module: "open"
              is_vf: false
              bound_driver: "nvidia"
        nvswitch_count:
          description: Number of NVSwitch bridges (vendor 10de, class 0680).
          type: int
        nvswitches:
          description: NVSwitches with pci_address, vendor_id, device_id, model, numa_node.
          type: list
          elements: dict
        rdma_nics:
          description:
            - Mellanox/NVIDIA network functions (vendor 15b3, class 02xx) and any PCI function with an RDMA device.
            - link_layer is C(InfiniBand) or C(Ethernet) (from sysfs, else ibv_devinfo, else the PCI class);
              state is the first port's state (C(ACTIVE), C(DOWN), ...).
          type: list
          elements: dict
          sample:
            - pci_address: "0000:1a:00.0"
              vendor_id: "15b3"
              device_id: "1021"
              model: "ConnectX-7"
              netdev: "ibp26s0"
              netdevs: ["ibp26s0"]
              rdma_device: "mlx5_0"
              link_layer: "InfiniBand"
              state: "ACTIVE"
              numa_node: 0
              is_vf: false
              node_guid: "58a2:e103:001a:677e"
              fw_ver: "28.41.1000"
              bound_driver: "mlx5_core"
        rdma_devices:
          description: Every device under /sys/class/infiniband (soft-RoCE too) with name, pci_address, netdevs, node_guid, fw_ver, board_id, ports.
          type: list
          elements: dict
        numa_node_count:
          description: Number of NUMA nodes.
          type: int
        numa_nodes:
          description:
            - id, cpus (list of ints), cpulist (kernel form C(0-15,128-143)), memory_mb, distances, and
              cores (hyperthread sibling groups, each a physical core; null when sysfs does not say).
          type: list
          elements: dict
          sample:
            - id: 0
              cpus: [0, 1]
              cpulist: "0-1"
              memory_mb: 6490
              distances: [10]
              cores: [[0], [1]]
        gpu_nic_affinity:
          description:
            - source is C(nvidia-smi), C(pci-topology) or null (no GPU, or no NIC and no nvidia-smi).
            - gpus has one entry per GPU - gpu (PCI address), gpu_numa_node, links ({NIC name - link type}),
              nearest_nics, nearest_nic, nearest_link, nearest_nic_numa_node, same_numa_node (null when unknown).
            - NIC names are the RDMA device (C(mlx5_0)), else the netdev, else the PCI address.
            - gpu_links ({GPU address - {GPU address - link}}) and nvlink come from nvidia-smi only.
          type: dict
        iommu:
          description: enabled, passthrough (true/false/null), units, groups, cmdline_args, cmdline_requested.
          type: dict
        secure_boot:
          description: true/false, or null when EFI is present but the state cannot be read. A host booted without EFI reports false.
          type: bool
        secure_boot_source:
          description: C(efivars), C(mokutil), or C(no-efi) (booted without EFI, so false); null when secure_boot is null.
          type: str
        dgx_os:
          description: Whether /etc/dgx-release exists.
          type: bool
        dgx_release:
          description: The text of /etc/dgx-release, or null.
          type: str
        dgx_release_fields:
          description: The KEY=value pairs of /etc/dgx-release.
          type: dict
        driver:
          description:
            - loaded (nvidia kernel module), version and flavor (C(open)/C(proprietary)) of the loaded module,
              nvidia_smi_ok, nvidia_smi_version, cuda_version, nouveau_loaded, nvswitch_devices
              (entries under /proc/driver/nvidia-nvswitch/devices), recommended_kernel_module
              (C(open) when every GPU is Turing or newer, C(proprietary) when any is older, null without GPUs).
          type: dict
        warnings:
          description: Problems met while gathering (nvidia-smi failed, unknown NUMA nodes, nouveau loaded).
          type: list
          elements: str
        tools:
          description: The commands that ran, by key (lspci, nvidia_smi_xml, nvidia_smi_topo, ibv_devinfo, mokutil), with their path.
          type: dict
          sample: {"lspci": "/usr/bin/lspci"}
"""

# Ansible modules keep their imports below the documentation strings.
import os  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpubring.core.plugins.module_utils.gpu_collect import FACTS_NAME, build_facts  # noqa: E402
from ansible_collections.gpubring.core.plugins.module_utils.gpu_parsers import read_secure_boot  # noqa: E402

COMMANDS = {
    "lspci": ("lspci", ["-Dnn"]),
    "nvidia_smi_xml": ("nvidia-smi", ["-q", "-x"]),
    "nvidia_smi_topo": ("nvidia-smi", ["topo", "-m"]),
    "ibv_devinfo": ("ibv_devinfo", []),
    "mokutil": ("mokutil", ["--sb-state"]),
}


def run_commands(module: AnsibleModule, timeout: int) -> dict[str, dict[str, Any]]:
    """Run the inspection commands that are installed: {key: {rc, stdout, stderr, path}}."""
    outputs: dict[str, dict[str, Any]] = {}
    env = {"LANG": "C", "LC_ALL": "C"}
    limiter = module.get_bin_path("timeout")
    for key, (tool, args) in COMMANDS.items():
        if key == "nvidia_smi_topo" and outputs.get("nvidia_smi_xml", {}).get("rc") != 0:
            continue  # topo needs a working driver; the failure is reported once
        if key == "mokutil" and read_secure_boot("/") is not None:
            continue  # the EFI variable (or its absence) already answers
        path = module.get_bin_path(tool, opt_dirs=["/usr/sbin", "/sbin", "/usr/local/bin"])
        if path is None:
            continue
        command = [path, *args]
        if limiter and timeout > 0:
            command = [limiter, "--kill-after=10", str(timeout), *command]
        rc, stdout, stderr = module.run_command(command, environ_update=env, errors="surrogate_or_replace")
        if limiter and rc in (124, 137):
            stderr = f"timed out after {timeout} s\n{stderr}"
        outputs[key] = {"rc": rc, "stdout": stdout, "stderr": stderr, "path": path}
    return outputs


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "run_commands": {"type": "bool", "default": True},
            "command_timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg=f"root {root} is not a directory")
    outputs: dict[str, dict[str, Any]] = {}
    if module.params["run_commands"] and os.path.realpath(root) == "/":
        outputs = run_commands(module, module.params["command_timeout"])
    facts = build_facts(root, outputs)
    facts["tools"] = {key: result.get("path") for key, result in outputs.items()}
    module.exit_json(changed=False, ansible_facts={FACTS_NAME: facts})


if __name__ == "__main__":
    main()
