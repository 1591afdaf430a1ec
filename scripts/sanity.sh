#!/usr/bin/env bash
# `ansible-test sanity` on the collection gpubring.core, as it ships.
#
# ansible-test wants the collection at .../ansible_collections/gpubring/core/, so this copies what
# the collection ships into a temporary ansible_collections/gpubring/core/ and runs there: the
# paths execution-environment.yml builds the collection from (galaxy.yml, README.md, versions.yml,
# settings.yml, plugins/, roles/, playbooks/, meta/) plus tests/sanity/ (the ignore file). Of tests/
# only tests/sanity/ goes in: the repository's pytest suite is not the collection's unit tests, which
# ansible-test would look for in tests/unit/. cli/ (the CLI's own package), molecule/, scripts/, docs/
# and inventories/ are not in the execution environment's collection either.
# Files are taken from `git ls-files` (tracked, and new files git does not ignore), so nothing
# ignored (__pycache__, .venv, .gpubring, inventories/lab) comes along.
#
# Offline but for PyPI: ansible-test bootstraps pip in each sanity test's virtual environment with
# get-pip.py from ci-files.testing.ansible.com, unless ~/.ansible/test/cache/get_pip_24_2.py exists
# (ansible_test/_util/target/setup/requirements.py, pip 24.2 at ansible-core 2.19); the copy in
# $GPUBRING_SHARED_DIR/tools/ (default ../shared) is put there. The tests' own requirements come
# from PyPI, into virtual environments under ~/.ansible/test/venv/ that later runs reuse.
#
#   bash scripts/sanity.sh [ansible-test sanity options, e.g. --test pylint]
#
# Exits with ansible-test's status and prints the elapsed time.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
start=$SECONDS

shared=${GPUBRING_SHARED_DIR:-$root/../shared}
python=${GPUBRING_SANITY_PYTHON:-3.11}
bin=$root/.venv/bin
[[ -x $bin/ansible-test ]] || { echo "sanity: $bin/ansible-test is missing: run scripts/setup.sh" >&2; exit 1; }

cache=$HOME/.ansible/test/cache
get_pip=get_pip_24_2.py
if [[ ! -f $cache/$get_pip ]]; then
  [[ -f $shared/tools/$get_pip ]] || { echo "sanity: $shared/tools/$get_pip is missing" >&2; exit 1; }
  mkdir -p "$cache" && cp "$shared/tools/$get_pip" "$cache/$get_pip" || exit 1
fi

# What the collection ships: the src paths of execution-environment.yml's additional_build_files.
mapfile -t shipped < <("$bin/python" - <<'EOF'
import yaml
with open("execution-environment.yml") as f:
    ee = yaml.safe_load(f)
for entry in ee["additional_build_files"]:
    print(entry["src"])
EOF
)
((${#shipped[@]})) || { echo "sanity: no collection paths read from execution-environment.yml" >&2; exit 1; }

# Outside the checkout: inside a git work tree ansible-test lists the files with git, and the copy
# (ignored there) would have none.
tree=$(mktemp -d "${TMPDIR:-/tmp}/gpubring-sanity.XXXXXX") || exit 1
trap 'rm -rf "$tree"' EXIT
collection=$tree/ansible_collections/gpubring/core
mkdir -p "$collection" || exit 1
git ls-files -z --cached --others --exclude-standard -- "${shipped[@]}" tests/sanity |
  while IFS= read -r -d '' file; do
    # a tracked file deleted in the work tree stays out
    if [[ -e $file || -L $file ]]; then printf '%s\0' "$file"; fi
  done |
  xargs -0 cp -P --parents -t "$collection" || exit 1  # -P: the symlinks test sees links as links

cd "$collection" || exit 1
PATH=$bin:$PATH "$bin/ansible-test" sanity --local --python "$python" "$@"
rc=$?
printf 'sanity: exit %d after %d s\n' "$rc" $((SECONDS - start))
exit "$rc"
