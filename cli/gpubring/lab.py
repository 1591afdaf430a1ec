"""The lab: N systemd test-host containers reached over real SSH on 127.0.0.1 ports.

`gpubring lab up` starts containers named like real nodes (`gpub-cp1`, `gpub-gpu1`, ...) from the
`gpubring-testhost:DISTRO` image, publishes each one's sshd on its own 127.0.0.1 port, installs a key
generated for the lab, records the containers' host keys in a lab known_hosts file (host key checking
stays on) and writes an ordinary inventory folder, so that `gpubring up inventories/lab` goes over SSH
exactly as it does against servers.

What a container cannot do (load kernel modules, reboot, see a GPU) is said in the generated group_vars
through the roles' own variables (LAB_VARS below, the one list to extend); roles carry no lab branches.

Docker is driven through its CLI (subprocess); nothing here imports the Docker SDK, ansible or
ansible_runner.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from gpubring.paths import project_root

DISTROS = ("debian12", "debian13")
DEFAULT_PREFIX = "gpub"
DEFAULT_INVENTORY_DIR = Path("inventories/lab")
IMAGE_REPOSITORY = "gpubring-testhost"
BASE_PORT = 22201
MAX_PORT = 32767  # below Linux's default ephemeral range, so the kernel does not hand our ports out

# Labels on every lab container: which lab it belongs to and which inventory groups it is in.
LABEL_PREFIX = "io.gpubring.lab.prefix"
LABEL_GROUPS = "io.gpubring.lab.groups"
LABEL_INVENTORY = "io.gpubring.lab.inventory"

MARKER = ".gpubring-lab.json"  # hidden: Ansible skips dot-files when it reads an inventory folder
SSH_DIR = ".ssh"
KEY_NAME = "id_ed25519"
KNOWN_HOSTS = "known_hosts"

GROUP_CONTROL_PLANE = "control_plane"
GROUP_GPU = "gpu_nodes"
GROUP_CPU = "cpu_nodes"

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

PHASES = ("preflight", "host", "verify")
CHECK_ONLY_PHASES = ("cluster", "platform")
PHASES_SKIPPED_REASON = (
    "a lab of containers has no kubelet, kubeadm, API server or Helm charts to reach; the cluster and "
    "platform phases are proven by rendering, schema validation and check mode, and run on real clusters"
)

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")
_PORT_RE = re.compile(r"127\.0\.0\.1:(\d+)->")


class LabError(Exception):
    """A lab operation failed; the message says what and why."""


class LabInputError(LabError):
    """Bad input (the command exits 2)."""


# --- what a container cannot do, stated through the roles' own variables -------------------------


@dataclass(frozen=True)
class LabFact:
    """A lab variable's value that `lab up` finds out (see lab_facts), named here."""

    name: str


# The kernel Debian's archive carries for the lab's distro (`6.1.0-41-amd64`): a container runs the
# machine's kernel, which need not be a Debian one, so the driver is built for this one.
DEBIAN_KERNEL = LabFact("debian_kernel")


@dataclass(frozen=True)
class LabVar:
    """One inventory variable the lab sets, the group it goes to and why a lab needs it."""

    name: str
    value: Any  # a constant, or a LabFact found out by `lab up`
    group: Literal["all", "gpu_nodes"]
    why: str
    distros: tuple[str, ...] = DISTROS  # the lab distros it applies to


