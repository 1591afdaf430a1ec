#!/usr/bin/env bash
# Run `molecule test` for every scenario under molecule/ (each folder with a molecule.yml), or for
# the scenarios named on the command line, GPUBRING_MOLECULE_JOBS at a time (default 1; the longest
# first, from molecule/durations.txt); a failure does not stop the others.
#
#   scripts/molecule-all.sh [SCENARIO[@DISTRO]...]
#
# Without names it also runs each NAME@DISTRO line of molecule/releases.txt: that scenario a second
# time with MOLECULE_DISTRO=DISTRO (the package roles on the Debian release their scenario's default
# does not run), shown as NAME@DISTRO in its output. A name given as NAME@DISTRO runs that way too. The
# two runs of one scenario never overlap (Molecule keeps one state per scenario).
#
# First it makes sure of what the scenarios need: a Docker engine (scripts/engine.sh), the test-host
# images they use (MOLECULE_DISTRO when set; otherwise each scenario's default: debian12 from the
# shared base, or the one its molecule.yml names), which molecule/images/build.sh rebuilds only when
# their recipe changed, and the collection link that makes gpubring.core resolve to this checkout.
#
# Prints one result line per scenario and ends with exactly one line `N passed, N failed`; exits 1
# when any scenario failed. Each scenario's full output goes to $GPUBRING_MOLECULE_LOGS/<name>.log
# (default .gpubring/molecule/); the tail of a failed one is printed. GPUBRING_MOLECULE_STREAM=1
# prints the full output as it runs as well.
#
# The result cache: a scenario whose inputs have not changed since a run of it passed is not run again
# within GPUBRING_MOLECULE_CACHE_DAYS (default 7) of that run; its line says `PASS  NAME (from the
# cache: ...)` with the commit and date of the run that passed, and that run's log is copied to
# $LOGS/<name>.log. Its inputs are scripts/molecule_inputs.py's key: the content of every file of the
# repository the scenario can read (its folder, the shared base, the roles and plugins it names and
# those they name, the image recipes, versions.yml, ...), the test-host image's ID, the kernel, the
# Python packages and the strategy; the age limit stands for what the Debian archive serves. Passes are
# kept under GPUBRING_MOLECULE_CACHE_DIR (default /var/cache/gpubring/molecule-passes);
# GPUBRING_MOLECULE_CACHE=0 runs every scenario (and still records the passes).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
DISTRO_NOTE=${MOLECULE_DISTRO:+MOLECULE_DISTRO=$MOLECULE_DISTRO}
DISTRO_NOTE=${DISTRO_NOTE:-the default distro of each scenario}
LOGS=${GPUBRING_MOLECULE_LOGS:-$ROOT/.gpubring/molecule}
STREAM=${GPUBRING_MOLECULE_STREAM:-0}

if [[ -x $ROOT/.venv/bin/molecule ]]; then
  # Molecule runs ansible-playbook from PATH: use the checkout's virtualenv throughout.
  export PATH="$ROOT/.venv/bin:$PATH"
  PYTHON=$ROOT/.venv/bin/python
else
  PYTHON=python3
