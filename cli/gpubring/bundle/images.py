"""The bundle's container images: which ones, and saving them with a tool the user has.

Which: gpubring's own (gpubring.downloads: the version matrix's pins, the roles' *_image defaults, the
images in the releases' values and objects) and every image the pinned charts use, read from the charts
rendered offline by Helm's engine as `gpubring plan --manifests` renders them (gpubring.manifests, the
optional extra gpubring[render]) with the bundle's charts. A reference keeps its tag and digest as
written (a pin by digest stays one).

Saving: the first of skopeo, crane and ctr found on PATH copies each image into DIR/images/ as an
archive (skopeo: `copy docker://REF oci-archive:FILE`; crane: `pull REF FILE`; ctr: `images pull` into
its own namespace, then `images export FILE REF`). With none, or when a registry cannot be reached, the
image is listed missing with the tool's real error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from gpubring import downloads

if TYPE_CHECKING:
    from gpubring.inventory import Inventory
    from gpubring.releases import Release

__all__ = ["TOOLS", "ImageError", "chart_images", "file_name", "normalized", "save", "tool", "transport"]

TOOLS = ("skopeo", "crane", "ctr")
CTR_NAMESPACE = "gpubring-bundle"
SAVE_TIMEOUT = 600


class ImageError(Exception):
    """An image could not be saved; the message is one line with the real error."""


def normalized(ref: str) -> str:
    """The fully qualified reference (docker.io/library/... for a short one), as ctr wants it."""
    if downloads.registry(ref) != "docker.io" or ref.startswith("docker.io/"):
        return ref
    name = ref.split("@", 1)[0].rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref.split("@", 1)[0]
    return f"docker.io/{ref}" if "/" in name else f"docker.io/library/{ref}"


def file_name(ref: str) -> str:
    """DIR/images/<this>: the reference with its separators made safe, .tar."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", normalized(ref)) + ".tar"


def chart_images(inv: Inventory, releases: Sequence[Release], charts: Path) -> tuple[list[str], list[str]]:
    """(image references, problems) of the planned charts rendered from the bundle's charts folder:
    each problem names a release whose chart was not rendered and why. Raises manifests.EngineMissing
    without gpubring[render]."""
    from gpubring import manifests

    with tempfile.TemporaryDirectory(prefix="gpubring-bundle-render.") as tmp:
        result = manifests.write_manifests(
            releases,
            Path(tmp) / "m",
            kube_version=str(inv.versions["kubernetes"]["version"]),
            inventory_root=inv.root,
            charts=charts if charts.is_dir() else None,
        )
        refs: list[str] = []
        for r in result.releases:
            if r.file:
                text = (result.folder / r.file).read_text(encoding="utf-8")
                for doc in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
                    refs.extend(downloads.images_in(doc))
    problems = [f"{r.release}: {r.problem}" for r in result.unrendered]
    return list(dict.fromkeys(refs)), problems


def tool() -> str:
    """The first image tool on PATH ("" when none)."""
    return next((t for t in TOOLS if shutil.which(t)), "")


def _run(argv: Sequence[str], what: str, timeout: int = SAVE_TIMEOUT) -> None:
    """Run a tool; ImageError naming `what`, the tool's words and what it said when it fails."""
    words = " ".join(a for a in argv[:5] if not a.startswith("/"))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ImageError(f"{what}: {words} took more than {timeout} s") from None
    except OSError as exc:
        raise ImageError(f"{what}: {words}: {exc}") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout or f"exit {done.returncode}").split())
        raise ImageError(f"{what}: {words}: {said}")


def usable(which: str) -> str:
    """ "" when the tool can work here, else why not (ctr needs a containerd it can reach: asked once
    with `ctr version`, so that every image does not wait for the same socket)."""
    if not which:
        return f"no image tool here ({', '.join(TOOLS)}: none on PATH)"
    if which != "ctr":
        return ""
    try:
        _run(["ctr", "--timeout", "10s", "version"], "ctr cannot reach containerd", timeout=30)
    except ImageError as exc:
        return str(exc)
    return ""


def save(ref: str, dest: Path, which: str) -> None:
    """The image `ref` saved by `which` (one of TOOLS) as the archive `dest`; ImageError when not."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()
    full = normalized(ref)
    try:
        if which == "skopeo":
            _run(["skopeo", "copy", f"docker://{full}", f"oci-archive:{tmp}:{full}"], ref)
        elif which == "crane":
            _run(["crane", "pull", full, str(tmp)], ref)
        elif which == "ctr":
            _run(["ctr", "-n", CTR_NAMESPACE, "images", "pull", full], ref)
            _run(["ctr", "-n", CTR_NAMESPACE, "images", "export", str(tmp), full], ref)
        else:
            raise ImageError(f"{ref}: no image tool here ({', '.join(TOOLS)}: none on PATH)")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def transport(archive: Path) -> str:
    """How skopeo reads an archive of DIR/images: "oci-archive" when it holds an OCI image layout (the
    `oci-layout` file: skopeo's and ctr's archives), "docker-archive" when only a docker-save
    manifest.json (crane's tarball); "" when it is neither. Its reference is the manifest entry's
    `source` (the file name is not reversible)."""
    import tarfile

    try:
        with tarfile.open(archive) as tar:
            names = {m.name.removeprefix("./") for m in tar.getmembers()}
    except (OSError, tarfile.TarError):
        return ""
    if "oci-layout" in names:
        return "oci-archive"
    return "docker-archive" if "manifest.json" in names else ""


def unique(refs: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(r for r in refs if r))
