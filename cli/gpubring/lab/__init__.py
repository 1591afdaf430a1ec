"""The lab: N systemd test-host containers reached over real SSH on 127.0.0.1 ports.

`gpubring lab up` starts containers named like real nodes (`gpub-cp1`, `gpub-gpu1`, ...) from the
`gpubring-testhost:DISTRO` image, publishes each one's sshd on its own 127.0.0.1 port, installs a key
generated for the lab, records the containers' host keys in a lab known_hosts file (host key checking
stays on) and writes an ordinary inventory folder, so that `gpubring up inventories/lab` goes over SSH
exactly as it does against servers.

What a container cannot do (load kernel modules, reboot, see a GPU) is said in the generated group_vars
through the roles' own variables (vars.yml in this package, the one list to extend); roles carry no lab
branches.

The parts: shape (the asked shape and the plan), docker (engine, image, network, containers, through
the Docker CLI), variables (vars.yml and the facts `lab up` finds out), inventory (hosts.yml,
known_hosts, group_vars, the marker), wait (systemd and SSH). This module holds the verbs (up, status,
down) and names what the command, the tests and the benchmarks use. Nothing here imports the Docker
SDK, ansible or ansible_runner.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpubring.lab.airgap import (
    RELEASES,
    bundle_kernel,
    bundle_problems,
    ensure_mirror,
    mirror_name,
    mirror_state,
    point_node_at_mirror,
    remove_mirror,
)
from gpubring.lab.docker import (
    LABEL_GROUPS,
    LABEL_INVENTORY,
    LABEL_PREFIX,
    configure_node,
    docker,
    engine_answers,
    ensure_engine,
    ensure_image,
    ensure_network,
    inventory_prefixes,
    kernel_packages,
    lab_containers,
    parse_inspect,
    published_ports,
    remove_network,
    run_container,
)
from gpubring.lab.inventory import (
    MARKER,
    LabPaths,
    check_inventory_dir,
    check_ownership,
    ensure_key,
    known_hosts_lines,
    read_marker,
    render_hosts,
    resolve_prefix,
    write_inventory,
)
from gpubring.lab.shape import (
    DEFAULT_INVENTORY_DIR,
    DEFAULT_PREFIX,
    DISTROS,
    GROUP_CONTROL_PLANE,
    GROUP_CPU,
    GROUP_GPU,
    SSH_PORT,
    Container,
    LabError,
    LabInputError,
    LabPlan,
    LabSpec,
    Node,
    PlannedNode,
    allocate_ports,
    image_of,
    lab_nodes,
    plan_lab,
    port_is_free,
    spec_problems,
)
from gpubring.lab.variables import (
    DEBIAN_KERNEL,
    LabFact,
    LabVar,
    declared_variables,
    facts_by_distro,
    lab_facts,
    lab_group_vars,
    lab_inventory_vars,
    lab_vars,
    needed_facts,
)
from gpubring.lab.wait import ssh_answers, wait_for_ssh, wait_for_systemd

__all__ = [
    "DEBIAN_KERNEL",
    "DEFAULT_INVENTORY_DIR",
    "DEFAULT_PREFIX",
    "DISTROS",
    "LABEL_GROUPS",
    "LABEL_INVENTORY",
    "LABEL_PREFIX",
    "LAB_BUNDLE_INVENTORY",
    "MARKER",
    "Container",
    "LabError",
    "LabFact",
    "LabInputError",
    "LabPaths",
    "LabPlan",
    "LabSpec",
    "LabStatus",
    "LabVar",
    "Node",
    "PlannedNode",
    "allocate_ports",
    "build_lab_bundle",
    "check_inventory_dir",
    "check_ownership",
    "declared_variables",
    "down",
    "ensure_key",
    "facts_by_distro",
    "find_prefix",
    "image_of",
    "known_hosts_lines",
    "lab_builds_bundle",
    "lab_facts",
    "lab_group_vars",
    "lab_inventory_vars",
    "lab_nodes",
    "lab_vars",
    "mirror_state",
    "needed_facts",
    "parse_inspect",
    "plan_lab",
    "port_is_free",
    "read_marker",
    "render_hosts",
    "resolve_prefix",
    "setup_node",
    "spec_problems",
    "status",
    "up",
    "write_inventory",
]


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
        found = inventory_prefixes(inventory_dir)
        if len(found) == 1:
            return found.pop()
    if inventory_dir.resolve() == DEFAULT_INVENTORY_DIR.resolve():
        return DEFAULT_PREFIX
    return None


def setup_node(
    planned: PlannedNode, public_key: str, kernel: str | None = None, mirror_of: str | None = None
) -> list[str]:
    """Wait for systemd, point apt at the lab's mirror (`mirror_of`: an air-gapped lab's prefix), install
    the lab key (and a kernel), return the node's host public keys."""
    wait_for_systemd(planned.node.name)
    if mirror_of:
        point_node_at_mirror(planned.node.name, mirror_of)
    return configure_node(planned.node.name, public_key, kernel)


# --- the verbs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabStatus:
    name: str
    group: str
    state: str
    port: int | None
    ssh: bool | None  # None: not asked (not running, or no lab key)
    address: str = "127.0.0.1"


