"""The KubeRay operator release (roles/kuberay) and the verify test's RayClusters (roles/verify,
templates/smoke/kuberay.yml.j2), rendered and held to the pinned chart's CRD.

The release itself goes through tests/test_chart_render.py with every platform release of the all-on
inventory (the chart kuberay-operator at the pinned version, rendered and validated there). Here:
what `plan` says it waits for exists in what the chart renders; the test's RayClusters are what the
pinned RayCluster CRD admits, but for the one the test wants refused, which breaks exactly the CRD's
x-kubernetes-validations rule on spec.managedBy (evaluated here the way the rule reads: ``self in
[...]``; no CEL engine runs in these tests, and no API server is at hand).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

import test_chart_render as chart_render
import upstream
from gpubring.inventory import Inventory
from gpubring.releases import render_template
from helpers import DATA, REPO, module_utils

C = module_utils("verify_controller")
ALL_ON = DATA / "inventories" / "all-on"
PINS = yaml.safe_load((REPO / "versions.yml").read_text(encoding="utf-8"))["gpubring_versions"]


@pytest.fixture(scope="module")
def all_on() -> Inventory:
    return chart_render.plan("all-on")[0]


def _release(name: str) -> Any:
    """The release as `plan` renders it for the all-on inventory (test_chart_render's cached plan)."""
    return next(r for r in chart_render.plan("all-on")[1] if r.name == name)


def test_the_release_is_the_pinned_chart_and_waits_for_its_deployment(all_on: Inventory) -> None:
    release = _release("kuberay-operator")
    assert (release.chart, release.version) == ("kuberay-operator", PINS["kuberay"]["chart"])
    assert release.repo == PINS["kuberay"]["chart_repo"]
    (ready,) = release.ready
    assert (ready["kind"], ready["name"], ready["condition"]) == (
        "Deployment",
        "kuberay-operator",
        "Available",
    )
    assert any("Deployment kuberay-operator" in w for w in release.waits), release.waits
    # The Deployment plan waits for is the one the pinned chart renders, in the release's namespace.
    chart = upstream.chart_dir("kuberay-operator", release.version)
    objects = upstream.render_release(chart, release, all_on.versions["kubernetes"]["version"])
    deployments = [o for _, o in objects if o.get("kind") == "Deployment"]
    assert [d["metadata"]["name"] for d in deployments] == [ready["name"]]
    # The chart installs no admission webhook at this version (README.md of the role says what would).
    kinds = {o.get("kind") for _, o in objects}
    assert not kinds & {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}, kinds


def test_off_by_default() -> None:
    # The variants leave kuberay_enabled unset (the sample turns it on: the README's platform).
    for name in ("mig-timeslicing", "dra-kueue-rdma"):
        assert "kuberay-operator" not in {r.name for r in chart_render.plan(name)[1]}, name
    assert "kuberay-operator" in {r.name for r in chart_render.plan("prod")[1]}


# -- the verify test's RayClusters ----------------------------------------------------------------


def rayclusters(inv: Inventory) -> dict[str, dict[str, Any]]:
    text = render_template(inv, "verify/templates/smoke/kuberay.yml.j2", host_vars={"__verify_plan": []})
    objects = yaml.safe_load(text)
    assert isinstance(objects, list)
    return {o["metadata"]["name"]: o for o in objects}


def crd_file() -> Path:
    """The RayCluster CRD of the pinned chart (its crds/)."""
    chart = upstream.chart_dir("kuberay-operator", PINS["kuberay"]["chart"], to_render=False)
    return chart / "crds" / "ray.io_rayclusters.yaml"


@cache
def crd_doc() -> dict[str, Any]:
    loaded = yaml.load(crd_file().read_text(encoding="utf-8"), Loader=upstream._Loader)
    assert isinstance(loaded, dict)
    return loaded


def managed_by_rule() -> tuple[list[str], str]:
    """The allowed values and message of the pinned RayCluster CRD's rule on spec.managedBy."""
    doc = crd_doc()
    (v1,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1"]
    spec = v1["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = spec["properties"]["managedBy"]["x-kubernetes-validations"]
    (rule,) = [r for r in rules if r["rule"].startswith("self in ")]
    match = re.fullmatch(r"self in (\[.*\])", rule["rule"])
    assert match, rule
    return list(ast.literal_eval(match.group(1))), rule["message"]


def test_the_test_rayclusters_against_the_pinned_crd(all_on: Inventory) -> None:
    objects = rayclusters(all_on)
    valid, invalid = objects["verify-ray"], objects["verify-ray-invalid"]
    doc = crd_doc()
    (v1,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1"]
    crd = upstream._crd(crd_file().name, doc["spec"], v1)
    assert crd.storage  # the version the API server stores
    for obj in (valid, invalid):
        assert upstream.crd_errors(obj, crd) == [], obj["metadata"]["name"]
        (head,) = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
        assert head["image"] == PINS["kuberay"]["ray_image"]
        assert obj["spec"]["rayVersion"] == PINS["kuberay"]["ray_version"]
        assert "nvidia.com/gpu" not in head["resources"]["limits"]
    allowed, message = managed_by_rule()
    # What the verdict looks for is the CRD's own message.
    assert message == C.MANAGED_BY_MESSAGE
    # The valid one leaves managedBy unset (the operator manages it); the invalid one breaks only the rule.
    assert "managedBy" not in valid["spec"]
    assert invalid["spec"]["managedBy"] == C.INVALID_MANAGED_BY not in allowed
    assert {k: v for k, v in invalid["spec"].items() if k != "managedBy"} == valid["spec"]


def test_the_verify_role_names_the_template_and_the_settings() -> None:
    role = REPO / "roles" / "verify"
    variables = yaml.safe_load((role / "vars" / "main.yml").read_text(encoding="utf-8"))
    assert variables["__verify_templates"]["kuberay"] == "smoke/kuberay.yml.j2"
    tasks = (role / "tasks" / "cluster_controller.yml").read_text(encoding="utf-8")
    assert "__verify_templates.kuberay" in tasks
    for name in (
        "__verify_kuberay_rejected",
        "__verify_kuberay_service",
        "__verify_kuberay_deleted",
        "__verify_kuberay_recreated",
    ):
        assert f"register: {name}" in tasks
        assert f"'{name}': {name} | default(none)" in variables["__verify_checks"]
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults["verify_kuberay"] == "{{ kuberay_enabled | default(false) }}"
