#!/usr/bin/python
# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""gpubring.core.read_files: several small files read (or looked for) in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: read_files
short_description: Read several small files, or look for them, in one call
description:
  - Reads each file of C(paths) and tells for each of C(exist) whether it exists, in one module call,
    what a run of C(ansible.builtin.slurp) and C(ansible.builtin.stat) tasks (or a loop of them) reads
    at the cost of one task each (issue 26, less work per host).
  - For each file of C(sysctl_files) (C(sysctl.d) syntax), also the live value of every sysctl it sets,
    from C(/proc/sys), in the same call (not a call for the file, then one for the values it names).
  - A missing file is no failure (C(exists) false), and neither is one that cannot be read, such as a
    write-only file under C(/proc/sys) (C(content) null, C(error) says why).
  - Content is text (UTF-8, bytes that are not are replaced). Made for small files (C(/proc), C(/sys),
    configuration, flags), each read up to C(max_bytes); C(truncated) says when a file had more. Paths are
    used as given (no C(~) expansion).
version_added: "0.1.0"
author: gpubring maintainers (!UNKNOWN)
options:
  paths:
    description: Files to read.
    type: list
    elements: str
    default: []
  exist:
    description: Files only looked for (not read), such as a binary or a flag file.
    type: list
    elements: str
    default: []
  sysctl_files:
    description:
      - C(sysctl.d) files whose entries are read with the live value of each under C(/proc/sys).
      - "A line is C(name = value): blank lines and those starting with C(#) or C(;) are left out, and so
        are lines without C(=); a leading C(-) (ignore errors) is dropped. A later line for the same name
        wins, as C(sysctl --system) applies them. Runs of whitespace in a value are one space, as in the
        live value (the kernel separates fields with tabs)."
      - A name whose first separator is C(/) is a path under C(/proc/sys) whose dots are literal (as in
        C(net/ipv4/conf/eth0.100/rp_filter)); otherwise dots separate the levels and slashes stand for dots.
    type: list
    elements: str
    default: []
  max_bytes:
    description: The most bytes read of each file.
    type: int
    default: 1048576
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpubring.core.check_mode_posix
notes:
  - The module only reads; it behaves the same in check mode and never reports a change.
"""

EXAMPLES = r"""
- name: Read the swap areas and the reboot flags
  gpubring.core.read_files:
    paths: [/proc/swaps, /run/reboot-required.pkgs]
    exist: [/run/reboot-required]
  register: __state

- name: Use them
  ansible.builtin.debug:
    msg: "{{ __state.files['/proc/swaps'].content }} {{ __state.files['/run/reboot-required'].exists }}"

- name: Read a sysctl drop-in and the live value of each sysctl it sets
  gpubring.core.read_files:
    sysctl_files: [/etc/sysctl.d/90-gpubring.conf]
  register: __sysctls
"""

RETURN = r"""
files:
  description:
    - Each path of C(paths) and C(exist), as given, with C(exists) (bool), C(content) (the text read, null
      for a path of C(exist) and for a file that exists but could not be read) and C(error) (why it could
      not be read, else an empty string).
  returned: always
  type: dict
  sample:
    /proc/swaps: {exists: true, content: "Filename Type Size Used Priority\n", error: "", truncated: false}
    /run/reboot-required: {exists: false, content: null, error: "", truncated: false}
sysctls:
  description:
    - Each path of C(sysctl_files), as given, with C(exists), C(error) and C(truncated) as in C(files), and
      C(entries), each name the file sets with its C(value) (as the file says it), C(path) (its file under
      C(/proc/sys)), C(live) (the value read there, null where the running kernel has no such file or it
      cannot be read), C(error) (why it could not be read, else an empty string) and C(matches) (the live
      value is the one configured).
  returned: always
  type: dict
  sample:
    /etc/sysctl.d/90-gpubring.conf:
      exists: true
      error: ""
      truncated: false
      entries:
        vm.swappiness: {value: "0", path: /proc/sys/vm/swappiness, live: "60", error: "", matches: false}
"""

import errno  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpubring.core.plugins.module_utils.sysctl_conf import sysctl_entries, sysctl_path  # noqa: E402


def read(path, max_bytes):
    """{exists, content, error} of one file read as text."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)  # one byte more tells a file cut at max_bytes
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            return dict(exists=False, content=None, error="", truncated=False)
        return dict(exists=True, content=None, error=err.strerror or str(err), truncated=False)
    content = data[:max_bytes].decode("utf-8", "replace")
    return dict(exists=True, content=content, error="", truncated=len(data) > max_bytes)


def look(path):
    """{exists, content, error} of a file only looked for."""
    return dict(exists=os.path.lexists(path), content=None, error="", truncated=False)


def read_sysctls(path, max_bytes):
    """{exists, error, truncated, entries} of one sysctl.d file, each entry with its live value."""
    found = read(path, max_bytes)
    entries = {}
    for name, value in sysctl_entries(found["content"] or "").items():
        proc = sysctl_path(name)
        live = read(proc, max_bytes)
        live_value = None if live["content"] is None else " ".join(live["content"].split())
        entries[name] = dict(
            value=value, path=proc, live=live_value, error=live["error"], matches=live_value == value
        )
    return dict(exists=found["exists"], error=found["error"], truncated=found["truncated"], entries=entries)


def read_all(paths, exist, max_bytes):
    files = {}
    for path in exist:
        files[path] = look(path)
    for path in paths:
        files[path] = read(path, max_bytes)
    return files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="str", default=[]),
            exist=dict(type="list", elements="str", default=[]),
            sysctl_files=dict(type="list", elements="str", default=[]),
            max_bytes=dict(type="int", default=1048576),
        ),
        supports_check_mode=True,
    )
    if module.params["max_bytes"] < 1:
        module.fail_json(msg=f"max_bytes must be at least 1, got {module.params['max_bytes']}")
    files = read_all(module.params["paths"], module.params["exist"], module.params["max_bytes"])
    sysctls = {path: read_sysctls(path, module.params["max_bytes"]) for path in module.params["sysctl_files"]}
    module.exit_json(changed=False, files=files, sysctls=sysctls)


if __name__ == "__main__":
    main()
