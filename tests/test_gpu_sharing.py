"""GPU sharing per node group (gpu_operator_sharing): time-slicing, MIG (named or custom profiles) and
MPS chosen per inventory group through the device plugin's per-node configuration.

- The gpu_operator role's release, rendered by Ansible for an inventory with two sharing groups: one
  ConfigMap with a config per group, the nvidia.com/device-plugin.config and nvidia.com/mig.config
  labels per node, values the pinned chart has, the chart's own objects valid at the pinned
  Kubernetes, each config in the device plugin's shape (its example at v0.20.0).
- node_labels gives a node that joins the same labels (Ansible evaluates the role's vars), and
  removes a config label a node no longer has a group for (the role's own expression).
- `gpubring check` refusals, each with file and key; `gpubring plan` warns about time-slicing.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import upstream
from _render import schema_version, without_nulls
from gpubring.app import app
from gpubring.inventory import load_inventory
from gpubring.releases import host_variables, role_releases
from gpubring.validation.checks.gpu_sharing import named_config_profile, sharing_notes
from helpers import BIN, FIXTURES, REPO, cache_facts, inventory_problems

HOSTS = """\
all:
  children:
    control_plane:
      hosts:
        cp-1: {ansible_host: 192.0.2.11}
    gpu_nodes:
      children:
        gpu_train:
          hosts:
            gpu-1: {ansible_host: 198.51.100.21}
            gpu-2: {ansible_host: 198.51.100.22}
        gpu_infer:
          hosts:
            gpu-3: {ansible_host: 198.51.100.23}
        gpu_dev:
          hosts:
            gpu-4: {ansible_host: 198.51.100.24}
"""
FILE = "group_vars/all/sharing.yml"
# The sample lines for the lead: MIG (mixed, named layout) time-sliced on one group, MPS on another.
SHARING = """\
gpu_operator_sharing:
  gpu_train:
    mig: {strategy: mixed, config: all-1g.10gb}
    time_slicing: {replicas: 2, resources: [nvidia.com/mig-1g.10gb]}
  gpu_infer:
    mps: {replicas: 4}
  gpu_dev:
    time_slicing: {replicas: 4, rename: true}
"""
CUSTOM = """\
gpu_operator_sharing:
  gpu_train:
    mig: {strategy: single, devices: {1g.10gb: 4, 3g.40gb: 1}}
  gpu_infer:
    mig: {strategy: mixed, config: all-disabled}
