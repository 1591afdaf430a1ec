"""`gpubring bundle INVENTORY DIR`: what an offline site needs, fetched where the network is (issue 25).

The bundle's layout (the contract of its parts; gpubring.bundle.apt writes DIR/apt/<distro>-<codename>/):

    DIR/manifest.json          every entry: kind, name, version, source, sha256, size, path, status, reason
    DIR/files/<path>           the files the roles download, at the path gpubring_binary_mirror serves
    DIR/apt/<path>             the apt keys and keyring packages the roles download, at the path under
                               gpubring_apt_mirror
    DIR/charts/*.tgz, index.yaml   a classic Helm repository (gpubring_chart_mirror=http://HOST/charts)
    DIR/images/*.tar           images saved by skopeo, crane or ctr (when one is on PATH)
    DIR/hauler-manifest.yaml   the same lists as Hauler content (gpubring.bundle.hauler)

What is planned comes from gpubring.downloads (the roles' own expressions, rendered with the inventory
and with mirrors on a reserved name so that each URL shows its path under its mirror): plan_entries
needs no network, and tests/test_downloads.py checks every download has its entry. What cannot be
fetched from here is listed in manifest.json as missing, with its source and the real error, and the
rest goes on; the command exits 0 then (non-zero only for bad input). A second run re-downloads nothing
whose file still matches the manifest's sha256, and resumes a file an interrupted run left half done.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpubring import downloads
from gpubring.bundle import charts as chart_files
from gpubring.bundle import fetch, hauler, images
from gpubring.bundle.manifest import Entry, Manifest, ManifestError, sha256_of

if TYPE_CHECKING:
    from gpubring.inventory import Inventory

__all__ = [
    "PARTS",
    "BundleError",
    "Output",
    "Planned",
    "Result",
    "build",
    "check_folder",
    "parse_parts",
    "plan",
    "plan_entries",
]

# The parts a build can be asked for (`gpubring bundle --only`): all of them by default.
PARTS = ("apt", "files", "charts", "images")
FILE_KINDS = ("file", "apt-source")
APT_KINDS = ("apt", "apt-repo-missing")  # gpubring.bundle.apt's entries
APT_REPO_REASON = (
    "an apt repository the roles add: the bundle's apt part mirrors the packages a run installs from it"
)


class BundleError(Exception):
    """Bad input (the folder, an earlier manifest): one line, before anything is fetched."""


def parse_parts(text: str, what: str = "--only") -> tuple[str, ...]:
    """The parts of PARTS named in `text` (comma-separated, each once, in the order given); BundleError
    naming `what` for an unknown part or none."""
    parts = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise BundleError(
            f"{what} {text!r}: expected one or more of {', '.join(PARTS)}, comma-separated"
            + (f" (not a part: {', '.join(unknown)})" if unknown else "")
        )
    return parts


@dataclass(frozen=True)
class Planned:
    """One entry the build fetches (its path planned, status still missing), and where from."""

    entry: Entry
    url: str = ""  # what to download, for files
    local: str = ""  # a chart the inventory gives as a file or folder (its *_chart_path)


def _file_entry(d: downloads.Download, folder: str, kind: str) -> Planned:
    rel = downloads.mirror_path(d) or f"unmirrored/{d.name or 'file'}"
    return Planned(Entry(kind, d.name, d.version, d.upstream, path=f"{folder}/{rel}"), url=d.upstream)


def _planned(d: downloads.Download) -> Planned:
    if d.kind == "file":
        return _file_entry(d, "files", "file")
    if d.kind == "apt" and not d.repository:
        return _file_entry(d, "apt", "apt-source")
    if d.kind == "apt":
        name = d.upstream.split("://", 1)[-1].rstrip("/")  # host and path: a repository has no file name
        return Planned(Entry("apt-repo", name, d.version, d.upstream, reason=APT_REPO_REASON))
    if d.kind == "chart":
        local = d.source.removeprefix("file ") if d.source.startswith("file ") else ""
        entry = Entry("chart", d.name, d.version, d.upstream, path=f"charts/{d.name}-{d.version}.tgz")
        return Planned(entry, local=local)
    return Planned(
        Entry("image", d.upstream, d.version, d.upstream, path=f"images/{images.file_name(d.upstream)}")
    )


def plan_entries(found: Sequence[downloads.Download]) -> list[Planned]:
    """The bundle's entries for the downloads of a scan with PROBE_MIRRORS as overrides (one entry per
    kind, source and version), in the scan's order. No network."""
    out: dict[tuple[str, str, str], Planned] = {}
    for d in found:
        p = _planned(d)
        out.setdefault(p.entry.key, p)
    return list(out.values())


