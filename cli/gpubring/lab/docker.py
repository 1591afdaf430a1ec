"""Docker through its CLI (subprocess): the engine, the image, the lab's network and containers, and
what runs inside them. Nothing here imports the Docker SDK."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpubring.lab.shape import SSH_PORT, Container, LabError, LabSpec, PlannedNode, image_of
from gpubring.paths import project_root

# Labels on every lab container: which lab it belongs to and which inventory groups it is in.
LABEL_PREFIX = "io.gpubring.lab.prefix"
LABEL_GROUPS = "io.gpubring.lab.groups"
LABEL_INVENTORY = "io.gpubring.lab.inventory"
# An air-gapped lab's node: the bundle folder its mirror serves (gpubring.lab.airgap).
LABEL_AIRGAP = "io.gpubring.lab.airgap"

# The container options DESIGN.md gives for systemd as PID 1 without --privileged.
SYSTEMD_RUN_OPTIONS: tuple[str, ...] = (
    "--cap-add", "SYS_ADMIN",
    "--cap-add", "NET_ADMIN",
    "--security-opt", "seccomp=unconfined",
    "--cgroupns=host",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run",
    "--tmpfs", "/run/lock",
    "--stop-signal", "SIGRTMIN+3",  # systemd's clean shutdown signal
    "-e", "container=docker",
)  # fmt: skip
SYSTEMD_COMMAND = "/lib/systemd/systemd"

_PORT_RE = re.compile(r"127\.0\.0\.1:(\d+)->")

# The compiler cache every lab node and the nvidia_driver Molecule scenario share (.config/molecule/
# config.yml mounts the same folder): the NVIDIA driver's DKMS build compiles the same sources for the
# same Debian kernel on each GPU node, so the first build fills it and later ones mostly read it. The
# build still runs for real on each node (DKMS, make, the link); only identical compilations are reused.
# Debian's kernel headers call the compiler through ccache when DEBIAN_KERNEL_USE_CCACHE is set
# (linux-headers-*/.kernelvariables); GPU nodes get it in /etc/environment (_INSTALL_KERNEL).
CCACHE_IN_NODE = "/var/cache/gpubring-ccache"


def ccache_dir() -> Path:
    """The machine's folder for that cache: $GPUBRING_CCACHE_DIR, else /var/cache/gpubring/ccache."""
    return Path(os.environ.get("GPUBRING_CCACHE_DIR") or "/var/cache/gpubring/ccache")


