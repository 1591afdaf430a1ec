"""Where the Ansible content lives, in a checkout and in an installed wheel.

A checkout has galaxy.yml two levels above this package (cli/gpubring/); a wheel carries the same
content under gpubring/project/. The repository is also the collection gpubring.core: Ansible finds
it through a collections folder whose ansible_collections/gpubring/core entry links to the root.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

COLLECTION_NAMESPACE = "gpubring"
COLLECTION_NAME = "core"


@cache
def project_root() -> Path:
    """The folder holding playbooks/, roles/, plugins/ and versions.yml."""
    here = Path(__file__).resolve().parent
    checkout = here.parent.parent
    if (checkout / "galaxy.yml").is_file() and (checkout / "playbooks").is_dir():
        return checkout
    return here / "project"


def playbooks_dir() -> Path:
    return project_root() / "playbooks"


def roles_dir() -> Path:
    return project_root() / "roles"


def versions_file() -> Path:
    return project_root() / "versions.yml"


def settings_file() -> Path:
    return project_root() / "settings.yml"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpubring"


def collections_path() -> Path:
    """A collections folder in which gpubring.core resolves to project_root().

    In a checkout that is .ansible/collections (what ansible.cfg and ansible-lint use); for a wheel,
    whose site-packages may be read-only, a folder in the user's cache.
    """
    root = project_root()
    base = root / ".ansible" / "collections" if root.name != "project" else cache_dir() / "collections"
    link = base / "ansible_collections" / COLLECTION_NAMESPACE / COLLECTION_NAME
    if not (link.is_symlink() and link.resolve() == root.resolve()):
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(root, target_is_directory=True)
    return base