def plan(inv: Inventory, notes: list[str] | None = None) -> list[Planned]:
    """plan_entries of the inventory's downloads (gpubring.downloads.scan, its planned releases), the
    apt sources and files of every OS release the bundle carries included (a repository's URL names its
    release: debian12, debian13). A release whose expressions do not render is said in `notes`."""
    from gpubring.bundle import packages
    from gpubring.releases import ReleaseRenderError

    found = list(downloads.scan(inv, downloads.PROBE_MIRRORS))
    for release in packages.target_releases(inv):
        try:
            found.extend(downloads.url_downloads(inv, downloads.PROBE_MIRRORS, release.facts()))
        except ReleaseRenderError as exc:
            if notes is not None:
                notes.append(f"files and apt sources of {release.key}: not listed ({exc})")
    return plan_entries(found)


# -- output -------------------------------------------------------------------------------------------


class Output:
    """Plain lines: `fetching LABEL` per download. The command layer gives a terminal a progress bar
    (gpubring.commands.bundle's subclass: rich stays above this layer, tests/test_layers.py)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    @contextmanager
    def progress(self, label: str) -> Iterator[fetch.Progress | None]:
        self.say(f"fetching {label}")
        yield None


@dataclass
class Result:
    folder: Path
    manifest: Manifest
    notes: list[str] = field(default_factory=list)

    @property
    def fetched(self) -> list[Entry]:
        return [e for e in self.manifest.entries if e.status == "fetched"]

    @property
    def missing(self) -> list[Entry]:
        return [e for e in self.manifest.entries if e.status != "fetched"]


# -- the build ----------------------------------------------------------------------------------------


def check_folder(folder: Path) -> None:
    """BundleError unless `folder` is (or can be made) a writable folder."""
    if folder.exists() and not folder.is_dir():
        raise BundleError(f"{folder}: exists and is not a folder (expected the bundle's folder)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"{folder}: cannot create the bundle's folder ({exc.strerror or exc})") from None
    probe = folder / ".gpubring-bundle-write-test"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise BundleError(f"{folder}: not writable ({exc.strerror or exc})") from None


def _reusable(previous: Manifest | None, entry: Entry, folder: Path) -> Entry | None:
    """The earlier run's entry when its file is still there with the recorded sha256."""
    old = previous.previous(entry) if previous is not None else None
    if old is None or old.status != "fetched" or not old.path or old.path != entry.path:
        return None
    path = folder / old.path
    try:
        return old if path.is_file() and sha256_of(path) == old.sha256 else None
    except OSError:
        return None


def _fetch_file(p: Planned, folder: Path, previous: Manifest | None, out: Output) -> Entry:
    entry = p.entry
    if (kept := _reusable(previous, entry, folder)) is not None:
        return kept
    assert entry.path is not None
    try:
        with out.progress(entry.source) as progress:
            digest, size = fetch.download(p.url, folder / entry.path, progress=progress)
    except fetch.FetchError as exc:
        return entry.missing(str(exc))
    return entry.fetched(entry.path, digest, size)


def _local_chart(source: Path, dest: Path) -> None:
    if source.is_file():
        shutil.copyfile(source, dest)
    elif (source / "Chart.yaml").is_file():
        chart_files.package(source, dest)
    else:
        raise chart_files.ChartError(f"{source}: not a chart (.tgz, or a folder with Chart.yaml)")


def _given(charts_dir: Path | None, entry: Entry) -> Path | None:
    if charts_dir is None:
        return None
    from gpubring.manifests import _in_folder  # the one lookup of <chart>-<version>/ or .tgz

    return _in_folder(charts_dir, entry.name, entry.version)


def _fetch_chart(
    p: Planned, folder: Path, charts_dir: Path | None, previous: Manifest | None, out: Output
) -> Entry:
    entry = p.entry
    assert entry.path is not None
    dest = folder / entry.path
    local = Path(p.local) if p.local else _given(charts_dir, entry)
    try:
        if local is not None:
            _local_chart(local, dest)
            origin = f"{local} (packaged)" if local.is_dir() else str(local)
            out.say(f"chart {entry.name} {entry.version} from {origin}")
            return entry.fetched(entry.path, sha256_of(dest), dest.stat().st_size)
        if (kept := _reusable(previous, entry, folder)) is not None:
            return kept
        if entry.source.startswith("oci://"):
            digest, size = chart_files.fetch_oci(entry.source, entry.version, dest)
        else:
            repo, _, name = entry.source.partition(" ")
            with out.progress(f"{name} {entry.version}") as progress:
                digest, size = chart_files.fetch_repo(repo, name, entry.version, dest, progress)
    except (chart_files.ChartError, OSError) as exc:
        return entry.missing(str(exc))
    return entry.fetched(entry.path, digest, size)


def _save_image(
    entry: Entry, folder: Path, previous: Manifest | None, tool: tuple[str, str], out: Output
) -> Entry:
    """The image saved by tool[0] (tool[1]: why that tool cannot work here, "" when it can)."""
    which, unusable = tool
    if (kept := _reusable(previous, entry, folder)) is not None:
        return kept
    assert entry.path is not None
    dest = folder / entry.path
    if unusable:
        return entry.missing(f"{entry.source}: {unusable}")
    out.say(f"saving image {entry.source} with {which}")
    try:
        images.save(entry.source, dest, which)
    except images.ImageError as exc:
        return entry.missing(str(exc))
    return entry.fetched(entry.path, sha256_of(dest), dest.stat().st_size)


