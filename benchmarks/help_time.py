"""Median wall time of `gpubring --help` and whether start-up imports ansible.

Usage: .venv/bin/python benchmarks/help_time.py [--runs 20]
Target (issue 2): median <= 0.3 s, and no ansible / ansible_runner import. Prints figures only.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHECK_IMPORTS = """
import sys
sys.argv = ["gpubring", "--help"]
from gpubring.app import app
try:
    app()
except SystemExit:
    pass
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("ansible", "ansible_runner"))
print("ANSIBLE_MODULES", len(loaded), " ".join(loaded[:5]))
"""


def gpubring() -> str:
    script = Path(sys.executable).parent / "gpubring"
    return str(script) if script.exists() else "gpubring"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    subprocess.run([gpubring(), "--help"], capture_output=True, check=True)  # warm the page cache
    times: list[float] = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([gpubring(), "--help"], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    print(
        f"gpubring --help: median {statistics.median(times):.3f} s over {args.runs} runs "
        f"(min {min(times):.3f} s, max {max(times):.3f} s); target <= 0.3 s"
    )
    out = subprocess.run([sys.executable, "-c", CHECK_IMPORTS], capture_output=True, text=True, check=True)
    line = next((s for s in out.stdout.splitlines() if s.startswith("ANSIBLE_MODULES")), "ANSIBLE_MODULES ?")
    count = line.split()[1]
    verdict = "no" if count == "0" else f"YES ({' '.join(line.split()[2:])} ...)"
    print(f"ansible or ansible_runner imported by `gpubring --help`: {verdict}")


if __name__ == "__main__":
    main()