# The ONE list of lab variables. A variable is written only when a role's meta/argument_specs.yml
# (or settings.yml for gpubring_*) declares it, so a role that does not have it yet is not broken by it.
LAB_VARS: tuple[LabVar, ...] = (
    LabVar("gpubring_phases", list(PHASES), "all", "the phases a lab of containers can run"),
    LabVar("gpubring_phases_skipped_reason", PHASES_SKIPPED_REASON, "all", "said by `gpubring up`"),
    LabVar(
        "gpubring_phases_check_only",
        list(CHECK_ONLY_PHASES),
        "all",
        "`gpubring up --check` dry-runs them, as far as the unreachable repositories and API allow",
    ),
    # What a container cannot do.
    LabVar("gpubring_reboot_allowed", False, "all", "a container cannot reboot"),
    LabVar(
        "gpubring_serial",
        "100%",
        "all",
        "lab nodes are in no cluster yet, so nothing to keep serving: all GPU nodes at once",
    ),
    LabVar("preflight_require_gpu", False, "gpu_nodes", "a container has no GPU"),
    LabVar("preflight_check_time_sync", False, "all", "the clock is the machine's; no time service runs"),
    LabVar("preflight_fail_on_swap", False, "all", "a container sees the machine's swap, cannot turn it off"),
    LabVar("kernel_modules_load_now", False, "all", "a container cannot load kernel modules"),
    LabVar("kernel_sysctl_apply_now", False, "all", "/proc/sys is read-only in a container"),
    LabVar("kernel_swap_off_now", False, "all", "the swap areas a container sees are the machine's"),
    LabVar("kernel_bootloader_update", False, "all", "a container has no boot loader"),
    LabVar("nvidia_driver_load_modules", False, "gpu_nodes", "no GPU, and no module loading in a container"),
    LabVar("nvidia_driver_reboot", False, "gpu_nodes", "a container cannot reboot"),
    LabVar(
        "nvidia_driver_kernel_version",
        DEBIAN_KERNEL,
        "gpu_nodes",
        "the running kernel is the machine's: build for the Debian kernel `lab up` installs on GPU nodes",
    ),
    LabVar(
        "nvidia_driver_kernel_modules",
        "proprietary",
        "gpu_nodes",
        "no GPU for `auto` to look at; Debian non-free's driver builds the proprietary DKMS modules",
    ),
    LabVar("rdma_load_modules_now", False, "gpu_nodes", "a container cannot load kernel modules"),
    LabVar("rdma_acs_apply_now", False, "gpu_nodes", "the PCI devices a container sees are the machine's"),
    LabVar("rdma_bootloader_update", False, "gpu_nodes", "a container has no boot loader"),
    LabVar("kubelet_topology_apply", False, "gpu_nodes", "no kubelet runs in a lab: write the drop-in only"),
    LabVar(
        "kubelet_topology_reserved_cpus_per_numa",
        1,
        "gpu_nodes",
        "a lab node sees the machine's CPUs (2 on the build machines): reserving 2 would leave none",
    ),
    # What the machines a lab runs on cannot reach (DESIGN.md: no NVIDIA or Docker repositories).
    LabVar("nvidia_driver_source", "distribution", "gpu_nodes", "Debian non-free: no NVIDIA repository"),
    LabVar(
        "nvidia_container_toolkit_owner",
        "operator",
        "gpu_nodes",
        "NVIDIA's repository (packages and key) is out of reach: the other owner, the GPU Operator, "
        "is what a lab can state; the host path is proven by the role's Molecule scenario",
    ),
    LabVar(
        "containerd_cdi_enabled",
        False,
        "all",
        "bookworm's containerd is 1.6 (no CDI) and Docker's repository (containerd.io 1.7) is out of reach",
        distros=("debian12",),
    ),
)


def declared_variables(root: Path | None = None) -> frozenset[str]:
    """Every key that inventory validation accepts as declared: settings.yml, role argument specs and
    defaults (gpubring.validation.specs, the same table `gpubring check` uses)."""
    from gpubring.validation.specs import load_specs

    return frozenset(load_specs(root).keys)


def needed_facts(declared: Iterable[str], distro: str, lab_vars: Sequence[LabVar] = LAB_VARS) -> set[LabFact]:
    """The facts `lab up` has to find out for the variables it will write."""
    known = set(declared)
    return {
        v.value for v in lab_vars if isinstance(v.value, LabFact) and v.name in known and distro in v.distros
    }


