"""The Grafana GPU dashboard (issue 24 item 5): NVIDIA's DCGM exporter dashboard provisioned with
kube-prometheus-stack when Grafana is on.

The ConfigMap (roles/monitoring templates/releases/kube-prometheus-stack/manifests.yml.j2) is
validated at the pinned Kubernetes by tests/test_chart_render.py with every object of the release;
here: its dashboard is the upstream file unchanged, the pinned chart's Grafana sidecar watches the
label it carries in the namespace it is in, the dashboard's data source is the one the chart
provisions, nothing is provisioned without Grafana, and the filter that reads the file refuses what is
not a dashboard of the role.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

import upstream
from _render import planned_releases
from gpubring.inventory import load_inventory
from gpubring.releases import Release, plan_releases
from gpubring.versions import load_pinned
from helpers import DATA, REPO, collection_module

FILE = "dcgm-exporter-dashboard.json"
UPSTREAM = Path("charts") / "dcgm-exporter-dashboard-4.5.3-4.8.2" / FILE


def _stack(root: Path) -> Release:
    return next(r for r in planned_releases(load_inventory(root)) if r.name == "kube-prometheus-stack")


@cache
def _all_on() -> tuple[Release, tuple[dict[str, Any], ...]]:
    release = _stack(DATA / "inventories" / "all-on")
    rendered = upstream.render_release(
        upstream.chart_dir("kube-prometheus-stack", release.version),
        release,
        load_pinned()["kubernetes"]["version"],
        ("monitoring.coreos.com/v1",),
    )
    return release, tuple(obj for _template, obj in rendered)


def _dashboard_configmap(release: Release) -> dict[str, Any]:
    (configmap,) = [o for o in release.pre_manifests if o["kind"] == "ConfigMap"]
    return configmap


def test_the_dashboard_is_nvidias_file_unchanged() -> None:
    root = upstream.upstream_dir()
    release, _ = _all_on()
    configmap = _dashboard_configmap(release)
    theirs = (root / UPSTREAM).read_text(encoding="utf-8")
    assert configmap["data"] == {FILE: theirs}
    assert (REPO / "roles" / "monitoring" / "files" / FILE).read_text(encoding="utf-8") == theirs
    assert configmap["metadata"]["namespace"] == release.namespace
    assert json.loads(theirs)["title"] == "NVIDIA DCGM Exporter Dashboard"


def test_the_pinned_charts_grafana_sidecar_loads_it() -> None:
    upstream.upstream_dir()
    release, objects = _all_on()
    labels = _dashboard_configmap(release)["metadata"]["labels"]
    grafana = next(
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("grafana")
    )
    containers = {c["name"]: c for c in grafana["spec"]["template"]["spec"]["containers"]}
    sidecar = containers["grafana-sc-dashboard"]  # the dashboards sidecar of the grafana subchart
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert env["LABEL"] in labels
    assert labels[env["LABEL"]] == env["LABEL_VALUE"]
    assert env["NAMESPACE"] == "ALL"  # the ConfigMap's namespace is watched
    assert env["RESOURCE"] in ("configmap", "both")


def test_its_data_source_is_the_prometheus_the_chart_provisions() -> None:
    upstream.upstream_dir()
    release, objects = _all_on()
    board = json.loads(_dashboard_configmap(release)["data"][FILE])
    (variable,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus"  # any data source of that type
    assert {p["datasource"] for p in board["panels"]} == {"$" + variable["name"]}
    datasources = next(
        yaml_text
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"].get("labels", {}).get("grafana_datasource") == "1"
        for yaml_text in o["data"].values()
    )
    provisioned = yaml.safe_load(datasources)["datasources"]
    assert any(d["type"] == "prometheus" and d.get("isDefault") for d in provisioned), provisioned


@pytest.mark.parametrize(
    ("text", "expected_releases"),
    [
        pytest.param("monitoring_grafana: false\n", 1, id="grafana-off"),
        pytest.param("monitoring_stack: false\n", 0, id="no-stack"),
    ],
)
def test_without_grafana_no_dashboard_and_no_sidecar_values(
    make_inventory: Any, text: str, expected_releases: int
) -> None:
    # No volume claim: the sample's would need a StorageClass (its own refusal, not this test's).
    site = '---\nmonitoring_enabled: true\nmonitoring_storage_size: ""\n' + text
    root = make_inventory({"group_vars/all/zz-monitoring.yml": site})
    stacks = [r for r in plan_releases(load_inventory(root)) if r.name == "kube-prometheus-stack"]
    assert len(stacks) == expected_releases
    for release in stacks:
        assert release.pre_manifests == []
        assert release.values["grafana"] == {"enabled": False}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../../../versions.yml", "expected the name of a .json file of roles/monitoring/files"),
        ("../files/dcgm-exporter-dashboard.json", "expected the name of a .json file"),
        ("missing.json", "cannot read"),
        (None, "expected the name of a .json file"),
    ],
)
def test_the_filter_reads_only_dashboards_of_the_role(name: Any, message: str) -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=message):
        collection_module("filter.monitoring_dashboard").monitoring_dashboard(name)


def test_the_filter_refuses_a_file_that_is_not_a_dashboard(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ansible.errors import AnsibleFilterError

    module = collection_module("filter.monitoring_dashboard")
    (tmp_path / "broken.json").write_text('{"title": "x"', encoding="utf-8")
    (tmp_path / "list.json").write_text('[{"title": "x"}]', encoding="utf-8")
    monkeypatch.setattr(module, "_FILES", tmp_path)
    with pytest.raises(AnsibleFilterError, match=r"broken\.json is not JSON"):
        module.monitoring_dashboard("broken.json")
    with pytest.raises(AnsibleFilterError, match=r"list\.json is not a Grafana dashboard"):
        module.monitoring_dashboard("list.json")
