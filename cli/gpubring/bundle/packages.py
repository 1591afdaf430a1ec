"""The apt packages gpubring's host, cluster and platform phases install, per OS release and host group.

Nothing here is a list kept by hand: the plays of playbooks/host.yml, cluster.yml and platform.yml are
read for the roles they run on which groups, each role's tasks are walked from tasks/main.yml the way
Ansible includes them (include_tasks/import_tasks with their `when:`, blocks with theirs), and the
`name:` of every ansible.builtin.apt / ansible.builtin.package task that installs is rendered by
Ansible's templar (gpubring.releases' Variables) with the inventory's variables of a host of the group,
the role's vars/<OS>.yml (the include_vars the role does, first found), the role's set_fact arguments
and the facts of the OS release. A task whose `when:` is false for that host and release is left out
(containerd_source, nvidia_driver_source, rdma_stack, nvidia_container_toolkit_owner all act through
the roles' own conditions); a condition that reads a result only a run has (a registered variable) is
taken as true: the bundle then holds a package a host may not need, never lacks one it needs.

What an offline walk cannot know, and what is assumed instead (said in each Install's `note`):

- the running kernel (nvidia_driver_kernel_version defaults to ansible_facts.kernel): the release's
  default linux-headers metapackage is taken (linux-headers-amd64 on Debian, linux-headers-generic on
  Ubuntu); an inventory that pins nvidia_driver_kernel_version (the lab does, from `lab up`'s facts)
  gets the headers of that kernel;
- the GPUs of a GPU node: an 8-GPU HGX node, with NVSwitches where the driver source packages a fabric
  manager (gpubring's users; nvidia_driver_fabricmanager: auto then installs it), its recommended kernel
  modules unknown (nvidia_driver_kernel_modules: auto gives the role's own fallback, open).

Tasks that remove packages (state: absent, e.g. kubeadm_join's reset purge) are read too and reported
as removals, so a test can prove every package task of roles/*/tasks is accounted for.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpubring import paths, releases
from gpubring.inventory import Inventory

# The phases whose plays install packages on the hosts (the platform play installs kubernetes.core's
# Python libraries on the first control plane).
PHASE_PLAYBOOKS = ("host.yml", "cluster.yml", "platform.yml")
# The inventory groups gpubring's plays address; a bundle is computed for one host of each.
GROUPS = ("control_plane", "gpu_nodes", "cpu_nodes")
# Package modules (short names; FQCN ansible.builtin.<name> too).
PACKAGE_MODULES = ("apt", "package")
INCLUDE_TASKS = ("include_tasks", "import_tasks")
# A sentinel kernel: a headers package naming it means "the running kernel", unknown offline.
UNKNOWN_KERNEL = "gpubring-unknown-kernel"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A task's `when:` is a condition for Ansible, evaluated as Ansible does (a Jinja test in {% if %}).
_CONDITION = "{{% if ({}) %}}True{{% else %}}False{{% endif %}}"


@dataclass(frozen=True)
class OSRelease:
    """One operating system release gpubring supports (meta/os_support.yml)."""

    distro: str  # os-release ID: debian, ubuntu
    version: str  # 12, 13, 22.04, 24.04
    codename: str
    headers_metapackage: str  # the headers of the release's default kernel

    @property
    def key(self) -> str:
        """The bundle's folder name for it: DIR/apt/<distro>-<codename>."""
        return f"{self.distro}-{self.codename}"

    def facts(self) -> dict[str, Any]:
        """The ansible_facts the package expressions read, as an x86_64 host of this release has them."""
        distribution = {"debian": "Debian", "ubuntu": "Ubuntu"}[self.distro]
        return {
            "distribution": distribution,
            "distribution_release": self.codename,
            "distribution_major_version": self.version.split(".")[0],
            "distribution_version": self.version,
            "os_family": "Debian",
            "architecture": "x86_64",
            "machine": "x86_64",
            "kernel": UNKNOWN_KERNEL,
            "processor": ["GenuineIntel"],
        }


