"""The lab without Docker: node names, port allocation, planning, the generated inventory, argument checks."""

from __future__ import annotations

import json
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpubring import lab
from gpubring.commands import lab as lab_command
from helpers import REPO

# Never the default prefix: `lab down` in these tests must not touch a user's lab.
PREFIX = "gpubunit"
FACTS = {"debian_kernel": "6.1.0-41-amd64"}  # what `lab up` finds out from the archive
TRIXIE_FACTS = {"debian_kernel": "6.12.57+deb13-amd64"}
BY_DISTRO = {"debian12": FACTS, "debian13": TRIXIE_FACTS}  # lab_facts' answer: per distro


def _spec(tmp_path: Path, **kw: object) -> lab.LabSpec:
    return lab.LabSpec(prefix=PREFIX, inventory_dir=tmp_path / "lab", **kw)  # type: ignore[arg-type]


def _container(
    name: str, groups: tuple[str, ...], port: int, state: str = "running", image: str = ""
) -> lab.Container:
    return lab.Container(name, state, image or "gpubring-testhost:debian12", groups, port)


# --- names and shapes -----------------------------------------------------------------------------


CP, GPU, CPU = ("control_plane",), ("gpu_nodes",), ("cpu_nodes",)


@pytest.mark.parametrize(
    ("spec", "nodes"),
    [
        pytest.param(
            lab.LabSpec(), [("gpub-cp1", CP), ("gpub-gpu1", GPU), ("gpub-gpu2", GPU)], id="default-1cp-2gpu"
        ),
        pytest.param(
            lab.LabSpec(prefix="t", nodes=6, control_planes=3, cpu_nodes=1),
            [("t-cp1", CP), ("t-cp2", CP), ("t-cp3", CP), ("t-gpu1", GPU), ("t-gpu2", GPU), ("t-cpu1", CPU)],
            id="3cp-2gpu-1cpu",
        ),
        # With no dedicated GPU node the control plane is a GPU node too (all in one).
        pytest.param(lab.LabSpec(nodes=1), [("gpub-cp1", CP + GPU)], id="single-node"),
    ],
)
def test_lab_nodes_are_named_and_grouped_like_real_nodes(
    spec: lab.LabSpec, nodes: list[tuple[str, tuple[str, ...]]]
) -> None:
    assert [(n.name, n.groups) for n in lab.lab_nodes(spec)] == nodes
    assert [n.group for n in lab.lab_nodes(spec)] == [groups[0] for _, groups in nodes]


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"control_planes": 2}, "--control-planes 2"),
        ({"control_planes": 0}, "--control-planes 0"),
        ({"nodes": 0}, "--nodes 0: expected at least 1"),
        ({"nodes": 3, "control_planes": 3, "cpu_nodes": 1}, "--nodes 3: expected at least"),
        ({"distro": "ubuntu24"}, "--distro 'ubuntu24'"),
        ({"gpu_distro": "debian11"}, "--gpu-distro 'debian11': expected one of debian12, debian13"),
        ({"prefix": "Bad_Name"}, "--prefix 'Bad_Name'"),
        ({"prefix": "ends-"}, "--prefix 'ends-'"),
        ({"cpu_nodes": -1}, "--cpu-nodes -1"),
    ],
)
def test_spec_problems_name_the_option(kw: dict[str, object], needle: str) -> None:
    problems = lab.spec_problems(lab.LabSpec(**kw))  # type: ignore[arg-type]
    assert any(needle in p for p in problems), problems


def test_good_specs_have_no_problems() -> None:
    assert lab.spec_problems(lab.LabSpec()) == []
    assert lab.spec_problems(lab.LabSpec(prefix="g", nodes=1, distro="debian13")) == []
    assert lab.spec_problems(lab.LabSpec(nodes=5, control_planes=3, cpu_nodes=2)) == []


# --- ports and plans ------------------------------------------------------------------------------


def test_allocate_ports_skips_taken_and_bound_ports() -> None:
    bound = {22203}
    ports = lab.allocate_ports(3, taken={22201}, is_free=lambda p: p not in bound, start=22201)
    assert ports == [22202, 22204, 22205]


def test_allocate_ports_fails_when_the_range_is_full() -> None:
    with pytest.raises(lab.LabError, match=r"no free 127\.0\.0\.1 port"):
        lab.allocate_ports(2, taken={10, 11}, is_free=lambda p: True, start=10, stop=12)


def test_port_is_free_sees_a_real_listener() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not lab.port_is_free(port)
    free = lab.allocate_ports(1, taken=(), start=port, stop=65535)[0]
    assert lab.port_is_free(free)


def test_plan_for_a_new_lab_creates_every_node_on_distinct_ports(tmp_path: Path) -> None:
    plan = lab.plan_lab(_spec(tmp_path), [], taken_ports={22201}, is_free=lambda p: True)
    assert [(p.node.name, p.port, p.action) for p in plan.nodes] == [
        ("gpubunit-cp1", 22202, "create"),
        ("gpubunit-gpu1", 22203, "create"),
        ("gpubunit-gpu2", 22204, "create"),
    ]
    assert plan.remove == ()


def test_second_up_with_the_same_shape_reuses_containers_and_ports(tmp_path: Path) -> None:
    existing = [
        _container("gpubunit-cp1", ("control_plane",), 22210),
        _container("gpubunit-gpu1", ("gpu_nodes",), 22211),
        _container("gpubunit-gpu2", ("gpu_nodes",), 22212, state="exited"),
    ]
    plan = lab.plan_lab(_spec(tmp_path), existing, taken_ports={22210, 22211, 22212}, is_free=lambda p: False)
    assert [(p.node.name, p.port, p.action) for p in plan.nodes] == [
        ("gpubunit-cp1", 22210, "keep"),
        ("gpubunit-gpu1", 22211, "keep"),
        ("gpubunit-gpu2", 22212, "start"),
    ]
    assert plan.remove == ()


