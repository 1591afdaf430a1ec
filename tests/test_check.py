"""`gpubring check` against real OpenSSH servers (tests/sshd.py) on 127.0.0.1.

Two sshd run for the whole module, one per inventory group (two hosts may share 127.0.0.1 only with
different ports). Each test writes its own inventory and known_hosts file, so the host key state is
the test's: known, unknown, changed, hashed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from gpubring import probe
from gpubring.app import app
from gpubring.inventory import load_inventory
from sshd import KeyPair, Sshd, free_port, require_sshd

runner = CliRunner()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KeyPair]:
    require_sshd()
    folder = tmp_path_factory.mktemp("keys")
    return {
        "good": KeyPair.generate(folder / "id_good"),
        "wrong": KeyPair.generate(folder / "id_wrong"),
        "other_host": KeyPair.generate(folder / "other_host_key"),
    }


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, KeyPair]) -> Iterator[list[Sshd]]:
    folder = tmp_path_factory.mktemp("sshd")
    started: list[Sshd] = []
    try:
        for name in ("a", "b"):
            started.append(Sshd.start(folder / name, authorized=[keys["good"].public_line]))
        yield started
    finally:
        for server in started:
            server.stop()


def write_inventory(root: Path, ports: dict[str, int], key: Path, known_hosts: Path) -> Path:
    """hosts.yml with cp1 (control_plane) and gpu1 (gpu_nodes) on 127.0.0.1 at the given ports."""
    root.mkdir(parents=True, exist_ok=True)
    hosts = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key),
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts} -o IdentitiesOnly=yes",
            },
            "children": {
                "control_plane": {
                    "hosts": {"cp1": {"ansible_host": "127.0.0.1", "ansible_port": ports["cp1"]}}
                },
                "gpu_nodes": {
                    "hosts": {"gpu1": {"ansible_host": "127.0.0.1", "ansible_port": ports["gpu1"]}}
                },
            },
        }
    }
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    return root


class Lab:
    """One test's inventory over the module's servers, with its own known_hosts file."""

    def __init__(self, tmp_path: Path, servers: list[Sshd], keys: dict[str, KeyPair]) -> None:
        self.tmp = tmp_path
        self.servers = servers
        self.keys = keys
        self.known_hosts = tmp_path / "ssh" / "known_hosts"

    def trust(self) -> None:
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        self.known_hosts.write_text("".join(s.known_hosts_line() + "\n" for s in self.servers))

    def inventory(self, *, gpu1_port: int | None = None, key: str = "good") -> Path:
        ports = {"cp1": self.servers[0].port, "gpu1": gpu1_port or self.servers[1].port}
        return write_inventory(self.tmp / "inventory", ports, self.keys[key].private, self.known_hosts)

    def check(self, inventory: Path, *args: str) -> tuple[Result, dict[str, Any]]:
        report = self.tmp / "check.json"
        argv = ["check", str(inventory), "--json", str(report), "--timeout", "5", *args]
        result = runner.invoke(app, argv, env={"COLUMNS": "250"})
        data = json.loads(report.read_text()) if report.exists() else {}
        report.unlink(missing_ok=True)
        return result, data


@pytest.fixture
def lab(tmp_path: Path, servers: list[Sshd], keys: dict[str, KeyPair]) -> Lab:
    return Lab(tmp_path, servers, keys)


def host(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(h for h in data["hosts"] if h["name"] == name)


def os_release() -> dict[str, str]:
    fields = {}
    for line in Path("/etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        fields[key] = value.strip('"')
    return fields


def test_all_hosts_ready(lab: Lab) -> None:
    lab.trust()
    result, data = lab.check(lab.inventory())
    assert result.exit_code == 0, result.output
    assert "all hosts ready" in result.output
    release = os_release()
    assert [h["name"] for h in data["hosts"]] == ["cp1", "gpu1"]
    for entry, server in zip(data["hosts"], lab.servers, strict=True):
        assert entry["reachable"] is True
        assert entry["authenticated"] is True
        assert entry["sudo"] == "root"
        assert entry["host_key"] == "known"
        assert entry["host_key_fingerprint"] == server.host_key.fingerprint()
        assert entry["port"] == server.port
        assert entry["os"] == {
            "id": release["ID"],
            "version_id": release.get("VERSION_ID"),
            "pretty_name": release["PRETTY_NAME"],
        }
        assert entry["kernel"] == os.uname().release
        assert entry["problem"] is None
        assert entry["ok"] is True
    assert release["PRETTY_NAME"] in result.output


def test_unreachable_port_has_its_own_message_and_exit_4(lab: Lab) -> None:
    lab.trust()
    closed = free_port()
    result, data = lab.check(lab.inventory(gpu1_port=closed))
    assert result.exit_code == 4, result.output
    assert f"127.0.0.1:{closed}: connection refused" in result.output
    gpu1 = host(data, "gpu1")
    assert gpu1["reachable"] is False
    assert gpu1["authenticated"] is None
    assert gpu1["problem"]["kind"] == "unreachable"
    assert host(data, "cp1")["ok"] is True
    assert data["ok"] is False
    assert data["summary"] == {"hosts": 2, "ok": 1}


def test_wrong_key_is_an_authentication_failure(lab: Lab) -> None:
    lab.trust()
    result, data = lab.check(lab.inventory(key="wrong"))
    assert result.exit_code == 4, result.output
    wrong = lab.keys["wrong"]
    for name in ("cp1", "gpu1"):
        entry = host(data, name)
        assert entry["reachable"] is True
        assert entry["host_key"] == "known"
        assert entry["authenticated"] is False
        assert entry["sudo"] is None
        assert entry["problem"]["kind"] == "auth"
        assert "user 'root'" in entry["problem"]["message"]
        assert str(wrong.private) in entry["problem"]["message"]
        assert wrong.fingerprint() in entry["problem"]["message"]
    assert "authentication failed for user 'root'" in result.output


def test_missing_key_file_is_named(lab: Lab) -> None:
    lab.trust()
    inventory = lab.inventory()
    lab.keys["good"].private.rename(lab.tmp / "moved")
    try:
        result, data = lab.check(inventory)
    finally:
        (lab.tmp / "moved").rename(lab.keys["good"].private)
    assert result.exit_code == 4
    assert host(data, "cp1")["problem"]["kind"] == "key_file"
    assert f"key file {lab.keys['good'].private}" in result.output


def test_unknown_host_key_refused_then_accepted(lab: Lab) -> None:
    inventory = lab.inventory()
    result, data = lab.check(inventory)
    assert result.exit_code == 4, result.output
    for entry, server in zip(data["hosts"], lab.servers, strict=True):
        assert entry["host_key"] == "unknown"
        assert entry["authenticated"] is None
        assert entry["problem"]["kind"] == "unknown_host_key"
        assert server.host_key.fingerprint() in entry["problem"]["message"]
    assert "--accept-new-host-keys" in result.output
    assert not lab.known_hosts.exists()

    result, data = lab.check(inventory, "--accept-new-host-keys")
    assert result.exit_code == 0, result.output
    assert [h["host_key"] for h in data["hosts"]] == ["accepted", "accepted"]
    recorded = lab.known_hosts.read_text().splitlines()
    assert sorted(recorded) == sorted(s.known_hosts_line() for s in lab.servers)
    assert lab.known_hosts.stat().st_mode & 0o077 == 0

    result, data = lab.check(inventory)
    assert result.exit_code == 0, result.output
    assert [h["host_key"] for h in data["hosts"]] == ["known", "known"]
    assert lab.known_hosts.read_text().splitlines() == recorded


def test_changed_host_key_is_refused_even_with_accept_new(lab: Lab) -> None:
    lab.trust()
    server = lab.servers[1]
    other = lab.keys["other_host"]
    lines = lab.known_hosts.read_text().splitlines()
    lines[1] = f"{server.known_hosts_name} {other.key_type} {other.blob_b64}"
    lab.known_hosts.write_text("\n".join(lines) + "\n")
    before = lab.known_hosts.read_text()
    for extra in ([], ["--accept-new-host-keys"]):
        result, data = lab.check(lab.inventory(), *extra)
        assert result.exit_code == 4, result.output
        gpu1 = host(data, "gpu1")
        assert gpu1["host_key"] == "changed"
        assert gpu1["authenticated"] is None
        assert gpu1["problem"]["kind"] == "changed_host_key"
        message = gpu1["problem"]["message"]
        assert f"HOST KEY CHANGED for {server.known_hosts_name}" in message
        assert server.host_key.fingerprint() in message
        assert other.fingerprint() in message
        assert f"{lab.known_hosts}:2" in message
        assert host(data, "cp1")["ok"] is True
        assert "HOST KEY CHANGED" in result.output
    assert lab.known_hosts.read_text() == before


def test_revoked_host_key_is_refused(lab: Lab) -> None:
    lab.trust()
    server = lab.servers[1]
    with lab.known_hosts.open("a") as handle:
        handle.write(f"@revoked * {server.host_key.key_type} {server.host_key.blob_b64}\n")
    result, data = lab.check(lab.inventory(), "--accept-new-host-keys")
    assert result.exit_code == 4, result.output
    gpu1 = host(data, "gpu1")
    assert (gpu1["host_key"], gpu1["problem"]["kind"]) == ("revoked", "revoked_host_key")
    assert f"marked @revoked at {lab.known_hosts}:3" in gpu1["problem"]["message"]
    assert host(data, "cp1")["ok"] is True


def test_hashed_known_hosts_are_honoured(lab: Lab) -> None:
    lab.trust()
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(lab.known_hosts)], check=True, capture_output=True)
    assert all(line.startswith("|1|") for line in lab.known_hosts.read_text().splitlines())
    result, data = lab.check(lab.inventory())
    assert result.exit_code == 0, result.output
    assert [h["host_key"] for h in data["hosts"]] == ["known", "known"]


def test_known_key_of_another_type_is_negotiated(tmp_path: Path, keys: dict[str, KeyPair]) -> None:
    """A server with ed25519 and RSA host keys, known_hosts holding only the RSA one: OpenSSH asks for
    the known type first, so must we, or the host would look changed."""
    with Sshd.start(tmp_path / "sshd", [keys["good"].public_line], host_key_types=("ed25519", "rsa")) as s:
        rsa = s.host_keys[1]
        known = tmp_path / "known_hosts"
        known.write_text(f"{s.known_hosts_name} {rsa.key_type} {rsa.blob_b64}\n")
        ports = {"cp1": s.port, "gpu1": free_port()}  # gpu1 is not probed
        inventory = write_inventory(tmp_path / "inv", ports, keys["good"].private, known)
        inv = load_inventory(inventory)
        targets = [probe.target_for(inv.hosts["cp1"])]
        [result] = probe.probe_hosts(targets, probe.ProbeSettings(timeout=5))
    assert result.ok, result.problem
    assert result.host_key == "known"
    assert result.host_key_fingerprint == rsa.fingerprint()


def test_json_to_stdout_carries_only_json(lab: Lab) -> None:
    lab.trust()
    result = runner.invoke(app, ["check", str(lab.inventory()), "--json", "-"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"inventory", "ok", "summary", "hosts", "tools", "collections"}
    assert data["inventory"] == str(lab.tmp / "inventory")
    assert set(data["hosts"][0]) == {
        "name", "address", "port", "user", "reachable", "host_key", "host_key_fingerprint",
        "authenticated", "sudo", "os", "kernel", "problem", "seconds", "ok",
    }  # fmt: skip
    tools = {t["name"]: t for t in data["tools"]}
    assert tools["ansible-core"]["version"] == metadata.version("ansible-core")
    assert tools["paramiko"]["version"] == metadata.version("paramiko")
    assert tools["ansible-core"]["ok"] is True
    assert set(tools) == {"ansible-core", "ansible", "ansible-runner", "paramiko", "mitogen"}
    assert "kubernetes.core" in data["collections"]
    assert "all hosts ready" in result.stderr
    assert f"ansible-core {metadata.version('ansible-core')}" in result.stderr


def test_limit_selects_hosts(lab: Lab) -> None:
    lab.trust()
    inventory = lab.inventory(gpu1_port=free_port())
    result, data = lab.check(inventory, "--limit", "control_plane")
    assert result.exit_code == 0, result.output
    assert [h["name"] for h in data["hosts"]] == ["cp1"]
    result, data = lab.check(inventory, "--limit", "all:!gpu_nodes")
    assert [h["name"] for h in data["hosts"]] == ["cp1"]
    result, _ = lab.check(inventory, "--limit", "nosuchhost")
    assert result.exit_code == 2
    assert "matches no host" in result.output


def test_bad_inventory_exits_2_before_any_probe(tmp_path: Path) -> None:
    root = tmp_path / "inventory"
    root.mkdir()
    (root / "hosts.yml").write_text(
        "all:\n  children:\n    control_plane:\n      hosts:\n        cp1: {}\n        cp2: {}\n"
        "    gpu_nodes:\n      hosts:\n        gpu1: {}\n"
    )
    result = runner.invoke(app, ["check", str(root)])
    assert result.exit_code == 2
    assert "control_plane" in result.output
    assert runner.invoke(app, ["check", str(tmp_path / "missing")]).exit_code == 2


def test_silent_port_is_a_failed_handshake_not_a_hang(lab: Lab) -> None:
    """A port that accepts TCP but never speaks SSH: the per-host timeout ends the wait."""
    lab.trust()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = int(silent.getsockname()[1])
        result = runner.invoke(
            app, ["check", str(lab.inventory(gpu1_port=port)), "--timeout", "1", "--json", "-"]
        )
    assert result.exit_code == 4
    gpu1 = host(json.loads(result.stdout), "gpu1")
    assert gpu1["reachable"] is True
    assert gpu1["problem"]["kind"] == "ssh"
    assert (
        f"127.0.0.1:{port} accepts TCP connections but the SSH handshake failed" in gpu1["problem"]["message"]
    )


def test_probe_script_reports_missing_sudo_for_a_real_unprivileged_user() -> None:
    """PROBE_SCRIPT run as `nobody` (no sudo rights) and as root on this machine, parsed as a probe would."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to run the probe as an unprivileged user")
    as_nobody = subprocess.run(
        ["runuser", "-u", "nobody", "--", "/bin/sh", "-c", probe.PROBE_SCRIPT],
        capture_output=True, text=True, check=True, cwd="/",
    )  # fmt: skip
    facts = probe.parse_probe_output(as_nobody.stdout)
    assert facts.sudo == "no"
    assert facts.sudo_error
    assert facts.uid == str(int(subprocess.check_output(["id", "-u", "nobody"])))
    assert facts.kernel == os.uname().release
    as_root = probe.parse_probe_output(
        subprocess.run(
            ["/bin/sh", "-c", probe.PROBE_SCRIPT], capture_output=True, text=True, check=True
        ).stdout
    )
    assert as_root.sudo == "root"
    assert as_root.os.id == os_release()["ID"]


