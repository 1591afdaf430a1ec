"""The inventory model: the sample validates, every bad-input case stops with exit code 2 and one
line per problem naming the file, the key path and what was expected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpubring import versions
from gpubring.app import app
from gpubring.inventory import InventoryError, Problem, expand_host_range, load_inventory
from gpubring.validation import crosshost, specs

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py

HOSTS_ONE_CP = """\
all:
  children:
    control_plane:
      hosts:
        cp-1: {ansible_host: 192.0.2.11}
    gpu_nodes:
      hosts:
        gpu-1: {ansible_host: 198.51.100.21}
"""
HOSTS_TWO_CP = HOSTS_ONE_CP.replace(
    "        cp-1: {ansible_host: 192.0.2.11}\n",
    "        cp-1: {ansible_host: 192.0.2.11}\n        cp-2: {ansible_host: 192.0.2.12}\n",
)


def run(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_bad_input(inventory: Path, *lines: str) -> None:
    """`gpubring plan` and `gpubring versions` both exit 2 and print each expected error line."""
    for command in ("plan", "versions"):
        result = run(command, inventory)
        assert result.exit_code == 2, (command, result.output)
        assert "Traceback" not in result.output
        assert isinstance(result.exception, SystemExit)
        errors = result.stderr.splitlines()
        for line in lines:
            assert f"error: {line}" in errors, (command, errors)
        assert all(e.startswith("error: ") for e in errors), errors


def problems_of(root: Path) -> list[str]:
    with pytest.raises(InventoryError) as info:
        load_inventory(root)
    return [str(p) for p in info.value.problems]


# The sample ---------------------------------------------------------------------------------------


def test_sample_inventory_validates_clean(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    assert inv.root == sample_inventory
    assert inv.hosts_file == sample_inventory / "hosts.yml"
    assert inv.groups["control_plane"] == ("cp-1", "cp-2", "cp-3")
    assert inv.groups["gpu_nodes"] == ("gpu-1", "gpu-2", "gpu-3", "gpu-4")
    assert inv.groups["cpu_nodes"] == ("cpu-1",)
    assert len(inv.groups["all"]) == 8
    gpu = inv.hosts["gpu-2"]
    assert (gpu.address, gpu.port, gpu.user, gpu.groups) == (
        "198.51.100.22",
        22,
        "ops",
        ("gpu_nodes", "gpu_train"),
    )
    assert (inv.groups["gpu_train"], inv.groups["gpu_infer"], inv.groups["gpu_dev"]) == (
        ("gpu-1", "gpu-2"),
        ("gpu-3",),
        ("gpu-4",),
    )
    assert inv.settings["gpubring_cluster_name"] == "prod-gpu"
    assert inv.phases == ("preflight", "host", "cluster", "platform", "verify")
    assert inv.version_problems == ()
    assert all(r.ok for r in inv.rule_results)


def test_sample_sets_every_declared_setting_in_group_vars_all(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    declared = {k for k in specs.load_specs().keys if k.startswith("gpubring_")}
    in_sample: set[str] = set()
    for host in inv.hosts.values():
        for layer in host.layers:
            if layer.file.startswith("group_vars/all/"):
                in_sample |= set(layer.vars)
    assert declared <= in_sample, sorted(declared - in_sample)


def test_sample_addresses_are_documentation_addresses(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    prefixes = ("192.0.2.", "198.51.100.", "203.0.113.")
    assert all(h.address.startswith(prefixes) for h in inv.hosts.values())


def test_inventory_file_path_is_accepted(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory / "hosts.yml")
    assert inv.root == sample_inventory
    assert len(inv.hosts) == 8


def test_hosts_yaml_extension_is_accepted(make_inventory: MakeInventory, sample_inventory: Path) -> None:
    text = (sample_inventory / "hosts.yml").read_text()
    root = make_inventory({"hosts.yml": None, "hosts.yaml": text})
    assert load_inventory(root).hosts_file.name == "hosts.yaml"


# Unknown keys, types and values ---------------------------------------------------------------------


def test_unknown_gpubring_key_has_did_you_mean(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/typo.yml": "gpubring_cnii: cilium\n"})
    assert_bad_input(
        root,
        "group_vars/all/typo.yml: gpubring_cnii: unknown key, expected one declared in settings.yml; "
        "did you mean gpubring_cni?",
    )


def test_unknown_role_key_names_the_role_spec(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/gpu_nodes/gpu.yml": "nvidia_driver_no_such_input_xyz: 1\n"})
    result = run("plan", root)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: group_vars/gpu_nodes/gpu.yml: nvidia_driver_no_such_input_xyz: unknown key, expected one "
        "declared in roles/nvidia_driver/meta/argument_specs.yml"
    )


def test_free_keys_pass(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/mine.yml": "ansible_become_timeout: 30\nmy_site_label: lab-a\n"})
    assert load_inventory(root).hosts["cp-1"].vars["my_site_label"] == "lab-a"


def test_wrong_type_bool(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/operations.yml": "gpubring_reboot_allowed: maybe\n"})
    assert_bad_input(
        root,
        "group_vars/all/operations.yml: gpubring_reboot_allowed: expected a boolean (true or false), "
        "got 'maybe'",
    )


def test_wrong_value_choices(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/cluster.yml": "gpubring_cni: weave\n"})
    assert_bad_input(
        root, "group_vars/all/cluster.yml: gpubring_cni: expected one of calico, cilium, flannel, got 'weave'"
    )


def test_wrong_list_elements(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/operations.yml": "gpubring_phases: [preflight, hosts, {a: 1}]\n"})
    assert_bad_input(
        root,
        "group_vars/all/operations.yml: gpubring_phases[1]: expected one of preflight, host, cluster, "
        "platform, verify, got 'hosts'",
        "group_vars/all/operations.yml: gpubring_phases[2]: expected a string, got {'a': 1}",
    )


def test_wrong_type_list(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/operations.yml": "gpubring_phases: preflight\n"})
    assert_bad_input(root, "group_vars/all/operations.yml: gpubring_phases: expected a list, got 'preflight'")


def test_templated_values_are_not_type_checked(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {"group_vars/all/operations.yml": "gpubring_reboot_allowed: \"{{ lookup('env', 'X') }}\"\n"}
    )
    assert load_inventory(root).settings["gpubring_reboot_allowed"].startswith("{{")


def test_cluster_wide_setting_outside_group_vars_all(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/gpu_nodes/gpu.yml": "gpubring_cni: cilium\n"})
    assert_bad_input(
        root,
        "group_vars/gpu_nodes/gpu.yml: gpubring_cni: expected in group_vars/all: gpubring_* settings are "
        "cluster-wide",
    )


def test_inline_vars_in_hosts_yml_are_validated_with_their_path(make_inventory: MakeInventory) -> None:
    text = HOSTS_ONE_CP.replace(
        "gpu-1: {ansible_host: 198.51.100.21}", "gpu-1: {ansible_host: 198.51.100.21, gpubring_serail: 1}"
    )
    root = make_inventory({"hosts.yml": text})
    assert_bad_input(
        root,
        "hosts.yml: all.children.gpu_nodes.hosts.gpu-1.gpubring_serail: unknown key, expected one declared "
        "in settings.yml; did you mean gpubring_serial?",
    )


def test_unknown_group_key_in_hosts_yml(make_inventory: MakeInventory) -> None:
    root = make_inventory({"hosts.yml": HOSTS_ONE_CP + "  host:\n"})
    assert_bad_input(root, "hosts.yml: all.host: expected one of hosts, vars, children; did you mean hosts?")


def test_group_vars_for_a_group_that_does_not_exist(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/gpu_node.yml": "rdma_x: 1\n"})
    assert_bad_input(
        root,
        "group_vars/gpu_node.yml: gpu_node: expected the name of a group in hosts.yml; there is no group "
        "gpu_node; did you mean gpu_nodes?",
    )


def test_bad_ansible_port(make_inventory: MakeInventory) -> None:
    root = make_inventory({"host_vars/gpu-1.yml": "ansible_port: ssh\n"})
    assert_bad_input(root, "host_vars/gpu-1.yml: ansible_port: expected a port number 1-65535, got ssh")


def test_version_override_unknown_path_and_number(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {
            "group_vars/all/versions.yml": "gpubring_versions:\n"
            "  kubernetes: {verison: '1.34.3'}\n"
            "  helm: {version: 3.2}\n"
        }
    )
    assert_bad_input(
        root,
        "group_vars/all/versions.yml: gpubring_versions.kubernetes.verison: unknown version pin, expected "
        "one of version; did you mean version?",
        "group_vars/all/versions.yml: gpubring_versions.helm.version: expected a quoted version string "
        f'such as "{versions.load_pinned()["helm"]["version"]}" (YAML read 3.2 as a number)',
    )


def test_version_override_unknown_component(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {"group_vars/all/versions.yml": "gpubring_versions:\n  kubernets: {version: '1.34.3'}\n"}
    )
    result = run("versions", root)
    assert result.exit_code == 2
    assert "gpubring_versions.kubernets: unknown version pin" in result.stderr
    assert "did you mean kubernetes?" in result.stderr


# Groups and hosts -----------------------------------------------------------------------------------


def test_missing_control_plane(make_inventory: MakeInventory) -> None:
    text = "all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-1: {ansible_host: 198.51.100.21}\n"
    root = make_inventory({"hosts.yml": text})
    assert_bad_input(
        root,
        "hosts.yml: all.children.control_plane: expected a group control_plane with 1 or an odd number of "
        "hosts; there is none",
    )


def test_missing_gpu_nodes(make_inventory: MakeInventory) -> None:
    text = "all:\n  children:\n    control_plane:\n      hosts:\n        cp-1: {ansible_host: 192.0.2.11}\n"
    root = make_inventory({"hosts.yml": text})
    assert_bad_input(
        root,
        "hosts.yml: all.children.gpu_nodes: expected a group gpu_nodes with at least one host; there is none",
    )


def test_empty_gpu_nodes_group(make_inventory: MakeInventory) -> None:
    text = HOSTS_ONE_CP.replace("      hosts:\n        gpu-1: {ansible_host: 198.51.100.21}\n", "")
    root = make_inventory({"hosts.yml": text + "    cpu_nodes:\n      hosts:\n        cpu-1:\n"})
    assert_bad_input(
        root,
        "hosts.yml: all.children.gpu_nodes: expected a group gpu_nodes with at least one host; "
        "it has no hosts",
    )


def test_even_number_of_control_planes(make_inventory: MakeInventory) -> None:
    root = make_inventory({"hosts.yml": HOSTS_TWO_CP})
    assert_bad_input(
        root,
        "hosts.yml: all.children.control_plane.hosts: expected 1 or an odd number of control planes "
        "(etcd needs a majority); found 2: cp-1, cp-2",
    )


def test_two_hosts_with_one_address(make_inventory: MakeInventory) -> None:
    text = (
        (make_inventory() / "hosts.yml")
        .read_text()
        .replace(
            "gpu-2:\n              ansible_host: 198.51.100.22",
            "gpu-2:\n              ansible_host: 198.51.100.21",
        )
    )
    root = make_inventory({"hosts.yml": text})
    assert_bad_input(
        root,
        "hosts.yml: all.children.gpu_nodes.children.gpu_train.hosts.gpu-2.ansible_host: "
        "expected an address no other host uses; "
        "198.51.100.21 port 22 is also gpu-1's",
    )


def test_one_address_on_different_ports_is_fine(make_inventory: MakeInventory) -> None:
    text = """\
