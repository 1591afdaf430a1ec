# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Assemble gpubring_gpu_facts from sysfs (under ``root``) and the outputs of the commands that the
gpu_facts module ran. Plain functions: the module stays a thin entry file and the tests build the
facts from a fake sysfs tree plus captured outputs.

``outputs`` maps a command key to ``{"rc": int, "stdout": str, "stderr": str}`` (missing = not run):
``lspci`` (``lspci -Dnn``), ``nvidia_smi_xml`` (``nvidia-smi -q -x``), ``nvidia_smi_topo``
(``nvidia-smi topo -m``), ``ibv_devinfo``, ``mokutil`` (``mokutil --sb-state``).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpubring.core.plugins.module_utils.gpu_parsers import (
    classify_pci_devices,
    efi_booted,
    gpu_generation,
    kernel_module_for,
    link_rank,
    parse_ibv_devinfo,
    parse_lspci,
    parse_mokutil_sb_state,
    parse_nvidia_smi_topo,
    parse_nvidia_smi_xml,
    pci_link_type,
    pci_model_name,
    read_dgx_release,
    read_infiniband,
    read_iommu,
    read_netdevs,
    read_numa_nodes,
    read_nvidia_driver,
    read_pci_devices,
    read_secure_boot,
)

FACTS_NAME = "gpubring_gpu_facts"
SCHEMA_VERSION = 1


def _ok(outputs: dict[str, dict[str, Any]], key: str) -> str | None:
    result = outputs.get(key)
    if not result or result.get("rc") != 0:
        return None
    return str(result.get("stdout") or "")


