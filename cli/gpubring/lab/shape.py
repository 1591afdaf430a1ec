"""The shape of a lab: what `gpubring lab up` was asked for, its nodes, and the plan that turns the
containers there are into that shape (keep, start, create, remove). No Docker, no files."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

DISTROS = ("debian12", "debian13")
DEFAULT_PREFIX = "gpub"
DEFAULT_INVENTORY_DIR = Path("inventories/lab")
IMAGE_REPOSITORY = "gpubring-testhost"
BASE_PORT = 22201
SSH_PORT = 22  # an air-gapped node's sshd, on its own address
MAX_PORT = 32767  # below Linux's default ephemeral range, so the kernel does not hand our ports out

GROUP_CONTROL_PLANE = "control_plane"
GROUP_GPU = "gpu_nodes"
GROUP_CPU = "cpu_nodes"

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")


def image_of(distro: str) -> str:
    """The test-host image of a distro (molecule/images/build.sh builds it)."""
    return f"{IMAGE_REPOSITORY}:{distro}"


class LabError(Exception):
    """A lab operation failed; the message says what and why."""


class LabInputError(LabError):
    """Bad input (the command exits 2)."""


@dataclass(frozen=True)
class LabSpec:
    """What `gpubring lab up` was asked for."""

    prefix: str = DEFAULT_PREFIX
    nodes: int = 3
    control_planes: int = 1
    cpu_nodes: int = 0
    distro: str = "debian12"
    inventory_dir: Path = DEFAULT_INVENTORY_DIR
    # The GPU nodes' distro when it is not --distro (`--gpu-distro`): a lab whose GPU nodes run one
    # Debian release and its control planes and CPU nodes another, so that one lab exercises both.
    gpu_distro: str | None = None
    # The bundle folder of an air-gapped lab (`--airgap`, gpubring.lab.airgap): its nodes on an internal
    # network with no route out, reached on their own address and port 22, a mirror container serving it.
    airgap: Path | None = None

    @property
    def image(self) -> str:
        """The image of the lab's --distro (its control planes and CPU nodes)."""
        return image_of(self.distro)

    def distro_of(self, node: Node) -> str:
        """A node's distro: --gpu-distro on GPU nodes (all-in-one control planes too), else --distro."""
        return self.gpu_distro if self.gpu_distro and GROUP_GPU in node.groups else self.distro

    @property
    def distros(self) -> tuple[str, ...]:
        """The distros the lab's nodes run, in DISTROS order."""
        used = {self.distro_of(n) for n in lab_nodes(self)}
        return tuple(d for d in DISTROS if d in used) + tuple(sorted(used - set(DISTROS)))

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
    if spec.gpu_distro is not None and spec.gpu_distro not in DISTROS:
        problems.append(f"--gpu-distro {spec.gpu_distro!r}: expected one of {', '.join(DISTROS)}")
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
    address: str = "127.0.0.1"  # where its sshd is reached: 127.0.0.1 (a published port), else its own IP
    airgap: str = ""  # the bundle folder of an air-gapped lab's node (its label)


@dataclass(frozen=True)
class PlannedNode:
    node: Node
    port: int
    action: Literal["keep", "start", "create"]
    address: str = "127.0.0.1"  # an air-gapped node's IP on the lab's internal network (known once it runs)

    @property
    def endpoint(self) -> str:
        """Its sshd as known_hosts names it: `[127.0.0.1]:PORT`, or the bare address on port 22."""
        return self.address if self.port == SSH_PORT else f"[{self.address}]:{self.port}"


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
        if (
            node is not None
            and c.image == image_of(spec.distro_of(node))
            and c.groups == node.groups
            and c.port is not None
            and c.airgap == (str(spec.airgap.resolve()) if spec.airgap else "")
        ):
            reuse[c.name] = c
        else:
            remove.append(c.name)
    # Ports of containers about to be removed are not handed out again in the same run: their
    # proxies may still hold them while the plan is made.
    taken = set(taken_ports) | {c.port for c in existing if c.port is not None}
    count = 0 if spec.airgap else len(wanted) - len(reuse)  # an air-gapped node publishes no port
    fresh = iter(allocate_ports(count, taken, is_free))
    planned: list[PlannedNode] = []
    for node in wanted:
        kept = reuse.get(node.name)
        if kept is not None and kept.port is not None:
            action: Literal["keep", "start"] = "keep" if kept.state == "running" else "start"
            planned.append(PlannedNode(node, kept.port, action, kept.address))
        else:
            planned.append(PlannedNode(node, SSH_PORT if spec.airgap else next(fresh), "create"))
    return LabPlan(tuple(planned), tuple(sorted(remove)))