def lab_group_vars(
    declared: Iterable[str],
    distro: str = DISTROS[0],
    facts: Mapping[str, Any] | None = None,
    lab_vars: Sequence[LabVar] = LAB_VARS,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The group_vars the lab writes ({"all": {...}, "gpu_nodes": {...}}) and the names left out."""
    known = set(declared)
    out: dict[str, dict[str, Any]] = {"all": {}, "gpu_nodes": {}}
    left_out: list[str] = []
    for var in lab_vars:
        if distro not in var.distros:
            continue
        if var.name not in known:
            left_out.append(var.name)
            continue
        value = var.value
        if isinstance(value, LabFact):
            if not facts or value.name not in facts:
                raise LabError(f"{var.name}: the lab did not find out {value.name}")
            value = facts[value.name]
        out[var.group][var.name] = value
    return out, left_out


# --- the shape of a lab ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LabSpec:
    """What `gpubring lab up` was asked for."""

    prefix: str = DEFAULT_PREFIX
    nodes: int = 3
    control_planes: int = 1
    cpu_nodes: int = 0
    distro: str = "debian12"
    inventory_dir: Path = DEFAULT_INVENTORY_DIR

    @property
    def image(self) -> str:
        return f"{IMAGE_REPOSITORY}:{self.distro}"

    @property
    def network(self) -> str:
        return f"{self.prefix}-lab"

    @property
    def gpu_nodes(self) -> int:
        return self.nodes - self.control_planes - self.cpu_nodes


def spec_problems(spec: LabSpec) -> list[str]:
    """Why a spec cannot be built (empty when it can)."""
    problems: list[str] = []
    if not _PREFIX_RE.match(spec.prefix):
        problems.append(
            f"--prefix {spec.prefix!r}: expected a hostname-safe name: lowercase letters, digits and '-', "
            "starting with a letter, at most 32 characters"
        )
    if spec.distro not in DISTROS:
        problems.append(f"--distro {spec.distro!r}: expected one of {', '.join(DISTROS)}")
    if spec.nodes < 1:
        problems.append(f"--nodes {spec.nodes}: expected at least 1")
    if spec.control_planes < 1 or spec.control_planes % 2 == 0:
        problems.append(f"--control-planes {spec.control_planes}: expected 1 or an odd number >= 3 (quorum)")
    if spec.cpu_nodes < 0:
        problems.append(f"--cpu-nodes {spec.cpu_nodes}: expected 0 or more")
    if spec.nodes >= 1 and spec.control_planes + max(spec.cpu_nodes, 0) > spec.nodes:
        problems.append(
            f"--nodes {spec.nodes}: expected at least --control-planes + --cpu-nodes "
            f"({spec.control_planes} + {spec.cpu_nodes})"
        )
    return problems


@dataclass(frozen=True)
class Node:
    name: str
    groups: tuple[str, ...]

    @property
    def group(self) -> str:
        """The node's main group (control planes that also run GPU work say control_plane)."""
        return self.groups[0]


def lab_nodes(spec: LabSpec) -> list[Node]:
    """The nodes of a lab, named like real nodes.

    With no dedicated GPU node (`--nodes 1`, or only control planes and CPU nodes), the control planes
    are GPU nodes too, as in a single-node or all-in-one cluster: a lab always has a GPU node to run
    the GPU host roles on.
    """
    all_in_one = spec.gpu_nodes == 0
    cp_groups = (GROUP_CONTROL_PLANE, GROUP_GPU) if all_in_one else (GROUP_CONTROL_PLANE,)
    nodes = [Node(f"{spec.prefix}-cp{i}", cp_groups) for i in range(1, spec.control_planes + 1)]
    nodes += [Node(f"{spec.prefix}-gpu{i}", (GROUP_GPU,)) for i in range(1, spec.gpu_nodes + 1)]
    nodes += [Node(f"{spec.prefix}-cpu{i}", (GROUP_CPU,)) for i in range(1, spec.cpu_nodes + 1)]
    return nodes


@dataclass(frozen=True)
class Container:
    """A lab container as Docker reports it."""

    name: str
    state: str  # running, exited, created, ...
    image: str
    groups: tuple[str, ...]
    port: int | None
    inventory: str = ""  # the inventory folder the lab was made for (absolute)
    prefix: str = ""


@dataclass(frozen=True)
class PlannedNode:
    node: Node
    port: int
    action: Literal["keep", "start", "create"]


@dataclass(frozen=True)
class LabPlan:
    nodes: tuple[PlannedNode, ...]
    remove: tuple[str, ...] = field(default_factory=tuple)


def port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:port (a bind test)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def allocate_ports(
    count: int,
    taken: Iterable[int],
    is_free: Callable[[int], bool] = port_is_free,
    start: int = BASE_PORT,
    stop: int = MAX_PORT,
) -> list[int]:
    """`count` ports from `start` up that are neither taken nor bound by anyone."""
    used = set(taken)
    ports: list[int] = []
    port = start
    while len(ports) < count:
        if port > stop:
            raise LabError(f"no free 127.0.0.1 port between {start} and {stop} for the lab's sshd")
        if port not in used and is_free(port):
            ports.append(port)
            used.add(port)
        port += 1
    return ports


def plan_lab(
    spec: LabSpec,
    existing: Sequence[Container],
    taken_ports: Iterable[int] = (),
    is_free: Callable[[int], bool] = port_is_free,
) -> LabPlan:
    """What to keep, start, create and remove so that the lab has exactly the asked shape.

    A container is reused when its name, image and groups match; anything else of this lab goes.
    Kept containers keep their ports; new ones get free ports that no container publishes.
    """
    wanted = lab_nodes(spec)
    reuse: dict[str, Container] = {}
    remove: list[str] = []
    for c in existing:
        node = next((n for n in wanted if n.name == c.name), None)
        if node is not None and c.image == spec.image and c.groups == node.groups and c.port is not None:
            reuse[c.name] = c
        else:
            remove.append(c.name)
    # Ports of containers about to be removed are not handed out again in the same run: their
    # proxies may still hold them while the plan is made.
    taken = set(taken_ports) | {c.port for c in existing if c.port is not None}
    fresh = iter(allocate_ports(len(wanted) - len(reuse), taken, is_free))
    planned: list[PlannedNode] = []
    for node in wanted:
        kept = reuse.get(node.name)
        if kept is not None and kept.port is not None:
            planned.append(PlannedNode(node, kept.port, "keep" if kept.state == "running" else "start"))
        else:
            planned.append(PlannedNode(node, next(fresh), "create"))
    return LabPlan(tuple(planned), tuple(sorted(remove)))


# --- the generated inventory ----------------------------------------------------------------------


@dataclass(frozen=True)
class LabPaths:
    root: Path

    @property
    def marker(self) -> Path:
        return self.root / MARKER

    @property
    def ssh_dir(self) -> Path:
        return self.root / SSH_DIR

    @property
    def key(self) -> Path:
        return self.ssh_dir / KEY_NAME

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / KNOWN_HOSTS

    @property
    def hosts(self) -> Path:
        return self.root / "hosts.yml"

    def group_vars(self, group: str) -> Path:
        return self.root / "group_vars" / group / "lab.yml"


def ssh_common_args(paths: LabPaths) -> str:
    """The SSH options of the lab: its own known_hosts, host key checking ON, only the lab key."""
    known = shlex.quote(str(paths.known_hosts.resolve()))
    return (
        f"-o UserKnownHostsFile={known} -o GlobalKnownHostsFile=/dev/null "
        "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
    )


def render_hosts(nodes: Sequence[PlannedNode], paths: LabPaths) -> dict[str, Any]:
    """hosts.yml as data: groups control_plane, gpu_nodes (and cpu_nodes), one 127.0.0.1 port each."""
    children: dict[str, dict[str, Any]] = {}
    for group in (GROUP_CONTROL_PLANE, GROUP_GPU, GROUP_CPU):
        members = {
            p.node.name: {"ansible_host": "127.0.0.1", "ansible_port": p.port}
            for p in nodes
            if group in p.node.groups
        }
        if members or group != GROUP_CPU:
            children[group] = {"hosts": members}
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(paths.key.resolve()),
                "ansible_ssh_common_args": ssh_common_args(paths),
                "ansible_python_interpreter": "/usr/bin/python3",
            },
            "children": children,
        }
    }


