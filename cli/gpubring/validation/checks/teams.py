"""Cross-field checks of the teams (settings.yml gpubring_teams), before any host is touched.

settings.yml checks each team's keys and types (name a DNS-1123 label, quota.gpu a count, the Pod
Security level one of three, no two teams of one name). Here, what needs more than one key:

- a team's namespace (its name when empty) is a DNS-1123 label and no other team's;
- an admin is `user:NAME` or `group:NAME` (RoleBinding subjects of kind User or Group);
- the quota's cpu, memory and extra amounts are Kubernetes quantities, extra's keys resource names;
- a team lends at most its own quota (Kueue: lendingLimit <= nominalQuota);
- with Kueue on, `kueue_flavor` names one of schedulers_kueue_flavors, and no namespace is both a
  team's and one of schedulers_kueue_teams (gpubring_teams replaces that list: two LocalQueues, two
  writers of the namespace);
- a team's queue name is no other queue's: schedulers_volcano_queues, schedulers_kai_queues, the KAI
  parent of the teams (schedulers_kai_teams_parent), and Volcano's own `default` and `root` queues;
- the teams' GPU quotas add up to at most the cluster's GPUs, unless gpubring_teams_oversubscribe
  says the quotas are meant as shares: each GPU node counts what gpu_facts found (the inventory's
  fact cache, gpubring.factcache) or else gpubring_node_gpus (cluster-wide, default 8: an HGX
  node).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpubring import factcache, formats
from gpubring.validation import specs
from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem

if TYPE_CHECKING:
    from gpubring.model import Inventory

# A Kubernetes quantity (k8s.io/apimachinery pkg/api/resource/quantity.go: <signedNumber><suffix>, the
# suffixes binary Ki..Ei, decimal n u m "" k M G T P E, or an exponent).
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_ADMIN = re.compile(r"^(user|group):\S.*$")
# Volcano creates the queues `default` and `root` itself (volcano-sh/volcano pkg/controllers/queue).
_VOLCANO_OWN_QUEUES = ("default", "root")
SCHEDULER_KEYS = (
    "schedulers_kueue_enabled",
    "schedulers_kueue_flavors",
    "schedulers_kueue_teams",
    "schedulers_volcano_enabled",
    "schedulers_volcano_queues",
    "schedulers_kai_enabled",
    "schedulers_kai_queues",
    "schedulers_kai_teams_parent",
)


def namespace_of(team: Mapping[str, Any]) -> str:
    """The team's namespace: its own, or its name."""
    return str(team.get("namespace") or team.get("name") or "")


