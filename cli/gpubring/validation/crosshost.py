"""Checks across hosts and fields: the inventory's structure, then the registered cross-field checks.

`check_structure` holds what every inventory needs (a control plane of 1 or an odd number of hosts,
GPU nodes, no host in both gpu_nodes and cpu_nodes, no two hosts on one address and port).
Cross-field checks of roles live in the package gpubring.validation.checks, one module per concern;
each registers with `register_validator` and takes the loaded `gpubring.model.Inventory`.
`registered()` imports that package's modules once, then returns every check.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpubring.model import Host, Inventory

from gpubring.yamlfile import Problem

__all__ = ["CHECKS_PACKAGE", "VALIDATORS", "Validator", "check_structure", "register_validator", "registered"]

CHECKS_PACKAGE = "gpubring.validation.checks"

Validator = Callable[["Inventory"], list["Problem"]]
VALIDATORS: list[Validator] = []


def register_validator(func: Validator) -> Validator:
    """Decorator: run `func(inventory) -> list[Problem]` after the per-key checks of every load."""
    if func not in VALIDATORS:
        VALIDATORS.append(func)
    return func


_DISCOVERED = False


def registered() -> list[Validator]:
    """Every registered validator, after importing the modules of this package once per process."""
    global _DISCOVERED  # noqa: PLW0603 - import the plug-in modules once per process
    if not _DISCOVERED:
        _DISCOVERED = True
        package = importlib.import_module(CHECKS_PACKAGE)
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{CHECKS_PACKAGE}.{info.name}")
    return list(VALIDATORS)


def check_structure(
    file: str,
    hosts: Mapping[str, Host],
    groups: Mapping[str, tuple[str, ...]],
    declared: Mapping[str, Mapping[str, str]],
    cpu_groups: Collection[str],
) -> list[Problem]:
    """Problems of the inventory's shape. `file` is the hosts file as shown, `declared` maps each
    host to {group: key path where hosts.yml lists it}, `cpu_groups` is cpu_nodes and its subgroups."""
    problems: list[Problem] = []
    for group, need in (("control_plane", "1 or an odd number of hosts"), ("gpu_nodes", "at least one host")):
        members = groups.get(group)
        if not members:
            state = "there is none" if members is None else "it has no hosts"
            close = difflib.get_close_matches(group, [g for g in groups if g != group], n=1, cutoff=0.8)
            state += f" (is {close[0]} a typo of {group}?)" if members is None and close else ""
            problems.append(
                Problem(file, f"all.children.{group}", f"expected a group {group} with {need}; {state}")
            )
    cps = groups.get("control_plane", ())
    if cps and len(cps) % 2 == 0:
        path = declared[cps[-1]].get("control_plane") or "all.children.control_plane.hosts"
        problems.append(
            Problem(
                file,
                path.rsplit(".hosts.", 1)[0] + ".hosts",
                f"expected 1 or an odd number of control planes (etcd needs a majority); "
                f"found {len(cps)}: {', '.join(cps)}",
            )
        )
    cpu = set(groups.get("cpu_nodes", ()))
    for name in groups.get("gpu_nodes", ()):
        if name in cpu:
            path = next((p for g, p in declared[name].items() if g in cpu_groups), f"cpu_nodes.hosts.{name}")
            problems.append(
                Problem(file, path, "expected a host in only one of gpu_nodes and cpu_nodes; it is in both")
            )
    seen: dict[tuple[str, int], str] = {}
    for host in hosts.values():
        endpoint = (host.address, host.port)
        if endpoint not in seen:
            seen[endpoint] = host.name
            continue
        where = host.origin("ansible_host") or (file, next(iter(declared[host.name].values())))
        problems.append(
            Problem(
                *where,
                f"expected an address no other host uses; {host.address} port {host.port} "
                f"is also {seen[endpoint]}'s",
            )
        )
    return problems
