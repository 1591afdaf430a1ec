#!/usr/bin/env bash
# Make a Docker engine available on this machine, and leave it running.
#
#   scripts/engine.sh            install what is missing, start dockerd if nothing answers, wait for it
#
# - Installs Debian's docker.io and debootstrap when they are missing (one `apt-get update` first).
# - Starts dockerd in the background (setsid + nohup, so it outlives this script; no systemd needed)
#   only when nothing answers on the socket and no dockerd of ours is already starting.
# - Waits, bounded, until `docker info` answers; says why and shows the log's tail when it does not.
# Safe to run again: a running engine is left alone.
#
# Environment:
#   GPUBRING_ENGINE_LOG      dockerd's log file     (default /var/log/gpubring-dockerd.log)
#   GPUBRING_ENGINE_TIMEOUT  seconds to wait        (default 90)
#   DOCKER_HOST              honoured by the docker client; only a unix socket is started here
set -euo pipefail

LOG=${GPUBRING_ENGINE_LOG:-/var/log/gpubring-dockerd.log}
TIMEOUT=${GPUBRING_ENGINE_TIMEOUT:-90}
PIDFILE=/var/run/docker.pid
SOCKET=/var/run/docker.sock
if [[ ${DOCKER_HOST:-} == unix://* ]]; then
  SOCKET=${DOCKER_HOST#unix://}
fi

say() { printf 'engine: %s\n' "$*"; }
die() { printf 'engine: error: %s\n' "$*" >&2; exit 1; }

answers() { timeout 20 docker info >/dev/null 2>&1; }

install_missing() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v docker >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  # tar and a keyring are needed by molecule/images/build.sh as well.
  [[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
  ((${#missing[@]} == 0)) && return 0
  [[ $(id -u) -eq 0 ]] || die "missing ${missing[*]} and not root: install them with apt-get as root"
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The pid of a dockerd that is alive (from its pid file), or nothing.
running_dockerd() {
  local pid
  [[ -r $PIDFILE ]] || return 1
  pid=$(<"$PIDFILE")
  [[ -n $pid && -d /proc/$pid ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] || return 1
  printf '%s\n' "$pid"
}

start_dockerd() {
  [[ $(id -u) -eq 0 ]] || die "no Docker engine answers on $SOCKET and starting dockerd needs root"
  mkdir -p "$(dirname "$LOG")"
  say "starting dockerd (log: $LOG)"
  # setsid: its own session, so the caller's job control or terminal does not take it down;
  # nohup + redirections: no terminal, no inherited pipes that would keep a caller waiting; 9>&-: not
  # this script's lock either (a container shim would hold it after dockerd is gone).
  setsid nohup dockerd --host "unix://$SOCKET" --pidfile "$PIDFILE" >>"$LOG" 2>&1 </dev/null 9>&- &
  disown || true
}

wait_until_answers() {
  local deadline=$((SECONDS + TIMEOUT))
  until answers; do
    if ((SECONDS >= deadline)); then
      printf 'engine: error: dockerd did not answer on %s within %ss; last lines of %s:\n' \
        "$SOCKET" "$TIMEOUT" "$LOG" >&2
      tail -n 20 "$LOG" >&2 2>/dev/null || true
      exit 1
    fi
    if ! running_dockerd >/dev/null; then
      # It may still be writing its pid file; give it a moment before calling it dead.
      sleep 1
      if ! running_dockerd >/dev/null && ! answers; then
        printf 'engine: error: dockerd exited; last lines of %s:\n' "$LOG" >&2
        tail -n 20 "$LOG" >&2 2>/dev/null || true
        exit 1
      fi
    fi
    sleep 1
  done
}

main() {
  install_missing
  if answers; then
    say "Docker engine answers on ${DOCKER_HOST:-unix://$SOCKET} ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
    return 0
  fi
  # One starter at a time: a second caller waits for the first one's dockerd instead of starting another.
  exec 9>/run/lock/gpubring-engine.lock
  flock 9
  if answers; then
    say "Docker engine answers on ${DOCKER_HOST:-unix://$SOCKET} ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
    return 0
  fi
  if pid=$(running_dockerd); then
    say "dockerd (pid $pid) is running but not answering yet; waiting"
  else
    start_dockerd
  fi
  wait_until_answers
  say "Docker engine ready ($(docker info --format '{{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupVersion}}' 2>/dev/null))"
}

main "$@"
