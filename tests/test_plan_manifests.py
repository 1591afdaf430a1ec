"""`gpubring plan --manifests DIR`: every release's objects as a run applies them, rendered from the
real upstream charts at the pinned versions ($GPUBRING_UPSTREAM_DIR/charts) by Helm's own engine."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from _render import planned_releases
from gpubring import manifests, versions
from gpubring.app import app
from gpubring.catalog import declared_releases
from gpubring.inventory import load_inventory
from helpers import REPO, SAMPLE_RELEASES
from upstream import builtin_api_versions, folder_name, upstream_dir

SAMPLE = REPO / "inventories" / "prod"
ALL_ON = REPO / "tests" / "data" / "inventories" / "all-on"
KUBERNETES = str(versions.load_pinned()["kubernetes"]["version"])
# The pinned charts' versions, as the releases render them (upgrade tests keep the old ones).
PINNED = {r.name: r.version for r in declared_releases() if r.chart}

# The files of all-on and, in each, kinds its chart or gpubring's objects must bring.
ALL_ON_KINDS = {
    "gpu-operator.yaml": {"Namespace", "CustomResourceDefinition", "ClusterPolicy", "DaemonSet"},
    "network-operator.yaml": {"Namespace", "CustomResourceDefinition", "NicClusterPolicy", "IPPool"},
    "volcano.yaml": {"CustomResourceDefinition", "Deployment", "ValidatingWebhookConfiguration"},
    "kai-scheduler.yaml": {"CustomResourceDefinition", "Deployment", "PriorityClass"},
    "kueue.yaml": {"CustomResourceDefinition", "Deployment", "ClusterQueue", "LocalQueue", "ResourceFlavor"},
    "nvidia-dra-driver-gpu.yaml": {"CustomResourceDefinition", "DeviceClass", "DaemonSet"},
    "prometheus-adapter.yaml": {"Deployment", "APIService"},
    "metrics-server.yaml": {"Deployment", "APIService"},
    "gpu-alerts.yaml": {"Namespace", "PrometheusRule", "ServiceMonitor"},
    "kube-prometheus-stack.yaml": {"Namespace"},
    "teams.yaml": {"PriorityClass", "Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy"},
    "kuberay-operator.yaml": {"CustomResourceDefinition", "Deployment"},
    "local-path-provisioner.yaml": {"Namespace", "StorageClass", "Deployment", "ConfigMap"},
    "metallb.yaml": {
        "Namespace",
        "CustomResourceDefinition",
        "IPAddressPool",
        "L2Advertisement",
        "DaemonSet",
    },
    "gateway-helm.yaml": {"CustomResourceDefinition", "Deployment", "GatewayClass", "Gateway"},
    # No chart: plan writes the release's own objects; the manifest is read by a run (roles/mpi_operator).
    "mpi-operator.yaml": {"Namespace"},
}


def run(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def helm_engine() -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk renders the charts: pip install -e '.[test]'")


@pytest.fixture
def charts(helm_engine: None, tmp_path: Path) -> Path:
    """The upstream charts as `--charts DIR` reads them, <chart>-<version> (what `helm pull` names
    them): links to the upstream folders, the DRA driver's under its chart's name (upstream keeps it
    in a folder of the old name)."""
    folder = tmp_path / "charts"
    folder.mkdir()
    for chart in (upstream_dir() / "charts").iterdir():
        if chart.is_dir():
            (folder / chart.name).symlink_to(chart)
    dra = ("dra-driver-nvidia-gpu", PINNED["nvidia-dra-driver-gpu"])
    (folder / "-".join(dra)).symlink_to(upstream_dir() / "charts" / folder_name(*dra))
    return folder


def docs(path: Path) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def kinds(path: Path) -> list[str]:
    return [str(d["kind"]) for d in docs(path)]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_builtin_api_versions_are_kubernetes_validates() -> None:
    """The product's static list (no kubernetes-validate at run time) is what the tests derive."""
    shipped = set(manifests.builtin_api_versions(KUBERNETES))
    group_versions = {v for v in shipped if not v.rsplit("/", 1)[-1][:1].isupper()}  # not .../Kind
    assert group_versions == set(builtin_api_versions(KUBERNETES))
    assert "discovery.k8s.io/v1/EndpointSlice" in shipped  # kube-prometheus-stack asks for the kind
    assert manifests.builtin_api_versions("1.99.0") == manifests.builtin_api_versions("1.37.0")
    assert manifests.builtin_api_versions("1.10.0") == manifests.builtin_api_versions("1.28.0")


