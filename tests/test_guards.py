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
