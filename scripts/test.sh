#!/usr/bin/env bash
# The whole test suite: ruff, mypy --strict, ansible-lint (production profile), ansible-test sanity,
# pytest (the e2e lab from the start, beside the unit and rendering tests on both cores) and `molecule
# test` for every role scenario (GPUBRING_MOLECULE_JOBS at a time, default 2, the e2e lab counting as
# one while it runs; a scenario whose inputs have not changed since a pass comes from the result cache).
# Every step runs even when an earlier one failed; a table of each step's time follows, with the
# budget; the last line counts the Molecule scenarios as `N passed, N failed`.
# Tests that check rendered manifests against upstream CRDs and chart values read them from
# $GPUBRING_UPSTREAM_DIR (.ci/run sets it); without it they skip and say so.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

# The test command's budget on the CI machine (2 cores): over it, the table says so (CI kills a run at
# 90 minutes).
BUDGET_MIN=${GPUBRING_TEST_BUDGET_MIN:-40}
export GPUBRING_MOLECULE_JOBS=${GPUBRING_MOLECULE_JOBS:-2}
# GPUBRING_PYTEST_BESIDE=1: the unit and rendering tests run beside the heavy part (below) on
# GPUBRING_PYTEST_BESIDE_WORKERS xdist workers (default 1) instead of on both cores before it: they
# fill the quarter of the cores the lab and the scenarios leave idle, at the price of some of their
# speed. 0 (the default): before the heavy part, on both cores.
PYTEST_BESIDE=${GPUBRING_PYTEST_BESIDE:-0}
PYTEST_BESIDE_WORKERS=${GPUBRING_PYTEST_BESIDE_WORKERS:-1}
if [[ $PYTEST_BESIDE != [01] ]]; then
  echo "test.sh: error: GPUBRING_PYTEST_BESIDE=$PYTEST_BESIDE (expected 0 or 1)" >&2
  exit 2
fi
if [[ ! $PYTEST_BESIDE_WORKERS =~ ^[1-9][0-9]*$ ]]; then
  echo "test.sh: error: GPUBRING_PYTEST_BESIDE_WORKERS=$PYTEST_BESIDE_WORKERS (expected a whole number >= 1)" >&2
  exit 2
fi
began=$SECONDS

failed=()
times=()
step() {
  local name=$1 start=$SECONDS verdict=ok; shift
  printf '\n==> %s: %s\n' "$name" "$*"
  "$@" || { verdict=FAILED; failed+=("$name"); }
  times+=("$(printf '%-12s %6ds  %s' "$name" $((SECONDS - start)) "$verdict")")
  printf '==> %s: %s (%ds)\n' "$name" "$verdict" $((SECONDS - start))
}
# A step beside the ones that follow it, its output kept in a file until `joined NAME` waits for it
# and prints it (a step that mostly waits on downloads or SSH, beside one that mostly computes). The
# step writes the $SECONDS it ended at (a subshell's clock is this script's) to .step-NAME.end, so the
# table gives its own time, not the time until it was joined.
declare -A beside_pid beside_start
beside() {
  local name=$1; shift
  printf '\n==> %s: %s (beside the next steps; its output follows when it ends)\n' "$name" "$*"
  beside_start[$name]=$SECONDS
  rm -f ".step-$name.end"
  (
    "$@"
    rc=$?
    echo "$SECONDS" >".step-$name.end"
    exit "$rc"
  ) >".step-$name.log" 2>&1 &
  beside_pid[$name]=$!
}
joined() {
  local name=$1 verdict=ok took
  wait "${beside_pid[$name]}" || { verdict=FAILED; failed+=("$name"); }
  local end=$SECONDS
  [[ -s .step-$name.end ]] && end=$(<".step-$name.end")
  took=$((end - beside_start[$name]))
  printf '\n==> %s: output\n' "$name"
  cat ".step-$name.log"
  rm -f ".step-$name.log" ".step-$name.end"
  times+=("$(printf '%-12s %6ds  %s (beside others)' "$name" "$took" "$verdict")")
  printf '==> %s: %s (%ds)\n' "$name" "$verdict" "$took"
}

step setup bash scripts/setup.sh
# shellcheck disable=SC1091
source .venv/bin/activate || { echo "setup failed: no .venv" >&2; exit 1; }

step ruff ruff check .
step mypy mypy
# The e2e lab is the longest chain of the command (its nodes' start, two DKMS builds, `node replace`):
# it starts first, beside everything that follows. Its nodes spend much of their time waiting on apt,
# dpkg and SSH (a run alone leaves about a quarter of the cores idle), which the unit tests and then
# the scenarios fill. Each e2e test's time is in its output (--durations): where the lab's minutes go.
beside pytest-e2e pytest -p no:cacheprovider -m e2e --durations=0 --durations-min=1
# Unit and rendering tests on both cores (pytest-xdist, a file's tests on one worker so its module
# fixtures are built once).
if ((PYTEST_BESIDE == 0)); then
  step pytest pytest -p no:cacheprovider -n 2 --dist loadfile -m 'not e2e'
fi
# Then the Molecule scenarios and the linters. The lab counts as one of Molecule's two lanes while it
# runs (GPUBRING_MOLECULE_BESIDE_PID) and the scenarios take both once it has ended; scenarios whose
# inputs have not changed since a run that passed are not run again (scripts/molecule-all.sh, the
# result cache). ansible-lint and ansible-test sanity (mostly pip filling its test environments) run
# beside them. (With GPUBRING_PYTEST_BESIDE=1 the unit tests run beside all of them.)
if ((PYTEST_BESIDE == 1)); then
  beside pytest pytest -p no:cacheprovider -n "$PYTEST_BESIDE_WORKERS" --dist loadfile -m 'not e2e'
fi
beside ansible-lint ansible-lint --profile production
beside sanity bash scripts/sanity.sh
step molecule env GPUBRING_MOLECULE_BESIDE_PID="${beside_pid[pytest-e2e]}" \
  bash -o pipefail -c 'bash scripts/molecule-all.sh | tee .molecule-summary.log'
if ((PYTEST_BESIDE == 1)); then joined pytest; fi
joined pytest-e2e
joined ansible-lint
joined sanity

total=$((SECONDS - began))
printf '\n==> step times\n'
printf '  %s\n' "${times[@]}"
printf '  %-12s %6ds  (%d min %02d s; budget %d min: %s)\n' total "$total" $((total / 60)) $((total % 60)) \
  "$BUDGET_MIN" "$( ((total <= BUDGET_MIN * 60)) && echo within || echo OVER)"
printf '\n==> steps failed: %s\n' "${failed[*]:-none}"
# The closing line counts the Molecule scenarios (N passed, N failed).
tail -n 1 .molecule-summary.log 2>/dev/null || echo "0 passed, 1 failed"
rm -f .molecule-summary.log
((${#failed[@]} == 0))