def known_hosts_lines(host_keys: Mapping[int, Sequence[str]]) -> list[str]:
    """known_hosts lines for `[127.0.0.1]:PORT` from each container's `ssh_host_*_key.pub` lines."""
    lines: list[str] = []
    for port in sorted(host_keys):
        for pub in host_keys[port]:
            parts = pub.split()
            if len(parts) >= 2 and parts[0].startswith(("ssh-", "ecdsa-")):
                lines.append(f"[127.0.0.1]:{port} {parts[0]} {parts[1]}")
    return lines


_HEADER = """\
# {what}.
# Written by `gpubring lab up`, removed by `gpubring lab down`; do not edit (the next `lab up` writes
# it again). docs/lab.md explains the lab.
"""


def _dump(data: Any, what: str) -> str:
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120) if data else "{}\n"
    return _HEADER.format(what=what) + "---\n" + body


def write_inventory(
    spec: LabSpec,
    nodes: Sequence[PlannedNode],
    host_keys: Mapping[int, Sequence[str]],
    declared: Iterable[str],
    facts: Mapping[str, Any] | None = None,
) -> list[str]:
    """Write hosts.yml, group_vars, known_hosts and the marker; return the lab vars left out."""
    paths = LabPaths(spec.inventory_dir)
    group_vars, left_out = lab_group_vars(declared, spec.distro, facts)
    _write(paths.known_hosts, "\n".join(known_hosts_lines(host_keys)) + "\n", 0o600)
    _write(
        paths.hosts,
        _dump(render_hosts(nodes, paths), "The lab's hosts and how to reach them over SSH"),
        0o644,
    )
    _write(
        paths.group_vars("all"),
        _dump(group_vars["all"], "The lab's phases, and what a container cannot do (roles' own inputs)"),
        0o644,
    )
    _write(
        paths.group_vars(GROUP_GPU),
        _dump(group_vars["gpu_nodes"], "What a container cannot do on a GPU node (roles' own inputs)"),
        0o644,
    )
    marker = {
        "prefix": spec.prefix,
        "distro": spec.distro,
        "nodes": [{"name": p.node.name, "groups": list(p.node.groups), "port": p.port} for p in nodes],
        "facts": dict(facts or {}),
    }
    _write(paths.marker, json.dumps(marker, indent=2) + "\n", 0o644)
    return left_out


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    tmp.replace(path)


