"""What a value must look like for the tool it feeds, beyond its type: one function per format.

A setting or role input names its format where it is declared: `format:` (and `min:`/`max:` for
numbers, `max_length:` for strings) on a setting in settings.yml, or a line in
roles/<role>/meta/formats.yml for a role input (ansible-lint's schema of argument_specs.yml admits
no key of ours). `check(fmt, value)` returns None when the value fits, else the "expected …" text
of the problem. A value that is a Jinja expression is Ansible's to evaluate at run time and is not
checked here.

This module is a leaf: it imports nothing from gpubring.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["EMPTY_IS_UNSET", "FORMATS", "check", "check_bounds", "check_length", "networks_overlap"]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(rf"^{_LABEL}$")
_DNS_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$"
)
_PERCENT = re.compile(r"^(\d{1,3})%$")
# An OCI reference as Helm and containerd take it: [oci://]registry[:port]/path[:tag|@digest].
_OCI = re.compile(
    r"^(oci://)?(?P<host>[A-Za-z0-9.-]+(:\d{1,5})?)(/[a-z0-9]+([._/-][a-z0-9]+)*)+"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _cidr(value: Any) -> str | None:
    try:
        net = ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        return f"a network in CIDR notation such as 10.96.0.0/12, got {value!r}"
    if str(net) != str(value).strip():
        return f"the network address {net} (host bits set in {value})"
    return None


def _ip(value: Any) -> str | None:
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return f"an IP address, got {value!r}"
    return None


def _port(value: Any) -> str | None:
    if _is_int(value) and 1 <= value <= 65535:
        return None
    return f"a port number 1-65535, got {value!r}"


def _host(text: str) -> bool:
    if text.startswith("[") and text.endswith("]"):
        return _ip(text[1:-1]) is None
    return _ip(text) is None or bool(_HOSTNAME.match(text))


def _endpoint(value: Any) -> str | None:
    text = str(value)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host or not _host(host):
        return f"host:port (an address or DNS name, then a port; [v6]:port for IPv6), got {text!r}"
    return None if 1 <= int(port) <= 65535 else f"a port number 1-65535 after the host, got {port}"


_URL_CHARS = re.compile(r"^[^\s\"'<>`\\{}|^]+$")


def _url(value: Any) -> str | None:
    text = str(value)
    if not _URL_CHARS.match(text):
        return f"a URL without spaces, quotes or <>`\\{{}}|^, got {text!r}"
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return f"a URL such as https://mirror.example.internal/path, got {text!r}"
    if parts.scheme not in ("http", "https") or not parts.hostname or not _host(parts.hostname):
        return f"an http:// or https:// URL with a host, got {text!r}"
    return None


def _url_or_oci(value: Any) -> str | None:
    if str(value).startswith("oci://"):
        return _oci(value)
    return _url(value)


def _oci(value: Any) -> str | None:
    text = str(value)
    m = _OCI.match(text)
    if m is None or not _host(m.group("host").split(":")[0]):
        return f"an OCI reference such as registry.example.internal/path[:tag], got {text!r}"
    return None


def _dns_label(value: Any) -> str | None:
    text = str(value)
    if len(text) <= 63 and _DNS_LABEL.match(text):
        return None
    return f"a DNS-1123 label (lower-case letters, digits and '-', at most 63), got {text!r}"


def _dns_subdomain(value: Any) -> str | None:
    text = str(value)
    if len(text) <= 253 and _DNS_SUBDOMAIN.match(text):
        return None
    return f"a DNS-1123 name (lower-case letters, digits, '-' and '.', at most 253), got {text!r}"


_QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _label_key(value: Any) -> str | None:
    """A Kubernetes label (or taint) key: [DNS-1123 subdomain prefix '/'] name of at most 63 characters
    (k8s.io/apimachinery validation.IsQualifiedName)."""
    text = str(value)
    prefix, _, name = text.rpartition("/")
    if _QUALIFIED_NAME.match(name) and (not prefix or _dns_subdomain(prefix) is None):
        return None
    return f"a Kubernetes label key such as example.com/name (optional DNS-1123 prefix and '/'), got {text!r}"


def _serial_one(value: Any) -> bool:
    if _is_int(value):
        return bool(value >= 1)
    text = str(value).strip()
    if text.isdigit():
        return int(text) >= 1
    m = _PERCENT.match(text)
    return bool(m is not None and 1 <= int(m.group(1)) <= 100)


def _serial(value: Any) -> str | None:
    items = value if isinstance(value, list) else [value]
    if items and all(_serial_one(v) for v in items):
        return None
    return f"an Ansible serial value: a count >= 1, a percentage 1%-100%, or a list of them, got {value!r}"


def _shards(value: Any) -> str | None:
    if value == "auto" or (_is_int(value) and value >= 1) or (str(value).isdigit() and int(value) >= 1):
        return None
    return f"'auto' or an integer >= 1, got {value!r}"


def _kubernetes_release(value: Any) -> str | None:
    """x.y.z, as pkgs.k8s.io and kubeadm name a release (the kubernetes_packages role asserts the same)."""
    if isinstance(value, str) and re.fullmatch(r"\d+\.\d+\.\d+", value):
        return None
    return f"a Kubernetes release such as 1.34.2 (a quoted string), got {value!r}"


def _duration(value: Any) -> str | None:
    if re.fullmatch(r"(\d+(\.\d+)?(ms|s|m|h))+", str(value)) and not re.fullmatch(
        r"0+(\.0+)?[a-z]+", str(value)
    ):
        return None
    return f"a positive duration such as 90s, 10m or 1h30m, got {value!r}"


FORMATS: dict[str, Callable[[Any], str | None]] = {
    "cidr": _cidr,
    "ip": _ip,
    "port": _port,
    "endpoint": _endpoint,
    "url": _url,
    "url_or_oci": _url_or_oci,
    "oci": _oci,
    "dns_label": _dns_label,
    "dns_subdomain": _dns_subdomain,
    "label_key": _label_key,
    "serial": _serial,
    "shards": _shards,
    "duration": _duration,
    "kubernetes_release": _kubernetes_release,
}


# Formats of optional strings: an empty value means "not set" (upstream, automatic, none).
EMPTY_IS_UNSET = frozenset({"url", "url_or_oci", "oci", "endpoint", "ip"})


def check(fmt: str, value: Any, *, allow_empty: bool | None = None) -> str | None:
    """None when `value` fits `fmt`, else what was expected. An empty string passes for the formats
    of optional strings (EMPTY_IS_UNSET) unless allow_empty says otherwise."""
    if (fmt in EMPTY_IS_UNSET if allow_empty is None else allow_empty) and value in ("", None):
        return None
    return FORMATS[fmt](value)


def check_bounds(value: Any, minimum: float | None, maximum: float | None) -> str | None:
    """None when a number lies within [minimum, maximum] (either may be None)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None  # the type check reports it
    if minimum is not None and value < minimum:
        return f"a number >= {minimum:g}, got {value}"
    if maximum is not None and value > maximum:
        return f"a number <= {maximum:g}, got {value}"
    return None


def check_length(value: Any, maximum: int | None) -> str | None:
    """None when a string has at most `maximum` characters (or maximum is None)."""
    if maximum is None or not isinstance(value, str) or len(value) <= maximum:
        return None
    return f"at most {maximum} characters, got {len(value)}: {value[:20]!r}{'...' if len(value) > 20 else ''}"


def networks_overlap(a: str, b: str) -> bool:
    """Whether two CIDRs share an address (False when either does not parse: reported elsewhere)."""
    try:
        return ipaddress.ip_network(a, strict=False).overlaps(ipaddress.ip_network(b, strict=False))
    except (ValueError, TypeError):
        return False
