#!/usr/bin/env bash
# The README's main command: on a fresh Debian 12 machine, as root, from this checkout:
#
#   scripts/lab.sh [extra `gpubring lab up` options, e.g. --distro debian13]
#
# 1. scripts/setup.sh: Debian packages, .venv with gpubring, the Docker engine (safe to run again);
# 2. `gpubring lab up --nodes 3 --control-planes 1`: builds the test-host image when its recipe changed,
#    starts gpub-cp1, gpub-gpu1 and gpub-gpu2 with sshd on 127.0.0.1 ports, writes inventories/lab/;
# 3. `gpubring up inventories/lab`: the lab's phases over real SSH; prints the per-host summary.
#
# Exits with `gpubring up`'s code (0 success, 1 a task failed, 2 bad input, 3 cancelled, 4 unreachable).
# The lab stays up afterwards: `gpubring lab status`, `gpubring up inventories/lab` again (0 changed),
# `gpubring lab down` to remove it. docs/lab.md explains the lab.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

log() { printf '==> %s\n' "$*"; }
start=$SECONDS

bash scripts/setup.sh

log "gpubring lab up --nodes 3 --control-planes 1 $*"
.venv/bin/gpubring lab up --nodes 3 --control-planes 1 "$@"

log "gpubring up inventories/lab"
rc=0
.venv/bin/gpubring up inventories/lab || rc=$?

elapsed=$((SECONDS - start))
log "done in $((elapsed / 60)) min $((elapsed % 60)) s (exit $rc); the lab is still up: gpubring lab status | gpubring lab down"
exit "$rc"
