"""Safety guards of the destructive verbs, as plain functions of the inventory's groups.

etcd keeps working while a majority of its members answers: with n members, quorum(n) = n // 2 + 1.
Taking control planes away (`node remove`, `reset --limit`) stops their etcd members; whatever does
it, the members left must still be a majority of the members etcd knows, or the cluster stops
accepting writes (and kubeadm cannot remove the members it should). This module is a leaf: it
imports nothing from gpubring.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["etcd_quorum", "quorum_problem"]


def etcd_quorum(members: int) -> int:
    """The number of etcd members that must answer for a cluster of `members` to work."""
    return members // 2 + 1


def quorum_problem(control_planes: Sequence[str], removing: Collection[str]) -> str | None:
    """None when the control planes left after `removing` keep etcd working, else why not, with the
    arithmetic (stacked etcd: one member per control plane)."""
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
