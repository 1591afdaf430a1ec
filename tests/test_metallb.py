"""roles/metallb (issue 24 item 4): MetalLB v0.16.1 as an optional release with its address pools
from the inventory, announced by L2 or to BGP routers, and the refusals of pools and peers that
cannot work.

The chart is rendered by Helm's engine from $GPUBRING_UPSTREAM_DIR/charts/metallb-v0.16.1 (its CRDs
subchart, and the packed frr-k8s subchart in bgp mode) and every object validated: the chart's at
the pinned Kubernetes, gpubring's IPAddressPool, L2Advertisement, BGPPeer and BGPAdvertisement
against the pinned CRDs (tests/_render.validation_problems). The refusals go through load_inventory,
as `gpubring check` and `gpubring plan` do. No cluster runs here: that the custom resources wait for
MetalLB's webhook is shown by where they are applied (after the chart, each through a server-side dry
run the webhook must answer: failurePolicy Fail) and by the waits the plan names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import upstream
from _render import planned_releases, schema_version, validation_problems
from gpubring.inventory import Inventory, load_inventory
from gpubring.releases import Release
from helpers import REPO, inventory_problems
from test_chart_render import plan

FILE = "group_vars/all/metallb.yml"
L2 = """\
metallb_enabled: true
metallb_pools:
  - name: services
    addresses: [192.0.2.240/28, "192.0.2.230 - 192.0.2.235"]
  - name: v6
    addresses: ["2001:db8:5::/120"]
    auto_assign: false
"""
BGP = """\
metallb_enabled: true
metallb_mode: bgp
metallb_pools:
  - name: services
    addresses: [192.0.2.240/28]
metallb_bgp_peers:
  - name: tor-a
    address: 192.0.2.1
    asn: 64512
    my_asn: 64513
  - name: tor-b
    address: 192.0.2.2
    asn: 4200000000
    my_asn: 64513
    port: 1179
