"""The inventory as gpubring sees it once read: hosts, groups, merged variables, where each came from.

Plain frozen dataclasses with no reading or checking of their own, so that the readers
(gpubring.inventory), the checks (gpubring.validation) and the planners
(gpubring.phases, gpubring.planning) can all name them without importing one another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpubring.versions import RuleResult
from gpubring.yamlfile import Problem

__all__ = ["Host", "Inventory", "InventoryError", "VarLayer"]


class InventoryError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems


@dataclass(frozen=True)
class VarLayer:
    """Variables from one place: the file (relative to the inventory), the key path prefix in it."""

    file: str
    prefix: str
    vars: Mapping[str, Any]

    def key_path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    port: int
    user: str | None
    groups: tuple[str, ...]
    vars: Mapping[str, Any]
    layers: tuple[VarLayer, ...] = field(default=(), repr=False, compare=False)

    def origin(self, key: str) -> tuple[str, str] | None:
        """(file, key path) of the place that set `key` for this host, or None when nothing did."""
        for layer in reversed(self.layers):
            if key in layer.vars:
                return layer.file, layer.key_path(key)
        return None


@dataclass(frozen=True)
class Inventory:
    root: Path
    hosts_file: Path
    hosts: dict[str, Host]
    groups: dict[str, tuple[str, ...]]
    settings: dict[str, Any]
    versions: dict[str, Any]
    phases: tuple[str, ...]
    phases_skipped_reason: str
    overridden: tuple[str, ...] = ()
    phases_check_only: tuple[str, ...] = ()
    rule_results: tuple[RuleResult, ...] = ()
    version_problems: tuple[Problem, ...] = ()
    # Variables that are no input of gpubring (the user's own), each with the first file that sets it:
    # `gpubring plan` lists them once, so a typo that validation cannot tell from one shows there.
    own_keys: tuple[tuple[str, str], ...] = ()

    def origin(self, host: str, key: str) -> tuple[str, str] | None:
        """(file, key path) of the place that set `key` for `host`, or None when nothing did."""
        return self.hosts[host].origin(key)

    def setting_origin(self, key: str) -> tuple[str, str]:
        """(file, key path) of the place that set the cluster-wide setting `key` (the first host's that
        sets it), or settings.yml's default when nothing did."""
        for name in self.hosts:
            found = self.origin(name, key)
            if found is not None:
                return found
        return "settings.yml", f"options.{key}.default"