def test_ssh_options_follow_ssh_quoting(tmp_path: Path) -> None:
    """Shell quoting first (Ansible splits the args), then ssh_config's own: a value holds several
    whitespace-separated files, double quotes keep a space inside one."""
    args = (
        "-o 'UserKnownHostsFile=\"/tmp/a b/known\" /tmp/second' -o GlobalKnownHostsFile=/dev/null "
        "-oIdentityFile=~/k -i /x -o StrictHostKeyChecking=yes"
    )
    options = probe.ssh_options(args)
    assert options["userknownhostsfile"] == '"/tmp/a b/known" /tmp/second'
    assert options["stricthostkeychecking"] == "yes"
    assert options["identityfile"] == "~/k"
    root = tmp_path / "inventory"
    root.mkdir()
    (root / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"ansible_ssh_common_args": args},
                    "children": {
                        "control_plane": {
                            "hosts": {"cp1": {"ansible_host": "10.0.0.1", "ansible_port": 2222}}
                        },
                        "gpu_nodes": {"hosts": {"gpu1": {"ansible_user": "ops"}}},
                    },
                }
            }
        )
    )
    inv = load_inventory(root)
    cp1, gpu1 = probe.target_for(inv.hosts["cp1"]), probe.target_for(inv.hosts["gpu1"])
    assert cp1.known_hosts == (Path("/tmp/a b/known"), Path("/tmp/second"))
    assert cp1.global_known_hosts == (Path("/dev/null"),)
    assert cp1.key_file == Path.home() / "k"
    assert cp1.known_hosts_name == "[10.0.0.1]:2222"
    assert (gpu1.address, gpu1.port, gpu1.user, gpu1.known_hosts_name) == ("gpu1", 22, "ops", "gpu1")
