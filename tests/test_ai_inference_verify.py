"""The verify check of the inference ingress (issue 23 item 1): inference_gateway_weighted and
inference_gateway_header.

No cluster here: the check's objects are rendered as the role renders them (the all-on inventory,
where ai_inference is on) and validated (Deployments, Services and the client Job with
kubernetes-validate at the pinned Kubernetes; the HTTPRoutes against the standard channel of the pinned
Gateway API), and the verdicts are judged on recorded outputs of the client (its log lines) and of the
API (the routes' status, the Envoy Service, the Job's status). tests/test_verify_verdicts.py runs the
role's asserts on the same verdicts through Ansible.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from _render import schema_version
from gpubring import releases
from gpubring.inventory import load_inventory
from gpubring.versions import load_pinned
from helpers import DATA, REPO, module_utils
from test_ai_inference import standard_errors

INF = module_utils("verify_inference")
V = module_utils("verify_verdicts")
ALL_ON = DATA / "inventories" / "all-on"
SETTINGS: dict[str, Any] = {
    "verify_inference": True,
    "verify_inference_requests": 200,
    "verify_inference_weight_b": 20,
    "verify_inference_tolerance": 10,
    "verify_inference_gateway": "inference",
    "verify_inference_gateway_namespace": "inference",
}


def rendered(name: str, host_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    inv = load_inventory(ALL_ON)
    text = releases.render_template(inv, f"verify/templates/smoke/{name}.yml.j2", host_vars=host_vars or {})
    objects = yaml.safe_load(text)
    assert isinstance(objects, list)
    return objects


def test_the_backends_and_routes_through_the_gateway() -> None:
    objects = rendered("inference")
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds == [
        ("Deployment", "verify-echo-a"), ("Service", "verify-echo-a"),
        ("Deployment", "verify-echo-b"), ("Service", "verify-echo-b"),
        ("HTTPRoute", "verify-inference-weighted"), ("HTTPRoute", "verify-inference-header"),
    ]  # fmt: skip
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    weighted = by_name[("HTTPRoute", "verify-inference-weighted")]["spec"]
    header = by_name[("HTTPRoute", "verify-inference-header")]["spec"]
    # Both attach to the all-on inventory's Gateway (ai_inference_gateway_name/namespace), its listener.
    gateway = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference",
               "namespace": "inference", "sectionName": "http"}  # fmt: skip
    assert weighted["parentRefs"] == header["parentRefs"] == [gateway]
    (rule,) = weighted["rules"]
    assert [(b["name"], b["weight"]) for b in rule["backendRefs"]] == [
        ("verify-echo-a", 80),
        ("verify-echo-b", 20),
    ]
    matched, default = header["rules"]
    assert matched["matches"] == [{"headers": [{"type": "Exact", "name": "x-gpubring-route", "value": "b"}]}]
    assert [b["name"] for b in matched["backendRefs"]] == ["verify-echo-b"]
    assert [b["name"] for b in default["backendRefs"]] == ["verify-echo-a"] and "matches" not in default
    # Each Service selects its own backend's pods only.
    for backend in ("a", "b"):
        service = by_name[("Service", f"verify-echo-{backend}")]
        labels = by_name[("Deployment", f"verify-echo-{backend}")]["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"] == {"gpubring.io/verify-echo": backend}
        assert labels["gpubring.io/verify-echo"] == backend


def test_the_client_asks_the_gateways_envoy_service() -> None:
    (job,) = rendered("inference-client", {"__verify_inference_address": "10.96.7.8"})
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["URL"] == "http://10.96.7.8:8080/hostname"  # all-on: ai_inference_gateway_port 8080
    assert env["REQUESTS"] == "200"
    assert env["WEIGHTED_HOST"] == "weighted.gpubring-verify.verify.gpubring"
    script = container["command"][2]
    # One line per case, in the shape the verdicts read.
    for case in ("weighted", "header", "no_header"):
        assert f"count {case} " in script
    assert 'echo "$name a=$a b=$b failed=$failed"' in script
    assert INF.parse_counts("weighted a=160 b=40 failed=0\n") == {
        "weighted": {"a": 160, "b": 40, "failed": 0}
    }
    (ipv6,) = rendered("inference-client", {"__verify_inference_address": "fd00::10"})
    url = ipv6["spec"]["template"]["spec"]["containers"][0]["env"][0]
    assert url == {"name": "URL", "value": "http://[fd00::10]:8080/hostname"}


def test_every_object_validates_and_uses_the_pinned_image() -> None:
    inv = load_inventory(ALL_ON)
    version = schema_version(inv)
    objects = rendered("inference") + rendered("inference-client", {"__verify_inference_address": "10.0.0.1"})
    image = load_pinned()["ai_inference"]["echo_image"]
    for obj in objects:
        label = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"].startswith("gateway.networking.k8s.io/"):
            assert not standard_errors(obj), (label, standard_errors(obj))
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{label}: {exc.message}")
        if obj["kind"] in ("Deployment", "Job"):
            (container,) = obj["spec"]["template"]["spec"]["containers"]
            assert container["image"] == image, label


def test_no_image_or_version_literal_in_the_templates() -> None:
    """The echo image is a pin of versions.yml (ai_inference.echo_image), not written in a template."""
    texts = [p.read_text() for p in (REPO / "roles" / "verify" / "templates" / "smoke").glob("inference*.j2")]
    texts += [p.read_text() for p in (REPO / "roles" / "ai_inference").rglob("*.j2")]
    images = [line.strip() for text in texts for line in text.splitlines() if re.match(r"\s*image:", line)]
    assert len(images) == 2  # the backends' Deployment and the client Job
    assert all(re.fullmatch(r"image: \{\{ verify_inference_image \| to_json \}\}", i) for i in images), images


# -- the verdicts on recorded outputs ---------------------------------------------------------------

_ACCEPTED = {"parents": [{"conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}]}]}


def gathered(log: str, *, succeeded: int = 1, failed: int = 0) -> dict[str, Any]:
    """What cluster_inference.yml registers in a run whose client printed `log`."""
    return {
        "__verify_inference_routes": {
            "resources": [
                {"metadata": {"name": "verify-inference-weighted"}, "status": copy.deepcopy(_ACCEPTED)},
                {"metadata": {"name": "verify-inference-header"}, "status": copy.deepcopy(_ACCEPTED)},
            ]
        },
        "__verify_inference_service": {"resources": [{"spec": {"clusterIP": "10.96.7.8"}}]},
        "__verify_inference_job": {"resources": [{"status": {"succeeded": succeeded, "failed": failed}}]},
        "__verify_inference_log": {"log": log, "log_lines": log.splitlines()},
    }


PASSED_LOG = "weighted a=163 b=37 failed=0\nheader a=0 b=200 failed=0\nno_header a=200 b=0 failed=0\n"


def verdicts(data: dict[str, Any], **settings: Any) -> dict[str, dict[str, Any]]:
    checks = INF.inference_checks(data, SETTINGS | settings)
    assert [c["name"] for c in checks] == ["inference_gateway_weighted", "inference_gateway_header"]
    return {c["name"]: c for c in checks}


def test_a_run_that_routes_as_asked_passes() -> None:
    checks = verdicts(gathered(PASSED_LOG))
    assert {n: (c["status"], c["reason"]) for n, c in checks.items()} == {
        "inference_gateway_weighted": ("passed", ""),
        "inference_gateway_header": ("passed", ""),
    }
    assert checks["inference_gateway_weighted"]["output"] == {"weighted": {"a": 163, "b": 37, "failed": 0}}
    assert checks["inference_gateway_header"]["output"] == {
        "header": {"a": 0, "b": 200, "failed": 0},
        "no_header": {"a": 200, "b": 0, "failed": 0},
    }
    # Through the role's filter, in the order of CHECK_NAMES, the same.
    all_checks = V.verify_checks(gathered(PASSED_LOG), SETTINGS)
    assert [c["name"] for c in all_checks] == list(V.CHECK_NAMES)
    assert [c for c in all_checks if c["name"] in checks] == list(checks.values())


def test_a_skewed_split_fails_with_the_share_it_measured() -> None:
    log = PASSED_LOG.replace("weighted a=163 b=37", "weighted a=120 b=80")
    checks = verdicts(gathered(log))
    assert checks["inference_gateway_weighted"]["status"] == "failed"
    assert checks["inference_gateway_weighted"]["reason"] == (
        "skewed split: backend B got 40.0% (80 of 200), expected 20% ± 10"
    )
    assert checks["inference_gateway_header"]["status"] == "passed"
    # At the edge of the tolerance it passes; one request beyond, it fails.
    assert verdicts(gathered(log.replace("a=120 b=80", "a=140 b=60")))["inference_gateway_weighted"][
        "status"
    ] == ("passed")
    edge = verdicts(gathered(log.replace("a=120 b=80", "a=139 b=61")))["inference_gateway_weighted"]
    assert edge["status"] == "failed"
    # Requests that got no backend's answer fail the split whatever the ratio.
    lost = verdicts(gathered(PASSED_LOG.replace("b=37 failed=0", "b=37 failed=3")))
    assert lost["inference_gateway_weighted"]["reason"] == (
        "3 of 200 requests to the weighted route got no backend's answer"
    )


def test_a_misrouted_header_fails_naming_where_the_requests_went() -> None:
    log = PASSED_LOG.replace("header a=0 b=200", "header a=12 b=188")
    checks = verdicts(gathered(log))
    assert checks["inference_gateway_header"]["status"] == "failed"
    assert checks["inference_gateway_header"]["reason"] == (
        "with x-gpubring-route: b, 188 of 200 reached backend B (12 went to A, 0 failed)"
    )
    assert checks["inference_gateway_weighted"]["status"] == "passed"
    # Requests without the header that reach B fail it too: the match, not the route, must decide.
    leaky = verdicts(gathered(PASSED_LOG.replace("no_header a=200 b=0", "no_header a=150 b=50")))
    assert leaky["inference_gateway_header"]["reason"] == (
        "without the header, 150 of 200 reached backend A (50 went to B, 0 failed)"
    )


def test_a_failed_client_fails_both_with_its_last_words() -> None:
    data = gathered("route never answered: http://10.96.7.8:8080/hostname\n", succeeded=0, failed=1)
    checks = verdicts(data)
    for check in checks.values():
        assert (check["status"], check["reason"]) == (
            "failed",
            "the client Job failed: route never answered: http://10.96.7.8:8080/hostname",
        )
        assert check["output"] is None
    # A client that finished without printing every case.
    short = verdicts(gathered("weighted a=160 b=40 failed=0\n"))
    assert short["inference_gateway_header"]["reason"] == (
        "the client's log has no counts for header, no_header (last line: weighted a=160 b=40 failed=0)"
    )
    unfinished = verdicts(gathered("", succeeded=0))
    assert unfinished["inference_gateway_weighted"]["reason"] == "the client Job did not finish"


def test_what_the_gateway_refused_is_named() -> None:
    data = gathered(PASSED_LOG)
    route = data["__verify_inference_routes"]["resources"][1]
    route["status"] = {
        "parents": [
            {
                "conditions": [
                    {
                        "type": "Accepted",
                        "status": "False",
                        "reason": "NotAllowedByListeners",
                        "message": "No listeners included by this parent ref allowed this attachment.",
                    }
                ]
            }
        ]
    }
    checks = verdicts(data)
    assert {c["status"] for c in checks.values()} == {"failed"}
    assert checks["inference_gateway_header"]["reason"] == (
        "Gateway inference/inference did not accept the HTTPRoute(s) verify-inference-header "
        "(NotAllowedByListeners: No listeners included by this parent ref allowed this attachment.)"
    )
    data = gathered(PASSED_LOG)
    data["__verify_inference_service"] = {"resources": []}
    assert verdicts(data)["inference_gateway_weighted"]["reason"] == (
        "no Envoy Service of Gateway inference/inference (is the Gateway Programmed?)"
    )


def test_off_or_not_reached_is_skipped() -> None:
    off = verdicts(gathered(PASSED_LOG), verify_inference="false")
    assert {(c["status"], c["reason"]) for c in off.values()} == {("skipped", INF.OFF)}
    stopped = verdicts({})
    assert {(c["status"], c["reason"]) for c in stopped.values()} == {("skipped", INF.STOPPED)}
    data = gathered(PASSED_LOG)
    del data["__verify_inference_job"], data["__verify_inference_log"]
    assert {c["status"] for c in verdicts(data).values()} == {"skipped"}
