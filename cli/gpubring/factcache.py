"""The inventory's fact cache as ansible-core writes it, read by the checks that use what an earlier run
found there (teams: each GPU node's GPU count; gpu_sharing: its GPUs' device ids).

gpubring's runs keep each host's facts in `<inventory>/.gpubring/facts` (ansible's jsonfile cache
plugin, gpubring.run.folder). ansible-core 2.19 wraps every cache plugin (PluginInterposer in
ansible/_internal/_plugins/_cache.py, v2.19.14): a host's facts are stored under the key
`s<schema>_<host>` (schema 1) as `{"__payload__": "<the facts as JSON text>"}`. In that text a value
that carries Ansible's tags (where it came from: a set_fact of an inventory variable) is the object
`{"value": ..., "tags": [...], "__ansible_type": "_AnsibleTagged..."}` (AnsibleTaggedObject._as_dict
and AnsibleSerializable._TYPE_KEY in ansible/module_utils/_internal/_datatag/__init__.py, v2.19.14);
a value a module returned carries none. ansible-core before 2.19 stored the facts themselves under
`<host>`. Both are read, 2.19's first, and tagged values are given as their plain value.

A leaf: it imports nothing from gpubring, prints nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FACTS_FOLDER = Path(".gpubring") / "facts"
SCHEMA_PREFIX = "s1_"
PAYLOAD_KEY = "__payload__"
TYPE_KEY = "__ansible_type"


def _plain(value: Any) -> Any:
    """A cached value without Ansible's tag wrappers."""
    if isinstance(value, dict):
        if TYPE_KEY in value and "value" in value:
            return _plain(value["value"])
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def host_facts(inventory_root: Path, host: str) -> Mapping[str, Any] | None:
    """The facts a run cached for `host` under `inventory_root`, or None when there are none, or none
    that can be read (a host name that is not a plain file name reads nothing)."""
    if not host or "/" in host or "\0" in host or host.startswith("."):
        return None
    folder = inventory_root / FACTS_FOLDER
    for name in (SCHEMA_PREFIX + host, host):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
            if isinstance(data, Mapping) and isinstance(data.get(PAYLOAD_KEY), str):
                data = json.loads(data[PAYLOAD_KEY])
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return dict(_plain(data))
    return None