all:
  vars: {ansible_host: 127.0.0.1}
  children:
    control_plane: {hosts: {cp-1: {ansible_port: 2201}}}
    gpu_nodes: {hosts: {gpu-1: {ansible_port: 2202}, gpu-2: {ansible_port: 2203}}}
"""
    inv = load_inventory(make_inventory({"hosts.yml": text}))
    assert [(h.address, h.port) for h in inv.hosts.values()] == [
        ("127.0.0.1", 2201),
        ("127.0.0.1", 2202),
        ("127.0.0.1", 2203),
    ]


def test_same_address_same_port_from_host_vars(make_inventory: MakeInventory) -> None:
    root = make_inventory({"host_vars/cpu-1.yml": "ansible_host: 192.0.2.11\n"})
    assert_bad_input(
        root,
        "host_vars/cpu-1.yml: ansible_host: expected an address no other host uses; 192.0.2.11 port 22 "
        "is also cp-1's",
    )


def test_host_in_gpu_nodes_and_cpu_nodes(make_inventory: MakeInventory) -> None:
    text = (make_inventory() / "hosts.yml").read_text() + "        gpu-4:\n"
    root = make_inventory({"hosts.yml": text})
    assert_bad_input(
        root,
        "hosts.yml: all.children.cpu_nodes.hosts.gpu-4: expected a host in only one of gpu_nodes and "
        "cpu_nodes; it is in both",
    )


# Files: missing, unreadable, invalid, empty ---------------------------------------------------------


def test_missing_inventory_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert_bad_input(
        missing,
        f"{missing}: inventory: expected an inventory folder (with hosts.yml) or file; it does not exist",
    )


def test_folder_without_hosts_yml(tmp_path: Path) -> None:
    assert_bad_input(
        tmp_path,
        f"{tmp_path}: hosts.yml: expected hosts.yml (or hosts.yaml) in the inventory folder; none found",
    )


def test_unreadable_hosts_file_is_a_folder(make_inventory: MakeInventory) -> None:
    root = make_inventory({"hosts.yml": None})
    (root / "hosts.yml").mkdir()
    assert_bad_input(root, "hosts.yml: file: expected a file, found a folder")


def test_unreadable_hosts_file_not_utf8(make_inventory: MakeInventory) -> None:
    root = make_inventory()
    (root / "hosts.yml").write_bytes(b"all:\n  hosts:\n    \xff\xfe: {}\n")
    assert_bad_input(root, "hosts.yml: file: expected UTF-8 text, the file cannot be decoded")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_hosts_file_permissions(make_inventory: MakeInventory) -> None:
    root = make_inventory()
    (root / "hosts.yml").chmod(0)
    assert_bad_input(root, "hosts.yml: file: expected a readable file (Permission denied)")


def test_invalid_yaml_has_line_number(make_inventory: MakeInventory) -> None:
    root = make_inventory({"hosts.yml": "all:\n  children:\n    gpu_nodes: hosts: x\n"})
    for command in ("plan", "versions"):
        result = run(command, root)
        assert result.exit_code == 2
        # The column and wording differ between libyaml and pure-Python PyYAML; the line does not.
        assert result.stderr.startswith("error: hosts.yml: line 3, column "), result.stderr
        assert "expected valid YAML (mapping values are not allowed" in result.stderr


def test_invalid_yaml_in_group_vars_has_line_number(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {"group_vars/all/cluster.yml": "gpubring_cni: calico\ngpubring_pod_cidr: [10.0.0.0/8\n"}
    )
    result = run("plan", root)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: group_vars/all/cluster.yml: line 3, column 1: expected valid YAML"
    )


def test_empty_inventory_file(make_inventory: MakeInventory) -> None:
    root = make_inventory({"hosts.yml": "---\n# nothing yet\n"})
    assert_bad_input(root, "hosts.yml: all: expected an inventory with groups and hosts; the file is empty")


def test_inventory_without_hosts(make_inventory: MakeInventory) -> None:
    root = make_inventory({"hosts.yml": "all:\n  children:\n    control_plane:\n    gpu_nodes:\n"})
    assert_bad_input(root, "hosts.yml: all: expected at least one host; the inventory has none")


def test_all_problems_are_collected(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {
            "hosts.yml": HOSTS_TWO_CP,
            "group_vars/all/cluster.yml": "gpubring_cni: weave\ngpubring_cluster_nmae: x\n",
            "group_vars/all/operations.yml": "gpubring_reboot_allowed: 3\n",
        }
    )
    found = problems_of(root)
    assert len(found) == 4, found
    assert {p.split(":")[0] for p in found} == {
        "hosts.yml",
        "group_vars/all/cluster.yml",
        "group_vars/all/operations.yml",
    }


# Variable precedence and the model --------------------------------------------------------------------


def test_variable_precedence_follows_ansible(make_inventory: MakeInventory) -> None:
    text = """\