fi
# Scenarios live in molecule/<name>/. Molecule 26 finds them there from the repository root only as a
# fallback (galaxy.yml makes it look for extensions/molecule/ first, with a warning): say so.
export MOLECULE_GLOB=${MOLECULE_GLOB:-molecule/*/molecule.yml}
command -v molecule >/dev/null || { echo "molecule-all: error: molecule is not installed (pip install -e '.[test]')" >&2; exit 2; }

# Scenarios with many tasks run their roles under Mitogen's strategy, as `gpubring up` runs them
# (--accelerate, the default): one Python interpreter per test host for a whole playbook instead of one
# per task. Such a scenario's molecule.yml sets ANSIBLE_STRATEGY and ANSIBLE_STRATEGY_PLUGINS from
# GPUBRING_MOLECULE_STRATEGY and GPUBRING_MOLECULE_STRATEGY_PLUGINS, which this script exports when
# gpubring's accelerator finds Mitogen installed and made for this ansible-core (gpubring.run.accelerate);
# without them (GPUBRING_MOLECULE_ACCELERATE=0, Mitogen missing, or `molecule test` run by hand) every
# scenario runs linear. Measured (2026-11-28, the test command on 2 cores): kernel-vm 680 -> 562 s,
# rdma 165 -> 120, the toolkit 112 -> 76, kernel 106 -> 87, verify 133 -> 113; a scenario of a few tasks
# took 10-30 s longer instead (Mitogen's start in each of its playbooks), so those stay linear.
ACCELERATE=${GPUBRING_MOLECULE_ACCELERATE:-1}
CACHE=${GPUBRING_MOLECULE_CACHE:-1}
CACHE_DIR=${GPUBRING_MOLECULE_CACHE_DIR:-/var/cache/gpubring/molecule-passes}
CACHE_DAYS=${GPUBRING_MOLECULE_CACHE_DAYS:-7}
[[ $CACHE == [01] ]] || { echo "molecule-all: error: GPUBRING_MOLECULE_CACHE=$CACHE (expected 0 or 1)" >&2; exit 2; }
[[ $CACHE_DAYS =~ ^[1-9][0-9]*$ ]] || { echo "molecule-all: error: GPUBRING_MOLECULE_CACHE_DAYS=$CACHE_DAYS (expected a whole number >= 1)" >&2; exit 2; }
[[ $ACCELERATE == [01] ]] || { echo "molecule-all: error: GPUBRING_MOLECULE_ACCELERATE=$ACCELERATE (expected 0 or 1)" >&2; exit 2; }
unset GPUBRING_MOLECULE_STRATEGY GPUBRING_MOLECULE_STRATEGY_PLUGINS
if ((ACCELERATE)); then
  accel=$("$PYTHON" -c 'from gpubring.run.accelerate import accelerator
a = accelerator(True)
print(a.env.get("ANSIBLE_STRATEGY_PLUGINS", ""))
print(a.env.get("ANSIBLE_STRATEGY", ""))
print(a.notice)' 2>/dev/null) || accel=$'\n\ngpubring is not importable by '"$PYTHON"
  mapfile -t accel_lines <<<"$accel"
  if [[ -n ${accel_lines[0]:-} && -n ${accel_lines[1]:-} ]]; then
    export GPUBRING_MOLECULE_STRATEGY_PLUGINS=${accel_lines[0]} GPUBRING_MOLECULE_STRATEGY=${accel_lines[1]}
    echo "molecule-all: scenarios that ask for it run under ${accel_lines[1]} (GPUBRING_MOLECULE_ACCELERATE=0: linear)"
  else
    echo "molecule-all: every scenario runs linear: ${accel_lines[2]:-Mitogen is not available}"
  fi
fi

# The scenarios: those named, or every molecule/*/molecule.yml and the NAME@DISTRO runs of
# molecule/releases.txt.
scenarios=()
if (($#)); then
  scenarios=("$@")
else
  for f in molecule/*/molecule.yml; do
    [[ -f $f ]] && scenarios+=("$(basename "$(dirname "$f")")")
  done
  if [[ -f molecule/releases.txt ]]; then
    while read -r line _; do
      [[ -z $line || $line == \#* ]] || scenarios+=("$line")
    done <molecule/releases.txt
  fi
fi
# NAME@DISTRO: the scenario and the MOLECULE_DISTRO it runs with (empty: as the caller's environment).
scenario_of() { echo "${1%%@*}"; }
distro_of() { [[ $1 == *@* ]] && echo "${1#*@}"; }
if ((${#scenarios[@]} == 0)); then
  echo "molecule-all: no scenario under molecule/"
  echo "0 passed, 0 failed"
  exit 0
fi

finish() {
  local passed=$1 failed=$2
  echo "$passed passed, $failed failed"
  ((failed == 0))
  exit $?
}

# The test-host images the scenarios use: a NAME@DISTRO's DISTRO, MOLECULE_DISTRO, or each scenario's
# default.
needed_distros() {
  local item name file
  for item in "${scenarios[@]}"; do
    name=$(scenario_of "$item")
    file=molecule/$name/molecule.yml
    [[ -f $file ]] || continue
    if [[ -n $(distro_of "$item") ]]; then
      distro_of "$item"
    elif [[ -n ${MOLECULE_DISTRO:-} ]]; then
      echo "$MOLECULE_DISTRO"
    elif grep -q 'gpubring-testhost:' "$file"; then
      grep -oE 'gpubring-testhost:(\$\{MOLECULE_DISTRO:-)?[a-z0-9]+' "$file" | sed -E 's/.*[:-]//'
    else
      echo debian12 # the shared base's default (.config/molecule/config.yml)
    fi
  done | sort -u
}

# What every scenario needs; when it cannot be had, every scenario counts as failed.
images_ok=true
"$ROOT/scripts/engine.sh" || images_ok=false
if $images_ok; then
  for distro in $(needed_distros); do
    "$ROOT/molecule/images/build.sh" "$distro" || images_ok=false
  done
fi
if ! $images_ok; then
  echo "molecule-all: error: no Docker engine or no test-host image: no scenario ran" >&2
  for name in "${scenarios[@]}"; do echo "FAIL  $name (not run)"; done
  finish 0 "${#scenarios[@]}"
fi
"$PYTHON" -c 'from gpubring.paths import collections_path; collections_path()' || {
  echo "molecule-all: error: cannot link the collection gpubring.core (is gpubring installed in the venv?)" >&2
  finish 0 "${#scenarios[@]}"
}

mkdir -p "$LOGS"
# The compiler cache the DKMS builds share with the lab (.config/molecule/config.yml mounts it).
mkdir -p "${GPUBRING_CCACHE_DIR:-/var/cache/gpubring/ccache}"
# One scenario (NAME or NAME@DISTRO): its result line goes to $LOGS/<name>.result ("PASS|FAIL  name
# (...)") and its time to $LOGS/<name>.seconds; the full output to $LOGS/<name>.log. $LOGS/.running.<NAME>
# (made by the caller) says the scenario runs; it goes when the run ends.
run_scenario() {
  local name=$1 log=$LOGS/$1.log start rc took scenario distro
  scenario=$(scenario_of "$name")
  distro=$(distro_of "$name")
  rm -f "$LOGS/$name.result" "$LOGS/$name.seconds"
  # shellcheck disable=SC2064 # the path is fixed now
  trap "rm -f '$LOGS/.running.$scenario'" EXIT
  if [[ ! -f molecule/$scenario/molecule.yml ]]; then
    echo "FAIL  $name (no molecule/$scenario/molecule.yml)" >"$LOGS/$name.result"
    return
  fi
  if [[ -n $distro ]]; then
    export MOLECULE_DISTRO=$distro
  fi
  echo "molecule-all: $name starts at $(date +%T) (log: ${log#"$ROOT"/})"
  start=$SECONDS
  # The scenarios' sequences start at create (.config/molecule/config.yml): instances an interrupted
  # run left (Molecule's state says created) are destroyed here first, as its leading destroy did.
  # The instance names carry the distro: the destroy runs with the MOLECULE_DISTRO of the run that left
  # them ($LOGS/.distro.<NAME>).
  if grep -qs '^created: true' "$HOME"/.ansible/tmp/molecule.*."$scenario"/state.yml; then
    echo "molecule-all: $name: destroying the instances an earlier run left"
    (
      left=$(cat "$LOGS/.distro.$scenario" 2>/dev/null)
      if [[ -n $left ]]; then export MOLECULE_DISTRO=$left; else unset MOLECULE_DISTRO; fi
      molecule destroy -s "$scenario"
    ) >"$log.destroy" 2>&1 || echo "molecule-all: $name: destroy failed (${log#"$ROOT"/}.destroy)"
  fi
  echo "${MOLECULE_DISTRO:-}" >"$LOGS/.distro.$scenario"
  if [[ $STREAM == 1 ]]; then
    molecule test -s "$scenario" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
  else
    molecule test -s "$scenario" >"$log" 2>&1
    rc=$?
  fi
  took=$((SECONDS - start))
  echo "$took" >"$LOGS/$name.seconds"
  if ((rc == 0)); then
    echo "PASS  $name (${took}s)" >"$LOGS/$name.result"
    record_pass "$name" "$took" "$log"
  else
    echo "FAIL  $name (${took}s, exit $rc, log: ${log#"$ROOT"/})" >"$LOGS/$name.result"
  fi
  cat "$LOGS/$name.result"
}

# The result cache (see the top): each scenario's key, then those that passed with it already.
declare -A key_of=()
if [[ ! -f $ROOT/scripts/molecule_inputs.py ]]; then
  echo "molecule-all: no result cache (no scripts/molecule_inputs.py): every scenario runs"
elif ! mkdir -p "$CACHE_DIR" 2>/dev/null || [[ ! -w $CACHE_DIR ]]; then
  echo "molecule-all: no result cache ($CACHE_DIR cannot be written): every scenario runs"
elif keys=$("$PYTHON" "$ROOT/scripts/molecule_inputs.py" key "${scenarios[@]}"); then
  while read -r name key; do [[ -n $name && -n $key ]] && key_of[$name]=$key; done <<<"$keys"
else
  echo "molecule-all: no result cache (scripts/molecule_inputs.py failed): every scenario runs"
fi
# A passing run's record: CACHE_DIR/<name>/<key> ("SECONDS COMMIT DATE") and its log beside it; none
# when its inputs changed while it ran (the run may have read either version).
record_pass() {
  local name=$1 took=$2 log=$3 key=${key_of[$1]:-} dir commit
  [[ -n $key ]] || return 0
  [[ $("$PYTHON" "$ROOT/scripts/molecule_inputs.py" key "$name" 2>/dev/null) == "$name $key" ]] || {
    echo "molecule-all: $name: its inputs changed while it ran: its pass is not kept"
    return 0
  }
  dir=$CACHE_DIR/$name
  mkdir -p "$dir" || return 0
  commit=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  [[ -n $(git -C "$ROOT" status --porcelain 2>/dev/null) ]] && commit="$commit+changes"
  cp "$log" "$dir/.$key.log.$$" && mv "$dir/.$key.log.$$" "$dir/$key.log"
  echo "$took $commit $(date -u +%FT%TZ)" >"$dir/.$key.$$" && mv "$dir/.$key.$$" "$dir/$key"
}
cached=0
if ((CACHE)) && ((${#key_of[@]})); then
  left=()
  for name in "${scenarios[@]}"; do
    entry=$CACHE_DIR/$name/${key_of[$name]:-none}
    # Passes older than the age limit go (and stop counting).
    [[ -d $CACHE_DIR/$name ]] && find "$CACHE_DIR/$name" -maxdepth 1 -type f -mtime "+$((CACHE_DAYS - 1))" -delete
    if [[ -n ${key_of[$name]:-} && -f $entry ]] && read -r took commit when <"$entry" && [[ -n $when ]]; then
      echo "PASS  $name (from the cache: passed in ${took}s at $commit on $when; its inputs have not changed)" \
        >"$LOGS/$name.result"
      echo "$took" >"$LOGS/$name.seconds"
      cp "$entry.log" "$LOGS/$name.log" 2>/dev/null || echo "(the log of that run is gone)" >"$LOGS/$name.log"
      cached=$((cached + 1))
    else
      left+=("$name")
    fi
  done
  echo "molecule-all: $cached of ${#scenarios[@]} scenarios from the result cache (their inputs have not changed since a run that passed; GPUBRING_MOLECULE_CACHE=0 runs them)"
  scenarios_to_run=("${left[@]}")
else
  scenarios_to_run=("${scenarios[@]}")
fi

# The longest scenarios start first, so that no lane is left with one long scenario at the end:
# molecule/durations.txt holds "SECONDS NAME" lines from a full run (scripts/molecule-all.sh writes
# them to $LOGS/durations.txt; copy that file over it when the times move). A scenario it does not
# list starts first, as if it were the longest.
ordered=()
while read -r _ name; do ordered+=("$name"); done < <(
  for name in "${scenarios_to_run[@]}"; do
    seconds=$(awk -v n="$name" '$2 == n { print $1 }' molecule/durations.txt 2>/dev/null)
    echo "${seconds:-999999} $name"
  done | sort -k1,1nr -k2,2
)

# Scenarios run JOBS at a time (GPUBRING_MOLECULE_JOBS, default 1): each has its own containers (or
# VM) and its own Molecule state, and much of one scenario's time is one ansible-playbook process on
# one core, or waiting on apt and containers.
# GPUBRING_MOLECULE_BESIDE_PID names a process that shares the machine with the scenarios (scripts/test.sh
# runs the e2e lab beside them): while it is alive it counts as one of the JOBS lanes, so the scenarios
# fill the time the lab spends waiting on apt and SSH, and get every lane once it has ended.
JOBS=${GPUBRING_MOLECULE_JOBS:-1}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "molecule-all: error: GPUBRING_MOLECULE_JOBS=$JOBS is not a whole number >= 1" >&2; finish 0 "${#scenarios[@]}"; }
BESIDE=${GPUBRING_MOLECULE_BESIDE_PID:-}
[[ -z $BESIDE || $BESIDE =~ ^[1-9][0-9]*$ ]] || { echo "molecule-all: error: GPUBRING_MOLECULE_BESIDE_PID=$BESIDE is not a process id" >&2; finish 0 "${#scenarios[@]}"; }
lanes() {
  if [[ -n $BESIDE ]] && kill -0 "$BESIDE" 2>/dev/null && ((JOBS > 1)); then
    echo $((JOBS - 1))
  else
    echo "$JOBS"
  fi
}
echo "molecule-all: ${#scenarios_to_run[@]} scenarios to run, $JOBS at a time${BESIDE:+ (one lane fewer while process $BESIDE runs)}"
rm -f "$LOGS"/.running.*
queue=("${ordered[@]}")
while ((${#queue[@]})); do
  # Polled rather than `wait -n`: a lane also frees up when the process beside ends.
  while (($(jobs -rp | wc -l) >= $(lanes))); do sleep 2; done
  # The first in the queue whose scenario is not running already (its other release may be): its
  # .running file names the runner's process, and a runner that died without removing it counts as ended.
  pick=-1
  for i in "${!queue[@]}"; do
    running=$LOGS/.running.$(scenario_of "${queue[$i]}")
    if [[ -e $running ]] && kill -0 "$(cat "$running" 2>/dev/null)" 2>/dev/null; then continue; fi
    pick=$i
    break
  done
  if ((pick < 0)); then sleep 2; continue; fi
  name=${queue[$pick]}
  queue=("${queue[@]:0:pick}" "${queue[@]:pick+1}")
  running=$LOGS/.running.$(scenario_of "$name")
  echo $$ >"$running" # this script's until the runner's own is known
  run_scenario "$name" &
  echo $! >"$running"
done
wait

passed=0
failed=0
results=()
: >"$LOGS/durations.txt"
for name in "${scenarios[@]}"; do
  line=$(cat "$LOGS/$name.result" 2>/dev/null || echo "FAIL  $name (no result: the runner of this scenario died)")
  results+=("$line")
  [[ -f $LOGS/$name.seconds ]] && echo "$(cat "$LOGS/$name.seconds") $name" >>"$LOGS/durations.txt"
  if [[ $line == PASS* ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    if [[ $STREAM != 1 && -f $LOGS/$name.log ]]; then
      echo "---- last lines of ${LOGS#"$ROOT"/}/$name.log ----"
      sed 's/\x1b\[[0-9;]*m//g' "$LOGS/$name.log" | tail -n 40
      echo "----"
    fi
  fi
done

echo "molecule-all: results ($DISTRO_NOTE):"
printf '  %s\n' "${results[@]}"
finish "$passed" "$failed"
