"""gpubring supports one OS family, the Debian family, listed in one place: meta/os_support.yml.

- the list itself, as preflight, the package roles and `gpubring check` read it;
- every role that installs packages keeps its package tasks in per-family task files
  (`install_Debian.yml`, ...) included through ansible_facts.os_family, with a file for each supported
  family and none for another: a port to another family adds files, and a role cannot half-support an
  OS (issue 21 item 9: the RHEL path that locked the Kubernetes packages and never unlocked them);
- preflight stops a host of another family at once, and a package role refuses it too, run for real
  on localhost with the facts of a Rocky 9 host;
- `gpubring check` marks a host whose /etc/os-release is not listed as failed, naming its OS: the
  parser on a recorded Rocky 9 os-release, and a real probe over SSH.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.facts.system.distribution import Distribution
from typer.testing import CliRunner

from gpubring import probe
from gpubring.app import app
from gpubring.inventory import load_inventory
from helpers import BIN, REPO, ansible_playbook, tasks_in
from sshd import KeyPair, Sshd, free_port, require_sshd

ROLES = REPO / "roles"
OS_SUPPORT = yaml.safe_load((REPO / "meta" / "os_support.yml").read_text())["supported_os"]
FAMILIES = sorted({entry["family"] for entry in OS_SUPPORT})
# Every os_family Ansible knows (what a per-family file can be named for).
ALL_FAMILIES = set(Distribution.OS_FAMILY_MAP) | {"Debian", "RedHat"}

# Modules that install packages or configure where they come from, under any of their names.
PACKAGE_MODULES = {
    "apt", "apt_key", "apt_repository", "deb822_repository", "dpkg_selections", "package", "dnf", "dnf5",
    "yum", "yum_repository", "rpm_key", "dnf_versionlock", "zypper", "zypper_repository", "apk", "pacman",
}  # fmt: skip
PREFIXES = ("", "ansible.builtin.", "ansible.legacy.", "community.general.")

# The package roles whose tasks/vars.yml refuses an OS family that meta/os_support.yml does not list.
GUARDED = ("containerd", "kernel", "kubernetes_packages", "nvidia_container_toolkit", "nvidia_driver", "rdma")

ROCKY_9_OS_RELEASE = """\
NAME="Rocky Linux"
VERSION="9.4 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.4"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
"""
ROCKY_FACTS = {
    "os_family": "RedHat",
    "distribution": "Rocky",
    "distribution_version": "9.4",
    "distribution_major_version": "9",
}


# --------------------------------------------------------------------------- the scan


def package_tasks(path: Path) -> list[str]:
    """`name (module)` of each task of a task file that uses a package module."""
    found = []
    for task in tasks_in(yaml.safe_load(path.read_text())):
        for key in task:
            if any(key == prefix + module for prefix in PREFIXES for module in PACKAGE_MODULES):
                found.append(f"{task.get('name', '?')} ({key})")
    return found


def family_of(path: Path) -> str | None:
    """The OS family a per-family task file is for (`install_Debian.yml`: Debian), else None."""
    base, sep, family = path.stem.rpartition("_")
    return family if sep and base and family in ALL_FAMILIES else None


def problems_of(role: Path, families: list[str]) -> list[str]:
    """What breaks the per-family rule in a role's tasks/, for the supported `families`."""
    problems = []
    files = sorted((role / "tasks").rglob("*.yml"))
    for path in files:
        family = family_of(path)
        found = package_tasks(path)
        if found and family is None:
            problems.append(
                f"{path.relative_to(role)}: package tasks outside a per-family file "
                f"(move them to {path.stem}_<os_family>.yml): {', '.join(found)}"
            )
        if family is not None and family not in families:
            problems.append(
                f"{path.relative_to(role)}: a task file for {family}, an OS family gpubring does not "
                f"support ({', '.join(families)}: meta/os_support.yml)"
            )
    bases = {path.stem.rpartition("_")[0]: path.parent for path in files if family_of(path)}
    texts = [path.read_text() for path in files]
    for base, folder in sorted(bases.items()):
        for family in families:
            if not (folder / f"{base}_{family}.yml").is_file():
                problems.append(f"tasks/{base}_{family}.yml is missing ({family} is in meta/os_support.yml)")
        # Included by family (`install_{{ ansible_facts.os_family }}.yml`), or by name from a file of
        # that family (install_Debian.yml includes repository_docker_Debian.yml).
        names = [f"{base}_{{{{ ansible_facts.os_family }}}}.yml", *(f"{base}_{f}.yml" for f in families)]
        if not any(name in text for name in names for text in texts):
            problems.append(f"nothing includes {base}_{{{{ ansible_facts.os_family }}}}.yml")
    return problems


def package_roles() -> list[str]:
    """The roles with a package task anywhere in tasks/."""
    return sorted(
        role.name
        for role in ROLES.iterdir()
        if any(package_tasks(path) for path in (role / "tasks").rglob("*.yml"))
    )


