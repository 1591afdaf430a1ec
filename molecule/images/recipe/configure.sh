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
