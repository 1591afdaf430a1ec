"""The platform releases, rendered from inventories and checked against upstream.

For the sample inventory and the variants in tests/data/inventories, gpubring.releases renders every
release from the roles' templates with Ansible in-process (the template lookup a run uses), and:
- each Kubernetes core object validates with kubernetes-validate at the pinned Kubernetes version
  (the nearest schema version the package ships);
- each custom resource validates against its upstream CRD's openAPIV3Schema;
- each Helm values key path exists in the upstream chart's values.yaml (free-form maps excepted).
The upstream data comes from GPUBRING_UPSTREAM_DIR (tests/upstream.py); without it those checks skip.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

import upstream
from _render import nearest_schema_version, planned_releases, run_play, schema_version
from gpubring.inventory import InventoryError, load_inventory
from gpubring.releases import (
    Release,
    ReleaseRenderError,
    host_variables,
    render_template,
    role_releases,
)
from helpers import REPO, SAMPLE_RELEASES

INVENTORIES = {
    "prod": REPO / "inventories" / "prod",
    "mig-timeslicing": REPO / "tests" / "data" / "inventories" / "mig-timeslicing",
    "dra-kueue-rdma": REPO / "tests" / "data" / "inventories" / "dra-kueue-rdma",
}


@pytest.fixture(scope="module")
def plans() -> dict[str, tuple[Any, list[Release]]]:
    out = {}
    for name, path in INVENTORIES.items():
        inv = load_inventory(path)
        out[name] = (inv, planned_releases(inv))
    return out


def _releases(plans: dict[str, tuple[Any, list[Release]]], inventory: str) -> dict[str, Release]:
    return {r.name: r for r in plans[inventory][1]}


def _objects(plans: dict[str, tuple[Any, list[Release]]]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for inventory, (_, releases) in plans.items():
        for release in releases:
            for obj in release.objects():
                yield inventory, release.name, obj


# -- what the inventories render (no upstream data needed) ---------------------------------------


def test_sample_renders_the_gpu_operator_with_the_host_driver(plans: dict[str, Any]) -> None:
    releases = _releases(plans, "prod")
    assert tuple(releases) == SAMPLE_RELEASES
    gpu = releases["gpu-operator"]
    assert gpu.values["driver"] == {"enabled": False}
    assert gpu.values["toolkit"] == {"enabled": False}  # nvidia_container_toolkit_owner defaults to host
    # Sharing per node group: one device plugin config per group, whole GPUs on the nodes of none.
    assert gpu.values["devicePlugin"] == {
        "enabled": True,
        "config": {"name": "time-slicing-config", "default": "any"},
    }
    (config,) = [
        o
        for o in gpu.objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "time-slicing-config"
    ]
    per_group = {group: yaml.safe_load(text) for group, text in config["data"].items()}
    assert set(per_group) == {"any", "gpu_infer", "gpu_dev"}
    assert "sharing" not in per_group["any"] and "sharing" not in per_group["gpu_infer"]
    assert per_group["gpu_infer"]["flags"]["migStrategy"] == "mixed"
    assert per_group["gpu_dev"]["sharing"]["timeSlicing"] == {
        "renameByDefault": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
    }
    assert gpu.values["dcgmExporter"]["serviceMonitor"]["enabled"] is True  # monitoring is on
    assert gpu.version == plans["prod"][0].versions["gpu_operator"]["chart"]
    assert gpu.ref == "https://helm.ngc.nvidia.com/nvidia gpu-operator"
    assert gpu.ready == [
        {
            "api_version": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "name": "cluster-policy",
            "state": "ready",
            "why": "every operand of the ClusterPolicy (toolkit, device plugin, DCGM, validator) is ready",
        }
    ]
    # The sharing groups' nodes are labelled with their config and MIG layout; gpu_train's are not.
    nodes = {o["metadata"]["name"]: o["metadata"]["labels"] for o in gpu.objects() if o["kind"] == "Node"}
    assert nodes == {
        "gpu-3": {"nvidia.com/device-plugin.config": "gpu_infer", "nvidia.com/mig.config": "all-balanced"},
        "gpu-4": {"nvidia.com/device-plugin.config": "gpu_dev"},
    }
    assert [o["kind"] for o in gpu.objects()] == ["Namespace", "ConfigMap", "Node", "Node"]


def test_mig_and_time_slicing_variant(plans: dict[str, Any]) -> None:
    releases = _releases(plans, "mig-timeslicing")
    # playbooks/platform.yml order: monitoring before the GPU Operator (its ServiceMonitor CRD).
    assert list(releases) == [
        "kube-prometheus-stack",
        "gpu-alerts",
        "prometheus-adapter",
        "gpu-operator",
        "teams",  # the GPU PriorityClasses, applied with any scheduler (roles/teams)
        "volcano",
        "kai-scheduler",
    ]
    gpu = releases["gpu-operator"]
    assert gpu.values["mig"] == {"strategy": "mixed"}
    # The operator's toolkit ignores an unprivileged pod's NVIDIA_VISIBLE_DEVICES (nvidia_container_toolkit).
    assert gpu.values["toolkit"] == {
        "enabled": True,
        "env": [
            {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
            {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"},
        ],
    }
    assert gpu.values["devicePlugin"]["config"] == {"name": "time-slicing-config", "default": "any"}
    assert gpu.values["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert gpu.values["daemonsets"]["updateStrategy"] == "OnDelete"
    (config_map,) = gpu.pre_manifests
    assert config_map["metadata"] == {"name": "time-slicing-config", "namespace": "gpu-operator"}
    plugin_config = yaml.safe_load(config_map["data"]["any"])
    assert plugin_config["flags"] == {"migStrategy": "mixed"}
    sharing = plugin_config["sharing"]["timeSlicing"]
    assert {r["name"]: r["replicas"] for r in sharing["resources"]} == {
        "nvidia.com/gpu": 4,
        "nvidia.com/mig-1g.10gb": 4,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 4,
    }
    labels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in gpu.manifests if o["kind"] == "Node"}
    assert labels == {
        "a100-1": {"nvidia.com/mig.config": "all-1g.10gb"},
        "a100-2": {"nvidia.com/mig.config": "all-1g.10gb"},
        "h100-1": {"nvidia.com/mig.config": "all-balanced"},
    }
    # Every chart comes from the OCI mirror, by its name.
    assert {r.name: r.source["chart_ref"] for r in releases.values() if r.chart} == {
        r.name: f"oci://registry.example.internal/charts/{r.chart.rsplit('/', 1)[-1]}"
        for r in releases.values()
        if r.chart
    }


def test_dra_kueue_rdma_variant(plans: dict[str, Any]) -> None:
    inv, _ = plans["dra-kueue-rdma"]
    assert inv.versions["kubernetes"]["version"] == "1.35.9"  # as the inventory states it
    assert inv.versions["nvidia_driver"]["version"].startswith("580.")
    releases = _releases(plans, "dra-kueue-rdma")
    assert list(releases) == [
        "kube-prometheus-stack",
        "gpu-alerts",
        "prometheus-adapter",
        "gpu-operator",
        "network-operator",
        "teams",
        "kueue",
        "nvidia-dra-driver-gpu",
    ]
    gpu = releases["gpu-operator"]
    # ComputeDomains on the gpu_dra group: every GPU node keeps the device plugin (the validator waits
    # for nvidia.com/gpu on each), and no node's device plugin is switched off by label.
    assert gpu.values["devicePlugin"]["enabled"] is True
    labels = [o["metadata"].get("labels", {}) for o in gpu.manifests]
    assert not any("nvidia.com/gpu.deploy.device-plugin" in node for node in labels)
    dra = releases["nvidia-dra-driver-gpu"]
    # GPUs through DRA stay off, as chart 0.4.1's validation.yaml has them; the kubelet plugin runs
    # only on the group's nodes, by name.
    assert dra.values["resources"] == {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}}
    assert dra.values["gpuResourcesEnabledOverride"] is False
    assert "nodeSelector" not in dra.values["kubeletPlugin"]
    affinity = dra.values["kubeletPlugin"]["affinity"]["nodeAffinity"]
    by_name = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gb200-1", "gb200-2"]}
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [by_name]}]
    }
    assert dra.ready == []  # no GPU ResourceSlices to wait for
    assert dra.values["nvidiaDriverRoot"] == "/"
    # The renamed chart keeps the old chart's object names (an existing release upgrades in place).
    assert dra.values["nameOverride"] == "nvidia-dra-driver-gpu"
    assert dra.source["kind"] == "file"
    assert dra.source["copy_from"] == str(
        (INVENTORIES["dra-kueue-rdma"] / "charts/dra-driver-nvidia-gpu-0.4.1.tgz").resolve()
    )
    # Network Operator: no ofedDriver with the host RDMA stack, selectors as given, nv-ipam pools.
    ncp = next(o for o in releases["network-operator"].manifests if o["kind"] == "NicClusterPolicy")
    assert "ofedDriver" not in ncp["spec"]
    config = yaml.safe_load(ncp["spec"]["rdmaSharedDevicePlugin"]["config"])
    assert config["configList"][0]["selectors"] == {"vendors": ["15b3"], "deviceIDs": ["1021"]}
    assert {o["kind"] for o in releases["network-operator"].manifests} == {
        "NicClusterPolicy",
        "IPPool",
        "MacvlanNetwork",
        "IPoIBNetwork",
    }
    assert releases["network-operator"].values["nfd"] == {"enabled": False}  # the GPU Operator's NFD runs
    # Kueue: a flavor per GPU model, one ClusterQueue with every flavor's quota, a LocalQueue per team.
    kueue = releases["kueue"]
    kinds = [o["kind"] for o in kueue.manifests]
    # gpubring_priority_classes first, as Kueue WorkloadPriorityClasses (roles/teams applies the classes).
    assert kinds == [
        *["WorkloadPriorityClass"] * 4,
        *["ResourceFlavor", "ResourceFlavor", "ClusterQueue", "LocalQueue", "LocalQueue"],
    ]
    (queue,) = [o for o in kueue.manifests if o["kind"] == "ClusterQueue"]
    (group,) = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    for flavor in group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    assert {
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in kueue.manifests
        if o["kind"] == "LocalQueue"
    } == {("team-a", "default"), ("team-b", "research")}
    assert [o["metadata"]["name"] for o in kueue.pre_manifests] == ["team-a", "team-b"]
    # Monitoring: gpubring's own DCGM ServiceMonitor, the operator's off; the idle alert.
    assert gpu.values["dcgmExporter"]["serviceMonitor"]["enabled"] is False
    alerts = releases["gpu-alerts"]
    assert alerts.chart == "" and alerts.source["kind"] == "none"
    rule = next(o for o in alerts.manifests if o["kind"] == "PrometheusRule")
    (idle,) = rule["spec"]["groups"][0]["rules"]
    assert idle["alert"] == "GPUIdle" and idle["for"] == "30m"
    assert (
        "DCGM_FI_DEV_GPU_UTIL" in idle["expr"]
        and "< 5 " in idle["expr"]
        and 'phase="Running"' in idle["expr"]
    )
    assert "{{ $labels.pod }}" in idle["annotations"]["description"]
    adapter = releases["prometheus-adapter"].values["rules"]["custom"][0]
    assert adapter["name"]["as"] == "pod_gpu_utilization"


def test_a_misspelled_role_input_is_refused_with_its_file(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    for src in INVENTORIES["mig-timeslicing"].rglob("*"):
        if src.is_file():
            dest = root / src.relative_to(INVENTORIES["mig-timeslicing"])
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(
                src.read_text().replace("gpu_operator_mig_strategy:", "gpu_operator_mig_stratgy:")
            )
    with pytest.raises(InventoryError) as err:
        load_inventory(root)
    assert any(
        p.key == "gpu_operator_mig_stratgy" and p.file == "group_vars/all/platform.yml"
        for p in err.value.problems
    ), err.value.problems


def test_a_template_error_names_the_template() -> None:
    inv = load_inventory(INVENTORIES["prod"])
    variables = host_variables(
        inv, host_vars={"gpu_operator_time_slicing_replicas": 2, "gpu_operator_time_slicing_resources": 5}
    )
    with pytest.raises(ReleaseRenderError) as err:
        role_releases("gpu_operator", variables)
    assert "roles/gpu_operator/templates/releases/gpu-operator/manifests.yml.j2" in str(err.value)


def test_render_template_renders_a_host_role_template() -> None:
    """The `{{ ansible_managed | comment }}` header as Ansible's own filter writes it, the role's vars
    built from host_vars, and an error that names the template, with Ansible's message."""
    from ansible.plugins.filter.core import comment

    inv = load_inventory(INVENTORIES["prod"])
    template = "kernel/templates/etc/modules-load.d/gpubring.conf.j2"
    text = render_template(
        inv, template, host="gpu-1", host_vars={"kernel_modules_extra": ["nvidia_peermem"]}
    )
    assert text.startswith(comment("Ansible managed") + "\n# Kernel modules")
    assert text.splitlines()[-3:] == ["overlay", "br_netfilter", "nvidia_peermem"]
    with pytest.raises(ReleaseRenderError) as err:
        render_template(inv, template, host_vars={"kernel_modules_extra": "{{ no_such_variable }}"})
    assert err.value.where == f"roles/{template}"
    assert "undefined" in err.value.message.lower()  # Ansible's own message