def test_plan_removes_what_does_not_fit_the_asked_shape(tmp_path: Path) -> None:
    existing = [
        _container("gpubunit-cp1", ("control_plane",), 22201),
        _container("gpubunit-gpu1", ("gpu_nodes",), 22202, image="gpubring-testhost:debian13"),
        _container("gpubunit-gpu2", ("gpu_nodes",), 22203),
        _container("gpubunit-gpu3", ("gpu_nodes",), 22204),
    ]
    plan = lab.plan_lab(_spec(tmp_path, nodes=3), existing, taken_ports={22201, 22202, 22203, 22204},
                        is_free=lambda p: True)  # fmt: skip
    assert plan.remove == ("gpubunit-gpu1", "gpubunit-gpu3")
    actions = {p.node.name: (p.action, p.port) for p in plan.nodes}
    assert actions["gpubunit-cp1"] == ("keep", 22201)
    assert actions["gpubunit-gpu2"] == ("keep", 22203)
    # The recreated node does not get a port a container still publishes while the plan is made.
    assert actions["gpubunit-gpu1"] == ("create", 22205)


def test_going_from_three_to_one_node_changes_the_control_planes_groups(tmp_path: Path) -> None:
    existing = [
        _container("gpubunit-cp1", ("control_plane",), 22201),
        _container("gpubunit-gpu1", ("gpu_nodes",), 22202),
    ]
    plan = lab.plan_lab(
        _spec(tmp_path, nodes=1), existing, taken_ports={22201, 22202}, is_free=lambda p: True
    )
    assert plan.remove == ("gpubunit-cp1", "gpubunit-gpu1")
    assert [(p.node.groups, p.action) for p in plan.nodes] == [(("control_plane", "gpu_nodes"), "create")]


def test_parse_inspect_reads_name_state_groups_and_port() -> None:
    data = [
        {
            "Name": "/gpub-gpu1",
            "State": {"Status": "running"},
            "Config": {"Image": "gpubring-testhost:debian12", "Labels": {lab.LABEL_GROUPS: "gpu_nodes"}},
            "HostConfig": {"PortBindings": {"22/tcp": [{"HostIp": "127.0.0.1", "HostPort": "22207"}]}},
        },
        {"Name": "/gpub-cp1", "State": {"Status": "exited"}, "Config": {"Image": "x", "Labels": None},
         "HostConfig": {"PortBindings": {}}},
    ]  # fmt: skip
    assert lab.parse_inspect(data) == [
        lab.Container("gpub-cp1", "exited", "x", (), None),
        lab.Container("gpub-gpu1", "running", "gpubring-testhost:debian12", ("gpu_nodes",), 22207),
    ]


# --- lab variables: only what the roles declare --------------------------------------------------


def _project(tmp_path: Path, role_options: dict[str, dict[str, object]]) -> Path:
    root = tmp_path / "project"
    for role, options in role_options.items():
        meta = root / "roles" / role / "meta"
        meta.mkdir(parents=True)
        spec = {"argument_specs": {"main": {"short_description": role, "options": options}}}
        (meta / "argument_specs.yml").write_text(yaml.safe_dump(spec))
    (root / "settings.yml").write_text(
        yaml.safe_dump(
            {"options": {"gpubring_phases": {"type": "list"}, "gpubring_reboot_allowed": {"type": "bool"}}}
        )
    )
    return root


def test_declared_variables_reads_role_specs_and_settings(tmp_path: Path) -> None:
    root = _project(tmp_path, {"preflight": {"preflight_require_gpu": {"type": "bool"}}, "cni": {}})
    assert lab.declared_variables(root) == {
        "preflight_require_gpu",
        "gpubring_phases",
        "gpubring_reboot_allowed",
    }


def test_lab_group_vars_emit_only_declared_variables() -> None:
    declared = {"gpubring_phases", "gpubring_reboot_allowed", "preflight_require_gpu"}
    group_vars, left_out = lab.lab_group_vars(declared)
    assert group_vars["all"] == {
        "gpubring_phases": ["preflight", "host", "verify"],
        "gpubring_reboot_allowed": False,
    }
    assert group_vars["gpu_nodes"] == {"preflight_require_gpu": False}
    assert "kernel_modules_load_now" in left_out
    assert "preflight_require_gpu" not in left_out


def test_every_lab_var_is_a_role_input_or_a_cluster_setting() -> None:
    roles = {p.name for p in (REPO / "roles").iterdir() if p.is_dir()}
    for var in lab.lab_vars():
        # names carry their role's prefix (or gpubring_ for cluster settings), as DESIGN.md asks
        assert var.name.startswith("gpubring_") or any(var.name.startswith(r + "_") for r in roles), var.name


def test_lab_vars_written_against_this_checkout_are_declared() -> None:
    declared = lab.declared_variables(REPO)
    group_vars, _ = lab.lab_group_vars(declared, "debian12", FACTS)
    written = set(group_vars["all"]) | set(group_vars["gpu_nodes"])
    assert written <= declared
    # settings.yml declares these today; a lab without them would run cluster and platform.
    assert group_vars["all"]["gpubring_phases"] == ["preflight", "host", "verify"]
    assert "kubelet" in group_vars["all"]["gpubring_phases_skipped_reason"]


