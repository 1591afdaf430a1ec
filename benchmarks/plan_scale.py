"""Time `gpubring plan` on a generated 1,000-node inventory and print wall time and peak RSS.

Usage: .venv/bin/python benchmarks/plan_scale.py [--nodes 1000] [--runs 3]
Targets (issue 2): <= 3 s and <= 300 MB peak RSS. Prints figures; asserts nothing.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "inventory"
        counts = write_inventory(folder, args.nodes)
        print(f"inventory: {args.nodes} nodes {counts} in {folder}")
        times: list[float] = []
        for _ in range(args.runs):
            start = time.perf_counter()
            proc = subprocess.run(
                [gpubring(), "plan", str(folder)], capture_output=True, text=True, check=False
            )
            times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                print(f"gpubring plan exited {proc.returncode}:\n{proc.stderr[-2000:]}")
                sys.exit(1)
        json_start = time.perf_counter()
        proc = subprocess.run(
            [gpubring(), "plan", str(folder), "--json", "-"], capture_output=True, text=True, check=False
        )
        json_time = time.perf_counter() - json_start
    # ru_maxrss of RUSAGE_CHILDREN: the largest child so far, in KiB on Linux.
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"gpubring plan: median {statistics.median(times):.2f} s over {args.runs} runs "
        f"(min {min(times):.2f} s, max {max(times):.2f} s); target <= 3 s"
    )
    print(f"gpubring plan --json -: {json_time:.2f} s, {len(proc.stdout) / 1e6:.1f} MB of JSON")
    print(f"peak RSS: {peak_mb:.0f} MB; target <= 300 MB")


if __name__ == "__main__":
    main()
