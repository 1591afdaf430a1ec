"""The road from the old defaults (issue 22 item 4): `gpubring upgrade --check` from the record a
`gpubring up` of the sample left with the defaults before issue 22 (tests/data/records) plans Kubernetes
one minor up, every platform release, the GPU Operator and the Network Operator through the newest
patch of each major line in between (versions.yml gpubring_upgrade_hops, cited there), how each
release's CRDs are upgraded first, and containerd and the toolkit in the same drain as Kubernetes. The
intermediate charts exist in GPUBRING_UPSTREAM_DIR and render gpubring's values."""

from __future__ import annotations

import copy
import itertools
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import upstream
from _render import planned_releases
from gpubring import hops, upgrade, versions
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from helpers import DATA

RECORD = DATA / "records" / "old-defaults-installed.json"
OLD = {"kubernetes": "1.34.2", "containerd": "2.1.4", "driver": "580.95.05", "toolkit": "1.18.0"}


def cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["upgrade", *map(str, args)], env={"COLUMNS": "300"})
    return result.exit_code, result.output


@pytest.fixture
def old_cluster(make_inventory: Callable[..., Path]) -> Path:
    """The sample inventory (containerd from Docker's repository, the GPU Operator on) with the record
    of the old defaults, pinned to the operators' lines the hops lead to."""
    inventory = make_inventory()
    (inventory / ".gpubring").mkdir()
    shutil.copy(RECORD, inventory / ".gpubring" / "installed.json")
    return inventory


def pins() -> dict[str, str]:
    matrix = versions.load_pinned()
    return {
        "kubernetes": str(matrix["kubernetes"]["version"]),
        "containerd": str(matrix["containerd"]["version"]),
        "driver": str(matrix["nvidia_driver"]["version"]),
        "toolkit": str(matrix["nvidia_container_toolkit"]["version"]),
        "gpu-operator": str(matrix["gpu_operator"]["chart"]),
        "network-operator": str(matrix["network_operator"]["chart"]),
    }


def test_the_hop_rule_takes_every_major_line_in_between() -> None:
    rules = hops.load_rules()
    gpu, net = rules["gpu-operator"], rules["network-operator"]
    assert gpu.lines == ("v25.10.0", "v26.3.3", "v26.7.0")
    assert net.lines == ("25.10.0", "26.1.2", "26.4.1")
    assert "only supported within a major release or to the next major release" in gpu.source
    assert "only supported within a major release or to the next major release" in net.source
    assert hops.road(gpu, "gpu-operator", "v25.10.0", "v26.7.0").via == ("v26.3.3",)
    assert hops.road(gpu, "gpu-operator", "v25.10.1", "v26.3.3").via == ()  # the next line: one step
    assert hops.road(gpu, "gpu-operator", "v26.3.1", "v26.7.0").via == ()
    assert hops.road(gpu, "gpu-operator", "v26.7.0", "v26.7.0").via == ()
    assert hops.road(net, "network-operator", "25.10.0", "26.4.1").via == ("26.1.2",)
    older = hops.road(gpu, "gpu-operator", "v25.3.4", "v26.7.0")
    assert older.via == ("v25.10.0", "v26.3.3") and "older than the lines gpubring knows" in older.note
    assert hops.road(None, "kueue", "0.14.2", "0.19.2").via == ()


def test_the_pins_are_the_last_line_of_each_rule() -> None:
    """The hops lead to the pins: a pin moved without its line here would plan a wrong road."""
    rules = hops.load_rules()
    matrix = versions.load_pinned()
    for rule in rules.values():
        assert rule.lines[-1] == str(versions.get_path(matrix, rule.pin)), rule.release


