#!/usr/bin/env python3
"""What a Molecule scenario's result depends on, as one key (scripts/molecule-all.sh's result cache).

    molecule_inputs.py key SCENARIO[@DISTRO]...   one "NAME KEY" line for each
    molecule_inputs.py files SCENARIO[@DISTRO]    the repository files in its key, one a line

A scenario's key is a SHA-256 over the content of every repository file its run can read and over what
it runs on. It errs on the side of reading too much: a file that might be read is in the key, so a
change there runs the scenario again.

- The scenario's own folder, the shared base (.config/molecule), the test-host image recipes
  (molecule/images), the vars plugin and doc fragments, versions.yml, settings.yml, meta/, galaxy.yml,
  ansible.cfg, pyproject.toml, and the scripts and gpubring modules molecule-all.sh itself runs.
- The roles those files name (`gpubring.core.NAME`, or a bare `role:`/`name:` that is a role's folder),
  and the roles those roles name in turn; every role when an include_role/import_role takes its name
  from a template (it cannot be read before the run).
- The modules, action and filter plugins named by FQCN in those files, and the module_utils those
  plugins import (and those import in turn).
- Any file or folder of the repository that a `../` path in those files reaches, from the file's folder
  or any folder above it (tests/fixtures/cluster_upgrade, meta/os_support.yml, the helm role's
  templates that cni renders).
- What it runs on: the release it runs (NAME@DISTRO, MOLECULE_DISTRO, or its molecule.yml's default),
  the ID of that release's test-host image, the host's kernel (containers share it; DKMS builds for
  it), the Python and every package installed beside this interpreter (Molecule, ansible-core, the
  collections, Mitogen), and the strategy molecule-all.sh gives the scenarios.

Not in it: what the Debian archive serves when a scenario installs packages. molecule-all.sh gives a
passing result a maximum age for that (GPUBRING_MOLECULE_CACHE_DAYS).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Bump when what goes into a key changes, so older keys stop matching.
FORMAT = "1"
DEFAULT_DISTRO = "debian12"  # the shared base's (.config/molecule/config.yml)

ALWAYS = (
    ".config/molecule",
    "molecule/images",
    "plugins/vars",
    "plugins/doc_fragments",
    "versions.yml",
    "settings.yml",
    "meta",
    "galaxy.yml",
    "ansible.cfg",
    "pyproject.toml",
    "scripts/molecule-all.sh",
    "scripts/molecule_inputs.py",
    "scripts/engine.sh",
    "cli/gpubring/paths.py",
    "cli/gpubring/run/accelerate.py",
)
TEXT_SUFFIXES = {".yml", ".yaml", ".j2", ".py", ".sh", ".cfg", ".json", ".txt", ".ini", ".conf", ""}
SKIP_PARTS = {"__pycache__", ".cache", ".molecule"}

FQCN = re.compile(r"gpubring\.core\.([a-z_][a-z0-9_]*)")
BARE_ROLE = re.compile(r"^\s*-?\s*(?:role|name):\s*[\"']?([a-z_][a-z0-9_]*)[\"']?\s*$", re.MULTILINE)
TEMPLATED_ROLE = re.compile(r"(?:include_role|import_role):\s*\n\s+name:\s*[\"']?\{\{")
RELATIVE = re.compile(r"((?:\.\./)+[A-Za-z0-9_][A-Za-z0-9_./-]*)")
MODULE_UTILS = re.compile(
    r"plugins\.module_utils(?:\.([a-z_][a-z0-9_]*)|\s+import\s+\(?([a-z_][a-z0-9_, \n]*))"
)
FILTER_NAMES = re.compile(r"[\"']([a-z_][a-z0-9_]*)[\"']\s*:")
DISTRO_DEFAULT = re.compile(r"gpubring-testhost:(?:\$\{MOLECULE_DISTRO:-)?([a-z0-9]+)")


def files_under(rel: str) -> list[Path]:
    """The files at a repository path (a file, or every file below a folder), caches left out."""
    path = ROOT / rel
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(
        p for p in path.rglob("*") if p.is_file() and not SKIP_PARTS.intersection(p.relative_to(ROOT).parts)
    )


@functools.cache
def filter_plugins() -> dict[str, Path]:
    """Each filter name of the collection and the plugin file that defines it."""
    names: dict[str, Path] = {}
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        at = text.find("def filters(")
        if at < 0:
            continue
        for name in FILTER_NAMES.findall(text[at:]):
            names[name] = path
    return names


def relative_reaches(path: Path, text: str) -> set[Path]:
    """Repository paths a `../` path in a file reaches from the file's folder or any folder above it."""
    found: set[Path] = set()
    for ref in RELATIVE.findall(text):
        base = path.parent
        while True:
            target = (base / ref).resolve()
            if target.is_relative_to(ROOT) and target.exists() and target != ROOT:
                found.add(target)
            if base == ROOT or not base.is_relative_to(ROOT):
                break
            base = base.parent
    return found


