#!/usr/bin/env bash
# Prepares a fresh Debian 12 machine (as root) for gpubring's lab and test suite, and is safe to run
# again: Debian packages through the machine's own apt configuration, a virtualenv in .venv with
# gpubring and its test tools from PyPI, a running Docker engine, and the gpubring.core collection link.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

log() { printf '==> %s\n' "$*"; }

# Debian packages the lab and the tests use: docker.io and debootstrap (test-host images),
# openssh (lab SSH and `gpubring check` tests), qemu (the kernel-level scenario), python3-venv,
# etcd-server and etcd-client (tests/test_etcd_real.py: a real etcd cluster for the etcd task files).
packages=(python3 python3-venv python3-pip git ca-certificates docker.io debootstrap
          openssh-client openssh-server qemu-system-x86 qemu-utils etcd-server etcd-client)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d keeps packaged daemons (sshd on :22, dockerd) from starting during install.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
fi

stamp=.venv/.gpubring-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -x .venv/bin/python || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  log "installing gpubring and its test tools into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  echo "$want" > "$stamp"
fi

log "linking the gpubring.core collection"
.venv/bin/python -c 'from gpubring.paths import collections_path; collections_path()'

if [[ -x scripts/engine.sh ]]; then
  bash scripts/engine.sh
fi
log "setup done: activate with 'source .venv/bin/activate'"
