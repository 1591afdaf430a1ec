"""The upstream charts at the versions gpubring pins, which the rendering tests check against.

They live outside the repository: GPUBRING_UPSTREAM_DIR (.ci/run sets it to ../shared/upstream) has
charts/<chart>-<version>/ for every chart at the version versions.yml pins (charts/SOURCES.md says
which tag each comes from). Without the variable the tests that need them skip, naming it; a pinned
chart with no folder there is a skip that names the folder, never a silent pass.

Checks offered here:
- `render(chart_dir, values, ...)`: a chart rendered by Helm's own engine (helm-python-sdk: the Go
  library, no helm binary) at the pinned Kubernetes version and the API versions the cluster serves.
- `crd_errors(obj)`: an object against the openAPIV3Schema of the CRD of the pinned release that
  serves its apiVersion/kind. Kubernetes' x-kubernetes-* keywords are not JSON Schema and are ignored,
  except that an object schema with `properties` and no `additionalProperties` is closed (unless it
  says x-kubernetes-preserve-unknown-fields): the API server prunes or, with strict field
  validation, rejects an unknown field, and a typo must not pass.
- `unknown_value_paths(values, chart_values)`: the key paths of rendered Helm values that the pinned
  chart's values (its values.yaml with its subcharts') do not have: Helm ignores a mistyped key.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from gpubring import catalog, versions

ENV = "GPUBRING_UPSTREAM_DIR"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (its C one where libyaml is there: the CRDs are megabytes), but a plain `=`
    is the string "=" (as in Go's YAML), not YAML 1.1's value tag that PyYAML cannot construct
    (Calico's CRDs list `=` among operators)."""


_Loader.add_constructor("tag:yaml.org,2002:value", yaml.SafeLoader.construct_scalar)  # type: ignore[arg-type]

# Every release with a chart, as the roles declare it (gpubring.catalog), by release name: its chart
# folder under $GPUBRING_UPSTREAM_DIR/charts is <chart>-<version as the release renders it at the pin>.
CHART_RELEASES: dict[str, catalog.DeclaredRelease] = {
    r.name: r for r in catalog.declared_releases() if r.chart
}

# Pinned folders that are not a Helm release of gpubring: (pin path, folder pattern).
NOT_RELEASES: tuple[tuple[str, str], ...] = (
    # Calico's CRDs: from v3.32 a chart of their own, rendered and applied server-side before the
    # tigera-operator release (roles/cni/tasks/calico_crds.yml), at the same tag.
    ("cni.calico", "crd.projectcalico.org.v1-v{}"),
    # The nv-ipam CRDs the Network Operator creates itself when it reconciles a NicClusterPolicy.
    ("network_operator.chart", "network-operator-{}-nv-ipam-crds"),
    # Flannel is applied from its manifest (roles/cni/tasks/flannel.yml), not as a Helm release.
    ("cni.flannel", "flannel-v{}"),
    # The MPI operator is applied from its release manifest (roles/mpi_operator), not a chart.
    ("mpi_operator.version", "mpi-operator-v{}"),
)

# Charts kept under $GPUBRING_UPSTREAM_DIR/charts in a folder of another name (charts/SOURCES.md):
# the DRA driver's chart, renamed dra-driver-nvidia-gpu at v0.4.0, keeps its old name's folder.
FOLDER_NAMES: dict[str, str] = {"dra-driver-nvidia-gpu": "nvidia-dra-driver-gpu"}


def folder_name(chart: str, version: str) -> str:
    """The folder under charts/ of a chart (its own name, not an oci:// reference) at a version."""
    return f"{FOLDER_NAMES.get(chart, chart)}-{version}"


# The chart folders under $GPUBRING_UPSTREAM_DIR/charts of each pin: (pin path, folder pattern), the
# releases' in the order the phases apply them, then the others.
PINNED_FOLDERS: tuple[tuple[str, str], ...] = (
    *(
        (r.pin, folder_name(r.chart_name, r.version.replace(r.pinned, "{}", 1)))
        for r in CHART_RELEASES.values()
    ),
    *NOT_RELEASES,
)

# Release name -> the pin of its chart version.
RELEASE_PINS: dict[str, str] = {name: r.pin for name, r in CHART_RELEASES.items()}

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
            f"{ENV} is not set: it names the folder of the upstream charts at the pinned versions "
            "(.ci/run sets it to ../shared/upstream)"
        )
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"{ENV}={value} is not a folder")
    return path


def pinned_folders(matrix: Mapping[str, Any] | None = None) -> list[str]:
    """The chart folder names of the pins (the pinned matrix unless another is given)."""
    matrix = matrix if matrix is not None else versions.load_pinned()
    return [pattern.format(versions.get_path(matrix, pin)) for pin, pattern in PINNED_FOLDERS]