def test_sample_writes_the_gpu_operator_in_apply_order(charts: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    result = run("plan", SAMPLE, "--manifests", out, "--charts", charts)
    assert result.exit_code == 0, result.output
    assert "gpu-operator.yaml" in result.output
    # One file per release of the sample (inventories/prod turns the README's platform on).
    assert sorted(p.name for p in out.glob("*.yaml")) == sorted(f"{name}.yaml" for name in SAMPLE_RELEASES)
    found = kinds(out / "gpu-operator.yaml")
    # gpubring's namespace and the device plugin's config per node group (the sample's sharing), then the
    # chart's crds/, then its templates; after them the kind Helm does not know (ClusterPolicy), then
    # gpubring's labels of the sharing groups' nodes.
    assert found[:3] == ["Namespace", "ConfigMap", "CustomResourceDefinition"]
    assert found.index("ServiceAccount") < found.index("ClusterRole") < found.index("DaemonSet")
    assert found[-3:] == ["ClusterPolicy", "Node", "Node"]
    assert all(found[i] == "CustomResourceDefinition" for i in range(2, found.index("ServiceAccount")))
    policy = next(d for d in docs(out / "gpu-operator.yaml") if d["kind"] == "ClusterPolicy")
    assert policy["spec"]["driver"]["enabled"] is False  # type: ignore[index]  # the sample's values
    # Values can hold secrets: the folder is 0700, every file 0600.
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o600}


