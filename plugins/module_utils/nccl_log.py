# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""What an nccl-tests ``all_reduce_perf`` run printed, and whether it passes.

Plain functions, standard library only: the fabric_test role calls them through the
``gpubring.core.nccl_log*`` filters on the pod log of its Job or MPIJob launcher, and the unit tests
call them directly on the captured logs in tests/fixtures/nccl. Nothing here runs a command.

Two things are read from one log:

- the result table: per size the out-of-place and in-place time, algbw and busbw (GB/s) and the
  wrong-value count, the ``# Avg bus bandwidth`` line and ``# Out of bounds values``;
- the transport, from the ``NCCL_DEBUG=INFO`` lines: the network NCCL chose (``Using network IB`` /
  ``Using network Socket``; plugins print ``IBext_v8`` and the like), the channels' transports
  (``via NET/IB/0/GDRDMA``, ``via NET/Socket/0``, ``via P2P/IPC``, ``via P2P/CUMEM``, ``via P2P/direct
  pointer``, ``via SHM``, ``via NVLS``) and the NICs NCCL opened (``NET/IB : Using [0]mlx5_0:1/IB``).

GPUDirect RDMA is read from the channel lines NCCL prints when it sets up a network connection
(NVIDIA/nccl src/transport/net.cc, sendSetup/recvSetup, as the stored index holds it at 022c022a):
``"Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s"`` with ``"/GDRDMA"`` when
``req.useGdr`` (then ``"(PCI)"`` when the mode is ncclTopoGdrModePci) and ``"/Shared"``; a proxied
(PXN) send prints ``NET/%s/%d(%d)`` with the proxy rank; ``[receive]`` lines the same. A channel
``via NET/IB/0`` without ``/GDRDMA`` stages the data through host memory, and NCCL also says
``NET/IB : GPU Direct RDMA Disabled for HCA <n> '<dev>'`` when the NIC cannot reach GPU memory
(nvidia-peermem not loaded, no DMA-BUF).

A ``NET/Socket : Using ...`` line alone is no fallback: NCCL always opens a socket interface for
its bootstrap and out-of-band traffic; the data path is what ``Using network`` and the channel lines
say.

The verdict (all_reduce_check) is a check ``{name, status, expected, measured, reason}`` of the shape
gpu_acceptance reports. The busbw compared with the floor is the out-of-place busbw of the largest
size: ``Avg bus bandwidth`` averages over every size from 8 bytes up and is far below the link rate
on a healthy fabric (it is reported, not judged).
"""

from __future__ import annotations

import re
from typing import Any

_USING_NETWORK_RE = re.compile(r"NCCL INFO Using network (\S+)")
_VIA_RE = re.compile(
    r"\bvia (NET/[^/\s]+(?:/\d+(?:\(\d+\))?)?(?:/GDRDMA(?:\(PCI\))?)?|P2P/[A-Za-z]+(?: pointer)?|SHM|NVLS|CollNet\S*)"
)
_GDR_DISABLED_RE = re.compile(r"GPU Direct RDMA Disabled for (?:GPU \S+ / )?HCA (\d+) '?([^'\s]+)'?")
_NET_IB_USING_RE = re.compile(r"NET/IB ?: Using (.*?)(?:; OOB|$)")
_IB_DEVICE_RE = re.compile(r"\[\d+\]([^\s:]+):(\d+)/(IB|RoCE)")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", re.M)
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.M)
_VERSION_RE = re.compile(r"NCCL version (\S+)")
_NGPUS_RE = re.compile(r"nThread (\d+) nGpus (\d+)")
_NRANKS_RE = re.compile(r"\bnranks (\d+)\b", re.I)


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _wrong(token: str) -> int | None:
    """The #wrong column (an integer) or the old error column (N/A without validation, else a float)."""
    if token == "N/A":
        return None
    value = _number(token)
    if value is None:
        return None
    return int(value) if value == int(value) else 1