def chart_dir(release: str, version: str, *, to_render: bool = True) -> Path:
    """The chart of a release at a version, or skip naming the folder that is missing (and, to render
    it, the subcharts it lacks)."""
    folder = upstream_dir() / "charts" / folder_name(release, version)
    if not (folder / "Chart.yaml").is_file():
        pytest.skip(
            f"{release} {version}: no chart folder charts/{folder.name} in {ENV}; add it "
            "(charts/SOURCES.md says where each comes from)"
        )
    missing = missing_subcharts(folder) if to_render else []
    if missing:
        pytest.skip(
            f"{release} {version}: charts/{folder.name} lacks the subcharts its Chart.yaml names "
            f"({', '.join(missing)}), which Helm needs to render it; add them under its charts/"
        )
    return folder


def missing_subcharts(folder: Path) -> list[str]:
    """The dependencies of a chart that are neither a folder nor an archive under its charts/ (Helm
    refuses to render such a chart, whatever their conditions say)."""
    meta = yaml.safe_load((folder / "Chart.yaml").read_text(encoding="utf-8")) or {}
    present = {p.name for p in (folder / "charts").glob("*")} if (folder / "charts").is_dir() else set()
    missing = []
    for dep in meta.get("dependencies") or []:
        name, version = str(dep.get("name")), str(dep.get("version", ""))
        if name not in present and f"{name}-{version}.tgz" not in present:
            missing.append(f"{name} {version}".strip())
    return missing


def _chart(folder: Path) -> Any:
    helm_python = pytest.importorskip(
        "helm_python", reason="helm-python-sdk renders the charts: pip install -e '.[test]'"
    )
    return helm_python.Chart.load(str(folder))


@cache
def _chart_values(folder: Path) -> dict[str, Any]:
    values = _chart(folder).merge_values({})
    assert isinstance(values, dict), f"{folder.name}: values are not a mapping"
    return values


def chart_values(release: str, version: str | None = None) -> dict[str, Any]:
    """The values of a release's chart at the pinned version (or `version`): its values.yaml with
    its subcharts' values under their names, as Helm coalesces them."""
    declared = CHART_RELEASES[release]
    return _chart_values(chart_dir(declared.chart_name, version or declared.version, to_render=False))


@cache
def builtin_api_versions(kube_version: str) -> tuple[str, ...]:
    """The group/versions the API server of that Kubernetes version serves by default: every resource
    kind of its OpenAPI schema (kubernetes-validate's copy), alpha APIs left out (off by default)."""
    import kubernetes_validate

    from _render import nearest_schema_version

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    schema = nearest_schema_version(kube_version.lstrip("v"), kubernetes_validate.utils.all_versions())
    folder = base / f"v{schema}-local-strict"
    data = json.loads((folder / "_definitions.json").read_text(encoding="utf-8"))
    served = set()
    for definition in data["$defs"].values():
        kinds = definition.get("x-kubernetes-group-version-kind") or []
        if len(kinds) == 1:  # a resource kind (shared types such as DeleteOptions list every version)
            gvk = kinds[0]
            served.add(f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"])
    return tuple(sorted(v for v in served if "alpha" not in v))


def render(
    folder: Path,
    values: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    kube_version: str,
    api_versions: tuple[str, ...] = (),
) -> list[tuple[str, dict[str, Any]]]:
    """(template, object) for every object a chart renders, by Helm's engine, as `helm install` would
    at that Kubernetes version with those extra API versions served (.Capabilities)."""
    from helm_python import _native

    opts = {
        "name": name,
        "namespace": namespace,
        "is_install": True,
        "kube_version": f"v{kube_version.lstrip('v')}",
        # The SDK's offline render knows no API version at all (`helm template` would assume its own
        # client's set): give it the pinned Kubernetes' built-in ones besides the CRDs' that it is told.
        "api_versions": sorted({*builtin_api_versions(kube_version), *api_versions}),
    }
    chart = _chart(folder)
    manifests = json.loads(
        _native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(opts))
    )
    out: list[tuple[str, dict[str, Any]]] = []
    for template, text in sorted(manifests.items()):
        if not template.endswith((".yaml", ".yml", ".tpl")) or not text.strip():
            continue
        out.extend((template, doc) for doc in yaml.safe_load_all(text) if isinstance(doc, dict) and doc)
    return out


def render_release(
    folder: Path, release: Any, kube_version: object, api_versions: tuple[str, ...] = ()
) -> list[tuple[str, dict[str, Any]]]:
    """render() of a planned release (gpubring.releases.Release) through the chart in folder: its
    values, name and namespace, at that Kubernetes version (render leaves the values untouched)."""
    return render(
        folder,
        release.values,
        name=release.name,
        namespace=release.namespace,
        kube_version=str(kube_version),
        api_versions=api_versions,
    )


