"""No role keeps per-OS-family variables, or paths of a package system, for an OS family gpubring does
not support (issue 21 item 9, the rest of the RHEL half-support): meta/os_support.yml lists the Debian
family only, preflight refuses the others before any role runs, so a `vars/RedHat.yml` (helm's EPEL
Python packages, kubelet_topology's /etc/sysconfig/kubelet) or a reset that removes
`/etc/yum.repos.d/kubernetes.repo` only pretends to a support that does not exist. A port adds them
back together with its task files and its line in meta/os_support.yml (tests/test_os_support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.facts.system.distribution import Distribution

from helpers import REPO

ROLES = REPO / "roles"
SUPPORTED = yaml.safe_load((REPO / "meta" / "os_support.yml").read_text())["supported_os"]
FAMILIES = {entry["family"] for entry in SUPPORTED}
# Every OS family and distribution Ansible knows, by the names a vars/ file is picked by.
KNOWN = set(Distribution.OS_FAMILY_MAP) | set(Distribution.OS_FAMILY.values()) | {"RedHat", "Debian"}
# Paths that only another package system's hosts have.
FOREIGN_PATHS = ("/etc/yum.repos.d", "/etc/sysconfig/", "/etc/zypp/", "dnf_versionlock", "versionlock")


def foreign_vars(roles: Path, families: set[str]) -> list[str]:
    """vars/<name>.yml files named for an OS family (or a distribution of one) not in `families`."""
    found = []
    for path in sorted(roles.glob("*/vars/*.yml")):
        name = path.stem.split("-")[0]
        family = Distribution.OS_FAMILY.get(name, name if name in KNOWN else None)
        if family is not None and family not in families:
            found.append(f"{path.relative_to(roles)} ({family})")
    return found


def test_no_role_has_variables_for_an_unsupported_family() -> None:
    assert foreign_vars(ROLES, FAMILIES) == []


def test_the_scan_finds_a_rhel_vars_file(tmp_path: Path) -> None:
    (tmp_path / "r" / "vars").mkdir(parents=True)
    for name in ("RedHat.yml", "Rocky-9.yml", "Debian.yml", "Ubuntu.yml", "main.yml", "reset.yml"):
        (tmp_path / "r" / "vars" / name).write_text("---\n")
    assert foreign_vars(tmp_path, FAMILIES) == ["r/vars/RedHat.yml (RedHat)", "r/vars/Rocky-9.yml (RedHat)"]


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir()))
def test_no_role_touches_another_package_systems_paths(role: str) -> None:
    hits = [
        f"{path.relative_to(ROLES)}: {needle}"
        for path in sorted((ROLES / role).rglob("*.yml"))
        for needle in FOREIGN_PATHS
        if needle in path.read_text(encoding="utf-8")
    ]
    assert hits == []
