"""Kubernetes 1.36 where the pinned components support it (issue 22, item 2): an inventory may pin 1.36
when everything it enables supports it; one that also enables a component whose pinned release stops
at 1.35 (Network Operator 26.4, Volcano 1.15, Cilium 1.19, a distribution's containerd 1.7) is refused
before any host is touched, naming that component and its range."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpubring import versions
from gpubring.inventory import InventoryError, load_inventory

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py

PINNED = versions.load_pinned()
K136 = "1.36.1"


def _inventory(make_inventory: MakeInventory, sample: Path, kubernetes: str, **settings: str) -> Path:
    """The sample inventory (containerd.io from Docker's repository, Calico, the GPU Operator) pinning
    `kubernetes`, with `settings` in group_vars/all/zz_extra.yml (read last, so it wins over the
    sample's own files) and gpubring_cni in cluster.yml."""
    files: dict[str, str | None] = {
        "group_vars/all/versions.yml": f"gpubring_versions:\n  kubernetes: {{version: '{kubernetes}'}}\n"
    }
    cni = settings.pop("gpubring_cni", None)
    if cni:
        cluster = (sample / "group_vars/all/cluster.yml").read_text()
        assert "gpubring_cni: calico" in cluster
        files["group_vars/all/cluster.yml"] = cluster.replace("gpubring_cni: calico", f"gpubring_cni: {cni}")
    # The sample's components whose pinned ranges end at 1.35 are off unless a test turns them on.
    settings = {"network_operator_enabled": "false", "schedulers_volcano_enabled": "false", **settings}
    files["group_vars/all/zz_extra.yml"] = "".join(f"{k}: {v}\n" for k, v in settings.items())
    return make_inventory(files)


def _refusals(root: Path) -> list[str]:
    with pytest.raises(InventoryError) as info:
        load_inventory(root)
    return [str(p) for p in info.value.problems]


# What 1.36 allows ---------------------------------------------------------------------------------------


def test_the_sample_pinning_1_36_passes(make_inventory: MakeInventory, sample_inventory: Path) -> None:
    inv = load_inventory(_inventory(make_inventory, sample_inventory, K136))
    verdicts = {r.id: r.verdict for r in inv.rule_results}
    assert verdicts["gpu-operator-kubernetes-range"] == "pass"
    assert verdicts["calico-kubernetes-range"] == "pass"
    assert "fail" not in verdicts.values()


def test_1_36_with_every_component_that_supports_it(
    make_inventory: MakeInventory, sample_inventory: Path
) -> None:
    """GPU Operator, Calico, KAI, Kueue, the DRA driver and monitoring all list 1.36."""
    root = _inventory(
        make_inventory,
        sample_inventory,
        K136,
        schedulers_kai_enabled="true",
        schedulers_kueue_enabled="true",
        dra_driver_enabled="true",
        dra_driver_compute_domains="true",
        monitoring_enabled="true",
    )
    verdicts = {r.id: r.verdict for r in load_inventory(root).rule_results}
    for rule in (
        "gpu-operator-kubernetes-range",
        "calico-kubernetes-range",
        "kai-scheduler-kubernetes-range",
        "kueue-kubernetes-range",
        "dra-driver-kubernetes-range",
        "dra-needs-kubernetes-1.34",
    ):
        assert verdicts[rule] == "pass", rule
    assert "fail" not in verdicts.values()


# What 1.36 refuses ---------------------------------------------------------------------------------------


_STOP_AT_1_35: list[tuple[dict[str, str], str, str, tuple[str, str]]] = [
    (
        {"network_operator_enabled": "true"},
        "network-operator-kubernetes-range",
        "Network Operator",
        ("network_operator.kubernetes_min", "network_operator.kubernetes_max"),
    ),
    (
        {"schedulers_volcano_enabled": "true"},
        "volcano-kubernetes-range",
        "Volcano",
        ("volcano.kubernetes_min", "volcano.kubernetes_max"),
    ),
    (
        {"gpubring_cni": "cilium"},
        "cilium-kubernetes-range",
        "Cilium",
        ("cni.cilium_kubernetes_min", "cni.cilium_kubernetes_max"),
    ),
]


@pytest.mark.parametrize("case", _STOP_AT_1_35, ids=["network-operator", "volcano", "cilium"])
def test_1_36_with_a_component_that_stops_at_1_35_is_refused_naming_it(
    make_inventory: MakeInventory,
    sample_inventory: Path,
    case: tuple[dict[str, str], str, str, tuple[str, str]],
) -> None:
    settings, rule, component, pins = case
    low, high = (str(versions.get_path(PINNED, p)) for p in pins)
    assert high == "1.35", f"{pins[1]} moved: this test is about a release that stops at 1.35"
    message = next(r.message for r in versions.load_rules() if r.id == rule)
    assert f"the pinned {component} release" in message
    assert _refusals(_inventory(make_inventory, sample_inventory, K136, **settings)) == [
        f"group_vars/all/versions.yml: gpubring_versions.kubernetes.version: expected kubernetes.version "
        f"<= {high} ({pins[1]}, of the range {low} to {high}), got {K136} (rule {rule}: {message})"
    ]
    # The same inventory at the pinned Kubernetes (1.35) passes.
    root = _inventory(make_inventory, sample_inventory, str(PINNED["kubernetes"]["version"]), **settings)
    verdicts = {r.id: r.verdict for r in load_inventory(root).rule_results}
    assert verdicts[rule] == "pass"


def test_1_36_with_several_refusals_names_each(make_inventory: MakeInventory, sample_inventory: Path) -> None:
    root = _inventory(
        make_inventory,
        sample_inventory,
        K136,
        network_operator_enabled="true",
        schedulers_volcano_enabled="true",
    )
    refusals = _refusals(root)
    assert len(refusals) == 2
    assert any("rule network-operator-kubernetes-range" in r for r in refusals)
    assert any("rule volcano-kubernetes-range" in r for r in refusals)


# A distribution's containerd ---------------------------------------------------------------------------


def test_a_distribution_containerd_cannot_go_past_1_35(
    make_inventory: MakeInventory, sample_inventory: Path
) -> None:
    """containerd RELEASES.md at v2.3.4 lists no 1.7 for Kubernetes 1.36; the distributions' containerd
    is 1.7 at most. The sample installs containerd.io (containerd_source: docker), so 1.36 passes
    there; the distribution's package does not."""
    high = str(PINNED["containerd"]["distribution_kubernetes_max"])
    assert high == "1.35"
    root = _inventory(make_inventory, sample_inventory, K136, containerd_source="distribution")
    assert _refusals(root) == [
        "group_vars/all/versions.yml: gpubring_versions.kubernetes.version: expected kubernetes.version "
        f"<= {high} (containerd.distribution_kubernetes_max), got {K136} (rule "
        "containerd-distribution-kubernetes: a distribution's containerd (1.7 at most) is not recommended "
        "past its Kubernetes range)"
    ]
    # containerd.io at the pin (2.3.4: RELEASES.md's 1.36 row lists 2.3.0+) takes 1.36.
    root = _inventory(make_inventory, sample_inventory, K136, containerd_source="docker")
    assert "fail" not in {r.verdict for r in load_inventory(root).rule_results}


def test_a_distribution_containerd_at_the_pinned_kubernetes_passes(
    make_inventory: MakeInventory, sample_inventory: Path
) -> None:
    """The role's default source (distribution) with the pinned 1.35."""
    root = _inventory(
        make_inventory,
        sample_inventory,
        str(PINNED["kubernetes"]["version"]),
        containerd_source="distribution",
    )
    verdicts = {r.id: r.verdict for r in load_inventory(root).rule_results}
    assert verdicts["containerd-distribution-kubernetes"] == "pass"


def test_a_distribution_containerd_on_one_host_is_enough_to_refuse(
    make_inventory: MakeInventory, sample_inventory: Path
) -> None:
    """A host_vars override back to the distribution's package on one node."""
    root = _inventory(make_inventory, sample_inventory, str(PINNED["kubernetes"]["version"]))
    host = sorted(load_inventory(root).hosts)[-1]
    root = _inventory(make_inventory, sample_inventory, K136)
    (root / "host_vars").mkdir(exist_ok=True)
    (root / "host_vars" / f"{host}.yml").write_text("containerd_source: distribution\n")
    refusals = _refusals(root)
    assert len(refusals) == 1
    assert "rule containerd-distribution-kubernetes" in refusals[0]