def test_upgrade_check_from_the_old_defaults_lists_the_road(old_cluster: Path) -> None:
    new = pins()
    code, out = cli(old_cluster, "--check")
    assert code == ExitCode.OK, out
    lines = out.splitlines()
    hop = f"Kubernetes {OLD['kubernetes']} -> {new['kubernetes']} (one minor release at most: checked)"
    assert hop in out
    # containerd and the toolkit in the same drain as Kubernetes and the driver, on each GPU node
    gpu1 = next(ln for ln in lines if ln.strip().startswith("gpu-1:"))
    for old, now, name in (
        (OLD["kubernetes"], new["kubernetes"], "kubernetes"),
        (OLD["containerd"], new["containerd"], "containerd"),
        (OLD["driver"], new["driver"], "nvidia_driver"),
        (OLD["toolkit"], new["toolkit"], "nvidia_container_toolkit"),
    ):
        assert f"{name} {old} -> {now}" in gpu1, gpu1
    cp1 = next(ln for ln in lines if "first control plane cp-1" in ln)
    assert f"containerd {OLD['containerd']} -> {new['containerd']}" in cp1
    assert cp1.index("drain") < cp1.index("containerd") < cp1.index("wait Ready")
    # the operators through their intermediate lines, in order, after the nodes
    platform = next(i for i, ln in enumerate(lines) if "platform releases (CRDs first" in ln)
    assert platform > next(i for i, ln in enumerate(lines) if ln.strip().startswith("cpu-1:"))
    gpu_op = next(ln for ln in lines if ln.strip().startswith("gpu-operator "))
    assert f"gpu-operator v25.10.0 -> v26.3.3 -> {new['gpu-operator']} (2 upgrades" in gpu_op
    assert "CRDs: the chart's pre-upgrade hook applies the new CRDs first (operator.upgradeCRD" in gpu_op
    net_op = next(ln for ln in lines if ln.strip().startswith("network-operator "))
    assert f"network-operator 25.10.0 -> 26.1.2 -> {new['network-operator']} (2 upgrades" in net_op
    assert "(upgradeCRDs" in net_op
    # CRDs Helm would leave: gpubring applies them first
    kps = next(ln for ln in lines if ln.strip().startswith("kube-prometheus-stack "))
    assert "kube-prometheus-stack 79.1.0 -> " in kps
    assert "gpubring applies the pinned chart's CRDs first" in kps
    dra = next(ln for ln in lines if ln.strip().startswith("nvidia-dra-driver-gpu "))
    assert "25.8.0 -> " in dra and "CRDs first" in dra
    for release, old in (("volcano", "1.14.4"), ("kai-scheduler", "v0.9.8"), ("kueue", "0.14.2")):
        assert any(ln.strip().startswith(f"{release} {old} -> ") for ln in lines), release
    # how the hops are taken: one run per intermediate stage, then the pins
    assert "2 runs of `gpubring upgrade`" in out
    assert "run 1: pin in the inventory's group_vars/all/versions.yml (gpubring_versions) " in out
    assert "gpu_operator.chart: v26.3.3, network_operator.chart: 26.1.2" in out
    assert "run 2: remove those pins" in out
    assert "8 of 8 node(s) drained once each" in out
    assert not (old_cluster / ".gpubring" / "runs").exists(), "--check must not start a run"


def test_the_run_refuses_a_skipped_operator_line_before_any_host(old_cluster: Path) -> None:
    code, out = cli(old_cluster)
    assert code == ExitCode.BAD_INPUT, out
    assert "gpu-operator v25.10.0 -> v26.3.3 -> v26.7.0" in out
    assert "pin gpu_operator.chart: v26.3.3, network_operator.chart: 26.1.2 under gpubring_versions" in out
    assert "Traceback" not in out
    assert not (old_cluster / ".gpubring" / "runs").exists(), "a refused upgrade started a run"


def test_run_one_with_the_hop_pinned_plans_no_further_hop(old_cluster: Path) -> None:
    """Run 1 as the plan says: the intermediate lines pinned by the inventory; no hop left in it."""
    (old_cluster / "group_vars" / "all" / "versions.yml").write_text(
        "gpubring_versions:\n  gpu_operator: {chart: v26.3.3}\n  network_operator: {chart: 26.1.2}\n"
    )
    plan = upgrade.plan_upgrade(load_inventory(old_cluster))
    found = hops.roads(plan.releases)
    assert {r.release: r.steps for r in found if r.release in {"gpu-operator", "network-operator"}} == {
        "gpu-operator": ("v26.3.3",),
        "network-operator": ("26.1.2",),
    }
    assert not hops.run_lines(found)
    code, out = cli(old_cluster, "--check")
    assert code == ExitCode.OK and "runs of `gpubring upgrade`" not in out, out


