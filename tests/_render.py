"""Shared by the rendering tests: a play run on this machine, kubernetes-validate's schemas (the light
helpers, ansible_playbook among them, are in helpers.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes_validate import utils as kv_utils
from packaging.version import Version

from gpubring.inventory import Inventory
from helpers import ansible_playbook


def run_play(playbook: Path, inventory: Path, extra: Mapping[str, Any]) -> None:
    """Run `playbook` on `inventory` with `extra` as -e (written to extra.json beside it); it must pass."""
    extra_file = playbook.with_name("extra.json")
    extra_file.write_text(json.dumps(extra), encoding="utf-8")
    result = ansible_playbook("-i", inventory, "-e", f"@{extra_file}", playbook)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def nearest_schema_version(pinned: str, available: list[str]) -> str:
    """The kubernetes-validate schema for a Kubernetes version: same minor, else the newest older
    one, else the oldest shipped (validation of a newer cluster with an older schema is stricter)."""
    want = Version(pinned)
    versions = sorted({Version(v) for v in available})
    same = [v for v in versions if (v.major, v.minor) == (want.major, want.minor)]
    older = [v for v in versions if (v.major, v.minor) < (want.major, want.minor)]
    chosen = same[-1] if same else older[-1] if older else versions[0]
    return str(chosen)


def schema_version(inv: Inventory) -> str:
    """The kubernetes-validate schema for the inventory's pinned Kubernetes."""
    return nearest_schema_version(inv.versions["kubernetes"]["version"], kv_utils.all_versions())


def without_nulls(value: Any) -> Any:
    """`value` without its null fields: a null in a typed object is an unset field to the API
    server's decoder."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def validation_problems(
    objects: Iterable[tuple[str, Mapping[str, Any]]],
    schema: str,
    label: Callable[[str, Mapping[str, Any]], str],
) -> list[str]:
    """Each rendered object ((where, object): "gpubring" or the chart's) held to the CRD of a pinned
    release that serves it, else to Kubernetes' own schema of `schema`'s version; one line per problem,
    led by `label(where, object)`."""
    import kubernetes_validate

    import upstream

    crds = upstream.crds()
    problems: list[str] = []
    for where, obj in objects:
        key = (str(obj.get("apiVersion")), str(obj.get("kind")))
        if key in crds:
            errors = upstream.crd_errors(obj)
            if where != "gpubring":
                # Helm (and the API server) drop metadata.namespace of a cluster-scoped object a chart
                # names a namespace for; gpubring's own objects must get it right.
                errors = [e for e in errors if not e.endswith("is cluster-scoped")]
            problems += [f"{label(where, obj)}: {e}" for e in errors]
            continue
        try:
            kubernetes_validate.validate(without_nulls(obj), schema, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{label(where, obj)}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{label(where, obj)}: no CRD of a pinned release serves {key}")
    return problems
