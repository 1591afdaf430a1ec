"""Cross-field checks of the RDMA secondary networks (network_operator_networks), before any host is
touched.

The network_operator role runs on the first control plane, so that host's values are the ones
checked (as for dra_driver). Each network's addresses come from its own subnet; refused:

- a `gateway` outside the network's `subnet` (nv-ipam's IPPool would hand pods a route they cannot
  reach: its gateway is one address of the pool's subnet);
- an IP range outside the subnet: an nv-ipam exclusion (`exclusions[].start_ip/end_ip`, the
  IPPool's spec.exclusions[].startIP/endIP of nv-ipam.nvidia.com_ippools.yaml in the pinned
  network-operator 26.4.1 chart's nv-ipam CRDs), or, with `network_operator_ipam: none`, the
  bounds of the network's own CNI IPAM (host-local's rangeStart/rangeEnd at the top or in
  `ranges[][]`, whereabouts' range_start/range_end), and an exclusion whose start is after its end;
- two networks whose subnets overlap (two pools handing out the same addresses);
- a subnet that overlaps the pod network (gpubring_pod_cidr), the service network
  (gpubring_service_cidr) or holds a node's address (ansible_host): pod traffic to those would
  leave through the RDMA interface.

A value the format check already refuses (a subnet that is no CIDR, a gateway that is no address) or
that Ansible evaluates (a template) is skipped here. IPv4 and IPv6 compare within one family.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gpubring.validation import specs
from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem

if TYPE_CHECKING:
    from gpubring.model import Inventory

KEY = "network_operator_networks"
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _net(text: object) -> Net | None:
    if not isinstance(text, str) or specs.templated(text):
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None  # the format check (cidr) reports it


def _addr(text: object) -> Address | None:
    if not isinstance(text, str) or specs.templated(text):
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _inside(address: Address, net: Net) -> bool:
    return address.version == net.version and address in net


def _ipam_bounds(ipam: object) -> Iterator[tuple[str, object]]:
    """(key path under ipam, value) of the range bounds of a CNI IPAM configuration."""
    if not isinstance(ipam, Mapping):
        return
    for key in ("rangeStart", "rangeEnd", "range_start", "range_end"):
        if key in ipam:
            yield key, ipam[key]
    ranges = ipam.get("ranges")
    if isinstance(ranges, list):
        for i, rangeset in enumerate(ranges):
            for j, item in enumerate(rangeset if isinstance(rangeset, list) else []):
                if isinstance(item, Mapping):
                    for key in ("rangeStart", "rangeEnd"):
                        if key in item:
                            yield f"ranges[{i}][{j}].{key}", item[key]


@register_validator
def rdma_networks(inv: Inventory) -> list[Problem]:
    """Gateways and ranges inside their subnet; subnets apart from each other and the cluster's networks."""
    first = next(iter(inv.groups.get("control_plane", ())), None)
    if first is None or first not in inv.hosts:
        return []
    networks: Any = inv.hosts[first].vars.get(KEY)
    if not isinstance(networks, list):
        return []  # unset, a template, or a wrong type (the argument spec check's)
    file, key = inv.origin(first, KEY) or (inv.hosts_file.name, KEY)
    pod = _net(inv.settings.get("gpubring_pod_cidr"))
    service = _net(inv.settings.get("gpubring_service_cidr"))
    problems: list[Problem] = []
    seen: list[tuple[int, str, Net]] = []
    for i, item in enumerate(networks):
        if not isinstance(item, Mapping):
            continue
        name = str(item.get("name", f"#{i}"))
        subnet = _net(item.get("subnet"))
        if subnet is None:
            continue
        here = f"{key}[{i}]"
        gateway = _addr(item.get("gateway"))
        if gateway is not None and not _inside(gateway, subnet):
            problems.append(
                Problem(
                    file,
                    f"{here}.gateway",
                    f"expected an address inside the subnet {subnet} of network "
                    f"{name!r}; {gateway} is outside it",
                )
            )
        exclusions = item.get("exclusions")
        for j, span in enumerate(exclusions if isinstance(exclusions, list) else []):
            if not isinstance(span, Mapping):
                continue
            bounds = [(f"exclusions[{j}].{k}", _addr(span.get(k))) for k in ("start_ip", "end_ip")]
            for k, (path, address) in zip(("start_ip", "end_ip"), bounds, strict=True):
                if address is None and not specs.templated(span.get(k)):
                    problems.append(
                        Problem(file, f"{here}.{path}", f"expected an IP address; got {span.get(k)!r}")
                    )
            for path, address in bounds:
                if address is not None and not _inside(address, subnet):
                    problems.append(
                        Problem(
                            file,
                            f"{here}.{path}",
                            f"expected an address inside the subnet {subnet} of "
                            f"network {name!r}; {address} is outside it",
                        )
                    )
            start, end = bounds[0][1], bounds[1][1]
            if (
                start is not None
                and end is not None
                and start.version == end.version
                and int(start) > int(end)
            ):
                problems.append(
                    Problem(
                        file,
                        f"{here}.exclusions[{j}]",
                        f"expected start_ip at or before end_ip; {start} comes after {end}",
                    )
                )
        if inv.hosts[first].vars.get("network_operator_ipam") == "none":
            for path, value in _ipam_bounds(item.get("ipam")):
                address = _addr(value)
                if address is not None and not _inside(address, subnet):
                    problems.append(
                        Problem(
                            file,
                            f"{here}.ipam.{path}",
                            f"expected an address inside the subnet {subnet} "
                            f"of network {name!r}; {address} is outside it",
                        )
                    )
        for j, other_name, other in seen:
            if other.version == subnet.version and other.overlaps(subnet):
                problems.append(
                    Problem(
                        file,
                        f"{here}.subnet",
                        f"expected a subnet apart from every other RDMA network's; "
                        f"{subnet} of {name!r} overlaps {other} of {other_name!r} ({key}[{j}])",
                    )
                )
        seen.append((i, name, subnet))
        for label, cluster in (
            ("pod network gpubring_pod_cidr", pod),
            ("service network gpubring_service_cidr", service),
        ):
            if cluster is not None and cluster.version == subnet.version and cluster.overlaps(subnet):
                problems.append(
                    Problem(
                        file,
                        f"{here}.subnet",
                        f"expected a subnet apart from the cluster's networks; "
                        f"{subnet} of {name!r} overlaps the {label} {cluster}",
                    )
                )
        nodes = [
            f"{h.name} ({h.address})"
            for h in inv.hosts.values()
            if (a := _addr(h.address)) is not None and _inside(a, subnet)
        ]
        if nodes:
            problems.append(
                Problem(
                    file,
                    f"{here}.subnet",
                    f"expected a subnet apart from the node network; {subnet} of "
                    f"{name!r} holds the node address of {', '.join(nodes)}",
                )
            )
    return problems
