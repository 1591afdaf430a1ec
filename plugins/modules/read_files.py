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
"""

import errno  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402


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
            max_bytes=dict(type="int", default=1048576),
        ),
        supports_check_mode=True,
    )
    if module.params["max_bytes"] < 1:
        module.fail_json(msg=f"max_bytes must be at least 1, got {module.params['max_bytes']}")
    files = read_all(module.params["paths"], module.params["exist"], module.params["max_bytes"])
    module.exit_json(changed=False, files=files)


if __name__ == "__main__":
    main()