def run_command(
    argv: Sequence[str], *, input_text: str | None = None, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command (docker, ssh, ssh-keygen); LabError when it is missing, hangs or (with check) fails."""
    try:
        proc = subprocess.run(
            list(argv), input=input_text, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise LabError(f"{argv[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"`{shlex.join(argv[:4])} ...` did not finish within {timeout:.0f}s") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise LabError(f"`{shlex.join(argv[:6])}` failed (exit {proc.returncode}): " + " | ".join(detail))
    return proc


def docker(*args: str, input_text: str | None = None, timeout: float = 120, check: bool = True) -> str:
    return run_command(["docker", *args], input_text=input_text, timeout=timeout, check=check).stdout


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        proc = run_command(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30, check=False)
    except LabError:
        return False
    return proc.returncode == 0


def ensure_engine(out: Callable[[str], None]) -> None:
    """scripts/engine.sh (installs and starts dockerd when needed), else insist that one answers."""
    script = project_root() / "scripts" / "engine.sh"
    if script.is_file():
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            raise LabError(f"no Docker engine: scripts/engine.sh failed: {detail}")
        lines = proc.stdout.strip().splitlines()
        out(lines[-1] if lines else "engine: Docker answers")
        return
    if not engine_answers():
        raise LabError("no Docker engine answers, and no scripts/engine.sh (a checkout's) to start one")
    out("engine: Docker answers")


def ensure_image(spec: LabSpec, out: Callable[[str], None]) -> None:
    """molecule/images/build.sh DISTRO for each distro the lab's nodes run (rebuilds only when the recipe
    changed), else insist on the images."""
    script = project_root() / "molecule" / "images" / "build.sh"
    for distro in spec.distros:
        image = image_of(distro)
        if script.is_file():
            out(f"image: {image} (molecule/images/build.sh {distro})")
            proc = subprocess.run(["bash", str(script), distro], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-10:]
                raise LabError(f"building {image} failed:\n" + "\n".join(tail))
            continue
        if run_command(["docker", "image", "inspect", image], check=False).returncode != 0:
            raise LabError(f"image {image} is missing, and no molecule/images/build.sh (a checkout's)")


def _groups_label(value: str | None) -> tuple[str, ...]:
    return tuple(g for g in (value or "").split(",") if g)


def parse_inspect(data: Sequence[Mapping[str, Any]]) -> list[Container]:
    """Containers from `docker inspect` JSON."""
    out: list[Container] = []
    for item in data:
        labels = (item.get("Config") or {}).get("Labels") or {}
        bindings = ((item.get("HostConfig") or {}).get("PortBindings") or {}).get("22/tcp") or []
        port = next((int(b["HostPort"]) for b in bindings if str(b.get("HostPort", "")).isdigit()), None)
        airgap = str(labels.get(LABEL_AIRGAP) or "")
        address = "127.0.0.1"
        if airgap:  # no published port: its sshd on its own address in the lab's network
            networks = (item.get("NetworkSettings") or {}).get("Networks") or {}
            found = [str(n.get("IPAddress") or "") for n in networks.values() if isinstance(n, Mapping)]
            address = next((a for a in found if a), "")
            port = SSH_PORT if address else None
        out.append(
            Container(
                name=str(item.get("Name", "")).lstrip("/"),
                state=str((item.get("State") or {}).get("Status", "unknown")),
                image=str((item.get("Config") or {}).get("Image", "")),
                groups=_groups_label(labels.get(LABEL_GROUPS)),
                port=port,
                inventory=str(labels.get(LABEL_INVENTORY) or ""),
                prefix=str(labels.get(LABEL_PREFIX) or ""),
                address=address or "127.0.0.1",
                airgap=airgap,
            )
        )
    return sorted(out, key=lambda c: c.name)


def lab_containers(prefix: str) -> list[Container]:
    ids = docker("ps", "-aq", "--filter", f"label={LABEL_PREFIX}={prefix}").split()
    if not ids:
        return []
    return parse_inspect(json.loads(docker("inspect", *ids)))


def inventory_prefixes(inventory_dir: Path) -> set[str]:
    """The prefixes of the labs whose containers were made for this inventory folder."""
    here = str(inventory_dir.resolve())
    ids = docker("ps", "-aq", "--filter", f"label={LABEL_INVENTORY}={here}").split()
    return {c.prefix for c in parse_inspect(json.loads(docker("inspect", *ids)))} if ids else set()


def published_ports() -> set[int]:
    """127.0.0.1 ports that any container publishes (taken even when no proxy binds them)."""
    text = docker("ps", "-a", "--format", "{{.Ports}}")
    return {int(m) for m in _PORT_RE.findall(text)}


def ensure_network(spec: LabSpec) -> None:
    """A network per lab, so that the nodes resolve each other by name as servers do through DNS; an
    air-gapped lab's is `--internal` (no route out). One of the other kind is made again (`up` removed
    the containers of the other kind first: their airgap label differs)."""
    proc = run_command(["docker", "network", "inspect", spec.network], check=False)
    if proc.returncode == 0:
        internal = bool((json.loads(proc.stdout) or [{}])[0].get("Internal"))
        if internal == bool(spec.airgap):
            return
        docker("network", "rm", spec.network)
    internal_flag = ("--internal",) if spec.airgap else ()
    docker("network", "create", *internal_flag, "--label", f"{LABEL_PREFIX}={spec.prefix}", spec.network)


def remove_network(prefix: str) -> None:
    """The lab's network, when there is one."""
    if run_command(["docker", "network", "inspect", f"{prefix}-lab"], check=False).returncode == 0:
        docker("network", "rm", f"{prefix}-lab")


