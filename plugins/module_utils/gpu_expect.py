# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Expected performance of a GPU host, from what gpu_facts (or captured command outputs) say.

Plain functions, standard library only: the gpu_acceptance role calls them through the
``gpubring.core.gpu_expect*`` filters, and the unit tests call them directly on the captured outputs
in tests/fixtures/hw. Nothing here runs a command.

Units: network rates in Gb/s (bits, as ibstat and ib_write_bw --report_gbits print them); NVLink,
PCIe and NCCL bandwidths in GB/s (bytes, as nvidia-smi nvlink -s and nccl-tests print them), one
direction.

Every threshold is ``fraction x theoretical figure``. The fractions below are the defaults; every
function that applies one takes it as a parameter, and the role passes its inputs
(``gpu_acceptance_*_fraction``) through.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from typing import Any

from ansible_collections.gpubring.core.plugins.module_utils.gpu_parsers import (
    link_rank,
    normalize_pci_address,
)

# --------------------------------------------------------------------------------------------
# documented fractions (defaults of the role inputs of the same name)

# ib_write_bw (perftest, large messages, one QP, loopback or back-to-back) reaches 90-97 % of the
# signalling rate on a healthy ConnectX-6/7 port (64b/66b encoding and headers cost ~3-6 %). 0.8
# leaves room for a loopback run (both directions through one HCA and one PCIe slot) while still
# failing a port that trained at a lower speed or width, or a NIC in a degraded PCIe slot.
IB_WRITE_BW_FRACTION = 0.8

# nccl-tests all_reduce_perf busbw on a healthy 8-GPU NVSwitch node reaches ~80-90 % of the per-GPU
# NVLink bandwidth (H100: ~360-400 of 450 GB/s without NVLS), and multi-node runs ~85-95 % of the
# per-GPU NIC share. 0.7 tolerates protocol and message-size effects but fails a node with a dead
# NVLink, a missing rail or GPUDirect RDMA off (traffic through host memory halves busbw or worse).
NCCL_BUSBW_FRACTION = 0.7

# nvidia-smi nvlink -s prints each link's speed; H100 links report 26.562 GB/s against 25 GB/s of
# data rate. A link reporting less than 0.9 x the expected per-link speed trained wrong.
NVLINK_SPEED_FRACTION = 0.9

# --------------------------------------------------------------------------------------------
# link-rate tables

# InfiniBand per-lane data rate in Gb/s by speed name, as ibstat/sysfs round them (4X EDR = 100).
IB_LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}

# PCIe transfer rate per lane (GT/s) and line-encoding efficiency by generation.
PCIE_GTS: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_ENCODING: dict[int, float] = {1: 0.8, 2: 0.8, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}