def test_all_on_writes_every_release_and_twice_the_same_bytes(charts: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    first = run("plan", ALL_ON, "--manifests", out, "--charts", charts)
    assert first.exit_code == 0, first.output
    assert sorted(p.name for p in out.glob("*.yaml")) == sorted(ALL_ON_KINDS)
    for name, expected in ALL_ON_KINDS.items():
        assert expected <= set(kinds(out / name)), name
    text = " ".join(first.output.split())
    # kube-prometheus-stack's upstream copy carries its subcharts from 88.5.3: rendered whole, its CRDs
    # (the AlertmanagerConfig CRD lists a plain `=`, which YAML 1.1 readers refuse) and Prometheus.
    stack = out / "kube-prometheus-stack.yaml"
    assert "chart NOT rendered" not in stack.read_text(encoding="utf-8")
    assert {"CustomResourceDefinition", "Prometheus", "DaemonSet"} <= set(kinds(stack))
    # The DRA chart_path of all-on is not there: said, and rendered from --charts.
    assert "dra_driver_chart_path names" in text
    before = snapshot(out)
    # The second time straight through the writer the command calls, with the session's one render of
    # all-on's releases (_render.planned_releases: maybe rendered by the other xdist worker, so a
    # different process and hash seed): the same bytes say that neither the releases nor the files
    # depend on the run. (The command itself, twice, renders the releases four times: about a minute.)
    inv = load_inventory(ALL_ON)
    kube_version = str(inv.versions["kubernetes"]["version"])  # as the command passes them
    manifests.write_manifests(
        planned_releases(inv), out, kube_version=kube_version, inventory_root=inv.root, charts=charts
    )
    after = snapshot(out)
    # Grafana (kube-prometheus-stack's subchart, grafana-community/helm-charts grafana 12.11.1
    # templates/_helpers.tpl "grafana.password") makes up a random admin password when no Secret is
    # there to `lookup`, as in any offline render; in a cluster it keeps the existing one. That
    # password and the checksum of its Secret are the only bytes allowed to differ.
    random = re.compile(rb"^(\s*(admin-password|checksum/secret): ).*$", re.MULTILINE)
    stack = "kube-prometheus-stack.yaml"
    assert random.findall(after[stack]), "no Grafana admin password: the exception below is stale"
    before[stack], after[stack] = (random.sub(rb"\1(random)", v[stack]) for v in (before, after))
    assert after == before


def test_missing_chart_is_named_and_gpubrings_objects_are_written(helm_engine: None, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    result = run("plan", ALL_ON, "--manifests", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    kueue_v, gpu_v = PINNED["kueue"], PINNED["gpu-operator"]
    assert f"kueue {kueue_v}: no local chart (set schedulers_kueue_chart_path, or --charts DIR)" in text
    assert f"gpu-operator {gpu_v}: no local chart (set gpu_operator_chart_path, or --charts DIR)" in text
    kueue = out / "kueue.yaml"
    assert f"chart NOT rendered: kueue {kueue_v}: no local chart" in kueue.read_text(encoding="utf-8")
    assert {"Namespace", "ClusterQueue", "LocalQueue", "ResourceFlavor"} <= set(kinds(kueue))
    assert "CustomResourceDefinition" not in kinds(kueue)


def test_chart_path_tgz_inventory_cache_and_stale_files(charts: Path, tmp_path: Path) -> None:
    import helm_python

    inventory = tmp_path / "inventory"
    shutil.copytree(ALL_ON, inventory)
    # all-on's dra_driver_chart_path: charts/dra-driver-nvidia-gpu-<pin>.tgz, a packaged chart.
    dra_v, kueue_v = PINNED["nvidia-dra-driver-gpu"], PINNED["kueue"]
    (inventory / "charts").mkdir()
    with helm_python.Chart.load(str(charts / f"dra-driver-nvidia-gpu-{dra_v}")) as dra:
        packaged = Path(dra.save(str(inventory / "charts")))
    assert packaged.name == f"dra-driver-nvidia-gpu-{dra_v}.tgz"
    cache = inventory / ".gpubring" / "charts"
    cache.mkdir(parents=True)
    (cache / f"kueue-{kueue_v}").symlink_to(charts / f"kueue-{kueue_v}")
    out = tmp_path / "manifests"
    out.mkdir()
    (out / "unrelated.yaml").write_text("kept: true\n", encoding="utf-8")
    (out / manifests.INDEX).write_text(json.dumps({"files": ["gone.yaml"]}), encoding="utf-8")
    (out / "gone.yaml").write_text("{}\n", encoding="utf-8")
    result = run("plan", inventory, "--manifests", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"of kueue {kueue_v} from INVENTORY/.gpubring/charts" in text
    assert f"of dra-driver-nvidia-gpu {dra_v} from dra_driver_chart_path" in text
    assert "DeviceClass" in kinds(out / "nvidia-dra-driver-gpu.yaml")
    assert f"gpu-operator {PINNED['gpu-operator']}: no local chart" in text  # in neither place
    assert "CustomResourceDefinition" in kinds(out / "kueue.yaml")
    assert not (out / "gone.yaml").exists()  # written by an earlier run, by no release now
    assert (out / "unrelated.yaml").exists()  # never written by gpubring: left alone


def test_manifests_dir_that_is_a_file_is_exit_2(helm_engine: None, tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("", encoding="utf-8")
    result = run("plan", SAMPLE, "--manifests", target)
    assert result.exit_code == 2
    assert "exists and is not a folder" in result.output


def test_charts_without_manifests_is_exit_2(tmp_path: Path) -> None:
    result = run("plan", SAMPLE, "--charts", tmp_path)
    assert result.exit_code == 2
    assert "--charts is read only with --manifests" in result.output


def test_without_the_render_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "helm_python", None)  # `import helm_python` raises ImportError
    result = run("plan", SAMPLE, "--manifests", tmp_path / "out")
    assert result.exit_code == 2
    assert "pip install 'gpubring[render]'" in result.output
    assert not (tmp_path / "out").exists()
    plain = run("plan", SAMPLE)
    assert plain.exit_code == 0, plain.output
    assert "gpu-operator" in plain.output


def test_plan_without_manifests_never_imports_helm_python() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from gpubring.app import app\n"
        f"result = CliRunner().invoke(app, ['plan', {str(SAMPLE)!r}])\n"
        "assert result.exit_code == 0, result.output\n"
        "print('helm_python' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip().splitlines()[-1] == "False"