# --- the generated inventory ----------------------------------------------------------------------


def _written_lab(tmp_path: Path, nodes: int = 3) -> tuple[lab.LabSpec, lab.LabPlan]:
    spec = _spec(tmp_path, nodes=nodes)
    plan = lab.plan_lab(spec, [], taken_ports=(), is_free=lambda p: True)
    host_keys = {
        p.port: [
            f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{p.port} root@{p.node.name}",
            "ecdsa-sha2-nistp256 AAAAE2 x",
        ]
        for p in plan.nodes
    }
    lab.write_inventory(spec, plan.nodes, host_keys, lab.declared_variables(REPO), BY_DISTRO)
    return spec, plan


def test_hosts_yml_reaches_each_node_on_its_own_port_with_host_key_checking(tmp_path: Path) -> None:
    spec, _ = _written_lab(tmp_path)
    data = yaml.safe_load((spec.inventory_dir / "hosts.yml").read_text())
    children = data["all"]["children"]
    assert children["control_plane"]["hosts"] == {
        "gpubunit-cp1": {"ansible_host": "127.0.0.1", "ansible_port": 22201}
    }
    assert set(children["gpu_nodes"]["hosts"]) == {"gpubunit-gpu1", "gpubunit-gpu2"}
    assert "cpu_nodes" not in children
    conn = data["all"]["vars"]
    assert conn["ansible_user"] == "root"
    key = Path(conn["ansible_ssh_private_key_file"])
    assert key.is_absolute()
    assert key == (spec.inventory_dir / ".ssh" / "id_ed25519").resolve()
    args = conn["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in args
    assert f"UserKnownHostsFile={(spec.inventory_dir / '.ssh' / 'known_hosts').resolve()}" in args
    assert "StrictHostKeyChecking=no" not in args


def test_known_hosts_holds_every_port_and_is_private(tmp_path: Path) -> None:
    spec, plan = _written_lab(tmp_path)
    known = spec.inventory_dir / ".ssh" / "known_hosts"
    lines = known.read_text().splitlines()
    assert lines[:2] == [
        "[127.0.0.1]:22201 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI22201",
        "[127.0.0.1]:22201 ecdsa-sha2-nistp256 AAAAE2",
    ]
    assert {line.split()[0] for line in lines} == {f"[127.0.0.1]:{p.port}" for p in plan.nodes}
    assert all(len(line.split()) == 3 for line in lines)  # no comments carried over
    assert stat.S_IMODE(known.stat().st_mode) == 0o600


def test_known_hosts_lines_ignore_junk() -> None:
    assert lab.known_hosts_lines({22: ["", "garbage", "ssh-rsa AAAB root@x"]}) == [
        "[127.0.0.1]:22 ssh-rsa AAAB"
    ]


def test_marker_and_group_vars_are_written(tmp_path: Path) -> None:
    spec, plan = _written_lab(tmp_path)
    marker = lab.read_marker(spec.inventory_dir)
    assert marker is not None
    assert marker["prefix"] == PREFIX
    assert [n["port"] for n in marker["nodes"]] == [p.port for p in plan.nodes]
    all_vars = yaml.safe_load((spec.inventory_dir / "group_vars/all/lab.yml").read_text())
    assert all_vars["gpubring_reboot_allowed"] is False
    gpu_vars = yaml.safe_load((spec.inventory_dir / "group_vars/gpu_nodes/lab.yml").read_text())
    assert isinstance(gpu_vars, dict)


def test_ansible_reads_the_generated_inventory(tmp_path: Path) -> None:
    """The real ansible-inventory sees the groups, ports and SSH options (and skips the dot-files)."""
    spec, plan = _written_lab(tmp_path)
    ansible_inventory = Path(sys.executable).parent / "ansible-inventory"
    proc = subprocess.run(
        [str(ansible_inventory), "-i", str(spec.inventory_dir), "--list"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "WARNING" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    assert data["control_plane"]["hosts"] == ["gpubunit-cp1"]
    assert sorted(data["gpu_nodes"]["hosts"]) == ["gpubunit-gpu1", "gpubunit-gpu2"]
    hostvars = data["_meta"]["hostvars"]
    assert hostvars["gpubunit-gpu2"]["ansible_port"] == plan.nodes[2].port
    assert "StrictHostKeyChecking=yes" in hostvars["gpubunit-gpu2"]["ansible_ssh_common_args"]
    assert hostvars["gpubunit-gpu1"]["gpubring_phases"] == ["preflight", "host", "verify"]


def test_ensure_key_makes_a_private_ed25519_key_once(tmp_path: Path) -> None:
    paths = lab.LabPaths(tmp_path / "lab")
    first = lab.ensure_key(paths, "gpub")
    assert first.startswith("ssh-ed25519 ")
    assert first.endswith("gpubring-lab-gpub")
    assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.ssh_dir.stat().st_mode) == 0o700
    assert lab.ensure_key(paths, "gpub") == first


def test_up_refuses_a_folder_that_is_not_a_lab(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    spec.inventory_dir.mkdir()
    (spec.inventory_dir / "hosts.yml").write_text("all: {}\n")
    with pytest.raises(lab.LabInputError, match="is not a lab inventory"):
        lab.check_inventory_dir(spec)


def test_up_refuses_a_folder_of_another_lab(tmp_path: Path) -> None:
    spec, _ = _written_lab(tmp_path)
    with pytest.raises(lab.LabInputError, match=f"holds lab '{PREFIX}', not 'other'"):
        lab.check_inventory_dir(lab.LabSpec(prefix="other", inventory_dir=spec.inventory_dir))
    lab.check_inventory_dir(spec)  # its own lab is fine


def test_prefix_comes_from_the_folder_unless_given(tmp_path: Path) -> None:
    spec, _ = _written_lab(tmp_path)
    assert lab.resolve_prefix(None, spec.inventory_dir) == PREFIX
    assert lab.resolve_prefix("mine", spec.inventory_dir) == "mine"
    assert lab.resolve_prefix(None, tmp_path / "nothing") == lab.DEFAULT_PREFIX


# --- the command: argument checks before anything touches Docker ---------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--control-planes", "2"], "--control-planes 2"),
        (["--nodes", "2", "--control-planes", "3"], "--nodes 2: expected at least"),
        (["--distro", "centos7"], "--distro 'centos7'"),
        (["--gpu-distro", "trixie"], "--gpu-distro 'trixie'"),
        (["--prefix", "UPPER"], "--prefix 'UPPER'"),
    ],
)
def test_lab_up_rejects_bad_input_with_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    result = CliRunner().invoke(lab_command.app, ["up", "--inventory-dir", str(tmp_path / "lab"), *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "lab").exists()


def test_lab_down_leaves_a_foreign_folder_alone(tmp_path: Path) -> None:
    foreign = tmp_path / "inv"
    foreign.mkdir()
    (foreign / "hosts.yml").write_text("all: {}\n")
    result = CliRunner().invoke(
        lab_command.app, ["down", "--prefix", "gpubring-none", "--inventory-dir", str(foreign)]
    )
    assert result.exit_code == 0, result.output
    assert "not a lab inventory" in result.output
    assert (foreign / "hosts.yml").is_file()


def test_lab_down_removes_the_generated_inventory(tmp_path: Path) -> None:
    spec, _ = _written_lab(tmp_path)
    lab.ensure_key(lab.LabPaths(spec.inventory_dir), spec.prefix)
    result = CliRunner().invoke(
        lab_command.app, ["down", "--prefix", "gpub-unit-none", "--inventory-dir", str(spec.inventory_dir)]
    )
    # The folder holds lab PREFIX, not the prefix asked for: left alone.
    assert result.exit_code == 0, result.output
    assert spec.inventory_dir.is_dir()
    result = CliRunner().invoke(lab_command.app, ["down", "--inventory-dir", str(spec.inventory_dir)])
    assert result.exit_code == 0, result.output
    assert not spec.inventory_dir.exists()


def test_status_and_down_never_fall_back_to_another_folders_lab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert lab.find_prefix(None, tmp_path / "elsewhere") is None
    assert lab.find_prefix(None, Path("inventories/lab")) == lab.DEFAULT_PREFIX
    assert lab.find_prefix("mine", tmp_path / "elsewhere") == "mine"
    spec, _ = _written_lab(tmp_path)
    assert lab.find_prefix(None, spec.inventory_dir) == PREFIX
    result = CliRunner().invoke(lab_command.app, ["down", "--inventory-dir", str(tmp_path / "elsewhere")])
    assert result.exit_code == 0, result.output
    assert "no lab for" in result.output


def test_up_does_not_take_over_a_lab_made_for_another_folder(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    mine = lab.Container("gpubunit-cp1", "running", spec.image, ("control_plane",), 22201,
                         inventory=str(spec.inventory_dir.resolve()), prefix=PREFIX)  # fmt: skip
    lab.check_ownership(spec, [mine])
    theirs = lab.Container("gpubunit-gpu1", "running", spec.image, ("gpu_nodes",), 22202,
                           inventory="/srv/other/lab", prefix=PREFIX)  # fmt: skip
    with pytest.raises(lab.LabInputError, match="already runs for the inventory /srv/other/lab"):
        lab.check_ownership(spec, [mine, theirs])


@pytest.mark.parametrize(("nodes", "cpu_nodes"), [(1, 0), (3, 0), (6, 2)])
def test_gpubring_validation_accepts_the_generated_inventory(
    tmp_path: Path, nodes: int, cpu_nodes: int
) -> None:
    """The lab inventory passes the same validation `gpubring up` runs first (no typo, no collision)."""
    from gpubring.inventory import load_inventory

    spec = _spec(tmp_path, nodes=nodes, cpu_nodes=cpu_nodes)
    plan = lab.plan_lab(spec, [], taken_ports=(), is_free=lambda p: True)
    lab.write_inventory(
        spec,
        plan.nodes,
        {p.port: ["ssh-ed25519 AAAA x"] for p in plan.nodes},
        lab.declared_variables(),
        BY_DISTRO,
    )
    inv = load_inventory(spec.inventory_dir)
    assert inv.phases == ("preflight", "host", "verify")
    assert "kubelet" in inv.phases_skipped_reason
    assert {h: (x.address, x.port) for h, x in inv.hosts.items()} == {
        p.node.name: ("127.0.0.1", p.port) for p in plan.nodes
    }
    assert set(inv.groups["gpu_nodes"]) == {p.node.name for p in plan.nodes if "gpu_nodes" in p.node.groups}
    assert inv.settings["gpubring_reboot_allowed"] is False


def test_lab_vars_can_apply_to_one_distro_only() -> None:
    declared = {"containerd_cdi_enabled", "gpubring_phases"}
    bookworm, _ = lab.lab_group_vars(declared, "debian12")
    trixie, _ = lab.lab_group_vars(declared, "debian13")
    assert bookworm["all"]["containerd_cdi_enabled"] is False  # containerd 1.6 has no CDI
    assert "containerd_cdi_enabled" not in trixie["all"]
    assert trixie["all"]["gpubring_phases"] == bookworm["all"]["gpubring_phases"]


def test_facts_fill_lab_vars_and_are_reused_from_the_folder(tmp_path: Path) -> None:
    declared = {"nvidia_driver_kernel_version", "kernel_modules_load_now"}
    assert lab.needed_facts(declared, "debian12") == {lab.DEBIAN_KERNEL}
    assert lab.needed_facts({"kernel_modules_load_now"}, "debian12") == set()
    with pytest.raises(lab.LabError, match="did not find out debian_kernel"):
        lab.lab_group_vars(declared, "debian12", {})
    group_vars, _ = lab.lab_group_vars(declared, "debian12", FACTS)
    assert group_vars["gpu_nodes"]["nvidia_driver_kernel_version"] == "6.1.0-41-amd64"
    # A folder that recorded the fact for the same distro answers without asking the archive.
    spec, _ = _written_lab(tmp_path)
    said: list[str] = []
    needed = {"debian12": {lab.DEBIAN_KERNEL}}
    facts = lab.lab_facts(spec, needed, lab.read_marker(spec.inventory_dir), said.append)
    assert facts == {"debian12": FACTS}
    assert said == []


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("- {name: x, group: all, why: y}", "exactly one of value and fact"),
        ("- {name: x, group: all, why: y, value: 1, fact: debian_kernel}", "exactly one of value and fact"),
        ("- {name: x, group: workers, why: y, value: 1}", "group is one of all, gpu_nodes"),
        ("- {name: x, group: all, why: y, fact: uptime}", "fact is one of debian_kernel"),
        ("- {name: x, group: all, why: y, value: 1, distros: [debian11]}", "distros is a list of"),
        ("- {name: x, group: all, why: y, value: 1, whence: z}", "unknown keys ['whence']"),
        ("name: x", "expected a list of lab variables"),
        ("- [unclosed", "expected"),
    ],
)
def test_a_malformed_vars_file_is_refused(tmp_path: Path, entry: str, needle: str) -> None:
    path = tmp_path / "vars.yml"
    path.write_text(entry + "\n")
    with pytest.raises(ValueError, match=re.escape(needle)):
        lab.lab_vars(path)


def test_vars_file_entries_read_as_lab_vars(tmp_path: Path) -> None:
    path = tmp_path / "vars.yml"
    path.write_text(
        "- {name: a, group: all, why: w, value: [1, 2]}\n"
        "- {name: b, group: gpu_nodes, why: w, fact: debian_kernel, distros: [debian13]}\n"
    )
    assert lab.lab_vars(path) == (
        lab.LabVar("a", [1, 2], "all", "w"),
        lab.LabVar("b", lab.DEBIAN_KERNEL, "gpu_nodes", "w", ("debian13",)),
    )


def test_docs_list_every_lab_variable() -> None:
    doc = (REPO / "docs" / "lab.md").read_text()
    missing = [v.name for v in lab.lab_vars() if f"`{v.name}`" not in doc]
    assert missing == [], f"docs/lab.md does not explain {missing}"


def test_lab_down_keeps_the_run_history_unless_purged(tmp_path: Path) -> None:
    spec, _ = _written_lab(tmp_path)
    lab.ensure_key(lab.LabPaths(spec.inventory_dir), spec.prefix)
    run = spec.inventory_dir / ".gpubring" / "runs" / "20260101T000000Z-up"
    run.mkdir(parents=True)
    (run / "report.json").write_text("{}")
    (spec.inventory_dir / ".gpubring" / "facts").mkdir()
    result = CliRunner().invoke(lab_command.app, ["down", "--inventory-dir", str(spec.inventory_dir)])
    assert result.exit_code == 0, result.output
    assert "kept the run history" in result.output and "--purge removes it" in result.output
    left = sorted(p.relative_to(spec.inventory_dir).as_posix() for p in spec.inventory_dir.rglob("*"))
    assert left == [".gpubring", ".gpubring/runs", ".gpubring/runs/20260101T000000Z-up",
                    ".gpubring/runs/20260101T000000Z-up/report.json"]  # fmt: skip
    # What is left is no lab: a new lab may be made in the folder, and the runs stay with it.
    lab.check_inventory_dir(spec)
    _written_lab(tmp_path)
    result = CliRunner().invoke(
        lab_command.app, ["down", "--purge", "--inventory-dir", str(spec.inventory_dir)]
    )
    assert result.exit_code == 0, result.output
    assert not spec.inventory_dir.exists()


@pytest.mark.parametrize(
    ("actions", "removed", "expected"),
    [
        (("keep", "keep", "create"), (), ["next: gpubring node add {inv} gpubunit-gpu2"]),
        (("start", "create", "create"), (), ["next: gpubring node add {inv} gpubunit-gpu1",
                                             "next: gpubring node add {inv} gpubunit-gpu2"]),
        (("create", "create", "create"), (), ["next: gpubring up {inv}"]),  # a new lab
        (("keep", "keep", "keep"), (), ["next: gpubring up {inv}"]),  # nothing added
        (("create", "keep", "keep"), ("gpubunit-cp1",), ["next: gpubring up {inv}"]),  # reshaped
        # The lab had gpu2 (its marker says so) and its container was removed: a fresh install.
        (("keep", "keep", "create"), ("known",), ["next: gpubring node replace {inv} gpubunit-gpu2"]),
    ],
)  # fmt: skip
def test_lab_up_says_how_to_join_the_nodes_it_added(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    actions: tuple[str, ...],
    removed: tuple[str, ...],
    expected: list[str],
) -> None:
    spec = _spec(tmp_path)
    nodes = lab.lab_nodes(spec)
    inv = tmp_path / "lab"
    if removed == ("known",):  # the lab's marker, as the lab's earlier `up` wrote it
        _written_lab(tmp_path)
        assert {n["name"] for n in lab.read_marker(inv)["nodes"]} >= {"gpubunit-gpu2"}  # type: ignore[index]
        removed = ()
    plan = lab.LabPlan(
        tuple(lab.PlannedNode(n, 22201 + i, a) for i, (n, a) in enumerate(zip(nodes, actions, strict=True))),  # type: ignore[arg-type]
        removed,
    )
    monkeypatch.setattr(lab, "up", lambda spec, out: plan)
    result = CliRunner().invoke(lab_command.app, ["up", "--prefix", PREFIX, "--inventory-dir", str(inv)])
    assert result.exit_code == 0, result.output
    assert [ln for ln in result.output.splitlines() if ln.startswith("next:")] == [
        e.format(inv=inv) for e in expected
    ]


# --- a lab of two Debian releases (--gpu-distro) ----------------------------------------------------


def test_gpu_nodes_run_the_gpu_distro_and_the_others_the_lab_distro(tmp_path: Path) -> None:
    spec = _spec(tmp_path, nodes=3, cpu_nodes=1, gpu_distro="debian13")
    assert {n.name: spec.distro_of(n) for n in lab.lab_nodes(spec)} == {
        "gpubunit-cp1": "debian12",
        "gpubunit-gpu1": "debian13",
        "gpubunit-cpu1": "debian12",
    }
    assert spec.distros == ("debian12", "debian13")
    assert lab.spec_problems(spec) == []
    # An all-in-one control plane is a GPU node: it runs the GPU distro, and the lab only that one.
    single = _spec(tmp_path, nodes=1, gpu_distro="debian13")
    assert [single.distro_of(n) for n in lab.lab_nodes(single)] == ["debian13"]
    assert single.distros == ("debian13",)
    # Without --gpu-distro every node runs --distro.
    assert _spec(tmp_path, distro="debian13").distros == ("debian13",)


def test_plan_replaces_a_gpu_node_of_the_other_release_and_keeps_the_rest(tmp_path: Path) -> None:
    """A lab that ran debian12 everywhere, asked for debian13 GPU nodes: the GPU node's container is
    made again from the debian13 image; the control plane and the CPU node are kept."""
    spec = _spec(tmp_path, nodes=3, cpu_nodes=1, gpu_distro="debian13")
    existing = [
        _container("gpubunit-cp1", CP, 22210),
        _container("gpubunit-gpu1", GPU, 22211),
        _container("gpubunit-cpu1", CPU, 22212),
    ]
    plan = lab.plan_lab(spec, existing, taken_ports={22210, 22211, 22212}, is_free=lambda p: True)
    assert [(p.node.name, p.action) for p in plan.nodes] == [
        ("gpubunit-cp1", "keep"),
        ("gpubunit-gpu1", "create"),
        ("gpubunit-cpu1", "keep"),
    ]
    assert plan.remove == ("gpubunit-gpu1",)
    # Once it runs the debian13 image, the same shape keeps it.
    again = [
        *existing[:1],
        _container("gpubunit-gpu1", GPU, 22213, image="gpubring-testhost:debian13"),
        existing[2],
    ]
    assert {p.action for p in lab.plan_lab(spec, again, is_free=lambda p: True).nodes} == {"keep"}


def test_facts_are_asked_of_the_distro_whose_nodes_get_them(tmp_path: Path) -> None:
    """The driver's kernel is a GPU node's: a lab whose GPU nodes alone run debian13 asks the debian13
    archive, and not the debian12 one its control plane runs."""
    declared = lab.declared_variables(REPO)
    mixed = _spec(tmp_path, nodes=3, cpu_nodes=1, gpu_distro="debian13")
    assert lab.facts_by_distro(declared, mixed) == {"debian13": {lab.DEBIAN_KERNEL}}
    assert lab.facts_by_distro(declared, _spec(tmp_path)) == {"debian12": {lab.DEBIAN_KERNEL}}
    # Recorded per distro: a marker's debian12 kernel is not reused for debian13 GPU nodes.
    said: list[str] = []
    previous = {"facts_by_distro": {"debian12": FACTS, "debian13": TRIXIE_FACTS}}
    assert lab.lab_facts(mixed, {"debian13": {lab.DEBIAN_KERNEL}}, previous, said.append) == {
        "debian13": TRIXIE_FACTS
    }
    assert said == []


@pytest.mark.parametrize(
    ("distro", "gpu_distro", "no_cdi"),
    [
        ("debian12", "debian13", {"gpubunit-cp1", "gpubunit-cpu1"}),
        ("debian13", "debian12", {"gpubunit-gpu1"}),  # the reverse split
    ],
)
def test_a_variable_of_one_release_reaches_only_that_releases_nodes(
    tmp_path: Path, distro: str, gpu_distro: str, no_cdi: set[str]
) -> None:
    """containerd_cdi_enabled: false is for debian12 (containerd 1.6 has no CDI): in a lab of two
    releases it goes to the host_vars of the debian12 nodes, and Ansible gives it to them alone; the
    driver's kernel is the GPU distro's."""
    spec = _spec(tmp_path, nodes=3, cpu_nodes=1, distro=distro, gpu_distro=gpu_distro)
    plan = lab.plan_lab(spec, [], is_free=lambda p: True)
    lab.write_inventory(spec, plan.nodes, {p.port: ["ssh-ed25519 AAAA x"] for p in plan.nodes},
                        lab.declared_variables(REPO), BY_DISTRO)  # fmt: skip
    all_vars = yaml.safe_load((spec.inventory_dir / "group_vars/all/lab.yml").read_text())
    assert "containerd_cdi_enabled" not in all_vars
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(spec.inventory_dir), "--list"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    hostvars = json.loads(proc.stdout)["_meta"]["hostvars"]
    assert {h for h, v in hostvars.items() if v.get("containerd_cdi_enabled") is False} == no_cdi
    assert all("containerd_cdi_enabled" not in v for h, v in hostvars.items() if h not in no_cdi)
    assert hostvars["gpubunit-gpu1"]["nvidia_driver_kernel_version"] == BY_DISTRO[gpu_distro]["debian_kernel"]
    assert "nvidia_driver_kernel_version" not in hostvars["gpubunit-cp1"]
    marker = lab.read_marker(spec.inventory_dir) or {}
    assert {n["name"]: n["distro"] for n in marker["nodes"]} == {
        "gpubunit-cp1": distro, "gpubunit-gpu1": gpu_distro, "gpubunit-cpu1": distro
    }  # fmt: skip
    # The same validation `gpubring up` runs first accepts it.
    from gpubring.inventory import load_inventory

    assert set(load_inventory(spec.inventory_dir).hosts) == {n["name"] for n in marker["nodes"]}
    # The lab made again on one release: the host_vars of the other are gone, the variable is the group's.
    one = _spec(tmp_path, nodes=3, cpu_nodes=1, distro="debian12")
    lab.write_inventory(one, plan.nodes, {p.port: ["ssh-ed25519 AAAA x"] for p in plan.nodes},
                        lab.declared_variables(REPO), BY_DISTRO)  # fmt: skip
    assert not list((spec.inventory_dir / "host_vars").glob("*/lab.yml"))
    assert (
        yaml.safe_load((spec.inventory_dir / "group_vars/all/lab.yml").read_text())["containerd_cdi_enabled"]
        is False
    )


def test_lab_up_passes_the_gpu_distro(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[lab.LabSpec] = []

    def fake_up(spec: lab.LabSpec, out: object) -> lab.LabPlan:
        seen.append(spec)
        return lab.LabPlan(())

    monkeypatch.setattr(lab, "up", fake_up)
    inv = tmp_path / "lab"
    args = ["up", "--prefix", PREFIX, "--inventory-dir", str(inv), "--gpu-distro", "debian13"]
    result = CliRunner().invoke(lab_command.app, args)
    assert result.exit_code == 0, result.output
    assert (seen[0].distro, seen[0].gpu_distro) == ("debian12", "debian13")


# --- an air-gapped lab (--airgap BUNDLE_DIR) ------------------------------------------------------


def _bundle(tmp_path: Path, *releases: str, kernel: str = "6.1.0-56-amd64") -> Path:
    root = tmp_path / "bundle"
    for release in releases:
        repo = root / "apt" / release
        repo.mkdir(parents=True)
        (repo / "Packages").write_text(
            "Package: ccache\nVersion: 4.8\n\n"
            "Package: linux-headers-amd64\nVersion: 6.1.158-1\n"
            f"Depends: linux-headers-{kernel} (= 6.1.158-1)\n",
            encoding="utf-8",
        )
    (root / "files").mkdir(parents=True, exist_ok=True)
    (root / "charts").mkdir()
    return root


def test_airgap_plan_publishes_no_port_and_replaces_online_nodes(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "debian-bookworm")
    spec = _spec(tmp_path, nodes=1, airgap=bundle)
    online = _container(f"{PREFIX}-cp1", ("control_plane", "gpu_nodes"), 22201)

    def no_port(port: int) -> bool:
        raise AssertionError(f"asked for port {port}: an air-gapped node publishes none")

    plan = lab.plan_lab(spec, [online], is_free=no_port)
    assert plan.remove == (f"{PREFIX}-cp1",)  # an online node is no air-gapped one: made again
    (node,) = plan.nodes
    assert (node.action, node.port) == ("create", 22)
    mine = lab.Container(
        f"{PREFIX}-cp1", "running", spec.image, ("control_plane", "gpu_nodes"), 22,
        address="172.30.0.3", airgap=str(bundle.resolve()),
    )  # fmt: skip
    (kept,) = lab.plan_lab(spec, [mine], is_free=no_port).nodes
    assert (kept.action, kept.address, kept.port, kept.endpoint) == ("keep", "172.30.0.3", 22, "172.30.0.3")


def test_parse_inspect_reads_an_airgapped_node_on_its_own_address() -> None:
    data = [
        {
            "Name": "/gpub-cp1",
            "State": {"Status": "running"},
            "Config": {
                "Image": "i",
                "Labels": {lab.LABEL_GROUPS: "control_plane", "io.gpubring.lab.airgap": "/b"},
            },
            "HostConfig": {"PortBindings": {}},
            "NetworkSettings": {"Networks": {"gpub-lab": {"IPAddress": "172.30.0.3"}}},
        }
    ]
    (node,) = lab.parse_inspect(data)
    assert (node.address, node.port, node.airgap) == ("172.30.0.3", 22, "/b")


def test_airgap_inventory_reaches_nodes_on_their_address_with_the_mirror_vars(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "debian-bookworm")
    spec = _spec(tmp_path, nodes=1, airgap=bundle)
    node = lab.lab_nodes(spec)[0]
    planned = [lab.PlannedNode(node, 22, "create", "172.30.0.3")]
    lab.write_inventory(
        spec,
        planned,
        {"172.30.0.3": ["ssh-ed25519 AAAA root@x"]},
        lab.declared_variables(),
        {"debian12": FACTS},
    )
    paths = lab.LabPaths(spec.inventory_dir)
    hosts = yaml.safe_load(paths.hosts.read_text())
    assert hosts["all"]["children"]["control_plane"]["hosts"][node.name] == {
        "ansible_host": "172.30.0.3",
        "ansible_port": 22,
    }
    assert paths.known_hosts.read_text() == "172.30.0.3 ssh-ed25519 AAAA\n"
    mirror = yaml.safe_load((paths.root / "group_vars" / "all" / "airgap.yml").read_text())
    assert mirror == {
        "gpubring_chart_mirror": f"http://{PREFIX}-mirror/charts",
        "gpubring_binary_mirror": f"http://{PREFIX}-mirror/files",
    }
    assert lab.read_marker(spec.inventory_dir)["airgap"] == str(bundle.resolve())  # type: ignore[index]
    # The same folder brought up online again loses the mirror variables.
    online = _spec(tmp_path, nodes=1)
    lab.write_inventory(
        online, [lab.PlannedNode(node, 22201, "create")], {}, lab.declared_variables(), {"debian12": FACTS}
    )
    assert not (paths.root / "group_vars" / "all" / "airgap.yml").exists()
    assert lab.read_marker(spec.inventory_dir)["airgap"] is None  # type: ignore[index]


def test_airgap_bundle_problems_and_kernel(tmp_path: Path) -> None:
    from gpubring.lab import airgap

    bundle = _bundle(tmp_path, "debian-bookworm")
    assert airgap.bundle_problems(_spec(tmp_path, nodes=1, airgap=bundle)) == []
    (problem,) = airgap.bundle_problems(_spec(tmp_path, nodes=1, gpu_distro="debian13", airgap=bundle))
    assert problem.startswith(
        f"--airgap {bundle}: no apt repository for debian13 (expected {bundle}/apt/debian-trixie/"
    )
    (missing,) = airgap.bundle_problems(_spec(tmp_path, nodes=1, airgap=tmp_path / "nope"))
    assert "expected a bundle folder" in missing
    assert airgap.bundle_kernel(bundle, "debian12") == "6.1.0-56-amd64"
    assert airgap.bundle_kernel(bundle, "debian13") is None


@pytest.mark.parametrize("case", ["file", "user-bundle"])
def test_lab_up_refuses_a_bundle_it_cannot_serve_before_any_container(case: str, tmp_path: Path) -> None:
    """A file, or a bundle of the user's (not one `lab up` built) without the lab's release: refused."""
    given = tmp_path / "given"
    if case == "file":
        given.write_text("x", encoding="utf-8")
        expected = f"--airgap {given}: expected a bundle folder"
    else:
        (given / "charts").mkdir(parents=True)
        expected = f"--airgap {given}: no apt repository for debian12 (expected {given}/apt/debian-bookworm/"
    args = ["up", "--prefix", PREFIX, "--inventory-dir", str(tmp_path / "lab"), "--airgap", str(given)]
    result = CliRunner().invoke(lab_command.app, args)
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert not (tmp_path / "lab").exists()
    assert not (given.is_dir() and (given / lab.LAB_BUNDLE_INVENTORY).exists())


def test_lab_builds_a_new_empty_or_its_own_bundle_and_serves_the_users_as_it_is(tmp_path: Path) -> None:
    assert lab.lab_builds_bundle(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    assert lab.lab_builds_bundle(tmp_path / "empty")
    own = _bundle(tmp_path / "own", "debian-bookworm")
    (own / lab.LAB_BUNDLE_INVENTORY).mkdir()
    assert lab.lab_builds_bundle(own)
    assert not lab.lab_builds_bundle(_bundle(tmp_path / "users", "debian-bookworm"))
    (tmp_path / "file").write_text("x", encoding="utf-8")
    assert not lab.lab_builds_bundle(tmp_path / "file")


def test_an_airgapped_lab_stays_airgapped_when_grown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`lab up` without --airgap on an air-gapped lab's folder (a node added or replaced) keeps its bundle."""
    bundle = _bundle(tmp_path, "debian-bookworm")
    inv = tmp_path / "lab"
    inv.mkdir()
    (inv / lab.MARKER).write_text(json.dumps({"prefix": PREFIX, "airgap": str(bundle)}))
    seen: list[lab.LabSpec] = []

    def fake_up(spec: lab.LabSpec, out: object) -> lab.LabPlan:
        seen.append(spec)
        return lab.LabPlan(())

    monkeypatch.setattr(lab, "up", fake_up)
    result = CliRunner().invoke(lab_command.app, ["up", "--inventory-dir", str(inv), "--nodes", "2"])
    assert result.exit_code == 0, result.output
    assert seen[0].airgap == bundle


def test_lab_status_says_airgapped_and_each_nodes_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = tmp_path / "lab"
    inv.mkdir()
    (inv / lab.MARKER).write_text(json.dumps({"prefix": PREFIX, "airgap": "/srv/bundle"}))
    row = lab.LabStatus(f"{PREFIX}-cp1", "control_plane", "running", 22, True, "172.30.0.3")
    monkeypatch.setattr(lab, "status", lambda prefix, inventory_dir: [row])
    monkeypatch.setattr(lab, "mirror_state", lambda prefix: f"{prefix}-mirror (running)")
    result = CliRunner().invoke(lab_command.app, ["status", "--inventory-dir", str(inv)], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"air-gapped: {PREFIX}-mirror (running) serves /srv/bundle" in text, result.output
    assert "172.30.0.3:22" in text and "answers" in text, result.output
