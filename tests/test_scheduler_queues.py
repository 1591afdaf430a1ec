"""Queues per team that nothing bypasses (issue 24 item 2) and the priorities wired into them (issue 23
item 6), rendered from the all-on inventory (two teams, Kueue with two flavors, Volcano and KAI on).

- Kueue: a ClusterQueue per team in one cohort with fair sharing, borrowing/lending limits and a
  LocalQueue; the configuration rendered through the pinned chart is the chart's own default plus
  manageJobsWithoutQueueName (system namespaces excluded), waitForPodsReady, fairSharing and
  IgnoreUndeclared; WorkloadPriorityClasses of gpubring_priority_classes.
- Volcano: a Queue per team (weight, deserved, capability); KAI: a parent queue with a child per team.
- Every object of these inventories is validated against the pinned CRDs by tests/test_chart_render.py
  (all-on and dra-kueue-rdma are among its inventories), the Kueue chart's values keys there too.
- Without teams Kueue is as before: one ClusterQueue, the chart's own configuration.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

import upstream
from _render import planned_releases
from gpubring.inventory import Inventory, load_inventory
from gpubring.releases import Release
from helpers import DATA, REPO

ALL_ON = DATA / "inventories" / "all-on"
NO_TEAMS = DATA / "inventories" / "dra-kueue-rdma"  # Kueue with flavors and schedulers_kueue_teams
# The keys gpubring adds to the pinned chart's Kueue configuration with teams.
ADDED = {
    "manageJobsWithoutQueueName",
    "managedJobsNamespaceSelector",
    "waitForPodsReady",
    "fairSharing",
    "resources",
}


@cache
def plan(root: str) -> tuple[Inventory, dict[str, Release]]:
    inv = load_inventory(REPO / root)
    return inv, {r.name: r for r in planned_releases(inv)}


def _kinds(release: Release, kind: str) -> list[dict[str, Any]]:
    return [o for o in release.objects() if o["kind"] == kind]


def _chart_default_config() -> dict[str, Any]:
    _, releases = plan(str(ALL_ON))
    values = upstream.chart_values("kueue", releases["kueue"].version)
    config: dict[str, Any] = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    return config


def test_a_cluster_queue_per_team_in_one_cohort() -> None:
    _, releases = plan(str(ALL_ON))
    kueue = releases["kueue"]
    queues = {q["metadata"]["name"]: q["spec"] for q in _kinds(kueue, "ClusterQueue")}
    assert set(queues) == {"team-a", "research"}  # no single gpu-cluster-queue with teams
    assert {q["cohortName"] for q in queues.values()} == {"gpus"}  # the inventory's cohort
    team_a, research = queues["team-a"], queues["research"]
    assert team_a["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}
    assert research["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-b"}}
    assert (team_a["fairSharing"], research["fairSharing"]) == ({"weight": "2"}, {"weight": "1"})
    assert team_a["preemption"] == {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority"},
    }
    (group,) = team_a["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    (flavor,) = group["flavors"]
    assert flavor["name"] == "h100"  # the first flavor by default
    assert flavor["resources"][0] == {"name": "nvidia.com/gpu", "nominalQuota": "16", "borrowingLimit": "8"}
    assert {r["name"]: r.get("borrowingLimit") for r in flavor["resources"][1:]} == {
        "cpu": "0",
        "memory": "0",
    }
    (group,) = research["resourceGroups"]
    assert group == {
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [
            {
                "name": "h100-spot",
                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8", "lendingLimit": "4"}],
            }
        ],
    }
    local = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"] for q in _kinds(kueue, "LocalQueue")
    }
    assert local == {
        ("team-a", "default"): {"clusterQueue": "team-a"},
        ("team-b", "default"): {"clusterQueue": "research"},
    }
    # The teams' namespaces are the teams release's (with their PSA labels), not Kueue's.
    assert kueue.pre_manifests == []


def test_kueue_holds_jobs_without_a_queue_outside_the_system_namespaces() -> None:
    """The configuration the pinned chart renders into its ConfigMap is its own default with
    exactly gpubring's keys added."""
    inv, releases = plan(str(ALL_ON))
    kueue = releases["kueue"]
    chart = upstream.chart_dir("kueue", kueue.version)
    objects = upstream.render_release(chart, kueue, inv.versions["kubernetes"]["version"])
    (config_map,) = [
        o for _, o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("manager-config")
    ]
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    default = _chart_default_config()
    # The chart's template adds internalCertManagement to whatever configuration it is given.
    assert config.pop("internalCertManagement")["enable"] is True
    assert set(config) - set(default) == ADDED
    assert {k: v for k, v in config.items() if k not in ADDED} == default
    assert config["manageJobsWithoutQueueName"] is True
    assert config["waitForPodsReady"] == {"timeout": "30m", "blockAdmission": False}
    assert config["fairSharing"] == {
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    }
    assert config["resources"] == {"quotaCheckStrategy": "IgnoreUndeclared"}
    (expression,) = config["managedJobsNamespaceSelector"]["matchExpressions"]
    assert expression["key"] == "kubernetes.io/metadata.name" and expression["operator"] == "NotIn"
    unmanaged = set(expression["values"])
    # Every namespace a release of the plan runs in is left alone (Kueue's pod integration would gate
    # the platform's own pods), and no team's namespace is.
    assert {r.namespace for r in releases.values()} <= unmanaged
    assert {"kube-system", "kube-public", "kube-node-lease", "kueue-system", "gpubring-verify"} <= unmanaged
    assert not {"team-a", "team-b"} & unmanaged


