"""Teams as data (issue 24 item 1, roles/teams) and the GPU PriorityClasses (issue 23 item 6).

The sample inventory with two teams and every scheduler on is planned once; its teams release (no
chart) is checked object by object and every object validated at the pinned Kubernetes. Each refusal
of settings.yml (the team's keys) and of cli/gpubring/validation/checks/teams.py (what needs more
than one key, the GPUs of the cluster) names the file and the key, before any host is touched.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from _render import schema_version, without_nulls
from gpubring.inventory import InventoryError, load_inventory
from gpubring.model import Inventory
from gpubring.releases import Release, plan_releases
from helpers import REPO, cache_facts, inventory_problems

FILE = "group_vars/all/teams.yml"
# Two teams with different quotas: team-a borrows up to 8 GPUs and sits behind a default-deny
# NetworkPolicy; research runs in namespace team-b under `restricted`, with no borrowing limit.
TEAMS = """\
gpubring_teams:
  - name: team-a
    admins: ["group:team-a-admins", "user:alice"]
    quota: {gpu: 16, cpu: "256", memory: 2Ti}
    weight: 2
    borrowing_limit: 8
    network_policy: true
  - name: research
    namespace: team-b
    admins: ["group:research"]
    quota: {gpu: 8, extra: {nvidia.com/mig-1g.10gb: 14}}
    lending_limit: 4
    pod_security: restricted
"""
SCHEDULERS = """\
schedulers_volcano_enabled: true
schedulers_kai_enabled: true
schedulers_kueue_enabled: true
"""


def _problems(make_inventory: Callable[..., Path], files: Mapping[str, str]) -> list[str]:
    return inventory_problems(make_inventory(dict(files)))


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Inventory, dict[str, Release]]:
    """The sample with the two teams and Volcano, KAI and Kueue (its sample flavor) on."""
    root = tmp_path_factory.mktemp("teams") / "inventory"
    shutil.copytree(
        REPO / "inventories" / "prod", root, ignore=shutil.ignore_patterns(".gpubring", "README.md")
    )
    (root / FILE).write_text(TEAMS + SCHEDULERS, encoding="utf-8")
    inv = load_inventory(root)
    return inv, {r.name: r for r in plan_releases(inv)}


def _objects(release: Release) -> list[dict[str, Any]]:
    """The release's own objects, without the namespace the helm role ensures for it (kube-system)."""
    return [o for o in release.objects() if o != release.namespace_object]


def _by_kind(release: Release, kind: str) -> dict[str, dict[str, Any]]:
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o
        for o in _objects(release)
        if o["kind"] == kind
    }


def test_the_teams_release_applies_no_chart_before_the_schedulers(
    planned: tuple[Inventory, dict[str, Release]],
) -> None:
    _, releases = planned
    names = list(releases)
    teams = releases["teams"]
    assert teams.chart == "" and teams.source["kind"] == "none" and teams.values == {}
    # Namespaces and PriorityClasses before the queues and WorkloadPriorityClasses that use them.
    assert names.index("teams") < min(names.index(n) for n in ("volcano", "kai-scheduler", "kueue"))
    assert [o["kind"] for o in teams.pre_manifests] == ["PriorityClass"] * 4 + ["Namespace"] * 2


def test_namespaces_carry_the_pod_security_level(planned: tuple[Inventory, dict[str, Release]]) -> None:
    namespaces = _by_kind(planned[1]["teams"], "Namespace")
    assert set(namespaces) == {"/team-a", "/team-b"}
    for name, level in (("/team-a", "baseline"), ("/team-b", "restricted")):
        labels = namespaces[name]["metadata"]["labels"]
        for mode in ("enforce", "audit", "warn"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] == level
    assert namespaces["/team-b"]["metadata"]["labels"]["gpubring.io/team"] == "research"