@pytest.mark.parametrize(
    ("release", "chart", "version"),
    [("gpu-operator", "gpu-operator", "v26.3.3"), ("network-operator", "network-operator", "26.1.2")],
)
def test_the_intermediate_charts_exist_and_render_gpubrings_values(
    release: str, chart: str, version: str
) -> None:
    """Run 1 installs the intermediate chart with gpubring's values of today: every values key exists
    in it and Helm's engine renders it at the pinned Kubernetes."""
    root = upstream.upstream_dir()
    folder = root / "charts" / f"{chart}-{version}"
    assert (folder / "Chart.yaml").is_file(), f"the hop's chart charts/{folder.name} is missing in {root}"
    assert version in hops.load_rules()[release].lines
    inv = load_inventory(DATA / "inventories" / "all-on")
    planned = next(r for r in planned_releases(inv) if r.name == release)
    unknown = list(upstream.unknown_value_paths(planned.values, upstream.chart_values(chart, version)))
    assert not unknown, f"{release} {version}: keys the intermediate chart does not have: {unknown}"
    objects = upstream.render(
        upstream.chart_dir(chart, version),
        copy.deepcopy(planned.values),
        name=planned.name,
        namespace=planned.namespace,
        kube_version=str(inv.versions["kubernetes"]["version"]),
    )
    kinds = {obj.get("kind") for _, obj in objects}
    assert "Deployment" in kinds, sorted(map(str, kinds))


def test_broken_hop_data_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "versions.yml"
    bad.write_text(
        "gpubring_versions: {}\n"
        "gpubring_upgrade_hops:\n  gpu_operator: {release: gpu-operator, lines: [v26.7.0, v26.3.3]}\n"
    )
    with pytest.raises(hops.HopsError, match=r"gpubring_upgrade_hops.gpu_operator.lines: expected"):
        hops.load_rules(bad)
    bad.write_text("gpubring_versions: {}\n")
    with pytest.raises(hops.HopsError, match="gpubring_upgrade_hops: expected a mapping"):
        hops.load_rules(bad)


def test_broken_hop_data_is_an_error_not_a_traceback(
    old_cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """versions.yml with its gpubring_upgrade_hops broken (lines out of order): `upgrade --check` still
    lists the releases and names the problem; `upgrade` stops with exit 2 before any host."""
    text = versions.paths.versions_file().read_text(encoding="utf-8")
    broken = tmp_path / "versions.yml"
    broken.write_text(
        text.replace("lines: [v25.10.0, v26.3.3, v26.7.0]", "lines: [v26.7.0, v25.10.0]"), encoding="utf-8"
    )
    assert broken.read_text(encoding="utf-8") != text
    monkeypatch.setattr(versions.paths, "versions_file", lambda: broken)
    code, out = cli(old_cluster, "--check")
    assert "gpubring_upgrade_hops.gpu_operator.lines: expected versions of consecutive major lines" in out
    assert "Traceback" not in out
    code, out = cli(old_cluster)
    assert code == ExitCode.BAD_INPUT, out
    assert "gpubring_upgrade_hops.gpu_operator.lines" in out and "Traceback" not in out
    assert not (old_cluster / ".gpubring" / "runs").exists()


def test_the_network_operator_lines_are_consecutive_by_its_calendar() -> None:
    """The data here and upgrade.network_operator_hops (the calendar rule: a line every three months)
    agree: each listed line is the next one after the line before it."""
    lines = hops.load_rules()["network-operator"].lines
    for old, new in itertools.pairwise(lines):
        assert upgrade.network_operator_hops(old, new) == [], (old, new)


@pytest.fixture(autouse=True)
def _no_kubeadm_plan_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """`upgrade --check` then reads kubeadm's plan on the first control plane (issue 21 item 10,
    tests/test_upgrade_plan_live.py); these inventories' hosts are documentation addresses, so the
    tests here stop after gpubring's own plan."""
    from gpubring.commands import upgrade as command

    monkeypatch.setattr(command, "_kubeadm_plan", lambda *_args: ExitCode.OK)
