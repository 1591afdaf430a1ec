# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Parsers for the hardware-inspection outputs that gpubring.core.gpu_facts reads.

Plain functions, standard library only: they run on the managed host (Python 3.10 or newer) inside
the gpu_facts module and are called directly by the unit tests with captured outputs.

Text parsers take the command output as a string and return plain dicts and lists (JSON-ready).
sysfs readers take ``root`` (the host's ``/``) so that tests can point them at a fake tree.

PCI addresses are always returned in the sysfs form ``dddd:bb:dd.f`` with lowercase hex digits
(``0000:07:00.0``); ``normalize_pci_address`` converts nvidia-smi's ``00000000:07:00.0`` and lspci's
``07:00.0``.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from typing import Any

NVIDIA_VENDOR_ID = "10de"
MELLANOX_VENDOR_ID = "15b3"
GPU_CLASS_IDS = ("0300", "0302")
NVSWITCH_CLASS_ID = "0680"

# lspci without -nn prints only names; these are the ones gpu_facts needs to classify devices.
_VENDOR_NAMES = {
    "NVIDIA Corporation": NVIDIA_VENDOR_ID,
    "Mellanox Technologies": MELLANOX_VENDOR_ID,
    "Intel Corporation": "8086",
    "Advanced Micro Devices, Inc. [AMD]": "1022",
    "Broadcom / LSI": "1000",
    "Broadcom Inc. and subsidiaries": "14e4",
    "Red Hat, Inc.": "1af4",
    "ASPEED Technology, Inc.": "1a03",
    "Samsung Electronics Co Ltd": "144d",
    "Microsoft Corporation": "1414",
}
_CLASS_NAMES = {
    "Non-Volatile memory controller": "0108",
    "Ethernet controller": "0200",
    "Infiniband controller": "0207",
    "Network controller": "0280",
    "VGA compatible controller": "0300",
    "3D controller": "0302",
    "Display controller": "0380",
    "Host bridge": "0600",
    "ISA bridge": "0601",
    "PCI bridge": "0604",
    "Bridge": "0680",
    "DMA controller": "0801",
    "USB controller": "0c03",
}

_NA_VALUES = {"", "n/a", "[n/a]", "not found", "not supported", "[not supported]", "none", "unknown"}
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$"
)


# --------------------------------------------------------------------------------------------
# small helpers


def _na(value: str | None) -> str | None:
    """None for nvidia-smi's placeholders (N/A, Not Supported, ...), else the stripped text."""
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in _NA_VALUES else text


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def normalize_pci_address(text: str | None) -> str | None:
    """``00000000:07:00.0`` / ``07:00.0`` / ``0000:07:00.0`` -> ``0000:07:00.0``; None if not an address."""
    if not text:
        return None
    match = _PCI_RE.match(text.strip())
    if not match:
        return None
    domain = int(match.group("domain") or "0", 16)
    return "{:04x}:{}:{}.{}".format(
        domain, match.group("bus").lower(), match.group("dev").lower(), match.group("fn")
    )


def is_pci_address(text: str) -> bool:
    return bool(_PCI_RE.match(text)) and text.count(":") == 2


def parse_cpulist(text: str | None) -> list[int]:
    """``0-3,8,10-11`` (also space separated, as numactl prints) -> sorted list of ints."""
    if not text:
        return []
    cpus: set[int] = set()
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        if "-" in part:
            first, last = part.split("-", 1)
            cpus.update(range(int(first), int(last) + 1))
        else:
            cpus.add(int(part))
    return sorted(cpus)


