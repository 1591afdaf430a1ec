"""No-op re-run of the lab's phases on 1, 3 and 6 lab nodes: seconds in total, per host, tasks per host.

For each size: `gpubring lab up --nodes N` (its own prefix and a temporary inventory), one
`gpubring up` to converge, then a timed `gpubring up` that should change nothing; `gpubring lab down`
afterwards whatever happens. Prints one row per size and the 6-node / 1-node ratio (goal: <= 2).
`--serial 100%` also times the same no-op with that gpubring_serial (the GPU play's batch size), and
each row says whether Docker builds or Molecule ran meanwhile (figures taken then are skewed).

    .venv/bin/python benchmarks/lab_noop.py [--sizes 1,3,6] [--distro debian12] [--forks N] [--serial 100%]

A 1-node lab's node is control plane and GPU node at once, so every size runs the same roles per host.
Needs a Docker engine (scripts/engine.sh) and a few GiB of disk; the first converge of each size
installs the host phase's packages, so the whole script takes a while; only the no-op run is timed.

Each row also gives the CPU seconds the no-op cost: the controller (gpubring, ansible-playbook and its
workers) and the lab's nodes (their containers' cgroups). The lab's nodes share this machine's cores
with the controller, so (controller + nodes) / cores is the shortest wall time any scheduling could
reach here; the script prints that floor beside the 6-node / 1-node ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PREFIX = "gpubbench"


def gpubring(*args: str | Path, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gpubring", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO, env=env,
    )  # fmt: skip


def must(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{tail}")


def host_stats(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per-host ok/changed/failed/unreachable/skipped from a run report (its `stats`)."""
    return {host: {k: int(v) for k, v in counts.items()} for host, counts in report["stats"].items()}


def tasks(stats: dict[str, int]) -> int:
    """Task results on a host (ansible's ok already counts the changed ones)."""
    return sum(stats.get(k, 0) for k in ("ok", "failed", "skipped", "unreachable"))


