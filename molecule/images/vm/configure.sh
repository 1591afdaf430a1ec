#!/bin/sh
# Runs inside the debootstrapped tree (chroot) and makes it a bootable VM reached over SSH.
# Part of the recipe: a change here rebuilds the image. $1 is the public key root accepts.
set -eu
pubkey=$1

echo kernel-vm >/etc/hostname
printf '127.0.0.1\tlocalhost\n127.0.1.1\tkernel-vm\n' >/etc/hosts
# The root file system is the virtio disk that QEMU gives (root=/dev/vda on the kernel command line).
printf '/dev/vda / ext4 defaults,errors=remount-ro 0 1\n' >/etc/fstab

# Network: QEMU's user-mode network (DHCP and DNS at 10.0.2.2/10.0.2.3); net.ifnames=0 names it eth0.
cat >/etc/systemd/network/20-eth0.network <<'NET'
[Match]
Name=eth0

[Network]
DHCP=ipv4
NET
systemctl enable systemd-networkd.service >/dev/null 2>&1
rm -f /etc/resolv.conf
printf 'nameserver 10.0.2.3\n' >/etc/resolv.conf

# SSH: root with the scenario's key only; host keys generated once, in the image.
mkdir -p /root/.ssh
chmod 0700 /root/.ssh
printf '%s\n' "$pubkey" >/root/.ssh/authorized_keys
chmod 0600 /root/.ssh/authorized_keys
passwd -l root >/dev/null
rm -f /etc/ssh/ssh_host_*
ssh-keygen -A >/dev/null
# No reverse DNS lookups of the (NATed) client: a login answers at once.
printf 'UseDNS no\n' >/etc/ssh/sshd_config.d/gpubring-vm.conf
systemctl enable ssh.service >/dev/null 2>&1
systemctl set-default multi-user.target >/dev/null 2>&1

# Units that only slow a test VM's boot down.
systemctl mask apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer \
  >/dev/null 2>&1 || true

# The initramfs must find the virtio disk and its ext4 file system.
printf 'virtio_pci\nvirtio_blk\next4\n' >>/etc/initramfs-tools/modules
update-initramfs -u -k all >/dev/null 2>&1

# One machine id for the image: every boot of a fresh overlay is then an ordinary boot, not a first boot.
systemd-machine-id-setup >/dev/null 2>&1
apt-get clean
rm -rf /var/lib/apt/lists/* /var/log/*.log /tmp/* /var/tmp/*
