"""Cross-field checks of the cluster's networks, before any host is touched.

- The pod network (gpubring_pod_cidr) and the service network (gpubring_service_cidr) must not
  overlap: kube-proxy and the CNI would route one range two ways.
- Neither may hold a host's address (ansible_host): traffic to that node would go into the cluster
  network instead. A host reached by a DNS name (or without ansible_host) is not checked here: its
  address is only known when it resolves, and preflight looks at the host's real interfaces.

IPv4 and IPv6 networks are compared within one family; an IPv6-only cluster sets both CIDRs to IPv6
ranges and its hosts' addresses are checked the same way (inventories/prod/README.md).
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from gpubring.formats import networks_overlap
from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem

if TYPE_CHECKING:
    from gpubring.model import Inventory

CIDR_KEYS = ("gpubring_pod_cidr", "gpubring_service_cidr")


def _network(text: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        return None  # the format check reports it


@register_validator
def cluster_networks(inv: Inventory) -> list[Problem]:
    pod, service = (str(inv.settings.get(key, "")) for key in CIDR_KEYS)
    problems: list[Problem] = []
    if networks_overlap(pod, service):
        problems.append(
            Problem(
                *inv.setting_origin("gpubring_service_cidr"),
                f"expected a service network apart from the pod network {pod}; {service} overlaps it",
            )
        )
    for key in CIDR_KEYS:
        net = _network(inv.settings.get(key))
        if net is None:
            continue
        inside = []
        for host in inv.hosts.values():
            try:
                address = ipaddress.ip_address(host.address)
            except ValueError:
                continue
            if address.version == net.version and address in net:
                inside.append(f"{host.name} ({host.address})")
        if inside:
            problems.append(
                Problem(
                    *inv.setting_origin(key),
                    f"expected a network that holds no host's address; {net} holds {', '.join(inside)}",
                )
            )
    return problems
