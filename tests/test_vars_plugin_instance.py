"""gpubring.core.defaults is a stateless vars plugin: Ansible keeps one instance of it instead of
resolving the plugin by name for every host and task whose variables it builds."""

from __future__ import annotations

from pathlib import Path

from helpers import script_shows

SCRIPT = """
import json
from ansible.plugins.loader import init_plugin_loader, vars_loader
init_plugin_loader()
first = vars_loader.get("gpubring.core.defaults")
second = vars_loader.get("gpubring.core.defaults")
print(json.dumps({"module": type(first).__module__, "same": first is second}))
"""


def test_ansible_keeps_one_instance_of_the_defaults_plugin(tmp_path: Path) -> None:
    shown = script_shows(SCRIPT, tmp_path)
    assert shown == {"module": "ansible_collections.gpubring.core.plugins.vars.defaults", "same": True}