def read_marker(inventory_dir: Path) -> dict[str, Any] | None:
    """The lab's marker in an inventory folder, or None when the folder is not a lab's."""
    marker = inventory_dir / MARKER
    if not marker.is_file():
        return None
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def resolve_prefix(prefix: str | None, inventory_dir: Path) -> str:
    """The prefix for `lab up`: the one asked for, else the folder's lab's, else the default."""
    if prefix:
        return prefix
    marker = read_marker(inventory_dir)
    recorded = marker.get("prefix") if marker else None
    return recorded if isinstance(recorded, str) and recorded else DEFAULT_PREFIX


def find_prefix(prefix: str | None, inventory_dir: Path) -> str | None:
    """The lab `status` and `down` act on: the prefix asked for, else the folder's lab's, else the lab
    whose containers were made for this folder, else the default lab when this is its folder, else None
    (never another folder's lab)."""
    if prefix:
        return prefix
    marker = read_marker(inventory_dir)
    recorded = marker.get("prefix") if marker else None
    if isinstance(recorded, str) and recorded:
        return recorded
    if engine_answers():
        here = str(inventory_dir.resolve())
        ids = docker("ps", "-aq", "--filter", f"label={LABEL_INVENTORY}={here}").split()
        found = {c.prefix for c in parse_inspect(json.loads(docker("inspect", *ids)))} if ids else set()
        if len(found) == 1:
            return found.pop()
    if inventory_dir.resolve() == DEFAULT_INVENTORY_DIR.resolve():
        return DEFAULT_PREFIX
    return None


def check_inventory_dir(spec: LabSpec) -> None:
    """Refuse to write over a folder that is not this lab's inventory."""
    root = spec.inventory_dir
    if not root.exists():
        return
    if not root.is_dir():
        raise LabInputError(f"{root}: expected a folder for the lab's inventory, found a file")
    marker = read_marker(root)
    if marker is None:
        if any(p.name != ".gpubring" for p in root.iterdir()):
            raise LabInputError(
                f"{root}: is not a lab inventory (no {MARKER}); choose another --inventory-dir"
            )
        return
    if marker.get("prefix") != spec.prefix:
        raise LabInputError(
            f"{root}: holds lab {marker.get('prefix')!r}, not {spec.prefix!r}; run "
            f"`gpubring lab down --inventory-dir {root}` first or choose another --inventory-dir"
        )


def check_ownership(spec: LabSpec, existing: Sequence[Container]) -> None:
    """Refuse to take over containers that a lab with this prefix made for another inventory folder."""
    here = str(spec.inventory_dir.resolve())
    elsewhere = sorted({c.inventory for c in existing if c.inventory and c.inventory != here})
    if elsewhere:
        raise LabInputError(
            f"lab {spec.prefix!r} already runs for the inventory {elsewhere[0]}; use another --prefix, "
            f"or `gpubring lab down --inventory-dir {elsewhere[0]}` first"
        )


def ensure_key(paths: LabPaths, prefix: str) -> str:
    """The lab's ed25519 key pair (made once, mode 0600); returns the public key line."""
    paths.ssh_dir.mkdir(parents=True, exist_ok=True)
    paths.ssh_dir.chmod(0o700)
    pub = paths.key.with_name(KEY_NAME + ".pub")
    if not (paths.key.is_file() and pub.is_file()):
        for stale in (paths.key, pub):
            stale.unlink(missing_ok=True)
        comment = f"gpubring-lab-{prefix}"
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(paths.key)])
    paths.key.chmod(0o600)
    pub.chmod(0o600)
    return pub.read_text(encoding="utf-8").strip()