def _fact_gpus(inv: Inventory, host: str) -> int | None:
    """The GPU count gpu_facts recorded for `host` in the inventory's fact cache, if any."""
    try:
        count = (factcache.host_facts(inv.root, host) or {})["gpubring_gpu_facts"]["gpu_count"]
    except (KeyError, TypeError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def cluster_gpus(inv: Inventory) -> tuple[int, list[str]]:
    """The cluster's GPUs as the plan counts them, and how (one entry per GPU node)."""
    value = inv.settings.get("gpubring_node_gpus", 8)
    per_node = value if isinstance(value, int) and not isinstance(value, bool) else 0
    total, how = 0, []
    for name in inv.groups.get("gpu_nodes", ()):
        if name not in inv.hosts:
            continue
        found = _fact_gpus(inv, name)
        if found is None:
            found = per_node
            how.append(f"{name} {found} (gpubring_node_gpus)")
        else:
            how.append(f"{name} {found} (gpu_facts)")
        total += found
    return total, how


def _scheduler_values(inv: Inventory) -> dict[str, Any]:
    first = next(iter(inv.groups.get("control_plane", ())), None)
    defaults = specs.load_specs().defaults()
    host_vars: Mapping[str, Any] = inv.hosts[first].vars if first in inv.hosts else {}
    return {key: host_vars.get(key, defaults.get(key)) for key in SCHEDULER_KEYS}


def _list(values: Mapping[str, Any], key: str) -> list[Any]:
    return values[key] if isinstance(values[key], list) else []


def _team_problems(team: Mapping[str, Any], path: str, seen: dict[str, str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    namespace = namespace_of(team)
    if team.get("namespace") and (bad := formats.check("dns_label", namespace)):
        out.append((f"{path}.namespace", f"expected {bad}"))
    elif namespace in seen:
        out.append(
            (f"{path}.namespace", f"expected a namespace of its own; {seen[namespace]} has {namespace!r}")
        )
    else:
        seen[namespace] = path
    for i, admin in enumerate(team.get("admins") or []):
        if not isinstance(admin, str) or not _ADMIN.match(admin):
            out.append((f"{path}.admins[{i}]", f"expected user:NAME or group:NAME, got {admin!r}"))
    quota = team.get("quota")
    if not isinstance(quota, Mapping):
        return out  # settings.yml's type check says so
    for key in ("cpu", "memory"):
        amount = quota.get(key)
        if amount not in (None, "") and not _QUANTITY.match(str(amount)):
            out.append(
                (f"{path}.quota.{key}", f"expected a Kubernetes quantity (64, 500m, 2Ti), got {amount!r}")
            )
    extra = quota.get("extra") or {}
    if isinstance(extra, Mapping):
        for resource, amount in extra.items():
            if bad := formats.check("label_key", str(resource)):
                out.append((f"{path}.quota.extra.{resource}", f"expected a resource name: {bad}"))
            elif isinstance(amount, bool) or not _QUANTITY.match(str(amount)):
                out.append(
                    (f"{path}.quota.extra.{resource}", f"expected a Kubernetes quantity, got {amount!r}")
                )
    gpu, lend = quota.get("gpu"), team.get("lending_limit", -1)
    if isinstance(gpu, int) and isinstance(lend, int) and lend > gpu:
        out.append(
            (
                f"{path}.lending_limit",
                f"expected at most quota.gpu ({gpu}): a team lends only its own GPUs, got {lend}",
            )
        )
    return out


def _queue_problems(teams: list[Mapping[str, Any]], values: Mapping[str, Any]) -> list[tuple[int, str, str]]:
    """(team index, key, what was expected) for every clash with the schedulers' own queues."""
    out: list[tuple[int, str, str]] = []
    names = [str(t.get("name", "")) for t in teams]
    flavors = _list(values, "schedulers_kueue_flavors")
    flavor_names = [str(f.get("name")) for f in flavors if isinstance(f, Mapping)]
    if values["schedulers_kueue_enabled"] is True:
        legacy = _list(values, "schedulers_kueue_teams")
        legacy_ns = {str(t.get("namespace")) for t in legacy if isinstance(t, Mapping)}
        for i, team in enumerate(teams):
            if namespace_of(team) in legacy_ns:
                out.append(
                    (
                        i,
                        "namespace",
                        f"expected a namespace not also in schedulers_kueue_teams ({namespace_of(team)!r}): "
                        "the team's LocalQueue replaces that entry; remove it there",
                    )
                )
            flavor = team.get("kueue_flavor") or ""
            if flavor and flavor not in flavor_names:
                known = ", ".join(flavor_names) or "none declared"
                out.append(
                    (
                        i,
                        "kueue_flavor",
                        f"expected a flavor of schedulers_kueue_flavors ({known}), got {flavor!r}",
                    )
                )
    if values["schedulers_volcano_enabled"] is True:
        queues = _list(values, "schedulers_volcano_queues")
        taken = {str(q.get("name")): "schedulers_volcano_queues" for q in queues if isinstance(q, Mapping)}
        taken.update({name: "Volcano's own queues" for name in _VOLCANO_OWN_QUEUES})
        out.extend(
            (i, "name", f"expected a queue name not in {taken[n]} ({n!r})")
            for i, n in enumerate(names)
            if n in taken
        )
    if values["schedulers_kai_enabled"] is True:
        queues = _list(values, "schedulers_kai_queues")
        taken = {str(q.get("name")): "schedulers_kai_queues" for q in queues if isinstance(q, Mapping)}
        taken[str(values["schedulers_kai_teams_parent"])] = (
            "schedulers_kai_teams_parent, the teams' parent queue"
        )
        out.extend(
            (i, "name", f"expected a queue name not in {taken[n]} ({n!r})")
            for i, n in enumerate(names)
            if n in taken
        )
    return out


@register_validator
def teams(inv: Inventory) -> list[Problem]:
    """The team list makes namespaces, quotas and queues that can exist together on this cluster."""
    value = inv.settings.get("gpubring_teams") or []
    if not isinstance(value, list) or specs.templated(value):
        return []
    file, key = inv.setting_origin("gpubring_teams")
    items = [(i, t) for i, t in enumerate(value) if isinstance(t, Mapping) and not specs.templated(t)]
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for i, team in items:
        problems.extend(Problem(file, k, e) for k, e in _team_problems(team, f"{key}[{i}]", seen))
    values = _scheduler_values(inv)
    if not any(specs.templated(v) for v in values.values()):
        mapped = [t for _, t in items]
        problems.extend(
            Problem(file, f"{key}[{items[n][0]}].{k}", e) for n, k, e in _queue_problems(mapped, values)
        )
    gpus = [t["quota"].get("gpu") for _, t in items if isinstance(t.get("quota"), Mapping)]
    wanted = sum(g for g in gpus if isinstance(g, int) and not isinstance(g, bool))
    if wanted and inv.settings.get("gpubring_teams_oversubscribe") is not True:
        have, how = cluster_gpus(inv)
        if wanted > have:
            counted = ", ".join(how) if how else "no host in gpu_nodes"
            problems.append(
                Problem(
                    file,
                    key,
                    f"expected the teams' GPU quotas to fit the cluster's {have} GPUs ({counted}); they "
                    f"add up to {wanted}. Lower the quotas (what a team may use beyond its quota is "
                    "borrowing_limit), set gpubring_node_gpus for nodes the count misses, or set "
                    "gpubring_teams_oversubscribe: true if the quotas are meant as shares that "
                    "oversubscribe it",
                )
            )
    return problems
