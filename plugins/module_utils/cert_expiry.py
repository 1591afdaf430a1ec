# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""When the control planes' certificates expire, and which ones to warn about.

Two readers give the same entries, {name, kind, expires, ca, externally_managed, missing, source}
(`kind`: certificate | ca; `expires`: UTC ISO 8601 with a trailing Z, '' when missing):

- kubeadm_expiration(text): the output of `kubeadm certs check-expiration -o json`, the
  `output.kubeadm.k8s.io/v1alpha3` `CertificateExpirationInfo` object (kubernetes/kubernetes
  cmd/kubeadm/app/apis/output/v1alpha3/types.go: `certificates` and `certificateAuthorities`, each
  {name, expirationDate (RFC 3339), residualTime (seconds), externallyManaged, caName, missing}; the
  `-o` flag of check-expiration is exercised in cmd/kubeadm/app/cmd/certs_test.go). `gpubring certs`
  shows these.
- pem_expiry(name, data): one certificate file (PEM), or a kubeconfig whose user carries
  `client-certificate-data` (admin.conf, controller-manager.conf, ...), read with `cryptography`
  on the controller. `up` and `verify` read /etc/kubernetes/pki/**.crt and /etc/kubernetes/*.conf so:
  no kubeadm call and no Python library needed on the host.

expiring(entries, warn_days, now) keeps those that expire within warn_days (or already did);
warning_lines(host, entries, warn_days, now) says each in one line. A leaf: no Ansible import.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

OUTPUT_KIND = "CertificateExpirationInfo"


class CertParseError(ValueError):
    """Input that is not what the reader expects, with what was expected."""


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> datetime:
    """An RFC 3339 time (`2026-11-27T10:00:00Z`, with or without fractions or an offset) as UTC."""
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise CertParseError(f"{value!r} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _entry(item: Mapping[str, Any], kind: str) -> dict[str, Any]:
    name = str(item.get("name") or "").strip()
    if not name:
        raise CertParseError(f"a {kind} without a name: {dict(item)!r}")
    missing = item.get("missing") is True
    expires = ""
    if not missing:
        raw = item.get("expirationDate")
        if not isinstance(raw, str) or not raw.strip():
            raise CertParseError(f"{name}: expirationDate missing (expected an RFC 3339 time)")
        expires = _iso(parse_time(raw))
    return {
        "name": name,
        "kind": kind,
        "expires": expires,
        "ca": str(item.get("caName") or ""),
        "externally_managed": item.get("externallyManaged") is True,
        "missing": missing,
        "source": "kubeadm",
    }


def kubeadm_expiration(text: str) -> list[dict[str, Any]]:
    """The certificates and CAs of `kubeadm certs check-expiration -o json`, certificates first."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CertParseError(f"kubeadm certs check-expiration -o json: not JSON ({exc})") from None
    if not isinstance(doc, Mapping) or doc.get("kind") != OUTPUT_KIND:
        got = doc.get("kind") if isinstance(doc, Mapping) else type(doc).__name__
        raise CertParseError(
            f"kubeadm certs check-expiration -o json: expected kind {OUTPUT_KIND}, got {got!r}"
        )
    out: list[dict[str, Any]] = []
    for key, kind in (("certificates", "certificate"), ("certificateAuthorities", "ca")):
        items = doc.get(key)
        if items is None:  # kubeadm writes null for an empty list
            items = []
        if not isinstance(items, list):
            raise CertParseError(f"kubeadm certs check-expiration -o json: {key} is not a list")
        out += [_entry(item, kind) for item in items if isinstance(item, Mapping)]
    return out


def _certificate_pem(name: str, data: bytes) -> bytes:
    """The PEM certificate a file holds: the file itself, or a kubeconfig's client-certificate-data."""
    if b"-----BEGIN CERTIFICATE-----" in data:
        return data
    import yaml  # a kubeconfig (YAML); PyYAML comes with ansible-core

    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError:
        doc = None
    users = doc.get("users") if isinstance(doc, Mapping) else None
    for user in users or []:
        encoded = (
            (user.get("user") or {}).get("client-certificate-data") if isinstance(user, Mapping) else None
        )
        if isinstance(encoded, str) and encoded.strip():
            return base64.b64decode(encoded)
    raise CertParseError(f"{name}: neither a PEM certificate nor a kubeconfig with client-certificate-data")


def pem_expiry(name: str, data: bytes, *, ca: bool | None = None) -> dict[str, Any]:
    """The entry of one certificate file or kubeconfig (`name` is how it is shown: `apiserver.crt`)."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(_certificate_pem(name, data))
    except ValueError as exc:
        raise CertParseError(f"{name}: not a readable certificate ({exc})") from None
    is_ca = ca
    if is_ca is None:
        try:
            is_ca = bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
        except x509.ExtensionNotFound:
            is_ca = False
    return {
        "name": name,
        "kind": "ca" if is_ca else "certificate",
        "expires": _iso(cert.not_valid_after_utc),
        "ca": "",
        "externally_managed": False,
        "missing": False,
        "source": "file",
    }


def files_expiry(
    slurped: Iterable[Mapping[str, Any]], root: str = "/etc/kubernetes/"
) -> list[dict[str, Any]]:
    """Entries of ansible.builtin.slurp results (their `source` and base64 `content`), each named by
    its path under `root` (`pki/apiserver.crt`, `admin.conf`). A file that holds no certificate (a
    kubeconfig that points at a file instead of embedding one) is left out."""
    out: list[dict[str, Any]] = []
    for result in slurped:
        source = str(result.get("source") or "")
        content = result.get("content")
        if not source or not isinstance(content, str):
            continue
        name = source[len(root) :] if source.startswith(root) else source
        try:
            out.append(pem_expiry(name, base64.b64decode(content)))
        except CertParseError:
            if not source.endswith(".conf"):
                raise
    return out


def days_left(entry: Mapping[str, Any], now: datetime) -> float | None:
    """Days until the entry expires (negative: expired), None when it is missing."""
    if entry.get("missing") or not entry.get("expires"):
        return None
    return (parse_time(str(entry["expires"])) - now) / timedelta(days=1)


def expiring(entries: Sequence[Mapping[str, Any]], warn_days: int, now: datetime) -> list[dict[str, Any]]:
    """The entries that expire within warn_days of now (expired ones included), with `days_left`;
    missing and externally managed ones are not gpubring's to warn about."""
    if isinstance(warn_days, bool) or not isinstance(warn_days, int) or warn_days < 0:
        raise CertParseError(f"gpubring_cert_warn_days: expected an integer >= 0, got {warn_days!r}")
    out = []
    for entry in entries:
        left = days_left(entry, now)
        if left is None or entry.get("externally_managed"):
            continue
        if left <= warn_days:
            out.append({**entry, "days_left": left})
    return sorted(out, key=lambda e: (e["days_left"], e["name"]))


def warning_lines(
    host: str, entries: Sequence[Mapping[str, Any]], warn_days: int, now: datetime
) -> list[str]:
    """One line per certificate of `host` that expires within warn_days (or did)."""
    lines = []
    for entry in expiring(entries, warn_days, now):
        left = entry["days_left"]
        what = "CA certificate" if entry["kind"] == "ca" else "certificate"
        when = (
            f"expired {-left:.0f} day(s) ago ({entry['expires']})"
            if left < 0
            else f"expires in {left:.0f} day(s) ({entry['expires']})"
        )
        lines.append(f"{host}: {what} {entry['name']} {when}, within gpubring_cert_warn_days ({warn_days})")
    return lines


def now_utc() -> datetime:
    return datetime.now(UTC)
