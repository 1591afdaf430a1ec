"""`gpubring check` refuses RDMA secondary networks (network_operator_networks) whose addresses
cannot work: a gateway or an IP range outside the network's subnet, two networks with overlapping
subnets, a subnet overlapping the pod, service or node networks. Each refusal names the file and
the key; the good networks of the variant inventories pass (tests/test_chart_render.py renders them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import inventory_problems

FILE = "group_vars/all/rdma_networks.yml"
GOOD = (
    "network_operator_enabled: true\n"
    "network_operator_networks:\n"
    "  - name: rdma-roce\n"
    "    master: ens1f0np0\n"
    "    subnet: 192.168.100.0/24\n"
    "    gateway: 192.168.100.1\n"
    "    exclusions: [{start_ip: 192.168.100.2, end_ip: 192.168.100.9}]\n"
    "  - name: rdma-ib\n"
    "    type: ipoib\n"
    "    master: ibp26s0\n"
    "    subnet: 192.168.200.0/24\n"
)


def _problems(make_inventory: Callable[..., Path], text: str) -> list[str]:
    return inventory_problems(make_inventory({FILE: text}))


def test_good_networks_pass(make_inventory: Callable[..., Path]) -> None:
    assert _problems(make_inventory, GOOD) == []


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        (
            "gateway: 192.168.100.1",
            "gateway: 192.168.101.1",
            "network_operator_networks[0].gateway",
            "expected an address inside the subnet 192.168.100.0/24 of network 'rdma-roce'; "
            "192.168.101.1 is outside",
        ),
        (
            "end_ip: 192.168.100.9",
            "end_ip: 192.168.101.9",
            "network_operator_networks[0].exclusions[0].end_ip",
            "192.168.101.9 is outside it",
        ),
        (
            "start_ip: 192.168.100.2, end_ip: 192.168.100.9",
            "start_ip: 192.168.100.9, end_ip: 192.168.100.2",
            "network_operator_networks[0].exclusions[0]",
            "expected start_ip at or before end_ip; 192.168.100.9 comes after 192.168.100.2",
        ),
        (
            "subnet: 192.168.200.0/24",
            "subnet: 192.168.100.128/25",
            "network_operator_networks[1].subnet",
            "192.168.100.128/25 of 'rdma-ib' overlaps 192.168.100.0/24 of 'rdma-roce' "
            "(network_operator_networks[0])",
        ),
        (
            "subnet: 192.168.200.0/24",
            "subnet: 10.244.8.0/24",
            "network_operator_networks[1].subnet",
            "overlaps the pod network gpubring_pod_cidr 10.244.0.0/16",
        ),
        (
            "subnet: 192.168.200.0/24",
            "subnet: 10.96.0.0/24",
            "network_operator_networks[1].subnet",
            "overlaps the service network gpubring_service_cidr 10.96.0.0/12",
        ),
        (
            "subnet: 192.168.200.0/24",
            "subnet: 198.51.100.0/24",
            "network_operator_networks[1].subnet",
            "holds the node address of gpu-1 (198.51.100.21), gpu-2",
        ),
    ],
    ids=["gateway", "exclusion", "exclusion-order", "networks-overlap", "pod", "service", "node"],
)
def test_refusal(make_inventory: Callable[..., Path], old: str, new: str, key: str, words: str) -> None:
    assert GOOD.count(old) == 1
    problems = _problems(make_inventory, GOOD.replace(old, new))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{FILE}: {key}: expected"), problems
    assert words in problems[0], problems


def test_cni_ipam_range_outside_subnet(make_inventory: Callable[..., Path]) -> None:
    """Without nv-ipam the network's own CNI IPAM ranges (host-local, whereabouts) are held to the subnet."""
    own = (
        "network_operator_enabled: true\n"
        "network_operator_ipam: none\n"
        "network_operator_networks:\n"
        "  - name: rdma-roce\n"
        "    master: ens1f0np0\n"
        "    subnet: 192.168.100.0/24\n"
        "    ipam:\n"
        "      type: host-local\n"
        "      ranges: [[{subnet: 192.168.100.0/24, rangeStart: 192.168.100.10, rangeEnd: RANGE_END}]]\n"
    )
    assert _problems(make_inventory, own.replace("RANGE_END", "192.168.100.200")) == []
    [problem] = _problems(make_inventory, own.replace("RANGE_END", "192.168.110.200"))
    assert problem == (
        f"{FILE}: network_operator_networks[0].ipam.ranges[0][0].rangeEnd: expected an address inside the "
        "subnet 192.168.100.0/24 of network 'rdma-roce'; 192.168.110.200 is outside it"
    )


def test_templated_and_ipv6_are_left_alone(make_inventory: Callable[..., Path]) -> None:
    """A template is Ansible's to evaluate; an IPv6 network is not compared with the IPv4 cluster networks."""
    text = (
        "network_operator_networks:\n"
        "  - {name: a, master: ib0, subnet: '{{ my_subnet }}', gateway: 10.0.0.1}\n"
        "  - {name: b, master: ib1, subnet: 'fd00:10::/64', gateway: 'fd00:10::1'}\n"
    )
    assert _problems(make_inventory, text) == []
