"""`gpubring node add` of one node to a converged lab of N nodes, against the same phases on a lone node.

1. A 1-node lab (its node is control plane and GPU node at once, so it gets the GPU roles, as the added
   GPU node does): `gpubring lab up --nodes 1`, then a timed `gpubring up --only preflight,host`, the
   baseline: the host phase (and the preflight it needs) of one fresh node.
2. An N-node lab (default 6: one control plane, the rest GPU nodes), converged with `gpubring up`; then
   `gpubring lab up --nodes N+1` adds one GPU node, and a timed `gpubring node add` joins it (preflight,
   host and verify on that node; the lab leaves the cluster phase out). The run report must name only
   the new node.
Prints both wall times, their ratio (goal: node add <= 1.3x the baseline) and the hosts of the node add's
report; `gpubring lab down` afterwards whatever happens. Asserts nothing.

    .venv/bin/python benchmarks/node_add.py [--nodes 6] [--distro debian12]

Needs a Docker engine (scripts/engine.sh); takes a while (the N-node converge builds the driver on each
GPU node). Nothing else should run meanwhile: the lab's nodes share this machine's cores.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from lab_noop import gpubring

PREFIX = "gpubadd"


def _lab(prefix: str, folder: Path, nodes: int, distro: str) -> None:
    up = gpubring(
        "lab", "up", "--nodes", str(nodes), "--prefix", prefix, "--inventory-dir", folder, "--distro", distro
    )
    if up.returncode != 0:
        raise SystemExit(f"gpubring lab up --nodes {nodes} failed:\n{up.stdout[-3000:]}{up.stderr[-3000:]}")


def _down(prefix: str, folder: Path) -> None:
    gpubring("lab", "down", "--purge", "--prefix", prefix, "--inventory-dir", folder)


def _timed(*args: str | Path) -> tuple[float, dict[str, object]]:
    report = Path(tempfile.mkstemp(suffix=".json")[1])
    start = time.perf_counter()
    run = gpubring(*args, "--json", report)
    took = time.perf_counter() - start
    if run.returncode != 0:
        command = " ".join(map(str, args))
        raise SystemExit(f"gpubring {command} failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
    data = json.loads(report.read_text())
    report.unlink()
    return took, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--distro", default="debian12")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "many"
        try:
            _lab(f"{PREFIX}1", one, 1, args.distro)
            base, _ = _timed("up", one, "--only", "preflight,host")
        finally:
            _down(f"{PREFIX}1", one)
        print(f"baseline: preflight + host phase of one fresh node: {base:.1f} s")
        try:
            _lab(f"{PREFIX}n", many, args.nodes, args.distro)
            converge, _ = _timed("up", many)
            print(f"{args.nodes}-node lab converged in {converge:.1f} s (not part of the figure)")
            _lab(f"{PREFIX}n", many, args.nodes + 1, args.distro)
            new = f"{PREFIX}n-gpu{args.nodes}"
            add, report = _timed("node", "add", many, new)
        finally:
            _down(f"{PREFIX}n", many)
        hosts = sorted(report.get("stats", {}))  # type: ignore[call-overload]
        shown = ", ".join(hosts)
        print(f"node add of {new} to the {args.nodes}-node lab: {add:.1f} s; report hosts: {shown}")
        print(f"node add / baseline = {add / base:.2f}x (goal <= 1.3x)")


if __name__ == "__main__":
    main()
