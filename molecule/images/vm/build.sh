#!/usr/bin/env bash
# Build the Debian 12 VM of the kernel-level scenario (molecule/kernel-vm), or find it up to date.
#
#   molecule/images/vm/build.sh [--force]
#
# Output, in $GPUBRING_VM_DIR/debian12 (default /var/tmp/gpubring-vm/debian12):
#   rootfs.qcow2   the root file system (ext4 on the whole disk, /dev/vda in the guest); scenarios boot
#                  a copy-on-write overlay of it, so the image itself never changes
#   vmlinuz        the Debian kernel of the image, and
#   initrd.img     its initramfs, booted directly by QEMU (-kernel/-initrd: no boot loader)
#   id_ed25519     the SSH key root accepts (made here, never leaves this machine)
#   recipe.sha256  the recipe's hash: the image is rebuilt only when the recipe changed
#
# The recipe is this script, packages.txt and configure.sh. The tree comes from debootstrap with the
# Debian archive this machine's apt configuration names (read through molecule/images/build.sh, so no
# archive host is written into the project), is configured in a chroot, and becomes an ext4 image with
# `mkfs.ext4 -d` (no loop device or mount needed). Needs root, debootstrap, e2fsprogs and qemu-utils.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUITE=bookworm
OUT=${GPUBRING_VM_DIR:-/var/tmp/gpubring-vm}/debian12
DISK_SIZE=${GPUBRING_VM_DISK_SIZE:-4G}
FORCE=false
[[ ${1:-} == --force ]] && FORCE=true

say() { printf 'vm image: %s\n' "$*"; }
die() { printf 'vm image: error: %s\n' "$*" >&2; exit 1; }

recipe_hash() {
  {
    printf 'suite %s size %s\n' "$SUITE" "$DISK_SIZE"
    for f in "$HERE/build.sh" "$HERE/packages.txt" "$HERE/configure.sh"; do
      printf '== %s\n' "${f##*/}"
      cat "$f"
    done
  } | sha256sum | cut -d' ' -f1
}

HASH=$(recipe_hash)
if [[ $FORCE == false && -f $OUT/recipe.sha256 && $(<"$OUT/recipe.sha256") == "$HASH" ]] &&
  [[ -f $OUT/rootfs.qcow2 && -f $OUT/vmlinuz && -f $OUT/initrd.img && -f $OUT/id_ed25519 ]]; then
  say "$OUT is up to date (recipe ${HASH:0:12})"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || die "debootstrap needs root"
for tool in debootstrap mkfs.ext4 qemu-img ssh-keygen; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install debootstrap e2fsprogs qemu-utils openssh-client)"
done

# This machine's Debian archive, as the container images use it (empty: debootstrap's default).
eval "$(GPUBRING_IMAGE_PRINT_SOURCES=1 "$HERE/../build.sh" debian12 | grep -E '^(archive|security|updates)=' | sed 's/^/SRC_/')"
MIRROR=${SRC_archive:-}
SECURITY=${SRC_security:-}

mkdir -p "$(dirname "$OUT")"
WORK=$(mktemp -d "$(dirname "$OUT")/build.XXXXXX")
cleanup() {
  local m
  for m in dev/pts dev proc sys; do
    if mountpoint -q "$WORK/rootfs/$m" 2>/dev/null; then umount -l "$WORK/rootfs/$m" || true; fi
  done
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

PACKAGES=$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$HERE/packages.txt" | paste -sd, -)
say "debootstrap $SUITE (minbase + $PACKAGES) from ${MIRROR:-the default archive of debootstrap}"
debootstrap --variant=minbase --components=main --include="$PACKAGES" \
  "$SUITE" "$WORK/rootfs" ${MIRROR:+"$MIRROR"} >"$WORK/debootstrap.log" 2>&1 || {
  tail -n 30 "$WORK/debootstrap.log" >&2
  die "debootstrap $SUITE failed (log above)"
}
[[ -n $MIRROR ]] || MIRROR=$(awk '$1 == "deb" { print $2; exit }' "$WORK/rootfs/etc/apt/sources.list")

# The guest's apt sources: the same archive (Ansible's package module may need an index there).
rm -f "$WORK/rootfs/etc/apt/sources.list"
{
  printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main contrib non-free non-free-firmware\n' \
    "$MIRROR" "$SUITE" "$SUITE"
  printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  if [[ -n $SECURITY ]]; then
    printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main contrib non-free non-free-firmware\n' \
      "$SECURITY" "$SUITE"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  fi
} >"$WORK/rootfs/etc/apt/sources.list.d/debian.sources"

ssh-keygen -q -t ed25519 -N '' -C "gpubring kernel-vm" -f "$WORK/id_ed25519"
say "configuring the guest"
mount -t proc proc "$WORK/rootfs/proc"
mount -t sysfs sysfs "$WORK/rootfs/sys"
mount --bind /dev "$WORK/rootfs/dev"
chroot "$WORK/rootfs" /bin/sh -s -- "$(cat "$WORK/id_ed25519.pub")" <"$HERE/configure.sh"
umount "$WORK/rootfs/dev" "$WORK/rootfs/sys" "$WORK/rootfs/proc"

kernel=$(find "$WORK/rootfs/boot" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n 1)
initrd=$WORK/rootfs/boot/initrd.img-${kernel##*/vmlinuz-}
[[ -f $kernel && -f $initrd ]] || die "no kernel and initramfs under /boot of the tree"
say "kernel ${kernel##*/vmlinuz-}; writing the ext4 image ($DISK_SIZE)"
mkfs.ext4 -q -F -L gpubring-root -d "$WORK/rootfs" "$WORK/rootfs.raw" "$DISK_SIZE"
qemu-img convert -f raw -O qcow2 "$WORK/rootfs.raw" "$WORK/rootfs.qcow2"

# Replace the old image only now, whole.
mkdir -p "$OUT"
rm -f "$OUT/recipe.sha256"
cp "$kernel" "$OUT/vmlinuz"
cp "$initrd" "$OUT/initrd.img"
mv "$WORK/rootfs.qcow2" "$OUT/rootfs.qcow2"
install -m 0600 "$WORK/id_ed25519" "$OUT/id_ed25519"
install -m 0644 "$WORK/id_ed25519.pub" "$OUT/id_ed25519.pub"
printf '%s\n' "$HASH" >"$OUT/recipe.sha256"
say "built $OUT (recipe ${HASH:0:12})"