# --------------------------------------------------------------------------- the list and the roles


def test_the_one_list_is_the_debian_family() -> None:
    assert FAMILIES == ["Debian"]
    assert [(e["distribution"], e["os_release_id"], e["versions"]) for e in OS_SUPPORT] == [
        ("Ubuntu", "ubuntu", ["22.04", "24.04"]),
        ("Debian", "debian", ["12", "13"]),
    ]
    assert all(isinstance(v, str) for e in OS_SUPPORT for v in e["versions"])
    assert [(s.distribution, s.versions) for s in probe.supported_os()] == [
        ("Ubuntu", ("22.04", "24.04")),
        ("Debian", ("12", "13")),
    ]


def test_the_package_roles_are_found() -> None:
    """The scan finds the roles that install packages (a scan that finds none proves nothing)."""
    assert {
        "containerd", "helm", "kernel", "kubeadm_control_plane", "kubeadm_join", "kubernetes_packages",
        "nvidia_container_toolkit", "nvidia_driver", "rdma",
    } <= set(package_roles())  # fmt: skip


@pytest.mark.parametrize("role", [role.name for role in sorted(ROLES.iterdir())])
def test_package_tasks_live_in_per_family_files(role: str) -> None:
    assert problems_of(ROLES / role, FAMILIES) == []


def test_the_scan_refuses_a_stray_apt_task_and_a_half_port(tmp_path: Path) -> None:
    """A role with an apt task outside a per-family file, one with a RHEL file only, one whose
    Debian file nothing includes, and a port to a second family that forgot a file."""
    role = tmp_path / "stray"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "install.yml").write_text(
        "- name: Install it\n  ansible.builtin.apt:\n    name: x\n"
        "- name: Twice\n  block:\n    - name: Hold it\n"
        "      ansible.builtin.dpkg_selections: {name: x, selection: hold}\n"
    )
    (role / "tasks" / "repo_RedHat.yml").write_text(
        "- name: Repo\n  ansible.builtin.yum_repository: {name: x}\n"
    )
    (role / "tasks" / "lone_Debian.yml").write_text("- name: Install\n  ansible.builtin.package: {name: x}\n")
    problems = problems_of(role, ["Debian"])
    assert problems[0] == (
        "tasks/install.yml: package tasks outside a per-family file (move them to install_<os_family>.yml): "
        "Install it (ansible.builtin.apt), Hold it (ansible.builtin.dpkg_selections)"
    )
    assert (
        "tasks/repo_RedHat.yml: a task file for RedHat, an OS family gpubring does not support" in problems[1]
    )
    assert "tasks/repo_Debian.yml is missing (Debian is in meta/os_support.yml)" in problems
    assert "nothing includes lone_{{ ansible_facts.os_family }}.yml" in problems
    assert "tasks/install_RedHat.yml is missing (RedHat is in meta/os_support.yml)" in problems_of(
        ROLES / "containerd", ["Debian", "RedHat"]
    )


# --------------------------------------------------------------------------- preflight and the roles refuse


