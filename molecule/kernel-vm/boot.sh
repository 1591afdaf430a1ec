#!/bin/sh
# The kernel-vm's boot loader. QEMU boots the Debian kernel directly (-kernel/-initrd: the image has no
# GRUB), so a plain reboot would come back with the same command line. Here QEMU runs with -no-reboot and
# exits when the guest reboots, and this loop boots it again with the command line the guest's GRUB
# configuration gives now: before each boot it copies /etc/default/grub and /etc/default/grub.d/*.cfg out
# of the guest's disk (qemu-img and debugfs, read-only; the VM is down then) and sources them in order
# with sh, as grub-mkconfig does, for GRUB_CMDLINE_LINUX and GRUB_CMDLINE_LINUX_DEFAULT. So the kernel
# arguments the kernel and rdma roles write reach /proc/cmdline through a reboot and only through one.
# (The sourced files are the guest's own, written by the roles under test in this throwaway VM.)
#
#   boot.sh VM_DIR IMAGE_DIR NAME MEMORY_MIB CPUS SSH_PORT
#
# VM_DIR/stop ends the loop (destroy.yml); VM_DIR/cmdline is the command line of the last boot;
# VM_DIR/boot.pid is this loop, VM_DIR/qemu.pid the QEMU of the current boot.
set -u
vm=$1 image=$2 name=$3 memory=$4 cpus=$5 port=$6
base='root=/dev/vda rw console=ttyS0 net.ifnames=0'
echo $$ >"$vm/boot.pid"

grub_cmdline() {
  rm -rf "$vm/boot" && mkdir -p "$vm/boot" || return 0
  qemu-img convert -f qcow2 -O raw "$vm/disk.qcow2" "$vm/boot/disk.raw" || return 0
  debugfs -R "dump /etc/default/grub $vm/boot/grub" "$vm/boot/disk.raw" >/dev/null 2>&1
  debugfs -R "rdump /etc/default/grub.d $vm/boot" "$vm/boot/disk.raw" >/dev/null 2>&1
  rm -f "$vm/boot/disk.raw"
  env -i PATH=/usr/bin:/bin sh -c '
    GRUB_CMDLINE_LINUX=""
    GRUB_CMDLINE_LINUX_DEFAULT=""
    if [ -f "$1/grub" ]; then . "$1/grub"; fi
    for f in "$1"/grub.d/*.cfg; do if [ -f "$f" ]; then . "$f"; fi; done
    printf "%s %s" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"' sh "$vm/boot"
}

failures=0
while [ ! -e "$vm/stop" ]; do
  args="$base $(grub_cmdline)"
  [ ! -e "$vm/stop" ] || break
  printf '%s\n' "$args" >"$vm/cmdline"
  printf '== boot.sh: booting with: %s\n' "$args"
  if qemu-system-x86_64 -accel tcg -m "$memory" -smp "$cpus" -nographic -no-reboot -name "$name" \
    -pidfile "$vm/qemu.pid" -kernel "$image/vmlinuz" -initrd "$image/initrd.img" -append "$args" \
    -drive "file=$vm/disk.qcow2,if=virtio,format=qcow2" \
    -netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$port-:22" -device virtio-net-pci,netdev=n0 </dev/null; then
    failures=0
  else
    # QEMU itself failed (not a guest reboot): try a few times, then give up.
    failures=$((failures + 1))
    [ "$failures" -lt 5 ] || break
    sleep 2
  fi
done
rm -f "$vm/boot.pid"