def parse_result_row(line: str) -> dict[str, Any] | None:
    """One result row: ``size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong``
    (``root`` since nccl-tests 2.10). None for any other line."""
    fields = line.split()
    if len(fields) < 12 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    if not fields[2].isalpha() or not fields[3].isalpha():
        return None
    rest = fields[4:]
    if len(rest) == 9:  # root column
        rest = rest[1:]
    if len(rest) != 8:
        return None
    oop_time, oop_algbw, oop_busbw = (_number(t) for t in rest[0:3])
    ip_time, ip_algbw, ip_busbw = (_number(t) for t in rest[4:7])
    if None in (oop_time, oop_algbw, oop_busbw, ip_time, ip_algbw, ip_busbw):
        return None
    return {
        "size": int(fields[0]),
        "count": int(fields[1]),
        "type": fields[2],
        "redop": fields[3],
        "out_of_place": {"time_us": oop_time, "algbw_gbs": oop_algbw, "busbw_gbs": oop_busbw},
        "out_of_place_wrong": _wrong(rest[3]),
        "in_place": {"time_us": ip_time, "algbw_gbs": ip_algbw, "busbw_gbs": ip_busbw},
        "in_place_wrong": _wrong(rest[7]),
    }


def _network_kind(name: str | None) -> str | None:
    """``IB``, ``IBext_v8`` (the RDMA/SHARP plugin) -> IB; ``Socket`` -> Socket; anything else as
    printed (``AWS Libfabric``, ``GIN``...)."""
    if not name:
        return None
    if name.startswith("IB"):
        return "IB"
    if name.startswith("Socket"):
        return "Socket"
    return name


def parse_transport(text: str) -> dict[str, Any]:
    """The transports of an NCCL_DEBUG=INFO log: network (IB / Socket / other / None), the count of
    channel lines per transport, whether GPUDirect RDMA was used, the IB/RoCE devices NCCL opened,
    and ``debug`` (False when the log has no NCCL INFO line at all)."""
    networks = [m.group(1) for m in _USING_NETWORK_RE.finditer(text)]
    kinds = sorted({k for k in (_network_kind(n) for n in networks) if k})
    channels: dict[str, int] = {}
    gdrdma = False
    net_gdrdma = 0
    for match in _VIA_RE.finditer(text):
        via = match.group(1)
        if via.startswith("NET/"):
            name = via.split("/")[1]
            key = "NET/" + (_network_kind(name) or name)
            with_gdr = "/GDRDMA" in via
            gdrdma = gdrdma or with_gdr
            net_gdrdma += with_gdr and key == "NET/IB"
        elif via.startswith("P2P/"):
            key = "P2P/" + via.split("/")[1].split()[0]
        else:
            key = via
        channels[key] = channels.get(key, 0) + 1
    devices: list[dict[str, Any]] = []
    for line in _NET_IB_USING_RE.finditer(text):
        for dev in _IB_DEVICE_RE.finditer(line.group(1)):
            entry = {"device": dev.group(1), "port": int(dev.group(2)), "link_layer": dev.group(3)}
            if entry not in devices:
                devices.append(entry)
    gdrdma = gdrdma or "GPU Direct RDMA Enabled" in text
    gdr_disabled = sorted({m.group(2) for m in _GDR_DISABLED_RE.finditer(text)})
    if len(kinds) == 1:
        network = kinds[0]
    elif "Socket" in kinds:  # ranks disagree: the worst one decides
        network = "Socket"
    else:
        network = kinds[0] if kinds else None
    # Without a "Using network" line (a single node does not open one in every version) the
    # channels say which network carried data between nodes.
    if network is None:
        nets = sorted(k.split("/", 1)[1] for k in channels if k.startswith("NET/"))
        network = "Socket" if "Socket" in nets else (nets[0] if nets else None)
    return {
        "debug": "NCCL INFO" in text,
        "network": network,
        "networks": kinds,
        "channels": dict(sorted(channels.items())),
        "net_channels": sum(v for k, v in channels.items() if k.startswith("NET/")),
        "socket_channels": channels.get("NET/Socket", 0),
        "ib_channels": channels.get("NET/IB", 0),
        "p2p_channels": sum(v for k, v in channels.items() if k.startswith("P2P/")),
        "shm_channels": channels.get("SHM", 0),
        "nvls": channels.get("NVLS", 0) > 0 or "NVLS multicast support is available" in text,
        "gdrdma": gdrdma,
        "gdrdma_channels": net_gdrdma,
        "ib_plain_channels": channels.get("NET/IB", 0) - net_gdrdma,
        "gdr_disabled": gdr_disabled,
        "ib_devices": devices,
        "no_ib_device": "NET/IB : No device found" in text,
    }