"""


@pytest.fixture
def sharing_inventory(make_inventory: Callable[..., Path]) -> Callable[[str], Path]:
    def make(text: str) -> Path:
        return make_inventory({"hosts.yml": HOSTS, FILE: text})

    return make


def _gpu_operator(root: Path) -> Any:
    inv = load_inventory(root)
    variables = host_variables(inv, roles=("gpu_operator",))
    (release,) = role_releases("gpu_operator", variables)
    return inv, release


def _node_labels(release: Any) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o["metadata"]["labels"] for o in release.manifests if o["kind"] == "Node"}


def _chart_objects(inv: Any, release: Any) -> list[tuple[str, dict[str, Any]]]:
    chart = upstream.chart_dir("gpu-operator", release.version)
    objects = upstream.render_release(chart, release, inv.versions["kubernetes"]["version"])
    return [("gpubring", o) for o in release.objects()] + objects


def _valid(inv: Any, release: Any, objects: list[tuple[str, dict[str, Any]]]) -> None:
    """The values are the pinned chart's; what sharing changes validates: gpubring's own objects and the
    chart's ConfigMaps at the pinned Kubernetes, the chart's ClusterPolicy against its CRD (the rest of
    the chart is held by tests/test_chart_render.py)."""
    import kubernetes_validate

    chart = upstream.chart_dir("gpu-operator", release.version, to_render=False)
    unknown = list(
        upstream.unknown_value_paths(release.values, upstream.chart_values("gpu-operator", release.version))
    )
    assert not unknown, unknown
    policy_crd = upstream.crd_from_file(chart / "crds" / "nvidia.com_clusterpolicies.yaml")
    problems: list[str] = []
    for where, obj in objects:
        if obj.get("kind") == "ClusterPolicy":
            problems += upstream.crd_errors(obj, policy_crd[obj["apiVersion"], "ClusterPolicy"])
        elif where == "gpubring" or obj.get("kind") == "ConfigMap":
            kubernetes_validate.validate(without_nulls(obj), schema_version(inv), strict=True)
    assert not problems, "\n".join(problems)
    assert any(o.get("kind") == "ClusterPolicy" for _, o in objects)


def test_two_groups_share_their_own_way(sharing_inventory: Callable[[str], Path]) -> None:
    upstream.upstream_dir()
    inv, release = _gpu_operator(sharing_inventory(SHARING))
    assert release.values["devicePlugin"]["config"] == {"name": "time-slicing-config", "default": "any"}
    assert release.values["migManager"]["enabled"] is True
    assert "config" not in release.values["migManager"]  # named layouts: the operator's default config
    (config_map,) = release.pre_manifests
    configs = {key: yaml.safe_load(text) for key, text in config_map["data"].items()}
    assert set(configs) == {"any", "gpu_train", "gpu_infer", "gpu_dev"}
    # Nodes of no group keep today's cluster-wide config.
    assert configs["any"] == {"version": "v1", "flags": {"migStrategy": "single"}}
    assert configs["gpu_train"] == {
        "version": "v1",
        "flags": {"migStrategy": "mixed"},
        "sharing": {
            "timeSlicing": {
                "renameByDefault": False,
                "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}],
            }
        },
    }
    assert configs["gpu_infer"]["sharing"] == {
        "mps": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    }
    assert configs["gpu_dev"]["sharing"]["timeSlicing"]["renameByDefault"] is True
    assert _node_labels(release) == {
        "gpu-1": {"nvidia.com/device-plugin.config": "gpu_train", "nvidia.com/mig.config": "all-1g.10gb"},
        "gpu-2": {"nvidia.com/device-plugin.config": "gpu_train", "nvidia.com/mig.config": "all-1g.10gb"},
        "gpu-3": {"nvidia.com/device-plugin.config": "gpu_infer"},
        "gpu-4": {"nvidia.com/device-plugin.config": "gpu_dev"},
    }
    # Each config has the device plugin's shape (its time-slicing example; MPS takes the same keys:
    # README.md at v0.20.0, "With CUDA MPS").
    example = yaml.safe_load(
        (upstream.upstream_dir() / "k8s-device-plugin/examples/time-slicing-plugin-config.yaml").read_text()
    )["sharing"]["timeSlicing"]
    for config in configs.values():
        assert config["version"] == "v1"
        for body in config.get("sharing", {}).values():
            assert set(body) <= set(example)
            assert all(set(r) == set(example["resources"][0]) for r in body["resources"])
    # No cluster-wide MIG strategy: the operator would put it in the plugin's environment, which wins
    # over each node's config (a mixed group would run single), so the ClusterPolicy carries none.
    assert release.values["mig"] == {"strategy": ""}
    objects = _chart_objects(inv, release)
    (policy,) = [o for _, o in objects if o.get("kind") == "ClusterPolicy"]
    assert "strategy" not in (policy["spec"].get("mig") or {})
    _valid(inv, release, objects)


def test_custom_mig_profiles_get_their_own_mig_parted_config(
    sharing_inventory: Callable[[str], Path],
) -> None:
    upstream.upstream_dir()
    inv, release = _gpu_operator(sharing_inventory(CUSTOM))
    mig = release.values["migManager"]
    assert {k: v for k, v in mig["config"].items() if k != "data"} == {
        "create": True,
        "name": "gpubring-mig-parted-config",
        "default": "all-disabled",
    }
    assert yaml.safe_load(mig["config"]["data"]["config.yaml"]) == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "gpubring-gpu_train": [
                {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 4, "3g.40gb": 1}}
            ],
        },
    }
    assert _node_labels(release)["gpu-1"] == {
        "nvidia.com/device-plugin.config": "gpu_train",
        "nvidia.com/mig.config": "gpubring-gpu_train",
    }
    objects = _chart_objects(inv, release)
    # The pinned chart creates the ConfigMap (templates/mig_config.yaml) and names it in the ClusterPolicy.
    rendered = {(o["kind"], o["metadata"]["name"]): o for _, o in objects}
    assert rendered["ConfigMap", "gpubring-mig-parted-config"]["data"] == mig["config"]["data"]
    policy = rendered["ClusterPolicy", "cluster-policy"]["spec"]
    assert policy["migManager"]["config"]["name"] == "gpubring-mig-parted-config"
    assert policy["devicePlugin"]["config"] == {"name": "time-slicing-config", "default": "any"}
    _valid(inv, release, objects)


def test_the_cluster_wide_setting_of_today_is_unchanged(make_inventory: Callable[..., Path]) -> None:
    """Without gpu_operator_sharing nothing changes: no config, no labels (the mig-timeslicing variant's
    cluster-wide time-slicing is held by tests/test_releases_render.py)."""
    # The sample shares its node groups (group_vars/all/gpu_sharing.yml): without that file.
    _, release = _gpu_operator(make_inventory({"group_vars/all/gpu_sharing.yml": None}))
    assert release.values["mig"] == {"strategy": "single"}
    assert "config" not in release.values["devicePlugin"]
    assert release.pre_manifests == [] and _node_labels(release) == {}


# -- node_labels labels a joining node the same way ------------------------------------------------

_NODE_LABELS_PLAY = """
- name: The sharing labels node_labels computes for a node
  hosts: gpu_nodes
  gather_facts: false
  vars_files:
    - {roles}/node_labels/defaults/main.yml
    - {roles}/node_labels/vars/main.yml
  tasks:
    - name: Compute them (the role's own set_fact of tasks/node.yml)
      ansible.builtin.set_fact: {set_fact}
      vars:
        __node_labels_gpu_facts: {{}}
        __node_labels_node: {{resources: [{{metadata: {{labels: "{{{{ node_before }}}}"}}}}]}}
    - name: Write them
      ansible.builtin.copy:
        content: "{{{{ {{'desired': __node_labels_sharing, 'stale': __node_labels_stale}} | to_json }}}}"
        dest: "{out}/{{{{ inventory_hostname }}}}.json"
        mode: "0600"
      delegate_to: localhost
"""


def test_node_labels_sets_and_removes_the_sharing_labels(
    sharing_inventory: Callable[[str], Path], tmp_path: Path
) -> None:
    root = sharing_inventory(
        SHARING.replace("  gpu_dev:\n    time_slicing: {replicas: 4, rename: true}\n", "")
    )
    node_yml = yaml.safe_load((REPO / "roles/node_labels/tasks/node.yml").read_text())
    block = next(t for t in node_yml if t.get("block"))["block"]
    set_fact = next(t for t in block if "ansible.builtin.set_fact" in t)["ansible.builtin.set_fact"]
    out = tmp_path / "out"
    out.mkdir()
    play = tmp_path / "play.yml"
    play.write_text(
        _NODE_LABELS_PLAY.format(roles=REPO / "roles", set_fact=json.dumps(set_fact), out=out),
        encoding="utf-8",
    )
    # gpu-4 left its group: its node still carries the label gpubring set then, and one of the user's.
    extra = {"node_before": {"nvidia.com/device-plugin.config": "gpu_dev", "other": "x"}}
    subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(root / "hosts.yml"), str(play), "-e", json.dumps(extra)],
        check=True,
        capture_output=True,
        text=True,
    )
    got = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert got["gpu-1"]["desired"] == {
        "nvidia.com/device-plugin.config": "gpu_train",
        "nvidia.com/mig.config": "all-1g.10gb",
    }
    assert got["gpu-3"]["desired"] == {"nvidia.com/device-plugin.config": "gpu_infer"}
    assert got["gpu-4"] == {"desired": {}, "stale": ["nvidia.com/device-plugin.config"]}
    assert got["gpu-1"]["stale"] == []  # its own label is set, not removed


# -- gpubring check refuses what cannot work --------------------------------------------------------


def _problems(root: Path) -> list[str]:
    return inventory_problems(root)


def test_good_sharing_passes(sharing_inventory: Callable[[str], Path]) -> None:
    assert _problems(sharing_inventory(SHARING)) == []
    assert _problems(sharing_inventory(CUSTOM)) == []


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        (
            SHARING.replace("replicas: 4}\n  gpu_dev", "replicas: 1}\n  gpu_dev"),
            "gpu_operator_sharing.gpu_infer.mps.replicas",
            "expected a whole number of replicas >= 2",
        ),
        (
            SHARING.replace("mps: {replicas: 4}", "mps: {replicas: 4}\n    mig: {config: all-1g.10gb}"),
            "gpu_operator_sharing.gpu_infer.mps",
            "expected MPS or MIG on a group, not both",
        ),
        (
            SHARING.replace("mps: {replicas: 4}", "mps: {replicas: 4}\n    time_slicing: {replicas: 2}"),
            "gpu_operator_sharing.gpu_infer.mps",
            "mutually exclusive",
        ),
        (
            SHARING.replace("gpu_dev:", "gpu_devs:"),
            "gpu_operator_sharing.gpu_devs",
            "expected an inventory group with hosts; 'gpu_devs' has none; did you mean gpu_dev?",
        ),
        (
            SHARING.replace("gpu_dev:", "gpu_nodes:").replace("  gpu_infer:\n    mps: {replicas: 4}\n", ""),
            "gpu_operator_sharing.gpu_nodes",
            "expected each host in one sharing group; gpu-1, gpu-2 in 'gpu_train' and 'gpu_nodes'",
        ),
        (
            SHARING.replace("mps: {replicas: 4}", "mps: {replicas: 4, rename: true, renameByDefault: true}"),
            "gpu_operator_sharing.gpu_infer.mps.renameByDefault",
            "expected one of replicas, rename",
        ),
        (
            SHARING.replace("config: all-1g.10gb", "config: all-1g.10gb-custom"),
            "gpu_operator_sharing.gpu_train.mig.config",
            "expected a named MIG config of the GPU Operator",
        ),
        (
            CUSTOM.replace("config: all-disabled", "config: all-3g.40gb"),
            "gpu_operator_sharing.gpu_infer.mig.config",
            "replaces the GPU Operator's default-mig-parted-config",
        ),
        (
            SHARING + "gpu_operator_mig_configs: {gpu_train: all-balanced}\n",
            "gpu_operator_sharing.gpu_train.mig",
            "gpu_operator_mig_configs sets it too",
        ),
        (
            SHARING + "dra_driver_enabled: true\ndra_driver_gpus: true\n",
            "gpu_operator_sharing",
            "expected no device plugin sharing while NVIDIA's DRA driver hands out the GPUs",
        ),
        (
            SHARING.replace("resources: [nvidia.com/mig-1g.10gb]", "resources: [nvidia.com/mig-2g.20gb]"),
            "gpu_operator_sharing.gpu_train.time_slicing.resources",
            "expected MIG resources of the group's layout (nvidia.com/mig-1g.10gb); nvidia.com/mig-2g.20gb",
        ),
        (
            SHARING.replace("strategy: mixed", "strategy: single"),
            "gpu_operator_sharing.gpu_train.time_slicing.resources",
            "expected nvidia.com/gpu with the single MIG strategy",
        ),
    ],
    ids=[
        "replicas",
        "mps-and-mig",
        "mps-and-time-slicing",
        "unknown-group",
        "host-in-two-groups",
        "unknown-key",
        "unknown-named-config",
        "named-beside-custom",
        "mig-configs-twice",
        "dra-gpus",
        "sliced-mig-resource-not-in-layout",
        "sliced-mig-resource-with-single",
    ],
)
def test_refusal(sharing_inventory: Callable[[str], Path], text: str, key: str, words: str) -> None:
    problems = _problems(sharing_inventory(text))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{FILE}: {key}: expected"), problems
    assert words in problems[0], problems


def test_a_mig_profile_the_gpu_lacks_is_refused_once_gpu_facts_saw_it(
    sharing_inventory: Callable[[str], Path],
) -> None:
    """gpu-1's facts in the inventory's fact cache are those of a real H200 (gpu_facts' capture): a
    1g.10gb layout (an 80GB part's) is refused there, the H200's own 1g.18gb is not."""
    root = sharing_inventory(SHARING)
    facts = json.loads((FIXTURES / "gpu-device/h200-1x-580.159.04-device.json").read_text())["ansible_facts"]
    cache_facts(root, {"gpu-1": facts})  # as a run caches them
    [problem] = _problems(root)
    assert problem.startswith(
        f"{FILE}: gpu_operator_sharing.gpu_train.mig.config: expected a MIG profile of gpu-1's GPU "
        "(H200 141GB, device 2335, as gpu_facts found it): one of 1g.18gb,"
    )
    assert problem.endswith("1g.10gb is none")
    fixed = SHARING.replace("all-1g.10gb", "all-1g.18gb").replace("mig-1g.10gb", "mig-1g.18gb")
    (root / FILE).write_text(fixed, encoding="utf-8")
    assert _problems(root) == []
    (root / FILE).write_text(CUSTOM.replace("1g.10gb: 4", "1g.18gb: 4"), encoding="utf-8")
    [problem] = _problems(root)
    assert problem.startswith(
        f"{FILE}: gpu_operator_sharing.gpu_train.mig.devices.3g.40gb: expected a MIG profile"
    )


def test_named_config_profiles() -> None:
    assert named_config_profile("all-1g.10gb") == "1g.10gb"
    assert named_config_profile("all-1g.10gb.me") == "1g.10gb+me"
    assert named_config_profile("all-balanced") is None


# -- plan warns that time-slicing isolates no memory ------------------------------------------------


def test_plan_warns_about_time_slicing(sharing_inventory: Callable[[str], Path]) -> None:
    [note] = sharing_notes(load_inventory(sharing_inventory(SHARING)))
    assert note.startswith(
        "warning: GPUs are time-sliced on group gpu_train, group gpu_dev: time-slicing gives no memory"
    )
    assert (
        sharing_notes(
            load_inventory(sharing_inventory("gpu_operator_sharing: {gpu_infer: {mps: {replicas: 2}}}\n"))
        )
        == []
    )
    result = CliRunner().invoke(app, ["plan", str(sharing_inventory(SHARING))])
    assert "time-slicing gives no memory isolation" in result.output, result.output
