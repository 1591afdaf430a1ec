"""The lab's generated inventory folder: hosts.yml, group_vars/*/lab.yml, .ssh/ (the lab key and
known_hosts, host key checking stays on) and the marker that says which lab the folder belongs to."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpubring.lab.docker import run_command
from gpubring.lab.shape import (
    DEFAULT_PREFIX,
    GROUP_CONTROL_PLANE,
    GROUP_CPU,
    GROUP_GPU,
    Container,
    LabInputError,
    LabSpec,
    PlannedNode,
)
from gpubring.lab.variables import lab_inventory_vars

MARKER = ".gpubring-lab.json"  # hidden: Ansible skips dot-files when it reads an inventory folder
SSH_DIR = ".ssh"
KEY_NAME = "id_ed25519"
KNOWN_HOSTS = "known_hosts"


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

    def host_vars(self, host: str) -> Path:
        return self.root / "host_vars" / host / "lab.yml"


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
            p.node.name: {"ansible_host": p.address, "ansible_port": p.port}
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


def known_hosts_lines(host_keys: Mapping[int, Sequence[str]] | Mapping[str, Sequence[str]]) -> list[str]:
    """known_hosts lines from each container's `ssh_host_*_key.pub` lines, keyed by its 127.0.0.1 port
    (`[127.0.0.1]:PORT`) or by the endpoint known_hosts names (PlannedNode.endpoint: an air-gapped
    node's own address)."""
    lines: list[str] = []
    for key in sorted(host_keys, key=str):
        endpoint = key if isinstance(key, str) else f"[127.0.0.1]:{key}"
        for pub in host_keys[key]:  # type: ignore[index]
            parts = pub.split()
            if len(parts) >= 2 and parts[0].startswith(("ssh-", "ecdsa-")):
                lines.append(f"{endpoint} {parts[0]} {parts[1]}")
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
    host_keys: Mapping[int, Sequence[str]] | Mapping[str, Sequence[str]],
    declared: Iterable[str],
    facts: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """Write hosts.yml, group_vars, host_vars, known_hosts and the marker; return the lab vars left out.
    `facts` per distro (gpubring.lab.variables.lab_facts)."""
    paths = LabPaths(spec.inventory_dir)
    group_vars, host_vars, left_out = lab_inventory_vars(declared, spec, facts)
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
    # A node's lab host_vars (a variable of one distro in a lab of two): this lab's nodes only, the
    # files of nodes no longer in it removed.
    for old in sorted((paths.root / "host_vars").glob("*/lab.yml")):
        if old.parent.name not in host_vars:
            old.unlink()
            if not any(old.parent.iterdir()):
                old.parent.rmdir()
    # An air-gapped lab's mirror variables (gpubring.lab.airgap), in their own file.
    airgap_vars = paths.root / "group_vars" / "all" / "airgap.yml"
    if spec.airgap is not None:
        from gpubring.lab.airgap import mirror_vars

        _write(
            airgap_vars,
            _dump(mirror_vars(spec.prefix, spec.airgap), "The air-gapped lab's mirror (its bundle's parts)"),
            0o644,
        )
    else:
        airgap_vars.unlink(missing_ok=True)
    for host, values in sorted(host_vars.items()):
        _write(
            paths.host_vars(host),
            _dump(values, f"What a container cannot do on {host} ({_distro_of(spec, nodes, host)} only)"),
            0o644,
        )
    marker = {
        "prefix": spec.prefix,
        "distro": spec.distro,
        "gpu_distro": spec.gpu_distro or spec.distro,
        "nodes": [
            {
                "name": p.node.name,
                "groups": list(p.node.groups),
                "port": p.port,
                "address": p.address,
                "distro": spec.distro_of(p.node),
            }
            for p in nodes
        ],
        "facts_by_distro": {d: dict(v) for d, v in (facts or {}).items()},
        "airgap": str(spec.airgap.resolve()) if spec.airgap else None,
    }
    _write(paths.marker, json.dumps(marker, indent=2) + "\n", 0o644)
    return left_out


def _distro_of(spec: LabSpec, nodes: Sequence[PlannedNode], host: str) -> str:
    return next((spec.distro_of(p.node) for p in nodes if p.node.name == host), spec.distro)


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
        run_command(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(paths.key)])
    paths.key.chmod(0o600)
    pub.chmod(0o600)
    return pub.read_text(encoding="utf-8").strip()
