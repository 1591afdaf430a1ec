#!/usr/bin/env bash
# The whole test suite: ruff, mypy --strict, ansible-lint (production profile), pytest (unit, rendering
# and, beside them, the e2e lab) and `molecule test` for every role scenario. Every step runs even when
# an earlier one failed; the last line counts the Molecule scenarios as `N passed, N failed`.
# Tests that check rendered manifests against upstream CRDs and chart values read them from
# $GPUBRING_UPSTREAM_DIR (.ci/run sets it); without it they skip and say so.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

bash scripts/setup.sh || { echo "setup failed" >&2; exit 1; }
# shellcheck disable=SC1091
source .venv/bin/activate

failed=()
step() {
  local name=$1; shift
  printf '\n==> %s: %s\n' "$name" "$*"
  if "$@"; then printf '==> %s: ok\n' "$name"; else printf '==> %s: FAILED\n' "$name"; failed+=("$name"); fi
}

# pytest in two parts side by side: the e2e lab (tests/test_e2e_lab.py, marked e2e: its containers
# spend most of their time on apt downloads and DKMS builds) in the background, the rest (local,
# CPU-bound) in front; the lab's output follows the rest's. Both count: either failing fails the step.
pytest_all() {
  local log rest lab pid
  log=$(mktemp)
  pytest -p no:cacheprovider -m e2e >"$log" 2>&1 &
  pid=$!
  trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"; rm -f "$log"; exit 130' INT TERM
  pytest -p no:cacheprovider -m "not e2e"
  rest=$?
  wait "$pid"
  lab=$?
  trap - INT TERM
  printf '\n==> pytest -m e2e (the lab, run beside the tests above):\n'
  cat "$log"
  rm -f "$log"
  ((rest == 0 && lab == 0))
}

step ruff ruff check .
step mypy mypy
step ansible-lint ansible-lint --profile production
step pytest pytest_all
step molecule bash -o pipefail -c 'bash scripts/molecule-all.sh | tee .molecule-summary.log'

printf '\n==> steps failed: %s\n' "${failed[*]:-none}"
# The closing line counts the Molecule scenarios (N passed, N failed).
tail -n 1 .molecule-summary.log 2>/dev/null || echo "0 passed, 1 failed"
rm -f .molecule-summary.log
((${#failed[@]} == 0))
