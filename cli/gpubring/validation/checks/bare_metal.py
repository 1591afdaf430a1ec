"""Cross-field checks of what a bare-metal cluster lacks: a StorageClass and a load balancer
(roles/storage, roles/metallb), before any host is touched.

Both roles run on the first control plane, so that host's values are the ones checked (as for
dra_driver). Refused:

- Prometheus' volume claim (monitoring_enabled with monitoring_stack and monitoring_storage_size)
  when no default StorageClass will exist: storage off (or its class not the default) and
  gpubring_site_storage_class empty. The claim names no class (roles/monitoring values.yml.j2), so
  only a default class binds it; without one it stays Pending and Prometheus never starts.
- storage_node_path that is not an absolute path, or is `/` (local-path-provisioner's values.yaml at
  v0.0.37: "A path must start with /", "Root directory (/) is prohibited").
- With metallb_enabled: no pool; a pool without addresses or with a name another pool has; an
  address that is neither a CIDR nor a `first-last` range of one family with first <= last (MetalLB
  v0.16.1 internal/config/config.go ParseCIDR: a CIDR, or two addresses split at the first `-`,
  spaces trimmed, the start not after the end); two addresses that overlap, in one pool or two (MetalLB
  refuses overlapping pools: config.go, "overlaps with already defined CIDR"); an address that
  overlaps the pod network, the service network, or holds a node's address or the kube-vip address
  (a LoadBalancer address there would be routed or answered twice). bgp: no peer; a peer's name
  twice; an AS number outside 1..4294967295 (the BGPPeer CRD v1beta2 bounds myASN/peerASN to
  0..4294967295; AS 0 is reserved, RFC 7607); a port outside 1..16384 (the CRD's peerPort bounds).
  l2: peers given (they would be ignored).

A value the argument spec or the format check already refuses (a wrong type, an address that is no
IP) or that Ansible evaluates (a template) is skipped here. IPv4 and IPv6 compare within one family.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpubring.validation import specs
from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem

if TYPE_CHECKING:
    from gpubring.model import Host, Inventory

Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

STORAGE_KEYS = (
    "monitoring_enabled",
    "monitoring_stack",
    "monitoring_storage_size",
    "storage_enabled",
    "storage_default_class",
    "storage_node_path",
)
METALLB_KEYS = ("metallb_enabled", "metallb_mode", "metallb_pools", "metallb_bgp_peers")
ASN_MAX = 4294967295
PORT_MAX = 16384  # BGPPeer CRD v1beta2 spec.peerPort maximum (metallb chart v0.16.1)


def _first(inv: Inventory) -> Host | None:
    first = next(iter(inv.groups.get("control_plane", ())), None)
    return inv.hosts.get(first) if first is not None else None


def _values(host: Host, keys: tuple[str, ...]) -> dict[str, Any]:
    defaults = specs.load_specs().defaults()
    return {key: host.vars.get(key, defaults.get(key)) for key in keys}


def _where(inv: Inventory, host: Host, *keys: str) -> tuple[str, str]:
    for key in keys:
        found = inv.origin(host.name, key)
        if found is not None:
            return found
    return inv.hosts_file.name, keys[0]


@register_validator
def storage_for_claims(inv: Inventory) -> list[Problem]:
    """A volume claim of the monitoring role needs a default StorageClass from gpubring or the site."""
    host = _first(inv)
    if host is None:
        return []
    values = _values(host, STORAGE_KEYS)
    site_class = inv.settings.get("gpubring_site_storage_class", "")
    if any(specs.templated(v) for v in (*values.values(), site_class)):
        return []  # Ansible evaluates templates
    problems: list[Problem] = []
    storage_on = values["storage_enabled"] is True
    path = values["storage_node_path"]
    if storage_on and isinstance(path, str) and (not path.startswith("/") or path.rstrip("/") == ""):
        problems.append(
            Problem(
                *_where(inv, host, "storage_node_path"),
                f"expected an absolute path other than / for the volumes on each node; got {path!r} "
                "(local-path-provisioner refuses a relative path and the root directory)",
            )
        )
    size = values["monitoring_storage_size"]
    wants_claim = values["monitoring_enabled"] is True and values["monitoring_stack"] is True and size
    default_class = storage_on and values["storage_default_class"] is True
    if wants_claim and not default_class and not site_class:
        why = (
            "storage_enabled is on but storage_default_class is off, so its class is not the default"
            if storage_on
            else "storage_enabled is off"
        )
        problems.append(
            Problem(
                *_where(inv, host, "monitoring_storage_size"),
                f"expected a default StorageClass for Prometheus' volume claim (monitoring_storage_size "
                f"{size}); none will exist: {why} and gpubring_site_storage_class is empty, so the claim "
                "would stay Pending and Prometheus never start. Set storage_enabled: true (a node-local "
                "default class from local-path-provisioner), or gpubring_site_storage_class to the name of "
                'the default StorageClass the site provides, or monitoring_storage_size: "" (an emptyDir: '
                "the samples are lost when the pod moves)",
            )
        )
    return problems


def _range(text: str) -> tuple[Address, Address] | str:
    """(first, last) of a MetalLB pool address (a CIDR or first-last), or what was expected."""
    if "-" not in text:
        try:
            net = ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            return f"expected a CIDR (192.0.2.0/28) or a range (192.0.2.10-192.0.2.20); got {text!r}"
        return net[0], net[-1]
    start_text, end_text = (part.strip() for part in text.split("-", 1))
    try:
        start, end = ipaddress.ip_address(start_text), ipaddress.ip_address(end_text)
    except ValueError:
        return f"expected a range of two IP addresses (192.0.2.10-192.0.2.20); got {text!r}"
    if start.version != end.version:
        return f"expected a range within one address family; got {text!r}"
    if int(start) > int(end):
        return f"expected the range's first address at or before its last; {start} comes after {end}"
    return start, end


def _overlap(a: tuple[Address, Address], b: tuple[Address, Address]) -> bool:
    return a[0].version == b[0].version and int(a[0]) <= int(b[1]) and int(b[0]) <= int(a[1])


def _span(text: object) -> tuple[Address, Address] | None:
    if not isinstance(text, str) or not text or specs.templated(text):
        return None
    found = _range(text)
    return None if isinstance(found, str) else found


def _show(span: tuple[Address, Address]) -> str:
    return str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"


def _named_once(
    file: str, key: str, i: int, name: object, seen: dict[str, int], *, what: str
) -> list[Problem]:
    """The problem of entry i of `key` when another entry before it has its name; else records it."""
    if not isinstance(name, str):
        return []
    if name in seen:
        return [
            Problem(
                file,
                f"{key}[{i}].name",
                f"expected a name no other {what} has; {name!r} is also {key}[{seen[name]}]",
            )
        ]
    seen[name] = i
    return []


@register_validator
def metallb_pools(inv: Inventory) -> list[Problem]:
    """MetalLB's pools: addresses that parse and collide with nothing; BGP peers that can be dialled."""
    host = _first(inv)
    if host is None or not any(key in host.vars for key in METALLB_KEYS):
        return []  # off by default
    values = _values(host, METALLB_KEYS)
    if values["metallb_enabled"] is not True:
        return []
    pools, peers, mode = values["metallb_pools"], values["metallb_bgp_peers"], values["metallb_mode"]
    if not isinstance(pools, list) or not isinstance(peers, list) or specs.templated(mode):
        return []  # a template or a wrong type (the argument spec check's)
    problems: list[Problem] = []
    file, key = _where(inv, host, "metallb_pools", "metallb_enabled")
    if not pools:
        problems.append(
            Problem(
                file,
                key,
                "expected at least one address pool in metallb_pools with metallb_enabled, for example "
                "[{name: services, addresses: [192.0.2.240/28]}]: without one MetalLB hands out nothing",
            )
        )
    cluster: list[tuple[str, tuple[Address, Address]]] = []
    for label, setting in (
        ("the pod network gpubring_pod_cidr", "gpubring_pod_cidr"),
        ("the service network gpubring_service_cidr", "gpubring_service_cidr"),
    ):
        if (span := _span(inv.settings.get(setting))) is not None:
            cluster.append((f"{label} {inv.settings.get(setting)}", span))
    for node in inv.hosts.values():
        if (span := _span(node.address)) is not None:
            cluster.append((f"the node address of {node.name} ({node.address})", span))
    vip = host.vars.get("kubeadm_control_plane_kube_vip_address")
    if (span := _span(vip)) is not None:
        cluster.append((f"the control-plane VIP kubeadm_control_plane_kube_vip_address {vip}", span))
    seen_names: dict[str, int] = {}
    seen: list[tuple[str, str, tuple[Address, Address]]] = []
    for i, pool in enumerate(pools):
        if not isinstance(pool, Mapping):
            continue
        here = f"{key}[{i}]"
        problems.extend(_named_once(file, key, i, pool.get("name"), seen_names, what="pool"))
        addresses = pool.get("addresses")
        if not isinstance(addresses, list):
            continue
        if not addresses:
            problems.append(Problem(file, f"{here}.addresses", "expected at least one CIDR or range"))
        for j, text in enumerate(addresses):
            if not isinstance(text, str) or specs.templated(text):
                continue
            where = f"{here}.addresses[{j}]"
            found = _range(text)
            if isinstance(found, str):
                problems.append(Problem(file, where, found))
                continue
            for other_where, other_text, other in seen:
                if _overlap(found, other):
                    problems.append(
                        Problem(
                            file,
                            where,
                            f"expected addresses no other pool entry has; {text} overlaps {other_text} "
                            f"({other_where}): MetalLB refuses overlapping pools",
                        )
                    )
            for label, other in cluster:
                if _overlap(found, other):
                    problems.append(
                        Problem(
                            file,
                            where,
                            f"expected addresses apart from the cluster's and the nodes' networks; {text} "
                            f"overlaps {label}",
                        )
                    )
            seen.append((where, text, found))
    problems.extend(_peers(inv, host, mode, peers))
    return problems


