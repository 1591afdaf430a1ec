"""`gpubring plan --manifests DIR`: every release's objects exactly as a run applies them, one file each.

For each planned Helm release (gpubring.releases) this writes DIR/<release>.yaml: the documents a run
applies, in its order (roles/helm/tasks/release.yml): the release's namespace, gpubring's objects the
chart reads (pre_manifests), the chart's own objects as `helm install` orders them, then gpubring's
custom resources (manifests). Helm's order is: the CRDs of crds/ (of the chart and of its enabled
subcharts), the pre-install hooks (by weight, then name), the templates' objects sorted by Helm's
InstallOrder (kinds it does not know last, alphabetically, each kind in template-path order), then
the post-install hooks. Hooks of other events (upgrade, delete, test) do not run on an install and
are left out.

The chart is rendered by Helm's own engine, offline (helm-python-sdk, the optional extra
`gpubring[render]`) with what a run gives helm: the release's name, namespace and values, as an
install, at the inventory's Kubernetes pin, with the API versions of that Kubernetes
(kube_api_versions.json, derived once from the OpenAPI schemas kubernetes-validate ships) and of
every CRD the planned charts bring. A chart is found locally only, never downloaded: the release's
`*_chart_path` (a .tgz or a folder), else `--charts DIR`, else INVENTORY/.gpubring/charts/ (both
holding <chart>-<version>/ folders or <chart>-<version>.tgz files). A release whose chart cannot be
found or rendered still gets its file with gpubring's own objects, and says why.

The files are written deterministically (keys sorted, no timestamps) so that two runs can be diffed;
values can hold secrets, so the folder is 0700 and each file 0600. No printing here: the command
prints the result.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpubring import paths

if TYPE_CHECKING:
    from gpubring.releases import Release

__all__ = [
    "ENGINE_HINT",
    "INSTALL_ORDER",
    "EngineMissing",
    "FolderError",
    "ManifestsResult",
    "ReleaseManifests",
    "builtin_api_versions",
    "chart_path_setting",
    "check_folder",
    "engine",
    "write_manifests",
]

ENGINE_HINT = "pip install 'gpubring[render]'"
CACHE_SUBDIR = Path(".gpubring") / "charts"
INDEX = ".gpubring-manifests.json"  # the files the last run wrote, so that a stale one is removed
_API_VERSIONS_FILE = Path(__file__).with_name("kube_api_versions.json")


class _SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (its C one where libyaml is there), but a plain `=` is the string "=", as
    in Go's YAML, not YAML 1.1's value tag that PyYAML cannot construct: the Prometheus Operator's
    AlertmanagerConfig CRD (kube-prometheus-stack 88.5.3 charts/crds) lists `- =` among matchTypes."""


_SafeLoader.add_constructor("tag:yaml.org,2002:value", yaml.SafeLoader.construct_scalar)
_SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

