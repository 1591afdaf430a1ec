"""metrics-server (issue 23 item 2): the resource metrics API as an optional release.

tests/test_chart_render.py renders the release of the all-on inventory through the pinned chart and
validates every object; here: what gpubring chose (the kubelet's self-signed certificate read with
--kubelet-insecure-tls, roles/metrics_server/README.md), that the readiness wait names the APIService
the pinned chart really creates, the version rule at its upstream bound, and the refusals of bad
inputs before any host.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import upstream
from _render import planned_releases
from gpubring.inventory import load_inventory
from gpubring.releases import Release, plan_releases
from gpubring.versions import load_pinned
from helpers import DATA, REPO, refused

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py
SITE = "group_vars/all/zz-metrics-server.yml"


def _release(root: Path) -> Release:
    return next(r for r in planned_releases(load_inventory(root)) if r.name == "metrics-server")


def _render(release: Release) -> list[dict[str, Any]]:
    chart = upstream.chart_dir(release.chart, release.version)
    rendered = upstream.render_release(chart, release, load_pinned()["kubernetes"]["version"])
    return [obj for _template, obj in rendered]


def _container_args(objects: list[dict[str, Any]]) -> list[str]:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_the_release_reads_self_signed_kubelets_and_waits_for_its_apiservice() -> None:
    upstream.upstream_dir()
    release = _release(DATA / "inventories" / "all-on")
    assert (release.namespace, release.version) == ("kube-system", load_pinned()["metrics_server"]["chart"])
    objects = _render(release)
    args = _container_args(objects)
    # The chart's defaultArgs stay (metric resolution, node status port), gpubring's flag is added.
    assert "--kubelet-insecure-tls" in args
    assert "--kubelet-use-node-status-port" in args
    assert next(o for o in objects if o["kind"] == "Deployment")["spec"]["replicas"] == 2
    (ready,) = release.ready
    services = [o["metadata"]["name"] for o in objects if o["kind"] == "APIService"]
    assert services == [ready["name"]] == ["v1beta1.metrics.k8s.io"]
    assert (ready["api_version"], ready["kind"], ready["condition"]) == (
        "apiregistration.k8s.io/v1",
        "APIService",
        "Available",
    )


def test_kubelets_with_ca_signed_certificates_are_verified(make_inventory: MakeInventory) -> None:
    upstream.upstream_dir()
    text = (
        "---\nmetrics_server_enabled: true\n"
        "metrics_server_kubelet_insecure_tls: false\nmetrics_server_replicas: 1\n"
    )
    release = _release(make_inventory({SITE: text}))
    objects = _render(release)
    assert "--kubelet-insecure-tls" not in _container_args(objects)
    assert next(o for o in objects if o["kind"] == "Deployment")["spec"]["replicas"] == 1


def test_the_sample_turns_it_on() -> None:
    """The sample is the platform the README describes (issue 23 item 10): `kubectl top` and CPU HPAs work."""
    sample = load_inventory(REPO / "inventories" / "prod")
    assert any(r.name == "metrics-server" for r in planned_releases(sample))


def test_off_means_no_release(make_inventory: MakeInventory) -> None:
    off = make_inventory({SITE: "---\nmetrics_server_enabled: false\n"})
    assert all(r.name != "metrics-server" for r in plan_releases(load_inventory(off)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "metrics_server_replicas: 0\n",
            "metrics_server_replicas: expected a number >= 1, got 0",
            id="replicas",
        ),
        pytest.param(
            "metrics_server_namespace: Kube_System\n",
            "metrics_server_namespace: expected a DNS-1123 label",
            id="namespace",
        ),
        pytest.param(
            "metrics_server_kubelet_insecure_tls: maybe\n",
            "metrics_server_kubelet_insecure_tls",
            id="not-a-bool",
        ),
        pytest.param(
            # metrics-server README.md at v0.8.1, Compatibility Matrix: 0.8.x needs Kubernetes 1.31+.
            "gpubring_versions: {kubernetes: {version: 1.30.4}}\n",
            "expected kubernetes.version >= 1.31 (metrics_server.kubernetes_min), got 1.30.4 "
            "(rule metrics-server-kubernetes-range",
            id="kubernetes-1.30",
        ),
    ],
)
def test_bad_inputs_are_refused_before_any_host(
    make_inventory: MakeInventory, text: str, expected: str
) -> None:
    root = make_inventory({SITE: "---\nmetrics_server_enabled: true\n" + text})
    stderr = refused("check", root)
    assert f"error: {SITE}: " in stderr
    assert expected in stderr, stderr
