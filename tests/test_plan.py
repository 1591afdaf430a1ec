"""Phases read from the playbooks, host patterns resolved like Ansible, and `gpubring plan`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpubring import paths, planning, versions
from gpubring.app import app
from gpubring.inventory import load_inventory
from gpubring.phases import PHASES, PlaybookError, plan_phases, read_playbook, resolve_pattern, short_role

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py

GROUPS = {
    "all": ("cp-1", "cp-2", "cp-3", "gpu-1", "gpu-2", "cpu-1", "bastion"),
    "control_plane": ("cp-1", "cp-2", "cp-3"),
    "gpu_nodes": ("gpu-1", "gpu-2", "cp-3"),
    "cpu_nodes": ("cpu-1",),
    "ungrouped": ("bastion",),
}
HOSTS = GROUPS["all"]


def run(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("all", HOSTS),
        ("*", HOSTS),
        ("control_plane", ("cp-1", "cp-2", "cp-3")),
        ("gpu-2", ("gpu-2",)),
        ("gpu_nodes:cpu_nodes", ("gpu-1", "gpu-2", "cp-3", "cpu-1")),
        ("gpu_nodes,cpu_nodes", ("gpu-1", "gpu-2", "cp-3", "cpu-1")),
        ("gpu_nodes:cpu_nodes:!control_plane", ("gpu-1", "gpu-2", "cpu-1")),
        ("!control_plane:gpu_nodes", ("gpu-1", "gpu-2")),
        ("control_plane:&gpu_nodes", ("cp-3",)),
        ("&gpu_nodes", ("cp-3", "gpu-1", "gpu-2")),  # only & or !: Ansible starts from all, in its order
        ("control_plane[0]", ("cp-1",)),
        ("control_plane[-1]", ("cp-3",)),
        ("control_plane[0:1]", ("cp-1", "cp-2")),
        ("control_plane[1:]", ("cp-2", "cp-3")),
        ("control_plane[7]", ()),
        ("gpu-*", ("gpu-1", "gpu-2")),
        ("~cp-[12]", ("cp-1", "cp-2")),
        ("no_such_group", ()),
        ("gpu_nodes:cpu_nodes:no_such_group", ("gpu-1", "gpu-2", "cp-3", "cpu-1")),
        ("ungrouped", ("bastion",)),
    ],
)
def test_resolve_pattern(pattern: str, expected: tuple[str, ...]) -> None:
    assert resolve_pattern(pattern, GROUPS, HOSTS) == expected


def test_short_role_names() -> None:
    assert short_role("gpubring.core.kernel") == "kernel"
    assert short_role({"role": "gpubring.core.rdma", "tags": ["x"]}) == "rdma"
    assert short_role({"name": "roles/cni"}) == "cni"


def test_site_yml_imports_every_phase_in_order() -> None:
    site = read_playbook(paths.playbooks_dir() / "site.yml")
    by_phase = [play for phase in PHASES for play in read_playbook(paths.playbooks_dir() / f"{phase}.yml")]
    assert site == tuple(by_phase)
    assert site[0].roles == ("preflight",)


def test_read_playbook_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("- hosts: all\n  roles: [a\n")
    with pytest.raises(PlaybookError, match="cannot be read as YAML"):
        read_playbook(bad)
    loop = tmp_path / "loop.yml"
    loop.write_text("- ansible.builtin.import_playbook: loop.yml\n")
    with pytest.raises(PlaybookError, match="loops back"):
        read_playbook(loop)


def test_plan_phases_on_the_sample(sample_inventory: Path) -> None:
    plans = plan_phases(load_inventory(sample_inventory))
    assert [p.phase for p in plans] == list(PHASES)
    assert all(p.enabled for p in plans)
    plays = {(p.phase, play.hosts_pattern): play for p in plans for play in p.plays}
    assert plays[("preflight", "all")].hosts == (
        "cp-1",
        "cp-2",
        "cp-3",
        "gpu-1",
        "gpu-2",
        "gpu-3",
        "gpu-4",
        "cpu-1",
    )
    gpu = plays[("host", "gpu_nodes")]
    assert gpu.hosts == ("gpu-1", "gpu-2", "gpu-3", "gpu-4")
    assert "nvidia_driver" in gpu.roles
    join = plays[("cluster", "gpu_nodes:cpu_nodes:!control_plane")]
    assert join.hosts == ("gpu-1", "gpu-2", "gpu-3", "gpu-4", "cpu-1")
    assert join.roles == ("kubeadm_join",)
    assert plays[("platform", "control_plane[0]")].hosts == ("cp-1",)
    assert plans[3].playbook == paths.playbooks_dir() / "platform.yml"


def test_plan_phases_marks_skipped_phases(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/operations.yml": "gpubring_phases: [preflight, host]\n"})
    plans = plan_phases(load_inventory(root))
    assert [p.phase for p in plans if p.enabled] == ["preflight", "host"]


def test_plan_command_lists_phases_roles_hosts_and_versions(sample_inventory: Path) -> None:
    result = run("plan", sample_inventory)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith(
        f"Inventory {sample_inventory}: 8 hosts (control_plane 3, gpu_nodes 4, cpu_nodes 1)"
    )
    rows = out.splitlines()
    gpu_row = next(r for r in rows if "GPU host setup on GPU nodes" in r)
    assert "gpu_nodes: gpu-1, gpu-2, gpu-3, gpu-4 [4]" in gpu_row
    assert "nvidia_driver, nvidia_container_toolkit, rdma, kubelet_topology" in gpu_row
    platform_row = next(r for r in rows if r.lstrip().startswith("platform"))
    assert "control_plane[0]: cp-1 [1]" in platform_row
    pinned = str(versions.load_pinned()["kubernetes"]["version"])
    assert any(r.split()[:2] == ["kubernetes.version", pinned] for r in rows)
    assert "Compatibility rules:" in out
    assert "Helm releases:" in out


def test_plan_command_shows_skipped_phases_with_the_reason(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {
            "group_vars/all/operations.yml": "gpubring_phases: [preflight, host, verify]\n"
            "gpubring_phases_skipped_reason: a lab of containers cannot run a kubelet\n"
        }
    )
    result = run("plan", root)
    assert result.exit_code == 0, result.output
    cluster_rows = [r for r in result.stdout.splitlines() if r.lstrip().startswith("cluster")]
    assert cluster_rows
    assert all("(skipped: a lab of containers cannot run a kubelet)" in r for r in cluster_rows)


def test_plan_command_marks_check_only_phases(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {
            "group_vars/all/operations.yml": "gpubring_phases: [preflight, host, verify]\n"
            "gpubring_phases_check_only: [platform]\n"
        }
    )
    result = run("plan", root, "--json", "-")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["phases_check_only"] == ["platform"]
    result = run("plan", root)
    platform = [r for r in result.stdout.splitlines() if r.lstrip().startswith("platform")]
    cluster = [r for r in result.stdout.splitlines() if r.lstrip().startswith("cluster")]
    assert platform and all("(check mode only: gpubring up --check)" in r for r in platform), platform
    assert cluster and all("(skipped:" in r for r in cluster), cluster


def test_plan_json_to_stdout(sample_inventory: Path) -> None:
    result = run("plan", sample_inventory, "--json", "-")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) >= {
        "inventory", "hosts_file", "hosts", "groups", "settings", "phases", "phases_skipped_reason",
        "versions", "matrix", "rules", "releases", "releases_note",
    }  # fmt: skip
    assert doc["inventory"] == str(sample_inventory)
    assert doc["hosts"][0] == {
        "name": "cp-1", "address": "192.0.2.11", "port": 22, "user": "ops", "groups": ["control_plane"],
    }  # fmt: skip
    assert [p["phase"] for p in doc["phases"]] == list(PHASES)
    host = doc["phases"][1]
    assert host["playbook"] == "playbooks/host.yml"
    assert host["enabled"] is True
    assert host["plays"][0]["name"] == "Find the hosts left as their last complete host phase left them"
    assert host["plays"][2] == {
        "name": "GPU host setup on GPU nodes",
        "hosts_pattern": "gpu_nodes",
        "hosts": ["gpu-1", "gpu-2", "gpu-3", "gpu-4"],
        "roles": ["nvidia_driver", "nvidia_container_toolkit", "rdma", "kubelet_topology"],
    }
    assert doc["versions"]["kubernetes"]["version"] == versions.load_pinned()["kubernetes"]["version"]
    assert doc["settings"]["gpubring_cni"] == "calico"
    assert all(r["verdict"] in ("pass", "not applicable") for r in doc["rules"])
    assert isinstance(doc["releases"], list)
    for release in doc["releases"]:
        assert {"name", "chart", "version", "namespace", "values"} <= set(release)


def test_plan_json_to_a_file_keeps_the_human_output(sample_inventory: Path, tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    result = run("plan", sample_inventory, "--json", target)
    assert result.exit_code == 0, result.output
    assert "Phases:" in result.stdout
    assert json.loads(target.read_text())["groups"]["control_plane"] == ["cp-1", "cp-2", "cp-3"]


def test_plan_without_a_releases_module_says_so(
    sample_inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = planning.importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "gpubring.releases" else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(planning.importlib.util, "find_spec", find_spec)
    plan = planning.build_plan(load_inventory(sample_inventory))
    assert plan.releases == ()
    assert plan.releases_note == planning.NO_RELEASES
    result = run("plan", sample_inventory)
    assert "Helm releases:\n  no Helm releases defined yet" in result.stdout


def test_plan_stops_on_bad_input_before_anything_else(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/cluster.yml": "gpubring_cni: weave\n"})
    result = run("plan", root, "--json", "-")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: group_vars/all/cluster.yml: gpubring_cni: expected one of")


def test_hosts_text_shortens_long_lists() -> None:
    names = [f"gpu-{i:04d}" for i in range(1, 901)]
    text = planning.hosts_text(names)
    assert text.startswith("gpu-0001, gpu-0002")
    assert text.endswith("… (+892 more) [900]")
    assert planning.hosts_text([]) == "(no hosts)"


def test_plan_lists_the_users_own_variables_once(tmp_path: Path) -> None:
    """A key no role or setting reads, and that looks like none of their inputs, is the user's own:
    allowed, and listed once by plan so that a typo cannot hide among them."""
    import shutil

    inv = tmp_path / "inv"
    shutil.copytree(Path(__file__).resolve().parents[1] / "inventories" / "prod", inv)
    (inv / "group_vars" / "all" / "site.yml").write_text("site_contact: ops@example.com\nrack_row: 7\n")
    (inv / "group_vars" / "gpu_nodes" / "site.yml").write_text("rack_row: 9\n")
    result = CliRunner().invoke(app, ["plan", str(inv), "--json", str(tmp_path / "plan.json")])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("Variables of your own"))
    assert line.count("rack_row") == 1 and "site_contact (group_vars/all/site.yml)" in line
    document = json.loads((tmp_path / "plan.json").read_text())
    assert {v["key"] for v in document["own_variables"]} >= {"rack_row", "site_contact"}
