# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""The verdicts of the verify role's inference ingress test (roles/verify/tasks/cluster_inference.yml).

inference_checks(gathered, settings) -> [inference_gateway_weighted, inference_gateway_header]

`gathered` holds what the test registered, by variable name (None: not reached):
__verify_inference_routes (k8s_info of the two HTTPRoutes), __verify_inference_service (k8s_info of
the Gateway's Envoy Service), __verify_inference_job (k8s_info of the client Job) and
__verify_inference_log (k8s_log of the client: one line per case, "<case> a=<n> b=<n> failed=<n>",
cases weighted, header and no_header). `settings` holds verify_inference, verify_inference_requests,
verify_inference_weight_b, verify_inference_tolerance, verify_inference_gateway and
verify_inference_gateway_namespace.

Each check: {name, status (passed | failed | skipped), expected, output, reason}; output is the
client's counts per case (None before the client ran).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpubring.core.plugins.module_utils import verify_common

STOPPED = verify_common.STOPPED
_map = verify_common.mapping
_resources = verify_common.resources
_bool = verify_common.truthy

OFF = "the inference ingress is off (ai_inference_enabled)"
CASES = ("weighted", "header", "no_header")

_LINE = re.compile(r"^(?P<case>[a-z_]+) a=(?P<a>\d+) b=(?P<b>\d+) failed=(?P<failed>\d+)\s*$")


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def parse_counts(log: str) -> dict[str, dict[str, int]]:
    """The client's counts per case from its log (other lines ignored; the last line of a case wins)."""
    out: dict[str, dict[str, int]] = {}
    for line in log.splitlines():
        match = _LINE.match(line.strip())
        if match:
            out[match["case"]] = {k: int(match[k]) for k in ("a", "b", "failed")}
    return out


def _not_accepted(routes: Any) -> list[str]:
    """The test's HTTPRoutes the Gateway did not accept, each with the condition's reason."""
    bad = []
    for route in _resources(routes):
        name = _map(_map(route).get("metadata")).get("name", "?")
        parents = _map(_map(route).get("status")).get("parents") or []
        conditions = [c for p in parents for c in (_map(p).get("conditions") or [])]
        accepted = [c for c in conditions if _map(c).get("type") == "Accepted"]
        if not any(_map(c).get("status") == "True" for c in accepted):
            why = "; ".join(
                f"{_map(c).get('reason', '')}: {_map(c).get('message', '')}".strip(": ") for c in accepted
            )
            bad.append(f"{name} ({why or 'no Accepted condition yet'})")
    return bad


def _log_text(log: Any) -> str:
    if not isinstance(log, Mapping):
        return ""
    text = log.get("log")
    if isinstance(text, str):
        return text
    lines = log.get("log_lines")
    return "\n".join(str(x) for x in lines) if isinstance(lines, list) else ""


def _common_failure(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> tuple[str, str]:
    """(status, reason) shared by both checks before the counts are judged; ("", "") when the client's
    counts are there to judge."""
    if not _bool(settings.get("verify_inference")):
        return "skipped", OFF
    routes = gathered.get("__verify_inference_routes")
    if routes is None:
        return "skipped", STOPPED
    gateway = (
        f"{settings.get('verify_inference_gateway_namespace')}/{settings.get('verify_inference_gateway')}"
    )
    if len(_resources(routes)) < 2:
        return "failed", f"the test's two HTTPRoutes were not found (found {len(_resources(routes))})"
    bad = _not_accepted(routes)
    if bad:
        return "failed", f"Gateway {gateway} did not accept the HTTPRoute(s) {', '.join(bad)}"
    service = gathered.get("__verify_inference_service")
    if service is None:
        return "skipped", STOPPED
    if not _resources(service):
        return "failed", f"no Envoy Service of Gateway {gateway} (is the Gateway Programmed?)"
    job = gathered.get("__verify_inference_job")
    if job is None:
        return "skipped", STOPPED
    status = _map(_map((_resources(job) or [{}])[0]).get("status"))
    text = _log_text(gathered.get("__verify_inference_log"))
    counts = parse_counts(text)
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
    if _int(status.get("succeeded")) < 1:
        state = "failed" if _int(status.get("failed")) > 0 else "did not finish"
        return "failed", f"the client Job {state}" + (f": {last}" if last else "")
    missing = [case for case in CASES if case not in counts]
    if missing:
        return "failed", f"the client's log has no counts for {', '.join(missing)}" + (
            f" (last line: {last})" if last else ""
        )
    return "", ""


def _weighted(counts: Mapping[str, Mapping[str, int]], settings: Mapping[str, Any]) -> tuple[str, str]:
    requests = _int(settings.get("verify_inference_requests"), 1)
    want = _int(settings.get("verify_inference_weight_b"))
    tolerance = _int(settings.get("verify_inference_tolerance"))
    got = counts["weighted"]
    if got["failed"]:
        return (
            "failed",
            f"{got['failed']} of {requests} requests to the weighted route got no backend's answer",
        )
    share = 100.0 * got["b"] / max(got["a"] + got["b"], 1)
    if abs(share - want) > tolerance:
        return "failed", (
            f"skewed split: backend B got {share:.1f}% ({got['b']} of {got['a'] + got['b']}), expected "
            f"{want}% ± {tolerance}"
        )
    return "passed", ""


def _header(counts: Mapping[str, Mapping[str, int]], settings: Mapping[str, Any]) -> tuple[str, str]:
    requests = _int(settings.get("verify_inference_requests"), 1)
    with_header, without = counts["header"], counts["no_header"]
    problems = []
    if with_header["a"] or with_header["failed"] or with_header["b"] < requests:
        problems.append(
            f"with x-gpubring-route: b, {with_header['b']} of {requests} reached backend B "
            f"({with_header['a']} went to A, {with_header['failed']} failed)"
        )
    if without["b"] or without["failed"] or without["a"] < requests:
        problems.append(
            f"without the header, {without['a']} of {requests} reached backend A "
            f"({without['b']} went to B, {without['failed']} failed)"
        )
    return ("failed", "; ".join(problems)) if problems else ("passed", "")


def inference_checks(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """inference_gateway_weighted and inference_gateway_header, from what the test gathered."""
    status, reason = _common_failure(gathered, settings)
    text = _log_text(gathered.get("__verify_inference_log"))
    counts = parse_counts(text)
    output = counts or None
    want = _int(settings.get("verify_inference_weight_b"))
    expected_weighted = (
        f"through the Gateway, the weighted HTTPRoute sends {100 - want}% to backend A and {want}% to B "
        f"(± {_int(settings.get('verify_inference_tolerance'))} points over "
        f"{_int(settings.get('verify_inference_requests'))} requests)"
    )
    expected_header = (
        "through the Gateway, every request with x-gpubring-route: b reaches backend B and every other "
        "request backend A"
    )
    if status:
        weighted = header = (status, reason)
    else:
        weighted, header = _weighted(counts, settings), _header(counts, settings)
    return [
        {
            "name": "inference_gateway_weighted",
            "expected": expected_weighted,
            "output": {"weighted": counts["weighted"]} if output and "weighted" in counts else output,
            "status": weighted[0],
            "reason": weighted[1],
        },
        {
            "name": "inference_gateway_header",
            "expected": expected_header,
            "output": {k: counts[k] for k in ("header", "no_header") if k in counts} if output else output,
            "status": header[0],
            "reason": header[1],
        },
    ]