# Codenames and default kernel flavours of the releases in meta/os_support.yml (os-release
# VERSION_CODENAME; Debian's linux-headers-amd64 and Ubuntu's linux-headers-generic metapackages).
RELEASES = (
    OSRelease("debian", "12", "bookworm", "linux-headers-amd64"),
    OSRelease("debian", "13", "trixie", "linux-headers-amd64"),
    OSRelease("ubuntu", "22.04", "jammy", "linux-headers-generic"),
    OSRelease("ubuntu", "24.04", "noble", "linux-headers-generic"),
)


@dataclass(frozen=True)
class PackageTask:
    """An ansible.builtin.apt/package task of a role that names packages."""

    role: str
    path: str  # relative to the repository
    name: str  # the task's name
    raw: Any  # its `name:` as written
    removes: bool  # state: absent

    @property
    def where(self) -> str:
        return f"{self.path}: {self.name}"


@dataclass(frozen=True)
class Install:
    """The packages one task installs on a host of `group` running `release`."""

    release: str
    group: str
    role: str
    where: str
    packages: tuple[str, ...]
    note: str = ""
    recommends: bool = True  # the task's install_recommends (apt's default: yes)


@dataclass(frozen=True)
class AptSource:
    """A third-party apt source a role writes (a deb822_repository task or a sources.list.d template)."""

    role: str
    where: str
    text: str  # the source as the role writes it (one-line or deb822), rendered


@dataclass
class ReleasePackages:
    """Everything one OS release needs: the installs per group, the third-party sources the roles add,
    the tasks left out (condition false) and what could not be evaluated."""

    release: OSRelease
    installs: list[Install] = field(default_factory=list)
    sources: list[AptSource] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (group, where, condition)
    problems: list[str] = field(default_factory=list)
    reached: set[str] = field(default_factory=set)  # PackageTask.where of every task the walk met

    def packages(self) -> list[str]:
        """Every package (with its version pin, if any) of every group, sorted, once."""
        return sorted({p for i in self.installs for p in i.packages})

    def by_role(self) -> dict[str, list[str]]:
        out: dict[str, set[str]] = {}
        for i in self.installs:
            out.setdefault(i.role, set()).update(i.packages)
        return {role: sorted(names) for role, names in sorted(out.items())}


# -- reading the roles -------------------------------------------------------------------------------


def _roles_dir() -> Path:
    return paths.roles_dir()


@functools.cache
def _read_cached(path: Path, _mtime: float) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)


def _read(path: Path) -> Any:
    """A YAML file's data (read once while unchanged; the callers do not change it)."""
    return _read_cached(path, path.stat().st_mtime)


def _module(task: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, Any] | None:
    for key, args in task.items():
        short = str(key).rsplit(".", 1)[-1]
        if short in names and str(key) in (short, f"ansible.builtin.{short}"):
            return short, args
    return None


def _walk(data: Any) -> Iterator[Mapping[str, Any]]:
    for task in data or []:
        if isinstance(task, Mapping):
            yield task
            for section in ("block", "rescue", "always"):
                yield from _walk(task.get(section))


def package_tasks() -> list[PackageTask]:
    """Every apt/package task with a `name:` under roles/*/tasks, read from the files."""
    roles = _roles_dir()
    out = []
    for path in sorted(roles.glob("*/tasks/**/*.yml")):
        for task in _walk(_read(path)):
            found = _module(task, PACKAGE_MODULES)
            if found is None or not isinstance(found[1], Mapping) or "name" not in found[1]:
                continue
            args = found[1]
            out.append(
                PackageTask(
                    role=path.relative_to(roles).parts[0],
                    path=str(path.relative_to(roles.parent)),
                    name=str(task.get("name", found[0])),
                    raw=args["name"],
                    removes=str(args.get("state", "present")) == "absent",
                )
            )
    return out


def _conditions(task: Mapping[str, Any]) -> list[str]:
    when = task.get("when")
    if when is None:
        return []
    return [str(c) for c in (when if isinstance(when, list) else [when])]


