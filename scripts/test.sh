#!/usr/bin/env bash
# The whole test suite: ruff, mypy --strict, ansible-lint (production profile), pytest (unit, rendering
# and the e2e lab) and `molecule test` for every role scenario. Every step runs even when an earlier
# one failed; the last line counts the Molecule scenarios as `N passed, N failed`.
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

step ruff ruff check .
step mypy mypy
step ansible-lint ansible-lint --profile production
step pytest pytest -p no:cacheprovider
step molecule bash -o pipefail -c 'bash scripts/molecule-all.sh | tee .molecule-summary.log'

printf '\n==> steps failed: %s\n' "${failed[*]:-none}"
# The closing line counts the Molecule scenarios (N passed, N failed).
tail -n 1 .molecule-summary.log 2>/dev/null || echo "0 passed, 1 failed"
rm -f .molecule-summary.log
((${#failed[@]} == 0))
