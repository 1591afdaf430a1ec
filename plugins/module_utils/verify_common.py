# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""What the verdict modules of the verify role's smoke tests share (verify_verdicts and the modules of
each area: verify_autoscaling, verify_controller, verify_inference): the shape of a check, the reason
of a check the smoke tests did not reach, and reading the registered results of kubernetes.core."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STOPPED = "did not run, the smoke tests stopped before it (see this run's failures)"

# The inputs' truth values as the area modules read them (a bool, or a string such as "true"/"yes").
_TRUE = frozenset({"yes", "on", "1", "true", "y", "t"})


def check(name: str, expected: str, output: Any, status: str, reason: str) -> dict[str, Any]:
    """One check as verify_results publishes it."""
    return {"name": name, "expected": expected, "output": output, "status": status, "reason": reason}


def truthy(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in _TRUE


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def resources(result: Any) -> list[Any]:
    """The `resources` of a k8s_info result; [] for anything else."""
    found = mapping(result).get("resources")
    return list(found) if isinstance(found, list) else []
