"""The value formats of settings and role inputs: what each accepts and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from gpubring.formats import EMPTY_IS_UNSET, FORMATS, check, check_bounds, networks_overlap

GOOD: list[tuple[str, Any]] = [
    ("cidr", "10.244.0.0/16"),
    ("cidr", "fd00:10:96::/108"),
    ("ip", "192.0.2.10"),
    ("ip", "2001:db8::1"),
    ("port", 1),
    ("port", 65535),
    ("endpoint", "192.0.2.10:6443"),
    ("endpoint", "api.cluster.example.internal:443"),
    ("endpoint", "[2001:db8::10]:6443"),
    ("url", "https://mirror.example.internal/debian"),
    ("url", "http://10.0.0.5:8080/charts"),
    ("url_or_oci", "oci://registry.example.internal/charts"),
    ("oci", "registry.example.internal:5000/nvidia/cuda:12.8.1-base"),
    ("oci", "oci://ghcr.io/nvidia/kai-scheduler/kai-scheduler"),
    ("dns_label", "gpu-operator"),
    ("dns_subdomain", "prod-gpu.example"),
    ("label_key", "gpubring.io/acceptance"),
    ("label_key", "acceptance"),
    ("serial", 1),
    ("serial", "25%"),
    ("serial", "3"),
    ("serial", [1, "50%", "100%"]),
    ("shards", "auto"),
    ("shards", 4),
    ("shards", "2"),
    ("duration", "10m"),
    ("duration", "1h30m"),
    ("kubernetes_release", "1.34.2"),
]
BAD: list[tuple[str, Any, str]] = [
    ("cidr", "10.244.0.0/33", "CIDR notation"),
    ("cidr", "banana", "CIDR notation"),
    ("cidr", "10.96.0.1/12", "network address 10.96.0.0/12"),
    ("ip", "300.1.1.1", "an IP address"),
    ("port", 0, "1-65535"),
    ("port", 70000, "1-65535"),
    ("port", True, "1-65535"),
    ("port", "6443", "1-65535"),
    ("endpoint", "192.0.2.10", "host:port"),
    ("endpoint", "192.0.2.10:", "host:port"),
    ("endpoint", "192.0.2.10:99999", "1-65535"),
    ("endpoint", "bad host:6443", "host:port"),
    ("url", "mirror.example.internal/debian", "http:// or https://"),
    ("url", "ftp://mirror.example.internal/", "http:// or https://"),
    ("url", "https://", "http:// or https://"),
    ("url", 'https://mirror/"quoted"', "without spaces, quotes"),
    ("url", "https://host:notaport/", "a URL"),
    ("url_or_oci", "oci://", "OCI reference"),
    ("url_or_oci", "registry/path", "http:// or https://"),
    ("oci", "oci://", "OCI reference"),
    ("oci", "Registry With Spaces/x", "OCI reference"),
    ("dns_label", "Prod_GPU", "DNS-1123 label"),
    ("dns_label", "a" * 64, "DNS-1123 label"),
    ("dns_label", "-lead", "DNS-1123 label"),
    ("dns_subdomain", "a..b", "DNS-1123 name"),
    ("label_key", "gpubring.io/", "Kubernetes label key"),
    ("label_key", "Bad_Prefix/acceptance", "Kubernetes label key"),
    ("label_key", "gpubring.io/" + "a" * 64, "Kubernetes label key"),
    ("serial", "some", "serial value"),
    ("serial", "150%", "serial value"),
    ("serial", 0, "serial value"),
    ("serial", [], "serial value"),
    ("shards", 0, "'auto' or an integer >= 1"),
    ("shards", "many", "'auto' or an integer >= 1"),
    ("duration", "soon", "duration"),
    ("duration", "0s", "duration"),
    ("kubernetes_release", "1.34", "Kubernetes release"),
    ("kubernetes_release", 1.34, "Kubernetes release"),
    ("kubernetes_release", "v1.34.2", "Kubernetes release"),
    ("kubernetes_release", "1.34.2-1.1", "Kubernetes release"),
]


@pytest.mark.parametrize(("fmt", "value"), GOOD)
def test_a_good_value_passes(fmt: str, value: Any) -> None:
    assert check(fmt, value) is None


@pytest.mark.parametrize(("fmt", "value", "expected"), BAD)
def test_a_bad_value_says_what_was_expected(fmt: str, value: Any, expected: str) -> None:
    message = check(fmt, value)
    assert message is not None and expected in message, message


def test_every_format_is_covered_by_both_tables() -> None:
    assert {f for f, _ in GOOD} == set(FORMATS) == {f for f, _, _ in BAD}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_empty_means_unset_only_for_optional_strings(fmt: str) -> None:
    assert (check(fmt, "") is None) is (fmt in EMPTY_IS_UNSET)
    assert check(fmt, "", allow_empty=True) is None
    assert check(fmt, "", allow_empty=False) is not None


@pytest.mark.parametrize(
    ("value", "low", "high", "ok"),
    [(1, 1, None, True), (0, 1, None, False), (101, None, 100, False), (5.5, 0, 10, True), ("x", 1, 2, True)],
)
def test_bounds(value: Any, low: float | None, high: float | None, ok: bool) -> None:
    assert (check_bounds(value, low, high) is None) is ok


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("10.244.0.0/16", "10.96.0.0/12", False),
        ("10.244.0.0/16", "10.244.128.0/17", True),
        ("10.0.0.0/8", "fd00::/8", False),
        ("garbage", "10.0.0.0/8", False),
    ],
)
def test_networks_overlap(a: str, b: str, overlap: bool) -> None:
    assert networks_overlap(a, b) is overlap