def _first_line(result: dict[str, Any]) -> str:
    for text in (result.get("stderr"), result.get("stdout")):
        for line in str(text or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def build_facts(root: str = "/", outputs: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The gpubring_gpu_facts dict (shape in the gpu_facts module's RETURN)."""
    outputs = outputs or {}
    warnings: list[str] = []
    pci = _pci(root, outputs)
    smi = _nvidia_smi(outputs, warnings)
    smi_order = [g["pci_address"] for g in (smi or {}).get("gpus", [])]
    gpus = _gpus(pci, smi, warnings)
    rdma_nics, rdma_devices = _rdma(root, outputs, pci)
    numa_nodes = read_numa_nodes(root)
    if len(numa_nodes) == 1:
        # the kernel reports -1 when the firmware has no NUMA information; with one node that is node 0
        for device in gpus + rdma_nics + pci["nvswitches"]:
            if device["numa_node"] is None:
                device["numa_node"] = numa_nodes[0]["id"]
    affinity = _affinity(
        gpus, rdma_nics, by_address=pci["by_address"], smi_order=smi_order, outputs=outputs, warnings=warnings
    )
    kernel = read_nvidia_driver(root)
    secure_boot, secure_boot_source = _secure_boot(root, outputs)
    dgx = read_dgx_release(root)
    if kernel["nouveau_loaded"] and gpus:
        warnings.append(
            "the nouveau driver is loaded; the NVIDIA driver cannot bind the GPUs until it is blacklisted"
        )
    unknown_numa = [d["pci_address"] for d in gpus + rdma_nics if d.get("numa_node") is None]
    if len(numa_nodes) > 1 and unknown_numa:
        warnings.append(
            "the firmware reports no NUMA node for {} on a host with {} NUMA nodes".format(
                ", ".join(unknown_numa), len(numa_nodes)
            )
        )
    return {
        "schema": SCHEMA_VERSION,
        "gpu_count": len(gpus),
        "gpu_models": sorted({g["model"] for g in gpus if g["model"]}),
        "gpus": gpus,
        "nvswitch_count": len(pci["nvswitches"]),
        "nvswitches": pci["nvswitches"],
        "rdma_nics": rdma_nics,
        "rdma_devices": rdma_devices,
        "numa_node_count": len(numa_nodes),
        "numa_nodes": numa_nodes,
        "gpu_nic_affinity": affinity,
        "iommu": read_iommu(root),
        "secure_boot": secure_boot,
        "secure_boot_source": secure_boot_source,
        "dgx_os": dgx["dgx_os"],
        "dgx_release": dgx["release"],
        "dgx_release_fields": dgx["fields"],
        "driver": {
            "loaded": kernel["loaded"],
            "version": kernel["version"],
            "flavor": kernel["flavor"],
            "nvidia_smi_ok": smi is not None,
            "nvidia_smi_version": (smi or {}).get("driver_version"),
            "cuda_version": (smi or {}).get("cuda_version"),
            "nouveau_loaded": kernel["nouveau_loaded"],
            "nvswitch_devices": kernel["nvswitch_devices"],
            "recommended_kernel_module": recommended_kernel_module(gpus),
        },
        "warnings": warnings,
    }


def recommended_kernel_module(gpus: list[dict[str, Any]]) -> str | None:
    """``open`` when every GPU is Turing or newer, ``proprietary`` when any is older, else None."""
    generations = {g["generation"] for g in gpus}
    if not gpus or "unknown" in generations:
        return None
    return "proprietary" if "pre_turing" in generations else "open"


def _pci(root: str, outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """PCI functions from sysfs (lspci -D when sysfs has none); names from lspci when it ran."""
    devices = read_pci_devices(root)
    lspci_text = _ok(outputs, "lspci")
    listed = parse_lspci(lspci_text) if lspci_text else []
    names = {r["pci_address"]: r for r in listed if r.get("pci_address")}
    if not devices and listed:
        devices = [dict(r, chain=[], is_vf=False, numa_node=r.get("numa_node")) for r in listed]
    classes = classify_pci_devices(devices)
    nvswitches = []
    for device in sorted(classes["nvswitches"], key=lambda d: d["pci_address"]):
        name = names.get(device["pci_address"], {})
        nvswitches.append(
            {
                "pci_address": device["pci_address"],
                "vendor_id": device.get("vendor_id"),
                "device_id": device.get("device_id"),
                "model": pci_model_name(name.get("description"), name.get("device_name")),
                "numa_node": device.get("numa_node"),
            }
        )
    return {
        "by_address": {d["pci_address"]: d for d in devices},
        "names": names,
        "classes": classes,
        "nvswitches": nvswitches,
    }


def _nvidia_smi(outputs: dict[str, dict[str, Any]], warnings: list[str]) -> dict[str, Any] | None:
    result = outputs.get("nvidia_smi_xml")
    if result is None:
        return None
    if result.get("rc") != 0:
        warnings.append("nvidia-smi failed (rc {}): {}".format(result.get("rc"), _first_line(result)))
        return None
    try:
        return parse_nvidia_smi_xml(str(result.get("stdout") or ""))
    except ValueError as exc:
        warnings.append(f"nvidia-smi -q -x: {exc}")
        return None


def _gpus(pci: dict[str, Any], smi: dict[str, Any] | None, warnings: list[str]) -> list[dict[str, Any]]:
    smi_gpus = {g["pci_address"]: g for g in (smi or {}).get("gpus", []) if g.get("pci_address")}
    smi_order = [g["pci_address"] for g in (smi or {}).get("gpus", [])]
    addresses = sorted({d["pci_address"] for d in pci["classes"]["gpus"]} | set(smi_gpus))
    gpus = []
    for position, address in enumerate(addresses):
        sysfs = pci["by_address"].get(address, {})
        info = smi_gpus.get(address, {})
        listed = pci["names"].get(address, {})
        device_id = sysfs.get("device_id") or info.get("device_id") or listed.get("device_id")
        model = info.get("model") or pci_model_name(listed.get("description"), listed.get("device_name"))
        generation = gpu_generation(device_id, info.get("architecture"), model)
        if generation == "unknown":
            warnings.append(
                f"GPU {address}: cannot tell its generation (device id {device_id}, model {model})"
            )
        gpus.append(
            {
                "index": smi_order.index(address) if address in smi_order else position,
                "pci_address": address,
                "vendor_id": sysfs.get("vendor_id") or info.get("vendor_id") or "10de",
                "device_id": device_id,
                "model": model,
                "numa_node": sysfs.get("numa_node", listed.get("numa_node")),
                "uuid": info.get("uuid"),
                "driver_version": info.get("driver_version"),
                "mig_mode": info.get("mig_mode"),
                "mig_pending": info.get("mig_pending"),
                "memory_total_mib": info.get("memory_total_mib"),
                "architecture": info.get("architecture"),
                "generation": generation,
                "kernel_module": kernel_module_for(generation),
                "is_vf": bool(sysfs.get("is_vf")),
                "bound_driver": sysfs.get("driver") or listed.get("driver"),
            }
        )
    return gpus


def _rdma(
    root: str, outputs: dict[str, dict[str, Any]], pci: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rdma_nics, rdma_devices): NICs from PCI + /sys/class/infiniband, enriched by ibv_devinfo."""
    ib_devices = read_infiniband(root)
    devinfo_text = _ok(outputs, "ibv_devinfo")
    devinfo = {h["hca_id"]: h for h in parse_ibv_devinfo(devinfo_text)} if devinfo_text else {}
    ib_by_pci = {d["pci_address"]: d for d in ib_devices if d["pci_address"]}
    netdevs = read_netdevs(root)
    addresses = sorted({d["pci_address"] for d in pci["classes"]["nics"]} | set(ib_by_pci))
    nics = []
    for address in addresses:
        sysfs = pci["by_address"].get(address, {})
        listed = pci["names"].get(address, {})
        ib = ib_by_pci.get(address) or {}
        hca = devinfo.get(ib["name"], {}) if ib else {}
        ports = ib.get("ports") or [
            {"port": p["port"], "state": p.get("state"), "link_layer": p.get("link_layer")}
            for p in hca.get("ports", [])
        ]
        link_layer = next((p["link_layer"] for p in ports if p.get("link_layer")), None)
        if link_layer is None and not ib:
            class_id = sysfs.get("class_id") or listed.get("class_id") or ""
            link_layer = {"0207": "InfiniBand", "0200": "Ethernet"}.get(class_id)
        nic_netdevs = sorted(set(netdevs.get(address, []) + (ib.get("netdevs") or [])))
        nics.append(
            {
                "pci_address": address,
                "vendor_id": sysfs.get("vendor_id") or listed.get("vendor_id"),
                "device_id": sysfs.get("device_id") or listed.get("device_id"),
                "model": pci_model_name(listed.get("description"), listed.get("device_name")),
                "netdev": nic_netdevs[0] if nic_netdevs else None,
                "netdevs": nic_netdevs,
                "rdma_device": ib.get("name"),
                "link_layer": link_layer,
                "state": ports[0].get("state") if ports else None,
                "numa_node": sysfs.get("numa_node", listed.get("numa_node")),
                "is_vf": bool(sysfs.get("is_vf")),
                "node_guid": ib.get("node_guid") or hca.get("node_guid"),
                "fw_ver": ib.get("fw_ver") or hca.get("fw_ver"),
                "bound_driver": sysfs.get("driver") or listed.get("driver"),
            }
        )
    devices = [
        {
            "name": d["name"],
            "pci_address": d["pci_address"],
            "netdevs": d["netdevs"],
            "node_guid": d["node_guid"],
            "fw_ver": d["fw_ver"] or devinfo.get(d["name"], {}).get("fw_ver"),
            "board_id": devinfo.get(d["name"], {}).get("board_id"),
            "ports": d["ports"],
        }
        for d in ib_devices
    ]
    return nics, devices


def _secure_boot(root: str, outputs: dict[str, dict[str, Any]]) -> tuple[bool | None, str | None]:
    """(state, source): the EFI variable, else mokutil --sb-state; a host without EFI reports False."""
    state = read_secure_boot(root)
    if not efi_booted(root):
        return state, "no-efi"
    if state is not None:
        return state, "efivars"
    mokutil = _ok(outputs, "mokutil")
    if mokutil is not None:
        state = parse_mokutil_sb_state(mokutil)
        if state is not None:
            return state, "mokutil"
    return None, None


def _nic_name(nic: dict[str, Any]) -> str:
    return str(nic["rdma_device"] or nic["netdev"] or nic["pci_address"])


def _affinity(
    gpus: list[dict[str, Any]],
    nics: list[dict[str, Any]],
    *,
    by_address: dict[str, dict[str, Any]],
    smi_order: list[str],
    outputs: dict[str, dict[str, Any]],
    warnings: list[str],
) -> dict[str, Any]:
    """GPU x NIC link types from ``nvidia-smi topo -m`` when it covers the GPUs, else from sysfs."""
    result: dict[str, Any] = {"source": None, "gpus": [], "gpu_links": {}, "nvlink": False}
    if not gpus:
        return result
    nic_by_name = {_nic_name(n): n for n in nics}
    links: dict[str, dict[str, str]] = {}
    topo_text = _ok(outputs, "nvidia_smi_topo")
    topo = parse_nvidia_smi_topo(topo_text) if topo_text else None
    if topo and topo["gpus"] and len(topo["gpus"]) == len(smi_order):
        label_to_address = {f"GPU{i}": address for i, address in enumerate(smi_order)}
        for label, address in label_to_address.items():
            row = topo["links"].get(label, {})
            links[address] = {topo["nic_names"][nic]: row[nic] for nic in topo["nics"] if nic in row}
            result["gpu_links"][address] = {
                label_to_address[other]: link for other, link in row.items() if other in label_to_address
            }
        result["source"] = "nvidia-smi"
        result["nvlink"] = any(
            link.startswith("NV") for row in result["gpu_links"].values() for link in row.values()
        )
    else:
        if topo and topo["gpus"]:
            warnings.append(
                "nvidia-smi topo -m lists {} GPUs, nvidia-smi -q {}; GPU-NIC affinity computed from the PCI topology".format(
                    len(topo["gpus"]), len(smi_order)
                )
            )
        if not nics:
            return result
        for gpu in gpus:
            gpu_pci = by_address.get(gpu["pci_address"], {})
            links[gpu["pci_address"]] = {
                _nic_name(nic): pci_link_type(
                    gpu_pci.get("chain") or [],
                    by_address.get(nic["pci_address"], {}).get("chain") or [],
                    gpu.get("numa_node"),
                    nic.get("numa_node"),
                )
                for nic in nics
            }
        result["source"] = "pci-topology"
    for gpu in gpus:
        row = links.get(gpu["pci_address"], {})
        entry: dict[str, Any] = {
            "gpu": gpu["pci_address"],
            "gpu_numa_node": gpu.get("numa_node"),
            "links": row,
            "nearest_nics": [],
            "nearest_nic": None,
            "nearest_link": None,
            "nearest_nic_numa_node": None,
            "same_numa_node": None,
        }
        if row:
            best = min(link_rank(link) for link in row.values())
            nearest = [name for name, link in row.items() if link_rank(link) == best]
            entry["nearest_nics"] = nearest
            entry["nearest_nic"] = nearest[0]
            entry["nearest_link"] = row[nearest[0]]
            nic = nic_by_name.get(nearest[0])
            nic_numa = nic.get("numa_node") if nic else None
            entry["nearest_nic_numa_node"] = nic_numa
            if nic_numa is not None and gpu.get("numa_node") is not None:
                entry["same_numa_node"] = nic_numa == gpu["numa_node"]
        result["gpus"].append(entry)
    return result
