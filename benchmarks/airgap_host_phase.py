"""The air-gapped lab's host phase beside the online one, on a 1-node lab (control plane and GPU node).

For each mode: `gpubring lab up --nodes 1` (its own prefix and a temporary inventory; air-gapped with
`--airgap BUNDLE`), a timed first `gpubring up --only preflight,host` (installs everything: kernel
headers, DKMS build of the NVIDIA driver, containerd, RDMA), then a timed second one that must change
nothing; `gpubring lab down` afterwards whatever happens. The air-gapped mode also asserts, from inside
the node, that apt names only the mirror and that a TCP connection out (1.1.1.1:443) fails, and that
`-e nvidia_container_toolkit_owner=host` (NVIDIA's repository needed, gpubring_apt_mirror empty) makes
the preflight phase fail within seconds naming the download and the variable.

    .venv/bin/python benchmarks/airgap_host_phase.py [--bundle DIR] [--modes airgap,online]

The bundle: the one `lab up --airgap` builds for the lab (the default folder, under ~/.cache), or
`gpubring bundle INVENTORY DIR` of an inventory with a Debian 12 GPU node (DIR/apt/debian-bookworm/).
Both modes share the lab's compiler cache (ccache), so the second mode's DKMS build reads what the first
wrote: run the modes in both orders, or compare the second runs, for fair figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from lab_noop import gpubring, must  # benchmarks/ beside this script

REPO = Path(__file__).resolve().parent.parent


def changed(report: Path) -> int:
    data: dict[str, Any] = json.loads(report.read_text())
    return sum(int(s.get("changed", 0)) for s in data["stats"].values())


def on(node: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "exec", node, "bash", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def airgap_checks(node: str, inventory: Path) -> dict[str, Any]:
    sources = on(node, "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | grep -v '^#'")
    lines = [line for line in sources.stdout.splitlines() if line.strip()]
    out = on(node, "timeout 10 bash -c 'exec 3<>/dev/tcp/1.1.1.1/443' && echo OPEN || echo CLOSED")
    started = time.monotonic()
    empty = gpubring("up", inventory, "--only", "preflight", "-e", "nvidia_container_toolkit_owner=host")
    seconds = time.monotonic() - started
    text = empty.stdout + empty.stderr
    return {
        "apt_sources": lines,
        "only_the_mirror": all("-mirror/apt/" in line for line in lines) and bool(lines),
        "outside": out.stdout.strip(),
        "empty_mirror_exit": empty.returncode,
        "empty_mirror_seconds": round(seconds, 1),
        "empty_mirror_named": "nvidia.github.io" in text and "gpubring_apt_mirror" in text,
    }


def one(mode: str, bundle: Path | None, workdir: Path) -> dict[str, Any]:
    prefix = f"gpubair{mode[:3]}"
    inventory = workdir / mode
    extra = ["--airgap", str(bundle)] if mode == "airgap" and bundle else []
    row: dict[str, Any] = {"mode": mode}
    try:
        started = time.monotonic()
        must(
            gpubring("lab", "up", "--nodes", "1", "--prefix", prefix, "--inventory-dir", inventory, *extra),
            "lab up",
        )
        row["lab_up_s"] = round(time.monotonic() - started, 1)
        for run in ("first", "second"):
            report = workdir / f"{mode}-{run}.json"
            started = time.monotonic()
            must(gpubring("up", inventory, "--only", "preflight,host", "--json", report), f"{mode} {run} up")
            row[f"{run}_s"] = round(time.monotonic() - started, 1)
            row[f"{run}_changed"] = changed(report)
        if mode == "airgap":
            row.update(airgap_checks(f"{prefix}-cp1", inventory))
    finally:
        gpubring("lab", "down", "--prefix", prefix, "--inventory-dir", inventory, "--purge")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bundle",
        type=Path,
        default=Path.home() / ".cache" / "gpubring" / "airgap-bench-bundle",
        help="the bundle folder: `lab up --airgap` builds its apt part there when it is new, empty or its "
        "own (default: %(default)s); a bundle of yours with apt/debian-bookworm is served as it is",
    )
    parser.add_argument("--modes", default="airgap,online")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpubring-airgap-bench-") as tmp:
        for mode in args.modes.split(","):
            rows.append(one(mode, args.bundle.resolve(), Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    print(f"{'mode':8} {'lab up':>8} {'first up':>9} {'changed':>8} {'second up':>10} {'changed':>8}")
    for r in rows:
        print(
            f"{r['mode']:8} {r['lab_up_s']:>7}s {r['first_s']:>8}s {r['first_changed']:>8} "
            f"{r['second_s']:>9}s {r['second_changed']:>8}"
        )


if __name__ == "__main__":
    main()