# -- against upstream ------------------------------------------------------------------------------


def test_core_objects_validate_at_the_pinned_kubernetes(plans: dict[str, Any]) -> None:
    checked, custom = 0, set()
    for inventory, release, obj in _objects(plans):
        schema = schema_version(plans[inventory][0])
        try:
            kubernetes_validate.validate(obj, schema, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{inventory} {release} {obj['kind']}/{obj['metadata'].get('name')}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            custom.add((obj["apiVersion"], obj["kind"]))  # a custom resource: checked against its CRD
            continue
        checked += 1
    assert checked >= 10
    # Every kind kubernetes-validate does not know must be a custom resource of a known project.
    assert {api.split("/")[0] for api, _ in custom} <= {
        "mellanox.com",
        "nv-ipam.nvidia.com",
        "kueue.x-k8s.io",
        "scheduling.volcano.sh",
        "scheduling.run.ai",
        "monitoring.coreos.com",
        "metallb.io",
        "gateway.envoyproxy.io",
        "gateway.networking.k8s.io",
    }


def test_custom_resources_match_the_upstream_crds(plans: dict[str, Any]) -> None:
    crds = upstream.crds()
    kinds = set()
    for inventory, release, obj in _objects(plans):
        if (obj["apiVersion"], obj["kind"]) not in crds:
            group = obj["apiVersion"].split("/")[0]
            assert "." not in group or group.endswith(".k8s.io"), (
                f"{inventory} {release}: no upstream CRD for {obj['kind']}"
            )
            continue
        errors = upstream.crd_errors(obj)
        assert not errors, f"{inventory} {release} {obj['kind']}/{obj['metadata'].get('name')}: {errors}"
        kinds.add(obj["kind"])
    assert kinds >= {
        "NicClusterPolicy",
        "IPPool",
        "MacvlanNetwork",
        "IPoIBNetwork",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "ServiceMonitor",
        "PrometheusRule",
        "Queue",
    }


@pytest.mark.parametrize(
    ("inventory", "release"),
    [
        (inventory, release)
        for inventory, names in {
            "prod": ["gpu-operator"],
            "mig-timeslicing": [
                "gpu-operator",
                "volcano",
                "kai-scheduler",
                "kube-prometheus-stack",
                "prometheus-adapter",
            ],
            "dra-kueue-rdma": ["gpu-operator", "network-operator", "kueue", "nvidia-dra-driver-gpu"],
        }.items()
        for release in names
    ],
)
def test_values_keys_exist_in_the_upstream_chart(plans: dict[str, Any], inventory: str, release: str) -> None:
    rendered = _releases(plans, inventory)[release]
    chart = upstream.chart_values(release)
    if chart is None:
        pytest.skip(
            f"{release}: no upstream values.yaml in GPUBRING_UPSTREAM_DIR (only its key paths go unchecked)"
        )
    unknown = list(upstream.unknown_value_paths(rendered.values, chart))
    assert not unknown, f"{inventory} {release}: keys the chart does not have: {unknown}"


def test_time_slicing_config_has_the_device_plugin_shape(plans: dict[str, Any]) -> None:
    example = yaml.safe_load(
        (upstream.upstream_dir() / "k8s-device-plugin/examples/time-slicing-plugin-config.yaml").read_text()
    )
    gpu = _releases(plans, "mig-timeslicing")["gpu-operator"]
    ours = yaml.safe_load(gpu.pre_manifests[0]["data"]["any"])
    assert ours["version"] == example["version"]
    assert set(ours["sharing"]["timeSlicing"]) == set(example["sharing"]["timeSlicing"])
    assert all(
        set(r) == set(example["sharing"]["timeSlicing"]["resources"][0])
        for r in ours["sharing"]["timeSlicing"]["resources"]
    )


# -- the checkers catch mistakes --------------------------------------------------------------------


def test_a_misspelled_values_key_is_caught(plans: dict[str, Any]) -> None:
    gpu = _releases(plans, "mig-timeslicing")["gpu-operator"]
    chart = upstream.chart_values("gpu-operator")
    values = copy.deepcopy(gpu.values)
    values["devicePlugin"]["confg"] = values["devicePlugin"].pop("config")
    values["dcgmExporter"]["serviceMonitor"]["honourLabels"] = True
    values["migManger"] = {"enabled": True}
    values["daemonsets"]["labels"] = {"free-form": "anything"}  # allowed: a free-form map
    assert sorted(upstream.unknown_value_paths(values, chart)) == [
        "dcgmExporter.serviceMonitor.honourLabels",
        "devicePlugin.confg",
        "migManger",
    ]
    assert list(upstream.unknown_value_paths(gpu.values, chart)) == []


def test_a_custom_resource_mistake_is_caught(plans: dict[str, Any]) -> None:
    network = _releases(plans, "dra-kueue-rdma")["network-operator"]
    ncp = copy.deepcopy(next(o for o in network.manifests if o["kind"] == "NicClusterPolicy"))
    ncp["spec"]["rdmaSharedDevicePlugn"] = ncp["spec"].pop("rdmaSharedDevicePlugin")
    assert any("rdmaSharedDevicePlugn" in e for e in upstream.crd_errors(ncp))
    queue = copy.deepcopy(
        next(o for o in _releases(plans, "dra-kueue-rdma")["kueue"].manifests if o["kind"] == "ClusterQueue")
    )
    queue["spec"]["queueingStrategy"] = "FIFO"
    del queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["name"]
    errors = upstream.crd_errors(queue)
    assert any(e.startswith("spec.queueingStrategy:") for e in errors), errors
    assert any("'name' is a required property" in e for e in errors), errors
    local = copy.deepcopy(
        next(o for o in _releases(plans, "dra-kueue-rdma")["kueue"].manifests if o["kind"] == "LocalQueue")
    )
    del local["metadata"]["namespace"]
    assert upstream.crd_errors(local) == ["metadata.namespace: LocalQueue is namespaced"]


def test_a_core_object_mistake_is_caught() -> None:
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "dta": {"a": "b"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            bad, nearest_schema_version("1.34.2", kv_utils.all_versions()), strict=True
        )


def test_nearest_schema_version() -> None:
    shipped = ["1.34.0", "1.35.0", "1.37.0"]
    assert nearest_schema_version("1.34.2", shipped) == "1.34.0"
    assert nearest_schema_version("1.36.1", shipped) == "1.35.0"
    assert nearest_schema_version("1.30.4", shipped) == "1.34.0"


# -- the roles render the same with Ansible -------------------------------------------------------

_DUMP_PLAY = """
- name: The platform phase, render only
  ansible.builtin.import_playbook: {platform}
- name: Write what the platform roles rendered
  hosts: control_plane[0]
  gather_facts: false
  tasks:
    - name: Write the rendered releases
      ansible.builtin.copy:
        content: "{{{{ helm_rendered_releases | default([]) | to_json }}}}"
        dest: {out}
        mode: "0644"
"""


# No plain dra-kueue-rdma run: its +wait copy renders the same releases with the same values, and every
# field is compared there (wait too); the engine's own wait defaults are mig-timeslicing's run. (The
# plain run was a third ansible-playbook of the platform phase: about 20 s of CI.)
@pytest.mark.slow
@pytest.mark.parametrize("inventory", ["mig-timeslicing", "dra-kueue-rdma+wait"])
def test_ansible_renders_the_same_releases(inventory: str, tmp_path: Path) -> None:
    """playbooks/platform.yml with helm_render_only=true, run by ansible-playbook on this machine as
    the first control plane, renders the same releases as gpubring.releases (the plan). `+wait`:
    a helm_release_defaults that sets one field keeps the engine's other fields (it replaced them all)."""
    import json
    import shutil
    import sys

    from gpubring import paths

    base, _, variant = inventory.partition("+")
    root = INVENTORIES[base]
    if variant:
        root = tmp_path / base
        shutil.copytree(INVENTORIES[base], root, ignore=shutil.ignore_patterns(".gpubring"))
        (root / "group_vars" / "all" / "zz-helm.yml").write_text("helm_release_defaults: {wait: false}\n")
    inv = load_inventory(root)
    out = tmp_path / "rendered.json"
    playbook = tmp_path / "render.yml"
    playbook.write_text(_DUMP_PLAY.format(platform=paths.playbooks_dir() / "platform.yml", out=out))
    # What the runner passes: the effective settings and version matrix.
    extra = {
        **inv.settings,
        "gpubring_versions": inv.versions,
        "helm_render_only": True,
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
    }
    run_play(playbook, inv.hosts_file, extra)
    by_ansible = json.loads(out.read_text())
    planned = planned_releases(inv)
    assert [r["name"] for r in by_ansible] == [r.name for r in planned]
    if variant:  # the releases that leave `wait` to the defaults get the site's
        assert False in {r.wait for r in planned}
    for rendered, release in zip(by_ansible, planned, strict=True):
        for key in (
            "chart",
            "version",
            "repo",
            "namespace",
            "values",
            "pre_manifests",
            "manifests",
            "wait",
            "timeout",
            "ready",
        ):
            assert rendered[key] == getattr(release, key), f"{release.name}: {key}"
        if variant:
            assert rendered["create_namespace"] is True and isinstance(rendered["manifests"], list)
        source = dict(rendered["source"])
        assert source.pop("namespace") == release.namespace_object or not rendered["create_namespace"]
        assert source == dict(release.source), release.name
