#!/usr/bin/env bash
# Build the systemd test-host image gpubring-testhost:DISTRO with debootstrap and `docker import`.
#
#   molecule/images/build.sh debian12|debian13 [--force]
#
# The image is rebuilt only when its recipe changed: the recipe (this script and recipe/*) is hashed,
# the hash is stored in the image label gpubring.recipe.sha256, and an image whose label matches is
# left alone ("up to date"). --force rebuilds anyway.
#
# No archive host is written into the project: debootstrap uses the Debian archive that this machine's
# apt configuration names (/etc/apt/sources.list, /etc/apt/sources.list.d/*.list|*.sources), or its
# own default when there is none; the image's apt sources point at the same archive (and at the
# security archive when this machine has one) with main contrib non-free non-free-firmware.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LABEL=gpubring.recipe.sha256
COMPONENTS="main contrib non-free non-free-firmware"
APT_ROOT=${GPUBRING_APT_ROOT:-}   # read another root's apt configuration (tests); empty: this machine's
# GPUBRING_DEBOOTSTRAP_CACHE: where downloaded packages are kept between builds

say() { printf 'image: %s\n' "$*"; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }

usage() { die "usage: $0 debian12|debian13 [--force]"; }

DISTRO=${1:-}
FORCE=false
[[ ${2:-} == --force ]] && FORCE=true
[[ $# -le 2 ]] || usage
case $DISTRO in
  debian12) SUITE=bookworm ;;
  debian13) SUITE=trixie ;;
  *) usage ;;
esac
IMAGE=gpubring-testhost:$DISTRO

# ---------------------------------------------------------------------------------------------------
# The recipe's hash: everything that decides the image's content.
recipe_hash() {
  {
    printf 'distro %s suite %s\n' "$DISTRO" "$SUITE"
    for f in "$HERE/build.sh" "$HERE"/recipe/*; do
      printf '== %s\n' "${f#"$HERE"/}"
      cat "$f"
    done
  } | sha256sum | cut -d' ' -f1
}

# ---------------------------------------------------------------------------------------------------
# This machine's apt entries as lines "URI SUITE", one per suite, enabled `deb` entries only, from
# one-line .list files and deb822 .sources files alike.
apt_entries() {
  local files=()
  [[ -f $APT_ROOT/etc/apt/sources.list ]] && files+=("$APT_ROOT/etc/apt/sources.list")
  local f
  for f in "$APT_ROOT"/etc/apt/sources.list.d/*.list "$APT_ROOT"/etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  ((${#files[@]})) || return 0
  awk '
    function flush(   n, m, i, j, u, s) {
      if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled !~ /^(no|false|0)$/) {
        n = split(uris, u, /[ \t]+/); m = split(suites, s, /[ \t]+/)
        for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) if (u[i] != "" && s[j] != "") print u[i], s[j]
      }
      types = uris = suites = enabled = ""
    }
    FNR == 1 { flush() }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[ \t]*$/) { flush(); next }   # a blank line ends a stanza
      if ($0 ~ /^[ \t]*#/) next                 # a comment line does not
      if (match($0, /^[A-Za-z-]+:/)) {
        key = tolower(substr($0, 1, RLENGTH - 1)); val = substr($0, RLENGTH + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "enabled") enabled = tolower(val)
      }
      next
    }
    {
      sub(/#.*/, "")
      if ($1 != "deb") next
      line = $0
      sub(/^[ \t]*deb[ \t]+/, "", line)
      if (line ~ /^\[/) sub(/^\[[^]]*\][ \t]*/, "", line)
      split(line, w, /[ \t]+/)
      if (w[1] != "" && w[2] != "") print w[1], w[2]
    }
    END { flush() }
  ' "${files[@]}"
}

DEBIAN_SUITES='^(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable)'

# The URI of this machine's Debian archive (first entry whose suite is a Debian release), or nothing.
archive_uri() {
  apt_entries | awk -v re="${DEBIAN_SUITES}(-updates|-backports)?\$" '$2 ~ re && $1 !~ /ubuntu/ { print $1; exit }'
}

# The URI of this machine's Debian security archive, or nothing.
security_uri() {
  apt_entries | awk -v re="${DEBIAN_SUITES}(-security|/updates)\$" '$2 ~ re && $1 !~ /ubuntu/ { print $1; exit }'
}

# Whether this machine uses the -updates suite.
has_updates() {
  apt_entries | awk -v re="${DEBIAN_SUITES}-updates\$" '$2 ~ re { found = 1 } END { exit !found }'
}

# ---------------------------------------------------------------------------------------------------
write_sources() {
  local dir=$1 uri=$2 security=$3 suites=$SUITE keyring=""
  has_updates && suites="$SUITE $SUITE-updates"
  [[ -f $dir/usr/share/keyrings/debian-archive-keyring.gpg ]] &&
    keyring="Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
  rm -f "$dir/etc/apt/sources.list"
  {
    printf '# Written by gpubring molecule/images/build.sh from the build machine'"'"'s apt configuration.\n'
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\n' "$uri" "$suites" "$COMPONENTS"
    [[ -n $keyring ]] && printf '%s\n' "$keyring"
    if [[ -n $security ]]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: %s\n' "$security" "$SUITE" "$COMPONENTS"
      [[ -n $keyring ]] && printf '%s\n' "$keyring"
    fi
  } >"$dir/etc/apt/sources.list.d/debian.sources"
}

