"""Every platform release rendered through its real chart at the pinned version, and every object
validated as the API server would.

For the sample inventory and every variant under tests/data/inventories (all-on turns every release
on), each release gpubring plans is rendered by Helm's own engine (helm-python-sdk) from
$GPUBRING_UPSTREAM_DIR/charts/<chart>-<version>, at the pinned Kubernetes version and with the API
versions the cluster will serve (every CRD the plan's charts bring, monitoring.coreos.com/v1 once
kube-prometheus-stack is in). Then:

- core kinds validate with kubernetes-validate at the pinned Kubernetes version (strict: unknown
  fields are errors);
- custom resources, the charts' and the ones gpubring applies itself, validate against the CRDs of
  the pinned releases (tests/upstream.py: unknown fields are errors, nullable handled);
- every values key gpubring sets exists in the pinned chart's values (free-form maps excepted).

A pinned chart with no folder is a skip that names it; no GPUBRING_UPSTREAM_DIR is a skip that names
the variable.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

import upstream
from _render import planned_releases, schema_version, validation_problems
from gpubring.catalog import declared_releases
from gpubring.inventory import Inventory, load_inventory
from gpubring.releases import Release
from helpers import DATA, REPO

TEST_INVENTORIES = DATA / "inventories"
INVENTORIES = {
    "prod": REPO / "inventories" / "prod",
    "mig-timeslicing": TEST_INVENTORIES / "mig-timeslicing",
    "dra-kueue-rdma": TEST_INVENTORIES / "dra-kueue-rdma",
    "all-on": TEST_INVENTORIES / "all-on",
}
# Every release of the platform phase, as the roles declare them (the CNI's: test_release_crds.py).
EVERY_RELEASE = {r.name for r in declared_releases() if r.phase == "platform"}


@cache
def plan(name: str) -> tuple[Inventory, tuple[Release, ...]]:
    inv = load_inventory(INVENTORIES[name])
    return inv, tuple(planned_releases(inv))


CASES = [(name, release.name) for name in sorted(INVENTORIES) for release in plan(name)[1]]


def chart_of(release: Release, *, to_render: bool = True) -> Path | None:
    """The pinned chart folder of a release; None for a release of gpubring's own objects only."""
    if not release.chart:
        return None
    return upstream.chart_dir(release.chart.rsplit("/", 1)[-1], release.version, to_render=to_render)


def api_versions(releases: tuple[Release, ...]) -> tuple[str, ...]:
    """What the cluster will serve besides the core APIs: the CRDs of the plan's charts."""
    folders = {
        upstream.folder_name(release.chart.rsplit("/", 1)[-1], release.version)
        for release in releases
        if release.chart
    }
    served = {
        f"{crd.group}/{crd.version}"
        for crd in upstream.crds().values()
        if crd.file.split("/", 1)[0].removesuffix("-nv-ipam-crds") in folders
    }
    if "kube-prometheus-stack" in {r.name for r in releases}:
        served.add("monitoring.coreos.com/v1")
    return tuple(sorted(served))


def rendered(name: str, release: Release) -> list[tuple[str, dict[str, Any]]]:
    """(where, object) for every object a run applies for the release: gpubring's own, then the
    chart's as Helm renders it."""
    inv, releases = plan(name)
    out = [("gpubring", obj) for obj in release.objects()]
    chart = chart_of(release)
    if chart is None:
        return out
    objects = upstream.render(
        chart,
        copy.deepcopy(release.values),
        name=release.name,
        namespace=release.namespace,
        kube_version=str(inv.versions["kubernetes"]["version"]),
        api_versions=api_versions(releases),
    )
    assert objects, f"{name} {release.name}: the chart rendered nothing"
    return out + objects


def _release(name: str, release_name: str) -> Release:
    return next(r for r in plan(name)[1] if r.name == release_name)


def _label(name: str, release: Release, where: str, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{name} {release.name} ({where}) {obj.get('kind')}/{meta.get('name')}"


def test_the_all_on_variant_plans_every_release() -> None:
    assert {r.name for r in plan("all-on")[1]} == EVERY_RELEASE


@pytest.mark.parametrize(("name", "release_name"), CASES)
def test_every_object_validates_at_the_pinned_versions(name: str, release_name: str) -> None:
    upstream.upstream_dir()
    inv, _ = plan(name)
    release = _release(name, release_name)
    schema = schema_version(inv)
    problems = validation_problems(
        rendered(name, release), schema, lambda where, obj: _label(name, release, where, obj)
    )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("name", "release_name"), CASES)
