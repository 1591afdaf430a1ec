"""Import the collection's module_utils the way Ansible does: through the gpubring.core collection path."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from gpubring.paths import collections_path


def module_utils(name: str) -> ModuleType:
    """plugins/module_utils/<name>.py as ansible_collections.gpubring.core.plugins.module_utils.<name>."""
    path = str(collections_path())
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("ansible_collections.gpubring.core.plugins.module_utils." + name)
