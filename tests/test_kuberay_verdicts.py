"""The verdicts of verify's KubeRay test (plugins/module_utils/verify_controller.py) on the answers
its tasks register (roles/verify/tasks/cluster_controller.yml).

No API server is at hand: the answers are written here in the shapes the two ends give them, each
said where it comes from.

- A refused write: kubernetes.core.k8s fails with msg "Failed to create object: <body>", body the
  ApiException's body as Python prints bytes (kubernetes.core module_utils/k8s/service.py:
  ``msg = "Failed to create object: {0}".format(reason)``, reason = ``e.body``). The body is the API
  server's Status: kind Status, status Failure, reason Invalid, code 422 and the message
  apimachinery's NewInvalid words as ``<Kind>.<group> "<name>" is invalid: <field>: Invalid value:
  "<type>": <message>`` (a CEL rule on a field of type string reports the type, not the value).
- k8s_info answers {resources: [...]} with each object's metadata (uid, ownerReferences).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from helpers import module_utils

C = module_utils("verify_controller")
V = module_utils("verify_verdicts")
ON = {"verify_kuberay": True, "verify_kuberay_cluster": "verify-ray"}


def refusal(message: str, code: int = 422, reason: str = "Invalid") -> dict[str, Any]:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": "verify-ray-invalid", "group": "ray.io", "kind": "RayCluster"},
        "code": code,
    }
    body = (json.dumps(status, separators=(",", ":")) + "\n").encode()
    return {"failed": True, "changed": False, "msg": f"Failed to create object: {body!r}"}


CRD_REFUSAL = refusal(
    'RayCluster.ray.io "verify-ray-invalid" is invalid: spec.managedBy: Invalid value: "string": '
    + C.MANAGED_BY_MESSAGE
)


def service(uid: str, owner: str | None = "verify-ray") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "verify-ray-head-svc", "namespace": "gpubring-verify", "uid": uid}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "name": owner,
                "uid": "rc-1",
                "controller": True,
            }
        ]
    return {"resources": [{"apiVersion": "v1", "kind": "Service", "metadata": meta}]}


def checks(gathered: dict[str, Any], settings: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in C.controller_checks(gathered, settings or ON)}


def test_the_api_refusal_is_read_from_kubernetes_cores_message() -> None:
    got = C.api_refusal(CRD_REFUSAL)
    assert got["code"] == 422 and got["reason"] == "Invalid"
    assert got["message"].endswith(
        "the managedBy field value must be either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"
    )
    assert C.api_refusal({"changed": True, "result": {}}) is None
    # A message without a Status body is kept whole.
    plain = C.api_refusal({"failed": True, "msg": "Failed to create object: connection refused"})
    assert plain == {"code": None, "reason": None, "message": "Failed to create object: connection refused"}


def test_refused_by_the_crds_rule_passes() -> None:
    check = checks({"__verify_kuberay_rejected": CRD_REFUSAL})["kuberay_webhook_rejects"]
    assert (check["status"], check["reason"]) == ("passed", "")
    assert check["output"]["code"] == 422
    assert "x-kubernetes-validations rule on spec.managedBy" in check["expected"]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        pytest.param(
            {"changed": True, "result": {"kind": "RayCluster"}},
            "the API server accepted a RayCluster with spec.managedBy 'gpubring.io/not-a-manager'",
            id="accepted",
        ),
        pytest.param(
            refusal("the server could not find the requested resource", 404, "NotFound"),
            "refused, but not by the RayCluster CRD's rule (code 404): the server could not find the "
            "requested resource",
            id="no-crd",
        ),
        pytest.param(
            refusal('RayCluster.ray.io "verify-ray-invalid" is invalid: spec.headGroupSpec: Required value'),
            "refused, but not by the RayCluster CRD's rule (code 422)",
            id="another-field",
        ),
    ],
)
def test_anything_else_fails_with_its_reason(answer: dict[str, Any], reason: str) -> None:
    check = checks({"__verify_kuberay_rejected": answer})["kuberay_webhook_rejects"]
    assert check["status"] == "failed"
    assert check["reason"].startswith(reason), check["reason"]


def test_a_recreated_head_service_passes() -> None:
    gathered = {
        "__verify_kuberay_service": service("uid-1"),
        "__verify_kuberay_deleted": {"changed": True, "result": {}},
        "__verify_kuberay_recreated": service("uid-2"),
    }
    check = checks(gathered)["kuberay_recreates"]
    assert (check["status"], check["output"]) == (
        "passed",
        {"uid_before": "uid-1", "uid_after": "uid-2", "owned": True},
    )


@pytest.mark.parametrize(
    ("gathered", "reason"),
    [
        pytest.param(
            {"__verify_kuberay_service": {"resources": []}},
            "the operator never created the head Service verify-ray-head-svc",
            id="never-created",
        ),
        pytest.param(
            {
                "__verify_kuberay_service": service("uid-1"),
                "__verify_kuberay_deleted": {"changed": True},
                "__verify_kuberay_recreated": {"resources": []},
            },
            "verify-ray-head-svc was not created again after its deletion",
            id="not-recreated",
        ),
        pytest.param(
            {
                "__verify_kuberay_service": service("uid-1"),
                "__verify_kuberay_deleted": {"changed": True},
                "__verify_kuberay_recreated": service("uid-1"),
            },
            "verify-ray-head-svc still has its old uid uid-1",
            id="same-uid",
        ),
        pytest.param(
            {
                "__verify_kuberay_service": service("uid-1"),
                "__verify_kuberay_deleted": {"changed": True},
                "__verify_kuberay_recreated": service("uid-2", owner=None),
            },
            "a new verify-ray-head-svc exists but RayCluster verify-ray does not own it",
            id="not-owned",
        ),
        pytest.param(
            {
                "__verify_kuberay_service": service("uid-1"),
                "__verify_kuberay_deleted": {"failed": True, "msg": "Forbidden"},
                "__verify_kuberay_recreated": service("uid-1"),
            },
            "deleting verify-ray-head-svc failed: Forbidden",
            id="delete-refused",
        ),
    ],
)
def test_recreation_failures_say_why(gathered: dict[str, Any], reason: str) -> None:
    check = checks(gathered)["kuberay_recreates"]
    assert check["status"] == "failed"
    assert check["reason"].startswith(reason), check["reason"]


def test_off_and_not_reached_are_skips() -> None:
    off = checks({}, {"verify_kuberay": "False", "verify_kuberay_cluster": "verify-ray"})
    assert {c["status"] for c in off.values()} == {"skipped"}
    assert {c["reason"] for c in off.values()} == {C.OFF}
    stopped = checks({})
    assert {c["reason"] for c in stopped.values()} == {C.STOPPED}


def test_the_verify_checks_carry_both_in_the_fixed_names() -> None:
    assert {"kuberay_webhook_rejects", "kuberay_recreates"} <= set(V.CHECK_NAMES)
    every = V.verify_checks({"__verify_kuberay_rejected": CRD_REFUSAL}, ON)
    named = {c["name"]: c for c in every}
    assert named["kuberay_webhook_rejects"]["status"] == "passed"
    assert named["kuberay_recreates"]["reason"] == C.STOPPED
