"""Safety guards of the destructive verbs, as plain functions of the inventory's groups.

etcd keeps working while a majority of its members answers: with n members, quorum(n) = n // 2 + 1.
Taking control planes away (`node remove`, `reset --limit`) stops their etcd members; whatever does
it, the members left must still be a majority of the members etcd knows, or the cluster stops
accepting writes (and kubeadm cannot remove the members it should). This module is a leaf: it
imports nothing from gpubring.

Two counts: the inventory's control planes (before any host is reached), and, when the cluster could be
read, etcd's live members and their health (LiveMembers, from a run of kubeadm_control_plane's
etcd_members task file: the record beside an etcd snapshot has them). A dead member the inventory no
longer names still counts in etcd's quorum, and a member that is down cannot vote.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LiveMembers", "etcd_quorum", "live_members", "quorum_problem"]


@dataclass(frozen=True)
class LiveMembers:
    """etcd's members as the cluster reported them, and those that answered a health check."""

    names: tuple[str, ...]
    healthy: tuple[str, ...]


def live_members(record: Mapping[str, Any]) -> LiveMembers:
    """The live members of a snapshot's record (`members: [{name, healthy, ...}]`, written by
    roles/kubeadm_control_plane/tasks/etcd_snapshot.yml). ValueError when it has none."""
    members = record.get("members")
    if not isinstance(members, list) or not members:
        raise ValueError("the record has no etcd members")
    names = tuple(str(m["name"]) for m in members if isinstance(m, Mapping) and "name" in m)
    healthy = tuple(str(m["name"]) for m in members if isinstance(m, Mapping) and m.get("healthy") is True)
    return LiveMembers(names, healthy)


def etcd_quorum(members: int) -> int:
    """The number of etcd members that must answer for a cluster of `members` to work."""
    return members // 2 + 1


def quorum_problem(
    control_planes: Sequence[str], removing: Collection[str], live: LiveMembers | None = None
) -> str | None:
    """None when the control planes left after `removing` keep etcd working, else why not, with the
    arithmetic (stacked etcd: one member per control plane). With `live`, etcd's own view counts too:
    the healthy members left must be a majority of the members left (etcd's strict reconfiguration
    check), dead members the inventory forgot included."""
    problem = _inventory_problem(control_planes, removing)
    if problem is None and live is not None:
        problem = _live_problem(live, removing)
    return problem


def _live_problem(live: LiveMembers, removing: Collection[str]) -> str | None:
    gone = [name for name in live.names if name in removing]
    if not gone:
        return None
    left = len(live.names) - len(gone)
    healthy_left = [name for name in live.healthy if name not in removing]
    need = etcd_quorum(left) if left else 0
    if left and len(healthy_left) < need:
        down = [name for name in live.names if name not in live.healthy and name not in removing]
        return (
            f"etcd has {len(live.names)} members now ({', '.join(live.names)}), {len(live.healthy)} healthy: "
            f"removing {', '.join(gone)} leaves {len(healthy_left)} healthy of {left} members; quorum needs "
            f"{need} (a majority: {left} // 2 + 1). Bring back {', '.join(down) or 'the unhealthy members'} "
            "first (a dead member the inventory no longer names is removed with `gpubring node remove "
            "--force` while it is still in hosts.yml)"
        )
    return None


def _inventory_problem(control_planes: Sequence[str], removing: Collection[str]) -> str | None:
    gone = [name for name in control_planes if name in removing]
    if not gone:
        return None
    total, left = len(control_planes), len(control_planes) - len(gone)
    names = ", ".join(gone)
    if left == 0:
        return (
            f"removing {names} leaves no control plane: the last control plane holds the cluster's "
            f"etcd data; reset the whole cluster instead (gpubring reset without --limit)"
        )
    need = etcd_quorum(total)
    if left < need:
        return (
            f"removing {names} leaves {left} of {total} etcd members; quorum needs {need} "
            f"(a majority: {total} // 2 + 1), so etcd would stop accepting writes; remove at most "
            f"{total - need} control plane{'s' if total - need != 1 else ''} at a time"
        )
    return None
