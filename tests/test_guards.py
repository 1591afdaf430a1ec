"""The quorum guard of `node remove` and `reset --limit`: its verdicts and its arithmetic."""

from __future__ import annotations

import pytest

from gpubring.guards import etcd_quorum, quorum_problem

CPS = ["cp-1", "cp-2", "cp-3", "cp-4", "cp-5"]


@pytest.mark.parametrize(("members", "quorum"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_quorum_is_a_majority(members: int, quorum: int) -> None:
    assert etcd_quorum(members) == quorum


@pytest.mark.parametrize(
    ("control_planes", "removing", "expected"),
    [
        (CPS[:3], ["gpu-1"], None),  # a worker: no etcd member
        (CPS[:3], ["cp-3"], None),  # 2 of 3 left, quorum 2
        (CPS[:5], ["cp-4", "cp-5"], None),  # 3 of 5 left, quorum 3
        (
            CPS[:3],
            ["cp-2", "cp-3"],
            "removing cp-2, cp-3 leaves 1 of 3 etcd members; quorum needs 2 (a majority: 3 // 2 + 1)",
        ),
        (CPS[:5], ["cp-3", "cp-4", "cp-5"], "remove at most 2 control planes at a time"),
        (CPS[:1], ["cp-1"], "leaves no control plane"),
        (CPS[:3], CPS[:3], "leaves no control plane"),
    ],
)
def test_quorum_problem(control_planes: list[str], removing: list[str], expected: str | None) -> None:
    problem = quorum_problem(control_planes, removing)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem, problem


# -- the live count: etcd's members and their health (issue 21, item 1) ---------------------------


@pytest.mark.parametrize(
    ("names", "healthy", "removing", "expected"),
    [
        (CPS[:3], CPS[:3], ["cp-3"], None),  # all healthy: 2 of 2 left
        (CPS[:3], CPS[:2], ["cp-3"], None),  # the dead one goes: 2 healthy of 2
        # cp-2 down: removing cp-3 leaves cp-1 healthy of 2 members; the inventory count alone says yes.
        (CPS[:3], ["cp-1", "cp-3"], ["cp-3"], "removing cp-3 leaves 1 healthy of 2 members; quorum needs 2"),
        # A dead member the inventory forgot (cp-4) counts: 4 members, cp-2 down too; removing cp-3
        # leaves 3 members, 1 healthy.
        (
            CPS[:4],
            ["cp-1", "cp-3"],
            ["cp-3"],
            "leaves 1 healthy of 3 members; quorum needs 2 (a majority: 3 // 2 + 1). "
            "Bring back cp-2, cp-4 first",
        ),
        (CPS[:3], CPS[:3], ["gpu-1"], None),
    ],
)
def test_the_live_count_refuses_what_the_inventory_count_allows(
    names: list[str], healthy: list[str], removing: list[str], expected: str | None
) -> None:
    from gpubring.guards import LiveMembers

    assert quorum_problem(CPS[:3], removing) is None  # the inventory alone: fine
    problem = quorum_problem(CPS[:3], removing, LiveMembers(tuple(names), tuple(healthy)))
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem, problem


def test_live_members_come_from_a_snapshot_record() -> None:
    from gpubring.guards import live_members

    record = {"members": [{"name": "cp-1", "healthy": True}, {"name": "cp-2", "healthy": False}]}
    live = live_members(record)
    assert live.names == ("cp-1", "cp-2") and live.healthy == ("cp-1",)
    with pytest.raises(ValueError, match="no etcd members"):
        live_members({"members": []})
