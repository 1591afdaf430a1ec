"""`gpubring check` and Ansible reach a host by the same route: ssh config, ProxyJump, ProxyCommand.

Two real OpenSSH servers (tests/sshd.py) on 127.0.0.1: a jump host, whose log at LogLevel DEBUG1
records every connection forwarded through it, and the target. Each test writes an ssh config file
(given to both with `-F` in ansible_ssh_common_args), a known_hosts file and an inventory under
tmp_path, then runs `gpubring check` (paramiko) and a real ansible-playbook run through
gpubring.run (OpenSSH) with the same inventory. The user's own ~/.ssh is never read: HOME points
at tmp_path and the ssh config sets the key and the known_hosts file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpubring import probe
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.run import process
from gpubring.run.settings import RunResult, RunSettings
from gpubring.runopts import RunOptions
from sshd import KeyPair, Sshd, require_sshd

PING = "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"

# How the inventory names the target, and what ansible_ssh_common_args adds to `-F CONFIG`.
ROUTES = {
    "ssh config": ("node-direct", ""),
    "ProxyJump in the ssh config": ("node-behind-jump", ""),
    "-J in the ssh args": ("node-plain", "-J jump"),
    "ProxyCommand in the ssh config": ("node-proxy-command", ""),
}
THROUGH_JUMP = {"ProxyJump in the ssh config", "-J in the ssh args", "ProxyCommand in the ssh config"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    require_sshd()
    return KeyPair.generate(tmp_path_factory.mktemp("client") / "id_client")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, client: KeyPair) -> Iterator[tuple[Sshd, Sshd]]:
    folder = tmp_path_factory.mktemp("sshd")
    with (
        Sshd.start(folder / "jump", [client.public_line], log_level="DEBUG1") as jump,
        Sshd.start(folder / "target", [client.public_line]) as target,
    ):
        yield jump, target


@dataclass
class Site:
    """One test's ssh config, known_hosts and inventory over the module's two servers."""

    tmp: Path
    jump: Sshd
    target: Sshd
    client: KeyPair

    @property
    def config(self) -> Path:
        return self.tmp / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.tmp / "known_hosts"

    def write(self, route: str) -> Path:
        """The ssh config, a known_hosts file trusting both servers, and hosts.yml; the inventory root."""
        t, j = self.target, self.jump
        self.config.write_text(
            f"Host jump\n  HostName 127.0.0.1\n  Port {j.port}\n"
            f"Host node-direct\n  HostName 127.0.0.1\n  Port {t.port}\n"
            f"Host node-behind-jump\n  HostName 127.0.0.1\n  Port {t.port}\n  ProxyJump jump\n"
            f"Host node-plain\n  HostName 127.0.0.1\n  Port {t.port}\n"
            f"Host node-proxy-command\n  HostName 127.0.0.1\n  Port {t.port}\n"
            f"  ProxyCommand ssh -F {self.config} -W %h:%p jump\n"
            f"Host *\n  User root\n  IdentityFile {self.client.private}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
        )
        self.known_hosts.write_text(f"{j.known_hosts_line()}\n{t.known_hosts_line()}\n")
        address, extra = ROUTES[route]
        node = {
            "ansible_host": address,
            "ansible_ssh_common_args": f"-F {self.config} {extra}".strip(),
            "ansible_python_interpreter": sys.executable,
        }
        root = self.tmp / "inventory"
        root.mkdir(exist_ok=True)
        hosts = {
            "all": {
                "hosts": {"node": node},
                "children": {
                    "control_plane": {"hosts": {"node": None}},
                    "gpu_nodes": {"hosts": {"node": None}},
                },
            }
        }
        (root / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
        return root

    def forwarded(self) -> int:
        """Connections the jump host forwarded to the target so far."""
        return self.jump.log.read_text().count(f"target 127.0.0.1 port {self.target.port}")

    def check(self, root: Path) -> tuple[int, dict[str, Any]]:
        result = CliRunner().invoke(app, ["check", str(root), "--json", "-", "--timeout", "10"])
        return result.exit_code, json.loads(result.stdout)["hosts"][0]

    def ansible(self, root: Path) -> RunResult:
        playbook = self.tmp / "ping.yml"
        playbook.write_text(PING)
        settings = RunSettings(
            inventory_root=root,
            hosts_file=root / "hosts.yml",
            command="test",
            playbook=playbook,
            options=RunOptions(accelerate=False),
        )
        return process.run(settings)


@pytest.fixture
def site(
    tmp_path: Path, servers: tuple[Sshd, Sshd], client: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> Site:
    # Ansible's ssh: no ~/.ssh, ~/.ansible under tmp_path, and no shared connection that would outlive
    # a run (a second run must verify the host key again).
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", "-o ControlMaster=no")
    return Site(tmp_path, *servers, client)


@pytest.mark.parametrize("route", list(ROUTES))
def test_check_and_ansible_reach_the_host_by_the_same_route(site: Site, route: str) -> None:
    root = site.write(route)
    before = site.forwarded()
    code, node = site.check(root)
    assert code == 0, node
    assert (node["address"], node["port"], node["user"]) == ("127.0.0.1", site.target.port, "root")
    assert (node["host_key"], node["host_key_fingerprint"]) == ("known", site.target.host_key.fingerprint())
    assert node["sudo"] == "root"
    after_check = site.forwarded()
    assert after_check == before + (route in THROUGH_JUMP)

    result = site.ansible(root)
    assert result.exit_code == ExitCode.OK, result.report
    assert result.report.stats["node"].ok == 1
    assert site.forwarded() == after_check + (route in THROUGH_JUMP)


@pytest.mark.parametrize("route", list(ROUTES))
def test_check_and_ansible_refuse_a_changed_host_key(site: Site, route: str, tmp_path: Path) -> None:
    root = site.write(route)
    other = KeyPair.generate(tmp_path / "other_host_key", comment="host")
    lines = site.known_hosts.read_text().splitlines()
    lines[1] = f"{site.target.known_hosts_name} {other.key_type} {other.blob_b64}"
    site.known_hosts.write_text("\n".join(lines) + "\n")

    code, node = site.check(root)
    assert code == ExitCode.UNREACHABLE
    assert (node["host_key"], node["problem"]["kind"]) == ("changed", "changed_host_key")
    assert f"{site.known_hosts}:2" in node["problem"]["message"]
    assert other.fingerprint() in node["problem"]["message"]

    # Without pipelining: with it, ssh's refusal can reach Ansible as a broken pipe on the module it
    # was writing (seen on a loaded machine) instead of ssh's own words. The refusal is the same.
    hosts = yaml.safe_load((root / "hosts.yml").read_text())
    hosts["all"]["hosts"]["node"]["ansible_pipelining"] = False
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    result = site.ansible(root)
    assert result.exit_code == ExitCode.UNREACHABLE, result.report
    assert result.report.stats["node"].unreachable == 1
    assert "host key" in json.dumps(result.report.to_json()["failures"]).lower()


def test_a_changed_jump_host_key_is_refused_and_named(site: Site) -> None:
    root = site.write("ProxyJump in the ssh config")
    site.known_hosts.write_text(site.target.known_hosts_line() + "\n")  # the jump host is unknown
    code, node = site.check(root)
    assert code == ExitCode.UNREACHABLE
    assert node["problem"]["kind"] == "unknown_host_key"
    assert node["problem"]["message"].startswith(
        f"jump host root@127.0.0.1:{site.jump.port}: unknown host key"
    )
    assert (node["reachable"], node["host_key"]) == (False, None)


def test_inventory_beats_the_ssh_config_and_tokens_follow(tmp_path: Path) -> None:
    """ansible_user / ansible_port / the key file beat the ssh config, as Ansible's -o User= -o Port= -i
    do; ProxyCommand tokens see the final values; a -J chain is reached hop by hop."""
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host gw2\n  User gwuser\n  Port 2022\n"
        "Host db\n  HostName 10.0.0.5\n  User cfguser\n  Port 2200\n  IdentityFile /cfg/key\n"
        "  ProxyCommand nc %h %p # %r\n"
        "Host *\n  UserKnownHostsFile /k/known\n"
    )
    root = tmp_path / "inventory"
    root.mkdir()
    common = f"-F {config}"
    hosts = {
        "all": {
            "children": {
                "control_plane": {
                    "hosts": {
                        "cp1": {
                            "ansible_host": "db",
                            "ansible_user": "inv",
                            "ansible_port": 2201,
                            "ansible_ssh_private_key_file": "/inv/key",
                            "ansible_ssh_common_args": common,
                        }
                    }
                },
                "gpu_nodes": {
                    "hosts": {
                        "gpu1": {
                            "ansible_host": "10.0.0.9",
                            "ansible_ssh_common_args": f"{common} -J ops@gw1:2222,gw2 -l admin -p 23",
                        }
                    }
                },
            }
        }
    }
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    inv = load_inventory(root)
    cp1, gpu1 = probe.target_for(inv.hosts["cp1"]), probe.target_for(inv.hosts["gpu1"])
    assert (cp1.address, cp1.port, cp1.user, cp1.key_file) == ("10.0.0.5", 2201, "inv", Path("/inv/key"))
    assert cp1.proxy_command == "nc 10.0.0.5 2201 # inv"
    assert cp1.known_hosts == (Path("/k/known"),)
    assert (gpu1.address, gpu1.port, gpu1.user, gpu1.proxy_command) == ("10.0.0.9", 23, "admin", None)
    assert gpu1.jump is not None and gpu1.jump.jump is not None
    assert (gpu1.jump.address, gpu1.jump.port, gpu1.jump.user) == ("gw2", 2022, "gwuser")
    assert (gpu1.jump.jump.address, gpu1.jump.jump.port, gpu1.jump.jump.user) == ("gw1", 2222, "ops")
    assert gpu1.jump.jump.jump is None
    assert gpu1.route == "10.0.0.9:23 via ProxyJump gwuser@gw2:2022 via ProxyJump ops@gw1:2222"


def test_a_missing_ssh_config_file_is_bad_input(tmp_path: Path) -> None:
    root = tmp_path / "inventory"
    root.mkdir()
    node = {"ansible_host": "127.0.0.1", "ansible_ssh_common_args": f"-F {tmp_path / 'nope'}"}
    (root / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"node": node},
                    "children": {
                        "control_plane": {"hosts": {"node": None}},
                        "gpu_nodes": {"hosts": {"node": None}},
                    },
                }
            }
        )
    )
    result = CliRunner().invoke(app, ["check", str(root)])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert f"cannot read ssh config {tmp_path / 'nope'}" in result.output
