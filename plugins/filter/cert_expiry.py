# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filters of the certificate tasks (roles/kubeadm_control_plane tasks/certs*.yml): when the control
planes' certificates expire and which to warn about. The reading and the decision live in
module_utils/cert_expiry (plain functions, unit-tested in tests/test_cert_expiry.py); these filters
only expose them to Jinja.

kubeadm_cert_expiry(stdout) -> [entry, ...]
    entries of `kubeadm certs check-expiration -o json`.
cert_files_expiry(slurp_results, root='/etc/kubernetes') -> [entry, ...]
    entries of the certificate files and kubeconfigs read with ansible.builtin.slurp (a loop's
    `results`), named by their path under root (`pki/apiserver.crt`, `admin.conf`).
cert_warnings(entries, host, warn_days, now='') -> [line, ...]
    one line per entry that expires within warn_days (expired ones included); `now` (RFC 3339) is
    for tests, the controller's clock otherwise.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpubring.core.plugins.module_utils import cert_expiry as C


def kubeadm_cert_expiry(stdout: Any) -> list[dict[str, Any]]:
    try:
        return C.kubeadm_expiration(str(stdout))
    except C.CertParseError as exc:
        raise AnsibleFilterError(str(exc)) from None


def cert_files_expiry(results: Any, root: str = "/etc/kubernetes") -> list[dict[str, Any]]:
    if not isinstance(results, list):
        raise AnsibleFilterError(
            f"cert_files_expiry: expected slurp results (a list), got {type(results).__name__}"
        )
    try:
        return C.files_expiry([r for r in results if isinstance(r, dict)], root.rstrip("/") + "/")
    except C.CertParseError as exc:
        raise AnsibleFilterError(str(exc)) from None


def cert_warnings(entries: Any, host: str, warn_days: Any, now: str = "") -> list[str]:
    try:
        days = int(warn_days) if isinstance(warn_days, str) and warn_days.strip().isdigit() else warn_days
        moment = C.parse_time(now) if now else C.now_utc()
        return C.warning_lines(str(host), list(entries or []), days, moment)
    except C.CertParseError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kubeadm_cert_expiry": kubeadm_cert_expiry,
            "cert_files_expiry": cert_files_expiry,
            "cert_warnings": cert_warnings,
        }
