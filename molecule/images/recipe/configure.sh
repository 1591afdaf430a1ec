#!/bin/sh
# Runs inside the debootstrapped tree (chroot) and makes it a systemd test host for containers.
# Part of the image recipe: a change here changes the recipe hash and rebuilds the image.
set -eu

# Units that manage hardware, consoles or the root filesystem: a container has none of these,
# and they would only fail (or wait) at boot.
systemctl mask \
  getty.target \
  console-getty.service \
  systemd-remount-fs.service \
  systemd-firstboot.service \
  sys-kernel-debug.mount \
  sys-kernel-tracing.mount \
  sys-kernel-config.mount \
  sys-fs-fuse-connections.mount \
  dev-hugepages.mount \
  systemd-journald-audit.socket \
  >/dev/null 2>&1

# Each container generates its own SSH host keys at first boot (the image ships none).
cat >/etc/systemd/system/gpubring-ssh-hostkeys.service <<'UNIT'
[Unit]
Description=Generate missing SSH host keys (gpubring test host)
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
UNIT
rm -f /etc/ssh/ssh_host_*
systemctl enable gpubring-ssh-hostkeys.service ssh.service >/dev/null 2>&1

# A container boots no kernel of its own, so no initramfs of a test host is ever booted; the GPU
# roles still build one for real (the kernel package's hooks, the driver role's rebuild after the
# nouveau blacklist, which molecule/nvidia_driver's verify finds inside it). With Debian's
# MODULES=most each build copied and compressed every module of the kernel (36 MB, about 25 CPU-s,
# several builds per test command); with MODULES=list it holds the listed modules only (6 MB, 2 s).
# conf.d is read after initramfs.conf (initramfs.conf(5)) and belongs to no package, so installing
# initramfs-tools later asks no conffile question. Servers keep their own setting: the roles never
# write this file.
mkdir -p /etc/initramfs-tools/conf.d
printf '%s\n' '# gpubring test host (molecule/images/recipe/configure.sh): an initramfs no container boots' \
  'MODULES=list' >/etc/initramfs-tools/conf.d/gpubring-test-host.conf

# Boot into multi-user, not graphical.
systemctl set-default multi-user.target >/dev/null 2>&1

# An empty machine-id: systemd gives each container its own at boot.
: >/etc/machine-id
rm -f /var/lib/dbus/machine-id
ln -s /etc/machine-id /var/lib/dbus/machine-id

# No documentation or translations in a test image (smaller, faster to import).
cat >/etc/dpkg/dpkg.cfg.d/gpubring-nodoc <<'CFG'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
CFG
find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
rm -rf /usr/share/man/* /usr/share/info/* /usr/share/locale/*

# Leave no build-time state behind.
apt-get clean
rm -rf /var/lib/apt/lists/* /var/log/*.log /var/cache/debconf/*-old /tmp/* /var/tmp/*
rm -f /etc/resolv.conf /etc/hostname