def _close_objects(schema: Any) -> Any:
    """A copy of an OpenAPI v3 schema for jsonschema: x-kubernetes-* dropped, objects closed."""
    if isinstance(schema, list):
        return [_close_objects(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    # Property maps are closed once, name by name, below: a map of names is not itself a schema (and
    # closing each level twice made the work double with every level of nesting).
    out = {
        k: _close_objects(v)
        for k, v in schema.items()
        if not str(k).startswith("x-kubernetes-") and k not in _PROPERTY_MAPS
    }
    # nullable is OpenAPI, not JSON Schema: null is then a valid value of the declared type.
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    # OpenAPI v3.0 (a CRD's schema) says exclusiveMinimum/exclusiveMaximum: true beside minimum/maximum;
    # JSON Schema 2020-12 takes the bound itself there (KAI's SchedulingShard goMemLimitRatio).
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        # (a boolean is popped whatever its value: false says nothing more than the bound itself)
        if isinstance(out.get(exclusive), bool) and out.pop(exclusive) and bound in out:
            out[exclusive] = out.pop(bound)
    for key in _PROPERTY_MAPS:
        if key in schema:
            out[key] = {name: _close_objects(sub) for name, sub in schema[key].items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


_PROPERTY_MAPS = ("properties", "patternProperties")


@dataclass(frozen=True)
class Crd:
    file: str
    group: str
    kind: str
    version: str
    namespaced: bool
    schema: dict[str, Any]
    storage: bool = False  # the version the API server stores (a CRD has exactly one)


def _crd_docs(folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The CRDs a chart folder holds as plain files (crds/, crd/, a CRD-only folder); templated CRDs
    come from rendering the chart (`crds()`)."""
    for path in sorted(folder.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        if "CustomResourceDefinition" not in text or "{{" in text:
            continue
        for doc in yaml.load_all(text, Loader=_Loader):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                yield str(path.relative_to(folder.parent)), doc


@cache
def crds() -> dict[tuple[str, str], Crd]:
    """(apiVersion, kind) -> the CRD version that serves it, from every pinned chart: its CRD files, or
    for a chart that ships them only as templates (Kueue), what it renders with its default values."""
    out: dict[tuple[str, str], Crd] = {}
    matrix = versions.load_pinned()
    found: list[tuple[str, dict[str, Any]]] = []
    for name in pinned_folders(matrix):
        folder = upstream_dir() / "charts" / name
        if not folder.is_dir():
            continue
        files = list(_crd_docs(folder))
        found.extend(files)
        if not files and (folder / "Chart.yaml").is_file():  # CRDs as templates only (Kueue)
            kube = str(matrix["kubernetes"]["version"])
            objects = render(folder, {}, name=name, namespace="gpubring-crds", kube_version=kube)
            found.extend(
                (f"{name}/{t}", o) for t, o in objects if o.get("kind") == "CustomResourceDefinition"
            )
    for file, doc in found:
        spec = doc["spec"]
        for version in spec["versions"]:
            if not version.get("served", True) or "schema" not in version:
                continue
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            # Two copies of one CRD (the GPU Operator bundles NFD's, so does the Network Operator):
            # the first wins.
            out.setdefault(key, _crd(file, spec, version))
    return out


def _crd(file: str, spec: Mapping[str, Any], version: Mapping[str, Any]) -> Crd:
    """One served version of a CRD's spec, its schema closed as the API server prunes."""
    return Crd(
        file=file,
        group=spec["group"],
        kind=spec["names"]["kind"],
        version=version["name"],
        namespaced=spec.get("scope") == "Namespaced",
        schema=_close_objects(version["schema"]["openAPIV3Schema"]),
        storage=bool(version.get("storage", False)),
    )


def _allows_null(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return kind is None or kind == "null" or (isinstance(kind, list) and "null" in kind)


def as_stored(value: Any, schema: Any) -> Any:
    """The object as the API server stores it before validating a custom resource: a null where the
    schema is not nullable is pruned, then a missing property with a `default` gets it (CRD
    structural schemas: "Defaulting and Nullable")."""
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, list):
        return [as_stored(item, schema.get("items")) for item in value]
    if not isinstance(value, Mapping):
        return value
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    out: dict[str, Any] = {}
    for key, item in value.items():
        sub = props.get(key, extra if isinstance(extra, Mapping) else None)
        if item is None and isinstance(sub, Mapping) and not _allows_null(sub):
            continue
        out[key] = as_stored(item, sub)
    for key, sub in props.items():
        if key not in out and isinstance(sub, Mapping) and "default" in sub:
            out[key] = as_stored(copy.deepcopy(sub["default"]), sub)
    return out


def crd_from_file(path: Path) -> dict[tuple[str, str], Crd]:
    """(apiVersion, kind) -> Crd of a CRD file outside the pinned charts (tests/fixtures/crds)."""
    out: dict[tuple[str, str], Crd] = {}
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if not doc or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        for version in spec["versions"]:
            if version.get("served", True) and "schema" in version:
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                out[key] = _crd(path.name, spec, version)
    return out


def crd_errors(obj: Mapping[str, Any], crd: Crd | None = None) -> list[str]:
    """Schema violations of a custom resource against the CRD of the pinned release (or `crd`;
    KeyError: no such CRD), after the API server's pruning of nulls and defaulting."""
    if crd is None:
        crd = crds()[(str(obj.get("apiVersion")), str(obj.get("kind")))]
    body = as_stored({k: v for k, v in obj.items() if k != "metadata"}, crd.schema)
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