def test_quota_is_the_teams_own_plus_what_it_may_borrow(
    planned: tuple[Inventory, dict[str, Release]],
) -> None:
    quotas = _by_kind(planned[1]["teams"], "ResourceQuota")
    # team-a: 16 + borrowing_limit 8; cpu and memory as given (Kueue lends no cpu/memory beyond them).
    assert quotas["team-a/gpubring-team"]["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "24",
        "requests.cpu": "256",
        "requests.memory": "2Ti",
    }
    # research: no borrowing limit, so at most every team's quota (what the cohort can lend); the MIG
    # resource from quota.extra.
    assert quotas["team-b/gpubring-team"]["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "24",
        "requests.nvidia.com/mig-1g.10gb": "14",
    }
    # A ResourceQuota on requests.cpu refuses pods without one: every namespace defaults them.
    limit_ranges = _by_kind(planned[1]["teams"], "LimitRange")
    assert set(limit_ranges) == {"team-a/gpubring-team", "team-b/gpubring-team"}
    for limits in limit_ranges.values():
        assert limits["spec"]["limits"] == [
            {"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}
        ]


def test_admins_get_admin_in_their_namespace_only(planned: tuple[Inventory, dict[str, Release]]) -> None:
    bindings = _by_kind(planned[1]["teams"], "RoleBinding")
    admins = bindings["team-a/gpubring-team-admins"]
    assert admins["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "admin",
    }
    assert [(s["kind"], s["name"]) for s in admins["subjects"]] == [
        ("Group", "team-a-admins"),
        ("User", "alice"),
    ]
    assert [(s["kind"], s["name"]) for s in bindings["team-b/gpubring-team-admins"]["subjects"]] == [
        ("Group", "research")
    ]
    # The queues' read access for the team's service accounts and admins.
    queues = bindings["team-b/gpubring-team-queues"]
    assert queues["roleRef"]["kind"] == "Role"
    assert ("Group", "system:serviceaccounts:team-b") in [(s["kind"], s["name"]) for s in queues["subjects"]]


def test_network_policy_denies_by_default_and_allows_what_gpu_jobs_need(
    planned: tuple[Inventory, dict[str, Release]],
) -> None:
    policies = _by_kind(planned[1]["teams"], "NetworkPolicy")
    assert set(policies) == {"team-a/gpubring-team-default-deny"}  # research did not ask for one
    spec = policies["team-a/gpubring-team-default-deny"]["spec"]
    assert spec["podSelector"] == {} and spec["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = spec["ingress"]
    assert {"podSelector": {}} in ingress["from"]  # the team's own pods: NCCL, MPI, Ray
    (monitoring,) = [p for p in ingress["from"] if "namespaceSelector" in p]
    assert monitoring["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    egress = spec["egress"]
    assert {"to": [{"podSelector": {}}]} in egress
    dns = next(e for e in egress if any(p["port"] == 53 for p in e.get("ports", [])))
    assert {p["protocol"] for p in dns["ports"]} == {"UDP", "TCP"}
    assert any(e.get("ports") == [{"protocol": "TCP", "port": 6443}] for e in egress)  # the API server


def test_priority_classes_are_inventory_data(planned: tuple[Inventory, dict[str, Release]]) -> None:
    classes = _by_kind(planned[1]["teams"], "PriorityClass")
    assert {k.lstrip("/"): (o["value"], o["preemptionPolicy"]) for k, o in classes.items()} == {
        "gpubring-inference": (200, "PreemptLowerPriority"),
        "gpubring-training": (80, "PreemptLowerPriority"),
        "gpubring-batch": (50, "PreemptLowerPriority"),
        "gpubring-preemptible": (10, "Never"),
    }
    assert not any(o["globalDefault"] for o in classes.values())


def test_every_teams_object_validates_at_the_pinned_kubernetes(
    planned: tuple[Inventory, dict[str, Release]],
) -> None:
    """Core kinds only, held strictly to the pinned Kubernetes' schema (no CRD is involved, so
    kubernetes-validate directly rather than _render.validation_problems, which loads every CRD)."""
    import kubernetes_validate

    inv, releases = planned
    assert releases["teams"].namespace == "kube-system"
    objects = _objects(releases["teams"])
    assert len(objects) == 4 + 2 + 6 + 5  # PriorityClasses, Namespaces, team-a (with its policy), research
    schema = schema_version(inv)
    for obj in objects:
        kubernetes_validate.validate(without_nulls(obj), schema, strict=True)


def test_no_teams_and_no_scheduler_plans_no_teams_release(make_inventory: Callable[..., Path]) -> None:
    """An inventory without teams and with every scheduler off plans exactly what it did."""
    off = "gpubring_teams: []\nschedulers_kueue_enabled: false\nschedulers_volcano_enabled: false\n"
    root = make_inventory({"group_vars/all/zz-no-teams.yml": off + "schedulers_kai_enabled: false\n"})
    assert "teams" not in {r.name for r in plan_releases(load_inventory(root))}


# -- refusals -------------------------------------------------------------------------------------


def test_the_two_teams_pass(make_inventory: Callable[..., Path]) -> None:
    assert _problems(make_inventory, {FILE: TEAMS + SCHEDULERS}) == []


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ("name: research\n", "name: team-a\n", "gpubring_teams[1]", "same name"),
        ("name: research\n", "name: Research_1\n", "gpubring_teams[1].name", "DNS-1123 label"),
        ("namespace: team-b\n", "namespace: Team-B\n", "gpubring_teams[1].namespace", "DNS-1123 label"),
        ("namespace: team-b\n", "namespace: team-a\n", "gpubring_teams[1].namespace", "namespace of its own"),
        ('"user:alice"', '"alice"', "gpubring_teams[0].admins[1]", "user:NAME or group:NAME"),
        ('cpu: "256"', "cpu: lots", "gpubring_teams[0].quota.cpu", "Kubernetes quantity"),
        (
            "mig-1g.10gb: 14",
            "mig-1g.10gb: many",
            "gpubring_teams[1].quota.extra.nvidia.com/mig-1g.10gb",
            "quantity",
        ),
        ("lending_limit: 4", "lending_limit: 9", "gpubring_teams[1].lending_limit", "at most quota.gpu (8)"),
        ("borrowing_limit: 8", "borrowing_limit: -2", "gpubring_teams[0].borrowing_limit", ">= -1"),
        ("pod_security: restricted", "pod_security: strict", "gpubring_teams[1].pod_security", "one of"),
        ("weight: 2", 'weight: "heavy"', "gpubring_teams[0].weight", "integer"),
        ('    quota: {gpu: 16, cpu: "256", memory: 2Ti}\n', "", "gpubring_teams[0].quota", "required"),
        ("quota: {gpu: 16,", "quota: {gpus: 16,", "gpubring_teams[0].quota.gpus", "unknown key"),
    ],
)
def test_refusal(make_inventory: Callable[..., Path], old: str, new: str, key: str, words: str) -> None:
    assert old in TEAMS
    problems = _problems(make_inventory, {FILE: TEAMS.replace(old, new) + SCHEDULERS})
    assert problems, "accepted"
    assert any(p.startswith(f"{FILE}: {key}") and words in p for p in problems), problems


def test_quotas_over_the_clusters_gpus_are_refused_unless_meant(make_inventory: Callable[..., Path]) -> None:
    """The sample has 4 GPU nodes, 8 GPUs each by gpubring_node_gpus: 32; 16 + 8 + 9 do not fit."""
    more = TEAMS + "  - name: extra\n    quota: {gpu: 9}\n"
    (problem,) = _problems(make_inventory, {FILE: more})
    assert problem.startswith(
        f"{FILE}: gpubring_teams: expected the teams' GPU quotas to fit the cluster's 32 GPUs"
    )
    assert "gpu-1 8 (gpubring_node_gpus)" in problem and "add up to 33" in problem
    assert "gpubring_teams_oversubscribe" in problem
    assert _problems(make_inventory, {FILE: more + "gpubring_teams_oversubscribe: true\n"}) == []
    assert _problems(make_inventory, {FILE: more + "gpubring_node_gpus: 9\n"}) == []


def test_gpu_facts_count_a_node_it_has_seen(make_inventory: Callable[..., Path]) -> None:
    """A node gpu_facts has seen counts what it found (4), the others gpubring_node_gpus: 28 < 24 + 5."""
    root = make_inventory({FILE: TEAMS + "  - name: extra\n    quota: {gpu: 5}\n"})
    cache_facts(root, {"gpu-1": {"gpubring_gpu_facts": {"gpu_count": 4}}})  # as a run caches them
    with pytest.raises(InventoryError) as err:
        load_inventory(root)
    (problem,) = [str(p) for p in err.value.problems]
    assert "cluster's 28 GPUs (gpu-1 4 (gpu_facts), gpu-2 8 (gpubring_node_gpus)" in problem


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        (
            "schedulers_kueue_flavors: [{name: h100, quotas: {nvidia.com/gpu: 32}}]\n",
            "gpubring_teams[1].kueue_flavor",
            "expected a flavor of schedulers_kueue_flavors (h100), got 'h200'",
        ),
        (
            "schedulers_kueue_teams: [{namespace: team-b}]\n",
            "gpubring_teams[1].namespace",
            "not also in schedulers_kueue_teams",
        ),
        ("schedulers_kai_teams_parent: research\n", "gpubring_teams[1].name", "teams' parent queue"),
        (
            "schedulers_volcano_queues: [{name: team-a}]\n",
            "gpubring_teams[0].name",
            "not in schedulers_volcano_queues",
        ),
    ],
)
def test_a_team_queue_that_clashes_is_refused(
    make_inventory: Callable[..., Path], extra: str, key: str, words: str
) -> None:
    teams = TEAMS.replace("pod_security: restricted\n", "pod_security: restricted\n    kueue_flavor: h200\n")
    if "kueue_flavor" not in key:
        teams = TEAMS
    problems = _problems(make_inventory, {FILE: teams + SCHEDULERS, "group_vars/all/zz.yml": extra})
    assert any(p.startswith(f"{FILE}: {key}: expected") and words in p for p in problems), problems