@pytest.mark.skipif(shutil.which("ansible-playbook", path=str(BIN)) is None, reason="no ansible-playbook")
def test_preflight_and_the_package_roles_refuse_another_family(tmp_path: Path) -> None:
    """preflight's OS check (tasks/os.yml) and the guard of each package role with per-OS variables
    (tasks/vars.yml) on localhost, as a Rocky 9 host and as a Debian 12 host (facts set, not gathered)."""
    debian = {**ROCKY_FACTS, "os_family": "Debian", "distribution": "Debian", "distribution_version": "12.8"}
    debian["distribution_major_version"] = "12"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"rocky": local, "deb": local}}}))
    play = [
        {
            "name": "Run the OS checks",
            "hosts": "all",
            "gather_facts": False,
            # Play vars stand in for gathered facts (an inventory's ansible_facts would not).
            "vars": {
                "ansible_facts": "{{ __facts[inventory_hostname] }}",
                "__facts": {"rocky": ROCKY_FACTS, "deb": debian},
            },
            "tasks": [
                {
                    "name": f"The {role} role's OS check",
                    "ansible.builtin.include_role": {
                        "name": f"gpubring.core.{role}",
                        "tasks_from": tasks_from,
                        "apply": {"ignore_errors": True},
                    },
                }
                for role, tasks_from in (("preflight", "os"), *((role, "vars") for role in GUARDED))
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play))
    result = ansible_playbook("-i", inventory, playbook)
    out = result.stdout + result.stderr
    text = " ".join(out.split())
    assert result.returncode == 0, out[-4000:]
    assert (
        "preflight: rocky runs Rocky 9.4 (os_family RedHat), an operating system family gpubring does not "
        "support. Supported: Ubuntu 22.04/24.04, Debian 12/13 (the Debian family; meta/os_support.yml)."
    ) in text, out[-4000:]
    for role in GUARDED:
        assert (
            f"{role} role: Rocky 9.4 (os_family RedHat) is not supported: gpubring supports the Debian "
            "family only (meta/os_support.yml)."
        ) in text, out[-4000:]
    recap = {line.split()[0]: line for line in out.splitlines() if " : ok=" in line}
    assert "failed=0" in recap["deb"] and "ignored=0" in recap["deb"], recap
    assert "ignored=0" not in recap["rocky"], recap
    assert "deb runs" not in text


# --------------------------------------------------------------------------- gpubring check refuses


def test_the_probe_parser_refuses_rocky_9() -> None:
    facts = probe.parse_probe_output(f"uid=0\nkernel=5.14.0\nsudo=root\n--- os-release\n{ROCKY_9_OS_RELEASE}")
    assert facts.os == probe.OsRelease("rocky", "9.4", "Rocky Linux 9.4 (Blue Onyx)")
    assert probe.os_problem(facts.os, probe.supported_os()) == (
        "Rocky Linux 9.4 (Blue Onyx) (ID=rocky, VERSION_ID=9.4) is not an operating system gpubring "
        "supports: Ubuntu 22.04/24.04, Debian 12/13 (the Debian family; meta/os_support.yml)"
    )


@pytest.mark.parametrize(
    ("release", "supported"),
    [
        (probe.OsRelease("debian", "12", "Debian GNU/Linux 12 (bookworm)"), True),
        (probe.OsRelease("debian", "13", None), True),
        (probe.OsRelease("ubuntu", "24.04", "Ubuntu 24.04.1 LTS"), True),
        (probe.OsRelease("ubuntu", "20.04", "Ubuntu 20.04.6 LTS"), False),
        (probe.OsRelease("ubuntu", "24.10", "Ubuntu 24.10"), False),
        (probe.OsRelease("debian", "11", "Debian GNU/Linux 11 (bullseye)"), False),
        (probe.OsRelease("debian", None, "Debian GNU/Linux trixie/sid"), False),
        (probe.OsRelease("linuxmint", "22", "Linux Mint 22"), False),
        (probe.OsRelease(None, None, None), False),
    ],
)
def test_the_probe_accepts_only_the_listed_releases(release: probe.OsRelease, supported: bool) -> None:
    problem = probe.os_problem(release, probe.supported_os())
    assert (problem is None) == supported, problem
    if problem is not None:
        assert problem.startswith(release.pretty_name or "an unknown OS")


def test_check_marks_a_host_of_an_unsupported_os_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real probe over SSH of this machine, with a list that does not hold its OS: the host fails with
    kind `os`, its OS named, exit 4, the other checks (reach, login, sudo) passed. gpu1 is not probed."""
    require_sshd()
    key = KeyPair.generate(tmp_path / "id_test")
    only_rocky = [probe.SupportedOs("RedHat", "Rocky", "rocky", ("9",))]
    monkeypatch.setattr(probe, "supported_os", lambda root=None: only_rocky)
    with Sshd.start(tmp_path / "sshd", authorized=[key.public_line]) as server:
        known = tmp_path / "known_hosts"
        known.write_text(server.known_hosts_line() + "\n")
        root = tmp_path / "inventory"
        root.mkdir()
        hosts = {
            "all": {
                "vars": {
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(key.private),
                    "ansible_ssh_common_args": f"-o UserKnownHostsFile={known} -o IdentitiesOnly=yes",
                },
                "children": {
                    "control_plane": {
                        "hosts": {"cp1": {"ansible_host": "127.0.0.1", "ansible_port": server.port}}
                    },
                    "gpu_nodes": {
                        "hosts": {"gpu1": {"ansible_host": "127.0.0.1", "ansible_port": free_port()}}
                    },
                },
            }
        }
        (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
        [direct] = probe.probe_hosts(
            [probe.target_for(load_inventory(root).hosts["cp1"])], probe.ProbeSettings(timeout=5)
        )
        result = CliRunner().invoke(
            app,
            ["check", str(root), "--limit", "cp1", "--json", "-", "--timeout", "5"],
            env={"COLUMNS": "250"},
        )
    pretty = {
        k: v.strip('"')
        for k, _, v in (line.partition("=") for line in Path("/etc/os-release").read_text().splitlines())
    }["PRETTY_NAME"]
    assert direct.problem is not None and direct.problem.kind == probe.ProblemKind.OS
    assert direct.problem.message.startswith(f"cp1 runs {pretty} (ID="), direct.problem.message
    assert "gpubring supports: Rocky 9 (the RedHat family; meta/os_support.yml)" in direct.problem.message
    assert (direct.reachable, direct.authenticated, direct.sudo) == (True, True, "root")
    assert result.exit_code == 4, result.output
    [entry] = json.loads(result.stdout)["hosts"]
    assert entry["problem"]["kind"] == "os" and entry["ok"] is False
    assert "unsupported OS" in result.stderr and f"cp1: cp1 runs {pretty}" in " ".join(result.stderr.split())