# Helm's install order by kind (helm.sh/helm/v4 pkg/release/util/kind_sorter.go, InstallOrder).
INSTALL_ORDER: tuple[str, ...] = (
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
_RANK = {kind: i for i, kind in enumerate(INSTALL_ORDER)}
# kube-prometheus-stack's CRDs (its `crds` subchart) serve these; charts ask for them to create
# ServiceMonitors and PrometheusRules.
_PROMETHEUS_OPERATOR_API = "monitoring.coreos.com/v1"


class EngineMissing(Exception):
    """helm-python-sdk, the optional extra gpubring[render], is not installed."""

    def __init__(self) -> None:
        super().__init__(f"rendering charts needs Helm's engine: {ENGINE_HINT}")


class FolderError(Exception):
    """The folder to write to (or to read charts from) is not usable."""


@dataclass(frozen=True)
class ReleaseManifests:
    """What was written for one release."""

    release: str
    chart: str  # "<chart> <version>", "" for a release of objects only
    file: str  # the file's name in the folder, "" when nothing was written
    objects: int  # documents in the file
    chart_objects: int  # of them, the chart's
    origin: str = ""  # where the chart was found: the *_chart_path setting, --charts, the cache
    problem: str = ""  # why the chart was not rendered ("" when it was, or when there is none)
    notes: tuple[str, ...] = ()

    @property
    def rendered(self) -> bool:
        return not self.problem


@dataclass(frozen=True)
class ManifestsResult:
    folder: Path
    kube_version: str
    releases: tuple[ReleaseManifests, ...]
    removed: tuple[str, ...] = ()  # files of an earlier run that no release writes now

    @property
    def unrendered(self) -> tuple[ReleaseManifests, ...]:
        return tuple(r for r in self.releases if r.problem)


# -- the engine, the folder, the API versions ------------------------------------------------------


def engine() -> Any:
    """The helm_python module (imported only here); EngineMissing without the extra."""
    try:
        import helm_python
    except ImportError:
        raise EngineMissing from None
    return helm_python


def check_folder(folder: Path) -> None:
    """FolderError when `folder` exists and is not a folder (nothing is created here)."""
    if folder.exists() and not folder.is_dir():
        raise FolderError(f"{folder}: exists and is not a folder")


def _key(version: str) -> tuple[int, int]:
    parts = re.findall(r"\d+", version)
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else (0, 0)


@cache
def _api_table() -> dict[str, dict[str, list[str]]]:
    data = json.loads(_API_VERSIONS_FILE.read_text(encoding="utf-8"))
    return {str(m): dict(v) for m, v in data["minors"].items()}


def builtin_api_versions(kube_version: str) -> tuple[str, ...]:
    """The group/versions, and group/version/Kind, that the API server of that Kubernetes serves by
    default (as Helm's .Capabilities.APIVersions lists them from a cluster): its minor's entry of
    kube_api_versions.json, else the newest older minor's, else the oldest's."""
    table = _api_table()
    want = _key(kube_version)
    minors = sorted(table, key=_key)
    older = [m for m in minors if _key(m) <= want]
    chosen = older[-1] if older else minors[0]
    out: set[str] = set()
    for gv, kinds in table[chosen].items():
        out.add(gv)
        out.update(f"{gv}/{kind}" for kind in kinds)
    return tuple(sorted(out))


def _crd_api_versions(docs: Iterable[Any]) -> set[str]:
    out: set[str] = set()
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc.get("spec") or {}
        kind = str((spec.get("names") or {}).get("kind", ""))
        for version in spec.get("versions") or []:
            if isinstance(version, Mapping) and version.get("served", True):
                gv = f"{spec.get('group')}/{version.get('name')}"
                out.update({gv, f"{gv}/{kind}"} if kind else {gv})
    return out


# -- finding a chart -------------------------------------------------------------------------------


_NAME = re.compile(r"^name:\s*(\S+)\s*$", re.MULTILINE)
_CHART_PATH = re.compile(r"^chart_path:\s*\{\{\s*(\w+)", re.MULTILINE)


@cache
def _chart_path_settings() -> dict[tuple[str, str], str]:
    """(role, release name) -> the role input that sets the release's chart_path, read from the
    roles' release.yml.j2 (`name: kueue` ... `chart_path: {{ schedulers_kueue_chart_path | ... }}`)."""
    out: dict[tuple[str, str], str] = {}
    for template in sorted(paths.roles_dir().glob("*/templates/releases/*/release.yml.j2")):
        text = template.read_text(encoding="utf-8")
        name, setting = _NAME.search(text), _CHART_PATH.search(text)
        if name and setting:
            role = template.relative_to(paths.roles_dir()).parts[0]
            out[(role, name.group(1).strip("\"'"))] = setting.group(1)
    return out


def chart_path_setting(release: Release) -> str:
    """The inventory setting that gives the release a local chart."""
    if release.role == "helm":
        return f"chart_path in the helm_releases entry {release.name}"
    return _chart_path_settings().get((release.role, release.name), f"the chart_path of {release.name}")


def _chart_name(release: Release) -> str:
    return release.chart.rstrip("/").rsplit("/", 1)[-1]


def _in_folder(folder: Path, chart: str, version: str) -> Path | None:
    """<chart>-<version>/ (with a Chart.yaml) or <chart>-<version>.tgz in `folder`; a version given
    with or without its leading v."""
    bare = version.removeprefix("v")
    for ver in dict.fromkeys((version, bare, f"v{bare}")):
        base = folder / f"{chart}-{ver}"
        if (base / "Chart.yaml").is_file():
            return base
        if base.with_name(base.name + ".tgz").is_file():
            return base.with_name(base.name + ".tgz")
    return None


@dataclass(frozen=True)
class _Found:
    path: Path | None
    origin: str
    notes: tuple[str, ...] = ()


def _find_chart(release: Release, folders: Sequence[tuple[Path, str]]) -> _Found:
    """The local chart of a release: its chart_path, else the first folder that holds it."""
    notes: list[str] = []
    setting = chart_path_setting(release)
    if release.source.get("kind") == "file":
        given = Path(str(release.source.get("copy_from", "")))
        if given.is_file() or (given / "Chart.yaml").is_file():
            return _Found(given, setting)
        notes.append(f"{setting} names {given}, which is not a chart here (a run needs it)")
    for folder, origin in folders:
        found = _in_folder(folder, _chart_name(release), release.version)
        if found is not None:
            return _Found(found, origin, tuple(notes))
    return _Found(None, "", tuple(notes))


# -- rendering -------------------------------------------------------------------------------------


def _missing_subcharts(chart: Any) -> list[str]:
    """The dependencies of Chart.yaml with no chart under charts/ (Helm refuses to install such a
    chart, whatever their conditions say)."""
    present = {str(d.get("name")) for d in chart.dependencies or []}
    return [
        f"{d.get('name')} {d.get('version', '')}".strip()
        for d in chart.metadata.get("dependencies") or []
        if str(d.get("name")) not in present
    ]


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = values
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _disabled_subcharts(chart: Any, merged: Mapping[str, Any]) -> set[str]:
    """The subcharts (by name or alias) whose condition is false in the coalesced values: Helm drops
    them, their crds/ included. The first condition path that holds a bool decides, as in Helm."""
    out: set[str] = set()
    for dep in chart.metadata.get("dependencies") or []:
        for path in str(dep.get("condition") or "").split(","):
            value = _lookup(merged, path.strip()) if path.strip() else None
            if isinstance(value, bool):
                if not value:
                    out.add(str(dep.get("alias") or dep.get("name")))
                break
    return out


def _chart_crds(chart: Any, disabled: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """(file, CRD) of the crds/ folders of the chart and its enabled subcharts, in Helm's order."""
    out: list[tuple[str, dict[str, Any]]] = []
    for entry in chart.crds or []:
        filename = str(entry.get("filename") or entry.get("name"))
        parts = filename.split("/")
        subs = {parts[i + 1] for i, p in enumerate(parts[:-1]) if p == "charts"}
        if subs & disabled:
            continue
        for doc in yaml.load_all(str(entry.get("data", "")), Loader=_SafeLoader):
            if isinstance(doc, dict) and doc:
                out.append((filename, doc))
    return out


def _hook_events(doc: Mapping[str, Any]) -> list[str] | None:
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    hooks = annotations.get("helm.sh/hook") if isinstance(annotations, Mapping) else None
    if hooks is None:
        return None
    return [h.strip().lower() for h in str(hooks).split(",")]


def _hook_weight(doc: Mapping[str, Any]) -> int:
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    try:
        return int(str(annotations.get("helm.sh/hook-weight", "0")))
    except ValueError:
        return 0


def _kind_rank(doc: Mapping[str, Any]) -> tuple[int, str]:
    kind = str(doc.get("kind", ""))
    return (_RANK[kind], "") if kind in _RANK else (len(_RANK), kind)


@dataclass
class _Chart:
    crds: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    pre_hooks: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    objects: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    post_hooks: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def ordered(self) -> list[tuple[str, dict[str, Any]]]:
        return [*self.crds, *self.pre_hooks, *self.objects, *self.post_hooks]


def _sorted_by_helm(rendered: Mapping[str, str]) -> tuple[_Chart, int]:
    """The rendered templates split and sorted as Helm's SortManifests does; also the number of hooks
    that an install does not run."""
    out = _Chart()
    other_hooks = 0
    hooks: list[tuple[str, dict[str, Any], list[str]]] = []
    for template in sorted(rendered):
        text = rendered[template]
        if template.endswith("NOTES.txt") or Path(template).name.startswith("_") or not text.strip():
            continue
        for doc in yaml.load_all(text, Loader=_SafeLoader):
            if not isinstance(doc, dict) or not doc:
                continue
            events = _hook_events(doc)
            if events is None:
                out.objects.append((template, doc))
            else:
                hooks.append((template, doc, events))
    out.objects.sort(key=lambda item: _kind_rank(item[1]))  # stable: template order within a kind
    hooks.sort(key=lambda item: _kind_rank(item[1]))  # Helm sorts hooks by kind, then runs by weight
    for template, doc, events in sorted(
        hooks, key=lambda h: (_hook_weight(h[1]), str((h[1].get("metadata") or {}).get("name", "")))
    ):
        if "pre-install" in events:
            out.pre_hooks.append((template, doc))
        elif "post-install" in events:
            out.post_hooks.append((template, doc))
        else:
            other_hooks += 1
    return out, other_hooks


def _render(
    helm: Any, chart: Any, release: Release, kube_version: str, api_versions: Sequence[str]
) -> dict[str, str]:
    from helm_python import _native

    opts = {
        "name": release.name,
        "namespace": release.namespace,
        "is_install": True,
        "kube_version": f"v{kube_version.lstrip('v')}",
        "api_versions": list(api_versions),
    }
    text = _native.call_string("helm_render", chart._raw(), json.dumps(release.values), json.dumps(opts))
    data = json.loads(text)
    return {str(k): str(v) for k, v in data.items()}


def _error(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass
class _Planned:
    release: Release
    found: _Found
    chart: Any = None
    problem: str = ""
    notes: list[str] = field(default_factory=list)
    crds: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _prepare(helm: Any, release: Release, folders: Sequence[tuple[Path, str]]) -> _Planned:
    label = f"{_chart_name(release)} {release.version}"
    found = _find_chart(release, folders)
    planned = _Planned(release, found, notes=list(found.notes))
    if found.path is None:
        planned.problem = f"{label}: no local chart (set {chart_path_setting(release)}, or --charts DIR)"
        return planned
    try:
        chart = helm.Chart.load(str(found.path))
    except helm.HelmError as exc:
        planned.problem = f"{label}: {found.path} is not a chart Helm can load ({_error(exc)})"
        return planned
    missing = _missing_subcharts(chart)
    if missing:
        planned.problem = (
            f"{label}: {found.path.name} lacks the subcharts its Chart.yaml names ({', '.join(missing)}); "
            "Helm refuses to install it without them"
        )
        chart.close()
        return planned
    meta = chart.metadata
    if str(meta.get("version", "")).removeprefix("v") != release.version.removeprefix("v"):
        planned.notes.append(
            f"{found.path.name} holds {meta.get('name')} {meta.get('version')}, not {release.version}"
        )
    try:
        merged = chart.merge_values(dict(release.values))
    except helm.HelmError as exc:
        planned.problem = f"{label}: Helm refuses the values ({_error(exc)})"
        chart.close()
        return planned
    planned.chart = chart
    planned.crds = _chart_crds(chart, _disabled_subcharts(chart, merged))
    return planned


def _document(template: str, obj: Mapping[str, Any]) -> str:
    text = yaml.dump(dict(obj), Dumper=_SafeDumper, sort_keys=True, default_flow_style=False, width=10_000)
    head = f"# Source: {template}\n" if template else ""
    return head + text


def _file_text(release: Release, label: str, origin: str, problem: str, chart: _Chart | None) -> str:
    header = [f"# gpubring plan --manifests: release {release.name} in namespace {release.namespace}"]
    if label:
        header.append(f"# chart {label}" + (f" from {origin}" if origin and not problem else ""))
    if problem:
        header.append(f"# chart NOT rendered: {problem}")
    docs: list[str] = []
    if release.namespace_object:
        docs.append(_document("gpubring: namespace", release.namespace_object))
    docs.extend(_document("gpubring: pre_manifests", o) for o in release.pre_manifests)
    if chart is not None:
        docs.extend(_document(t, o) for t, o in chart.ordered())
    docs.extend(_document("gpubring: manifests", o) for o in release.manifests)
    body = "---\n".join(docs)
    return "\n".join(header) + "\n" + ("---\n" + body if body else "")


def _write(folder: Path, name: str, text: str) -> None:
    """`text` to folder/name, mode 0600, replaced atomically."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, folder / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "release"


def write_manifests(
    releases: Sequence[Release],
    folder: Path,
    *,
    kube_version: str,
    inventory_root: Path,
    charts: Path | None = None,
) -> ManifestsResult:
    """Write folder/<release>.yaml for every release (see the module's docstring); EngineMissing
    without helm-python-sdk, FolderError when `folder` or `charts` is not a folder."""
    helm = engine()
    check_folder(folder)
    if charts is not None and not charts.is_dir():
        raise FolderError(f"{charts}: --charts expects a folder of <chart>-<version>/ or .tgz charts")
    folders = [(charts, "--charts")] if charts is not None else []
    cache_dir = inventory_root / CACHE_SUBDIR
    if cache_dir.is_dir():
        folders.append((cache_dir, f"INVENTORY/{CACHE_SUBDIR.as_posix()}"))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)

    planned = [
        _Planned(r, _Found(None, ""), problem=f"{r.name}: {r.deferred}")
        if r.deferred
        else _Planned(r, _Found(None, ""))
        if not r.chart
        else _prepare(helm, r, folders)
        for r in releases
    ]
    rendered = _render_all(helm, planned, kube_version)
    previous = _previous_files(folder)
    out = [_write_release(folder, p, rendered.get(i)) for i, p in enumerate(planned)]
    written = [r.file for r in out if r.file]
    removed = sorted(set(previous) - set(written))
    for name in removed:
        (folder / name).unlink(missing_ok=True)
    _write(folder, INDEX, json.dumps({"files": sorted(written)}, indent=1) + "\n")
    return ManifestsResult(folder, kube_version, tuple(out), tuple(removed))


def _render_all(helm: Any, planned: Sequence[_Planned], kube_version: str) -> dict[int, Mapping[str, str]]:
    """The rendered templates of every loadable chart, by index; each planned chart is closed."""
    api = set(builtin_api_versions(kube_version))
    for p in planned:
        api |= _crd_api_versions(doc for _, doc in p.crds)
        if p.release.chart and _chart_name(p.release) == "kube-prometheus-stack":
            api.add(_PROMETHEUS_OPERATOR_API)
    rendered: dict[int, Mapping[str, str]] = {}
    try:
        # Twice when a chart creates CRDs from its templates (Kueue): another chart may ask for them.
        for _ in range(2):
            versions = sorted(api)
            for i, p in enumerate(planned):
                if p.chart is not None and not p.problem:
                    try:
                        rendered[i] = _render(helm, p.chart, p.release, kube_version, versions)
                    except helm.HelmError as exc:
                        p.problem = f"{_chart_name(p.release)} {p.release.version}: Helm: {_error(exc)}"
            more = {v for out in rendered.values() for v in _templated_crd_api_versions(out)}
            if more <= api:
                break
            api |= more
    finally:
        for p in planned:
            if p.chart is not None:
                p.chart.close()
    return rendered


def _write_release(folder: Path, p: _Planned, rendered: Mapping[str, str] | None) -> ReleaseManifests:
    r = p.release
    if r.deferred:
        return ReleaseManifests(r.name, "", "", 0, 0, problem=p.problem)
    label = f"{_chart_name(r)} {r.version}" if r.chart else ""
    chart: _Chart | None = None
    if rendered is not None and not p.problem:
        try:
            chart, other_hooks = _sorted_by_helm(rendered)
        except yaml.YAMLError as exc:
            p.problem = f"{label}: the rendered chart is not YAML ({_error(exc)})"
        else:
            chart.crds = list(p.crds)
            if other_hooks:
                p.notes.append(f"{other_hooks} hook(s) of other events than install left out")
    name = f"{_safe_name(r.name)}.yaml"
    _write(folder, name, _file_text(r, label, p.found.origin, p.problem, chart))
    chart_objects = len(chart.ordered()) if chart is not None else 0
    return ReleaseManifests(
        r.name,
        label,
        name,
        len(r.objects()) + chart_objects,
        chart_objects,
        origin=p.found.origin if not p.problem else "",
        problem=p.problem,
        notes=tuple(p.notes),
    )


def _templated_crd_api_versions(rendered: Mapping[str, str]) -> set[str]:
    docs: list[Any] = []
    for template, text in rendered.items():
        if "CustomResourceDefinition" in text and not Path(template).name.startswith("_"):
            try:
                docs.extend(yaml.load_all(text, Loader=_SafeLoader))
            except yaml.YAMLError:
                continue
    return _crd_api_versions(docs)


def _previous_files(folder: Path) -> list[str]:
    """The files the last run wrote (its index), only plain names of this folder."""
    try:
        data = json.loads((folder / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    files = data.get("files") if isinstance(data, Mapping) else None
    return [f for f in files or [] if isinstance(f, str) and f == Path(f).name and f.endswith(".yaml")]