def _role_vars(role: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The role's vars/<OS> file as its include_vars picks it (first found, most specific first)."""
    base = _roles_dir() / role / "vars"
    for name in (
        f"{facts['distribution']}-{facts['distribution_major_version']}.yml",
        f"{facts['distribution']}.yml",
        f"{facts['os_family']}.yml",
    ):
        if (base / name).is_file():
            return dict(_read(base / name) or {})
    return {}


def _role_set_facts(role: str) -> dict[str, Any]:
    """The set_fact arguments of the role's tasks (raw expressions, rendered when read), file order."""
    out: dict[str, Any] = {}
    for path in sorted((_roles_dir() / role / "tasks").glob("**/*.yml")):
        for task in _walk(_read(path)):
            found = _module(task, ("set_fact",))
            if found is not None and isinstance(found[1], Mapping):
                out.update({k: v for k, v in found[1].items() if k != "cacheable"})
    return out


def _plays() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(phase, hosts pattern, roles) of every play of the phases that install packages."""
    for name in PHASE_PLAYBOOKS:
        for play in _read(paths.playbooks_dir() / name) or []:
            roles = tuple(
                str(r["role"] if isinstance(r, Mapping) else r).rsplit(".", 1)[-1]
                for r in play.get("roles") or []
            )
            if roles:
                yield name.removesuffix(".yml"), str(play.get("hosts", "all")), roles


def pattern_groups(pattern: str) -> set[str]:
    """Which of GROUPS an Ansible host pattern of group names addresses (`all`, `a:b`, `a:!b`, `a:&b`,
    `control_plane[0]`)."""
    chosen: set[str] = set()
    for raw in pattern.replace(",", ":").split(":"):
        part = raw.strip()
        op = part[:1] if part[:1] in "!&" else ""
        name = part[len(op) :].split("[", 1)[0]
        members = set(GROUPS) if name == "all" else {name} & set(GROUPS)
        if op == "!":
            chosen -= members
        elif op == "&":
            chosen &= members
        else:
            chosen |= members
    return chosen


# -- rendering ---------------------------------------------------------------------------------------


class _Walk:
    """One play of `roles` for one host of `group` on `release`: the role tasks walked, rendered."""

    def __init__(
        self, inv: Inventory, group: str, release: OSRelease, roles: tuple[str, ...], out: ReleasePackages
    ):
        self.group, self.release, self.out = group, release, out
        host = inv.groups[group][0]
        facts = {**release.facts(), "default_ipv4": {"address": inv.hosts[host].address, "interface": "eno1"}}
        extra: dict[str, Any] = {}
        for role in roles:
            extra.update(_role_vars(role, facts))
            extra.update(_role_set_facts(role))
        # The session (Ansible's reading of the inventory) is cached per host and roles: the union of the
        # phases' roles for the group (each role's defaults carry its own prefix; the plays set no vars).
        self.variables = releases.host_variables(
            inv, host, _group_roles(group), {**extra, "ansible_facts": facts}
        )
        # The GPUs of an 8-GPU HGX node; NVSwitches where the driver source has a fabric manager.
        gpu: dict[str, Any] = {"gpu_count": 8, "nvswitch_count": 0, "dgx_os": False, "rdma_nics": []}
        if group == "gpu_nodes" and "nvidia_driver" in roles:
            has_fm = self._true(
                "nvidia_driver_source in __nvidia_driver_fabricmanager_packages | default({})", {}
            )
            gpu["nvswitch_count"] = 4 if has_fm else 0
        self.variables.raw["ansible_facts"] = {**facts, "gpubring_gpu_facts": gpu}

    def _scoped(self, scope: Mapping[str, Any]) -> releases.Variables:
        if not scope:
            return self.variables
        scoped = copy.copy(self.variables)
        scoped.raw = {**self.variables.raw, **scope}
        return scoped

    def _true(self, condition: str, scope: Mapping[str, Any]) -> bool | None:
        """The condition's value for this host; None when it reads something only a run has."""
        try:
            value = self._scoped(scope).resolve(_CONDITION.format(condition), "when")
        except releases.ReleaseRenderError:
            return None
        return str(value).strip() == "True"

    def role(self, role: str, tasks_from: str = "main") -> None:
        self._file(role, _roles_dir() / role / "tasks" / f"{tasks_from}.yml", {}, [])

    def _file(self, role: str, path: Path, scope: Mapping[str, Any], seen: list[Path]) -> None:
        if not path.is_file() or path in seen:
            return
        self._tasks(role, path, _read(path), scope, [*seen, path])

    def _tasks(self, role: str, path: Path, data: Any, scope: Mapping[str, Any], seen: list[Path]) -> None:
        for task in data or []:
            if not isinstance(task, Mapping):
                continue
            own = {**scope, **(task.get("vars") or {})}
            false = [c for c in _conditions(task) if self._true(c, own) is False]
            if false:
                self._skip(path, task, false[0], own)
                continue
            for section in ("block", "rescue", "always"):
                if section in task:
                    self._tasks(role, path, task[section], own, seen)
            if (include := _module(task, INCLUDE_TASKS)) is not None:
                target = include[1]["file"] if isinstance(include[1], Mapping) else include[1]
                try:
                    name = str(self._scoped(own).resolve(target, "include"))
                except releases.ReleaseRenderError as exc:
                    self.out.problems.append(f"{self._where(path, task)}: {exc}")
                    continue
                self._file(role, path.parent / name, own, seen)
            elif (pkg := _module(task, PACKAGE_MODULES)) is not None and isinstance(pkg[1], Mapping):
                self._package(role, path, task, pkg[1], own)
            elif (src := self._source(role, task, own)) is not None:
                source = AptSource(role, self._where(path, task), src)
                if source not in self.out.sources:
                    self.out.sources.append(source)

    def _where(self, path: Path, task: Mapping[str, Any]) -> str:
        return f"{path.relative_to(_roles_dir().parent)}: {task.get('name', '')}"

    def _skip(self, path: Path, task: Mapping[str, Any], condition: str, scope: Mapping[str, Any]) -> None:
        """A task left out: said, and the package tasks under it (its block, its include) still counted
        as read, so the coverage test knows a condition, not a missed file, left them out."""
        if (
            _module(task, PACKAGE_MODULES) is None
            and _module(task, INCLUDE_TASKS) is None
            and "block" not in task
        ):
            return
        self.out.skipped.append((self.group, self._where(path, task), " ".join(condition.split())))
        self._mark(path, [task], scope, [path])

    def _mark(self, path: Path, data: Any, scope: Mapping[str, Any], seen: list[Path]) -> None:
        for task in _walk(data):
            if (
                (pkg := _module(task, PACKAGE_MODULES)) is not None
                and isinstance(pkg[1], Mapping)
                and "name" in pkg[1]
            ):
                self.out.reached.add(self._where(path, task))
            elif (include := _module(task, INCLUDE_TASKS)) is not None:
                target = include[1]["file"] if isinstance(include[1], Mapping) else include[1]
                try:
                    name = str(self._scoped({**scope, **(task.get("vars") or {})}).resolve(target, "include"))
                except releases.ReleaseRenderError:
                    continue
                child = path.parent / name
                if child.is_file() and child not in seen:
                    self._mark(child, _read(child), scope, [*seen, child])

    def _package(
        self, role: str, path: Path, task: Mapping[str, Any], args: Mapping[str, Any], scope: Any
    ) -> None:
        if "name" not in args:
            return  # update_cache only
        where = self._where(path, task)
        self.out.reached.add(where)
        if str(args.get("state", "present")) == "absent":
            return
        try:
            names = self._scoped(scope).resolve(args["name"], where)
        except releases.ReleaseRenderError as exc:
            self.out.problems.append(f"{where}: {exc}")
            return
        listed = [names] if isinstance(names, str) else list(names or [])
        packages, notes = [], []
        for rendered in (str(n).strip() for n in listed):
            name = rendered
            if UNKNOWN_KERNEL in rendered:
                notes.append(
                    f"{rendered.replace(UNKNOWN_KERNEL, '<running kernel>')}: the running kernel is unknown "
                    f"offline, {self.release.headers_metapackage} (the release's default kernel) is taken; "
                    "pin nvidia_driver_kernel_version for the headers of another kernel"
                )
                name = self.release.headers_metapackage
            if name:
                packages.append(name)
        recommends = args.get("install_recommends")
        if recommends is not None:
            recommends = self._true(str(recommends), scope)
        self.out.installs.append(
            Install(
                self.release.key,
                self.group,
                role,
                where,
                tuple(packages),
                "; ".join(notes),
                recommends is not False,
            )
        )

    def _source(self, role: str, task: Mapping[str, Any], scope: Mapping[str, Any]) -> str | None:
        """The apt source a deb822_repository task or a sources.list.d template writes, rendered."""
        variables = self._scoped(scope)
        try:
            if (deb822 := _module(task, ("deb822_repository",))) is not None:
                args = variables.resolve(dict(deb822[1]), "deb822_repository")
                lines = [f"Types: {' '.join(_listed(args.get('types', 'deb')))}"]
                lines.append(f"URIs: {' '.join(_listed(args.get('uris')))}")
                lines.append(f"Suites: {' '.join(_listed(args.get('suites')))}")
                if args.get("components"):
                    lines.append(f"Components: {' '.join(_listed(args.get('components')))}")
                return "\n".join(lines) + "\n"
            template = _module(task, ("template",))
            if template is not None and isinstance(template[1], Mapping):
                src = str(template[1].get("src", ""))
                if src.startswith("etc/apt/sources.list.d/"):
                    return variables.render_file(
                        _roles_dir() / role / "templates" / src, dict(task.get("vars") or {})
                    )
        except releases.ReleaseRenderError as exc:
            self.out.problems.append(str(exc))
        return None


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else str(value).split()


def target_releases(inv: Inventory | None = None) -> tuple[OSRelease, ...]:
    """The releases to bundle: meta/os_support.yml's, narrowed by the inventory's preflight_supported_os
    ([{distribution, versions}]) when it sets one."""
    chosen: tuple[OSRelease, ...] = RELEASES
    if inv is not None:
        try:
            narrowed = releases.host_variables(inv, None, ("preflight",)).get("preflight_supported_os") or []
        except releases.ReleaseRenderError:
            narrowed = []
        if narrowed:
            wanted = {
                (str(o.get("distribution", "")).lower(), str(v))
                for o in narrowed
                if isinstance(o, Mapping)
                for v in o.get("versions") or []
            }
            chosen = tuple(r for r in RELEASES if (r.distro, r.version) in wanted)
    return chosen


@functools.cache
def _phase_plays() -> tuple[tuple[str, frozenset[str], tuple[str, ...]], ...]:
    return tuple((phase, frozenset(pattern_groups(pattern)), roles) for phase, pattern, roles in _plays())


def _group_roles(group: str) -> tuple[str, ...]:
    roles: tuple[str, ...] = ()
    for _phase, groups, play_roles in _phase_plays():
        if group in groups:
            roles = tuple(dict.fromkeys(roles + play_roles))
    return roles


def inventory_packages(inv: Inventory, targets: tuple[OSRelease, ...] | None = None) -> list[ReleasePackages]:
    """The packages every group of `inv` installs on each release (default: target_releases(inv)), in
    the plays of the phases the inventory runs or dry-runs (gpubring_phases and
    gpubring_phases_check_only: apt's check mode needs a package's candidate too; an inventory that
    leaves the cluster phase out installs no kubeadm)."""
    out = []
    phases = {*inv.phases, *inv.phases_check_only}
    for release in target_releases(inv) if targets is None else targets:
        found = ReleasePackages(release)
        for phase, groups, roles in _phase_plays():
            if phase not in phases:
                continue
            for group in sorted(g for g in groups if inv.groups.get(g)):
                walk = _Walk(inv, group, release, roles, found)
                for role in roles:
                    walk.role(role)
        out.append(found)
    return out


def release_packages(inv: Inventory, release: OSRelease) -> ReleasePackages:
    """The packages every group of `inv` installs on `release`, from the phases' plays."""
    return inventory_packages(inv, (release,))[0]