def run_container(spec: LabSpec, planned: PlannedNode) -> None:
    node = planned.node
    cache = ccache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    # An air-gapped node publishes nothing (no port reaches into an internal network): its sshd is
    # reached on its own address, which the machine routes to.
    reach = (
        ("--label", f"{LABEL_AIRGAP}={spec.airgap.resolve()}")
        if spec.airgap
        else ("-p", f"127.0.0.1:{planned.port}:22")
    )
    docker(
        "run", "-d",
        "--name", node.name,
        "--hostname", node.name,
        "--network", spec.network,
        "--label", f"{LABEL_PREFIX}={spec.prefix}",
        "--label", f"{LABEL_GROUPS}={','.join(node.groups)}",
        "--label", f"{LABEL_INVENTORY}={spec.inventory_dir.resolve()}",
        *SYSTEMD_RUN_OPTIONS,
        "-v", f"{cache}:{CCACHE_IN_NODE}",
        *reach,
        image_of(spec.distro_of(node)),
        SYSTEMD_COMMAND,
    )  # fmt: skip


# Run in each container: the lab key as root's only authorized key, sshd running with the host keys the
# image's first-boot unit generated (each container its own; made here if that unit has not), then the
# host public keys on stdout.
_NODE_SETUP = r"""
set -eu
umask 077
mkdir -p /root/.ssh
cat > /root/.ssh/authorized_keys
if [ ! -s /etc/ssh/ssh_host_ed25519_key.pub ]; then
  ssh-keygen -A >/dev/null
  systemctl restart ssh.service
fi
systemctl is-active --quiet ssh.service || systemctl start ssh.service
cat /etc/ssh/ssh_host_*_key.pub
"""


# A server has its distribution's kernel installed; a container boots none and runs the machine's.
# GPU nodes get Debian's kernel package (the one the archive carries, DEBIAN_KERNEL), so that the
# driver role builds its DKMS modules and the initramfs for a kernel that is really installed; and
# ccache with the lab's shared cache in the environment of SSH sessions (pam_env reads
# /etc/environment), which is where the driver role's DKMS build runs.
def kernel_packages(kernel: str) -> list[str]:
    """What a GPU node of the lab gets installed for `kernel` (_INSTALL_KERNEL), and what the lab's air-gap
    bundle must therefore carry (gpubring.lab.build_lab_bundle)."""
    return [f"linux-image-{kernel}", "ccache"]


# $1 the kernel, $2 ccache's folder in the node, then the packages (kernel_packages).
_INSTALL_KERNEL = r"""
set -eu
k="$1"
cache="$2"
shift 2
for line in DEBIAN_KERNEL_USE_CCACHE=1 "CCACHE_DIR=$cache"; do
  grep -qxF "$line" /etc/environment 2>/dev/null || echo "$line" >> /etc/environment
done
[ -e "/boot/vmlinuz-$k" ] && command -v ccache >/dev/null && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@" >/dev/null
test -e "/boot/vmlinuz-$k"
"""


def configure_node(name: str, public_key: str, kernel: str | None = None) -> list[str]:
    """Install the lab key (and a kernel) in a booted container; return its host public keys."""
    text = docker("exec", "-i", name, "sh", "-c", _NODE_SETUP, input_text=public_key + "\n")
    keys = [line for line in text.splitlines() if line.strip()]
    if not keys:
        raise LabError(f"{name}: no SSH host keys in /etc/ssh")
    if kernel:
        script = [_INSTALL_KERNEL, "kernel", kernel, CCACHE_IN_NODE, *kernel_packages(kernel)]
        proc = run_command(
            ["docker", "exec", name, "sh", "-c", *script],
            timeout=1200,
            check=False,
        )
        if proc.returncode != 0:
            raise LabError(
                f"{name}: installing linux-image-{kernel} failed (the archive may have moved on: "
                f"`gpubring lab down` and `lab up` again): {(proc.stderr or proc.stdout).strip()[-500:]}"
            )
    return keys


def debian_kernel(image: str) -> str:
    """The kernel ABI whose headers Debian's archive carries for the image's release (a throwaway
    container asks apt; the lab's nodes are not touched)."""
    script = 'apt-get update -qq >/dev/null && apt-cache depends "linux-headers-$(dpkg --print-architecture)"'
    text = docker("run", "--rm", image, "sh", "-c", script, timeout=600)
    match = re.search(r"Depends:\s*linux-headers-(\S+)", text)
    if match is None:
        raise LabError(f"{image}: cannot tell which kernel headers the archive carries:\n{text.strip()}")
    return match.group(1)