def test_priorities_are_workload_priority_classes() -> None:
    for root in (ALL_ON, NO_TEAMS):  # the single ClusterQueue asks for preemption too
        _, releases = plan(str(root))
        classes = {
            c["metadata"]["name"]: c["value"] for c in _kinds(releases["kueue"], "WorkloadPriorityClass")
        }
        assert classes == {
            "gpubring-inference": 200,
            "gpubring-training": 80,
            "gpubring-batch": 50,
            "gpubring-preemptible": 10,
        }
        pcs = {c["metadata"]["name"]: c["value"] for c in _kinds(releases["teams"], "PriorityClass")}
        assert pcs == classes


def test_volcano_and_kai_queues_per_team() -> None:
    _, releases = plan(str(ALL_ON))
    volcano = {q["metadata"]["name"]: q["spec"] for q in _kinds(releases["volcano"], "Queue")}
    assert volcano == {
        "team-a": {
            "weight": 2,
            "reclaimable": True,
            "deserved": {"nvidia.com/gpu": "16"},
            "capability": {"nvidia.com/gpu": "24"},
        },
        "research": {"weight": 1, "reclaimable": True, "deserved": {"nvidia.com/gpu": "8"}},
    }
    kai = {q["metadata"]["name"]: q["spec"] for q in _kinds(releases["kai-scheduler"], "Queue")}
    assert set(kai) == {"teams", "team-a", "research"}
    assert "parentQueue" not in kai["teams"] and kai["teams"]["resources"]["gpu"]["quota"] == 24
    assert kai["team-a"]["parentQueue"] == kai["research"]["parentQueue"] == "teams"
    assert kai["team-a"]["resources"]["gpu"] == {"quota": 16, "limit": 24, "overQuotaWeight": 2}
    assert kai["research"]["resources"]["gpu"] == {"quota": 8, "limit": -1, "overQuotaWeight": 1}


def test_without_teams_kueue_is_as_before() -> None:
    _, releases = plan(str(NO_TEAMS))
    kueue = releases["kueue"]
    assert "managerConfig" not in kueue.values  # the chart's own configuration
    (queue,) = _kinds(kueue, "ClusterQueue")
    assert queue["metadata"]["name"] == "gpu-cluster-queue" and queue["spec"]["cohortName"] == "gpus"
    assert "fairSharing" not in queue["spec"]
    assert {(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in _kinds(kueue, "LocalQueue")} == {
        ("team-a", "gpu-cluster-queue"),
        ("team-b", "gpu-cluster-queue"),
    }
    assert [o["metadata"]["name"] for o in kueue.pre_manifests] == ["team-a", "team-b"]
