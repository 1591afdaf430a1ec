"""Time `gpubring plan` on the sample inventory and on generated inventories; print wall time and RSS.

Usage: .venv/bin/python benchmarks/plan_scale.py [--nodes 1000 10000] [--runs 3] [--no-sample]
Targets: <= 3 s and <= 300 MB peak RSS at 1,000 nodes (issue 2); <= 1.5 s at 10,000 nodes (issue 11).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "inventories" / "prod"


def gpubring() -> str:
    script = Path(sys.executable).parent / "gpubring"
    return str(script) if script.exists() else "gpubring"


def write_inventory(folder: Path, nodes: int) -> dict[str, int]:
    """3 control planes, 90% GPU nodes, the rest CPU nodes; group_vars copied from the sample."""
    shutil.copytree(SAMPLE / "group_vars", folder / "group_vars")
    gpus = int(nodes * 0.9)
    counts = {"control_plane": 3, "gpu_nodes": gpus, "cpu_nodes": nodes - 3 - gpus}
    lines = ["---", "all:", "  children:"]
    index = 0
    for group, count in counts.items():
        lines += [f"    {group}:", "      hosts:"]
        for n in range(1, count + 1):
            index += 1
            address = f"10.{index // 65536}.{index // 256 % 256}.{index % 256}"
            lines += [f"        {group.split('_')[0]}-{n:04d}:", f"          ansible_host: {address}"]
    (folder / "hosts.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return counts


def time_plan(folder: Path, runs: int) -> tuple[list[float], float, int]:
    """Wall times of `gpubring plan`, then of `plan --json -` (and its size), in fresh processes."""
    times: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run([gpubring(), "plan", str(folder)], capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            print(f"gpubring plan exited {proc.returncode}:\n{proc.stderr[-2000:]}")
            sys.exit(1)
    json_start = time.perf_counter()
    proc = subprocess.run(
        [gpubring(), "plan", str(folder), "--json", "-"], capture_output=True, text=True, check=False
    )
    return times, time.perf_counter() - json_start, len(proc.stdout)


def report(label: str, folder: Path, runs: int) -> None:
    times, json_time, json_size = time_plan(folder, runs)
    print(
        f"{label}: gpubring plan median {statistics.median(times):.2f} s over {runs} runs "
        f"(min {min(times):.2f} s, max {max(times):.2f} s); "
        f"--json -: {json_time:.2f} s, {json_size / 1e6:.1f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-sample", action="store_true", help="skip inventories/prod")
    args = parser.parse_args()
    if not args.no_sample:
        report(f"inventories/prod ({SAMPLE})", SAMPLE, args.runs)
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "inventory"
            counts = write_inventory(folder, nodes)
            report(f"{nodes} nodes {counts}", folder, args.runs)
    # ru_maxrss of RUSAGE_CHILDREN: the largest child so far, in KiB on Linux.
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of the largest run: {peak_mb:.0f} MB; target <= 300 MB")


if __name__ == "__main__":
    main()
