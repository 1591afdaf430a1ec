"""gpubring.core.defaults is a stateless vars plugin: Ansible keeps one instance of it instead of
resolving the plugin by name for every host and task whose variables it builds."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO, collection_env

SCRIPT = """
from ansible.plugins.loader import init_plugin_loader, vars_loader
init_plugin_loader()
first = vars_loader.get("gpubring.core.defaults")
second = vars_loader.get("gpubring.core.defaults")
print(type(first).__module__, first is second)
"""


def test_ansible_keeps_one_instance_of_the_defaults_plugin() -> None:
    env = collection_env(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    command = [sys.executable, "-c", SCRIPT]
    proc = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["ansible_collections.gpubring.core.plugins.vars.defaults", "True"]
