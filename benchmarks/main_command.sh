#!/usr/bin/env bash
# Time the README's main command (scripts/lab.sh) as a new user meets it: a fresh clone of this
# checkout (so a new .venv is installed from PyPI), no test-host image (it is built), then the 3-node
# lab and `gpubring up inventories/lab`. Target: <= 15 minutes on 2 cores.
#
#   bash benchmarks/main_command.sh [debian12|debian13]
#
# Debian packages already installed stay installed (they cannot be taken back from a running
# machine); on a truly fresh machine add their download and install time. The lab uses the prefix
# gpubmain, so a `gpub` lab of yours is left alone; it is removed afterwards, with the clone.
# Prints the figures; asserts nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DISTRO=${1:-debian12}
WORK=$(mktemp -d /tmp/gpubring-main-XXXXXX)
CLONE=$WORK/gpubring
LOG=$WORK/lab.log

cleanup() {
  if [[ -x $CLONE/.venv/bin/gpubring ]]; then
    (cd "$CLONE" && .venv/bin/gpubring lab down >/dev/null 2>&1) || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

git clone -q "$ROOT" "$CLONE"
bash "$ROOT/scripts/engine.sh" >/dev/null
docker image rm -f "gpubring-testhost:$DISTRO" >/dev/null 2>&1 || true

cd "$CLONE"
rc=0
start=$SECONDS
bash scripts/lab.sh --prefix gpubmain --distro "$DISTRO" >"$LOG" 2>&1 || rc=$?
elapsed=$((SECONDS - start))

grep -E '^(ok|failed|unreachable|cancelled) \(exit' "$LOG" | tail -1 || true
echo "scripts/lab.sh ($DISTRO, cold image, new .venv): $((elapsed / 60)) min $((elapsed % 60)) s, exit $rc"
