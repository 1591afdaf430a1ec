#!/usr/bin/env bash
# Time one Molecule scenario end to end (`molecule test -s NAME`: create, converge, idempotence,
# verify, destroy) on a warm machine: the engine runs and the image is built before the clock starts.
#
#   benchmarks/molecule_scenario.sh [SCENARIO]      (default: kernel; MOLECULE_DISTRO picks the image)
#
# Prints the figure; asserts nothing. The scenario's output goes to .gpubring/molecule/bench-NAME.log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
NAME=${1:-kernel}
DISTRO=${MOLECULE_DISTRO:-debian12}
[[ -x .venv/bin/molecule ]] && export PATH="$ROOT/.venv/bin:$PATH"
export MOLECULE_GLOB=${MOLECULE_GLOB:-molecule/*/molecule.yml}
LOG=$ROOT/.gpubring/molecule/bench-$NAME.log
mkdir -p "$(dirname "$LOG")"

scripts/engine.sh >/dev/null
molecule/images/build.sh "$DISTRO" >/dev/null
python3 -c 'from gpubring.paths import collections_path; collections_path()'

start=$(date +%s.%N)
rc=0
molecule test -s "$NAME" >"$LOG" 2>&1 || rc=$?
end=$(date +%s.%N)
took=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
status=passed
((rc == 0)) || status="FAILED (exit $rc, log: ${LOG#"$ROOT"/})"
echo "molecule test -s $NAME on $DISTRO, $(nproc) cores: ${took} s, $status"
exit "$rc"
