"""The cluster phase, proven by rendering: kubeadm, kube-vip, kubelet flags, CNI releases and manifests.

kubeadm, kubelet, an API server, pkgs.k8s.io and the charts' repositories cannot be reached from the
build machines, so the cluster roles (kubernetes_packages, kubeadm_control_plane, kubeadm_join, cni,
node_labels) are checked here by what they render, from the sample inventory (inventories/prod) and
variants of it (one control plane without an endpoint; HA with kube-vip; Kubernetes 1.30 with the
older GPU Operator and Helm whose ranges admit it, which takes the kubeadm v1beta3 API; Cilium; Flannel):

- templates render with gpubring.releases.render_template (Ansible's template lookup in-process, with
  the variables VariableManager gives a play of the cluster roles), and once with ansible-playbook,
  which must agree;
- the documents' apiVersion/kind, controlPlaneEndpoint, networking CIDRs and flags;
- the KubeletConfiguration: kubernetes-validate has no kubelet (or kubeadm) schema, so its fields are
  checked against the KubeletConfiguration v1beta1 field names and their value types;
- core objects (the kube-vip static Pod, the CNI namespaces, Flannel's objects) with kubernetes-validate
  at the pinned Kubernetes version. Calico's Installation (operator.tigera.io/v1) has no CRD in
  ../shared/upstream: only its shape is checked here;
- no join credential (bootstrap token, certificate key) reaches any file that stays on a host, and
  every task of the cluster roles and node playbooks that mentions one is no_log;
- ansible-playbook --syntax-check of the cluster and node lifecycle playbooks.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import re
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from packaging.version import Version

from _render import run_play, schema_version
from gpubring import paths, releases, versions
from gpubring.inventory import Inventory, InventoryError, load_inventory
from helpers import REPO, ansible_playbook

SAMPLE = REPO / "inventories" / "prod"
ROLES = REPO / "roles"
CLUSTER_ROLES = ("kubernetes_packages", "kubeadm_control_plane", "kubeadm_join", "cni", "node_labels")
NODE_PLAYBOOKS = ("node_add.yml", "node_remove.yml", "reset.yml")

# Kubernetes below 1.31 takes kubeadm's v1beta3 API (v1beta4 came with 1.31, cited in the templates).
# versions.yml's pins refuse it (the GPU Operator's and Helm's ranges start at 1.33), but a site that pins
# the previous GPU Operator line and an older Helm, with their upstream ranges, validates at 1.30; 1.30 is
# the lowest Kubernetes that matrix admits (test_v1beta3_stays_reachable_with_an_older_gpu_operator_...).
OLDER_MATRIX = (
    "gpubring_versions:\n"
    '  kubernetes: {version: "1.30.14"}\n'
    # NVIDIA/cloud-native-docs gpu-operator/platform-support.rst at gpu-operator-v25.10: Kubernetes
    # 1.30---1.34 (versions.yml's range for v25.10.0 before issue 22; v25.10.0 is a line of its upgrade hops)
    '  gpu_operator: {chart: v25.10.0, kubernetes_min: "1.30", kubernetes_max: "1.34"}\n'
    # helm.sh/docs/v3/topics/version_skew, its table: "3.18.x | 1.33.x - 1.30.x"
    '  helm: {version: "3.18.6", kubernetes_min: "1.30", kubernetes_max: "1.33"}\n'
)

# Templates, under roles/.
KUBEADM_CONFIG = "kubeadm_control_plane/templates/etc/kubernetes/kubeadm/kubeadm-config.yaml.j2"
KUBE_VIP = "kubeadm_control_plane/templates/etc/kubernetes/manifests/kube-vip.yaml.j2"
JOIN_CONFIG = "kubeadm_join/templates/etc/kubernetes/kubeadm/join-config.yaml.j2"
KUBELET_FLAGS = "kubernetes_packages/templates/etc/default/kubelet.j2"
FLANNEL_OBJECTS = "cni/templates/flannel/objects.yml.j2"

# Credentials as kubeadm prints them; they are put into every rendering's variables, so a template
# that leaked them would show them.
TOKEN = "k8s0ab.0123456789gpubri"
CERT_KEY = "9f" * 32
CA_HASH = "sha256:" + "1d" * 32
SECRET = {
    "api_server_endpoint": "192.0.2.10:6443",
    "token": TOKEN,
    "ca_cert_hashes": [CA_HASH],
    "certificate_key": CERT_KEY,
}
CREDENTIAL = re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}|[a-f0-9]{64}")

# The fields of KubeletConfiguration (kubelet.config.k8s.io/v1beta1) gpubring's template may emit or a
# site commonly sets, with the JSON type of each (Duration fields are Go duration strings).
DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
KUBELET_FIELDS: dict[str, type | tuple[type, ...] | str] = {
    "apiVersion": str,
    "kind": str,
    "cgroupDriver": str,
    "containerRuntimeEndpoint": str,
    "rotateCertificates": bool,
    "serverTLSBootstrap": bool,
    "maxPods": int,
    "podPidsLimit": int,
    "failSwapOn": bool,
    "shutdownGracePeriod": "duration",
    "shutdownGracePeriodCriticalPods": "duration",
    "serializeImagePulls": bool,
    "maxParallelImagePulls": int,
    "imageGCHighThresholdPercent": int,
    "imageGCLowThresholdPercent": int,
    "containerLogMaxSize": str,
    "containerLogMaxFiles": int,
    "evictionHard": dict,
    "kubeReserved": dict,
    "systemReserved": dict,
    "featureGates": dict,
    "protectKernelDefaults": bool,
    "seccompDefault": bool,
    "clusterDomain": str,
    "clusterDNS": list,
}


# -- inventories and rendering ---------------------------------------------------------------------


def _write(root: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


# The sample's releases whose pinned Kubernetes ranges start after 1.30 (versions.yml's rules), off
# where a test pins an older Kubernetes.
SAMPLE_RELEASES_AFTER_1_30_OFF = (
    "network_operator_enabled: false\nmetrics_server_enabled: false\nai_inference_enabled: false\n"
)


@pytest.fixture(scope="module")
def inventories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Inventory]:
    """The sample and its variants, each loaded (and so validated) like `gpubring check` does."""
    base = tmp_path_factory.mktemp("inventories")

    def variant(name: str, files: Mapping[str, str]) -> Path:
        root = base / name
        shutil.copytree(SAMPLE, root, ignore=shutil.ignore_patterns(".gpubring", "README.md"))
        if "hosts.yml" in files:  # the sample's teams and GPU sharing name its own hosts and groups
            for rel in ("group_vars/all/teams.yml", "group_vars/all/gpu_sharing.yml"):
                (root / rel).unlink()
        return _write(root, files)

    cluster = (SAMPLE / "group_vars/all/cluster.yml").read_text(encoding="utf-8")
    no_endpoint = cluster.replace(
        'gpubring_control_plane_endpoint: "192.0.2.10:6443"', 'gpubring_control_plane_endpoint: ""'
    )
    assert no_endpoint != cluster
    roots = {
        "prod": SAMPLE,
        "single": variant(
            "single",
            {
                "hosts.yml": (
                    "all:\n  children:\n"
                    "    control_plane:\n      hosts:\n        cp-1: {ansible_host: 192.0.2.11}\n"
                    "    gpu_nodes:\n      hosts:\n        gpu-1: {ansible_host: 198.51.100.21}\n"
                ),
                "group_vars/all/cluster.yml": no_endpoint,
            },
        ),
        "kube-vip": variant(
            "kube-vip",
            {
                "group_vars/all/cluster.yml": no_endpoint,
                "group_vars/all/kube_vip.yml": (
                    "kubeadm_control_plane_kube_vip_address: 192.0.2.10\n"
                    "kubeadm_control_plane_kube_vip_interface: bond0\n"
                ),
            },
        ),
        "k8s-1.30": variant(
            "k8s-1.30",
            {
                "group_vars/all/versions.yml": OLDER_MATRIX,
                # Calico is not tested on 1.30 (versions.yml's calico rule); flannel supports 1.17+.
                "group_vars/all/cni.yml": "gpubring_cni: flannel\n",
                "group_vars/all/kubeadm.yml": (
                    "kubeadm_control_plane_apiserver_extra_args: {audit-log-maxage: 30}\n"
                    "kubeadm_control_plane_kubelet_extra_args: {node-labels: zone=a}\n"
                ),
                # The sample's releases whose pinned ranges start after 1.30 (versions.yml's rules).
                "group_vars/all/zz_k8s_1_30.yml": SAMPLE_RELEASES_AFTER_1_30_OFF,
            },
        ),
        "cilium": variant(
            "cilium", {"group_vars/all/cni.yml": "gpubring_cni: cilium\ngpubring_pod_cidr: 10.32.0.0/13\n"}
        ),
        "flannel": variant("flannel", {"group_vars/all/cni.yml": "gpubring_cni: flannel\n"}),
        "ha-no-endpoint": variant("ha-no-endpoint", {"group_vars/all/cluster.yml": no_endpoint}),
    }
    return {name: load_inventory(root) for name, root in roots.items()}


def _facts(inv: Inventory, host: str) -> dict[str, Any]:
    """The facts the templates read: the default IPv4 route of the host (its inventory address here)."""
    return {"default_ipv4": {"address": inv.hosts[host].address, "interface": "eno1"}}


def _with_host_vars(inv: Inventory, host: str, extra: Mapping[str, Any]) -> Inventory:
    """The inventory with more variables on one host (in host_vars/<host>.yml of a copy, which Ansible
    reads): a template's inputs that the sample inventories do not set."""
    root = Path(tempfile.mkdtemp(prefix="gpubring-render-"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(inv.root, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".gpubring"))
    host_file = root / "host_vars" / f"{host}.yml"
    host_file.parent.mkdir(exist_ok=True)
    old_vars = yaml.safe_load(host_file.read_text(encoding="utf-8")) if host_file.exists() else None
    host_file.write_text(json.dumps({**(old_vars or {}), **extra}), encoding="utf-8")
    old = inv.hosts[host]
    hosts = dict(inv.hosts)
    hosts[host] = dataclasses.replace(old, vars={**old.vars, **extra})
    return dataclasses.replace(
        inv, root=root, hosts_file=root / inv.hosts_file.relative_to(inv.root), hosts=hosts
    )


def render(inv: Inventory, host: str, template: str, extra: Mapping[str, Any] | None = None) -> str:
    """A cluster role template rendered for one host with the cluster roles' variables, the host's
    facts, the join credentials (so that a template that read them would leak them) and `extra` (a
    task's `vars:`)."""
    host_vars = {"ansible_facts": _facts(inv, host), "__kubeadm_join_secret": SECRET, **(extra or {})}
    return releases.render_template(inv, template, host=host, roles=CLUSTER_ROLES, host_vars=host_vars)


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def kubeadm_config(inv: Inventory, host: str = "cp-1") -> dict[str, dict[str, Any]]:
    by_kind = {d["kind"]: d for d in docs(render(inv, host, KUBEADM_CONFIG))}
    assert list(by_kind) == ["InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"]
    return by_kind


def validate_core(obj: Mapping[str, Any], inv: Inventory) -> None:
    kubernetes_validate.validate(dict(obj), schema_version(inv), strict=True)


def cni_release(inv: Inventory, release_id: str) -> releases.Release | None:
    """A cni release rendered by the helm role's engine as `gpubring plan` renders the platform's."""
    host = inv.groups["control_plane"][0]
    variables = releases.host_variables(inv, host, ("helm", "cni"))
    return releases.render_release("cni", release_id, variables, variables["helm_release_defaults"])


# -- kubeadm configuration -------------------------------------------------------------------------


def test_sample_kubeadm_config(inventories: dict[str, Inventory]) -> None:
    inv = inventories["prod"]
    cfg = kubeadm_config(inv)
    init, cluster = cfg["InitConfiguration"], cfg["ClusterConfiguration"]
    pin = str(versions.load_pinned()["kubernetes"]["version"])
    assert inv.versions["kubernetes"]["version"] == pin
    assert {init["apiVersion"], cluster["apiVersion"]} == {"kubeadm.k8s.io/v1beta4"}
    assert cluster["controlPlaneEndpoint"] == "192.0.2.10:6443"
    assert cluster["networking"] == {
        "podSubnet": "10.244.0.0/16",
        "serviceSubnet": "10.96.0.0/12",
        "dnsDomain": "cluster.local",
    }
    assert cluster["clusterName"] == "prod-gpu"
    assert cluster["kubernetesVersion"] == f"v{pin}"
    assert cluster["apiServer"]["certSANs"] == ["192.0.2.10"]
    assert cluster["apiServer"]["extraArgs"] == []  # v1beta4: a list of {name, value}
    assert init["localAPIEndpoint"] == {"advertiseAddress": "192.0.2.11", "bindPort": 6443}
    assert init["nodeRegistration"]["name"] == "cp-1"
    assert init["nodeRegistration"]["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert "taints" not in init["nodeRegistration"]  # kubeadm's control-plane taint stays
    # kubeadm init always makes a bootstrap token: gpubring's has no value and a short life.
    (bootstrap,) = init["bootstrapTokens"]
    assert "token" not in bootstrap and bootstrap["ttl"] == "15m0s"


def test_single_control_plane_has_no_endpoint(inventories: dict[str, Inventory]) -> None:
    inv = inventories["single"]
    assert list(inv.groups["control_plane"]) == ["cp-1"]
    cluster = kubeadm_config(inv)["ClusterConfiguration"]
    assert "controlPlaneEndpoint" not in cluster
    assert cluster["apiServer"]["certSANs"] == []
    assert cluster["networking"]["podSubnet"] == inv.settings["gpubring_pod_cidr"]


def test_ha_with_kube_vip(inventories: dict[str, Inventory]) -> None:
    inv = inventories["kube-vip"]
    cluster = kubeadm_config(inv)["ClusterConfiguration"]
    assert cluster["controlPlaneEndpoint"] == "192.0.2.10:6443"
    assert cluster["apiServer"]["certSANs"] == ["192.0.2.10"]
    kubeconfigs = {}
    for host in inv.groups["control_plane"]:
        for path in ("/etc/kubernetes/super-admin.conf", "/etc/kubernetes/admin.conf"):
            (pod,) = docs(render(inv, host, KUBE_VIP, {"__kubeadm_control_plane_kube_vip_kubeconfig": path}))
            validate_core(pod, inv)
            (container,) = pod["spec"]["containers"]
            env = {e["name"]: e["value"] for e in container["env"]}
            assert env["address"] == "192.0.2.10" and env["port"] == "6443"
            assert env["vip_interface"] == "bond0" and env["vip_arp"] == "true" and env["cp_enable"] == "true"
            assert container["image"] == f"ghcr.io/kube-vip/kube-vip:v{inv.versions['kube_vip']['version']}"
            assert pod["metadata"] == {
                "name": "kube-vip",
                "namespace": "kube-system",
                "labels": {"app.kubernetes.io/name": "kube-vip", "app.kubernetes.io/managed-by": "gpubring"},
            }
            assert pod["spec"]["hostNetwork"] is True
            kubeconfigs[(host, path)] = pod["spec"]["volumes"][0]["hostPath"]
    assert kubeconfigs[("cp-2", "/etc/kubernetes/admin.conf")] == {
        "path": "/etc/kubernetes/admin.conf",
        "type": "File",
    }
    assert (
        kubeconfigs[("cp-1", "/etc/kubernetes/super-admin.conf")]["path"]
        == "/etc/kubernetes/super-admin.conf"
    )


def test_kubernetes_1_30_takes_kubeadm_v1beta3(inventories: dict[str, Inventory]) -> None:
    old, new = inventories["k8s-1.30"], inventories["prod"]
    cfg = kubeadm_config(old)
    assert {cfg["InitConfiguration"]["apiVersion"], cfg["ClusterConfiguration"]["apiVersion"]} == {
        "kubeadm.k8s.io/v1beta3"
    }
    assert cfg["ClusterConfiguration"]["kubernetesVersion"] == "v1.30.14"
    # v1beta3 takes flags as a map of strings, v1beta4 as a list of {name, value}.
    assert cfg["ClusterConfiguration"]["apiServer"]["extraArgs"] == {"audit-log-maxage": "30"}
    assert cfg["InitConfiguration"]["nodeRegistration"]["kubeletExtraArgs"] == {"node-labels": "zone=a"}
    same_flags = _with_host_vars(
        new, "cp-1", {"kubeadm_control_plane_apiserver_extra_args": {"audit-log-maxage": 30}}
    )
    assert kubeadm_config(same_flags)["ClusterConfiguration"]["apiServer"]["extraArgs"] == [
        {"name": "audit-log-maxage", "value": "30"}
    ]


def _refusals(root: Path) -> list[str]:
    """The version problems `gpubring check` reports for an inventory (none: it validates)."""
    try:
        load_inventory(root)
    except InventoryError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_below_1_33_the_pins_refuse_and_their_lowest_kubernetes_takes_v1beta4(
    make_inventory: Callable[..., Path],
) -> None:
    """versions.yml's pins admit no Kubernetes below the GPU Operator's range (the GPU Operator is
    always there: gpu-operator-kubernetes-range has no `when`), nor below Helm's; the lowest minor they
    admit renders kubeadm.k8s.io/v1beta4 in both templates."""
    rules = {rule.id: rule for rule in versions.load_rules()}
    assert not rules["gpu-operator-kubernetes-range"].when and not rules["helm-kubernetes-range"].when
    pinned = versions.load_pinned()
    low = str(pinned["gpu_operator"]["kubernetes_min"])
    assert Version(low) >= Version("1.31"), "the pins admit a v1beta3 Kubernetes: see OLDER_MATRIX"
    assert Version(str(pinned["helm"]["kubernetes_min"])) >= Version("1.31")
    below = f"{Version(low).major}.{Version(low).minor - 1}.9"
    refused = _refusals(
        make_inventory(
            {"group_vars/all/versions.yml": f"gpubring_versions: {{kubernetes: {{version: '{below}'}}}}\n"}
        )
    )
    assert any(
        f"got {below} (rule gpu-operator-kubernetes-range:" in p
        and f">= {low} (gpu_operator.kubernetes_min" in p
        for p in refused
    ), refused
    assert any(f"got {below} (rule helm-kubernetes-range:" in p for p in refused), refused
    assert all(
        p.startswith("group_vars/all/versions.yml: gpubring_versions.kubernetes.version:") for p in refused
    )
    lowest = make_inventory(
        {
            "group_vars/all/versions.yml": f"gpubring_versions: {{kubernetes: {{version: '{low}.0'}}}}\n",
            "group_vars/all/cni.yml": "gpubring_cni: flannel\n",  # Calico's range starts higher
        }
    )
    inv = load_inventory(lowest)
    cfg = kubeadm_config(inv)
    assert {cfg["InitConfiguration"]["apiVersion"], cfg["ClusterConfiguration"]["apiVersion"]} == {
        "kubeadm.k8s.io/v1beta4"
    }
    (join,) = docs(render(inv, "gpu-1", JOIN_CONFIG, {"kubeadm_join_control_plane": False}))
    assert join["apiVersion"] == "kubeadm.k8s.io/v1beta4"


def test_v1beta3_stays_reachable_with_an_older_gpu_operator_and_helm(
    inventories: dict[str, Inventory], make_inventory: Callable[..., Path]
) -> None:
    """The v1beta3 branches stay reachable: with OLDER_MATRIX's GPU Operator and Helm (their upstream
    ranges), Kubernetes 1.30 validates (the k8s-1.30 variant, loaded by the fixture) and 1.29 is refused
    by both rules: 1.30 is the lowest Kubernetes that matrix admits, and it takes v1beta3
    (test_kubernetes_1_30_takes_kubeadm_v1beta3, test_join_configuration)."""
    assert inventories["k8s-1.30"].versions["kubernetes"]["version"] == "1.30.14"
    files = {
        "group_vars/all/versions.yml": OLDER_MATRIX.replace('"1.30.14"', '"1.29.15"'),
        "group_vars/all/cni.yml": "gpubring_cni: flannel\n",
        "group_vars/all/zz_k8s_1_30.yml": SAMPLE_RELEASES_AFTER_1_30_OFF,
    }
    refused = _refusals(make_inventory(files))
    assert {re.sub(r".*\(rule ([a-z0-9-]+):.*", r"\1", p) for p in refused} == {
        "gpu-operator-kubernetes-range",
        "helm-kubernetes-range",
    }, refused


@pytest.mark.parametrize("variant", ["prod", "single", "kube-vip", "k8s-1.30"])
def test_kubelet_configuration(inventories: dict[str, Inventory], variant: str) -> None:
    kubelet = kubeadm_config(inventories[variant])["KubeletConfiguration"]
    assert kubelet["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert kubelet["cgroupDriver"] == "systemd"  # containerd runs runc with SystemdCgroup
    assert kubelet["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    assert kubelet["rotateCertificates"] is True
    for key, value in kubelet.items():
        assert key in KUBELET_FIELDS, f"{key}: not a KubeletConfiguration field gpubring knows"
        kind = KUBELET_FIELDS[key]
        if kind == "duration":
            assert isinstance(value, str) and DURATION.match(value), f"{key}: {value!r} is not a duration"
        else:
            assert isinstance(value, kind) and not (kind is int and isinstance(value, bool)), (
                f"{key}: {value!r}"
            )
    # The managers are per node (kubelet_topology's drop-ins), never cluster-wide.
    assert not {k for k in kubelet if k.endswith("ManagerPolicy")}


def test_kubelet_configuration_field_check_catches_a_typo(inventories: dict[str, Inventory]) -> None:
    inv = _with_host_vars(
        inventories["prod"], "cp-1", {"kubeadm_control_plane_kubelet_config": {"maxPod": 200}}
    )
    kubelet = kubeadm_config(inv)["KubeletConfiguration"]
    assert "maxPod" in kubelet and "maxPod" not in KUBELET_FIELDS


def test_a_sites_kubelet_field_is_merged_over_the_base(inventories: dict[str, Inventory]) -> None:
    """Setting one field (maxPods) keeps the rest of gpubring's base: the graceful node shutdown stays."""
    inv = _with_host_vars(
        inventories["prod"], "cp-1", {"kubeadm_control_plane_kubelet_config": {"maxPods": 250}}
    )
    kubelet = kubeadm_config(inv)["KubeletConfiguration"]
    assert kubelet["maxPods"] == 250
    assert (kubelet["shutdownGracePeriod"], kubelet["shutdownGracePeriodCriticalPods"]) == ("60s", "20s")
    assert kubelet["cgroupDriver"] == "systemd" and kubelet["rotateCertificates"] is True
    base = kubeadm_config(inventories["prod"])["KubeletConfiguration"]
    assert base["maxPods"] == 110 and base["shutdownGracePeriod"] == "60s"


def test_several_control_planes_need_an_endpoint(inventories: dict[str, Inventory]) -> None:
    """The role's endpoint check, evaluated on the inventories: three control planes without an
    endpoint or a kube-vip address are refused; one without, or three with either, pass."""
    check = yaml.safe_load((ROLES / "kubeadm_control_plane/tasks/check.yml").read_text(encoding="utf-8"))
    (endpoint_check,) = [t for t in check if t["name"] == "Check the control-plane endpoint"]
    conditions = endpoint_check["ansible.builtin.assert"]["that"]

    def passes(inv: Inventory) -> bool:
        variables = releases.host_variables(
            inv, "cp-1", CLUSTER_ROLES, host_vars={"ansible_facts": _facts(inv, "cp-1")}
        )
        return all(variables.resolve("{{ " + c + " }}", "that") is True for c in conditions)

    assert passes(inventories["prod"]) and passes(inventories["single"]) and passes(inventories["kube-vip"])
    assert not passes(inventories["ha-no-endpoint"])
    vip_elsewhere = _with_host_vars(
        inventories["prod"], "cp-1", {"kubeadm_control_plane_kube_vip_address": "192.0.2.99"}
    )
    assert not passes(vip_elsewhere)  # the endpoint's host must be the kube-vip address


def test_an_inventory_name_that_is_no_node_name_is_refused(tmp_path: Path) -> None:
    """gpubring check refuses it (gpubring.validation.checks.cluster) before kubeadm would."""
    root = tmp_path / "inv"
    shutil.copytree(SAMPLE, root, ignore=shutil.ignore_patterns(".gpubring", "README.md"))
    hosts = (root / "hosts.yml").read_text(encoding="utf-8")
    (root / "hosts.yml").write_text(hosts.replace("gpu-4:", "GPU_4:"), encoding="utf-8")
    with pytest.raises(InventoryError) as err:
        load_inventory(root)
    assert [(p.file, p.key) for p in err.value.problems] == [("hosts.yml", "GPU_4")]
    assert "Kubernetes node name" in err.value.problems[0].expected


# -- joins -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "host"), [("prod", "gpu-1"), ("prod", "cp-2"), ("k8s-1.30", "gpu-2")])
def test_join_configuration(inventories: dict[str, Inventory], variant: str, host: str) -> None:
    inv = inventories[variant]
    control_plane = host in inv.groups["control_plane"]
    (join,) = docs(
        render(
            inv,
            host,
            JOIN_CONFIG,
            {
                "kubeadm_join_control_plane": control_plane,
                "kubeadm_join_kubelet_extra_args": {"node-ip": "10.0.0.5"},
            },
        )
    )
    v1beta4 = Version(inv.versions["kubernetes"]["version"]) >= Version("1.31")
    assert join["apiVersion"] == ("kubeadm.k8s.io/v1beta4" if v1beta4 else "kubeadm.k8s.io/v1beta3")
    assert join["kind"] == "JoinConfiguration"
    assert join["discovery"] == {
        "bootstrapToken": {"apiServerEndpoint": "192.0.2.10:6443", "token": TOKEN, "caCertHashes": [CA_HASH]}
    }
    assert join["nodeRegistration"]["name"] == host
    flags = join["nodeRegistration"]["kubeletExtraArgs"]
    assert flags == ([{"name": "node-ip", "value": "10.0.0.5"}] if v1beta4 else {"node-ip": "10.0.0.5"})
    if control_plane:
        assert join["controlPlane"] == {
            "localAPIEndpoint": {"advertiseAddress": inv.hosts[host].address, "bindPort": 6443},
            "certificateKey": CERT_KEY,
        }
    else:
        assert "controlPlane" not in join
    # A GPU worker registers not yet accepted (gpubring_acceptance_gate); a control plane keeps
    # kubeadm's default taints (none given).
    pending = {"key": "gpubring.io/acceptance", "value": "pending", "effect": "NoSchedule"}
    if host in inv.groups["gpu_nodes"] and not control_plane:
        assert join["nodeRegistration"]["taints"] == [pending]
    else:
        assert "taints" not in join["nodeRegistration"]


def test_join_taints_keep_the_sites_and_follow_the_gate(inventories: dict[str, Inventory]) -> None:
    inv = inventories["prod"]
    site = [{"key": "example.internal/pool", "value": "training", "effect": "NoSchedule"}]
    pending = {"key": "gpubring.io/acceptance", "value": "pending", "effect": "NoSchedule"}

    def taints(host: str, extra: dict[str, object]) -> object:
        (join,) = docs(render(inv, host, JOIN_CONFIG, {"kubeadm_join_control_plane": False, **extra}))
        return join["nodeRegistration"].get("taints")

    assert taints("gpu-1", {"kubeadm_join_taints": site}) == [*site, pending]
    # A site taint of the same key is replaced, not doubled.
    assert taints("gpu-1", {"kubeadm_join_taints": [{**pending, "value": "x"}]}) == [pending]
    assert taints("gpu-1", {"gpubring_acceptance_gate": False}) is None
    assert taints("gpu-1", {"gpubring_acceptance_gate": False, "kubeadm_join_taints": site}) == site
    assert taints("cpu-1", {}) is None


def _persistent_files(inventories: dict[str, Inventory]) -> Iterator[tuple[str, str]]:
    """Every file the cluster roles leave on a host, rendered for every variant."""
    for name, inv in inventories.items():
        for host in inv.groups["control_plane"]:
            yield f"{name} {host} kubeadm-config.yaml", render(inv, host, KUBEADM_CONFIG)
            yield (
                f"{name} {host} kube-vip.yaml",
                render(
                    _with_host_vars(inv, host, {"kubeadm_control_plane_kube_vip_address": "192.0.2.10"}),
                    host,
                    KUBE_VIP,
                    {"__kubeadm_control_plane_kube_vip_kubeconfig": "/etc/kubernetes/admin.conf"},
                ),
            )
        for host in inv.hosts:
            yield f"{name} {host} /etc/default/kubelet", render(inv, host, KUBELET_FLAGS)
        for release_id in ("calico", "cilium"):
            release = cni_release(inv, release_id)
            if release is not None:
                yield f"{name} {release_id} release", json.dumps(release.as_dict())


def test_no_join_credential_in_files_left_on_hosts(inventories: dict[str, Inventory]) -> None:
    rendered = list(_persistent_files(inventories))
    assert len(rendered) >= 40
    for where, text in rendered:
        assert TOKEN not in text and CERT_KEY not in text and CA_HASH not in text, where
        assert not CREDENTIAL.search(text), f"{where}: {CREDENTIAL.search(text)}"
    # The same credentials do reach the join configuration, the one file that holds them.
    join = render(inventories["prod"], "cp-2", JOIN_CONFIG, {"kubeadm_join_control_plane": True})
    assert TOKEN in join and CERT_KEY in join


# -- no_log ----------------------------------------------------------------------------------------

MENTIONS_CREDENTIAL = re.compile(r"token|certificate[_ -]key", re.IGNORECASE)


def _tasks(items: Any, inherited_no_log: bool = False) -> Iterator[tuple[dict[str, Any], bool]]:
    """Every task (not block) in a task list, with whether no_log is on for it (its own or a block's)."""
    for item in items or []:
        if not isinstance(item, dict):
            continue
        no_log = bool(item.get("no_log", inherited_no_log))
        sections = [key for key in ("block", "rescue", "always") if key in item]
        if sections:
            for key in sections:
                yield from _tasks(item[key], no_log)
        else:
            yield item, no_log


def _task_files() -> Iterator[tuple[str, list[Any]]]:
    for role in CLUSTER_ROLES:
        for folder in ("tasks", "handlers"):
            for path in sorted((ROLES / role / folder).glob("*.yml")):
                yield str(path.relative_to(REPO)), yaml.safe_load(path.read_text(encoding="utf-8")) or []
    for name in NODE_PLAYBOOKS:
        plays = yaml.safe_load((REPO / "playbooks" / name).read_text(encoding="utf-8"))
        for play in plays:
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                yield f"playbooks/{name}", play.get(key) or []


def test_every_task_that_handles_join_credentials_is_no_log() -> None:
    mentioning = []
    for where, tasks in _task_files():
        for task, no_log in _tasks(tasks):
            text = yaml.safe_dump({k: v for k, v in task.items() if k != "no_log"})  # comments are not in it
            if MENTIONS_CREDENTIAL.search(text):
                assert no_log, f"{where}: task {task.get('name')!r} handles a credential without no_log"
                mentioning.append(task["name"])
    # The tasks that make, parse, write and use the credentials are among them.
    assert {
        "Make a bootstrap token for this join on the first control plane",
        "Upload the control-plane certificates and make their certificate key",
        "Read the join parameters (token, CA hash, certificate key)",
        "Write the join configuration (mode 0600, with this join's token)",
        "Initialise the control plane with kubeadm init",
    } <= set(mentioning)


def test_credentials_are_made_at_join_time_and_the_file_is_always_removed() -> None:
    join = yaml.safe_load((ROLES / "kubeadm_join/tasks/join.yml").read_text(encoding="utf-8"))
    (outer,) = [t for t in join if t.get("name") == "Join with credentials made now"]
    assert outer["when"] == "not ansible_check_mode"
    by_name = {t["name"]: t for t in outer["block"]}
    token = by_name["Make a bootstrap token for this join on the first control plane"]
    assert token["delegate_to"] == "{{ kubeadm_join_first_control_plane }}"
    assert token["ansible.builtin.command"]["argv"][:4] == [
        "kubeadm",
        "token",
        "create",
        "--print-join-command",
    ]
    assert "--ttl" in token["ansible.builtin.command"]["argv"]
    certs = by_name["Upload the control-plane certificates and make their certificate key"]
    assert certs["delegate_to"] == "{{ kubeadm_join_first_control_plane }}"
    assert "'upload-certs', '--upload-certs'" in certs["ansible.builtin.command"]["argv"]
    inner = by_name["Join"]
    written = next(t for t in inner["block"] if "ansible.builtin.template" in t)["ansible.builtin.template"]
    assert written["mode"] == "0600"
    removed = [t["ansible.builtin.file"] for t in inner["always"] if "ansible.builtin.file" in t]
    assert removed == [{"path": written["dest"], "state": "absent"}]
    defaults = yaml.safe_load((ROLES / "kubeadm_join/defaults/main.yml").read_text(encoding="utf-8"))
    assert defaults["kubeadm_join_token_ttl"] == "15m"


# -- kubelet flags ---------------------------------------------------------------------------------


def test_kubelet_starts_with_the_drop_in_directory(inventories: dict[str, Inventory]) -> None:
    inv = _with_host_vars(
        inventories["prod"], "gpu-1", {"kubernetes_packages_kubelet_extra_args": {"node-ip": "10.0.0.21"}}
    )
    text = render(inv, "gpu-1", KUBELET_FLAGS)
    assert text.startswith("#\n# Ansible managed\n#\n")
    (line,) = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    name, _, value = line.partition("=")
    assert name == "KUBELET_EXTRA_ARGS"
    assert shlex.split(value) == ["--config-dir=/etc/kubernetes/kubelet.conf.d --node-ip=10.0.0.21"]
    assert shlex.split(shlex.split(value)[0]) == [
        "--config-dir=/etc/kubernetes/kubelet.conf.d",
        "--node-ip=10.0.0.21",
    ]


# -- CNI -------------------------------------------------------------------------------------------


def test_calico_release(inventories: dict[str, Inventory]) -> None:
    inv = inventories["prod"]
    assert cni_release(inv, "cilium") is None
    calico = cni_release(inv, "calico")
    assert calico is not None
    assert (calico.chart, calico.version) == ("tigera-operator", "v" + inv.versions["cni"]["calico"])
    assert calico.ref == "https://docs.tigera.io/calico/charts tigera-operator"
    assert calico.values == {"installation": {"enabled": False}}
    namespace, installation = calico.objects()
    validate_core(namespace, inv)
    assert namespace["metadata"]["labels"] == {"pod-security.kubernetes.io/enforce": "privileged"}
    # No CRD of operator.tigera.io in ../shared/upstream: the Installation's shape is checked here.
    assert (installation["apiVersion"], installation["kind"]) == ("operator.tigera.io/v1", "Installation")
    assert installation["metadata"] == {"name": "default"}
    (pool,) = installation["spec"]["calicoNetwork"]["ipPools"]
    assert pool == {
        "name": "default-ipv4-ippool",
        "cidr": "10.244.0.0/16",
        "encapsulation": "VXLANCrossSubnet",
        "natOutgoing": "Enabled",
        "nodeSelector": "all()",
        "blockSize": 26,
    }
    assert installation["spec"]["calicoNetwork"]["nodeAddressAutodetectionV4"] == {
        "kubernetes": "NodeInternalIP"
    }


def test_cilium_release(inventories: dict[str, Inventory]) -> None:
    inv = inventories["cilium"]
    assert cni_release(inv, "calico") is None
    cilium = cni_release(inv, "cilium")
    assert cilium is not None
    assert (cilium.chart, cilium.version, cilium.namespace) == (
        "cilium",
        inv.versions["cni"]["cilium"],
        "kube-system",
    )
    assert cilium.ref == "https://helm.cilium.io/ cilium"
    assert cilium.values == {
        "ipam": {
            "mode": "cluster-pool",
            "operator": {"clusterPoolIPv4PodCIDRList": ["10.32.0.0/13"], "clusterPoolIPv4MaskSize": 24},
        },
        "operator": {"replicas": 2},
    }
    assert cilium.objects() == []  # kube-system exists: no namespace object


# A kube-flannel.yml in the shape of Flannel's release manifest (abridged: the objects and fields
# gpubring touches or validates), as the role reads it after the download.
FLANNEL_MANIFEST = """
---
kind: Namespace
apiVersion: v1
metadata:
  name: kube-flannel
  labels: {pod-security.kubernetes.io/enforce: privileged}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: flannel, namespace: kube-flannel}
---
kind: ConfigMap
apiVersion: v1
metadata:
  name: kube-flannel-cfg
  namespace: kube-flannel
  labels: {tier: node, app: flannel}
data:
  cni-conf.json: |
    {"name": "cbr0", "cniVersion": "0.3.1", "plugins": [{"type": "flannel"}]}
  net-conf.json: |
    {
      "Network": "10.244.0.0/16",
      "EnableNFTables": false,
      "Backend": {"Type": "vxlan"}
    }
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-flannel-ds, namespace: kube-flannel, labels: {app: flannel}}
spec:
  selector: {matchLabels: {app: flannel}}
  template:
    metadata: {labels: {app: flannel}}
    spec:
      hostNetwork: true
      serviceAccountName: flannel
      containers:
        - name: kube-flannel
          image: ghcr.io/flannel-io/flannel:v0.27.4
          args: [--ip-masq, --kube-subnet-mgr]
"""


def test_flannel_gets_the_pod_cidr(inventories: dict[str, Inventory]) -> None:
    inv = _with_host_vars(inventories["flannel"], "cp-1", {"gpubring_pod_cidr": "10.128.0.0/14"})
    upstream = docs(FLANNEL_MANIFEST)
    objects = yaml.safe_load(render(inv, "cp-1", FLANNEL_OBJECTS, {"__cni_flannel_upstream": upstream}))
    assert [o["kind"] for o in objects] == ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"]
    for obj in objects:
        validate_core(obj, inv)
    config = objects[2]
    assert json.loads(config["data"]["net-conf.json"]) == {
        "Network": "10.128.0.0/14",
        "EnableNFTables": False,
        "Backend": {"Type": "vxlan"},
    }
    assert config["data"]["cni-conf.json"] == upstream[2]["data"]["cni-conf.json"]
    assert [o for i, o in enumerate(objects) if i != 2] == [o for i, o in enumerate(upstream) if i != 2]
    url = releases.host_variables(inv, "cp-1", ("cni",))["cni_flannel_manifest_url"]
    flannel = versions.load_pinned()["cni"]["flannel"]
    assert url == f"https://github.com/flannel-io/flannel/releases/download/v{flannel}/kube-flannel.yml"
    mirrored = _with_host_vars(
        inv, "cp-1", {"gpubring_binary_mirror": "https://mirror.example.internal/bin/"}
    )
    assert releases.host_variables(mirrored, "cp-1", ("cni",))["cni_flannel_manifest_url"] == (
        f"https://mirror.example.internal/bin/flannel/v{flannel}/kube-flannel.yml"
    )


# -- Ansible renders the same -----------------------------------------------------------------------

_ANSIBLE_PLAY = """
- name: Render the kubeadm configuration with Ansible
  hosts: cp-1
  gather_facts: false
  vars_files:
    - {roles}/kubeadm_control_plane/defaults/main.yml
    - {roles}/kubeadm_control_plane/vars/main.yml
  tasks:
    - name: Write it
      ansible.builtin.copy:
        content: "{{{{ lookup('ansible.builtin.template', '{template}') }}}}"
        dest: {out}/kubeadm-config.yaml
        mode: "0600"
      delegate_to: localhost

- name: Compute node labels with Ansible
  hosts: localhost
  gather_facts: false
  vars_files:
    - {roles}/node_labels/defaults/main.yml
    - {roles}/node_labels/vars/main.yml
  tasks:
    - name: Compute
      ansible.builtin.set_fact:
        labels: "{{{{ labels | default([]) + [__node_labels_desired] }}}}"
      vars:
        __node_labels_gpu_facts: "{{{{ item }}}}"
      loop: "{{{{ cases }}}}"
    - name: Write them
      ansible.builtin.copy:
        content: "{{{{ labels | to_json }}}}"
        dest: {out}/labels.json
        mode: "0600"

- name: Read kubeadm's output as the join does, with Ansible
  hosts: localhost
  gather_facts: false
  vars_files:
    - {roles}/kubeadm_join/defaults/main.yml
    - {roles}/kubeadm_join/vars/main.yml
  tasks:
    - name: Parse
      ansible.builtin.set_fact:
        parsed: "{{{{ join_parse_expression }}}}"
      vars:
        __kubeadm_join_command: {{stdout: "{{{{ join_command_output }}}}"}}
        __kubeadm_join_certificate_key: {{stdout: "{{{{ upload_certs_output }}}}"}}
        kubeadm_join_control_plane: "{{{{ item }}}}"
      loop: [true, false]
      register: parsed_both
    - name: Write what was read, and a redacted kubeadm error
      ansible.builtin.copy:
        content: >-
          {{{{ {{'parsed': parsed_both.results | map(attribute='ansible_facts.parsed') | list,
                'redacted': upload_certs_output | regex_replace(__kubeadm_join_redact, '<redacted>')}}
             | to_json }}}}
        dest: {out}/join.json
        mode: "0600"
"""

# What kubeadm prints (the formats of `kubeadm token create --print-join-command` and of
# `kubeadm init phase upload-certs --upload-certs`), with this test's credentials.
JOIN_COMMAND_OUTPUT = (
    f"kubeadm join 192.0.2.10:6443 --token {TOKEN} --discovery-token-ca-cert-hash {CA_HASH} \n"
)
UPLOAD_CERTS_OUTPUT = (
    '[upload-certs] Storing the certificates in Secret "kubeadm-certs" in the "kube-system" Namespace\n'
    f"[upload-certs] Using certificate key:\n{CERT_KEY}\n"
)

LABEL_CASES: list[dict[str, Any]] = [
    {
        "gpu_count": 8,
        "gpu_models": ["NVIDIA H100 80GB HBM3"],
        "nvswitch_count": 4,
        "rdma_nics": [{"link_layer": "InfiniBand"}] * 8,
    },
    {
        "gpu_count": 2,
        "gpu_models": ["NVIDIA A100-SXM4-40GB", "Tesla V100 (PCIe) 32GB"],
        "nvswitch_count": 0,
        "rdma_nics": [{"link_layer": "Ethernet"}, {"link_layer": "InfiniBand"}],
    },
    {"gpu_count": 0, "gpu_models": [], "nvswitch_count": 0, "rdma_nics": []},
    {"gpu_count": 1, "gpu_models": ["--" + "X" * 80 + " (rev a1)"], "nvswitch_count": 0, "rdma_nics": []},
]


def _join_task(name: str) -> dict[str, Any]:
    join = yaml.safe_load((ROLES / "kubeadm_join/tasks/join.yml").read_text(encoding="utf-8"))
    return next(task for task, _ in _tasks(join) if task.get("name") == name)


@pytest.fixture(scope="module")
def ansible_rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ansible")
    (out / "play.yml").write_text(
        _ANSIBLE_PLAY.format(roles=ROLES, out=out, template=ROLES / KUBEADM_CONFIG), encoding="utf-8"
    )
    extra = {
        "gpubring_versions": yaml.safe_load(paths.versions_file().read_text())["gpubring_versions"],
        # No facts without a connection: what the facts would give, as the Jinja rendering has it.
        "kubeadm_control_plane_advertise_address": "192.0.2.11",
        "cases": LABEL_CASES,
        "join_command_output": JOIN_COMMAND_OUTPUT,
        "upload_certs_output": UPLOAD_CERTS_OUTPUT,
        # The expression of the role's task itself, evaluated by Ansible on kubeadm's output.
        "join_parse_expression": _join_task("Read the join parameters (token, CA hash, certificate key)")[
            "ansible.builtin.set_fact"
        ]["__kubeadm_join_secret"],
    }
    run_play(out / "play.yml", SAMPLE, extra)
    return out


@pytest.mark.slow
def test_ansible_renders_the_kubeadm_config_the_same(
    inventories: dict[str, Inventory], ansible_rendered: Path
) -> None:
    by_ansible = docs((ansible_rendered / "kubeadm-config.yaml").read_text(encoding="utf-8"))
    by_jinja = docs(render(inventories["prod"], "cp-1", KUBEADM_CONFIG))
    assert by_ansible == by_jinja


@pytest.mark.slow
def test_node_labels_from_gpu_facts(ansible_rendered: Path) -> None:
    h100, mixed, none, long = json.loads((ansible_rendered / "labels.json").read_text(encoding="utf-8"))
    assert h100 == {
        "gpubring.io/gpu.present": "true",
        "gpubring.io/gpu.count": "8",
        "gpubring.io/gpu.model": "NVIDIA-H100-80GB-HBM3",
        "gpubring.io/nvswitch": "true",
        "gpubring.io/nvswitch.count": "4",
        "gpubring.io/rdma": "true",
        "gpubring.io/rdma.count": "8",
        "gpubring.io/rdma.link-layer": "InfiniBand",
    }
    assert mixed["gpubring.io/gpu.model"] == "NVIDIA-A100-SXM4-40GB_Tesla-V100-PCIe-32GB"
    assert mixed["gpubring.io/rdma.link-layer"] == "mixed"
    assert none["gpubring.io/gpu.count"] == "0" and none["gpubring.io/rdma"] == "false"
    assert "gpubring.io/rdma.link-layer" not in none
    # Label values: <= 63 characters of [A-Za-z0-9._-], alphanumeric at both ends (or empty).
    value = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
    for labels in (h100, mixed, none, long):
        for key, val in labels.items():
            assert value.match(val), f"{key}={val!r}"
    assert long["gpubring.io/gpu.model"] == "X" * 63


@pytest.mark.slow
def test_the_join_reads_kubeadm_output(ansible_rendered: Path) -> None:
    result = json.loads((ansible_rendered / "join.json").read_text(encoding="utf-8"))
    control_plane, worker = result["parsed"]
    assert control_plane == {**SECRET, "api_server_endpoint": "192.0.2.10:6443"}
    assert worker == {k: v for k, v in SECRET.items() if k != "certificate_key"}
    assert CERT_KEY not in result["redacted"] and "Using certificate key:\n<redacted>" in result["redacted"]


# -- playbooks -------------------------------------------------------------------------------------


@pytest.mark.parametrize("playbook", ["cluster.yml", *NODE_PLAYBOOKS])
def test_playbook_syntax(playbook: str) -> None:
    result = ansible_playbook("-i", SAMPLE, "--syntax-check", REPO / "playbooks" / playbook)
    assert result.returncode == 0, result.stdout + result.stderr
