"""Record tests/fixtures/events/acceptance.jsonl: run playbooks/acceptance.yml (roles/gpu_acceptance)
with ansible-runner against inventories/acceptance.yml and keep the job events, one JSON object a
line, trimmed to what gpubring reads: the event, its host, play, task and role, and of each result
`changed`, `msg` and the acceptance facts (the gpu_facts result, the tools' and the kernel log's
output are dropped: large, and this machine's). gpu-1 and gpu-2 read the synthetic sysfs trees built
here (H100s, each with its NDR rail NIC: healthy on gpu-1; on gpu-2 one at HDR, one down).

    .venv/bin/python tests/data/record_acceptance.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import ansible_runner

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "fixtures" / "events" / "acceptance.jsonl"
KEEP_DATA = ("host", "play", "playbook", "task", "role", "res", "ignore_errors", "name", "pattern")
KEEP_RES = ("changed", "msg", "failed", "skipped", "_ansible_no_log")
FACTS = ("gpu_acceptance_result", "gpu_acceptance_admission")
STATS = ("changed", "dark", "failures", "ignored", "ok", "processed", "rescued", "skipped")
# Per host, one H100 and one ConnectX-7 port per root port (PCI domain bus, port state, phys_state, rate).
NDR = "400 Gb/sec (4X NDR)"
RAILS = {
    "gpu-1": [("97", "4: ACTIVE", "5: LinkUp", NDR)],
    "gpu-2": [
        ("97", "4: ACTIVE", "5: LinkUp", NDR),
        ("a7", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)"),
        ("b7", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)"),
    ],
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _pci_function(root: Path, entry: Path, ids: tuple[str, str, str]) -> None:
    for name, value in zip(("vendor", "device", "class", "numa_node"), (*ids, "1"), strict=True):
        _write(entry / name, value)
    link = root / "sys/bus/pci/devices" / entry.name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(entry, link.parent))


def fake_tree(root: Path, host: str) -> None:
    """The host's rails in the kernel's sysfs layout (as tests/test_gpu_facts_module.py builds it): per
    rail, root port BB:01.0 on NUMA node 1 with an H100 at BB+4:00.0 and a ConnectX-7 (mlx5_N) at
    BB+3:00.0, its port 1 in the given state."""
    for index, (bus, state, phys_state, rate) in enumerate(RAILS[host]):
        port = root / f"sys/devices/pci0000:{bus}/0000:{bus}:01.0"
        _pci_function(root, port, ("0x8086", "0x352a", "0x060400"))
        gpu, nic = (port / f"0000:{int(bus, 16) + offset:02x}:00.0" for offset in (4, 3))
        _pci_function(root, gpu, ("0x10de", "0x2330", "0x030200"))
        _pci_function(root, nic, ("0x15b3", "0x1021", "0x020700"))
        ib = root / f"sys/class/infiniband/mlx5_{index}"
        ib.mkdir(parents=True)
        (ib / "device").symlink_to(os.path.relpath(nic, ib))
        _write(ib / "node_guid", f"a088:c203:0047:{bus}00")
        _write(ib / "fw_ver", "28.39.1002")
        values = {"state": state, "phys_state": phys_state, "link_layer": "InfiniBand", "rate": rate}
        for key, value in values.items():
            _write(ib / "ports/1" / key, value)
    for node, cpulist in ((0, "0-3"), (1, "4-7")):
        entry = root / f"sys/devices/system/node/node{node}"
        _write(entry / "cpulist", cpulist)
        _write(entry / "meminfo", f"Node {node} MemTotal:       4194304 kB")


def trim(event: dict[str, Any]) -> dict[str, Any]:
    data = event.get("event_data") or {}
    keep = (*STATS, "playbook") if event.get("event") == "playbook_on_stats" else KEEP_DATA
    data = {k: v for k, v in data.items() if k in keep}
    if "playbook" in data:
        data["playbook"] = Path(data["playbook"]).name
    res = data.get("res")
    if isinstance(res, dict):
        trimmed = {k: v for k, v in res.items() if k in KEEP_RES}
        facts = {k: v for k, v in (res.get("ansible_facts") or {}).items() if k in FACTS}
        if facts:
            trimmed["ansible_facts"] = facts
        data["res"] = trimmed
    return {"counter": event.get("counter"), "event": event.get("event"), "event_data": data}


def main() -> int:
    from gpubring.paths import collections_path

    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_COLLECTIONS_PATH": os.environ.get("ANSIBLE_COLLECTIONS_PATH") or str(collections_path()),
        "ANSIBLE_CACHE_PLUGIN": "memory",
    }
    wanted = ("playbook_on_start", "playbook_on_play_start", "playbook_on_stats")
    with tempfile.TemporaryDirectory() as tmp:
        trees = Path(tmp) / "trees"
        for host in RAILS:
            fake_tree(trees / host, host)
        (Path(tmp) / "run").mkdir()
        runner = ansible_runner.run(
            private_data_dir=str(Path(tmp) / "run"),
            playbook=str(HERE / "playbooks" / "acceptance.yml"),
            inventory=[str(HERE / "inventories" / "acceptance.yml")],
            extravars={"acceptance_test_dir": str(trees)},
            envvars=env,
            quiet=True,
        )
        lines = [
            json.dumps(trim(event), sort_keys=True)
            for event in runner.events
            if event.get("event") in wanted or str(event.get("event")).startswith("runner_on_")
        ]
        summary = f"{len(lines)} events, rc {runner.rc}, stats {runner.stats}"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