# --- docker through its CLI -----------------------------------------------------------------------


def _run(
    argv: Sequence[str], *, input_text: str | None = None, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
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
    return _run(["docker", *args], input_text=input_text, timeout=timeout, check=check).stdout


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        proc = _run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30, check=False)
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
    """molecule/images/build.sh DISTRO (rebuilds only when the recipe changed), else insist on the image."""
    script = project_root() / "molecule" / "images" / "build.sh"
    if script.is_file():
        out(f"image: {spec.image} (molecule/images/build.sh {spec.distro})")
        proc = subprocess.run(["bash", str(script), spec.distro], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-10:]
            raise LabError(f"building {spec.image} failed:\n" + "\n".join(tail))
        return
    if _run(["docker", "image", "inspect", spec.image], check=False).returncode != 0:
        raise LabError(f"image {spec.image} is missing, and no molecule/images/build.sh (a checkout's)")


def _groups_label(value: str | None) -> tuple[str, ...]:
    return tuple(g for g in (value or "").split(",") if g)


def parse_inspect(data: Sequence[Mapping[str, Any]]) -> list[Container]:
    """Containers from `docker inspect` JSON."""
    out: list[Container] = []
    for item in data:
        labels = (item.get("Config") or {}).get("Labels") or {}
        bindings = ((item.get("HostConfig") or {}).get("PortBindings") or {}).get("22/tcp") or []
        port = next((int(b["HostPort"]) for b in bindings if str(b.get("HostPort", "")).isdigit()), None)
        out.append(
            Container(
                name=str(item.get("Name", "")).lstrip("/"),
                state=str((item.get("State") or {}).get("Status", "unknown")),
                image=str((item.get("Config") or {}).get("Image", "")),
                groups=_groups_label(labels.get(LABEL_GROUPS)),
                port=port,
                inventory=str(labels.get(LABEL_INVENTORY) or ""),
                prefix=str(labels.get(LABEL_PREFIX) or ""),
            )
        )
    return sorted(out, key=lambda c: c.name)


def lab_containers(prefix: str) -> list[Container]:
    ids = docker("ps", "-aq", "--filter", f"label={LABEL_PREFIX}={prefix}").split()
    if not ids:
        return []
    return parse_inspect(json.loads(docker("inspect", *ids)))


def published_ports() -> set[int]:
    """127.0.0.1 ports that any container publishes (taken even when no proxy binds them)."""
    text = docker("ps", "-a", "--format", "{{.Ports}}")
    return {int(m) for m in _PORT_RE.findall(text)}


def ensure_network(spec: LabSpec) -> None:
    """A network per lab, so that the nodes resolve each other by name as servers do through DNS."""
    if _run(["docker", "network", "inspect", spec.network], check=False).returncode != 0:
        docker("network", "create", "--label", f"{LABEL_PREFIX}={spec.prefix}", spec.network)


def run_container(spec: LabSpec, planned: PlannedNode) -> None:
    node = planned.node
    docker(
        "run", "-d",
        "--name", node.name,
        "--hostname", node.name,
        "--network", spec.network,
        "--label", f"{LABEL_PREFIX}={spec.prefix}",
        "--label", f"{LABEL_GROUPS}={','.join(node.groups)}",
        "--label", f"{LABEL_INVENTORY}={spec.inventory_dir.resolve()}",
        *SYSTEMD_RUN_OPTIONS,
        "-p", f"127.0.0.1:{planned.port}:22",
        spec.image,
        SYSTEMD_COMMAND,
    )  # fmt: skip


def wait_for_systemd(name: str, timeout: float = 90) -> None:
    """Until systemd in the container has finished booting (running or degraded)."""
    deadline = time.monotonic() + timeout
    state = "unknown"
    while time.monotonic() < deadline:
        proc = _run(["docker", "exec", name, "systemctl", "is-system-running"], check=False, timeout=30)
        state = proc.stdout.strip() or proc.stderr.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    logs = _run(["docker", "logs", "--tail", "15", name], check=False).stdout
    raise LabError(f"{name}: systemd did not finish booting within {timeout:.0f}s (state: {state})\n{logs}")


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
# driver role builds its DKMS modules and the initramfs for a kernel that is really installed.
_INSTALL_KERNEL = r"""
set -eu
k="$1"
[ -e "/boot/vmlinuz-$k" ] && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "linux-image-$k" >/dev/null
test -e "/boot/vmlinuz-$k"
"""