all:
  vars: {my_level: hosts-all, gpubring_cluster_name: from-hosts-yml}
  children:
    control_plane:
      hosts:
        cp-1: {ansible_host: 192.0.2.11}
    gpu_nodes:
      vars: {my_level: hosts-gpu}
      hosts:
        gpu-1: {ansible_host: 198.51.100.21, my_level: hosts-host}
        gpu-2: {ansible_host: 198.51.100.22}
"""
    root = make_inventory(
        {
            "hosts.yml": text,
            "group_vars/all/cluster.yml": "gpubring_cluster_name: from-group-vars\n",
            "group_vars/all/level.yml": "my_level: group-vars-all\n",
            "group_vars/gpu_nodes/level.yml": "my_level: group-vars-gpu\n",
            "host_vars/gpu-2/level.yml": "my_level: host-vars\n",
        }
    )
    inv = load_inventory(root)
    assert inv.settings["gpubring_cluster_name"] == "from-group-vars"
    assert inv.hosts["cp-1"].vars["my_level"] == "group-vars-all"
    assert inv.hosts["gpu-1"].vars["my_level"] == "hosts-host"
    assert inv.hosts["gpu-2"].vars["my_level"] == "host-vars"
    assert inv.origin("gpu-2", "my_level") == ("host_vars/gpu-2/level.yml", "my_level")
    assert inv.origin("gpu-1", "my_level") == ("hosts.yml", "all.children.gpu_nodes.hosts.gpu-1.my_level")


def test_settings_default_from_settings_yml(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/all/cluster.yml": None, "group_vars/all/operations.yml": None})
    inv = load_inventory(root)
    assert inv.settings["gpubring_cni"] == "calico"
    assert inv.settings["gpubring_reboot_allowed"] is False


def test_children_groups_and_host_ranges(make_inventory: MakeInventory) -> None:
    text = """\