# NVLink data rate per link and direction (GB/s) by GPU architecture: NVLink 2 (Volta), 3 (Ampere),
# 4 (Hopper) carry 25 GB/s per link and direction; NVLink 5 (Blackwell) 50 GB/s.
NVLINK_LINK_GBS: dict[str, float] = {"volta": 25.0, "ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}
# The most NVLinks one GPU has (Hopper, Blackwell: 18). A topo row whose NV# values add up to more
# than this runs through NVSwitches: each peer shows the GPU's whole link count.
MAX_NVLINKS_PER_GPU = 18

# Product names -> architecture, for hosts where nvidia-smi did not report one (older drivers).
_ARCH_BY_NAME = (
    (re.compile(r"\b(V100|TITAN V|GV100)\b", re.I), "volta"),
    (re.compile(r"\b(A100|A800|A30|A40|A10G?|A16|A2|RTX A\d+|RTX 30\d\d)\b", re.I), "ampere"),
    (re.compile(r"\b(H100|H200|H800|H20|GH200)\b", re.I), "hopper"),
    (re.compile(r"\b(B100|B200|B300|GB200|GB300|RTX PRO 6000 Blackwell)\b", re.I), "blackwell"),
)

_NUMBER_RE = re.compile(r"(\d+(?:\.\d+)?)")


# --------------------------------------------------------------------------------------------
# NIC rates


def ib_rate_gbps(rate: str | int | float | None) -> float | None:
    """A port rate in Gb/s from ibstat (``400``), sysfs/ibstatus (``400 Gb/sec (4X NDR)``) or a
    number; None when absent or zero (a port that is down reports no rate)."""
    if rate is None or isinstance(rate, bool):
        return None
    if isinstance(rate, (int, float)):
        return float(rate) if rate > 0 else None
    match = _NUMBER_RE.search(str(rate))
    if not match:
        return None
    value = float(match.group(1))
    return value if value > 0 else None


def ib_rate_from_speed_width(active_speed: str | None, active_width: str | None) -> float | None:
    """The port rate in Gb/s from ``ibv_devinfo -v``: active_speed (``50.0 Gbps (64)``, or a speed
    name such as ``HDR``) x active_width (``4X (2)``). None when either is missing or invalid
    (``invalid speed (0)`` on a port that is down)."""
    if not active_speed or not active_width:
        return None
    width = re.match(r"^\s*(\d+)X", active_width, re.I)
    if not width:
        return None
    lanes = int(width.group(1))
    speed = active_speed.strip()
    per_lane: float | None = None
    named = re.match(r"^([A-Z]+\d*)\b", speed)
    if named and named.group(1).upper() in IB_LANE_GBPS:
        per_lane = IB_LANE_GBPS[named.group(1).upper()]
    else:
        number = re.match(r"^(\d+(?:\.\d+)?)\s*Gbps", speed, re.I)
        if number:
            per_lane = float(number.group(1))
    if not per_lane:
        return None
    return round(per_lane * lanes, 3)


def netdev_speed_gbps(speed_mbps: int | str | None) -> float | None:
    """A RoCE port's rate from the netdev speed (``/sys/class/net/X/speed``, Mb/s; -1 when down)."""
    if speed_mbps is None or isinstance(speed_mbps, bool):
        return None
    try:
        value = int(str(speed_mbps).strip())
    except ValueError:
        return None
    return value / 1000 if value > 0 else None


def _active(state: str | None) -> bool:
    return bool(state) and "ACTIVE" in str(state).upper()


def ports_from_ibstat(cas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised ports (device, port, link_layer, state, rate_gbps) from parse_ibstat."""
    return [
        {
            "device": ca["ca"],
            "port": port["port"],
            "link_layer": port.get("link_layer"),
            "state": str(port.get("state") or "").upper() or None,
            "rate_gbps": ib_rate_gbps(port.get("rate")) if _active(port.get("state")) else None,
        }
        for ca in cas
        for port in ca.get("ports", [])
    ]


def ports_from_ibv_devinfo(hcas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised ports from parse_ibv_devinfo; rate_gbps is known only with ``-v`` (active_speed)."""
    ports = []
    for hca in hcas:
        for port in hca.get("ports", []):
            state = str(port.get("state") or "").replace("PORT_", "") or None
            rate = ib_rate_from_speed_width(port.get("active_speed"), port.get("active_width"))
            ports.append(
                {
                    "device": hca["hca_id"],
                    "port": port["port"],
                    "link_layer": port.get("link_layer"),
                    "state": state,
                    "rate_gbps": rate if _active(state) else None,
                }
            )
    return ports


def parse_ibstatus(text: str) -> list[dict[str, Any]]:
    """Normalised ports from ``ibstatus`` (the same fields as /sys/class/infiniband/*/ports/*)."""
    ports: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        head = re.match(r"^Infiniband device '([^']+)' port (\d+) status:", line.strip())
        if head:
            current = {
                "device": head.group(1),
                "port": int(head.group(2)),
                "link_layer": None,
                "state": None,
                "rate_gbps": None,
                "_rate": None,
            }
            ports.append(current)
            continue
        if current is None:
            continue
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "state":
            current["state"] = re.sub(r"^\d+:\s*", "", value).upper()
        elif key == "rate":
            current["_rate"] = value
        elif key == "link_layer":
            current["link_layer"] = value
    for port in ports:
        rate = port.pop("_rate")
        port["rate_gbps"] = ib_rate_gbps(rate) if _active(port["state"]) else None
    return ports


def ports_from_facts(
    facts: dict[str, Any], netdev_speeds: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Normalised ports from gpubring_gpu_facts: rdma_devices[].ports (sysfs rate); for an Ethernet
    (RoCE) port without a rate, the netdev speed in Mb/s from ``netdev_speeds`` ({netdev: speed})."""
    speeds = netdev_speeds or {}
    ports = []
    for device in facts.get("rdma_devices") or []:
        netdevs = device.get("netdevs") or []
        for port in device.get("ports") or []:
            state = str(port.get("state") or "").upper() or None
            rate = ib_rate_gbps(port.get("rate"))
            if rate is None and port.get("link_layer") == "Ethernet":
                rate = next((netdev_speed_gbps(speeds[n]) for n in netdevs if n in speeds), None)
            ports.append(
                {
                    "device": device["name"],
                    "port": port.get("port"),
                    "link_layer": port.get("link_layer"),
                    "state": state,
                    "rate_gbps": rate if _active(state) else None,
                    "netdevs": netdevs,
                    "pci_address": device.get("pci_address"),
                }
            )
    return ports


def nic_expectations(
    ports: list[dict[str, Any]],
    *,
    ib_write_bw_fraction: float = IB_WRITE_BW_FRACTION,
    expected_rate_gbps: float | None = None,
) -> list[dict[str, Any]]:
    """Per-port expectation: rate_gbps (what the link trained to), expected_rate_gbps (the operator's
    figure when given, else the trained rate), ib_write_bw_min_gbps = fraction x expected rate,
    active, and reason (why no figure: port not active, rate unknown)."""
    result = []
    for port in ports:
        active = _active(port.get("state"))
        rate = port.get("rate_gbps")
        expected = float(expected_rate_gbps) if expected_rate_gbps else rate
        reason = None
        if not active:
            reason = "port {} of {} is {}".format(
                port.get("port"), port.get("device"), port.get("state") or "not active"
            )
        elif expected is None:
            reason = f"{port.get('device')} reports no link rate (ibv_devinfo without -v, or no sysfs rate)"
        result.append(
            dict(
                port,
                active=active,
                expected_rate_gbps=expected
                if active
                else (float(expected_rate_gbps) if expected_rate_gbps else None),
                ib_write_bw_min_gbps=round(expected * ib_write_bw_fraction, 3)
                if active and expected
                else None,
                rate_ok=(rate is not None and expected is not None and rate >= expected) if active else False,
                reason=reason,
            )
        )
    return result


# --------------------------------------------------------------------------------------------
# PCIe


def pcie_bandwidth_gbs(gen: int | None, width: int | None) -> float | None:
    """One direction's PCIe data rate in GB/s: GT/s x lanes x encoding / 8 (Gen4 x16 = 31.508)."""
    if not gen or not width or gen not in PCIE_GTS:
        return None
    return round(PCIE_GTS[gen] * width * PCIE_ENCODING[gen] / 8, 3)


def pcie_gen_from_speed(speed: str | float | None) -> int | None:
    """``32GT/s`` / ``32.0 GT/s PCIe`` (sysfs) / 32 -> 5."""
    if speed is None:
        return None
    match = _NUMBER_RE.search(str(speed))
    if not match:
        return None
    value = float(match.group(1))
    return next((gen for gen, gts in PCIE_GTS.items() if abs(gts - value) < 0.01), None)


def _int(text: Any) -> int | None:
    match = re.match(r"^\s*x?(\d+)", str(text)) if text is not None else None
    return int(match.group(1)) if match else None


def pcie_expectation(
    address: str | None,
    *,
    max_gen: int | None,
    max_width: int | None,
    current_gen: int | None,
    current_width: int | None,
    host_max_gen: int | None = None,
    check_speed: bool = True,
) -> dict[str, Any]:
    """Expected PCIe link of one device: the device's maximum generation (capped by the host's when
    known) and width; ok when the current width equals it and, with check_speed, the current
    generation too. GPUs lower their PCIe speed when idle, so the role checks GPU speed only on request."""
    expected_gen = min(g for g in (max_gen, host_max_gen) if g) if (max_gen or host_max_gen) else None
    width_ok = current_width is not None and max_width is not None and current_width >= max_width
    gen_ok = current_gen is not None and expected_gen is not None and current_gen >= expected_gen
    return {
        "pci_address": address,
        "expected_gen": expected_gen,
        "expected_gts": PCIE_GTS.get(expected_gen or 0),
        "expected_width": max_width,
        "expected_gbs": pcie_bandwidth_gbs(expected_gen, max_width),
        "current_gen": current_gen,
        "current_width": current_width,
        "current_gbs": pcie_bandwidth_gbs(current_gen, current_width),
        "ok": width_ok and (gen_ok or not check_speed),
    }


def pcie_links_from_nvidia_smi_xml(text: str) -> list[dict[str, Any]]:
    """PCIe link facts per GPU from ``nvidia-smi -q -x`` (pci_gpu_link_info), as pcie_expectation."""
    root = ET.fromstring(text[text.find("<nvidia_smi_log") :])
    links = []
    for gpu in root.findall("gpu"):
        info = gpu.find("pci/pci_gpu_link_info")

        def get(path: str, node: ET.Element | None = info) -> int | None:
            found = node.find(path) if node is not None else None
            return _int(found.text) if found is not None else None

        links.append(
            pcie_expectation(
                normalize_pci_address(gpu.findtext("pci/pci_bus_id") or gpu.get("id")),
                max_gen=get("pcie_gen/max_device_link_gen") or get("pcie_gen/max_link_gen"),
                max_width=get("link_widths/max_link_width"),
                current_gen=get("pcie_gen/current_link_gen"),
                current_width=get("link_widths/current_link_width"),
                host_max_gen=get("pcie_gen/max_host_link_gen"),
                check_speed=False,
            )
        )
    return links


def pcie_links_from_lspci_vvv(
    text: str, vendors: tuple[str, ...] = ("NVIDIA", "Mellanox")
) -> list[dict[str, Any]]:
    """PCIe link facts from ``lspci -vvv`` (LnkCap = expected, LnkSta = current) for the functions
    of the given vendors that have a PCIe capability."""
    links = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        head = re.match(r"^((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s+([^:]+):\s+(.*)$", line)
        if head:
            current = None
            if any(v in head.group(3) for v in vendors):
                current = {"address": normalize_pci_address(head.group(1)), "class": head.group(2)}
                links.append(current)
            continue
        if current is None:
            continue
        cap = re.search(r"LnkCap:.*?Speed ([0-9.]+GT/s).*?Width x(\d+)", line)
        sta = re.search(r"LnkSta:.*?Speed ([0-9.]+GT/s).*?Width x(\d+)", line)
        if cap:
            current["max_gen"], current["max_width"] = pcie_gen_from_speed(cap.group(1)), int(cap.group(2))
        if sta:
            current["current_gen"], current["current_width"] = (
                pcie_gen_from_speed(sta.group(1)),
                int(sta.group(2)),
            )
    return [
        dict(
            pcie_expectation(
                link["address"],
                max_gen=link.get("max_gen"),
                max_width=link.get("max_width"),
                current_gen=link.get("current_gen"),
                current_width=link.get("current_width"),
            ),
            device_class=link["class"],
        )
        for link in links
        if "max_gen" in link
    ]


def parse_sysfs_pcie_links(
    text: str, gpu_addresses: list[str] | None = None, check_gpu_speed: bool = False
) -> list[dict[str, Any]]:
    """PCIe link facts from ``grep -H . /sys/bus/pci/devices/ADDR/{max,current}_link_{speed,width}``
    output (``path:value`` lines). GPUs (gpu_addresses) get check_speed=check_gpu_speed."""
    values: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        match = re.match(
            r"^.*/devices/([^/]+)/(max_link_speed|current_link_speed|max_link_width|current_link_width):(.*)$",
            line,
        )
        if match:
            values.setdefault(match.group(1), {})[match.group(2)] = match.group(3).strip()
    gpus = set(gpu_addresses or [])
    return [
        pcie_expectation(
            address,
            max_gen=pcie_gen_from_speed(v.get("max_link_speed")),
            max_width=_int(v.get("max_link_width")),
            current_gen=pcie_gen_from_speed(v.get("current_link_speed")),
            current_width=_int(v.get("current_link_width")),
            check_speed=check_gpu_speed if address in gpus else True,
        )
        for address, v in sorted(values.items())
    ]


def parse_nvidia_smi_csv(text: str) -> list[dict[str, str | None]]:
    """``nvidia-smi --query-*=... --format=csv``: one dict per row keyed by the header (units in the
    header such as `` [MiB]`` dropped); ``[N/A]``/``N/A`` become None."""
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    if not rows:
        return []
    header = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
    result = []
    for row in rows[1:]:
        if not row:
            continue
        values = [v.strip() for v in row]
        result.append(
            {h: (None if v in ("[N/A]", "N/A", "") else v) for h, v in zip(header, values, strict=False)}
        )
    return result


def pcie_links_from_query_csv(rows: list[dict[str, str | None]]) -> list[dict[str, Any]]:
    """PCIe link facts from ``nvidia-smi --query-gpu=pci.bus_id,pcie.link.*`` rows."""
    return [
        pcie_expectation(
            normalize_pci_address(row.get("pci.bus_id")),
            max_gen=_int(row.get("pcie.link.gen.gpumax") or row.get("pcie.link.gen.max")),
            max_width=_int(row.get("pcie.link.width.max")),
            current_gen=_int(row.get("pcie.link.gen.current")),
            current_width=_int(row.get("pcie.link.width.current")),
            host_max_gen=_int(row.get("pcie.link.gen.hostmax")),
            check_speed=False,
        )
        for row in rows
    ]


# --------------------------------------------------------------------------------------------
# nvidia-smi -q (text): health and PCIe


def parse_nvidia_smi_q_text(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi -q`` (optionally ``-d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,PCI``) as one
    nested dict per GPU, keyed by the printed names: ``{"bus_id": ..., "Retired Pages": {...}}``."""
    gpus: list[dict[str, Any]] = []
    stack: list[tuple[int, dict[str, Any]]] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        head = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$", raw)
        if head:
            gpu: dict[str, Any] = {"bus_id": normalize_pci_address(head.group(1))}
            gpus.append(gpu)
            stack = [(0, gpu)]
            continue
        if not stack:
            continue
        indent = len(raw) - len(raw.lstrip())
        key, sep, value = raw.strip().partition(":")
        # "Bus Id : 00000000:19:00.0": the key ends at the first " : "
        if " : " in raw:
            key, sep, value = raw.strip().partition(" : ")
            sep = ":"
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        key = key.strip()
        if sep and value.strip():
            parent[key] = value.strip()
        else:
            child: dict[str, Any] = {}
            parent[key] = child
            stack.append((indent, child))
    return gpus


def _count(value: Any) -> int | None:
    if value is None:
        return None
    match = re.match(r"^\s*(\d+)", str(value))
    return int(match.group(1)) if match else None


# Clock event (throttle) reasons that mean hardware trouble; the others (Idle, application clocks,
# SW power cap, sync boost) are normal operation.
BAD_CLOCK_REASONS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")


def gpu_health_findings(gpu: dict[str, Any]) -> list[str]:
    """Problems in one GPU of parse_nvidia_smi_q_text, one sentence each; [] when healthy or unknown.

    Uncorrectable volatile ECC errors, double-bit retired pages, a pending page retirement, remapped
    rows that are uncorrectable, pending or failed, and active hardware clock slowdowns.
    """
    findings: list[str] = []
    where = gpu.get("bus_id") or "GPU"

    def section(node: dict[str, Any], name: str) -> dict[str, Any]:
        value = node.get(name)
        return value if isinstance(value, dict) else {}  # "N/A" on GPUs without the feature

    volatile = section(section(gpu, "ECC Errors"), "Volatile")
    for key, value in volatile.items():
        if "Uncorrectable" in key or key in ("Double Bit", "Double Bit ECC"):
            count = _count(value.get("Total") if isinstance(value, dict) else value)
            if count:
                findings.append(f"{where}: {count} volatile {key} ECC errors")
    retired = section(gpu, "Retired Pages")
    double = _count(retired.get("Double Bit ECC"))
    if double:
        findings.append(f"{where}: {double} pages retired for double-bit ECC errors")
    if (
        str(retired.get("Pending Page Blacklist") or retired.get("Pending Page Retirement") or "").lower()
        == "yes"
    ):
        findings.append(f"{where}: a page retirement is pending (reset the GPU)")
    remapped = section(gpu, "Remapped Rows")
    if _count(remapped.get("Uncorrectable Error")):
        findings.append(
            "{}: {} rows remapped for uncorrectable errors".format(
                where, _count(remapped.get("Uncorrectable Error"))
            )
        )
    if str(remapped.get("Pending") or "").lower() == "yes":
        findings.append(f"{where}: a row remapping is pending (reset the GPU)")
    if str(remapped.get("Remapping Failure Occurred") or "").lower() == "yes":
        findings.append(f"{where}: row remapping failed (replace the GPU)")
    reasons = section(gpu, "Clocks Event Reasons") or section(gpu, "Clocks Throttle Reasons")
    flat: dict[str, Any] = {}
    for key, value in reasons.items():
        if isinstance(value, dict):
            flat.update(value)
        else:
            flat[key] = value
    active = [r for r in BAD_CLOCK_REASONS if str(flat.get(r) or "").lower() == "active"]
    if active:
        findings.append("{}: clocks slowed down by {}".format(where, ", ".join(active)))
    return findings


def pcie_links_from_q_text(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PCIe link facts per GPU from parse_nvidia_smi_q_text (PCI / GPU Link Info)."""
    links = []
    for gpu in gpus:
        info = ((gpu.get("PCI") or {}).get("GPU Link Info")) or {}
        gen = info.get("PCIe Generation") or {}
        width = info.get("Link Width") or {}
        links.append(
            pcie_expectation(
                gpu.get("bus_id"),
                max_gen=_int(gen.get("Device Max") or gen.get("Max")),
                max_width=_int(width.get("Max")),
                current_gen=_int(gen.get("Current")),
                current_width=_int(width.get("Current")),
                host_max_gen=_int(gen.get("Host Max")),
                check_speed=False,
            )
        )
    return links


_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)(?:, (.*))?")

# Xid codes that come from applications or are informational, not from the hardware (NVIDIA's Xid
# catalogue): 13 graphics engine exception, 31 MMU fault (usually a bad kernel), 43 stopped
# channel, 45 preemptive cleanup. The rest (48 DBE, 63/64 row remapping, 74 NVLink, 79 fallen off
# the bus, 92-95 ECC, 119/120 GSP, ...) count as hardware findings.
APPLICATION_XIDS = (13, 31, 43, 45)


def parse_xid_lines(text: str, ignore: tuple[int, ...] = APPLICATION_XIDS) -> list[dict[str, Any]]:
    """Xid events from the kernel log (``journalctl -k`` or ``dmesg``): pci_address, xid, detail,
    line; application-caused codes (``ignore``) are left out."""
    events = []
    for line in text.splitlines():
        match = _XID_RE.search(line)
        if match and int(match.group(2)) not in ignore:
            events.append(
                {
                    "pci_address": normalize_pci_address(match.group(1)) or match.group(1),
                    "xid": int(match.group(2)),
                    "detail": (match.group(3) or "").strip(),
                    "line": line.strip(),
                }
            )
    return events


def parse_nvidia_smi_list(text: str) -> dict[str, Any]:
    """``nvidia-smi -L``: gpus [{index, model, uuid, mig_devices: [{profile, uuid}]}], gpu_count,
    mig_device_count."""
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        head = re.match(r"^GPU (\d+): (.*?) \(UUID: ([^)]+)\)", line)
        if head:
            gpus.append(
                {
                    "index": int(head.group(1)),
                    "model": head.group(2),
                    "uuid": head.group(3),
                    "mig_devices": [],
                }
            )
            continue
        mig = re.match(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)", line)
        if mig and gpus:
            gpus[-1]["mig_devices"].append(
                {"profile": mig.group(1), "index": int(mig.group(2)), "uuid": mig.group(3)}
            )
    return {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "mig_device_count": sum(len(g["mig_devices"]) for g in gpus),
    }


def busy_gpus(compute_apps: list[dict[str, str | None]]) -> dict[str, list[str]]:
    """``{gpu bus id: [process names]}`` from ``--query-compute-apps=gpu_bus_id,process_name`` rows:
    bandwidth figures measured on a busy GPU are not acceptance figures."""
    busy: dict[str, list[str]] = {}
    for row in compute_apps:
        address = normalize_pci_address(row.get("gpu_bus_id")) or str(row.get("gpu_bus_id"))
        busy.setdefault(address, []).append(str(row.get("process_name")))
    return busy


# --------------------------------------------------------------------------------------------
# NVLink


def parse_nvlink_status(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi nvlink -s``: one entry per GPU: index, model, uuid, links {n: GB/s or None when
    ``<inactive>``}, active_links, link_gbs (the lowest active speed)."""
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        head = re.match(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$", line)
        if head:
            gpus.append(
                {"index": int(head.group(1)), "model": head.group(2), "uuid": head.group(3), "links": {}}
            )
            continue
        link = re.match(r"^\s+Link (\d+): (.*)$", line)
        if link and gpus:
            speed = re.match(r"^([0-9.]+) GB/s", link.group(2).strip())
            gpus[-1]["links"][int(link.group(1))] = float(speed.group(1)) if speed else None
    for gpu in gpus:
        speeds = [s for s in gpu["links"].values() if s]
        gpu["active_links"] = len(speeds)
        gpu["link_gbs"] = min(speeds) if speeds else None
    return gpus


def gpu_architecture(model: str | None, architecture: str | None = None) -> str | None:
    """Lower-case architecture (``hopper``) from nvidia-smi's product_architecture, else the name."""
    if architecture:
        return architecture.strip().lower()
    for pattern, arch in _ARCH_BY_NAME:
        if model and pattern.search(model):
            return arch
    return None


def nvlink_links_per_gpu(
    gpu_links: dict[str, dict[str, str]], nvswitch: bool | None = None
) -> dict[str, int]:
    """NVLinks per GPU from a topo GPU x GPU matrix ({gpu: {peer: ``NV18``/``SYS``...}}).

    Through NVSwitches every peer shows the GPU's whole link count, so the count is the largest NV#;
    point to point (4-GPU boards, V100 pairs) the NV# of the peers add up. ``nvswitch`` None infers
    it: a row whose NV# add up to more than MAX_NVLINKS_PER_GPU must be switched.
    """
    result = {}
    for gpu, row in gpu_links.items():
        counts = [int(m.group(1)) for link in row.values() if (m := re.match(r"^NV(\d+)$", str(link)))]
        switched = nvswitch if nvswitch is not None else sum(counts) > MAX_NVLINKS_PER_GPU
        result[gpu] = (max(counts) if switched else sum(counts)) if counts else 0
    return result


def nvlink_expectation(
    links: int, *, architecture: str | None = None, link_gbs: float | None = None
) -> dict[str, Any]:
    """Expected NVLink of one GPU: link count, per-link GB/s (measured from nvlink -s when given,
    else the architecture's data rate), and per-GPU GB/s (one direction)."""
    nominal = NVLINK_LINK_GBS.get(architecture or "")
    # nvlink -s reports the signalling rate (H100: 26.562); the data rate is the nominal figure
    per_link = min(link_gbs, nominal) if link_gbs and nominal else (link_gbs or nominal)
    return {
        "links": links,
        "link_gbs": per_link,
        "gpu_gbs": round(links * per_link, 3) if links and per_link else None,
    }


# --------------------------------------------------------------------------------------------
# GPU <-> NIC pairs


def numa_local_pairs(gpu_nic_links: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """One pair per GPU (in the given order), with its link type and numa_local (link PIX, PXB, PHB
    or NODE: same NUMA node; SYS crosses sockets).

    Pairs are chosen nearest first over the whole host: every PIX pairing of a GPU and a NIC that are
    both still free, then PXB, PHB, NODE (ties: GPU order, then the NIC order of the row); a GPU left
    without a free NIC shares its nearest NIC that has the fewest GPUs. gpu_nic_links is
    {gpu: {nic: link}} (topo_gpu_nic_links, or the links of gpu_facts' gpu_nic_affinity).
    """
    gpus = list(gpu_nic_links)
    edges = sorted(
        (link_rank(link), gpu_index, nic_index, nic)
        for gpu_index, gpu in enumerate(gpus)
        for nic_index, (nic, link) in enumerate(gpu_nic_links[gpu].items())
        if link_rank(link) <= link_rank("NODE")
    )
    chosen: dict[str, str] = {}
    users: dict[str, int] = {}
    for _rank, gpu_index, _nic_index, nic in edges:
        gpu = gpus[gpu_index]
        if gpu not in chosen and nic not in users:
            chosen[gpu] = nic
            users[nic] = 1
    for gpu in gpus:
        row = gpu_nic_links[gpu]
        if gpu in chosen or not row:
            continue
        best = min(link_rank(link) for link in row.values())
        nearest = [nic for nic, link in row.items() if link_rank(link) == best]
        nic = min(nearest, key=lambda name: (users.get(name, 0), nearest.index(name)))
        chosen[gpu] = nic
        users[nic] = users.get(nic, 0) + 1
    pairs = []
    for gpu in gpus:
        paired = chosen.get(gpu)
        link = gpu_nic_links[gpu].get(paired) if paired else None
        pairs.append(
            {
                "gpu": gpu,
                "nic": paired,
                "link": link,
                "numa_local": link is not None and link_rank(link) <= link_rank("NODE"),
                "shared": paired is not None and users.get(paired, 0) > 1,
            }
        )
    return pairs


def numa_layout(numa_nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """What binding a bandwidth test to a NUMA node (``numactl --cpunodebind=N --membind=N``) gives:
    node ids and CPUs per node, from gpu_facts numa_nodes (or the lscpu/numactl layouts)."""
    nodes = sorted(numa_nodes, key=lambda n: n["id"])
    return {
        "numa_node_count": len(nodes),
        "numa_node_ids": [n["id"] for n in nodes],
        "cpus_per_node": {n["id"]: len(n.get("cpus") or []) for n in nodes},
    }


# --------------------------------------------------------------------------------------------
# NCCL all-reduce bus bandwidth


def nccl_allreduce_floor(
    *,
    gpu_count: int,
    nvlink_gpu_gbs: float | None,
    pcie_gpu_gbs: float | None = None,
    rail_rates_gbps: list[float] | None = None,
    nodes: int = 1,
    fraction: float = NCCL_BUSBW_FRACTION,
) -> dict[str, Any]:
    """The all_reduce_perf busbw floor (GB/s) for ``nodes`` nodes like this one.

    One node: the per-GPU NVLink bandwidth (NVSwitch or full mesh), else the per-GPU PCIe bandwidth.
    N nodes: min(that, the rails' aggregate per GPU = sum of the rail NICs' rates / 8 / gpu_count).
    Returns theoretical_gbs, floor_gbs (fraction x theoretical), limited_by, reason (why None).
    """
    intra = nvlink_gpu_gbs or pcie_gpu_gbs
    limited_by = "nvlink" if nvlink_gpu_gbs else ("pcie" if pcie_gpu_gbs else None)
    result: dict[str, Any] = {
        "nodes": nodes,
        "gpu_count": gpu_count,
        "theoretical_gbs": None,
        "floor_gbs": None,
        "limited_by": limited_by,
        "reason": None,
    }
    if gpu_count < 1:
        result["reason"] = "no GPU"
        return result
    if gpu_count == 1 and nodes == 1:
        result["reason"] = "one GPU: an all-reduce moves no data"
        return result
    if intra is None:
        result["reason"] = "neither NVLink nor PCIe bandwidth of the GPUs is known"
        return result
    theoretical = intra
    if nodes > 1:
        rates = [r for r in (rail_rates_gbps or []) if r]
        if not rates:
            result["reason"] = "no active rail NIC with a known rate"
            return result
        per_gpu = sum(rates) / 8 / gpu_count
        if per_gpu < theoretical:
            theoretical, result["limited_by"] = per_gpu, "rails"
    result["theoretical_gbs"] = round(theoretical, 3)
    result["floor_gbs"] = round(theoretical * fraction, 3)
    return result


# --------------------------------------------------------------------------------------------
# tool outputs the role measures


def parse_ib_write_bw(text: str) -> float | None:
    """The average bandwidth (Gb/s with --report_gbits, else MB/s as printed) of the last result row
    of ``ib_write_bw`` (``#bytes #iterations BW peak BW average MsgRate``)."""
    value = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
            try:
                value = float(fields[3])
            except ValueError:
                continue
    return value


def parse_dcgmi_diag_json(text: str) -> dict[str, Any]:
    """``dcgmi diag -r N -j``: {failed: [test names], passed: n, warnings: [...]} from every
    ``status``/``result`` the JSON carries (the layout differs between DCGM 2, 3 and 4)."""
    try:
        data = json.loads(text[text.find("{") :]) if "{" in text else None
    except ValueError:
        data = None
    result: dict[str, Any] = {"parsed": data is not None, "failed": [], "passed": 0, "warnings": []}

    def walk(node: Any, name: str) -> None:
        if isinstance(node, dict):
            label = str(node.get("name") or node.get("test_name") or name)
            status = node.get("status") or node.get("result")
            if isinstance(status, str):
                if status.lower() in ("fail", "failed"):
                    result["failed"].append(label)
                elif status.lower() in ("pass", "passed"):
                    result["passed"] += 1
                elif status.lower() in ("warn", "warning"):
                    result["warnings"].append(label)
            for key, value in node.items():
                walk(value, label if key in ("results", "status", "result") else str(key))
        elif isinstance(node, list):
            for item in node:
                walk(item, name)

    walk(data, "diag")
    result["failed"] = sorted(set(result["failed"]))
    return result


# --------------------------------------------------------------------------------------------
# everything at once, from gpu_facts


def expectations_from_facts(
    facts: dict[str, Any],
    *,
    netdev_speeds: dict[str, Any] | None = None,
    nvlink_status: str | None = None,
    nodes: int = 1,
    ib_write_bw_fraction: float = IB_WRITE_BW_FRACTION,
    nccl_busbw_fraction: float = NCCL_BUSBW_FRACTION,
    expected_nic_rate_gbps: float | None = None,
) -> dict[str, Any]:
    """Expectations for one host from gpubring_gpu_facts: nics (nic_expectations), nvlink per GPU,
    pairs (numa_local_pairs), rails (the NICs of the pairs), nccl one node and ``nodes`` nodes, and
    the fractions used. A rail NIC is expected at ``expected_nic_rate_gbps``, else at the highest rate
    of the host's rails; any other port at its own rate."""
    gpus = facts.get("gpus") or []
    affinity = facts.get("gpu_nic_affinity") or {}
    ports = ports_from_facts(facts, netdev_speeds)
    links = {entry["gpu"]: entry.get("links") or {} for entry in affinity.get("gpus") or []}
    pairs = numa_local_pairs(links)
    rails = sorted({p["nic"] for p in pairs if p["nic"]})
    # Without an operator's figure, a rail NIC is expected at the highest rate any rail trained at:
    # one rail at HDR among NDR rails fails. Other ports (storage, management) keep their own rate.
    rail_rates = [p["rate_gbps"] for p in ports if p["device"] in rails and p.get("rate_gbps")]
    rail_rate = expected_nic_rate_gbps or (max(rail_rates) if rail_rates else None)
    nics = [
        nic_expectations(
            [port],
            ib_write_bw_fraction=ib_write_bw_fraction,
            expected_rate_gbps=rail_rate if port["device"] in rails else expected_nic_rate_gbps,
        )[0]
        for port in ports
    ]
    nvswitch = bool(facts.get("nvswitch_count")) or bool((facts.get("driver") or {}).get("nvswitch_devices"))
    link_counts = nvlink_links_per_gpu(affinity.get("gpu_links") or {}, nvswitch if nvswitch else None)
    measured = {g["index"]: g for g in parse_nvlink_status(nvlink_status)} if nvlink_status else {}
    # The GPUs of one model on one board have the same links: expect the most any of them shows, so
    # that a GPU whose topo row lost links (NV17 among NV18) is held to the board's count.
    by_model: dict[str, int] = {}
    for gpu in gpus:
        count = link_counts.get(gpu["pci_address"], 0)
        by_model[str(gpu.get("model"))] = max(by_model.get(str(gpu.get("model")), 0), count)
    nvlink = []
    for gpu in gpus:
        arch = gpu_architecture(gpu.get("model"), gpu.get("architecture"))
        seen = measured.get(gpu.get("index"), {})
        expectation = nvlink_expectation(
            by_model.get(str(gpu.get("model")), 0), architecture=arch, link_gbs=seen.get("link_gbs")
        )
        nvlink.append(dict(expectation, gpu=gpu["pci_address"], index=gpu.get("index"), architecture=arch))
    rates = {p["device"]: p["rate_gbps"] for p in ports if p.get("rate_gbps")}
    nvlink_gbs = [n["gpu_gbs"] for n in nvlink if n["gpu_gbs"]]
    per_gpu = min(nvlink_gbs) if nvlink_gbs and len(nvlink_gbs) == len(gpus) else None
    return {
        "nics": nics,
        "nvlink": nvlink,
        "pairs": pairs,
        "rails": rails,
        "nccl_one_node": nccl_allreduce_floor(
            gpu_count=len(gpus), nvlink_gpu_gbs=per_gpu, fraction=nccl_busbw_fraction
        ),
        "nccl_multi_node": nccl_allreduce_floor(
            gpu_count=len(gpus),
            nvlink_gpu_gbs=per_gpu,
            fraction=nccl_busbw_fraction,
            nodes=max(nodes, 2),
            # the promised rate of every rail: a rail that is down lowers the measurement, not the floor
            rail_rates_gbps=[rail_rate] * len(rails)
            if rail_rate
            else [rates[r] for r in rails if r in rates],
        ),
        "fractions": {"ib_write_bw": ib_write_bw_fraction, "nccl_busbw": nccl_busbw_fraction},
    }


# --------------------------------------------------------------------------------------------
# acceptance checks: {name, status: passed|failed|skipped, expected, measured, reason}


def check(
    name: str, status: str, expected: Any = None, measured: Any = None, reason: str | None = None
) -> dict[str, Any]:
    """One acceptance check result, the shape of every entry of gpu_acceptance_result.checks."""
    if status not in ("passed", "failed", "skipped"):
        raise ValueError(f"check {name}: status must be passed, failed or skipped, got {status!r}")
    if status == "skipped" and not reason:
        raise ValueError(f"check {name}: a skipped check needs the reason it was skipped")
    return {"name": name, "status": status, "expected": expected, "measured": measured, "reason": reason}


def verdict(checks: list[dict[str, Any]]) -> str:
    """``failed`` when any check failed, ``passed`` when at least one passed and none failed, else
    ``skipped-only`` (nothing could be measured: never reported as a pass)."""
    statuses = {c["status"] for c in checks}
    if "failed" in statuses:
        return "failed"
    return "passed" if "passed" in statuses else "skipped-only"


def parse_reads(lines: list[str], names: list[str] | tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The answers of the role's one read call (tasks/reads.yml), by read: each read printed a line
    ``NAME_rc RC`` and then its output, every line prefixed ``NAME `` (a read that did not run printed
    nothing). Gives each read that ran as a command task registers it: ``{rc, stdout, stdout_lines}``.
    Lines of a name not in ``names``, or before that read's ``_rc`` line, are left out."""
    found: dict[str, dict[str, Any]] = {}
    for line in lines:
        head, rest = [*line.split(" ", 1), ""][:2]
        if head.endswith("_rc") and head[:-3] in names and rest.strip().lstrip("-").isdigit():
            found[head[:-3]] = {"rc": int(rest), "stdout_lines": []}
        elif head in found:
            found[head]["stdout_lines"].append(rest)
    for read in found.values():
        read["stdout"] = "\n".join(read["stdout_lines"])
    return found


def dcgm_check(rc: int, stdout: str, level: int) -> dict[str, Any]:
    """``dcgmi diag -r LEVEL -j``: passed when it exits 0 and no test failed."""
    parsed = parse_dcgmi_diag_json(stdout)
    expected = f"dcgmi diag -r {level}: every test passes"
    if rc == 0 and not parsed["failed"]:
        return check("dcgm_diag", "passed", expected, f"{parsed['passed']} tests passed")
    if parsed["failed"]:
        return check(
            "dcgm_diag", "failed", expected, parsed["failed"], "failed: " + ", ".join(parsed["failed"])
        )
    first = next((line.strip() for line in stdout.splitlines() if line.strip()), "no output")
    return check("dcgm_diag", "failed", expected, f"rc {rc}", f"dcgmi exited {rc}: {first}")


def health_checks(q_text: str | None, rc: int = 0) -> list[dict[str, Any]]:
    """``nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE``: one check per GPU."""
    if rc != 0 or q_text is None:
        return [check("gpu_health", "failed", "nvidia-smi answers", f"rc {rc}", "nvidia-smi -q failed")]
    gpus = parse_nvidia_smi_q_text(q_text)
    if not gpus:
        return [check("gpu_health", "failed", "one entry per GPU", "none", "nvidia-smi -q listed no GPU")]
    results = []
    for gpu in gpus:
        findings = gpu_health_findings(gpu)
        expected = "no uncorrectable ECC error, retired or pending page, failed remap or HW slowdown"
        name = "gpu_health:{}".format(gpu.get("bus_id"))
        if findings:
            results.append(check(name, "failed", expected, findings, "; ".join(findings)))
        else:
            results.append(check(name, "passed", expected, "healthy"))
    return results


def xid_check(log_text: str, ignore: list[int] | tuple[int, ...] = APPLICATION_XIDS) -> dict[str, Any]:
    """Xid lines in the kernel log of this boot: any hardware Xid fails the check."""
    events = parse_xid_lines(log_text, tuple(int(x) for x in ignore))
    expected = "no hardware Xid in the kernel log of this boot (ignored: {})".format(
        ", ".join(str(x) for x in ignore) or "none"
    )
    if events:
        summary = sorted({f"Xid {e['xid']} on {e['pci_address']}" for e in events})
        return check("gpu_xid", "failed", expected, [e["line"] for e in events][:20], "; ".join(summary))
    return check("gpu_xid", "passed", expected, "no Xid")


def nvlink_checks(
    status_text: str, expectations: list[dict[str, Any]], speed_fraction: float = NVLINK_SPEED_FRACTION
) -> list[dict[str, Any]]:
    """``nvidia-smi nvlink -s`` against the expected link count and speed of every GPU."""
    measured = {g["index"]: g for g in parse_nvlink_status(status_text)}
    results = []
    for entry in expectations:
        name = "nvlink:{}".format(entry.get("gpu"))
        links = entry.get("links") or 0
        if not links:
            results.append(check(name, "skipped", reason="no NVLink expected (topology shows none)"))
            continue
        seen = measured.get(entry.get("index"))
        minimum = round(entry["link_gbs"] * speed_fraction, 3) if entry.get("link_gbs") else None
        expected = {"active_links": links, "min_link_gbs": minimum}
        if seen is None:
            results.append(
                check(name, "failed", expected, None, "nvidia-smi nvlink -s does not list this GPU")
            )
            continue
        got = {"active_links": seen["active_links"], "min_link_gbs": seen["link_gbs"]}
        problems = []
        if seen["active_links"] < links:
            problems.append(f"{seen['active_links']} of {links} NVLinks active")
        if minimum is not None and (seen["link_gbs"] or 0) < minimum:
            problems.append(f"slowest link {seen['link_gbs']} GB/s < {minimum}")
        results.append(
            check(name, "failed" if problems else "passed", expected, got, "; ".join(problems) or None)
        )
    return results


def nic_checks(nics: list[dict[str, Any]], rails: list[str] | None = None) -> list[dict[str, Any]]:
    """Link state and rate of every RDMA port (nic_expectations entries): a rail NIC must be ACTIVE
    at its expected rate; other ports that are down are reported, not failed (storage, management)."""
    rail_set = set(rails or [])
    results = []
    for nic in nics:
        name = "nic_link:{}/{}".format(nic["device"], nic.get("port"))
        is_rail = not rail_set or nic["device"] in rail_set
        expected = {"state": "ACTIVE", "rate_gbps": nic.get("expected_rate_gbps")}
        measured = {"state": nic.get("state"), "rate_gbps": nic.get("rate_gbps")}
        if not nic.get("active"):
            status = "failed" if is_rail else "skipped"
            results.append(check(name, status, expected, measured, nic.get("reason") or "port not active"))
        elif nic.get("expected_rate_gbps") is None:
            results.append(check(name, "skipped", expected, measured, nic.get("reason") or "rate unknown"))
        elif not nic.get("rate_ok"):
            results.append(
                check(
                    name,
                    "failed",
                    expected,
                    measured,
                    "link trained at {} Gb/s, expected {}".format(
                        nic.get("rate_gbps"), nic.get("expected_rate_gbps")
                    ),
                )
            )
        else:
            results.append(check(name, "passed", expected, measured))
    return results


def pcie_checks(links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One check per device from pcie_expectation entries (parse_sysfs_pcie_links)."""
    results = []
    for link in links:
        name = "pcie:{}".format(link["pci_address"])
        expected = {"gen": link["expected_gen"], "width": link["expected_width"], "gbs": link["expected_gbs"]}
        measured = {"gen": link["current_gen"], "width": link["current_width"], "gbs": link["current_gbs"]}
        if link["expected_width"] is None:
            results.append(check(name, "skipped", expected, measured, "the device reports no PCIe link"))
        elif link["ok"]:
            results.append(check(name, "passed", expected, measured))
        else:
            results.append(
                check(
                    name,
                    "failed",
                    expected,
                    measured,
                    "link at Gen{} x{}, capable of Gen{} x{}".format(
                        link["current_gen"],
                        link["current_width"],
                        link["expected_gen"],
                        link["expected_width"],
                    ),
                )
            )
    return results


def ib_write_bw_check(device: str, rc: int, stdout: str, minimum_gbps: float | None) -> dict[str, Any]:
    """An ``ib_write_bw --report_gbits`` loopback run on ``device`` against its floor."""
    name = f"rdma_write_bw:{device}"
    measured = parse_ib_write_bw(stdout) if rc == 0 else None
    expected = {"min_gbps": minimum_gbps}
    if rc != 0 or measured is None:
        return check(name, "failed", expected, None, f"ib_write_bw exited {rc} without a result")
    if minimum_gbps is None:
        return check(name, "skipped", expected, measured, f"{device} has no expected rate to compare with")
    if measured < minimum_gbps:
        return check(name, "failed", expected, measured, f"{measured} Gb/s < {minimum_gbps} Gb/s")
    return check(name, "passed", expected, measured)


def rdma_bandwidth_targets(
    expected: dict[str, Any], facts: dict[str, Any], devices: list[str] | None = None
) -> list[dict[str, Any]]:
    """What the role measures with ib_write_bw: one entry per RDMA device (``devices``, else the
    rails, else every device with an active port) with its first active port, floor (min_gbps), NUMA
    node and the index of the GPU paired with it (for --use_cuda); devices without an active port
    are left out (nic_checks reports them)."""
    nics = [n for n in expected.get("nics") or [] if n.get("active")]
    names = list(devices or expected.get("rails") or []) or sorted({n["device"] for n in nics})
    numa = {n.get("rdma_device"): n.get("numa_node") for n in facts.get("rdma_nics") or []}
    gpu_index = {g["pci_address"]: g.get("index") for g in facts.get("gpus") or []}
    paired = {p["nic"]: gpu_index.get(p["gpu"]) for p in expected.get("pairs") or [] if p.get("nic")}
    targets = []
    for name in names:
        port = next((n for n in nics if n["device"] == name), None)
        if port is None:
            continue
        targets.append(
            {
                "device": name,
                "port": port.get("port") or 1,
                "link_layer": port.get("link_layer"),
                "min_gbps": port.get("ib_write_bw_min_gbps"),
                "numa_node": numa.get(name),
                "gpu_index": paired.get(name),
            }
        )
    return targets


ADMISSION_EFFECT = "NoSchedule"
ANNOTATION_LIMIT = 1024


def admission(
    result: dict[str, Any], taints: list[dict[str, Any]] | None, key: str, when: str = ""
) -> dict[str, Any]:
    """The admission gate of a node after its acceptance (issue 14.3): what its taints and its
    annotation become. A node registers with ``KEY=pending:NoSchedule`` (kubeadm_join); here

    - ``passed`` removes the taint: ``state`` accepted;
    - ``failed`` replaces it by ``KEY=failed:NoSchedule``: ``state`` failed;
    - ``skipped-only`` (nothing could be measured) keeps or sets ``KEY=pending``: ``state`` pending.

    The node's other taints are kept as they are (Node.spec.taints has no merge key: the whole list
    is sent). The annotation ``KEY`` says the verdict, when, and the failed (or, for pending, the
    skipped) checks with their reasons, cut to ANNOTATION_LIMIT characters.
    """
    verdict_ = str(result.get("verdict") or "skipped-only")
    state = {"passed": "accepted", "failed": "failed"}.get(verdict_, "pending")
    kept = [dict(t) for t in taints or [] if isinstance(t, dict) and t.get("key") != key]
    if state != "accepted":
        kept.append({"key": key, "value": state, "effect": ADMISSION_EFFECT})
    wanted = "failed" if state == "failed" else "skipped"
    reasons = [
        f"{c.get('name')}: {c.get('reason') or c.get('measured')}"
        for c in result.get("checks") or []
        if isinstance(c, dict) and c.get("status") == wanted and state != "accepted"
    ]
    text = verdict_ + (f" at {when}" if when else "") + (": " + "; ".join(reasons) if reasons else "")
    if len(text) > ANNOTATION_LIMIT:
        text = text[: ANNOTATION_LIMIT - 3] + "..."
    return {"state": state, "taints": kept, "annotation": text}