# The mirror debootstrap wrote into the tree (its default when we gave none).
bootstrap_uri() {
  awk '$1 == "deb" { print $2; exit }' "$1/etc/apt/sources.list" 2>/dev/null
}

if [[ ${GPUBRING_IMAGE_PRINT_SOURCES:-} == 1 ]]; then
  # Show what the image's apt sources would be, without building (used by tests and for debugging).
  printf 'archive=%s\nsecurity=%s\nupdates=%s\n' "$(archive_uri)" "$(security_uri)" \
    "$(has_updates && echo yes || echo no)"
  exit 0
fi

# ---------------------------------------------------------------------------------------------------
[[ $(id -u) -eq 0 ]] || die "debootstrap needs root"
docker info >/dev/null 2>&1 || "$ROOT/scripts/engine.sh"
command -v debootstrap >/dev/null || "$ROOT/scripts/engine.sh"

# One build of an image at a time: a second caller waits, then finds it up to date.
exec 9>"/run/lock/gpubring-image-$DISTRO.lock"
if ! flock -n 9; then
  say "another build of $IMAGE is running; waiting for it"
  flock 9
fi

HASH=$(recipe_hash)
OLD_ID=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
if [[ -n $OLD_ID && $FORCE == false ]]; then
  OLD_HASH=$(docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$IMAGE" 2>/dev/null || true)
  if [[ $OLD_HASH == "$HASH" ]]; then
    say "$IMAGE is up to date (recipe ${HASH:0:12})"
    exit 0
  fi
  say "$IMAGE has recipe ${OLD_HASH:0:12}, the recipe is now ${HASH:0:12}: rebuilding"
fi

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/gpubring-image-$DISTRO.XXXXXX")
cleanup() {
  # debootstrap may leave /proc, /sys and /dev/pts mounted inside the tree after a failure.
  local m
  for m in dev/pts proc sys; do
    if mountpoint -q "$WORK/rootfs/$m" 2>/dev/null; then umount -l "$WORK/rootfs/$m" || true; fi
  done
  if mountpoint -q "$WORK"; then umount -l "$WORK" || true; fi
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
# Build in memory: dpkg syncs every file it unpacks, which on disk costs more than the download.
# (A tree of about 400 MB; GPUBRING_IMAGE_TMPFS=0 builds on disk.)
if [[ ${GPUBRING_IMAGE_TMPFS:-1} == 1 ]] &&
  ! mount -t tmpfs -o size=2g,mode=0755 gpubring-image "$WORK" 2>/dev/null; then
  say "cannot mount a tmpfs for the build; building on disk"
fi

MIRROR=$(archive_uri)
SECURITY=$(security_uri)
PACKAGES=$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$HERE/recipe/packages.txt" | paste -sd, -)

say "debootstrap $SUITE (minbase + $PACKAGES) from ${MIRROR:-the default archive of debootstrap}"
t0=$SECONDS
# Downloaded packages are kept between builds (not part of the image, nor of the recipe).
CACHE=${GPUBRING_DEBOOTSTRAP_CACHE:-/var/cache/gpubring/debootstrap}
mkdir -p "$CACHE"
debootstrap --variant=minbase --components=main --include="$PACKAGES" --cache-dir="$CACHE" \
  "$SUITE" "$WORK/rootfs" ${MIRROR:+"$MIRROR"} >"$WORK/debootstrap.log" 2>&1 || {
  tail -n 30 "$WORK/debootstrap.log" >&2
  die "debootstrap $SUITE failed (log above)"
}
[[ -n $MIRROR ]] || MIRROR=$(bootstrap_uri "$WORK/rootfs")
[[ -n $MIRROR ]] || die "cannot tell which archive debootstrap used"
write_sources "$WORK/rootfs" "$MIRROR" "$SECURITY"

say "debootstrap took $((SECONDS - t0)) s; configuring systemd for containers"
chroot "$WORK/rootfs" /bin/sh -s <"$HERE/recipe/configure.sh"

say "importing $IMAGE"
t0=$SECONDS
tar --numeric-owner -C "$WORK/rootfs" \
  --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' -c . |
  docker import \
    --change 'ENV container=docker' \
    --change 'CMD ["/lib/systemd/systemd"]' \
    --change "LABEL $LABEL=$HASH" \
    --change "LABEL gpubring.distro=$DISTRO" \
    - "$IMAGE" >/dev/null

# Earlier builds of this image that no container uses any more (untagged by the import above).
docker image prune --force --filter "label=gpubring.distro=$DISTRO" >/dev/null 2>&1 || true
SIZE_MB=$(($(docker image inspect --format '{{.Size}}' "$IMAGE") / 1000000))
say "$IMAGE built (recipe ${HASH:0:12}, $SIZE_MB MB; import took $((SECONDS - t0)) s)"