def parse_all_reduce_log(text: str) -> dict[str, Any]:
    """Everything an all_reduce_perf log says: rows (parse_result_row), sizes, largest (the row of
    the largest size), busbw_gbs (its out-of-place busbw), avg_busbw_gbs, out_of_bounds, wrong (rows
    with wrong values), nccl_version, ranks (nranks from the INFO lines, else nThread x nGpus of
    this process), transport (parse_transport)."""
    rows = [row for row in (parse_result_row(line) for line in text.splitlines()) if row]
    largest = max(rows, key=lambda r: r["size"]) if rows else None
    avg = _AVG_RE.search(text)
    oob = _OOB_RE.search(text)
    version = _VERSION_RE.search(text)
    ranks = [int(m.group(1)) for m in _NRANKS_RE.finditer(text)]
    ngpus = _NGPUS_RE.search(text)
    wrong = [r["size"] for r in rows if (r["out_of_place_wrong"] or 0) > 0 or (r["in_place_wrong"] or 0) > 0]
    return {
        "rows": rows,
        "sizes": [r["size"] for r in rows],
        "largest": largest,
        "busbw_gbs": largest["out_of_place"]["busbw_gbs"] if largest else None,
        "avg_busbw_gbs": float(avg.group(1)) if avg else None,
        "out_of_bounds": int(oob.group(1)) if oob else None,
        "wrong": wrong,
        "nccl_version": version.group(1) if version else None,
        "ranks": max(ranks) if ranks else (int(ngpus.group(1)) * int(ngpus.group(2)) if ngpus else None),
        "transport": parse_transport(text),
    }


def _check(
    name: str, status: str, expected: Any = None, measured: Any = None, reason: str | None = None
) -> dict[str, Any]:
    """The acceptance-check shape (module_utils/gpu_expect.check), kept here so this file stands alone."""
    if status not in ("passed", "failed", "skipped"):
        raise ValueError(f"check {name}: status must be passed, failed or skipped, got {status!r}")
    if status == "skipped" and not reason:
        raise ValueError(f"check {name}: a skipped check needs the reason it was skipped")
    return {"name": name, "status": status, "expected": expected, "measured": measured, "reason": reason}


def gdrdma_problem(transport: dict[str, Any]) -> str | None:
    """Why a multi-node run expected to use GPUDirect RDMA did not, or None: every NET/IB channel line
    must end in /GDRDMA (net.cc prints it when req.useGdr), none plain, and NCCL must not say
    ``GPU Direct RDMA Disabled`` for an HCA. No NET/IB channel line at all: it cannot be told (the
    lines come with NCCL_DEBUG=INFO; NCCL_DEBUG_SUBSYS must keep INIT or NET)."""
    disabled = transport.get("gdr_disabled") or []
    plain = transport.get("ib_plain_channels") or 0
    with_gdr = transport.get("gdrdma_channels") or 0
    problems = []
    if disabled:
        problems.append(f"NCCL says GPU Direct RDMA Disabled for HCA {', '.join(disabled)}")
    if plain:
        problems.append(
            f"{plain} of {plain + with_gdr} NET/IB channels without /GDRDMA (data staged through host memory)"
        )
    if not problems and not with_gdr:
        problems.append(
            "no NET/IB channel line (via NET/IB/<dev>/GDRDMA) in the log: GPUDirect RDMA cannot be told"
        )
    if not problems:
        return None
    return (
        "GPUDirect RDMA expected (Network Operator RDMA device, nvidia-peermem) but not in use: "
        + "; ".join(problems)
        + " (is nvidia-peermem loaded on every node?)"
    )


def transport_problem(transport: dict[str, Any], nodes: int, require_debug: bool = True) -> str | None:
    """Why the transport of a run is not the one a healthy fabric uses, or None.

    N nodes: data between nodes over InfiniBand/RoCE verbs (``Using network IB`` or NET/IB channels);
    a run over NET/Socket fails whatever its bandwidth. One node: GPUs talk P2P (NVLink or PCIe P2P),
    not through host memory (SHM) or a socket. Without NCCL_DEBUG=INFO lines nothing can be told:
    that fails too unless ``require_debug`` is false."""
    if not transport.get("debug"):
        return (
            "the log has no NCCL_DEBUG=INFO lines: the transport cannot be told (run with NCCL_DEBUG=INFO)"
            if require_debug
            else None
        )
    network = transport.get("network")
    if transport.get("socket_channels") or (nodes > 1 and network == "Socket"):
        cause = " (NET/IB : No device found)" if transport.get("no_ib_device") else ""
        return f"NCCL fell back to TCP sockets (NET/Socket){cause}: RDMA is not in use"
    if nodes > 1:
        if network != "IB" and not transport.get("ib_channels"):
            return "no InfiniBand/RoCE transport (Using network IB or via NET/IB) between the nodes: network {}".format(
                network or "not reported"
            )
        return None
    if transport.get("shm_channels") and not transport.get("p2p_channels") and not transport.get("nvls"):
        return "the GPUs exchange data through host memory (via SHM), not P2P over NVLink or PCIe"
    if not transport.get("p2p_channels") and not transport.get("nvls") and require_debug:
        return "no P2P channel (via P2P/IPC, P2P/CUMEM, P2P/direct) or NVLS in the log"
    return None


