# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""sysctl.d files as systemd-sysctl reads them (sysctl.d(5)), and where each name's live value is.

One reading for the two modules that compare a sysctl.d file with /proc/sys: read_files (verify's check
of the role's drop-in, C(sysctl_files)) and host_state (its C(sysctl) part, every file under /etc). A
leaf: standard library only, nothing read here.
"""

from __future__ import annotations


def sysctl_path(name):
    """The file under /proc/sys of a sysctl.d name: slashes separate the levels of a name whose first
    separator is a slash, its dots literal; otherwise dots do, and slashes stand for dots (a VLAN
    interface: net.ipv4.conf.eth0/100.rp_filter is /proc/sys/net/ipv4/conf/eth0.100/rp_filter)."""
    first = min((i for i in (name.find("."), name.find("/")) if i >= 0), default=-1)
    if first >= 0 and name[first] == "/":
        return "/proc/sys/" + name
    return "/proc/sys/" + "/".join(part.replace("/", ".") for part in name.split("."))


def sysctl_entries(text):
    """name -> value of a sysctl.d file's text: comments (# and ;) and lines without "=" skipped, a
    leading "-" (an error ignored) dropped, whitespace in a value folded, the last line for a name
    winning."""
    entries = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        name, value = line.split("=", 1)
        name = name.strip().lstrip("-").strip()
        if name:
            entries[name] = " ".join(value.split())
    return entries
