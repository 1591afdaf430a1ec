"""The upstream chart values and CRDs the rendering tests check against.

They live outside the repository (../shared/upstream, one folder per project with a SOURCE.md saying
where each file comes from); .ci/run exports GPUBRING_UPSTREAM_DIR. Without it the tests that need
them skip, naming the variable.

Checks offered here:
- `crd_validator(obj)`: the openAPIV3Schema of the CRD that serves the object's apiVersion/kind, as a
  jsonschema validator. Kubernetes' x-kubernetes-* keywords are not JSON Schema and are ignored,
  except that an object schema with `properties` and no `additionalProperties` is closed (unless it
  says x-kubernetes-preserve-unknown-fields): the API server prunes or, with strict field
  validation, rejects an unknown field, and a typo must not pass.
- `unknown_value_paths(values, upstream)`: the key paths of rendered Helm values that the chart's
  values.yaml does not have (Helm ignores a mistyped key silently).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

ENV = "GPUBRING_UPSTREAM_DIR"

# Release name -> upstream folder with the chart's values.yaml. None: no upstream values here.
CHART_VALUES: dict[str, str | None] = {
    "gpu-operator": "gpu-operator",
    "network-operator": "network-operator",
    "volcano": "volcano",
    "kai-scheduler": "kai-scheduler",
    "kueue": "kueue",
    "nvidia-dra-driver-gpu": "dra-driver-gpu",
    "kube-prometheus-stack": None,
    "prometheus-adapter": None,
}

# Free-form maps: below these keys a chart passes anything through to Kubernetes objects (or to a
# config file it does not interpret), so their contents are not chart keys to check.
FREE_FORM_KEYS = frozenset(
    {
        "labels",
        "annotations",
        "podLabels",
        "podAnnotations",
        "additionalLabels",  # object metadata
        "nodeSelector",
        "tolerations",
        "affinity",  # scheduling (Kubernetes types)
        "env",
        "resources",
        "securityContext",
        "podSecurityContext",
        "containerSecurityContext",  # containers
        "featureGates",  # map of gate -> bool
        "data",  # ConfigMap data the chart creates verbatim
    }
)


def upstream_dir() -> Path:
    """The upstream folder, or skip the calling test with a reason that names GPUBRING_UPSTREAM_DIR."""
    value = os.environ.get(ENV, "")
    if not value:
        pytest.skip(
            f"{ENV} is not set: it names the folder of upstream chart values and CRDs "
            "(.ci/run sets it to ../shared/upstream)"
        )
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"{ENV}={value} is not a folder")
    return path


@cache
def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def chart_values(release: str) -> dict[str, Any] | None:
    """The upstream values.yaml of a release's chart, or None when none is stored."""
    folder = CHART_VALUES.get(release)
    if folder is None:
        return None
    data = _load_yaml(upstream_dir() / folder / "values.yaml")
    assert isinstance(data, dict), f"{folder}/values.yaml is not a mapping"
    return data


def _close_objects(schema: Any) -> Any:
    """A copy of an OpenAPI v3 schema for jsonschema: x-kubernetes-* dropped, objects closed."""
    if isinstance(schema, list):
        return [_close_objects(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: _close_objects(v) for k, v in schema.items() if not str(k).startswith("x-kubernetes-")}
    # nullable is OpenAPI, not JSON Schema: null is then a valid value of the declared type.
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    for key in ("properties", "patternProperties"):
        if key in out:
            out[key] = {name: _close_objects(sub) for name, sub in schema[key].items()}
    return out


@dataclass(frozen=True)
class Crd:
    file: str
    group: str
    kind: str
    version: str
    namespaced: bool
    schema: dict[str, Any]


@cache
def crds() -> dict[tuple[str, str], Crd]:
    """(apiVersion, kind) -> the CRD version that serves it, from every */crds/*.yaml upstream."""
    out: dict[tuple[str, str], Crd] = {}
    for path in sorted(upstream_dir().glob("*/crds/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                # Two copies of one CRD (the GPU Operator bundles the DRA driver's): the first wins,
                # and the folders sort so the owning project's comes first for ComputeDomain.
                out.setdefault(
                    key,
                    Crd(
                        file=str(path.relative_to(upstream_dir())),
                        group=spec["group"],
                        kind=spec["names"]["kind"],
                        version=version["name"],
                        namespaced=spec.get("scope") == "Namespaced",
                        schema=_close_objects(version["schema"]["openAPIV3Schema"]),
                    ),
                )
    return out


def crd_errors(obj: Mapping[str, Any]) -> list[str]:
    """Schema violations of a custom resource against its upstream CRD (KeyError: no such CRD)."""
    crd = crds()[(str(obj.get("apiVersion")), str(obj.get("kind")))]
    body = {k: v for k, v in obj.items() if k != "metadata"}
    schema = {k: v for k, v in crd.schema.items()}
    schema["properties"] = {k: v for k, v in crd.schema.get("properties", {}).items() if k != "metadata"}
    errors = [
        f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in Draft202012Validator(schema).iter_errors(body)
    ]
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        errors.append("metadata.name: required")
    if crd.namespaced != bool(meta.get("namespace")):
        errors.append(
            f"metadata.namespace: {crd.kind} is {'namespaced' if crd.namespaced else 'cluster-scoped'}"
        )
    return errors


def unknown_value_paths(values: Any, upstream: Any, path: str = "") -> Iterator[str]:
    """Key paths of `values` that `upstream` (a chart's values.yaml) does not have.

    Under a free-form key (FREE_FORM_KEYS), an empty map or a null in upstream, or where upstream
    holds a list or a scalar, anything goes: the chart passes it on as it is."""
    if not isinstance(values, Mapping) or not isinstance(upstream, Mapping):
        return
    for key, value in values.items():
        here = f"{path}.{key}" if path else str(key)
        if key not in upstream:
            yield here
            continue
        below = upstream[key]
        if key in FREE_FORM_KEYS or below is None or below == {}:
            continue
        yield from unknown_value_paths(value, below, here)
