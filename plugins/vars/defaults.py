# Copyright: gpubring maintainers
# Apache License 2.0
"""The gpubring.core.defaults vars plugin: settings.yml defaults and the version matrix for every play."""

from __future__ import annotations

DOCUMENTATION = r"""
name: defaults
short_description: gpubring's setting defaults and the effective version matrix, below the inventory
description:
  - Gives the group C(all) the default of every C(gpubring_*) setting declared in the collection's
    C(settings.yml), the pins of its C(versions.yml) as C(gpubring_pins), and C(gpubring_matrix), the
    effective version matrix (the pins combined with the inventory's C(gpubring_versions) overrides,
    resolved by Ansible's own templating when a task reads it).
  - The values rank below everything the inventory says. They are merged as the inventory's own vars of
    group C(all) at the inventory stage, and a key that the inventory file already sets on C(all) is left
    out, so C(all.vars) in the inventory file, C(group_vars/) and C(host_vars/) override every default.
  - So plain C(ansible-playbook -i INVENTORY playbooks/site.yml), AWX and ansible-navigator runs get the
    same variables as C(gpubring up). Enable it with
    C(vars_plugins_enabled = host_group_vars, gpubring.core.defaults) in ansible.cfg
    (or C(ANSIBLE_VARS_ENABLED)); gpubring's runner does that itself.
options:
  stage:
    description:
      - When the plugin runs. Only C(inventory) keeps its values below group_vars; the option exists
        because Ansible reads it for every vars plugin.
    type: str
    default: inventory
    choices: [inventory]
"""

EXAMPLES = r"""
# ansible.cfg
# [defaults]
# vars_plugins_enabled = host_group_vars, gpubring.core.defaults
"""

import os
from functools import cache
from typing import Any

from ansible.errors import AnsibleParserError
from ansible.inventory.group import Group
from ansible.plugins.vars import BaseVarsPlugin
from ansible.template import trust_as_template

# The collection's root: plugins/vars/defaults.py -> ../../
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS_FILE = os.path.join(_ROOT, "settings.yml")
VERSIONS_FILE = os.path.join(_ROOT, "versions.yml")
PINS_KEY = "gpubring_versions"  # the section of versions.yml that holds the pins
# Ansible resolves this lazily, for each host, with the inventory's overrides at whatever level they are set.
MATRIX = "{{ gpubring_pins | combine(gpubring_versions | default({}, true), recursive=true) }}"


@cache
def _defaults(loader: Any) -> dict[str, Any]:
    settings = loader.load_from_file(SETTINGS_FILE, cache="all", unsafe=True, trusted_as_template=True) or {}
    versions = loader.load_from_file(VERSIONS_FILE, cache="all", unsafe=True) or {}
    options = settings.get("options") if isinstance(settings, dict) else None
    pins = versions.get(PINS_KEY) if isinstance(versions, dict) else None
    if not isinstance(options, dict) or not isinstance(pins, dict):
        raise AnsibleParserError(
            f"gpubring.core.defaults: expected `options:` in {SETTINGS_FILE} and `{PINS_KEY}:` in {VERSIONS_FILE}"
        )
    out = {
        name: spec["default"]
        for name, spec in options.items()
        if isinstance(spec, dict) and "default" in spec
    }
    out["gpubring_pins"] = pins
    out["gpubring_matrix"] = trust_as_template(MATRIX)
    return out


class VarsModule(BaseVarsPlugin):
    """Defaults for the group `all`; nothing for other groups or hosts."""

    # It keeps nothing between calls (the defaults are cached per loader above), so Ansible may keep one
    # instance: otherwise it resolves the plugin by name again for every host and task whose variables
    # it builds (get_with_context in ansible/plugins/loader.py, v2.19.14), 4.4 of 84.9 s of the main
    # process in gpubring's fleet profile (docs/fleet.md).
    is_stateless = True

    def get_vars(self, loader: Any, path: str, entities: Any, cache: bool = True) -> dict[str, Any]:
        super().get_vars(loader, path, entities)
        if not isinstance(entities, list):
            entities = [entities]
        data: dict[str, Any] = {}
        for entity in entities:
            if isinstance(entity, Group) and entity.name == "all":
                own = entity.get_vars()
                data.update({k: v for k, v in _defaults(loader).items() if k not in own})
        return data