def setup_node(planned: PlannedNode, public_key: str, kernel: str | None = None) -> list[str]:
    """Wait for systemd, install the lab key (and a kernel), return the node's host public keys."""
    name = planned.node.name
    wait_for_systemd(name)
    text = docker("exec", "-i", name, "sh", "-c", _NODE_SETUP, input_text=public_key + "\n")
    keys = [line for line in text.splitlines() if line.strip()]
    if not keys:
        raise LabError(f"{name}: no SSH host keys in /etc/ssh")
    if kernel:
        proc = _run(
            ["docker", "exec", name, "sh", "-c", _INSTALL_KERNEL, "kernel", kernel], timeout=1200, check=False
        )
        if proc.returncode != 0:
            raise LabError(
                f"{name}: installing linux-image-{kernel} failed (the archive may have moved on: "
                f"`gpubring lab down` and `lab up` again): {(proc.stderr or proc.stdout).strip()[-500:]}"
            )
    return keys


def ssh_argv(paths: LabPaths, port: int, *command: str, timeout: int = 5) -> list[str]:
    """ssh to a lab node with the options the inventory gives Ansible (host key checking on)."""
    return [
        "ssh",
        "-i", str(paths.key),
        *shlex.split(ssh_common_args(paths)),
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={timeout}",
        "-o", "LogLevel=ERROR",
        "-p", str(port),
        "root@127.0.0.1",
        *command,
    ]  # fmt: skip


def ssh_answers(paths: LabPaths, port: int) -> bool:
    try:
        return _run(ssh_argv(paths, port, "true"), timeout=15, check=False).returncode == 0
    except LabError:
        return False


