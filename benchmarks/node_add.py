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

Against inventories of growing size (issue 26: node add stays O(1) in cluster size), on the converged
lab of benchmarks/fleet_noop.py (its --lab-dir, kept with --keep-lab or --converge-only):

    .venv/bin/python benchmarks/node_add.py --fleet-lab DIR [--sizes 1,10,30] [--lab-nodes 3]
        [--lab-cpu-nodes 1] [--prefix gpubfleet] [--keep-lab] [--json out.json]

3. `gpubring lab up` grows that lab by one fresh CPU-only container per size, plus one for the baseline
   (`<prefix>-cpu2`, ...; the lab's own containers are reused as they are).
4. Baseline: `gpubring up --only preflight,host --limit NEW` of the first fresh node, in the smallest
   fleet inventory: the preflight and host phase of one fresh CPU node alone.
5. Per size K: a fleet inventory (fleet_noop.write_fleet_inventory) with every converged lab node under
   K names (the control plane under 3, or 1 below 3) and the next fresh node under one name, then a
   timed `gpubring node add FLEET NEW`; its report must name only NEW. A fresh node is not in any
   inventory before its own turn.
Prints, per size, the hosts already in the inventory, the wall time, its ratio to the baseline and to the
smallest size, and the time per host the inventory adds (the slope); saved to --json after each figure.
`gpubring lab down` of the fleet lab at the end unless --keep-lab.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from fleet_noop import PREFIX as FLEET_PREFIX
from fleet_noop import alias_names, alias_plan, sshd_for_aliases, write_fleet_inventory
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


def _timed(*args: str | Path) -> tuple[float, dict[str, Any]]:
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


def fresh_nodes(prefix: str, cpu_nodes: int, count: int) -> list[str]:
    """The names `gpubring lab up --cpu-nodes cpu_nodes + count` gives the CPU nodes it adds."""
    return [f"{prefix}-cpu{i}" for i in range(cpu_nodes + 1, cpu_nodes + count + 1)]


def add_plan(
    lab_hosts: Mapping[str, Any], aliases: int, fresh: Sequence[str], new: str
) -> dict[str, list[str]]:
    """The fleet inventory's names for one node add: every converged lab node under `aliases` names,
    the node added under one, the other fresh nodes (not yet added) left out."""
    plan = {h: n for h, n in alias_plan(lab_hosts, aliases).items() if h not in fresh}
    plan[new] = alias_names(new, 1)
    return plan


def inventory_hosts(plan: Mapping[str, Sequence[str]], new: str) -> int:
    """The hosts already in the inventory when `new` is added."""
    return sum(len(names) for host, names in plan.items() if host != new)


def scaling_lines(baseline: float, adds: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per size: hosts already in the inventory, node add's wall time, its ratio to the lone node's
    phases and to the smallest inventory's node add; then the slope (seconds per inventory host)."""
    if not adds:
        return []
    first = adds[0]
    lines = [
        f"{a['inventory_hosts']} hosts in the inventory: node add {a['wall_s']:.1f} s, "
        f"{a['wall_s'] / baseline:.2f}x the lone node's preflight + host ({baseline:.1f} s), "
        f"{a['wall_s'] / first['wall_s']:.2f}x the node add into {first['inventory_hosts']}"
        for a in adds
    ]
    last = adds[-1]
    if last["inventory_hosts"] > first["inventory_hosts"]:
        slope = (last["wall_s"] - first["wall_s"]) / (last["inventory_hosts"] - first["inventory_hosts"])
        lines.append(
            f"slope: {slope * 1000:+.0f} ms per inventory host from {first['inventory_hosts']} to "
            f"{last['inventory_hosts']} hosts"
        )
    return lines


def fleet_scaling(args: argparse.Namespace) -> None:
    """node add into fleet inventories of growing size (the docstring's steps 3-5)."""
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    lab_dir: Path = args.fleet_lab
    lab = ("--prefix", args.prefix, "--inventory-dir", lab_dir)
    fresh = fresh_nodes(args.prefix, args.lab_cpu_nodes, len(sizes) + 1)
    out: Path = args.json or lab_dir.parent / "node_add_scaling.json"
    record: dict[str, Any] = {"sizes": sizes, "baseline_s": None, "adds": []}
    work = Path(tempfile.mkdtemp(prefix="gpubring-nodeadd-"))
    try:
        shape = (
            "--nodes",
            str(args.lab_nodes + len(fresh)),
            "--cpu-nodes",
            str(args.lab_cpu_nodes + len(fresh)),
        )
        _lab_shape(args.prefix, lab_dir, shape, args.distro)
        sshd_for_aliases(args.prefix)
        lab_hosts = yaml.safe_load((lab_dir / "hosts.yml").read_text(encoding="utf-8"))
        new = fresh[0]
        plan = add_plan(lab_hosts, min(sizes), fresh, new)
        write_fleet_inventory(lab_dir, work / "baseline", plan)
        name = plan[new][0]
        base, report = _timed("up", work / "baseline", "--only", "preflight,host", "--limit", name)
        record["baseline_s"] = base
        out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"baseline: preflight + host phase of the fresh CPU node {name} alone: {base:.1f} s "
              f"(report hosts: {', '.join(sorted(report.get('stats', {})))})", flush=True)  # fmt: skip
        for size, new in zip(sizes, fresh[1:], strict=True):
            plan = add_plan(lab_hosts, size, fresh, new)
            fleet = work / f"fleet{size}"
            write_fleet_inventory(lab_dir, fleet, plan)
            name = plan[new][0]
            add, report = _timed("node", "add", fleet, name)
            hosts = sorted(report.get("stats", {}))
            entry = {"aliases": size, "inventory_hosts": inventory_hosts(plan, new), "node": name,
                     "wall_s": add, "report_hosts": hosts}  # fmt: skip
            record["adds"].append(entry)
            out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            print(f"node add of {name} into {entry['inventory_hosts']} hosts: {add:.1f} s; report hosts: "
                  f"{', '.join(hosts)}", flush=True)  # fmt: skip
            if hosts != [name]:
                raise SystemExit(f"node add worked {hosts}, not only {name}")
    finally:
        if not args.keep_lab:
            gpubring("lab", "down", *lab, timeout=600)
        print(f"figures: {out}")
        if record["baseline_s"]:
            print("\n".join(scaling_lines(record["baseline_s"], record["adds"])))


def _lab_shape(prefix: str, folder: Path, shape: Sequence[str], distro: str) -> None:
    up = gpubring("lab", "up", *shape, "--prefix", prefix, "--inventory-dir", folder, "--distro", distro)
    if up.returncode != 0:
        raise SystemExit(f"gpubring lab up {' '.join(shape)} failed:\n{up.stdout[-3000:]}{up.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--distro", default="debian12")
    parser.add_argument("--fleet-lab", type=Path, default=None, help="fleet_noop.py's converged lab folder")
    parser.add_argument("--prefix", default=FLEET_PREFIX, help=f"that lab's prefix ({FLEET_PREFIX})")
    parser.add_argument(
        "--sizes", default="1,10,30", help="aliases per lab node, one node add each (1,10,30)"
    )
    parser.add_argument("--lab-nodes", type=int, default=3, help="that lab's --nodes (3)")
    parser.add_argument("--lab-cpu-nodes", type=int, default=1, help="that lab's --cpu-nodes (1)")
    parser.add_argument("--keep-lab", action="store_true", help="leave the fleet lab up afterwards")
    parser.add_argument("--json", type=Path, default=None, help="the figures (saved after each one)")
    args = parser.parse_args()
    if args.fleet_lab:
        fleet_scaling(args)
        return
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
        hosts = sorted(report.get("stats", {}))
        shown = ", ".join(hosts)
        print(f"node add of {new} to the {args.nodes}-node lab: {add:.1f} s; report hosts: {shown}")
        print(f"node add / baseline = {add / base:.2f}x (goal <= 1.3x)")


if __name__ == "__main__":
    main()
