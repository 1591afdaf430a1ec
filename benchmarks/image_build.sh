#!/usr/bin/env bash
# Time the test-host image build: cold (no image), and warm (image up to date with its recipe).
#
#   benchmarks/image_build.sh [debian12|debian13] [--no-package-cache]
#
# Cold removes the image first (its tag only: containers still running on it keep their copy).
# Debootstrap's package cache (/var/cache/gpubring/debootstrap) is kept unless --no-package-cache,
# which empties it too and so also measures downloading every package from the archive.
# Prints the figures; asserts nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DISTRO=${1:-debian12}
NO_CACHE=false
[[ ${2:-} == --no-package-cache ]] && NO_CACHE=true
IMAGE=gpubring-testhost:$DISTRO
CACHE=${GPUBRING_DEBOOTSTRAP_CACHE:-/var/cache/gpubring/debootstrap}

"$ROOT/scripts/engine.sh" >/dev/null

seconds() { # run "$@" quietly, print its wall time in seconds
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }'
}

docker image rm -f "$IMAGE" >/dev/null 2>&1 || true
if $NO_CACHE; then
  rm -rf "$CACHE"
fi
cold=$(seconds "$ROOT/molecule/images/build.sh" "$DISTRO")
warm=$(seconds "$ROOT/molecule/images/build.sh" "$DISTRO")
size=$(($(docker image inspect --format '{{.Size}}' "$IMAGE") / 1000000))

cache_note="package cache kept"
$NO_CACHE && cache_note="package cache emptied"
echo "image build $IMAGE on $(nproc) cores: cold ${cold} s ($cache_note), warm ${warm} s (up to date), image ${size} MB"
