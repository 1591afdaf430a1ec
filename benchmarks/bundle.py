"""Time the bundle's apt repositories for the sample inventory's Debian part, cold and warm.

Usage: .venv/bin/python benchmarks/bundle.py [--inventory inventories/prod] [--releases debian-bookworm
       debian-trixie] [--dir DIR] [--keep]

Cold: an empty bundle folder and an empty apt work folder (no package lists, no .deb in apt's cache):
the package lists of each release are fetched from this machine's Debian archive sources and every .deb
downloaded. Warm: the same call again on the same folders: the lists are fresh (under an hour old),
apt's cache holds every .deb, so the run resolves, links and indexes only. Both go through
gpubring.bundle.apt.build, as `gpubring bundle` calls it. The third-party repositories the sample
names (Docker's, NVIDIA's CUDA and toolkit ones, pkgs.k8s.io) are not reachable from the build
machines: each is tried (5 s timeout) and listed missing, with the packages only they carry.

Prints, per run: wall and CPU seconds (this process and its children: apt, dpkg-scanpackages), the
packages fetched and missing, the repository size per release, and apt's work folder size (its lists
and cache: what a warm run reuses). Needs Debian's archive (network); asserts nothing but that the
warm run downloaded nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from gpubring.bundle import apt, packages
from gpubring.inventory import load_inventory

REPO = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--inventory", type=Path, default=REPO / "inventories" / "prod")
    parser.add_argument("--releases", nargs="+", default=["debian-bookworm", "debian-trixie"])
    parser.add_argument("--dir", type=Path, help="bundle folder (default: a fresh temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the bundle folder")
    args = parser.parse_args()

    chosen = [r for r in packages.RELEASES if r.key in args.releases]
    inv = load_inventory(args.inventory)
    folder = args.dir or Path(tempfile.mkdtemp(prefix="gpubring-bundle-bench-"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    work = folder / apt.WORK_DIR / apt.APT_DIR
    print(f"inventory {args.inventory}, releases {', '.join(r.key for r in chosen)}, bundle {folder}")
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    archives: dict[Path, int] = {}
    for run in ("cold", "warm"):
        wall, cpu = time.monotonic(), _cpu()
        entries = apt.build(inv, folder, targets=chosen, timeout=5)
        wall, cpu = time.monotonic() - wall, _cpu() - cpu
        counts = Counter((e.kind, e.status) for e in entries)
        print(
            f"{run}: {wall:.1f} s wall, {cpu:.1f} s CPU; {counts[('apt', 'fetched')]} packages fetched, "
            f"{counts[('apt', 'missing')]} missing, {counts[('apt-repo-missing', 'missing')]} third-party "
            f"repositories unreachable"
        )
        for release in chosen:
            repo = folder / apt.APT_DIR / release.key
            debs = list(repo.glob("*.deb"))
            used = _mib(_size(work / release.key))
            print(f"  {release.key}: {len(debs)} .deb, {_mib(_size(repo))} (repository), apt work {used}")
        now = {p: p.stat().st_mtime_ns for p in work.glob("*/archives/*.deb")}
        if run == "warm" and now != archives:
            raise SystemExit("the warm run downloaded again: apt's cache did not resume")
        archives = now
    print(f"bundle apt/ total {_mib(_size(folder / apt.APT_DIR))}; missing, by source:")
    for entry in entries:
        if entry.status == "missing" and entry.kind == "apt-repo-missing":
            print(f"  {entry.version} {entry.name}: {entry.source}: {entry.reason}")
    if not args.keep and args.dir is None:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
