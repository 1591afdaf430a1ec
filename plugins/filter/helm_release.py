# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filters of the helm role: a platform role's release assembled from its three templates, and a
release completed with the fields it leaves out. The one place both are done: the helm role's tasks
call them (tasks/role_release.yml, release.yml, main.yml) and `gpubring plan` imports them
(cli/gpubring/releases.py), so a run and the plan assemble a release alike.

helm_release_assemble(head, values, objects) -> dict
    head is release.yml.j2 as parsed YAML: the typed release (roles/helm/meta/argument_specs.yml,
    entry point `release`) plus `enabled` and `values_overrides`; values is values.yml.j2 parsed (empty:
    no values); objects is manifests.yml.j2 parsed, {pre_manifests: [...], manifests: [...]} (empty:
    none). The result is the release the engine applies: the head without `enabled` and
    `values_overrides`, its `values` the values with `values_overrides` merged over them as
    combine(recursive=true) merges (mappings key by key, anything else replaced), and its
    `pre_manifests` and `manifests`. A part of another shape raises ReleaseShapeError, whose
    `template` names the file.

helm_release_complete(release, fields, defaults=None) -> dict
    The release over `defaults` (the site's helm_release_defaults) over `fields` (the engine's own,
    vars/main.yml __helm_release_fields), key by key: a field the release sets wins whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INTERNAL = ("enabled", "values_overrides")  # keys of release.yml.j2 that are not the engine's


class ReleaseShapeError(ValueError):
    """A template of a release rendered to something of the wrong shape."""

    def __init__(self, template: str, message: str) -> None:
        super().__init__(f"{template}: {message}")
        self.template = template
        self.message = message


def merge_values(left: Mapping[str, Any], right: Mapping[str, Any]) -> dict[str, Any]:
    """combine(recursive=true) of two mappings: mappings merge key by key, anything else is replaced."""
    out = dict(left)
    for key, value in right.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


def helm_release_assemble(head: Any, values: Any = None, objects: Any = None) -> dict[str, Any]:
    if not isinstance(head, Mapping):
        raise ReleaseShapeError("release.yml.j2", "expected a mapping (the release)")
    if not values:
        values = {}
    if not isinstance(values, Mapping):
        raise ReleaseShapeError("values.yml.j2", "expected a mapping (the chart's values)")
    overrides = head.get("values_overrides") or {}
    if not isinstance(overrides, Mapping):
        raise ReleaseShapeError("release.yml.j2", "values_overrides: expected a mapping (values to merge)")
    if not objects:
        objects = {}
    if not isinstance(objects, Mapping):
        raise ReleaseShapeError("manifests.yml.j2", "expected {pre_manifests: [...], manifests: [...]}")
    release = {key: value for key, value in head.items() if key not in INTERNAL}
    release["values"] = merge_values(values, overrides)
    release["pre_manifests"] = list(objects.get("pre_manifests") or [])
    release["manifests"] = list(objects.get("manifests") or [])
    return release


def helm_release_complete(
    release: Mapping[str, Any], fields: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return {**fields, **(defaults or {}), **release}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "helm_release_assemble": helm_release_assemble,
            "helm_release_complete": helm_release_complete,
        }