def _image_entry(ref: str) -> Entry:
    _, version = downloads.split_reference(ref)
    return Entry("image", ref, version, ref, path=f"images/{images.file_name(ref)}")


def build(
    inv: Inventory,
    folder: Path,
    out: Output,
    *,
    charts_dir: Path | None = None,
    sign_key: str | None = None,
    parts: Collection[str] = PARTS,
    extra_packages: Mapping[str, Sequence[str]] | None = None,
    releases: Collection[str] | None = None,
) -> Result:
    """Build (or resume) the bundle of `inv` in `folder` (see the module's docstring): the `parts` asked
    (PARTS; the manifest keeps an earlier run's entries of the others). `extra_packages`: per release
    key, packages the apt part adds beside the roles' (gpubring.bundle.apt.build); `releases`: the
    release keys the apt part builds (default: the inventory's, packages.target_releases). BundleError for bad
    input, before anything is fetched; gpubring.releases.ReleaseRenderError when the roles cannot be
    rendered for this inventory."""
    parse_parts(",".join(parts), "bundle parts")
    check_folder(folder)
    if charts_dir is not None and not charts_dir.is_dir():
        raise BundleError(f"--charts {charts_dir}: expected a folder of <chart>-<version>/ or .tgz charts")
    try:
        previous = Manifest.read(folder)
    except ManifestError as exc:
        raise BundleError(f"{exc} (remove it, or choose another folder)") from None
    manifest = Manifest(inventory=str(inv.root))
    if previous is not None:
        manifest.entries = list(previous.entries)
    result = Result(folder, manifest)
    planned = plan(inv, result.notes) if set(parts) - {"apt"} else []
    manifest.write(folder)

    if "files" in parts:
        files = [p for p in planned if p.entry.kind in FILE_KINDS]
        done = [_fetch_file(p, folder, previous, out) for p in files]
        done += [p.entry for p in planned if p.entry.kind == "apt-repo"]
        manifest.put(done, (*FILE_KINDS, "apt-repo"))
        manifest.write(folder)

    chart_dir = folder / "charts"
    if "charts" in parts:
        chart_dir.mkdir(exist_ok=True)
        charted = [
            _fetch_chart(p, folder, charts_dir, previous, out) for p in planned if p.entry.kind == "chart"
        ]
        manifest.put(charted, ("chart",))
        chart_files.write_index(chart_dir, manifest.created)
        manifest.write(folder)

    if "images" in parts:
        refs = [p.entry.source for p in planned if p.entry.kind == "image"]
        refs += _chart_image_refs(inv, chart_dir, result) if chart_dir.is_dir() else []
        which = images.tool()
        tool = (which, images.usable(which) if refs else "")
        saved = [_save_image(_image_entry(r), folder, previous, tool, out) for r in dict.fromkeys(refs)]
        manifest.put(saved, ("image",))
        manifest.write(folder)

    if "apt" in parts:
        _apt_part(inv, result, out, sign_key=sign_key, extra_packages=extra_packages, releases=releases)
    hauler.write(folder, manifest.entries)
    return result


def _chart_image_refs(inv: Inventory, chart_dir: Path, result: Result) -> list[str]:
    from gpubring import manifests, releases

    try:
        refs, problems = images.chart_images(inv, releases.plan_releases(inv), chart_dir)
    except manifests.EngineMissing as exc:
        result.notes.append(f"the images of the charts are not listed: {exc}")
        return []
    result.notes.extend(f"images of {p} (not listed)" for p in problems)
    return refs


def _apt_part(
    inv: Inventory,
    result: Result,
    out: Output,
    *,
    sign_key: str | None,
    extra_packages: Mapping[str, Sequence[str]] | None = None,
    releases: Collection[str] | None = None,
) -> None:
    """The apt repositories per OS release (gpubring.bundle.apt's build: kinds apt and apt-repo-missing),
    when that part is installed; its entries replace the earlier run's of the same kinds."""
    import importlib.util

    if importlib.util.find_spec("gpubring.bundle.apt") is None:
        result.notes.append("apt packages: not part of this build (gpubring.bundle.apt is not installed)")
        return
    from gpubring.bundle import apt
    from gpubring.bundle import packages as pkgs

    targets = None if releases is None else [r for r in pkgs.target_releases(inv) if r.key in releases]
    try:
        entries = apt.build(
            inv,
            result.folder,
            targets=targets,
            sign_key=sign_key,
            progress=out.say,
            extra_packages=extra_packages,
        )
    except apt.AptError as exc:
        result.notes.append(f"apt packages: not built ({exc})")
        return
    result.manifest.put(entries, APT_KINDS)
    result.manifest.write(result.folder)