def all_reduce_check(
    text: str,
    floor: dict[str, Any] | None,
    *,
    nodes: int = 1,
    name: str | None = None,
    require_debug: bool = True,
    gdrdma: bool = False,
) -> dict[str, Any]:
    """The verdict of one all_reduce_perf run against its gpu_expect floor (nccl_one_node or
    nccl_multi_node: {floor_gbs, theoretical_gbs, limited_by, reason}).

    failed: a transport problem (transport_problem), even when the bandwidth passes; on N nodes with
    ``gdrdma`` (GPUDirect RDMA expected), a channel without GDRDMA (gdrdma_problem); no result row;
    wrong values; busbw of the largest size below floor_gbs (every problem found is in the reason).
    skipped: the floor is unknown (its reason is given). passed otherwise."""
    parsed = parse_all_reduce_log(text or "")
    transport = parsed["transport"]
    check_name = name or ("nccl_all_reduce:multi_node" if nodes > 1 else "nccl_all_reduce:one_node")
    floor = floor or {}
    expected = {
        "min_busbw_gbs": floor.get("floor_gbs"),
        "theoretical_gbs": floor.get("theoretical_gbs"),
        "limited_by": floor.get("limited_by"),
        "transport": (
            (
                "NET/IB with GPUDirect RDMA (via NET/IB/<dev>/GDRDMA)"
                if gdrdma
                else "NET/IB (InfiniBand or RoCE)"
            )
            if nodes > 1
            else "P2P (NVLink or PCIe) or NVLS"
        ),
    }
    largest = parsed["largest"]
    measured = {
        "busbw_gbs": parsed["busbw_gbs"],
        "size": largest["size"] if largest else None,
        "avg_busbw_gbs": parsed["avg_busbw_gbs"],
        "network": transport["network"],
        "channels": transport["channels"],
        "gdrdma": transport["gdrdma"],
        "gdrdma_channels": transport["gdrdma_channels"],
        "ib_devices": [d["device"] for d in transport["ib_devices"]],
        "nccl_version": parsed["nccl_version"],
        "ranks": parsed["ranks"],
    }
    problems = []
    problem = transport_problem(transport, nodes, require_debug)
    if problem:
        problems.append(problem)
    elif nodes > 1 and gdrdma and transport.get("debug") and (gdr := gdrdma_problem(transport)):
        problems.append(gdr)
    if not parsed["rows"]:
        problems.append("no all_reduce_perf result row in the log")
    elif parsed["wrong"] or (parsed["out_of_bounds"] or 0) > 0:
        problems.append(
            "wrong results at sizes {} ({} out-of-bounds values)".format(
                ", ".join(str(s) for s in parsed["wrong"]) or "none", parsed["out_of_bounds"] or 0
            )
        )
    elif floor.get("floor_gbs") is not None and parsed["busbw_gbs"] < floor["floor_gbs"]:
        problems.append(
            "busbw {} GB/s at {} bytes < floor {} GB/s (of {} GB/s, limited by {})".format(
                parsed["busbw_gbs"],
                largest["size"],
                floor["floor_gbs"],
                floor.get("theoretical_gbs"),
                floor.get("limited_by"),
            )
        )
    if problems:
        # A transport problem fails the run even when its bandwidth passes the floor.
        return _check(check_name, "failed", expected, measured, "; ".join(problems))
    if floor.get("floor_gbs") is None:
        return _check(
            check_name,
            "skipped",
            expected,
            measured,
            "no busbw floor: {}".format(floor.get("reason") or "gpu_expect gave none"),
        )
    return _check(check_name, "passed", expected, measured)