# In a bundle folder `lab up --airgap` builds: the inventory of the lab's shape it was built for (the
# mirror serves only apt/, charts/ and files/). Its presence says the lab owns the folder's apt part.
LAB_BUNDLE_INVENTORY = ".lab-inventory"


def lab_builds_bundle(bundle: Path) -> bool:
    """Whether `lab up --airgap` builds (or completes) the bundle itself: a folder that does not exist
    yet, an empty one, or one it built before. A bundle of the user's (`gpubring bundle` of another
    inventory) is served as it is, checked by bundle_problems."""
    if not bundle.exists():
        return True
    return bundle.is_dir() and (not any(bundle.iterdir()) or (bundle / LAB_BUNDLE_INVENTORY).is_dir())


def build_lab_bundle(
    spec: LabSpec,
    declared: Collection[str],
    facts: Mapping[str, Mapping[str, Any]],
    out: Callable[[str], None],
) -> None:
    """`gpubring bundle --only apt` for the lab into spec.airgap: what the roles install on the lab's
    nodes (read from an inventory of the lab's shape and variables, written in the folder's
    .lab-inventory/), and what `lab up` itself installs on GPU nodes (Debian's kernel and ccache,
    configure_node), for the lab's releases only. A second build resumes (a warm one takes seconds); two
    labs building into one folder take turns (flock). LabError names the packages the machine's apt
    sources cannot give."""
    import fcntl

    from gpubring import bundle
    from gpubring.inventory import InventoryError, load_inventory

    assert spec.airgap is not None
    folder = spec.airgap
    try:
        bundle.check_folder(folder)
    except bundle.BundleError as exc:
        raise LabInputError(f"--airgap {exc}") from None
    releases = {d: RELEASES[d] for d in spec.distros if d in RELEASES}
    extra: dict[str, list[str]] = {}
    for node in lab_nodes(spec):
        kernel = facts.get(spec.distro_of(node), {}).get(DEBIAN_KERNEL.name)
        if kernel and GROUP_GPU in node.groups:
            extra[releases[spec.distro_of(node)]] = kernel_packages(kernel)
    with (folder / ".lab-build.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out(f"bundle: waiting for another lab's build into {folder}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        shape = replace(spec, inventory_dir=folder / LAB_BUNDLE_INVENTORY, airgap=None)
        # Addresses of TEST-NET-1 (RFC 5737): nothing connects to this inventory, it is only read.
        nodes = [
            PlannedNode(node, SSH_PORT, "create", f"192.0.2.{i}") for i, node in enumerate(lab_nodes(spec), 1)
        ]
        write_inventory(shape, nodes, {}, declared, facts)
        try:
            inv = load_inventory(shape.inventory_dir)
        except InventoryError as exc:
            problems = "; ".join(map(str, exc.problems))
            raise LabError(f"the lab's inventory for its bundle: {problems}") from None
        out(f"bundle: the apt packages of the lab's nodes ({', '.join(releases.values())}) into {folder}")
        result = bundle.build(
            inv, folder, bundle.Output(out), parts=("apt",), extra_packages=extra, releases=releases.values()
        )
    # The bundle plans every group on every release it carries, so a package pinned for one release's
    # nodes (a GPU node's kernel headers) is also asked of the other: listed, not fatal. What `lab up`
    # installs itself is needed now.
    missing = {e.name: e.reason for e in result.missing if e.kind == "apt"}
    needed = [f"{name}: {missing[name]}" for names in extra.values() for name in names if name in missing]
    if needed:
        raise LabError(f"--airgap {folder}: the machine's apt sources do not give " + "; ".join(needed))
    if missing:
        out(
            f"bundle: not in it (a lab run that needs one fails naming it; {folder / 'manifest.json'} says "
            f"why): {', '.join(sorted(missing))}"
        )


def _start_nodes(spec: LabSpec, plan: LabPlan, out: Callable[[str], None]) -> LabPlan:
    """The network (and an air-gapped lab's mirror), the containers created or started; the plan with
    each air-gapped node's address."""
    if spec.airgap is None:
        remove_mirror(spec.prefix, out)
    ensure_network(spec)
    if spec.airgap is not None:
        address = ensure_mirror(spec, out)
        out(f"mirror: {mirror_name(spec.prefix)} ({address}) serves {spec.airgap.resolve()}; no route out")
    for p in plan.nodes:
        reach = "ssh on its own address" if spec.airgap else f"ssh 127.0.0.1:{p.port}"
        if p.action == "create":
            out(f"create {p.node.name} ({','.join(p.node.groups)}) {reach}")
            run_container(spec, p)
        elif p.action == "start":
            out(f"start {p.node.name} {reach}")
            docker("start", p.node.name)
        else:
            out(f"reuse {p.node.name} {reach}")
    if spec.airgap is not None:
        # A node's address on the internal network, known once it runs (a started one may have a new one).
        running = {c.name: c for c in lab_containers(spec.prefix)}
        nodes = []
        for p in plan.nodes:
            c = running.get(p.node.name)
            if c is None or c.port is None:
                raise LabError(f"{p.node.name}: no address on the lab's network {spec.network}")
            nodes.append(PlannedNode(p.node, c.port, p.action, c.address))
        return LabPlan(tuple(nodes), plan.remove)
    return plan


def up(spec: LabSpec, out: Callable[[str], None] = print, ssh_timeout: float = 120) -> LabPlan:
    """Bring the lab to the asked shape and write its inventory; idempotent."""
    builds = spec.airgap is not None and lab_builds_bundle(spec.airgap)
    problems = spec_problems(spec) + ([] if builds else bundle_problems(spec))
    if problems:
        raise LabInputError("\n".join(problems))
    check_inventory_dir(spec)
    ensure_engine(out)
    ensure_image(spec, out)
    declared = declared_variables()
    facts = lab_facts(spec, facts_by_distro(declared, spec), read_marker(spec.inventory_dir), out)
    if builds:
        build_lab_bundle(spec, declared, facts, out)
    if spec.airgap is not None:
        # The kernel the GPU nodes get is the one the bundle carries (the archive may have moved on).
        for distro, found in facts.items():
            kernel = bundle_kernel(spec.airgap, distro) if "debian_kernel" in found else None
            if kernel and kernel != found["debian_kernel"]:
                out(f"kernel: the bundle carries {kernel} ({distro}): GPU nodes build the driver for it")
                found["debian_kernel"] = kernel
    existing = lab_containers(spec.prefix)
    check_ownership(spec, existing)
    plan = plan_lab(spec, existing, published_ports())
    for name in plan.remove:
        out(f"remove {name} (not in the asked shape)")
        docker("rm", "-f", "-v", name)
    plan = _start_nodes(spec, plan, out)
    paths = LabPaths(spec.inventory_dir)
    public_key = ensure_key(paths, spec.prefix)

    def kernel_of(p: PlannedNode) -> str | None:
        """The Debian kernel a GPU node gets: the one its distro's archive carries."""
        found = facts.get(spec.distro_of(p.node), {}).get(DEBIAN_KERNEL.name)
        return str(found) if found and GROUP_GPU in p.node.groups else None

    for p in plan.nodes:
        if p.action == "create" and kernel_of(p):
            out(f"kernel: installing linux-image-{kernel_of(p)} on {p.node.name} (containers have no kernel)")

    mirror_of = spec.prefix if spec.airgap is not None else None

    def setup(p: PlannedNode) -> list[str]:
        return setup_node(p, public_key, kernel_of(p), mirror_of)

    with ThreadPoolExecutor(max_workers=min(8, len(plan.nodes))) as pool:
        keys = list(pool.map(setup, plan.nodes))
    host_keys = {p.endpoint: k for p, k in zip(plan.nodes, keys, strict=True)}
    left_out = write_inventory(spec, plan.nodes, host_keys, declared, facts)
    if left_out:
        out("lab variables no role declares yet (not written): " + ", ".join(left_out))
    deadline = time.monotonic() + ssh_timeout

    def reachable(p: PlannedNode) -> None:
        wait_for_ssh(paths, p.port, max(5.0, deadline - time.monotonic()), address=p.address)

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
        ssh = ssh_answers(paths, c.port, c.address) if (can_ssh and c.state == "running" and c.port) else None
        return LabStatus(c.name, c.groups[0] if c.groups else "?", c.state, c.port, ssh, c.address)

    with ThreadPoolExecutor(max_workers=8) as pool:
        rows = list(pool.map(one, containers))
    return sorted(rows, key=lambda r: (_GROUP_ORDER.get(r.group, 9), _natural(r.name)))


# The run folders of an inventory (runstore's), which `down` keeps unless purged.
RUNS_DIR = Path(".gpubring") / "runs"

_GROUP_ORDER = {GROUP_CONTROL_PLANE: 0, GROUP_GPU: 1, GROUP_CPU: 2}


def _natural(name: str) -> tuple[str | int, ...]:
    """gpu2 before gpu10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def down(
    prefix: str, inventory_dir: Path, out: Callable[[str], None] = print, *, purge: bool = False
) -> None:
    """Remove the lab's containers, network, key and generated inventory; fine when none exist. The
    run history (`.gpubring/runs`, the run folders and report.json of every run against the lab) stays
    unless `purge`."""
    if engine_answers():
        containers = lab_containers(prefix)
        if containers:
            out(f"remove {', '.join(c.name for c in containers)}")
            docker("rm", "-f", "-v", *(c.name for c in containers))
        remove_mirror(prefix, out)
        remove_network(prefix)
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
    runs = inventory_dir / RUNS_DIR
    if purge or not runs.is_dir():
        shutil.rmtree(inventory_dir)
        out(f"removed {inventory_dir} (inventory, lab key, known_hosts, run history)")
        return
    for path in [*inventory_dir.iterdir(), *(inventory_dir / ".gpubring").iterdir()]:
        if path in (runs, runs.parent):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    out(
        f"removed {inventory_dir} (inventory, lab key, known_hosts); "
        f"kept the run history {runs} (--purge removes it)"
    )
