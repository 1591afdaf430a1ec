# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filter of the verify role: the verdicts of the cluster smoke tests.

The judgement lives in module_utils/verify_verdicts (a plain function, unit-tested on recorded
inputs in tests/test_verify_verdicts.py); this filter only exposes it to Jinja.

Filter (FQCN gpubring.core.verify_checks):

verify_checks(gathered, settings) -> [{name, expected, output, status, reason}, ...]
    gathered: what the smoke tests registered, by variable name (`__verify_plan`, ...; None where
    undefined); settings: the role's inputs the verdicts read (`verify_gang_size`, ...). The role's
    vars/main.yml builds both as __verify_checks; its asserts and tasks/cluster_results.yml read it.

verify_held_gang(plan) -> {resource, gpus, nodes, pods}
    The gang that cannot fit (gang_held_*), sized from __verify_plan: module_utils/verify_scheduling
    held_gang, the same function its verdicts read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpubring.core.plugins.module_utils import verify_scheduling
from ansible_collections.gpubring.core.plugins.module_utils import verify_verdicts as V


def verify_checks(gathered: Any, settings: Any) -> list[dict[str, Any]]:
    if not isinstance(gathered, Mapping) or not isinstance(settings, Mapping):
        raise AnsibleFilterError(
            "verify_checks: gathered and settings must be mappings, got "
            f"{type(gathered).__name__} and {type(settings).__name__}"
        )
    return V.verify_checks(gathered, settings)


def verify_held_gang(plan: Any) -> dict[str, Any]:
    if not isinstance(plan, list):
        raise AnsibleFilterError(f"verify_held_gang: the plan must be a list, got {type(plan).__name__}")
    return verify_scheduling.held_gang(plan)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"verify_checks": verify_checks, "verify_held_gang": verify_held_gang}