"""


def _release(root: Path) -> tuple[Inventory, Release]:
    inv = load_inventory(root)
    return inv, next(r for r in planned_releases(inv) if r.name == "metallb")


def _objects(inv: Inventory, release: Release) -> list[tuple[str, dict[str, Any]]]:
    chart = upstream.chart_dir("metallb", release.version)
    rendered = upstream.render_release(chart, release, inv.versions["kubernetes"]["version"])
    return [("gpubring", obj) for obj in release.objects()] + rendered


def _valid(inv: Inventory, objects: list[tuple[str, dict[str, Any]]]) -> None:
    label = lambda where, obj: f"{where} {obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"  # noqa: E731
    problems = validation_problems(objects, schema_version(inv), label)
    assert not problems, "\n".join(problems)


def test_all_on_announces_its_pools_by_l2_without_frr_k8s() -> None:
    upstream.upstream_dir()
    inv, releases = plan("all-on")
    release = next(r for r in releases if r.name == "metallb")
    assert release.pre_manifests == []
    kinds = [(m["kind"], m["metadata"]["name"]) for m in release.manifests]
    assert kinds == [
        ("IPAddressPool", "services"),
        ("IPAddressPool", "inference"),
        ("L2Advertisement", "gpubring"),
    ]
    pools = {m["metadata"]["name"]: m["spec"] for m in release.manifests if m["kind"] == "IPAddressPool"}
    assert pools["inference"] == {
        "addresses": ["192.0.2.200-192.0.2.219"],
        "autoAssign": False,
        "avoidBuggyIPs": False,
    }
    advert = release.manifests[-1]["spec"]
    assert advert == {"ipAddressPools": ["services", "inference"], "interfaces": ["bond0"]}
    objects = _objects(inv, release)
    _valid(inv, objects)
    rendered = [obj for where, obj in objects if where != "gpubring"]
    # The native speaker alone: no frr-k8s DaemonSet, no FRR container in the speaker.
    daemonsets = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "DaemonSet"}
    assert set(daemonsets) == {"metallb-speaker"}
    containers = [c["name"] for c in daemonsets["metallb-speaker"]["spec"]["template"]["spec"]["containers"]]
    assert not any("frr" in c for c in containers), containers
    # Every webhook refuses what it cannot check: a dry run passes only once the webhook answers.
    (hooks,) = [o for o in rendered if o["kind"] == "ValidatingWebhookConfiguration"]
    assert {w["failurePolicy"] for w in hooks["webhooks"]} == {"Fail"}
    served = {w["name"].split(".")[0] for w in hooks["webhooks"]}
    assert {"ipaddresspoolvalidationwebhook", "l2advertisementvalidationwebhook"} <= served, served


def test_bgp_peers_and_advertisement_validate_with_frr_k8s(make_inventory: Callable[..., Path]) -> None:
    upstream.upstream_dir()
    inv, release = _release(make_inventory({FILE: BGP}))
    kinds = [(m["apiVersion"], m["kind"], m["metadata"]["name"]) for m in release.manifests]
    assert kinds == [
        ("metallb.io/v1beta1", "IPAddressPool", "services"),
        ("metallb.io/v1beta2", "BGPPeer", "tor-a"),
        ("metallb.io/v1beta2", "BGPPeer", "tor-b"),
        ("metallb.io/v1beta1", "BGPAdvertisement", "gpubring"),
    ]
    peers = {m["metadata"]["name"]: m["spec"] for m in release.manifests if m["kind"] == "BGPPeer"}
    assert peers["tor-b"] == {
        "myASN": 64513,
        "peerASN": 4200000000,
        "peerAddress": "192.0.2.2",
        "peerPort": 1179,
    }
    assert peers["tor-a"]["peerPort"] == 179
    assert release.values["frrk8s"] == {"enabled": True}
    objects = _objects(inv, release)
    _valid(inv, objects)
    assert any(o["kind"] == "DaemonSet" and "frr-k8s" in o["metadata"]["name"] for _, o in objects)


def test_the_custom_resources_are_held_to_the_pinned_crds() -> None:
    """A field the pinned CRD lacks, and a peer port above its bound, are caught by the same check."""
    upstream.upstream_dir()
    pool = {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "p", "namespace": "metallb-system"},
        "spec": {"addresses": ["192.0.2.0/28"], "autoAsign": True},
    }
    assert any("autoAsign" in e for e in upstream.crd_errors(pool))
    peer = {
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "p", "namespace": "metallb-system"},
        "spec": {"myASN": 1, "peerASN": 2, "peerAddress": "192.0.2.1", "peerPort": 16385},
    }
    assert upstream.crd_errors(peer)


def test_the_plan_names_the_waits_and_the_webhook_errors_are_waited_out() -> None:
    """Helm --wait (the controller that serves the webhook), then each custom resource's dry run
    until the API server, through MetalLB's webhook, accepts it."""
    release = next(r for r in plan("all-on")[1] if r.name == "metallb")
    assert release.waits[0].startswith("Helm --wait")
    assert release.waits[1].startswith("the API server accepts, before each is applied")
    assert "IPAddressPool/services, IPAddressPool/inference, L2Advertisement/gpubring" in release.waits[1]
    defaults = yaml.safe_load((REPO / "roles" / "helm" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    transient = [t.lower() for t in defaults["helm_wait_transient"]]
    for answer in ("failed calling webhook", "no endpoints available", "x509"):
        assert answer in transient


def test_good_pools_and_peers_pass(make_inventory: Callable[..., Path]) -> None:
    load_inventory(make_inventory({FILE: L2}))
    load_inventory(make_inventory({FILE: BGP}))


def _problems(make_inventory: Callable[..., Path], text: str) -> list[str]:
    return inventory_problems(make_inventory({FILE: text}))


POOLS = "metallb_pools[0]"


@pytest.mark.parametrize(
    "case",
    [
        (
            L2,
            "192.0.2.240/28,",
            "192.0.2.300/28,",
            f"{POOLS}.addresses[0]",
            "expected a CIDR (192.0.2.0/28) or a range",
        ),
        (
            L2,
            "192.0.2.230 - 192.0.2.235",
            "192.0.2.235-192.0.2.230",
            f"{POOLS}.addresses[1]",
            "expected the range's first address at or before its last; 192.0.2.235 comes after 192.0.2.230",
        ),
        (
            L2,
            "192.0.2.230 - 192.0.2.235",
            "192.0.2.230-2001:db8::1",
            f"{POOLS}.addresses[1]",
            "expected a range within one address family",
        ),
        (
            L2,
            "192.0.2.230 - 192.0.2.235",
            "192.0.2.230-192.0.2.x",
            f"{POOLS}.addresses[1]",
            "expected a range of two IP addresses",
        ),
        (
            L2,
            "192.0.2.230 - 192.0.2.235",
            "192.0.2.250-192.0.2.251",
            f"{POOLS}.addresses[1]",
            "192.0.2.250-192.0.2.251 overlaps 192.0.2.240/28 (metallb_pools[0].addresses[0])",
        ),
        (
            L2,
            '["2001:db8:5::/120"]',
            '["2001:db8:5::/120", 192.0.2.224/27]',
            "metallb_pools[1].addresses[1]",
            "192.0.2.224/27 overlaps 192.0.2.240/28 (metallb_pools[0].addresses[0]): MetalLB refuses",
        ),
        (
            L2,
            "name: v6",
            "name: services",
            "metallb_pools[1].name",
            "expected a name no other pool has; 'services' is also metallb_pools[0]",
        ),
        (
            L2,
            "192.0.2.240/28,",
            "10.244.3.0/24,",
            f"{POOLS}.addresses[0]",
            "overlaps the pod network gpubring_pod_cidr 10.244.0.0/16",
        ),
        (
            L2,
            "192.0.2.240/28,",
            "10.96.0.0/24,",
            f"{POOLS}.addresses[0]",
            "overlaps the service network gpubring_service_cidr 10.96.0.0/12",
        ),
        (
            L2,
            "192.0.2.240/28,",
            "192.0.2.10-192.0.2.20,",
            f"{POOLS}.addresses[0]",
            "overlaps the node address of cp-1 (192.0.2.11)",
        ),
        (
            L2,
            '["2001:db8:5::/120"]',
            "[]",
            "metallb_pools[1].addresses",
            "expected at least one CIDR or range",
        ),
        (
            BGP,
            "metallb_mode: bgp\n",
            "",
            "metallb_bgp_peers",
            "expected no BGP peers with metallb_mode l2: they would be ignored",
        ),
        (
            BGP,
            "    asn: 64512\n",
            "    asn: 0\n",
            "metallb_bgp_peers[0].asn",
            "expected an AS number from 1 to 4294967295; got 0",
        ),
        (
            BGP,
            "    asn: 64512\n",
            "    asn: 4294967296\n",
            "metallb_bgp_peers[0].asn",
            "expected an AS number from 1 to 4294967295; got 4294967296",
        ),
        (
            BGP,
            "    port: 1179\n",
            "    port: 20000\n",
            "metallb_bgp_peers[1].port",
            "expected a port from 1 to 16384 (MetalLB's BGPPeer peerPort bounds); got 20000",
        ),
        (
            BGP,
            "  - name: tor-b\n",
            "  - name: tor-a\n",
            "metallb_bgp_peers[1].name",
            "expected a name no other peer has; 'tor-a' is also metallb_bgp_peers[0]",
        ),
        (
            BGP,
            "address: 192.0.2.1\n",
            "address: tor-a.example\n",
            "metallb_bgp_peers[0].address",
            "IP address",
        ),
        (BGP, "    my_asn: 64513\n    port", "    port", "metallb_bgp_peers[1]", "my_asn"),
    ],
)
def test_a_bad_pool_or_peer_is_refused_with_file_and_key(
    make_inventory: Callable[..., Path], case: tuple[str, str, str, str, str]
) -> None:
    """(inventory text, what to replace, by what, the key refused, words of the refusal)"""
    base, old, new, key, words = case
    assert old in base
    problems = _problems(make_inventory, base.replace(old, new, 1))
    assert any(p.startswith(f"{FILE}: {key}") and words in p for p in problems), problems


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("metallb_enabled: true\n", "expected at least one address pool in metallb_pools"),
        (
            "metallb_enabled: true\nmetallb_mode: bgp\n"
            "metallb_pools: [{name: a, addresses: [192.0.2.240/28]}]\n",
            "expected at least one router in metallb_bgp_peers with metallb_mode bgp",
        ),
    ],
)
def test_metallb_with_nothing_to_announce_or_no_router_is_refused(
    make_inventory: Callable[..., Path], text: str, words: str
) -> None:
    problems = _problems(make_inventory, text)
    assert len(problems) == 1 and problems[0].startswith(f"{FILE}: ") and words in problems[0], problems
