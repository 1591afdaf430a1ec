# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""The verdicts of the verify role's AI-workload controller test (roles/verify/tasks/cluster_controller.yml).

controller_checks(gathered, settings) -> [kuberay_webhook_rejects, kuberay_recreates]

The CNCF Kubernetes AI Conformance item robust_controller asks that a controller for AI workloads
rejects an invalid custom resource through admission, and recreates an owned object that is deleted.

- kuberay_webhook_rejects: a RayCluster with ``spec.managedBy`` outside the two values the CRD allows
  is sent as a server-side dry run and must be refused with the CRD's own message. The chart
  kuberay-operator v1.7.0 installs no admission webhook (KubeRay's is the kustomize overlay
  ray-operator/config/default-with-webhooks, which needs cert-manager: roles/kuberay/README.md), so
  what refuses it is the API server's validation of the RayCluster CRD (ray.io_rayclusters.yaml at
  v1.7.0, spec.managedBy, x-kubernetes-validations: ``self in ['ray.io/kuberay-operator',
  'kueue.x-k8s.io/multikueue']`` with MANAGED_BY_MESSAGE). The check's name is the checklist's.
- kuberay_recreates: the head Service of a RayCluster (``<name>-head-svc``: GenerateHeadServiceName,
  ray-operator/controllers/ray/utils/util.go at v1.7.0) is deleted; the operator, which owns
  Services (raycluster_controller.go, SetupWithManager ``Owns(&corev1.Service{})``), must create it
  again: a Service of that name with another uid, owned by the RayCluster.

`gathered` holds what the test registered (None: not reached): __verify_kuberay_rejected (the
kubernetes.core.k8s result of the dry run), __verify_kuberay_service (k8s_info of the head Service
before), __verify_kuberay_deleted (the k8s result of its deletion), __verify_kuberay_recreated (k8s_info
after). `settings` holds verify_kuberay and verify_kuberay_cluster.

Each check: {name, status (passed | failed | skipped), expected, output, reason}.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpubring.core.plugins.module_utils import verify_common

STOPPED = verify_common.STOPPED
_check = verify_common.check
_map = verify_common.mapping
_resources = verify_common.resources
_bool = verify_common.truthy

OFF = "the KubeRay operator is off (kuberay_enabled)"
MANAGED_BY_MESSAGE = (
    "the managedBy field value must be either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"
)
INVALID_MANAGED_BY = "gpubring.io/not-a-manager"

_STATUS_RE = re.compile(r"\{.*\}", re.S)
_BYTES_RE = re.compile(r"b(['\"]).*\1\s*$", re.S)


def api_refusal(result: Any) -> dict[str, Any] | None:
    """What the API server answered to a refused write, from a kubernetes.core.k8s result: {code,
    reason, message}; None when the write was not refused. kubernetes.core words a refusal
    "Failed to create object: <the Status body>" (module_utils/k8s/service.py), the body being the
    API server's Status as bytes (b'...'), quotes escaped; a body that does not parse is kept whole."""
    res = _map(result)
    if not res.get("failed"):
        return None
    msg = str(res.get("msg") or "")
    status: Mapping[str, Any] = {}
    body = _BYTES_RE.search(msg)
    text = msg
    if body:
        try:
            text = ast.literal_eval(body.group(0)).decode("utf-8", "replace")
        except (ValueError, SyntaxError):
            text = msg
    found = _STATUS_RE.search(text)
    if found:
        try:
            status = _map(json.loads(found.group(0)))
        except ValueError:
            status = {}
    code = status.get("code", res.get("status"))
    return {
        "code": int(code) if isinstance(code, int) or str(code).isdigit() else None,
        "reason": status.get("reason", res.get("reason")),
        "message": str(status.get("message") or msg),
    }