def test_volcanos_own_queue_names_are_refused(make_inventory: Callable[..., Path]) -> None:
    problems = _problems(
        make_inventory, {FILE: TEAMS.replace("name: research", "name: default") + SCHEDULERS}
    )
    assert problems == [
        f"{FILE}: gpubring_teams[1].name: expected a queue name not in Volcano's own queues ('default')"
    ]


def test_a_priority_class_is_checked_like_a_team(make_inventory: Callable[..., Path]) -> None:
    text = "gpubring_priority_classes:\n  - {name: Fast, value: 2000000000, preemption_policy: Sometimes}\n"
    problems = _problems(make_inventory, {FILE: text})
    for key in ("name", "value", "preemption_policy"):
        assert any(p.startswith(f"{FILE}: gpubring_priority_classes[0].{key}: expected") for p in problems), (
            problems
        )


def test_the_sample_names_its_settings_in_the_docs() -> None:
    """settings.yml documents the keys a team takes; docs/platform.md shows how a team is added."""
    settings = yaml.safe_load((REPO / "settings.yml").read_text(encoding="utf-8"))["options"]
    assert set(settings["gpubring_teams"]["options"]) >= {
        "name",
        "namespace",
        "admins",
        "quota",
        "weight",
        "borrowing_limit",
        "lending_limit",
        "pod_security",
        "network_policy",
    }
    docs = (REPO / "docs" / "platform.md").read_text(encoding="utf-8")
    assert "## Teams" in docs and "gpubring_teams:" in docs