control_plane:
  hosts:
    cp-[1:3]:
gpu_nodes:
  children:
    h100:
      hosts:
        gpu-[01:02]:
    a100:
      hosts:
        gpu-[a:b]:2222:
"""
    inv = load_inventory(make_inventory({"hosts.yml": text}))
    assert inv.groups["gpu_nodes"] == ("gpu-01", "gpu-02", "gpu-a", "gpu-b")
    assert inv.groups["control_plane"] == ("cp-1", "cp-2", "cp-3")
    assert inv.hosts["gpu-a"].port == 2222
    assert inv.hosts["gpu-a"].groups == ("gpu_nodes", "a100")
    assert inv.hosts["gpu-01"].vars["ansible_user"] == "ops"


def test_expand_host_range() -> None:
    assert expand_host_range("n[0:10:5]") == ["n0", "n5", "n10"]
    assert expand_host_range("r[1:2]-g[01:02]") == ["r1-g01", "r1-g02", "r2-g01", "r2-g02"]
    with pytest.raises(ValueError, match="equal length"):
        expand_host_range("n[01:100]")


def test_phases_follow_gpubring_phases(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {
            "group_vars/all/operations.yml": "gpubring_phases: [verify, preflight, host]\n"
            "gpubring_phases_skipped_reason: containers cannot run a kubelet\n"
            "gpubring_phases_check_only: [platform, host, cluster]\n"
        }
    )
    inv = load_inventory(root)
    assert inv.phases == ("preflight", "host", "verify")
    assert inv.phases_skipped_reason == "containers cannot run a kubelet"
    # In phase order, and without the phases that run for real anyway.
    assert inv.phases_check_only == ("cluster", "platform")


# The extension point for cross-field checks -------------------------------------------------------------


def test_registered_validator_problems_stop_the_load(make_inventory: MakeInventory) -> None:
    def no_cp_named_cp_2(inv: object) -> list[Problem]:
        assert hasattr(inv, "hosts")
        return [Problem("hosts.yml", "all.children.control_plane.hosts.cp-2", "expected another name")]

    crosshost.register_validator(no_cp_named_cp_2)
    try:
        assert_bad_input(
            make_inventory(), "hosts.yml: all.children.control_plane.hosts.cp-2: expected another name"
        )
    finally:
        crosshost.VALIDATORS.remove(no_cp_named_cp_2)
    assert load_inventory(make_inventory()).hosts


def test_problem_text() -> None:
    assert (
        str(Problem("group_vars/all/x.yml", "a.b[0]", "expected a string"))
        == "group_vars/all/x.yml: a.b[0]: expected a string"
    )


# The spec table: settings.yml, role argument specs and defaults, read at run time -----------------------

ROLE_SPEC = """\
argument_specs:
  main:
    options:
      rdma_stack:
        type: str
        choices: [inbox, doca]
      rdma_mtu:
        type: int
      rdma_interfaces:
        type: list
        elements: dict
        options:
          name: {type: str, required: true}
          ports: {type: list, elements: int}
      rdma_tuning:
        type: dict
        options:
          ring_size: {type: int}