@functools.cache
def scenario_files(scenario: str) -> tuple[Path, ...]:
    """Every repository file whose content goes into the scenario's key."""
    roles = {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()} if (ROOT / "roles").is_dir() else set()
    filters = filter_plugins()
    chosen: set[Path] = set()
    queue: list[Path] = []

    def add(paths: Iterable[Path], scan: bool) -> None:
        for p in paths:
            if p not in chosen:
                chosen.add(p)
                if scan:
                    queue.append(p)

    # The scenario and the shared base first: ALWAYS holds the base too, unscanned.
    add(files_under(f"molecule/{scenario}"), scan=True)
    add(files_under(".config/molecule"), scan=True)
    add((p for rel in ALWAYS for p in files_under(rel)), scan=False)
    seen_roles: set[str] = set()

    def add_role(name: str) -> None:
        if name in roles and name not in seen_roles:
            seen_roles.add(name)
            add(files_under(f"roles/{name}"), scan=True)

    while queue:
        path = queue.pop()
        if path.suffix not in TEXT_SUFFIXES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for name in FQCN.findall(text):
            add_role(name)
            for rel in (f"plugins/modules/{name}.py", f"plugins/action/{name}.py"):
                add(files_under(rel), scan=True)
            if name in filters:
                add([filters[name]], scan=True)
        for name in BARE_ROLE.findall(text):
            add_role(name)
        if TEMPLATED_ROLE.search(text):
            for name in sorted(roles):
                add_role(name)
        for module, imported in MODULE_UTILS.findall(text):
            for name in [module, *re.split(r"[\s,()]+", imported)]:
                if name:
                    add(files_under(f"plugins/module_utils/{name}.py"), scan=True)
        for target in relative_reaches(path, text):
            add(files_under(str(target.relative_to(ROOT))), scan=True)
    return tuple(sorted(chosen))


def distro_of(item: str) -> str:
    """The release a scenario run uses, as molecule-all.sh picks it."""
    if "@" in item:
        return item.split("@", 1)[1]
    if os.environ.get("MOLECULE_DISTRO"):
        return os.environ["MOLECULE_DISTRO"]
    config = ROOT / "molecule" / item.split("@", 1)[0] / "molecule.yml"
    match = DISTRO_DEFAULT.search(config.read_text(encoding="utf-8")) if config.is_file() else None
    return match.group(1) if match else DEFAULT_DISTRO


def image_id(distro: str) -> str:
    try:
        out = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", f"gpubring-testhost:{distro}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "no docker"
    return out.stdout.strip() if out.returncode == 0 else "no image"


def platform_lines() -> list[str]:
    """What every scenario runs on, whatever its files."""
    packages = sorted(
        f"{d.metadata['Name']}=={d.version}".lower() for d in importlib.metadata.distributions()
    )
    return [
        f"format {FORMAT}",
        f"kernel {platform.release()}",
        f"python {sys.version.split()[0]}",
        f"strategy {os.environ.get('GPUBRING_MOLECULE_STRATEGY') or 'linear'}",
        *(f"package {p}" for p in packages),
    ]


def key(item: str, common: list[str], images: dict[str, str]) -> str:
    scenario = item.split("@", 1)[0]
    distro = distro_of(item)
    if distro not in images:
        images[distro] = image_id(distro)
    digest = hashlib.sha256()
    for line in [*common, f"scenario {item}", f"distro {distro}", f"image {images[distro]}"]:
        digest.update(line.encode() + b"\n")
    for path in scenario_files(scenario):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return digest.hexdigest()


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("key", "files") or (argv[0] == "files" and len(argv) != 2):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    for item in argv[1:]:
        name = item.split("@", 1)[0]
        if not (ROOT / "molecule" / name / "molecule.yml").is_file():
            print(
                f"molecule_inputs: error: no scenario {item} (no molecule/{name}/molecule.yml)",
                file=sys.stderr,
            )
            return 2
    if argv[0] == "files":
        for path in scenario_files(argv[1].split("@", 1)[0]):
            print(path.relative_to(ROOT))
        return 0
    common = platform_lines()
    images: dict[str, str] = {}
    for item in argv[1:]:
        print(item, key(item, common, images))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
