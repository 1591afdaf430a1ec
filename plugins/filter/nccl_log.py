# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filters of the fabric_test role: what an nccl-tests all_reduce_perf log says, and its verdict.

The parsing lives in module_utils/nccl_log (plain functions, unit-tested on the captured logs in
tests/fixtures/nccl); these filters only expose it to Jinja.

Filters (FQCN gpubring.core.<name>):

nccl_log_parse(log) -> {rows, sizes, largest, busbw_gbs, avg_busbw_gbs, out_of_bounds, wrong,
                        nccl_version, ranks, transport}
nccl_log_check(log, floor, nodes=1, name=None, require_debug=True, gdrdma=False)
    -> {name, status: passed|failed|skipped, expected, measured, reason}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpubring.core.plugins.module_utils import nccl_log as N


def parse(log: Any) -> dict[str, Any]:
    return N.parse_all_reduce_log(str(log or ""))


def check(  # noqa: PLR0917 (a Jinja filter: its arguments come positionally)
    log: Any,
    floor: Any = None,
    nodes: Any = 1,
    name: Any = None,
    require_debug: Any = True,
    gdrdma: Any = False,
) -> dict[str, Any]:
    if floor is not None and not isinstance(floor, dict):
        raise AnsibleFilterError(
            f"nccl_log_check: floor must be gpu_expect's nccl_one_node/nccl_multi_node dict, got {floor!r}"
        )
    try:
        return N.all_reduce_check(
            str(log or ""),
            floor,
            nodes=int(nodes),
            name=str(name) if name else None,
            require_debug=bool(require_debug),
            gdrdma=boolean(gdrdma, strict=True),
        )
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"nccl_log_check: {exc}") from None


class FilterModule:
    """gpubring NCCL all_reduce_perf log filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"nccl_log_parse": parse, "nccl_log_check": check}
