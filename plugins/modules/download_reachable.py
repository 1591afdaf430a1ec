#!/usr/bin/python
# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""gpubring.core.download_reachable: can this host open a connection to every place a run downloads from."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: download_reachable
short_description: Check that this host reaches every download of a run, naming the mirror variable of each one it does not
description:
  - For each distinct host and port of the C(downloads) URLs, resolves the name and opens a TCP
    connection (nothing is sent or fetched), all at once, each within C(timeout) seconds, DNS included.
  - Fails with one line per unreachable download, its URL, why (the resolver's or the connection's
    error, or no answer within C(timeout)) and the mirror variable that serves it from elsewhere.
  - Its action plugin (same name) computes C(downloads) on the controller when the task does not give
    them, from the roles the run's phases run on this host (see the preflight role's C(downloads.yml)).
version_added: "0.1.0"
author: gpubring maintainers (!UNKNOWN)
options:
  downloads:
    description:
      - The downloads, each C(url) (http, https or oci), C(variable) (the mirror variable that covers it)
        and C(what) (where the roles fetch it, for the message).
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds each host and port may take to resolve and accept a connection.
    type: float
    default: 5
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpubring.core.check_mode_posix
notes:
  - The module only connects; it behaves the same in check mode.
"""

EXAMPLES = r"""
- name: Check that every download of this run is reachable
  gpubring.core.download_reachable:
    downloads:
      - url: https://get.helm.sh/helm-v3.16.2-linux-amd64.tar.gz
        variable: gpubring_binary_mirror
        what: "roles/helm/tasks/install.yml: Download Helm"
    timeout: 5
"""

RETURN = r"""
checked:
  description: Each distinct host and port checked, with C(ok) and C(error).
  returned: always
  type: list
  elements: dict
problems:
  description: One line per unreachable download (its URL, where the roles fetch it, why, the mirror variable).
  returned: always
  type: list
  elements: str
out_of_reach:
  description: The downloads whose host and port did not answer, with C(url), C(variable), C(what) and C(error).
  returned: always
  type: list
  elements: dict
"""

import socket  # noqa: E402
import threading  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

PORTS = {"http": 80, "https": 443, "oci": 443}


def endpoint(url):
    """(host, port) of a download URL, or None for one that names no host (a local path)."""
    parts = urlsplit(url.strip().split()[0] if url.strip() else "")
    if parts.scheme not in PORTS or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname, port or PORTS[parts.scheme]


def _connect(host, port, timeout, result):
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        result["error"] = "name not resolved (%s)" % (err.strerror or err)
        return
    last = "no address"
    for family, kind, proto, _canonname, address in addresses:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(timeout)
                sock.connect(address)
                result["error"] = ""
                return
        except OSError as err:
            last = f"{address[0]}: {err.strerror or err}"
    result["error"] = last


def check(endpoints, timeout):
    """{(host, port): error or ""} for every endpoint, at once, each within timeout seconds (a lookup or
    connection still going on by then counts as no answer)."""
    results = {}
    threads = []
    for host, port in endpoints:
        results[(host, port)] = {"error": f"no answer within {timeout:g}s"}
        thread = threading.Thread(target=_connect, args=(host, port, timeout, results[(host, port)]))
        thread.daemon = True
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(timeout + 0.5)
    return dict((key, value["error"]) for key, value in results.items())


def main():
    module = AnsibleModule(
        argument_spec=dict(
            downloads=dict(type="list", elements="dict", required=True),
            timeout=dict(type="float", default=5),
        ),
        supports_check_mode=True,
    )
    downloads = module.params["downloads"]
    wanted = []
    for item in downloads:
        found = endpoint(str(item.get("url") or ""))
        if found is not None and found not in wanted:
            wanted.append(found)
    errors = check(wanted, module.params["timeout"])
    unreachable = []
    for item in downloads:
        found = endpoint(str(item.get("url") or ""))
        if found is not None and errors.get(found):
            unreachable.append(
                dict(
                    url=str(item.get("url")),
                    variable=str(item.get("variable") or ""),
                    what=str(item.get("what") or ""),
                    error=errors[found],
                )
            )
    checked = [dict(host=h, port=p, ok=not errors[(h, p)], error=errors[(h, p)]) for h, p in wanted]
    problems = [
        f"download out of reach: {item['url']} ({item['what']}): {item['error']}; "
        f"set {item['variable'] or 'its mirror variable'} to a mirror this host reaches"
        for item in unreachable
    ]
    if unreachable:
        head = (
            f"{len(unreachable)} of {len(downloads)} downloads of this run are out of reach from this host:"
        )
        module.fail_json(
            msg="\n".join([head, *problems]), checked=checked, out_of_reach=unreachable, problems=problems
        )
    module.exit_json(changed=False, checked=checked, out_of_reach=[], problems=[])


if __name__ == "__main__":
    main()
