"""The CNI releases (Calico's tigera-operator, Cilium) rendered through their real charts at the pinned
versions ($GPUBRING_UPSTREAM_DIR/charts), as tests/test_chart_render.py does for the platform phase:
every values key gpubring sets exists in the pinned chart, every object the chart renders validates
(core kinds with kubernetes-validate at the pinned Kubernetes, strict; custom resources against the
pinned CRDs, Calico's from the crd.projectcalico.org.v1 chart), and gpubring's own Installation
against the operator.tigera.io CRD of the pinned tag."""

from __future__ import annotations

import copy

import pytest

import upstream
from _render import schema_version, validation_problems
from gpubring.inventory import load_inventory
from gpubring.releases import Release, host_variables, role_releases
from helpers import REPO

PROD = REPO / "inventories" / "prod"


def _release(choice: str) -> Release:
    inv = load_inventory(PROD)
    variables = host_variables(inv, roles=("cni",), host_vars={"gpubring_cni": choice})
    return next(r for r in role_releases("cni", variables) if r.name == choice)


@pytest.mark.parametrize("choice", ["calico", "cilium"])
def test_cni_values_keys_exist_in_the_pinned_chart(choice: str) -> None:
    upstream.upstream_dir()
    release = _release(choice)
    values = upstream.chart_values(release.name)
    unknown = list(upstream.unknown_value_paths(release.values, values))
    assert not unknown, f"{release.name}: keys the pinned chart does not have: {unknown}"


@pytest.mark.parametrize("choice", ["calico", "cilium"])
def test_cni_objects_validate_at_the_pinned_versions(choice: str) -> None:
    upstream.upstream_dir()
    inv = load_inventory(PROD)
    release = _release(choice)
    chart = upstream.chart_dir(release.chart.rsplit("/", 1)[-1], release.version)
    crds = upstream.crds()
    served = tuple(sorted({f"{c.group}/{c.version}" for c in crds.values()}))
    objects = [("gpubring", o) for o in release.objects()] + upstream.render(
        chart,
        copy.deepcopy(release.values),
        name=release.name,
        namespace=release.namespace,
        kube_version=str(inv.versions["kubernetes"]["version"]),
        api_versions=served,
    )
    schema = schema_version(inv)
    problems = validation_problems(
        objects,
        schema,
        lambda where, obj: (
            f"{release.name} ({where}) {obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
        ),
    )
    assert not problems, "\n".join(problems)
    if choice == "calico":
        # The operator's chart renders no CRD (they come first, from their own chart), and
        # gpubring's Installation is checked against the pinned operator.tigera.io CRD.
        assert not [o for _, o in objects if o.get("kind") == "CustomResourceDefinition"]
        assert ("operator.tigera.io/v1", "Installation") in crds
