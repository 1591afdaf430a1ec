"""Inference ingress (issue 23 item 1, ai_inference): Envoy Gateway, a GatewayClass and a Gateway.

tests/test_chart_render.py renders the release of the all-on inventory through the pinned chart
(gateway-helm v1.9.0) and validates every object, gpubring's GatewayClass, Gateway and EnvoyProxy
included, against the chart's CRDs. Here: gpubring's Gateway API objects also against the standard
channel of the pinned Gateway API (v1.6.1, its own CRDs), the readiness waits `gpubring plan` names
(the controller Deployment the chart really creates, the Gateway Programmed), the inventory inputs
reaching the objects, the version rule at its upstream bound, and the refusals of bad inputs before
any host. The verify check: tests/test_ai_inference_verify.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

import upstream
from _render import planned_releases
from gpubring.catalog import declared_releases
from gpubring.inventory import load_inventory
from gpubring.releases import Release
from gpubring.versions import load_pinned
from helpers import DATA, REPO, refused

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py
SITE = "group_vars/all/zz-ai-inference.yml"
ALL_ON = DATA / "inventories" / "all-on"
KINDS = ("gatewayclasses", "gateways", "httproutes")  # the Gateway API kinds gpubring writes


def _release(root: Path) -> Release:
    return next(r for r in planned_releases(load_inventory(root)) if r.name == "gateway-helm")


@cache
def all_on() -> Release:
    return _release(ALL_ON)


@cache
def standard_crds() -> dict[tuple[str, str], upstream.Crd]:
    """The standard channel of the pinned Gateway API (charts/gateway-api-<version>/standard), the
    kinds gpubring writes (its GatewayClass and Gateway, verify's HTTPRoutes)."""
    version = str(load_pinned()["ai_inference"]["gateway_api"])
    folder = upstream.upstream_dir() / "charts" / f"gateway-api-{version}" / "standard"
    if not folder.is_dir():
        pytest.skip(f"no charts/gateway-api-{version}/standard in {upstream.ENV} (charts/SOURCES.md)")
    out: dict[tuple[str, str], upstream.Crd] = {}
    for kind in KINDS:  # only these: the files are large, and the rest is not used here
        out.update(upstream.crd_from_file(folder / f"gateway.networking.k8s.io_{kind}.yaml"))
    return out


def standard_errors(obj: dict[str, Any]) -> list[str]:
    crd = standard_crds().get((str(obj["apiVersion"]), str(obj["kind"])))
    assert crd is not None, f"{obj['kind']} {obj['apiVersion']} is not in the standard channel"
    return upstream.crd_errors(obj, crd)


def test_the_release_is_declared_with_its_pin() -> None:
    (declared,) = [r for r in declared_releases() if r.role == "ai_inference"]
    pins = load_pinned()["ai_inference"]
    assert (declared.name, declared.pin, declared.phase) == ("gateway-helm", "ai_inference.chart", "platform")
    assert (
        declared.chart
        == f"{pins['chart_repo']}/{pins['chart_name']}"
        == "oci://docker.io/envoyproxy/gateway-helm"
    )
    assert declared.version == pins["chart"]


def test_it_is_off_unless_asked_for() -> None:
    """Off by default (the sample's plan, which leaves it off, is tests/test_chart_render.py's)."""
    defaults = yaml.safe_load((REPO / "roles" / "ai_inference" / "defaults" / "main.yml").read_text())
    assert defaults["ai_inference_enabled"] is False


def test_the_gateway_objects_follow_the_inventory_and_the_standard_channel() -> None:
    upstream.upstream_dir()
    release = all_on()
    assert [o["kind"] for o in release.manifests] == ["Namespace", "EnvoyProxy", "GatewayClass", "Gateway"]
    objects = {o["kind"]: o for o in release.manifests}
    assert objects["Namespace"]["metadata"]["name"] == "inference"  # the Gateway's, not the release's
    gateway, gateway_class = objects["Gateway"], objects["GatewayClass"]
    assert (gateway["metadata"]["name"], gateway["metadata"]["namespace"]) == ("inference", "inference")
    assert gateway["spec"]["gatewayClassName"] == gateway_class["metadata"]["name"] == "gpubring-inference"
    (listener,) = gateway["spec"]["listeners"]
    assert (listener["protocol"], listener["port"], listener["allowedRoutes"]) == (
        "HTTP", 8080, {"namespaces": {"from": "All"}},
    )  # fmt: skip
    assert gateway_class["spec"]["controllerName"] == "gateway.envoyproxy.io/gatewayclass-controller"
    proxy = objects["EnvoyProxy"]
    assert gateway_class["spec"]["parametersRef"] == {
        "group": "gateway.envoyproxy.io",
        "kind": "EnvoyProxy",
        "name": proxy["metadata"]["name"],
        "namespace": proxy["metadata"]["namespace"],
    }
    assert proxy["spec"]["provider"]["kubernetes"]["envoyService"]["type"] == "NodePort"
    # The standard channel (not only the experimental one the chart brings) admits both.
    for obj in (gateway, gateway_class):
        assert not standard_errors(obj), standard_errors(obj)
    # The EnvoyProxy against the chart's own CRD: tests/test_chart_render.py (all-on).
    # And a typo is caught, so the checks above can fail.
    broken = copy.deepcopy(gateway)
    broken["spec"]["listeners"][0]["prot"] = broken["spec"]["listeners"][0].pop("protocol")
    assert any("prot" in e for e in standard_errors(broken))


def test_the_readiness_waits_name_the_controller_and_the_gateway() -> None:
    upstream.upstream_dir()
    release = all_on()
    deployment, gateway = release.ready
    chart = upstream.chart_dir("gateway-helm", release.version)
    rendered = upstream.render_release(chart, release, load_pinned()["kubernetes"]["version"])
    deployments = [o["metadata"]["name"] for _t, o in rendered if o["kind"] == "Deployment"]
    assert deployments == [deployment["name"]] == ["envoy-gateway"]
    assert (deployment["kind"], deployment["namespace"], deployment["condition"]) == (
        "Deployment", release.namespace, "Available",
    )  # fmt: skip
    assert (gateway["kind"], gateway["name"], gateway["namespace"], gateway["condition"]) == (
        "Gateway", "inference", "inference", "Programmed",
    )  # fmt: skip
    waits = "\n".join(release.waits)
    assert "Deployment envoy-gateway in envoy-gateway-system condition Available=True" in waits
    assert "Gateway inference in inference condition Programmed=True" in waits


def test_the_gateway_in_the_release_namespace_needs_no_namespace(make_inventory: MakeInventory) -> None:
    text = "---\nai_inference_enabled: true\nai_inference_service_type: LoadBalancer\n"
    release = _release(make_inventory({SITE: text}))
    proxy, _gateway_class, gateway = release.manifests
    assert [o["kind"] for o in release.manifests] == ["EnvoyProxy", "GatewayClass", "Gateway"]
    assert proxy["spec"]["provider"]["kubernetes"]["envoyService"]["type"] == "LoadBalancer"
    assert (gateway["metadata"]["namespace"], gateway["spec"]["listeners"][0]["port"]) == (
        "envoy-gateway-system", 80,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "ai_inference_gateway_port: 70000\n", "ai_inference_gateway_port: expected a port", id="port"
        ),
        pytest.param(
            "ai_inference_gateway_name: Inference_GW\n",
            "ai_inference_gateway_name: expected a DNS-1123 name",
            id="gateway-name",
        ),
        pytest.param(
            "ai_inference_gateway_namespace: Team.A\n",
            "ai_inference_gateway_namespace: expected a DNS-1123 label",
            id="gateway-namespace",
        ),
        pytest.param("ai_inference_service_type: Ingress\n", "ai_inference_service_type", id="service-type"),
        pytest.param("ai_inference_enabled: maybe\n", "ai_inference_enabled", id="not-a-bool"),
        pytest.param(
            "verify_inference_weight_b: 100\n",
            "verify_inference_weight_b: expected a number <= 99",
            id="weight",
        ),
        pytest.param(
            # envoyproxy/gateway matrix.md at v1.9.0: Envoy Gateway v1.9 supports Kubernetes 1.33-1.36.
            "gpubring_versions: {kubernetes: {version: 1.32.9}}\n",
            "expected kubernetes.version >= 1.33 (ai_inference.kubernetes_min, of the range 1.33 to 1.36), "
            "got 1.32.9 (rule envoy-gateway-kubernetes-range",
            id="kubernetes-1.32",
        ),
    ],
)
def test_bad_inputs_are_refused_before_any_host(
    make_inventory: MakeInventory, text: str, expected: str
) -> None:
    root = make_inventory({SITE: "---\nai_inference_enabled: true\n" + text})
    stderr = refused("check", root)
    assert f"error: {SITE}: " in stderr
    assert expected in stderr, stderr