def busy() -> bool:
    """Whether Docker builds or Molecule run beside the benchmark (their load skews the figures)."""
    pattern = "molecule|debootstrap|docker import"
    probe = subprocess.run(["pgrep", "-f", pattern], capture_output=True, check=False)
    return probe.returncode == 0


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children and their descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def lab_cpu(prefix: str = PREFIX) -> float | None:
    """CPU seconds the lab's containers have used (their cgroups, v2 or v1); None when unreadable."""
    ids = subprocess.run(
        ["docker", "ps", "--quiet", "--no-trunc", "--filter", f"label=io.gpubring.lab.prefix={prefix}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    total = 0.0
    for cid in ids:
        v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat")
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
        if v2.is_file():
            stat = dict(line.split() for line in v2.read_text().splitlines())
            total += int(stat["usage_usec"]) / 1e6
        elif v1.is_file():
            total += int(v1.read_text()) / 1e9
        else:
            return None
    return total


def measure(
    nodes: int, distro: str, forks: int | None, serials: list[str], workdir: Path
) -> list[dict[str, Any]]:
    """Lab up, converge, then one timed no-op run per serial value ("" = the inventory's own)."""
    inventory = workdir / f"lab{nodes}"
    lab = ("--prefix", PREFIX, "--inventory-dir", inventory)
    run: tuple[str, ...] = ("--forks", str(forks)) if forks else ()
    rows: list[dict[str, Any]] = []
    try:
        must(
            gpubring("lab", "up", "--nodes", str(nodes), "--distro", distro, *lab), f"lab up --nodes {nodes}"
        )
        start = time.monotonic()
        must(gpubring("up", inventory, *run, "--json", workdir / f"converge{nodes}.json"), "converging run")
        converge = time.monotonic() - start
        for serial in serials:
            extra = ("-e", f"gpubring_serial={serial}") if serial else ()
            report = workdir / f"noop{nodes}-{serial.rstrip('%') or 'inventory'}.json"
            quiet = not busy()
            busy0, total0 = cpu_times()
            # The controller's CPU is read next to the run, so lab_cpu()'s own `docker ps` is not in it.
            nodes0 = lab_cpu()
            controller0 = children_cpu()
            start = time.monotonic()
            noop = gpubring("up", inventory, *run, *extra, "--json", report)
            seconds = time.monotonic() - start
            busy1, total1 = cpu_times()
            controller1 = children_cpu()
            nodes1 = lab_cpu()
            quiet = quiet and not busy()
            must(noop, "no-op run")
            data = json.loads(report.read_text())
            stats = host_stats(data)
            rows.append(
                {
                    "nodes": nodes,
                    "serial": serial or "inventory",
                    "converge_s": converge,
                    "noop_s": seconds,
                    "per_host_s": seconds / nodes,
                    "tasks_per_host": max(tasks(s) for s in stats.values()),
                    "changed": sum(s.get("changed", 0) for s in stats.values()),
                    "strategy": data.get("options", {}).get("strategy", "?"),
                    "quiet": quiet,
                    # The machine's CPUs busy during the no-op: well below 100 % means a serial bottleneck
                    # (one controller process), not a lack of cores.
                    "cpu_busy": (busy1 - busy0) / max(total1 - total0, 1),
                    "controller_cpu_s": controller1 - controller0,
                    "nodes_cpu_s": None if nodes0 is None or nodes1 is None else nodes1 - nodes0,
                }
            )
    finally:
        gpubring("lab", "down", *lab, timeout=600)
    return rows


def floor(row: dict[str, Any], cores: int) -> float | None:
    """The shortest wall time the run's CPU seconds allow on `cores` cores (None without the nodes')."""
    if row["nodes_cpu_s"] is None:
        return None
    return float(row["controller_cpu_s"] + row["nodes_cpu_s"]) / cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,3,6", help="lab sizes, comma-separated (default 1,3,6)")
    parser.add_argument("--distro", default="debian12", choices=("debian12", "debian13"))
    parser.add_argument("--forks", type=int, default=None, help="ansible forks (default: gpubring up's)")
    parser.add_argument(
        "--serial",
        default="",
        help="also time the no-op with these gpubring_serial values (comma-separated, e.g. 100%%); "
        "the inventory's own value is always timed first",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    serials = ["", *(s.strip() for s in args.serial.split(",") if s.strip())]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpubring-bench-") as tmp:
        for n in sizes:
            for row in measure(n, args.distro, args.forks, serials, Path(tmp)):
                rows.append(row)
                print(
                    f"{n} node(s), serial {row['serial']}: no-op re-run {row['noop_s']:.1f} s total, "
                    f"{row['per_host_s']:.1f} s per host, {row['tasks_per_host']} tasks per host, "
                    f"{row['changed']} changed (converge {row['converge_s']:.1f} s"
                    f"{'' if row['quiet'] else '; Docker builds or Molecule ran meanwhile'})",
                    flush=True,
                )
    print()
    cores = os.cpu_count() or 1
    print(
        "| nodes | serial | no-op (s) | per host (s) | tasks per host | changed | CPUs busy "
        f"| controller CPU (s) | nodes' CPU (s) | floor on {cores} cores (s) | quiet | converge (s) |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for r in rows:
        quiet = "yes" if r["quiet"] else "no"
        nodes_cpu = "n/a" if r["nodes_cpu_s"] is None else f"{r['nodes_cpu_s']:.1f}"
        least = floor(r, cores)
        print(
            f"| {r['nodes']} | {r['serial']} | {r['noop_s']:.1f} | {r['per_host_s']:.1f} | "
            f"{r['tasks_per_host']} | {r['changed']} | {r['cpu_busy']:.0%} | {r['controller_cpu_s']:.1f} | "
            f"{nodes_cpu} | {'n/a' if least is None else f'{least:.1f}'} | {quiet} | {r['converge_s']:.1f} |"
        )
    print(f"\nstrategy: {rows[0]['strategy'] if rows else '?'}")
    for serial in serials:
        by_size = {r["nodes"]: r for r in rows if r["serial"] == (serial or "inventory")}
        if 1 in by_size and 6 in by_size:
            one, six = by_size[1], by_size[6]
            ratio = six["noop_s"] / one["noop_s"]
            verdict = "meets" if ratio <= 2 else "misses"
            name = serial or "inventory"
            print(f"serial {name}: 6 nodes / 1 node = {ratio:.2f}x ({verdict} the goal of <= 2x)", end="")
            least = floor(six, cores)
            if least is not None:
                print(f"; its CPU seconds allow no less than {least / one['noop_s']:.2f}x", end="")
            print()


if __name__ == "__main__":
    main()