def wait_for_ssh(paths: LabPaths, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        proc = _run(ssh_argv(paths, port, "true"), timeout=15, check=False)
        if proc.returncode == 0:
            return
        if time.monotonic() >= deadline:
            why = proc.stderr.strip()
            raise LabError(f"127.0.0.1:{port}: SSH did not answer within {timeout:.0f}s: {why}")
        time.sleep(1)


# --- what `lab up` finds out ----------------------------------------------------------------------


def debian_kernel(image: str) -> str:
    """The kernel ABI whose headers Debian's archive carries for the image's release (a throwaway
    container asks apt; the lab's nodes are not touched)."""
    script = 'apt-get update -qq >/dev/null && apt-cache depends "linux-headers-$(dpkg --print-architecture)"'
    text = docker("run", "--rm", image, "sh", "-c", script, timeout=600)
    match = re.search(r"Depends:\s*linux-headers-(\S+)", text)
    if match is None:
        raise LabError(f"{image}: cannot tell which kernel headers the archive carries:\n{text.strip()}")
    return match.group(1)


def lab_facts(
    spec: LabSpec, needed: Iterable[LabFact], previous: Mapping[str, Any] | None, out: Callable[[str], None]
) -> dict[str, Any]:
    """The facts the lab variables need, reusing what the folder's marker recorded for this distro."""
    facts: dict[str, Any] = {}
    recorded = (
        dict((previous or {}).get("facts") or {}) if (previous or {}).get("distro") == spec.distro else {}
    )
    for fact in sorted(needed, key=lambda f: f.name):
        if fact.name in recorded:
            facts[fact.name] = recorded[fact.name]
        elif fact == DEBIAN_KERNEL:
            facts[fact.name] = debian_kernel(spec.image)
            out(f"kernel: Debian's archive carries {facts[fact.name]}; GPU nodes build the driver for it")
        else:
            raise LabError(f"no way to find out {fact.name}")
    return facts


# --- the verbs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabStatus:
    name: str
    group: str
    state: str
    port: int | None
    ssh: bool | None  # None: not asked (not running, or no lab key)


def up(spec: LabSpec, out: Callable[[str], None] = print, ssh_timeout: float = 120) -> LabPlan:
    """Bring the lab to the asked shape and write its inventory; idempotent."""
    problems = spec_problems(spec)
    if problems:
        raise LabInputError("\n".join(problems))
    check_inventory_dir(spec)
    ensure_engine(out)
    ensure_image(spec, out)
    declared = declared_variables()
    facts = lab_facts(spec, needed_facts(declared, spec.distro), read_marker(spec.inventory_dir), out)
    existing = lab_containers(spec.prefix)
    check_ownership(spec, existing)
    plan = plan_lab(spec, existing, published_ports())
    for name in plan.remove:
        out(f"remove {name} (not in the asked shape)")
        docker("rm", "-f", "-v", name)
    ensure_network(spec)
    for p in plan.nodes:
        if p.action == "create":
            out(f"create {p.node.name} ({','.join(p.node.groups)}) ssh 127.0.0.1:{p.port}")
            run_container(spec, p)
        elif p.action == "start":
            out(f"start {p.node.name} ssh 127.0.0.1:{p.port}")
            docker("start", p.node.name)
        else:
            out(f"reuse {p.node.name} ssh 127.0.0.1:{p.port}")
    paths = LabPaths(spec.inventory_dir)
    public_key = ensure_key(paths, spec.prefix)
    kernel = facts.get(DEBIAN_KERNEL.name)
    gpu = [p.node.name for p in plan.nodes if GROUP_GPU in p.node.groups and p.action == "create"]
    if kernel and gpu:
        out(f"kernel: installing linux-image-{kernel} on {', '.join(gpu)} (containers have no kernel)")

    def setup(p: PlannedNode) -> list[str]:
        return setup_node(p, public_key, kernel if GROUP_GPU in p.node.groups else None)

    with ThreadPoolExecutor(max_workers=min(8, len(plan.nodes))) as pool:
        keys = list(pool.map(setup, plan.nodes))
    host_keys = {p.port: k for p, k in zip(plan.nodes, keys, strict=True)}
    left_out = write_inventory(spec, plan.nodes, host_keys, declared, facts)
    if left_out:
        out("lab variables no role declares yet (not written): " + ", ".join(left_out))
    deadline = time.monotonic() + ssh_timeout

    def reachable(p: PlannedNode) -> None:
        wait_for_ssh(paths, p.port, max(5.0, deadline - time.monotonic()))

    with ThreadPoolExecutor(max_workers=min(8, len(plan.nodes))) as pool:
        list(pool.map(reachable, plan.nodes))
    out(f"lab {spec.prefix}: {len(plan.nodes)} nodes answer SSH; inventory {spec.inventory_dir}")
    return plan


def status(prefix: str, inventory_dir: Path) -> list[LabStatus]:
    """The lab's containers and whether each answers SSH; empty when there is no lab."""
    if not engine_answers():
        return []
    containers = lab_containers(prefix)
    paths = LabPaths(inventory_dir)
    can_ssh = paths.key.is_file() and paths.known_hosts.is_file()

    def one(c: Container) -> LabStatus:
        ssh = ssh_answers(paths, c.port) if (can_ssh and c.state == "running" and c.port) else None
        return LabStatus(c.name, c.groups[0] if c.groups else "?", c.state, c.port, ssh)

    with ThreadPoolExecutor(max_workers=8) as pool:
        rows = list(pool.map(one, containers))
    return sorted(rows, key=lambda r: (_GROUP_ORDER.get(r.group, 9), _natural(r.name)))


_GROUP_ORDER = {GROUP_CONTROL_PLANE: 0, GROUP_GPU: 1, GROUP_CPU: 2}


def _natural(name: str) -> tuple[str | int, ...]:
    """gpu2 before gpu10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def down(prefix: str, inventory_dir: Path, out: Callable[[str], None] = print) -> None:
    """Remove the lab's containers, network, key and generated inventory; fine when none exist."""
    if engine_answers():
        containers = lab_containers(prefix)
        if containers:
            out(f"remove {', '.join(c.name for c in containers)}")
            docker("rm", "-f", "-v", *(c.name for c in containers))
        if _run(["docker", "network", "inspect", f"{prefix}-lab"], check=False).returncode == 0:
            docker("network", "rm", f"{prefix}-lab")
    else:
        out("no Docker engine answers: no containers to remove")
    marker = read_marker(inventory_dir)
    if marker is None:
        if inventory_dir.exists():
            out(f"{inventory_dir}: not a lab inventory (no {MARKER}); left alone")
        return
    if marker.get("prefix") not in (None, prefix):
        out(f"{inventory_dir}: holds lab {marker.get('prefix')!r}, not {prefix!r}; left alone")
        return
    shutil.rmtree(inventory_dir)
    out(f"removed {inventory_dir} (inventory, lab key, known_hosts, run history)")
