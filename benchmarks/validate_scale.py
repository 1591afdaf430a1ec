"""Time inventory validation at scale and on pathological files; print wall time and peak RSS.

Usage: .venv/bin/python benchmarks/validate_scale.py [--nodes 10000] [--runs 3]
Targets (issue 11): validation of a 10,000-node inventory <= 1 s; each pathological file (alias bomb,
100,000-deep nesting, a 40 MiB file, a symlink loop, duplicate keys) refused in <= 1 s and <= 200 MB.
Each figure is taken in a fresh process, so imports and caches count. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_scale import SAMPLE, write_inventory

# Runs in a fresh interpreter: load (and validate) the inventory, print seconds, peak RSS and the outcome.
PROBE = """
import json, sys, time
start = time.perf_counter()
from gpubring.inventory import InventoryError, load_inventory
try:
    load_inventory(sys.argv[1])
    outcome = "valid"
except InventoryError as exc:
    outcome = "refused: " + str(exc.problems[0])[:150]
took = time.perf_counter() - start
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"s": took, "rss_mb": hwm / 1024, "outcome": outcome}))
"""


def probe(folder: Path) -> dict[str, float | str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        return {"s": float("nan"), "rss_mb": float("nan"), "outcome": f"crashed ({done.returncode})"}
    result: dict[str, float | str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _laughs(path: Path) -> None:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    path.write_text("\n".join(lines) + "\n")


def _loop(path: Path) -> None:
    folder = path.parent / "loop"
    folder.mkdir()
    (folder / "again").symlink_to(folder)


PATHOLOGICAL: dict[str, Callable[[Path], None]] = {
    "billion laughs (9 levels)": _laughs,
    "100,000-deep list": lambda p: p.write_bytes(b"fuzz_deep: " + b"[" * 100_000 + b"]" * 100_000 + b"\n"),
    "40 MiB file": lambda p: p.write_bytes(b"fuzz_big: '" + b"x" * (40 << 20) + b"'\n"),
    "symlink loop": _loop,
    "duplicate key": lambda p: p.write_text("gpubring_cni: calico\ngpubring_cni: cilium\n"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in args.nodes:
            folder = Path(tmp) / f"n{nodes}"
            folder.mkdir()
            write_inventory(folder, nodes)
            runs = [probe(folder) for _ in range(args.runs)]
            seconds = [float(r["s"]) for r in runs]
            print(
                f"validate {nodes} nodes: median {statistics.median(seconds):.2f} s of {args.runs} "
                f"(min {min(seconds):.2f}), peak {max(float(r['rss_mb']) for r in runs):.0f} MB, "
                f"{runs[0]['outcome']}"
            )
        for name, make in PATHOLOGICAL.items():
            folder = Path(tmp) / name.replace(" ", "-").replace(",", "")
            shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns(".gpubring"))
            make(folder / "group_vars" / "all" / "zz-pathological.yml")
            result = probe(folder)
            took, peak = float(result["s"]), float(result["rss_mb"])
            print(f"{name}: {took:.2f} s, peak {peak:.0f} MB, {result['outcome']}")


if __name__ == "__main__":
    main()