def test_every_values_key_exists_in_the_pinned_chart(name: str, release_name: str) -> None:
    upstream.upstream_dir()
    release = _release(name, release_name)
    chart = chart_of(release, to_render=False)
    if chart is None:
        assert not release.values, f"{release.name} has values but no chart"
        return
    values = upstream.chart_values(chart.name.removesuffix(f"-{release.version}"), release.version)
    unknown = list(upstream.unknown_value_paths(release.values, values))
    assert not unknown, f"{name} {release.name}: keys the pinned chart does not have: {unknown}"


@pytest.mark.parametrize("name", sorted(INVENTORIES))
def test_gpubrings_custom_resources_are_in_their_crds_storage_version(name: str) -> None:
    """A custom resource gpubring writes uses the version its pinned CRD stores, not an older one still
    served (Kueue 0.19 stores v1beta2, where the ClusterQueue's cohort is `cohortName`; v1beta1 goes
    away in a later release)."""
    upstream.upstream_dir()
    crds = upstream.crds()
    old = []
    for release in plan(name)[1]:
        for obj in (*release.pre_manifests, *release.manifests):
            crd = crds.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
            if crd is not None and not crd.storage:
                stored = next(
                    c for c in crds.values() if (c.group, c.kind, c.storage) == (crd.group, crd.kind, True)
                )
                old.append(f"{release.name} {crd.kind}: {obj['apiVersion']}, the CRD stores {stored.version}")
    assert not old, "\n".join(old)


def test_every_chart_is_declared_by_its_own_name() -> None:
    """The chart a release names is the pinned chart's own name (Chart.yaml `name`): Helm pulls it by
    that name, and a rename upstream (NVIDIA's DRA driver: dra-driver-nvidia-gpu from v0.4.0) must
    reach the declaration."""
    upstream.upstream_dir()
    wrong = []
    for release in declared_releases():
        if not release.chart:
            continue
        folder = upstream.chart_dir(release.chart_name, release.version, to_render=False)
        meta = yaml.safe_load((folder / "Chart.yaml").read_text(encoding="utf-8"))
        if meta["name"] != release.chart_name:
            wrong.append(
                f"{release.name}: declares chart {release.chart!r}, the pinned chart is {meta['name']!r}"
            )
    assert not wrong, "\n".join(wrong)


def test_gpu_operand_tolerations_are_the_charts_own_and_the_acceptance_taint() -> None:
    """The GPU Operator's operand and NFD worker tolerations that gpubring sets replace the chart's
    lists: they are the pinned chart's defaults, in order, then the acceptance taint (none dropped, none
    the chart dropped kept: v26.7.0 no longer tolerates node-role.kubernetes.io/master)."""
    upstream.upstream_dir()
    gpu = next(r for r in plan("prod")[1] if r.name == "gpu-operator")
    chart = upstream.chart_values("gpu-operator", gpu.version)
    acceptance = {"key": "gpubring.io/acceptance", "operator": "Exists", "effect": "NoSchedule"}
    for path in (("daemonsets", "tolerations"), ("node-feature-discovery", "worker", "tolerations")):
        ours: Any = gpu.values
        theirs: Any = chart
        for key in path:
            ours, theirs = ours[key], theirs[key]
        assert ours == [*theirs, acceptance], ".".join(path)


def test_a_values_typo_and_a_custom_resource_typo_are_caught() -> None:
    """The two checks above fail on the mistakes they exist for."""
    upstream.upstream_dir()
    gpu = _release("dra-kueue-rdma", "gpu-operator")
    typo = copy.deepcopy(gpu.values)
    typo.setdefault("devicePlugin", {})["enbled"] = True
    values = upstream.chart_values("gpu-operator", gpu.version)
    assert list(upstream.unknown_value_paths(typo, values)) == ["devicePlugin.enbled"]
    network = _release("dra-kueue-rdma", "network-operator")
    policy = next(
        obj for _, obj in rendered("dra-kueue-rdma", network) if obj.get("kind") == "NicClusterPolicy"
    )
    broken = copy.deepcopy(policy)
    broken["spec"]["rdmaSharedDevicePlugn"] = broken["spec"].pop("rdmaSharedDevicePlugin", {})
    assert any("rdmaSharedDevicePlugn" in e for e in upstream.crd_errors(broken))


def test_a_pinned_chart_without_a_folder_is_a_skip_that_names_it() -> None:
    upstream.upstream_dir()
    with pytest.raises(pytest.skip.Exception, match=r"charts/gpu-operator-v0\.0\.1"):
        upstream.chart_dir("gpu-operator", "v0.0.1")
