"""Cross-field inventory checks, one module per concern (for example kubelet_topology.py).

Every module in this package is imported before an inventory is validated (`registered()`). A
module registers its checks with the decorator `register_validator`; each check takes the loaded
`gpubring.model.Inventory` and returns a list of `gpubring.yamlfile.Problem` (file relative to the
inventory folder, key path, what was expected). `Inventory.origin(host, key)` names the file that set
a host's variable. The registry imports nothing from gpubring but the model, so a check may use
gpubring.specs and gpubring.paths without a cycle.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpubring.model import Inventory
    from gpubring.yamlfile import Problem

__all__ = ["VALIDATORS", "Validator", "register_validator", "registered"]

Validator = Callable[["Inventory"], list["Problem"]]
VALIDATORS: list[Validator] = []


def register_validator(func: Validator) -> Validator:
    """Decorator: run `func(inventory) -> list[Problem]` after the per-key checks of every load."""
    if func not in VALIDATORS:
        VALIDATORS.append(func)
    return func


_DISCOVERED = False


def registered() -> list[Validator]:
    """Every registered validator, after importing the modules of this package once per process."""
    global _DISCOVERED  # noqa: PLW0603 - import the plug-in modules once per process
    if not _DISCOVERED:
        _DISCOVERED = True
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
    return list(VALIDATORS)