def _peers(inv: Inventory, host: Host, mode: object, peers: list[Any]) -> list[Problem]:
    file, key = _where(inv, host, "metallb_bgp_peers", "metallb_mode", "metallb_enabled")
    if mode != "bgp":
        if peers:
            return [
                Problem(
                    file,
                    key,
                    f"expected no BGP peers with metallb_mode {mode}: they would be ignored; set "
                    "metallb_mode: bgp to announce the pools to them, or remove metallb_bgp_peers",
                )
            ]
        return []
    if not peers:
        return [
            Problem(
                file,
                key,
                "expected at least one router in metallb_bgp_peers with metallb_mode bgp, for example "
                "[{name: tor-a, address: 192.0.2.1, asn: 64512, my_asn: 64513}]",
            )
        ]
    problems: list[Problem] = []
    names: dict[str, int] = {}
    for i, peer in enumerate(peers):
        if not isinstance(peer, Mapping):
            continue
        here = f"{key}[{i}]"
        problems.extend(_named_once(file, key, i, peer.get("name"), names, what="peer"))
        for field in ("asn", "my_asn"):
            asn = peer.get(field)
            if isinstance(asn, int) and not isinstance(asn, bool) and not 1 <= asn <= ASN_MAX:
                problems.append(
                    Problem(
                        file,
                        f"{here}.{field}",
                        f"expected an AS number from 1 to {ASN_MAX}; got {asn} (AS 0 is reserved, RFC 7607)",
                    )
                )
        port = peer.get("port")
        if isinstance(port, int) and not isinstance(port, bool) and not 1 <= port <= PORT_MAX:
            problems.append(
                Problem(
                    file,
                    f"{here}.port",
                    f"expected a port from 1 to {PORT_MAX} (MetalLB's BGPPeer peerPort bounds); got {port}",
                )
            )
    return problems