def format_cpulist(cpus: list[int] | set[int] | tuple[int, ...]) -> str:
    """Sorted ints -> the kernel's compact form ``0-3,8,10-11``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:  # type: ignore[operator]
            prev = cpu
        else:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = cpu
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def _int_or_none(text: str | None) -> int | None:
    value = _na(text)
    if value is None:
        return None
    match = re.match(r"^-?\d+", value)
    return int(match.group(0)) if match else None


# --------------------------------------------------------------------------------------------
# nvidia-smi -q -x


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return _na(found.text)


def _mib(text: str | None) -> int | None:
    """``81920 MiB`` -> 81920."""
    if text is None:
        return None
    match = re.match(r"^(\d+)\s*MiB$", text.strip())
    return int(match.group(1)) if match else None


def parse_nvidia_smi_xml(text: str) -> dict[str, Any]:
    """Parse ``nvidia-smi -q -x``.

    Returns ``{driver_version, cuda_version, attached_gpus, gpus: [...]}``; each GPU has
    pci_address (sysfs form), vendor_id, device_id, model, brand, architecture, uuid, serial,
    minor_number, index (position in nvidia-smi's order, the ``GPUn`` of ``topo -m``), mig_mode
    and mig_pending (``enabled``/``disabled``/None when the GPU has no MIG), mig_devices (count),
    memory_total_mib, persistence_mode, vbios_version.
    Raises ValueError when the text is not nvidia-smi XML.
    """
    start = text.find("<nvidia_smi_log")
    if start < 0:
        raise ValueError("not nvidia-smi XML: no <nvidia_smi_log> element")
    # The DOCTYPE names an external DTD that is not needed (and not fetched): parse from the root.
    try:
        root = ET.fromstring(text[start:])
    except ET.ParseError as exc:
        raise ValueError(f"not nvidia-smi XML: {exc}") from None
    driver_version = _text(root, "driver_version")
    cuda_version = _text(root, "cuda_version")
    gpus: list[dict[str, Any]] = []
    for index, gpu in enumerate(root.findall("gpu")):
        pci = gpu.find("pci")
        address = normalize_pci_address(_text(pci, "pci_bus_id") or gpu.get("id"))
        vendor_id = device_id = None
        combined = _text(pci, "pci_device_id")  # "233010DE": device 2330, vendor 10de
        if combined and re.match(r"^(0x)?[0-9A-Fa-f]{8}$", combined):
            combined = combined[-8:].lower()
            device_id, vendor_id = combined[:4], combined[4:]
            if device_id == "0000":  # some virtualised GPUs report 000000DE: no ids at all
                device_id = vendor_id = None
        mig_current = _text(gpu, "mig_mode/current_mig")
        mig_pending = _text(gpu, "mig_mode/pending_mig")
        mig_devices = gpu.find("mig_devices")
        gpus.append(
            {
                "index": index,
                "pci_address": address,
                "vendor_id": vendor_id,
                "device_id": device_id,
                "model": _text(gpu, "product_name"),
                "brand": _text(gpu, "product_brand"),
                "architecture": _text(gpu, "product_architecture"),
                "uuid": _text(gpu, "uuid"),
                "serial": _text(gpu, "serial"),
                "minor_number": _int_or_none(_text(gpu, "minor_number")),
                "mig_mode": mig_current.lower() if mig_current else None,
                "mig_pending": mig_pending.lower() if mig_pending else None,
                "mig_devices": len(mig_devices.findall("mig_device")) if mig_devices is not None else 0,
                "memory_total_mib": _mib(_text(gpu, "fb_memory_usage/total")),
                "persistence_mode": _text(gpu, "persistence_mode"),
                "vbios_version": _text(gpu, "vbios_version"),
                "driver_version": driver_version,
                "cuda_version": cuda_version,
            }
        )
    return {
        "driver_version": driver_version,
        "cuda_version": cuda_version,
        "attached_gpus": _int_or_none(_text(root, "attached_gpus")),
        "gpus": gpus,
    }


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m

LINK_TYPES = ("PIX", "PXB", "PHB", "NODE", "SYS")
# Lower is closer. NV# (NVLink) is closest of all; "X" is the device itself.
_LINK_RANK = {"X": 0, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}


def link_rank(link: str | None) -> int:
    """Sort key for link types, nearest first (NV# < PIX < PXB < PHB < NODE < SYS < unknown)."""
    if link is None:
        return 99
    if re.match(r"^NV\d+$", link):
        return 1
    return _LINK_RANK.get(link, 98)


def parse_nvidia_smi_topo(text: str) -> dict[str, Any]:
    """Parse ``nvidia-smi topo -m`` (or ``-mp``).

    Returns ``{devices, gpus, nics, nic_names, links, cpu_affinity, numa_affinity, gpu_numa_id}``:
    devices are the column labels in order (``GPU0``, ``NIC0`` or ``mlx5_0`` in older drivers);
    nic_names maps a NIC label to its RDMA device (from the "NIC Legend", identity when the label is
    already the device name); links[a][b] is the link type (``NV12``, ``PIX``, ``PXB``, ``PHB``,
    ``NODE``, ``SYS``); cpu_affinity[label] the CPU list string (``""`` when nvidia-smi printed none),
    numa_affinity[label] a list of NUMA node ids, gpu_numa_id[label] an int or None.
    ANSI escapes (nvidia-smi underlines the header on a TTY) and the legend are ignored. Cells are
    tab-separated as nvidia-smi prints them; a copy whose tabs became spaces is read too, but an
    empty CPU Affinity cell cannot be told apart there.
    """
    lines = [strip_ansi(line).rstrip("\r\n") for line in text.splitlines()]
    header_index = None
    for i, line in enumerate(lines):
        if re.search(r"(^|\s)GPU0(\s|$)", line) and not line.startswith("GPU0"):
            header_index = i
            break
    result: dict[str, Any] = {
        "devices": [],
        "gpus": [],
        "nics": [],
        "nic_names": {},
        "links": {},
        "cpu_affinity": {},
        "numa_affinity": {},
        "gpu_numa_id": {},
    }
    if header_index is None:
        return result
    header = lines[header_index]
    use_tabs = "\t" in header
    if use_tabs:
        columns = [c.strip() for c in header.split("\t")]
        if columns and columns[0] == "":
            columns = columns[1:]
    else:
        # a copy without tabs: the multi-word column names are rejoined (empty cells cannot be seen)
        joined = {
            "CPU_Affinity": "CPU Affinity",
            "NUMA_Affinity": "NUMA Affinity",
            "GPU_NUMA_ID": "GPU NUMA ID",
        }
        for token, name in joined.items():
            header = header.replace(name, token)
        columns = [joined.get(c, c) for c in header.split()]
    extras_at = next(
        (i for i, c in enumerate(columns) if c in ("CPU Affinity", "NUMA Affinity")), len(columns)
    )
    devices = columns[:extras_at]
    extras = columns[extras_at:]
    result["devices"] = devices
    result["gpus"] = [d for d in devices if re.match(r"^GPU\d+$", d)]
    result["nics"] = [d for d in devices if not re.match(r"^GPU\d+$", d)]
    for row in lines[header_index + 1 :]:
        if not row.strip():
            break
        if row.strip().startswith("Legend"):
            break
        fields = row.split("\t") if use_tabs else row.split()
        label = fields[0].strip()
        if label not in devices:
            continue
        cells = [c.strip() for c in fields[1 : 1 + len(devices)]]
        rest = [c.strip() for c in fields[1 + len(devices) :]]
        result["links"][label] = {
            other: cell
            for other, cell in zip(devices, cells, strict=False)
            if other != label and cell and cell != "X"
        }
        if "CPU Affinity" in extras:
            result["cpu_affinity"][label] = rest[0] if rest else ""
        if "NUMA Affinity" in extras:
            numa_text = rest[1] if len(rest) > 1 else ""
            numa_value = _na(numa_text)
            result["numa_affinity"][label] = parse_cpulist(numa_value) if numa_value else []
        if "GPU NUMA ID" in extras:
            tail = [c for c in rest[2:] if c]
            result["gpu_numa_id"][label] = _int_or_none(tail[-1]) if tail else None
    # NIC Legend: "  NIC0: mlx5_0"
    names = {}
    for line in lines:
        match = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if match:
            names[match.group(1)] = match.group(2)
    result["nic_names"] = {nic: names.get(nic, nic) for nic in result["nics"]}
    return result


def topo_gpu_nic_links(topo: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``{GPU label: {RDMA device name: link}}`` from a parsed ``topo -m``."""
    matrix: dict[str, dict[str, str]] = {}
    for gpu in topo["gpus"]:
        row = topo["links"].get(gpu, {})
        matrix[gpu] = {topo["nic_names"][nic]: row[nic] for nic in topo["nics"] if nic in row}
    return matrix


def topo_gpu_gpu_links(topo: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``{GPU label: {GPU label: link}}`` from a parsed ``topo -m``."""
    return {
        gpu: {other: link for other, link in topo["links"].get(gpu, {}).items() if other in topo["gpus"]}
        for gpu in topo["gpus"]
    }


# --------------------------------------------------------------------------------------------
# lspci

_LSPCI_HEAD_RE = re.compile(
    r"^(?P<slot>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<rest>.+)$"
)


def _vendor_from_name(description: str) -> tuple[str | None, str | None, str]:
    """Split ``NVIDIA Corporation Device 2330`` into (vendor_name, vendor_id, rest)."""
    for name, vendor_id in _VENDOR_NAMES.items():
        if description.startswith(name):
            return name, vendor_id, description[len(name) :].strip()
    return None, None, description


def parse_lspci(text: str) -> list[dict[str, Any]]:
    """Parse ``lspci``, ``lspci -nn``, ``lspci -D`` and ``lspci -vvv`` (any combination).

    One dict per function: pci_address (sysfs form; domain 0000 when lspci printed none), slot (as
    printed), class_name, class_id (``0302``; from ``[0302]`` with -nn, else from the class name),
    vendor_name, vendor_id, device_id (from ``[10de:2330]`` with -nn, else from ``Device 2330`` when
    pci.ids did not know the part), description, revision. From -v/-vvv detail lines also:
    subsystem, numa_node, driver, kernel_modules, link_speed, link_width, acs_enabled (bridges).
    """
    devices: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        head = _LSPCI_HEAD_RE.match(line)
        if head and not raw[0].isspace():
            current = _parse_lspci_head(head.group("slot"), head.group("rest"))
            devices.append(current)
            continue
        if current is None:
            continue
        detail = line.strip()
        key, sep, value = detail.partition(":")
        if not sep:
            continue
        value = value.strip()
        if key == "NUMA node":
            current["numa_node"] = _int_or_none(value)
        elif key == "Kernel driver in use":
            current["driver"] = value
        elif key == "Kernel modules":
            current["kernel_modules"] = [m.strip() for m in value.split(",") if m.strip()]
        elif key == "Subsystem":
            current["subsystem"] = value
        elif key == "LnkSta":
            speed = re.search(r"Speed ([0-9.]+GT/s)", value)
            width = re.search(r"Width x(\d+)", value)
            current["link_speed"] = speed.group(1) if speed else None
            current["link_width"] = int(width.group(1)) if width else None
        elif key == "ACSCtl":
            current["acs_enabled"] = "SrcValid+" in value
    return devices


def _parse_lspci_head(slot: str, rest: str) -> dict[str, Any]:
    class_part, _colon, description = rest.partition(": ")
    class_id_match = re.search(r"\s*\[([0-9a-fA-F]{4})\]$", class_part)
    class_name = class_part[: class_id_match.start()] if class_id_match else class_part
    class_id = class_id_match.group(1).lower() if class_id_match else _CLASS_NAMES.get(class_name.strip())
    description = re.sub(r"\s*\(prog-if [0-9a-fA-F]+(?: \[[^\]]*\])?\)", "", description)
    revision = None
    rev = re.search(r"\s*\(rev ([0-9a-fA-F]+)\)", description)
    if rev:
        revision = rev.group(1).lower()
        description = description[: rev.start()] + description[rev.end() :]
    description = description.strip()
    vendor_id = device_id = None
    ids = re.search(r"\s*\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]$", description)
    if ids:
        vendor_id, device_id = ids.group(1).lower(), ids.group(2).lower()
        description = description[: ids.start()].strip()
    vendor_name, named_vendor_id, device_name = _vendor_from_name(description)
    vendor_id = vendor_id or named_vendor_id
    if device_id is None:
        bare = re.match(r"^Device ([0-9a-fA-F]{4})$", device_name)
        if bare:
            device_id = bare.group(1).lower()
    return {
        "slot": slot,
        "pci_address": normalize_pci_address(slot),
        "class_name": class_name.strip(),
        "class_id": class_id,
        "vendor_name": vendor_name,
        "vendor_id": vendor_id,
        "device_id": device_id,
        "device_name": device_name or None,
        "description": description,
        "revision": revision,
    }


def pci_model_name(description: str | None, device_name: str | None = None) -> str | None:
    """A short model name from an lspci description: ``GA102GL [A10]`` -> ``A10``."""
    text = (device_name or description or "").strip()
    if not text or re.match(r"^Device(?: [0-9a-fA-F]{4})?$", text):
        return None  # pci.ids on that host did not know the part
    brackets = re.findall(r"\[([^\]]+)\]", text)
    if brackets:
        return str(brackets[-1])
    return text


def classify_pci_devices(devices: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Split PCI functions (from parse_lspci or read_pci_devices) into gpus, nvswitches and nics.

    gpus: vendor 10de with class 0300 (VGA) or 0302 (3D controller); nvswitches: vendor 10de with
    class 0680 (other bridge); nics: vendor 15b3 with a network class (02xx). Bridges, DMA and
    management functions of ConnectX/BlueField parts are not NICs.
    """
    gpus, nvswitches, nics = [], [], []
    for device in devices:
        vendor = device.get("vendor_id")
        class_id = device.get("class_id") or ""
        if vendor == NVIDIA_VENDOR_ID and class_id in GPU_CLASS_IDS:
            gpus.append(device)
        elif vendor == NVIDIA_VENDOR_ID and class_id == NVSWITCH_CLASS_ID:
            nvswitches.append(device)
        elif vendor == MELLANOX_VENDOR_ID and class_id.startswith("02"):
            nics.append(device)
    return {"gpus": gpus, "nvswitches": nvswitches, "nics": nics}


# --------------------------------------------------------------------------------------------
# ibv_devinfo, ibstat


def _state_name(value: str) -> str:
    """``PORT_ACTIVE (4)`` -> ``PORT_ACTIVE``; ``4: ACTIVE`` -> ``ACTIVE``."""
    value = value.strip()
    value = re.sub(r"\s*\(\d+\)$", "", value)
    value = re.sub(r"^\d+:\s*", "", value)
    return value


def parse_ibv_devinfo(text: str) -> list[dict[str, Any]]:
    """Parse ``ibv_devinfo`` / ``ibv_devinfo -v`` / ``-vv``: one dict per HCA.

    Keys: hca_id, transport, fw_ver, node_guid, sys_image_guid, vendor_id, vendor_part_id, hw_ver,
    board_id, phys_port_cnt and ports (port, state, max_mtu, active_mtu, sm_lid, port_lid,
    link_layer, and with -v active_width, active_speed, phys_state). Capability flag lists are skipped.
    """
    hcas: list[dict[str, Any]] = []
    hca: dict[str, Any] | None = None
    port: dict[str, Any] | None = None
    wanted = {
        "transport",
        "fw_ver",
        "node_guid",
        "sys_image_guid",
        "vendor_id",
        "vendor_part_id",
        "hw_ver",
        "board_id",
        "phys_port_cnt",
    }
    port_keys = {
        "state",
        "max_mtu",
        "active_mtu",
        "sm_lid",
        "port_lid",
        "port_lmc",
        "link_layer",
        "active_width",
        "active_speed",
        "phys_state",
    }
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            hca = {"hca_id": value, "ports": []}
            hcas.append(hca)
            port = None
        elif hca is None:
            continue
        elif key == "port" and value.isdigit():
            port = {"port": int(value)}
            hca["ports"].append(port)
        elif port is not None and key in port_keys:
            if key in ("state", "phys_state"):
                port[key] = _state_name(value)
            elif key in ("sm_lid", "port_lid") or key in ("max_mtu", "active_mtu"):
                port[key] = _int_or_none(value)
            else:
                port[key] = value
        elif port is None and key in wanted:
            hca[key] = int(value) if key in ("phys_port_cnt", "vendor_part_id") and value.isdigit() else value
    return hcas


def parse_ibstat(text: str) -> list[dict[str, Any]]:
    """Parse ``ibstat``: one dict per CA (ca, ca_type, number_of_ports, firmware_version,
    hardware_version, node_guid, system_image_guid, ports: port, state, physical_state, rate,
    base_lid, sm_lid, port_guid, link_layer). Trailing error lines (``ibpanic: ...``) are ignored."""
    cas: list[dict[str, Any]] = []
    ca: dict[str, Any] | None = None
    port: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        head = re.match(r"^CA '([^']+)'$", line)
        if head:
            ca = {"ca": head.group(1), "ports": []}
            cas.append(ca)
            port = None
            continue
        if ca is None or not raw[:1].isspace():
            continue
        port_head = re.match(r"^Port (\d+):$", line)
        if port_head:
            port = {"port": int(port_head.group(1))}
            ca["ports"].append(port)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        name = key.strip().lower().replace(" ", "_")
        value = value.strip()
        if name in ("rate", "base_lid", "sm_lid", "lmc", "number_of_ports"):
            parsed: Any = _int_or_none(value)
        else:
            parsed = value
        (port if port is not None else ca)[name] = parsed
    return cas


# --------------------------------------------------------------------------------------------
# numactl -H, lscpu


def parse_numactl_hardware(text: str) -> dict[str, Any]:
    """Parse ``numactl -H`` / ``numactl --hardware``.

    Returns ``{nodes: [{id, cpus, cpulist, size_mb, free_mb}], distances: {id: {id: distance}}}``.
    Memory-only nodes (no CPUs) have ``cpus == []``.
    """
    nodes: dict[int, dict[str, Any]] = {}
    distances: dict[int, dict[int, int]] = {}
    distance_columns: list[int] = []
    in_distances = False

    def node(node_id: int) -> dict[str, Any]:
        return nodes.setdefault(
            node_id, {"id": node_id, "cpus": [], "cpulist": "", "size_mb": None, "free_mb": None}
        )

    for raw in text.splitlines():
        line = raw.strip()
        match = re.match(r"^node (\d+) cpus:\s*(.*)$", line)
        if match:
            entry = node(int(match.group(1)))
            entry["cpus"] = parse_cpulist(match.group(2))
            entry["cpulist"] = format_cpulist(entry["cpus"])
            continue
        match = re.match(r"^node (\d+) (size|free):\s*(\d+)\s*MB$", line)
        if match:
            node(int(match.group(1)))[match.group(2) + "_mb"] = int(match.group(3))
            continue
        if line.startswith("node distances"):
            in_distances = True
            continue
        if in_distances:
            if line.startswith("node"):
                distance_columns = [int(x) for x in line.split()[1:]]
                continue
            match = re.match(r"^(\d+):\s*(.*)$", line)
            if match:
                values = [int(x) for x in match.group(2).split()]
                distances[int(match.group(1))] = dict(zip(distance_columns, values, strict=False))
    return {"nodes": [nodes[k] for k in sorted(nodes)], "distances": distances}


def parse_lscpu(text: str) -> dict[str, Any]:
    """Parse ``lscpu`` (the flat older format and the sectioned util-linux >= 2.38 format).

    Returns ``{fields: {key: value}, cpus, online_cpus, threads_per_core, cores_per_socket, sockets,
    numa_node_count, numa_nodes: {id: [cpus]}, model_name, vendor_id, architecture}``. Values that
    lscpu wrapped over several lines (Flags on a narrow TTY) are joined back.
    """
    fields: dict[str, str] = {}
    last_key = None
    value_col = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        if last_key is not None and value_col and indent >= value_col:
            # continuation of a wrapped value: the text was cut at the terminal width, so the
            # continuation is appended as is (a leading space in it was a space in the value)
            fields[last_key] += raw[value_col:]
            continue
        key, sep, value = raw.strip().partition(":")
        if not sep:
            continue
        key = key.strip()
        stripped_value = value.strip()
        fields[key] = stripped_value
        last_key = key
        value_col = len(raw) - len(value.lstrip()) if stripped_value else 0
    numa_nodes = {}
    for key, value in fields.items():
        match = re.match(r"^NUMA node(\d+) CPU\(s\)$", key)
        if match:
            numa_nodes[int(match.group(1))] = parse_cpulist(value)
    return {
        "fields": fields,
        "cpus": _int_or_none(fields.get("CPU(s)")),
        "online_cpus": parse_cpulist(fields.get("On-line CPU(s) list")),
        "threads_per_core": _int_or_none(fields.get("Thread(s) per core")),
        "cores_per_socket": _int_or_none(fields.get("Core(s) per socket")),
        "sockets": _int_or_none(fields.get("Socket(s)")),
        "numa_node_count": _int_or_none(fields.get("NUMA node(s)")),
        "numa_nodes": dict(sorted(numa_nodes.items())),
        "model_name": fields.get("Model name"),
        "vendor_id": fields.get("Vendor ID"),
        "architecture": fields.get("Architecture"),
        "flags": fields.get("Flags", "").split(),
    }


def lscpu_core_groups(lscpu: dict[str, Any]) -> dict[int, list[int]] | None:
    """Hyperthread siblings inferred from lscpu's summary, or None when they cannot be inferred.

    The flat lscpu output does not list siblings. Linux on x86 numbers the first thread of every
    core before the second ones, so with T threads per core and N CPUs the siblings of CPU c are
    c, c + N/T, ... The inference is accepted only when every NUMA node's CPU list is closed under
    it (each sibling group lies in one node); otherwise None. sysfs thread_siblings_list (read by
    read_numa_nodes) is authoritative and is what gpu_facts reports.
    """
    threads = lscpu.get("threads_per_core")
    total = lscpu.get("cpus")
    if not threads or not total or total % threads:
        return None
    if threads == 1:
        return {cpu: [cpu] for cpu in range(total)}
    stride = total // threads
    groups = {}
    for cpu in range(stride):
        group = [cpu + k * stride for k in range(threads)]
        for member in group:
            groups[member] = group
    for cpus in lscpu.get("numa_nodes", {}).values():
        members = set(cpus)
        for cpu in cpus:
            if not set(groups.get(cpu, [])) <= members:
                return None
    return groups


# --------------------------------------------------------------------------------------------
# GPU generation (open vs proprietary kernel modules)

# NVIDIA's open GPU kernel modules support Turing and newer; Volta, Pascal and older need the
# proprietary modules. All pre-Turing NVIDIA GPUs have PCI device ids below 0x1e00 (Volta GV100
# ends at 0x1dff, Pascal GP108 at 0x1d5x); Turing starts at 0x1e02 (TU102), and every later
# architecture (Ampere 0x20xx-0x25xx, Hopper 0x23xx, Ada 0x26xx-0x28xx, Blackwell 0x29xx-0x2bxx)
# is above. Rule: architecture from nvidia-smi when it reports one, else the device id, else the
# product name; anything else is "unknown" (the driver role then asks the operator to choose).
_PRE_TURING_ARCHES = {"kepler", "maxwell", "pascal", "volta", "fermi", "tesla"}
_TURING_PLUS_ARCHES = {"turing", "ampere", "hopper", "ada", "ada lovelace", "blackwell", "rubin"}
TURING_FIRST_DEVICE_ID = 0x1E00
_PRE_TURING_NAME_RE = re.compile(
    r"\b(Tesla [KMPV]\d+|[KMP]\d{2,4}\b|V100|GV100|GP100|TITAN (V|X|Xp|Black|Z)\b|GTX (10|9|7|6)\d{2}|"
    r"Quadro [KMP]\d+|Quadro GV100|Quadro GP100|GRID [KMP]\d)",
    re.IGNORECASE,
)
_TURING_PLUS_NAME_RE = re.compile(
    r"(\bRTX\b|\bGTX 16\d{2}\b|\bT4\b|\bT4G\b|\bT\d{3,4}\b|\b[ABHLG]H?\d{1,3}[A-Z]?\b|\bGB\d{3}\b|\bB\d{3}\b)",
    re.IGNORECASE,
)


def gpu_generation(
    device_id: str | None = None, architecture: str | None = None, name: str | None = None
) -> str:
    """``turing_or_newer``, ``pre_turing`` (Volta, Pascal and older) or ``unknown``. See the rule above."""
    arch = (architecture or "").strip().lower()
    if arch in _TURING_PLUS_ARCHES:
        return "turing_or_newer"
    if arch in _PRE_TURING_ARCHES:
        return "pre_turing"
    if device_id:
        try:
            value = int(device_id, 16)
        except ValueError:
            value = 0
        if value:
            return "turing_or_newer" if value >= TURING_FIRST_DEVICE_ID else "pre_turing"
    if name:
        if _PRE_TURING_NAME_RE.search(name):
            return "pre_turing"
        if _TURING_PLUS_NAME_RE.search(name):
            return "turing_or_newer"
    return "unknown"


def kernel_module_for(generation: str) -> str | None:
    """``open`` for Turing and newer, ``proprietary`` before Turing, None when unknown."""
    return {"turing_or_newer": "open", "pre_turing": "proprietary"}.get(generation)


# --------------------------------------------------------------------------------------------
# small text formats: /proc/cmdline, mokutil, /etc/dgx-release, /proc/driver/nvidia/version


def parse_kernel_cmdline(text: str) -> dict[str, str | None]:
    """``a=b c`` -> ``{"a": "b", "c": None}`` (the last occurrence of a key wins, as in the kernel)."""
    args: dict[str, str | None] = {}
    for token in text.split():
        if token == "--":
            break
        key, sep, value = token.partition("=")
        args[key] = value if sep else None
    return args


def iommu_from_cmdline(args: dict[str, str | None]) -> dict[str, Any]:
    """What the kernel command line says about the IOMMU: requested (on/off/None) and passthrough."""
    requested = None
    for key in ("intel_iommu", "amd_iommu"):
        value = (args.get(key) or "").lower()
        if "on" in value.split(","):
            requested = True
        if "off" in value.split(","):
            requested = False
    passthrough = None
    iommu = (args.get("iommu") or "").lower()
    if iommu == "pt":
        passthrough = True
    elif iommu == "nopt":
        passthrough = False
    elif iommu == "off":
        requested = False
    if args.get("iommu.passthrough") in ("1", "y", "on"):
        passthrough = True
    elif args.get("iommu.passthrough") in ("0", "n", "off"):
        passthrough = False
    related = sorted(k if v is None else f"{k}={v}" for k, v in args.items() if "iommu" in k)
    return {"requested": requested, "passthrough": passthrough, "args": related}


def parse_mokutil_sb_state(text: str) -> bool | None:
    """``mokutil --sb-state``: ``SecureBoot enabled`` -> True, ``SecureBoot disabled`` -> False,
    anything else (``EFI variables are not supported on this system``) -> None."""
    lowered = text.lower()
    if "secureboot enabled" in lowered:
        return True
    if "secureboot disabled" in lowered:
        return False
    return None


def parse_dgx_release(text: str) -> dict[str, str]:
    """``/etc/dgx-release`` (``KEY="value"`` lines) -> dict."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and re.match(r"^[A-Z_][A-Z0-9_]*$", key):
            fields[key] = value.strip().strip('"')
    return fields


def parse_nvidia_proc_version(text: str) -> dict[str, str | None]:
    """``/proc/driver/nvidia/version`` -> version and flavor (``open`` for the open kernel modules)."""
    first = text.splitlines()[0] if text.strip() else ""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", first)
    flavor = None
    if first:
        flavor = "open" if "Open Kernel Module" in first else "proprietary"
    return {"version": match.group(1) if match else None, "flavor": flavor}


# --------------------------------------------------------------------------------------------
# sysfs readers (root = the host's "/", a fake tree in tests)


def _path(root: str, *parts: str) -> str:
    return os.path.join(root, *[p.lstrip("/") for p in parts])


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _hex_id(text: str | None, width: int = 4) -> str | None:
    if not text:
        return None
    value = text.strip().lower()
    if value.startswith("0x"):
        value = value[2:]
    return value[:width] if value else None


def pci_chain(root: str, device_path: str) -> list[str]:
    """The PCI ancestry of a sysfs device, root first: ``["pci0000:00", "0000:00:01.0", ..., device]``.

    ``device_path`` is any sysfs path (``/sys/bus/pci/devices/X``, ``/sys/class/net/eth0/device``);
    symlinks are resolved. Non-PCI components (``virtio2``, ``net``) are dropped, so the last entry is
    the nearest PCI function. Returns [] when the device is not on PCI (virtual, soft-RoCE).
    """
    real = os.path.realpath(device_path)
    devices_root = os.path.realpath(_path(root, "sys/devices"))
    if not real.startswith(devices_root + os.sep):
        return []
    parts = real[len(devices_root) + 1 :].split(os.sep)
    chain = []
    for part in parts:
        if re.match(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$", part) or is_pci_address(part):
            chain.append(part.lower())
    if not chain or not is_pci_address(chain[-1]):
        return []
    return chain


def nearest_pci_address(root: str, device_path: str) -> str | None:
    chain = pci_chain(root, device_path)
    return chain[-1] if chain else None


def read_pci_devices(root: str = "/") -> list[dict[str, Any]]:
    """Every PCI function under /sys/bus/pci/devices: pci_address, vendor_id, device_id, class_id
    (``0302``), class_code (``030200``), numa_node (None for -1), driver, is_vf, chain (pci_chain)."""
    base = _path(root, "sys/bus/pci/devices")
    devices = []
    for name in _listdir(base):
        address = normalize_pci_address(name)
        if address is None:
            continue
        entry = os.path.join(base, name)
        class_code = _hex_id(_read(os.path.join(entry, "class")), 6)
        numa = _int_or_none(_read(os.path.join(entry, "numa_node")))
        driver_link = os.path.join(entry, "driver")
        driver = os.path.basename(os.path.realpath(driver_link)) if os.path.lexists(driver_link) else None
        devices.append(
            {
                "pci_address": address,
                "vendor_id": _hex_id(_read(os.path.join(entry, "vendor"))),
                "device_id": _hex_id(_read(os.path.join(entry, "device"))),
                "class_code": class_code,
                "class_id": class_code[:4] if class_code else None,
                "numa_node": numa if numa is not None and numa >= 0 else None,
                "driver": driver,
                "is_vf": os.path.lexists(os.path.join(entry, "physfn")),
                "chain": pci_chain(root, entry),
            }
        )
    return devices


def read_infiniband(root: str = "/") -> list[dict[str, Any]]:
    """RDMA devices under /sys/class/infiniband: name, pci_address (None for soft-RoCE), node_guid,
    fw_ver, parent (rxe), netdevs, ports [{port, state, link_layer, rate}]."""
    base = _path(root, "sys/class/infiniband")
    devices = []
    for name in _listdir(base):
        entry = os.path.join(base, name)
        device_link = os.path.join(entry, "device")
        pci_address = nearest_pci_address(root, device_link) if os.path.lexists(device_link) else None
        ports = []
        for port in _listdir(os.path.join(entry, "ports")):
            if not port.isdigit():
                continue
            port_dir = os.path.join(entry, "ports", port)
            ports.append(
                {
                    "port": int(port),
                    "state": _state_name(_read(os.path.join(port_dir, "state")) or "") or None,
                    "phys_state": _state_name(_read(os.path.join(port_dir, "phys_state")) or "") or None,
                    "link_layer": (_read(os.path.join(port_dir, "link_layer")) or "").strip() or None,
                    "rate": (_read(os.path.join(port_dir, "rate")) or "").strip() or None,
                }
            )
        ports.sort(key=lambda p: int(p["port"] or 0))
        netdevs = _listdir(os.path.join(device_link, "net")) if pci_address else []
        parent = (_read(os.path.join(entry, "parent")) or "").strip() or None
        if parent and not netdevs:
            netdevs = [parent]
        devices.append(
            {
                "name": name,
                "pci_address": pci_address,
                "node_guid": (_read(os.path.join(entry, "node_guid")) or "").strip() or None,
                "fw_ver": (_read(os.path.join(entry, "fw_ver")) or "").strip() or None,
                "parent": parent,
                "netdevs": netdevs,
                "ports": ports,
            }
        )
    return devices


def read_netdevs(root: str = "/") -> dict[str, list[str]]:
    """``{pci_address: [netdev, ...]}`` from /sys/class/net/*/device (virtual interfaces skipped)."""
    base = _path(root, "sys/class/net")
    result: dict[str, list[str]] = {}
    for name in _listdir(base):
        device_link = os.path.join(base, name, "device")
        if not os.path.lexists(device_link):
            continue
        address = nearest_pci_address(root, device_link)
        if address:
            result.setdefault(address, []).append(name)
    return result


def _meminfo_total_kb(text: str | None) -> int | None:
    if not text:
        return None
    match = re.search(r"MemTotal:\s+(\d+)\s*kB", text)
    return int(match.group(1)) if match else None


def read_cpu_core_groups(root: str, cpus: list[int]) -> list[list[int]] | None:
    """Physical cores of ``cpus`` as sibling groups (from topology/thread_siblings_list), sorted by
    their first CPU; None when sysfs does not say."""
    groups: dict[tuple[int, ...], None] = {}
    for cpu in cpus:
        text = _read(_path(root, f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"))
        if text is None:
            return None
        siblings = tuple(c for c in parse_cpulist(text) if c in cpus) or (cpu,)
        groups[siblings] = None
    return sorted((list(g) for g in groups), key=lambda g: g[0])


def read_numa_nodes(root: str = "/") -> list[dict[str, Any]]:
    """NUMA nodes from /sys/devices/system/node/node*: id, cpus, cpulist, memory_mb, distances,
    cores (sibling groups, or None when unknown).

    A kernel without NUMA support has no node directories: then one node 0 with the online CPUs and
    /proc/meminfo's total is reported, which is what kubelet sees too.
    """
    base = _path(root, "sys/devices/system/node")
    nodes = []
    for name in _listdir(base):
        match = re.match(r"^node(\d+)$", name)
        if not match:
            continue
        entry = os.path.join(base, name)
        cpus = parse_cpulist(_read(os.path.join(entry, "cpulist")))
        total_kb = _meminfo_total_kb(_read(os.path.join(entry, "meminfo")))
        distances = [int(x) for x in (_read(os.path.join(entry, "distance")) or "").split()]
        nodes.append(
            {
                "id": int(match.group(1)),
                "cpus": cpus,
                "cpulist": format_cpulist(cpus),
                "memory_mb": total_kb // 1024 if total_kb is not None else None,
                "distances": distances,
                "cores": read_cpu_core_groups(root, cpus) if cpus else [],
            }
        )
    if nodes:
        return sorted(nodes, key=lambda n: n["id"])
    cpus = parse_cpulist(_read(_path(root, "sys/devices/system/cpu/online")))
    total_kb = _meminfo_total_kb(_read(_path(root, "proc/meminfo")))
    if not cpus and total_kb is None:
        return []
    return [
        {
            "id": 0,
            "cpus": cpus,
            "cpulist": format_cpulist(cpus),
            "memory_mb": total_kb // 1024 if total_kb is not None else None,
            "distances": [10],
            "cores": read_cpu_core_groups(root, cpus) if cpus else [],
        }
    ]


def read_iommu(root: str = "/") -> dict[str, Any]:
    """IOMMU state: enabled (an IOMMU is registered in /sys/class/iommu or groups exist), passthrough
    (the default domain type of the groups — ``identity`` — else the command line), groups, args."""
    cmdline = parse_kernel_cmdline(_read(_path(root, "proc/cmdline")) or "")
    from_cmdline = iommu_from_cmdline(cmdline)
    units = _listdir(_path(root, "sys/class/iommu"))
    groups = [g for g in _listdir(_path(root, "sys/kernel/iommu_groups")) if g.isdigit()]
    enabled = bool(units) or bool(groups)
    passthrough = None
    types = set()
    for group in groups:
        value = (_read(_path(root, "sys/kernel/iommu_groups", group, "type")) or "").strip()
        if value:
            types.add(value)
    if types:
        passthrough = types == {"identity"}
    elif from_cmdline["passthrough"] is not None:
        passthrough = from_cmdline["passthrough"]
    if not enabled:
        passthrough = False
    return {
        "enabled": enabled,
        "passthrough": passthrough,
        "units": units,
        "groups": len(groups),
        "cmdline_args": from_cmdline["args"],
        "cmdline_requested": from_cmdline["requested"],
    }


EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"


def efi_booted(root: str = "/") -> bool:
    return os.path.isdir(_path(root, "sys/firmware/efi"))


def read_secure_boot(root: str = "/") -> bool | None:
    """Secure Boot from the EFI variable: True/False; False when the host did not boot with EFI
    (Secure Boot needs EFI); None when EFI is present but the variable cannot be read."""
    if not efi_booted(root):
        return False
    data = _read_bytes(_path(root, "sys/firmware/efi/efivars", "SecureBoot-" + EFI_GLOBAL_GUID))
    if data is None:
        # the legacy sysfs interface: a single value byte after no attribute header
        data = _read_bytes(_path(root, "sys/firmware/efi/vars", "SecureBoot-" + EFI_GLOBAL_GUID, "data"))
        if data is None or len(data) < 1:
            return None
        return data[0] == 1
    if len(data) < 5:  # 4 bytes of attributes, then the value
        return None
    return data[4] == 1


def read_dgx_release(root: str = "/") -> dict[str, Any]:
    text = _read(_path(root, "etc/dgx-release"))
    if text is None:
        return {"dgx_os": False, "release": None, "fields": {}}
    return {"dgx_os": True, "release": text.strip(), "fields": parse_dgx_release(text)}


def read_nvidia_driver(root: str = "/") -> dict[str, Any]:
    """Kernel-side driver state: loaded, version, flavor (open/proprietary), nouveau_loaded,
    nvswitch_devices (count under /proc/driver/nvidia-nvswitch/devices)."""
    proc = _read(_path(root, "proc/driver/nvidia/version"))
    parsed = parse_nvidia_proc_version(proc) if proc else {"version": None, "flavor": None}
    module_dir = _path(root, "sys/module/nvidia")
    loaded = proc is not None or os.path.isdir(module_dir)
    version = parsed["version"] or ((_read(os.path.join(module_dir, "version")) or "").strip() or None)
    return {
        "loaded": loaded,
        "version": version if loaded else None,
        "flavor": parsed["flavor"],
        "nouveau_loaded": os.path.isdir(_path(root, "sys/module/nouveau")),
        "nvswitch_devices": len(_listdir(_path(root, "proc/driver/nvidia-nvswitch/devices"))),
    }


# --------------------------------------------------------------------------------------------
# GPU <-> NIC affinity from the PCI topology


def pci_link_type(
    chain_a: list[str], chain_b: list[str], numa_a: int | None = None, numa_b: int | None = None
) -> str:
    """The nvidia-smi link type between two PCI functions, from their sysfs ancestry (pci_chain).

    - different host bridges (``pciDDDD:BB`` roots): NODE when both sit on the same NUMA node,
      SYS otherwise (or when a NUMA node is unknown);
    - same host bridge, different root ports (no common PCI bridge): PHB;
    - a common bridge: the bridges below it on both sides are counted; at most one hop each side
      (both under one PCIe switch, or functions of one device) is PIX, more is PXB.
    """
    if not chain_a or not chain_b:
        return "SYS"
    if chain_a[0] != chain_b[0]:
        if numa_a is not None and numa_a == numa_b:
            return "NODE"
        return "SYS"
    bridges_a = chain_a[1:-1]
    bridges_b = chain_b[1:-1]
    common = 0
    for x, y in zip(bridges_a, bridges_b, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        # functions of one device directly on the root bus share no bridge but are one device
        if chain_a[-1].rsplit(".", 1)[0] == chain_b[-1].rsplit(".", 1)[0]:
            return "PIX"
        return "PHB"
    below_a = len(bridges_a) - common
    below_b = len(bridges_b) - common
    return "PIX" if below_a <= 1 and below_b <= 1 else "PXB"
