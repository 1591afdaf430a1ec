"""The DRA driver's chart moved and was renamed (NVIDIA/k8s-dra-driver-gpu `nvidia-dra-driver-gpu` up
to 25.x, kubernetes-sigs/dra-driver-nvidia-gpu `dra-driver-nvidia-gpu` from v0.4.0). gpubring upgrades
the existing release `nvidia-dra-driver-gpu` in place (roles/dra_driver/README.md): the new chart,
rendered with gpubring's values, must name its workloads, accounts and RBAC as the old chart at the
previous pin did, or Helm would create a second kubelet plugin DaemonSet and controller beside the old
ones (docs/upgrade.md at v0.4.1: nameOverride=nvidia-dra-driver-gpu). The old chart is used here only
for this upgrade check."""

from __future__ import annotations

import copy

import upstream
from _render import planned_releases
from gpubring.inventory import load_inventory
from helpers import REPO

ALL_ON = REPO / "tests" / "data" / "inventories" / "all-on"
PREVIOUS = "25.8.0"  # the DRA driver chart gpubring pinned before the move (nvidia-dra-driver-gpu)
# The objects upstream names as duplicated without the override: the kubelet plugin DaemonSet, the
# controller Deployment and their ServiceAccounts (two kubelet plugins of gpu.nvidia.com on a node while
# both exist). A renamed ClusterRoleBinding (0.4.1 renamed two) is replaced by Helm on the upgrade.
KINDS = {"DaemonSet", "Deployment", "ServiceAccount"}


def _names(chart: str, version: str, values: dict[str, object], kube: str) -> set[tuple[str, str]]:
    folder = upstream.chart_dir(chart, version)
    objects = upstream.render(
        folder,
        copy.deepcopy(values),
        name="nvidia-dra-driver-gpu",
        namespace="nvidia-dra-driver-gpu",
        kube_version=kube,
    )
    return {(o["kind"], o["metadata"]["name"]) for _, o in objects if o.get("kind") in KINDS}


def test_the_new_chart_keeps_the_old_releases_object_names() -> None:
    upstream.upstream_dir()
    inv = load_inventory(ALL_ON)
    release = next(r for r in planned_releases(inv) if r.name == "nvidia-dra-driver-gpu")
    kube = str(inv.versions["kubernetes"]["version"])
    assert release.chart.endswith("/dra-driver-nvidia-gpu")
    new = _names("dra-driver-nvidia-gpu", release.version, release.values, kube)
    old_values = {k: v for k, v in release.values.items() if k != "nameOverride"}
    old = _names("nvidia-dra-driver-gpu", PREVIOUS, old_values, kube)
    assert {n for n in new if n[0] in ("DaemonSet", "Deployment")}, new
    # Every workload and account of the old release is still there under its name (the new chart may
    # add objects of its own, which Helm creates).
    missing = sorted(old - new)
    assert not missing, f"the old release's objects the new chart would not upgrade but duplicate: {missing}"
