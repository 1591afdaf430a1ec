# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Action plugin of gpubring.core.download_reachable: the downloads this run makes on this host, computed
on the controller, then the module's connection check on the host (one module call per host)."""

from __future__ import annotations

import os
import re
from typing import Any

import yaml
from ansible.plugins.action import ActionBase
from ansible.template import Templar, trust_as_template

# The collection's root (roles/, playbooks/): plugins/action/ is two folders below it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Which field of which module downloads (the same reading as gpubring.downloads, the CLI's list).
DOWNLOAD_FIELDS = {
    "get_url": ("url",),
    "uri": ("url",),
    "deb822_repository": ("uris",),
    "apt_repository": ("repo",),
    "apt": ("deb",),
}
APT_MODULES = ("deb822_repository", "apt_repository", "apt")
INCLUDES = ("include_tasks", "import_tasks")
URL = re.compile(r"(?:https?|oci)://[^\s\"'<>]+")
# Hosts a role calls that are the cluster itself, not a download.
LOCAL = ("127.0.0.1", "localhost", "::1", "[::1]")
PHASE_PLAYBOOK = "{phase}.yml"


def _trusted(value: Any) -> Any:
    """Values read from the collection's own files, templatable as Ansible's loader makes them."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _short(key: str) -> str:
    return key.rsplit(".", 1)[-1] if key.startswith("ansible.builtin.") or "." not in key else ""


def _when(task: dict[str, Any]) -> list[Any]:
    found = task.get("when")
    if found is None:
        return []
    return list(found) if isinstance(found, list) else [found]


def host_in(pattern: str, host: str, groups: dict[str, list[str]]) -> bool:
    """Whether `host` is in a play's hosts pattern (the forms gpubring's playbooks use: groups, hosts,
    all, group[N], `:`/`,` unions, `!` exclusions and `&` intersections)."""
    chosen: set[str] = set()
    items = [p.strip() for p in re.split(r"[:,]", pattern) if p.strip()]

    def members(item: str) -> set[str]:
        index = re.match(r"^(.+)\[(\d+)\]$", item)
        if index:
            hosts = groups.get(index.group(1)) or []
            n = int(index.group(2))
            return {hosts[n]} if n < len(hosts) else set()
        if item in ("all", "*"):
            return set(groups.get("all") or [host])
        return set(groups.get(item) or ([item] if item == host else []))

    for item in items:
        if item.startswith("!"):
            chosen -= members(item[1:])
        elif item.startswith("&"):
            chosen &= members(item[1:])
        else:
            chosen |= members(item)
    return host in chosen


# Words without which a task file downloads nothing (a plain text test, before any YAML is read).
_DOWNLOAD_WORDS = re.compile(r"\b(get_url|uri|deb822_repository|apt_repository|deb):|sources\.list\.d")


def _may_download(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as handle:
            return _DOWNLOAD_WORDS.search(handle.read()) is not None
    except OSError:
        return False


def _cluster_local(url: str) -> bool:
    host = re.sub(r"^[a-z]+://", "", url).split("/", 1)[0].rsplit(":", 1)[0]
    return host in LOCAL or host.endswith((".svc", ".cluster.local"))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("downloads", "timeout"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        not_checked: list[dict[str, str]] = []
        if args.get("downloads") is None:
            args["downloads"], not_checked = self.run_downloads(task_vars)
        result.update(
            self._execute_module(
                module_name="gpubring.core.download_reachable", module_args=args, task_vars=task_vars
            )
        )
        result["downloads"] = args["downloads"]
        result["not_checked"] = not_checked
        return result

    # -- what this run downloads on this host -----------------------------------------------------

    @staticmethod
    def _load(path: str) -> Any:
        """A YAML file of the collection as plain data (libyaml: Ansible's own loader costs ten times as
        much, and only the variables read from it need to be templates, `_trusted`)."""
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

    def _templar_for(self, variables: dict[str, Any]) -> Templar:
        return Templar(loader=self._loader, variables=variables)

    def run_downloads(self, task_vars: dict[str, Any]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        """(downloads, not checked): every URL the roles of the run's phases fetch on this host, from the
        tasks whose conditions hold; one whose condition or URL cannot be told before the run (it reads
        a result only the run has) is listed as not checked, with why."""
        templar = self._templar_for(task_vars)
        phases = templar.template(task_vars.get("gpubring_phases") or [])
        groups = templar.template(task_vars.get("groups") or {})
        host = str(task_vars.get("inventory_hostname"))
        downloads: list[dict[str, str]] = []
        skipped: list[dict[str, str]] = []
        roles: list[tuple[str, list[Any]]] = []
        for phase in phases:
            plays = self._load(os.path.join(ROOT, "playbooks", PHASE_PLAYBOOK.format(phase=phase))) or []
            for play in plays:
                if not isinstance(play, dict) or not host_in(str(play.get("hosts", "")), host, groups):
                    continue
                for entry in play.get("roles") or []:
                    name = entry.get("role") if isinstance(entry, dict) else entry
                    conditions = _when(entry) if isinstance(entry, dict) else []
                    short = str(name).rsplit(".", 1)[-1]
                    if (short, conditions) not in roles:
                        roles.append((short, conditions))
        for role, conditions in roles:
            self._role_downloads(role, conditions, task_vars, downloads, skipped)
        for kind, variable, when in (
            ("image", "gpubring_registry_mirror", {"cluster", "platform", "verify"}),
            ("chart", "gpubring_chart_mirror", {"cluster", "platform"}),
        ):
            value = str(templar.template(task_vars.get(variable) or "")).strip()
            if value and when & set(phases):
                url = value if "://" in value else f"https://{value}"
                downloads.append({"url": url, "variable": variable, "what": f"the {kind} mirror"})
        unique: list[dict[str, str]] = []
        for item in downloads:
            if item not in unique:
                unique.append(item)
        return unique, skipped

    def _role_variables(self, role: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        """The role's defaults under the run's variables, its vars/ file for the host's OS above them (as
        include_vars with first_found puts it) and its set_fact expressions."""
        path = os.path.join(ROOT, "roles", role)
        defaults = self._load(os.path.join(path, "defaults", "main.yml")) or {}
        facts = task_vars.get("ansible_facts") or {}
        os_vars: dict[str, Any] = {}
        for name in (
            f"{facts.get('distribution')}-{facts.get('distribution_major_version')}.yml",
            f"{facts.get('distribution')}.yml",
            f"{facts.get('os_family')}.yml",
        ):
            found = self._load(os.path.join(path, "vars", name))
            if isinstance(found, dict):
                os_vars = found
                break
        main_vars = self._load(os.path.join(path, "vars", "main.yml")) or {}
        mine = _trusted(defaults)
        return {
            **mine,
            **task_vars,
            **_trusted(main_vars),
            **_trusted(os_vars),
            "role_path": path,
            "ansible_managed": "",
        }

    def _role_downloads(
        self,
        role: str,
        conditions: list[Any],
        task_vars: dict[str, Any],
        downloads: list[dict[str, str]],
        skipped: list[dict[str, str]],
    ) -> None:
        tasks_dir = os.path.join(ROOT, "roles", role, "tasks")
        files = [
            os.path.join(base, name) for base, _dirs, names in os.walk(tasks_dir) for name in sorted(names)
        ]
        if not any(_may_download(path) for path in files):
            return  # most roles download nothing: no YAML read, nothing rendered
        variables = self._role_variables(role, task_vars)
        set_facts: dict[str, Any] = {}
        for path in files:
            for task in self._walk(self._load(path) or [], []):
                for key in ("ansible.builtin.set_fact", "set_fact"):
                    if isinstance(task[0].get(key), dict):
                        set_facts.update(
                            {k: _trusted(v) for k, v in task[0][key].items() if k != "cacheable"}
                        )
        variables = {**variables, **set_facts}
        self._file(
            role=role,
            name="main.yml",
            conditions=conditions,
            variables=variables,
            downloads=downloads,
            skipped=skipped,
            seen=set(),
        )

    def _walk(self, data: Any, conditions: list[Any]) -> list[tuple[dict[str, Any], list[Any]]]:
        out: list[tuple[dict[str, Any], list[Any]]] = []
        for task in data if isinstance(data, list) else []:
            if not isinstance(task, dict):
                continue
            own = conditions + _when(task)
            out.append((task, own))
            for section in ("block", "rescue", "always"):
                out.extend(self._walk(task.get(section), own))
        return out

    def _file(
        self,
        *,
        role: str,
        name: str,
        conditions: list[Any],
        variables: dict[str, Any],
        downloads: list[dict[str, str]],
        skipped: list[dict[str, str]],
        seen: set[str],
    ) -> None:
        path = os.path.join(ROOT, "roles", role, "tasks", name)
        if path in seen:
            return
        seen = seen | {path}
        for task, when in self._walk(self._load(path) or [], conditions):
            if "block" in task:
                continue
            where = f"roles/{role}/tasks/{name}: {task.get('name', '')}".rstrip(": ")
            scope = {**variables, **_trusted(task.get("vars") or {})}
            templar = self._templar_for(scope)
            for key, args in task.items():
                module = _short(str(key))
                if module in INCLUDES:
                    target = args.get("file") if isinstance(args, dict) else args
                    state = self._holds(templar, when)
                    if state is not True:
                        continue
                    try:
                        file_name = str(templar.template(trust_as_template(str(target))))
                    except Exception:
                        continue
                    self._file(
                        role=role,
                        name=file_name,
                        conditions=[],
                        variables=scope,
                        downloads=downloads,
                        skipped=skipped,
                        seen=seen,
                    )
                elif module in DOWNLOAD_FIELDS and isinstance(args, dict):
                    for field in DOWNLOAD_FIELDS[module]:
                        value = args.get(field)
                        for raw in value if isinstance(value, list) else [value] if value else []:
                            self._add(
                                role=role,
                                where=where,
                                module=module,
                                file_name=name,
                                raw=raw,
                                when=when,
                                templar=templar,
                                downloads=downloads,
                                skipped=skipped,
                            )
                elif module == "template" and isinstance(args, dict):
                    src = str(args.get("src") or "")
                    if "sources.list.d" in src:
                        self._add_template(
                            role=role,
                            where=where,
                            src=src,
                            when=when,
                            templar=templar,
                            downloads=downloads,
                            skipped=skipped,
                        )

    def _holds(self, templar: Templar, when: list[Any]) -> bool | str:
        """True, False, or why the conditions cannot be told before the run."""
        for condition in when:
            try:
                if isinstance(condition, bool):
                    held = condition
                else:
                    held = bool(templar.evaluate_conditional(trust_as_template(str(condition))))
            except Exception as exc:
                return f"its condition {condition!r} reads what only the run has ({str(exc).splitlines()[0]})"
            if not held:
                return False
        return True

    def _add(
        self,
        *,
        role: str,
        where: str,
        module: str,
        file_name: str,
        raw: Any,
        when: list[Any],
        templar: Templar,
        downloads: list[dict[str, str]],
        skipped: list[dict[str, str]],
    ) -> None:
        state = self._holds(templar, when)
        if state is False:
            return
        kind = "apt" if module in APT_MODULES or "repository" in file_name else "file"
        variable = "gpubring_apt_mirror" if kind == "apt" else "gpubring_binary_mirror"
        if state is not True:
            skipped.append({"what": where, "why": str(state)})
            return
        try:
            url = str(templar.template(trust_as_template(str(raw)))).strip()
        except Exception as exc:
            skipped.append({"what": where, "why": str(exc).splitlines()[0]})
            return
        if module == "uri" and _cluster_local(url):
            return  # the cluster's own API (certs_renew's readyz), not a download
        self._append(url, variable, where, downloads)

    def _add_template(
        self,
        *,
        role: str,
        where: str,
        src: str,
        when: list[Any],
        templar: Templar,
        downloads: list[dict[str, str]],
        skipped: list[dict[str, str]],
    ) -> None:
        state = self._holds(templar, when)
        if state is False:
            return
        if state is not True:
            skipped.append({"what": where, "why": str(state)})
            return
        path = os.path.join(ROOT, "roles", role, "templates", src)
        try:
            with open(path, encoding="utf-8") as handle:
                text = str(templar.template(trust_as_template(handle.read())))
        except Exception as exc:
            skipped.append({"what": where, "why": str(exc).splitlines()[0]})
            return
        for url in URL.findall(text):
            self._append(url, "gpubring_apt_mirror", where, downloads)

    @staticmethod
    def _append(url: str, variable: str, where: str, downloads: list[dict[str, str]]) -> None:
        if url:
            downloads.append({"url": url, "variable": variable, "what": where})
