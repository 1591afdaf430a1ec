"""Time `gpubring upgrade INVENTORY --check` (the plan; no host reached) on a generated inventory whose
record says every node runs the previous Kubernetes minor release and an older driver, so every
node is planned and drained. The inventory lists the cluster phase as check-only, so `--check` does not
read kubeadm's own plan on its (made-up) first control plane. Prints wall time, peak RSS and the plan's
size; asserts nothing.

Usage: .venv/bin/python benchmarks/upgrade_plan_scale.py [--nodes 1000] [--runs 3]
Target (issue 13): <= 5 s at 1,000 nodes.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from plan_scale import gpubring, write_inventory


def write_record(folder: Path) -> int:
    """installed.json: every host one minor release of Kubernetes behind the pin (1.35.9 -> 1.34.0)."""
    from gpubring.versions import load_pinned

    major, minor = load_pinned()["kubernetes"]["version"].split(".")[:2]
    previous = f"{major}.{int(minor) - 1}.0"
    hosts: dict[str, dict[str, str]] = {}
    for line in (folder / "hosts.yml").read_text().splitlines():
        name = line.strip().rstrip(":")
        if line.startswith("        ") and not line.startswith("          ") and name:
            hosts[name] = {"kubernetes": previous, "nvidia_driver": "580.0.0"}
    record = folder / ".gpubring" / "installed.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"format": 1, "hosts": hosts, "releases": {}, "runs": {}}))
    return len(hosts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / f"inv-{nodes}"
            folder.mkdir()
            write_inventory(folder, nodes)
            (folder / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
            (folder / "group_vars" / "all" / "zz-bench-phases.yml").write_text(
                "gpubring_phases: [preflight, host]\ngpubring_phases_check_only: [cluster, platform]\n"
            )
            recorded = write_record(folder)
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                command = [gpubring(), "upgrade", str(folder), "--check"]
                proc = subprocess.run(command, capture_output=True, text=True, check=False)
                times.append(time.perf_counter() - start)
                if proc.returncode != 0:
                    print(f"gpubring upgrade --check exited {proc.returncode}:\n{proc.stderr[-2000:]}")
                    sys.exit(1)
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            drained = next((ln for ln in proc.stdout.splitlines() if "drained once each" in ln), "?")
            print(
                f"{nodes} nodes ({recorded} recorded): upgrade --check "
                f"median {statistics.median(times):.2f} s "
                f"(min {min(times):.2f} s) of {args.runs}, peak RSS {peak_mb:.0f} MB, "
                f"{len(proc.stdout.splitlines())} plan lines; {drained}"
            )


if __name__ == "__main__":
    main()
