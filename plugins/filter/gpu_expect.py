# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filters of the gpu_acceptance role: expected performance from gpu_facts, and the acceptance
checks built from what the probes printed.

The computations live in module_utils/gpu_expect (plain functions, unit-tested on the captured
hardware outputs in tests/fixtures/hw); these filters only expose them to Jinja.

Every check is ``{name, status: passed|failed|skipped, expected, measured, reason}``.

Filters (FQCN gpubring.core.<name>):

gpu_expect(facts, netdev_speeds=None, nvlink_status=None, nodes=2, ib_write_bw_fraction=0.8,
           nccl_busbw_fraction=0.7, nic_rate_gbps=None)
    -> {nics, nvlink, pairs, rails, nccl_one_node, nccl_multi_node, fractions}
gpu_acceptance_check(name, status, expected=None, measured=None, reason=None) -> check
gpu_acceptance_dcgm(stdout, rc, level) -> check
gpu_acceptance_health(stdout, rc) -> [check per GPU]
gpu_acceptance_xid(kernel_log, ignore_xids) -> check
gpu_acceptance_nvlink(stdout, nvlink_expectations, speed_fraction=0.9) -> [check per GPU]
gpu_acceptance_nic(nic_expectations, rails) -> [check per port]
gpu_acceptance_pcie(sysfs_lines, gpu_addresses, check_gpu_speed=False) -> [check per device]
gpu_acceptance_ib_write_bw(stdout, device, rc, min_gbps) -> check
gpu_acceptance_ib_write_bw_runs(registered_loop_results) -> [check per run]
gpu_acceptance_rdma_targets(expected, facts, devices=None) -> [{device, port, min_gbps, numa_node, gpu_index}]
gpu_acceptance_reads(stdout_lines, names) -> {name: {rc, stdout, stdout_lines}} of the reads that ran
gpu_acceptance_verdict(checks) -> passed | failed | skipped-only
gpu_acceptance_result(checks, expected=None) -> {verdict, checks, expected}: the role's published
    result from one rendering of its checks (a verdict and a checks key, each rendering them, made
    every check's record twice: issue 26)
gpu_acceptance_admission(result, taints, key, when='') -> {state, taints, annotation}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpubring.core.plugins.module_utils import gpu_expect as E


def _number(value: Any, what: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{what} must be a number, got {value!r}") from None


def expect(  # noqa: PLR0917 - a Jinja filter takes its arguments by position
    facts: Any,
    netdev_speeds: Any = None,
    nvlink_status: Any = None,
    nodes: Any = 2,
    ib_write_bw_fraction: Any = E.IB_WRITE_BW_FRACTION,
    nccl_busbw_fraction: Any = E.NCCL_BUSBW_FRACTION,
    nic_rate_gbps: Any = None,
) -> dict[str, Any]:
    """gpu_expect.expectations_from_facts for one host's gpubring_gpu_facts."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError(
            f"gpu_expect: expected the gpubring_gpu_facts dict, got {type(facts).__name__}"
        )
    try:
        return E.expectations_from_facts(
            facts,
            netdev_speeds=netdev_speeds or None,
            nvlink_status=nvlink_status or None,
            nodes=int(nodes),
            ib_write_bw_fraction=_number(ib_write_bw_fraction, "ib_write_bw_fraction")
            or E.IB_WRITE_BW_FRACTION,
            nccl_busbw_fraction=_number(nccl_busbw_fraction, "nccl_busbw_fraction") or E.NCCL_BUSBW_FRACTION,
            expected_nic_rate_gbps=_number(nic_rate_gbps, "nic_rate_gbps"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gpu_expect: {exc}") from None


def make_check(
    name: str, status: str, expected: Any = None, measured: Any = None, reason: Any = None
) -> dict[str, Any]:
    try:
        return E.check(str(name), str(status), expected, measured, str(reason) if reason else None)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def dcgm(stdout: Any, rc: Any, level: Any) -> dict[str, Any]:
    return E.dcgm_check(int(rc), str(stdout or ""), int(level))


def health(stdout: Any, rc: Any) -> list[dict[str, Any]]:
    return E.health_checks(str(stdout or ""), int(rc))


def xid(kernel_log: Any, ignore_xids: Any = E.APPLICATION_XIDS) -> dict[str, Any]:
    return E.xid_check(str(kernel_log or ""), [int(x) for x in (ignore_xids or [])])


def nvlink(
    stdout: Any, expectations: Any, speed_fraction: Any = E.NVLINK_SPEED_FRACTION
) -> list[dict[str, Any]]:
    return E.nvlink_checks(str(stdout or ""), list(expectations or []), float(speed_fraction))


def nic(expectations: Any, rails: Any = None) -> list[dict[str, Any]]:
    return E.nic_checks(list(expectations or []), list(rails or []))


def pcie(sysfs_lines: Any, gpu_addresses: Any = None, check_gpu_speed: Any = False) -> list[dict[str, Any]]:
    text = "\n".join(sysfs_lines) if isinstance(sysfs_lines, list) else str(sysfs_lines or "")
    links = E.parse_sysfs_pcie_links(text, list(gpu_addresses or []), bool(check_gpu_speed))
    return E.pcie_checks(links)


def ib_write_bw(stdout: Any, device: Any, rc: Any, min_gbps: Any) -> dict[str, Any]:
    return E.ib_write_bw_check(str(device), int(rc), str(stdout or ""), _number(min_gbps, "min_gbps"))


def ib_write_bw_runs(results: Any) -> list[dict[str, Any]]:
    """One check per registered loop result of the ib_write_bw task (stdout, rc, item.device,
    item.min_gbps); results of skipped iterations are left out."""
    checks = []
    for run in results or []:
        if not isinstance(run, dict) or run.get("skipped"):
            continue
        item = run.get("item") or {}
        checks.append(
            ib_write_bw(run.get("stdout"), item.get("device"), run.get("rc", 1), item.get("min_gbps"))
        )
    return checks


def rdma_targets(expected: Any, facts: Any, devices: Any = None) -> list[dict[str, Any]]:
    return E.rdma_bandwidth_targets(dict(expected or {}), dict(facts or {}), list(devices or []))


def reads(lines: Any, names: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(lines, list) or not isinstance(names, list):
        raise AnsibleFilterError(f"gpu_acceptance_reads: expected two lists, got {lines!r} and {names!r}")
    return E.parse_reads([str(line) for line in lines], [str(name) for name in names])


def verdict(checks: Any) -> str:
    return E.verdict(list(checks or []))


def result(checks: Any, expected: Any = None) -> dict[str, Any]:
    found = list(checks or [])
    return {"verdict": E.verdict(found), "checks": found, "expected": expected}


def admission(result: Any, taints: Any, key: Any, when: Any = "") -> dict[str, Any]:
    if not isinstance(result, dict):
        raise AnsibleFilterError(f"gpu_acceptance_admission: expected gpu_acceptance_result, got {result!r}")
    return E.admission(result, list(taints or []), str(key), str(when or ""))


class FilterModule:
    """gpubring expected-performance and acceptance filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "gpu_expect": expect,
            "gpu_acceptance_check": make_check,
            "gpu_acceptance_dcgm": dcgm,
            "gpu_acceptance_health": health,
            "gpu_acceptance_xid": xid,
            "gpu_acceptance_nvlink": nvlink,
            "gpu_acceptance_nic": nic,
            "gpu_acceptance_pcie": pcie,
            "gpu_acceptance_ib_write_bw": ib_write_bw,
            "gpu_acceptance_ib_write_bw_runs": ib_write_bw_runs,
            "gpu_acceptance_rdma_targets": rdma_targets,
            "gpu_acceptance_reads": reads,
            "gpu_acceptance_verdict": verdict,
            "gpu_acceptance_result": result,
            "gpu_acceptance_admission": admission,
        }