"""


def test_spec_table_reads_roles_dynamically(tmp_path: Path) -> None:
    (tmp_path / "settings.yml").write_text("options:\n  gpubring_cni: {type: str, default: calico}\n")
    (tmp_path / "versions.yml").write_text(
        "gpubring_versions: {}\ngpubring_version_rules:\n"
        "  - {id: r, when: {rdma_sriov_enabled: true}, require: [{path: x.y, min: '1'}]}\n"
    )
    role = tmp_path / "roles" / "rdma"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(ROLE_SPEC)
    (role / "defaults" / "main.yml").write_text("rdma_stack: inbox\nrdma_extra_default: 1\n")
    table = specs.load_specs(tmp_path)
    assert table.roles == ("rdma",)
    assert table.keys["rdma_stack"].choices == ("inbox", "doca")
    assert table.keys["rdma_sriov_enabled"].type == "bool"  # known through the version rule
    assert table.defaults()["rdma_stack"] == "inbox"
    assert specs.check_key(table, "rdma_extra_default", 5, "rdma_extra_default") == []

    def check(key: str, value: object) -> list[tuple[str, str]]:
        return specs.check_key(table, key, value, key)

    assert check("rdma_stak", "doca") == [
        (
            "rdma_stak",
            "unknown key, expected one declared in roles/rdma/meta/argument_specs.yml; "
            "did you mean rdma_stack?",
        )
    ]
    assert check("rdma_stack", "mofed") == [("rdma_stack", "expected one of inbox, doca, got 'mofed'")]
    assert check("rdma_mtu", "9000") == []
    assert check("rdma_mtu", 9000.5) == [("rdma_mtu", "expected an integer, got 9000.5")]
    assert check("rdma_sriov_enabled", "sure") == [
        ("rdma_sriov_enabled", "expected a boolean (true or false), got 'sure'")
    ]
    assert check("rdma_interfaces", [{"name": "ib0", "ports": [1, "x"]}, {"nmae": "ib1"}]) == [
        ("rdma_interfaces[0].ports[1]", "expected an integer, got 'x'"),
        ("rdma_interfaces[1].nmae", "unknown key, expected one of name, ports; did you mean name?"),
        ("rdma_interfaces[1].name", "expected this required key, it is missing"),
    ]
    assert check("rdma_tuning", {"ring_size": "big"}) == [
        ("rdma_tuning.ring_size", "expected an integer, got 'big'")
    ]
    assert check("gpubring_cnii", "x")[0][1].endswith("did you mean gpubring_cni?")
    assert check("rdmaish_key", 1) == []
    assert check("ansible_user", ["anything"]) == []


def test_broken_role_spec_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "settings.yml").write_text("options: {}\n")
    (tmp_path / "versions.yml").write_text("gpubring_versions: {}\n")
    (tmp_path / "roles" / "x" / "meta").mkdir(parents=True)
    (tmp_path / "roles" / "x" / "meta" / "argument_specs.yml").write_text("argument_specs:\n  main: [\n")
    table = specs.load_specs(tmp_path)
    assert [p.file for p in table.problems] == ["roles/x/meta/argument_specs.yml"]
    assert table.problems[0].key.startswith("line ")


def test_vault_values_and_vault_files_are_left_to_ansible(make_inventory: MakeInventory) -> None:
    vaulted = "!vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6231623162316231\n"
    root = make_inventory(
        {
            "group_vars/all/secret.yml": f"gpubring_registry_mirror: {vaulted}",
            "group_vars/all/vault.yml": "$ANSIBLE_VAULT;1.1;AES256\n3132333435363738\n",
        }
    )
    inv = load_inventory(root)
    assert inv.settings["gpubring_registry_mirror"].startswith("$ANSIBLE_VAULT;1.1;AES256")


def test_misspelt_required_group_is_pointed_out(make_inventory: MakeInventory) -> None:
    root = make_inventory({"hosts.yml": HOSTS_ONE_CP.replace("gpu_nodes:", "gpu_node:")})
    assert_bad_input(
        root,
        "hosts.yml: all.children.gpu_nodes: expected a group gpu_nodes with at least one host; there is none "
        "(is gpu_node a typo of gpu_nodes?)",
    )


def test_group_vars_of_an_absent_optional_group_are_allowed(make_inventory: MakeInventory) -> None:
    root = make_inventory({"hosts.yml": HOSTS_ONE_CP, "group_vars/cpu_nodes.yml": "my_cpu_label: x\n"})
    assert "cpu_nodes" not in load_inventory(root).groups


def test_model_matches_ansible_inventory(make_inventory: MakeInventory) -> None:
    """The merged variables and groups are the ones Ansible itself computes for the same folder."""
    hosts = """\