def _rejects(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    expected = (
        f"a RayCluster with spec.managedBy {INVALID_MANAGED_BY!r} (server-side dry run) is refused by the "
        f'API (422 Invalid) with the RayCluster CRD\'s message "{MANAGED_BY_MESSAGE}" (kuberay-operator '
        "v1.7.0 installs no webhook: the CRD's x-kubernetes-validations rule on spec.managedBy refuses it)"
    )
    if not _bool(settings.get("verify_kuberay")):
        return _check("kuberay_webhook_rejects", expected, None, "skipped", OFF)
    result = gathered.get("__verify_kuberay_rejected")
    if result is None:
        return _check("kuberay_webhook_rejects", expected, None, "skipped", STOPPED)
    refusal = api_refusal(result)
    if refusal is None:
        return _check(
            "kuberay_webhook_rejects",
            expected,
            {"accepted": True},
            "failed",
            f"the API server accepted a RayCluster with spec.managedBy {INVALID_MANAGED_BY!r}: the RayCluster "
            "CRD in the cluster does not carry the v1.7.0 rule on spec.managedBy (an older CRD kept by Helm?)",
        )
    if refusal["code"] == 422 and MANAGED_BY_MESSAGE in refusal["message"]:
        return _check("kuberay_webhook_rejects", expected, refusal, "passed", "")
    return _check(
        "kuberay_webhook_rejects",
        expected,
        refusal,
        "failed",
        f"refused, but not by the RayCluster CRD's rule (code {refusal['code']}): {refusal['message']}",
    )


def _uid(result: Any) -> str | None:
    found = _resources(result)
    uid = _map(_map(found[0]).get("metadata")).get("uid") if found else None
    return str(uid) if uid else None


def _owned_by(result: Any, cluster: str) -> bool:
    found = _resources(result)
    owners = _map(_map(found[0]).get("metadata")).get("ownerReferences") if found else None
    return any(_map(o).get("kind") == "RayCluster" and _map(o).get("name") == cluster for o in (owners or []))


def _recreates(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    cluster = str(settings.get("verify_kuberay_cluster") or "verify-ray")
    service = f"{cluster}-head-svc"
    expected = (
        f"the head Service {service} of RayCluster {cluster} is deleted and the KubeRay operator creates it "
        "again (same name, another uid, owned by the RayCluster)"
    )
    if not _bool(settings.get("verify_kuberay")):
        return _check("kuberay_recreates", expected, None, "skipped", OFF)
    before = gathered.get("__verify_kuberay_service")
    if before is None:
        return _check("kuberay_recreates", expected, None, "skipped", STOPPED)
    first = _uid(before)
    if first is None:
        return _check(
            "kuberay_recreates",
            expected,
            None,
            "failed",
            f"the operator never created the head Service {service} of RayCluster {cluster} (is the KubeRay "
            "operator running?)",
        )
    deleted, after = gathered.get("__verify_kuberay_deleted"), gathered.get("__verify_kuberay_recreated")
    if deleted is None or after is None:
        return _check("kuberay_recreates", expected, {"uid_before": first}, "skipped", STOPPED)
    if _map(deleted).get("failed"):
        why = str(_map(deleted).get("msg") or "")
        return _check(
            "kuberay_recreates",
            expected,
            {"uid_before": first},
            "failed",
            f"deleting {service} failed: {why}",
        )
    second = _uid(after)
    output = {"uid_before": first, "uid_after": second, "owned": _owned_by(after, cluster)}
    if second is None:
        return _check(
            "kuberay_recreates",
            expected,
            output,
            "failed",
            f"{service} was not created again after its deletion",
        )
    if second == first:
        return _check(
            "kuberay_recreates",
            expected,
            output,
            "failed",
            f"{service} still has its old uid {first}: it was not deleted and recreated",
        )
    if not output["owned"]:
        return _check(
            "kuberay_recreates",
            expected,
            output,
            "failed",
            f"a new {service} exists but RayCluster {cluster} does not own it (no ownerReference)",
        )
    return _check("kuberay_recreates", expected, output, "passed", "")


def controller_checks(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """kuberay_webhook_rejects and kuberay_recreates, in that order."""
    return [_rejects(gathered, settings), _recreates(gathered, settings)]
