"""roles/storage (issue 24 item 4): local-path-provisioner v0.0.37 as an optional release with the
cluster's default StorageClass, and the refusal of a Prometheus volume claim that nothing would bind.

Rendered by Helm's engine from $GPUBRING_UPSTREAM_DIR/charts/local-path-provisioner-v0.0.37 and
validated at the pinned Kubernetes (tests/_render.validation_problems); the refusals go through
load_inventory, as `gpubring check` and `gpubring plan` do, and one through the `plan` command itself.
No cluster runs here: that the claim binds is shown by its two halves, a claim without a class and
a StorageClass the chart marks as the default."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import upstream
from _render import planned_releases, schema_version, validation_problems
from gpubring.app import app
from gpubring.inventory import Inventory, load_inventory
from gpubring.releases import Release
from helpers import inventory_problems
from test_chart_render import plan

FILE = "group_vars/all/storage.yml"
MONITORING = "monitoring_enabled: true\nmonitoring_storage_size: 200Gi\n"


def _plan(root: Path) -> tuple[Inventory, dict[str, Release]]:
    inv = load_inventory(root)
    return inv, {r.name: r for r in planned_releases(inv)}


def _problems(make_inventory: Callable[..., Path], text: str) -> list[str]:
    return inventory_problems(make_inventory({FILE: text}))


def _chart_objects(inv: Inventory, release: Release) -> list[tuple[str, dict[str, Any]]]:
    chart = upstream.chart_dir("local-path-provisioner", release.version)
    return upstream.render_release(chart, release, inv.versions["kubernetes"]["version"])


def _kind(objects: list[tuple[str, dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    return [obj for _, obj in objects if obj.get("kind") == kind]


def test_the_chart_makes_one_default_storageclass_from_the_inputs(
    make_inventory: Callable[..., Path],
) -> None:
    upstream.upstream_dir()
    root = make_inventory(
        {
            FILE: "storage_enabled: true\nstorage_class_name: node-local\n"
            "storage_node_path: /var/lib/gpubring-volumes\nstorage_reclaim_policy: Retain\n" + MONITORING
        }
    )
    inv, releases = _plan(root)
    release = releases["local-path-provisioner"]
    assert release.version == upstream.chart_values("local-path-provisioner", release.version)["image"]["tag"]
    assert release.namespace_object is not None
    assert (
        release.namespace_object["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    )
    objects = _chart_objects(inv, release)
    problems = validation_problems(objects, schema_version(inv), lambda w, o: f"{w} {o.get('kind')}")
    assert not problems, "\n".join(problems)
    (klass,) = _kind(objects, "StorageClass")
    assert klass["metadata"]["name"] == "node-local"
    assert klass["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert klass["reclaimPolicy"] == "Retain"
    assert klass["volumeBindingMode"] == "WaitForFirstConsumer"
    (deployment,) = _kind(objects, "Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--provisioner-name") + 1] == klass["provisioner"]
    (config,) = [c for c in _kind(objects, "ConfigMap") if "config.json" in c["data"]]
    assert json.loads(config["data"]["config.json"])["nodePathMap"] == [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/var/lib/gpubring-volumes"]}
    ]
    # The helper pod that makes a volume's directory runs on the claim's node, GPU taints or not.
    assert "- operator: Exists" in config["data"]["helperPod.yaml"]


def test_prometheus_claim_binds_to_the_default_class() -> None:
    """The all-on inventory: the monitoring role's claim names no class, and the storage release,
    applied before it, makes the default class; the plan names the wait for it."""
    upstream.upstream_dir()
    inv, releases = plan("all-on")
    names = [r.name for r in releases]
    assert names.index("local-path-provisioner") < names.index("kube-prometheus-stack")
    by_name = {r.name: r for r in releases}
    claim = by_name["kube-prometheus-stack"].values["prometheus"]["prometheusSpec"]["storageSpec"]
    assert claim["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert "storageClassName" not in claim["volumeClaimTemplate"]["spec"]
    storage = by_name["local-path-provisioner"]
    (klass,) = _kind(_chart_objects(inv, storage), "StorageClass")
    assert klass["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert any(w.startswith("Helm --wait") for w in storage.waits)
    assert any("StorageClass (metadata.name=local-path)" in w and "(the default)" in w for w in storage.waits)


REFUSAL = "expected a default StorageClass for Prometheus' volume claim (monitoring_storage_size 200Gi)"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (MONITORING, "storage_enabled is off and gpubring_site_storage_class is empty"),
        (
            MONITORING + "storage_enabled: true\nstorage_default_class: false\n",
            "storage_default_class is off, so its class is not the default",
        ),
    ],
)
def test_a_claim_without_a_default_class_is_refused(
    make_inventory: Callable[..., Path], text: str, why: str
) -> None:
    problems = _problems(make_inventory, text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{FILE}: monitoring_storage_size: {REFUSAL}")
    assert why in problems[0]
    for fix in ("storage_enabled: true", "gpubring_site_storage_class", 'monitoring_storage_size: ""'):
        assert fix in problems[0]


@pytest.mark.parametrize(
    "text",
    [
        MONITORING + "storage_enabled: true\n",
        MONITORING + "gpubring_site_storage_class: san-default\n",
        "monitoring_enabled: true\nmonitoring_storage_size: ''\n",
        MONITORING + "monitoring_stack: false\n",  # a Prometheus gpubring does not install
    ],
)
def test_a_claim_that_binds_or_no_claim_passes(make_inventory: Callable[..., Path], text: str) -> None:
    assert _problems(make_inventory, text) == []


def test_plan_refuses_the_claim_before_anything_runs(make_inventory: Callable[..., Path]) -> None:
    result = CliRunner().invoke(app, ["plan", str(make_inventory({FILE: MONITORING}))])
    assert result.exit_code != 0
    assert "monitoring_storage_size" in result.output and "gpubring_site_storage_class" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("path", ["var/lib/volumes", "/"])
def test_a_node_path_that_is_not_absolute_or_is_root_is_refused(
    make_inventory: Callable[..., Path], path: str
) -> None:
    problems = _problems(make_inventory, f"storage_enabled: true\nstorage_node_path: {path}\n")
    assert problems == [
        f"{FILE}: storage_node_path: expected an absolute path other than / for the volumes on each node; "
        f"got {path!r} (local-path-provisioner refuses a relative path and the root directory)"
    ]