all:
  vars: {my_level: hosts-all, my_only_in_hosts_all: 1}
  children:
    control_plane:
      vars: {my_level: hosts-cp}
      hosts:
        cp-[1:3]:
    gpu_nodes:
      vars: {my_level: hosts-gpu}
      children:
        h100:
          vars: {my_level: hosts-h100, my_h100: true}
          hosts:
            gpu-[01:02]: {my_level: hosts-host}
        a100:
          hosts:
            gpu-a:2222:
    cpu_nodes:
      hosts:
        cpu-1: {ansible_host: 203.0.113.31}
"""
    root = make_inventory(
        {
            "hosts.yml": hosts,
            "group_vars/all/level.yml": "my_level: group-vars-all\n",
            "group_vars/gpu_nodes/level.yml": "my_level: group-vars-gpu\n",
            "group_vars/h100.yml": "my_level: group-vars-h100\n",
            "host_vars/gpu-01.yml": "my_level: host-vars\n",
        }
    )
    inv = load_inventory(root)
    binary = Path(sys.executable).parent / "ansible-inventory"
    # Plain Ansible, whatever an in-process render (gpubring plan) put into this process's environment:
    # the model holds the inventory's own variables, not the vars plugin's defaults.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    listing = subprocess.run(
        [str(binary), "-i", str(root), "--list"],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
        env=env,
    )
    data = json.loads(listing.stdout)
    hostvars = data["_meta"]["hostvars"]
    assert set(hostvars) == set(inv.hosts)
    for name, host in inv.hosts.items():
        assert dict(host.vars) == hostvars[name], name
    assert inv.hosts["gpu-01"].vars["my_level"] == "host-vars"
    assert inv.hosts["cp-1"].vars["my_level"] == "group-vars-all"  # group_vars/all beats hosts.yml groups
    for group in ("control_plane", "h100", "a100", "cpu_nodes"):
        assert set(inv.groups[group]) == set(data[group]["hosts"]), group


def test_group_vars_in_two_places_is_reported(make_inventory: MakeInventory) -> None:
    root = make_inventory({"group_vars/gpu_nodes.yml": "my_level: x\n"})
    assert_bad_input(
        root,
        "group_vars/gpu_nodes.yml: gpu_nodes: expected one place for the group vars of gpu_nodes; Ansible "
        "reads only group_vars/gpu_nodes and ignores this",
    )
