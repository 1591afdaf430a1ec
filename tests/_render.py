"""Shared by the rendering tests: a play run on this machine, kubernetes-validate's schemas (the light
helpers, ansible_playbook among them, are in helpers.py)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes_validate import utils as kv_utils
from packaging.version import Version

from gpubring.inventory import Inventory
from gpubring.releases import Release, plan_releases
from helpers import ansible_playbook

# The folder where planned_releases keeps what it rendered for this test session (conftest.py makes
# it when the session starts, xdist's workers inherit it, it goes when the session ends).
RELEASES_CACHE_ENV = "GPUBRING_TEST_RELEASES_CACHE"


def _inventory_key(root: Path) -> str:
    """The inventory's folder and every file in it (name and bytes; its .gpubring/ left out)."""
    digest = hashlib.sha256(str(root.resolve()).encode())
    for path in sorted(root.rglob("*")):
        if ".gpubring" in path.relative_to(root).parts or not path.is_file():
            continue
        digest.update(b"\0" + str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


def planned_releases(inv: Inventory) -> list[Release]:
    """plan_releases(inv) for an inventory as load_inventory read it (unchanged since), rendered once
    per test session: the sample and the variants are planned by a dozen test files, each render
    taking seconds. The first call renders and keeps a pickle in the session's folder (keyed by the
    inventory's files, so an edited copy is a new key; a lock makes xdist's other worker wait rather
    than render it too); every call hands back a fresh copy, so what a test changes in its releases
    changes nothing for another. Outside a session with that folder, it renders every time."""
    folder = os.environ.get(RELEASES_CACHE_ENV, "")
    if not folder or not Path(folder).is_dir():
        return plan_releases(inv)
    path = Path(folder) / f"releases-{_inventory_key(inv.root)}.pickle"
    with open(path.with_suffix(".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            partial = path.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(plan_releases(inv)))
            partial.replace(path)
    releases: list[Release] = pickle.loads(path.read_bytes())
    return releases


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
