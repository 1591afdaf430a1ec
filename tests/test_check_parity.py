"""`gpubring check` decides as Ansible decides: every behaviour probe.py mirrors, asked of Ansible itself.

check keeps its own SSH stack (paramiko, in parallel: benchmarks/check_scale.py says why), so each
thing it re-implements beside Ansible is compared here with Ansible's own answer on the same input,
never with a hand-written expectation:

- host patterns: the hosts `check --limit X` probes against `InventoryManager.subset(X)` then
  `get_hosts('all')`, which is what `ansible-playbook --limit X` leaves to a play on `all`;
- inventory merging and the connection variables: where probe.py connects (address, port, user, key
  file, known_hosts files, StrictHostKeyChecking, ProxyJump hops, ProxyCommand; ssh config Host
  patterns with `!`, `Match host`/`originalhost`, `Include`) against the ssh
  command line a real ansible-playbook builds for that host, resolved by OpenSSH itself: the
  playbook runs with its ssh executable replaced by `ssh -G`, which prints what ssh would do;
- `-e`: runopts.parse_extra_vars (what `up` and `check` accept) against ansible.utils.vars'
  load_extra_vars on the same strings, and `check -e ansible_user=...` against `ansible-playbook -e`;
- known_hosts decisions (several UserKnownHostsFile files, accept-new, no) over real sshd servers
  (tests/sshd.py): check and a real Ansible run reach, or refuse, the same host. test_probe_routes.py
  already compares ssh config routes, ProxyJump, ProxyCommand and a changed host key this way.

Forms check cannot follow (a templated connection variable, another ansible_connection, a
vault-encrypted -e file) make it stop with exit 2 and say so; those are tested too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpubring import paths, probe
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.run import process
from gpubring.run.settings import RunResult, RunSettings
from gpubring.runopts import ExtraVarsError, RunOptions, parse_extra_vars
from sshd import KeyPair, Sshd, require_sshd

ROOT = paths.project_root()
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def write(root: Path, hosts: Mapping[str, Any], files: Mapping[str, Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(dict(hosts), sort_keys=False))
    for name, data in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


# --------------------------------------------------------------------------- host patterns

PATTERN_HOSTS = {
    "all": {
        "hosts": {"bastion-1": None},
        "children": {
            "control_plane": {"hosts": {"cp-1": None, "cp-2": None, "cp-3": None}},
            "gpu_nodes": {
                "children": {
                    "gpu_a": {"hosts": {"gpu-01": None, "gpu-02": None}},
                    "gpu_b": {"hosts": {"gpu-03": None, "gpu-04": None, "gpu-12": None}},
                },
            },
            "cpu_nodes": {"hosts": {"cpu-1": None, "cpu-2": None}},
        },
    }
}
PATTERNS = [
    "all", "*", "gpu_nodes", "gpu_a", "control_plane:gpu_nodes", "gpu_nodes,control_plane",
    "cpu_nodes:control_plane", "gpu_nodes:!gpu-02", "gpu_nodes:!gpu_b", "!gpu_nodes", "all:!cpu_nodes",
    "all:&gpu_a", "gpu_nodes:&gpu_b:!gpu-04", "gpu-*", "gpu-0?", "*-1", "cp-[12]", "~gpu-0[12]",
    "~gpu-(01|12)", "~cp", "gpu_nodes[0]", "gpu_nodes[-1]", "gpu_nodes[1:3]", "gpu_nodes[2:]",
    "gpu_b[0:1],cpu_nodes", "cp-1,gpu-03,cpu-2", "gpu-03,cp-1", "GPU-01", "nothing", "gpu_a:gpu-12",
    "bastion-1", "ungrouped", "gpu*:!gpu_a", "cp-1:cp-1",
]  # fmt: skip


@pytest.fixture(scope="module")
def pattern_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("patterns") / "inventory", PATTERN_HOSTS)


def ansible_limit(hosts_file: Path, pattern: str) -> list[str]:
    """The hosts `ansible-playbook --limit PATTERN` gives a play on `all`, sorted: the order is not
    compared (check lists hosts as hosts.yml names them, Ansible group level by group level)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    inventory = InventoryManager(loader=DataLoader(), sources=[str(hosts_file)])
    inventory.subset(pattern)
    return sorted(h.name for h in inventory.get_hosts("all"))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_limit_selects_the_hosts_ansible_selects(pattern_inventory: Path, pattern: str) -> None:
    inv = load_inventory(pattern_inventory)
    assert sorted(h.name for h in probe.select_hosts(inv, pattern)) == ansible_limit(inv.hosts_file, pattern)


def test_limit_file_selects_the_hosts_ansible_selects(pattern_inventory: Path, tmp_path: Path) -> None:
    limit = tmp_path / "retry"
    limit.write_text("gpu-03\n\ncp-2\ngpu_a\n")
    inv = load_inventory(pattern_inventory)
    for pattern in (f"@{limit}", f"@{limit},cpu-1", f"@{limit}:!gpu-01"):
        assert sorted(h.name for h in probe.select_hosts(inv, pattern)) == ansible_limit(
            inv.hosts_file, pattern
        )


def test_an_unreadable_limit_file_is_bad_input(pattern_inventory: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["check", str(pattern_inventory), "--limit", f"@{tmp_path / 'none'}"])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert f"--limit @{tmp_path / 'none'}: cannot read the limit file" in result.output


# --------------------------------------------------------------------------- connection variables


def ssh_config_view(args: list[str]) -> dict[str, list[str]]:
    """OpenSSH's own resolution of an ssh command line (`ssh -G`): each keyword with its values."""
    out = subprocess.run(["ssh", "-G", *args], capture_output=True, text=True, check=True).stdout
    view: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        view.setdefault(key, []).append(value)
    return view


def ansible_ssh_views(root: Path, tmp: Path, extra: tuple[str, ...] = ()) -> dict[str, dict[str, list[str]]]:
    """Per host, what OpenSSH makes of the ssh command a real ansible-playbook builds for it: the
    playbook runs one raw task with its ssh executable replaced by `ssh -G`, whose output (the
    effective config) comes back as the task's stdout."""
    fake = tmp / "ssh-G"
    # Ansible runs `ssh [options] HOST COMMAND`: HOST (what %n expands to) is the next to last word.
    fake.write_text(
        '#!/bin/sh\nfor a; do host=$last; last=$a; done\necho "givenhost $host"\nexec ssh -G "$@"\n'
    )
    fake.chmod(0o755)
    play = tmp / "raw.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.raw: 'true'\n")
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),  # as gpubring's runner sets it
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_EXECUTABLE": str(fake),
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"),
    }
    argv = [ANSIBLE_PLAYBOOK, "-i", str(root / "hosts.yml"), str(play)]
    for value in extra:
        argv += ["-e", value]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT, env=env)
    results = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    views: dict[str, dict[str, list[str]]] = {}
    for name, result in results.items():
        assert result.get("rc") == 0, (name, result)
        view: dict[str, list[str]] = {}
        for line in result["stdout"].splitlines():
            key, _, value = line.strip().partition(" ")
            view.setdefault(key, []).append(value)
        views[name] = view
    return views


def expand_tokens(command: str, view: Mapping[str, list[str]]) -> str:
    """ssh -G prints ProxyCommand as written; OpenSSH expands its %h %p %r %n %% with these values."""
    values = {"h": view["hostname"][0], "p": view["port"][0], "r": view["user"][0], "%": "%"}
    values["n"] = view["givenhost"][0]
    out, i = "", 0
    while i < len(command):
        if command[i] == "%" and i + 1 < len(command) and command[i + 1] in values:
            out, i = out + values[command[i + 1]], i + 2
        else:
            out, i = out + command[i], i + 1
    return out


def assert_same_route(target: probe.Target, view: Mapping[str, list[str]], config: Path | None) -> None:
    """probe.py's Target against OpenSSH's view of Ansible's command for the same host."""
    where = target.name
    assert (target.address, str(target.port), target.user) == (
        view["hostname"][0],
        view["port"][0],
        view["user"][0],
    ), where
    identities = [os.path.expanduser(p) for p in view.get("identityfile", [])]
    if target.key_file is None:
        assert all(p.startswith(os.path.expanduser("~/.ssh/id_")) for p in identities), (where, identities)
    else:
        assert str(target.key_file) == identities[0], where
    assert " ".join(map(str, target.known_hosts)) == view["userknownhostsfile"][0], where
    assert " ".join(map(str, target.global_known_hosts)) == view["globalknownhostsfile"][0], where
    strict = view["stricthostkeychecking"][0]
    assert (target.accept_new, target.accept_changed) == (
        strict in ("accept-new", "false"),
        strict == "false",
    )
    command = view.get("proxycommand", ["none"])[0]
    assert target.proxy_command == (None if command == "none" else expand_tokens(command, view)), where
    jump_spec = view.get("proxyjump", ["none"])[0]
    if jump_spec == "none":
        assert target.jump is None, where
        return
    # OpenSSH reaches the last hop with `ssh -l USER -p PORT -F CONFIG [-J EARLIER] HOP`.
    assert target.jump is not None, where
    earlier, _, last = jump_spec.rpartition(",")
    user, _, hop = last.rpartition("@")
    host, _, port = hop.partition(":")
    args = [*(["-F", str(config)] if config else []), *(["-l", user] if user else [])]
    args += [*(["-p", port] if port else []), *(["-J", earlier] if earlier else []), host]
    assert_same_route(target.jump, {**ssh_config_view(args), "givenhost": [host]}, config)


@pytest.fixture
def ssh_config(tmp_path: Path) -> Path:
    config = tmp_path / "ssh_config"
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-lab.conf").write_text("Host *.lab\n  HostName 10.7.0.7\n")
    (tmp_path / "conf.d" / "20-db.conf").write_text("Host db-9\n  Port 2909\n")
    (tmp_path / "db9.conf").write_text(f"IdentityFile {tmp_path}/db9_key\n")
    config.write_text(
        f"Include {tmp_path}/conf.d/*.conf\n"
        "Host gw1\n  HostName 10.9.0.1\n  User gwuser\n  Port 2022\n"
        "Host gw2\n  HostName 10.9.0.2\n  ProxyJump ops@gw1:2200\n"
        "Host db-* !db-9\n  User dbuser\n  IdentityFile ~/.ssh/db_key\n"
        "Host db-1\n  HostName 10.0.0.5\n  Port 2200\n  ProxyCommand nc %h %p # as %r for %n\n"
        "Host db-2\n  HostName 10.0.0.6\n  ProxyJump gw2\n"
        f"Host db-9\n  Include {tmp_path}/db9.conf\n  HostName 10.0.0.9\n"
        "Host both\n  ProxyCommand nc x 22\n  ProxyJump gw1\n"
        "Match host 10.0.0.5\n  UserKnownHostsFile /k/matched-host\n"
        "Match originalhost gpu-6\n  HostName 10.6.6.6\n"
        "Host *.lan\n  StrictHostKeyChecking accept-new\n"
        "Host *.lab\n  StrictHostKeyChecking no\n"
        f'Host *\n  UserKnownHostsFile {tmp_path}/known_a "{tmp_path}/known b"\n'
        "  GlobalKnownHostsFile /dev/null\n"
    )
    return config


def layered_inventory(root: Path, config: Path) -> Path:
    """Connection variables set at every level Ansible merges: all, group_vars/all, a parent and a
    child group, hosts.yml's host entry (and `host:port`), host_vars; both spellings of each."""
    f = f"-F {config}"
    keys = root.parent / "keys"
    keys.mkdir(exist_ok=True)
    for name in ("plain", "ssh-wins", "gpu_a", "common"):
        (keys / name).write_text("")  # OpenSSH drops an -i file that does not exist
    hosts = {
        "all": {
            "vars": {"ansible_user": "all-inline", "ansible_ssh_common_args": f},
            "children": {
                "control_plane": {
                    "hosts": {
                        "cp-1": {"ansible_host": "db-1", "ansible_ssh_user": "ssh-user-wins"},
                        "cp-2:2345": {"ansible_host": "10.1.0.2"},
                        "cp-3": {"ansible_ssh_host": "db-9", "ansible_host": "ignored", "ansible_port": 23},
                    },
                },
                "gpu_nodes": {
                    "vars": {"ansible_port": 2222, "ansible_ssh_extra_args": "-l extra -p 2444"},
                    "children": {
                        "gpu_a": {
                            "vars": {"ansible_ssh_port": 2333},
                            "hosts": {"gpu-1": {"ansible_host": "db-2"}, "gpu-2": {"ansible_host": "both"}},
                        },
                    },
                    "hosts": {
                        "gpu-3": {"ansible_ssh_common_args": f"{f} -o User=common -o Port=2555 -J gw1,gw2"},
                        "gpu-4": {
                            "ansible_ssh_args": "-o User=args-first -o Port=2666",
                            "ansible_host": "x.lan",
                        },
                        "gpu-5": {"ansible_host": "y.lab", "ansible_private_key_file": f"{keys}/plain"},
                        "gpu-6": {
                            "ansible_ssh_common_args": f"{f} -i {keys}/common -o UserKnownHostsFile=/k1"
                        },
                    },
                },
            },
        }
    }
    files = {
        "group_vars/all.yml": {"ansible_user": "group-vars-all"},
        "group_vars/gpu_nodes.yml": {"ansible_user": "gpu-nodes"},
        "group_vars/gpu_a.yml": {"ansible_user": "gpu-a", "ansible_ssh_private_key_file": f"{keys}/gpu_a"},
        "host_vars/gpu-1.yml": {"ansible_user": "host-vars"},
        "host_vars/gpu-5.yml": {"ansible_ssh_private_key_file": f"{keys}/ssh-wins"},
    }
    return write(root, hosts, files)


def test_connection_matches_ansibles_ssh_command(tmp_path: Path, ssh_config: Path) -> None:
    root = layered_inventory(tmp_path / "inventory", ssh_config)
    views = ansible_ssh_views(root, tmp_path)
    inv = load_inventory(root)
    assert sorted(views) == sorted(inv.hosts)
    for name, host in inv.hosts.items():
        assert_same_route(probe.target_for(host), views[name], ssh_config)
    # The cases are live in Ansible's answer: Match host / originalhost, Include, ProxyCommand first.
    assert views["cp-1"]["userknownhostsfile"] == ["/k/matched-host"]
    assert (views["gpu-6"]["hostname"], views["gpu-5"]["hostname"]) == (["10.6.6.6"], ["10.7.0.7"])
    assert views["gpu-2"]["proxycommand"] == ["nc x 22"] and "proxyjump" not in views["gpu-2"]


def test_extra_vars_override_the_inventory_in_both(tmp_path: Path, ssh_config: Path) -> None:
    root = layered_inventory(tmp_path / "inventory", ssh_config)
    extra = (
        "ansible_user=from-e",
        '{"ansible_ssh_port": 2999}',
        "ansible_ssh_user=ssh-from-e ansible_host=db-9",
    )
    views = ansible_ssh_views(root, tmp_path, extra)
    overrides: dict[str, Any] = {}
    for source in parse_extra_vars(extra):
        assert isinstance(source, Mapping)
        overrides.update(source)
    inv = load_inventory(root)
    for name, host in inv.hosts.items():
        target = probe.target_for(host, overrides)
        assert_same_route(target, views[name], ssh_config)
        if name != "gpu-4":  # ansible_ssh_args come first on Ansible's command line, even over -e
            assert (target.user, target.address, target.port) == ("ssh-from-e", "10.0.0.9", 2999)
        else:
            assert (target.user, target.port) == ("args-first", 2666)


def test_the_environment_fills_in_as_for_ansible(
    tmp_path: Path, ssh_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ANSIBLE_REMOTE_USER, ANSIBLE_REMOTE_PORT and ANSIBLE_SSH_COMMON_ARGS where no variable is set."""
    monkeypatch.setenv("ANSIBLE_REMOTE_USER", "env-user")
    monkeypatch.setenv("ANSIBLE_REMOTE_PORT", "2777")
    monkeypatch.setenv("ANSIBLE_SSH_COMMON_ARGS", f"-F {ssh_config} -J gw1")
    root = write(
        tmp_path / "inventory",
        {
            "all": {
                "children": {
                    "control_plane": {"hosts": {"db-1": None}},
                    "gpu_nodes": {"hosts": {"gpu-1": {"ansible_user": "var-user", "ansible_port": 2001}}},
                }
            }
        },
    )
    views = ansible_ssh_views(root, tmp_path)
    for name, host in load_inventory(root).hosts.items():
        assert_same_route(probe.target_for(host), views[name], ssh_config)
    assert (views["db-1"]["user"], views["gpu-1"]["user"]) == (["env-user"], ["var-user"])


def test_an_include_check_cannot_flatten_is_refused(tmp_path: Path, ssh_config: Path) -> None:
    """An Include inside `Host db-*` of a file with its own Host blocks: OpenSSH applies them only
    to hosts matching both; check says it cannot follow (exit 2, naming the file and line)."""
    text = ssh_config.read_text()
    ssh_config.write_text(text.replace("Host both\n", f"Host both\n  Include {tmp_path}/conf.d/20-db.conf\n"))
    root = layered_inventory(tmp_path / "inventory", ssh_config)
    result = CliRunner().invoke(app, ["check", str(root)])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert f"ssh config {ssh_config}:" in result.output and "inside 'Host both'" in result.output


def test_check_takes_e_as_up_does(tmp_path: Path) -> None:
    """`check -e ansible_user=x` probes as `x`: the JSON names the user it connected as."""
    root = write(
        tmp_path / "inventory",
        {
            "all": {
                "vars": {"ansible_user": "inventory-user", "ansible_host": "127.0.0.1", "ansible_port": 9},
                "children": {
                    "control_plane": {"hosts": {"cp-1": None}},
                    "gpu_nodes": {"hosts": {"gpu-1": {"ansible_port": 10}}},
                },
            }
        },
    )
    argv = ["check", str(root), "--json", "-", "--timeout", "1", "-e", "ansible_user=from-e", "-e", "x=1"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == ExitCode.UNREACHABLE  # nothing listens on ports 9 and 10
    assert {h["user"] for h in json.loads(result.stdout)["hosts"]} == {"from-e"}


def test_what_check_cannot_follow_stops_it_and_says_so(tmp_path: Path) -> None:
    """Ansible renders a templated ansible_host at run time and uses other connection plugins; check
    does not guess: exit 2 naming the host, the variable and what to do."""
    cases = {
        "ansible_host": ("{{ inventory_hostname }}.lan", "is a template"),
        "ansible_ssh_common_args": ("-o ProxyJump={{ jump }}", "is a template"),
        "ansible_connection": ("local", "ansible_connection is 'local'"),
    }
    for key, (value, said) in cases.items():
        root = write(
            tmp_path / key,
            {
                "all": {
                    "children": {
                        "control_plane": {"hosts": {"cp-1": {"ansible_host": "127.0.0.1"}}},
                        "gpu_nodes": {"hosts": {"gpu-1": {key: value}}},
                    }
                }
            },
        )
        result = CliRunner().invoke(app, ["check", str(root), "--limit", "gpu-1"])
        assert result.exit_code == ExitCode.BAD_INPUT, result.output
        assert f"gpu-1: {key}" in result.output and said in result.output, result.output
    vault = tmp_path / "vault.yml"
    vault.write_text("$ANSIBLE_VAULT;1.1;AES256\n3031\n")
    result = CliRunner().invoke(app, ["check", str(tmp_path / "ansible_host"), "-e", f"@{vault}"])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "gpubring check cannot read it" in result.output


# --------------------------------------------------------------------------- -e parsing

EXTRA_VARS_SAME = [
    "a=1", "a=1 b=2", 'msg="hello world"', "k='a b' c=\"d e\"", "k=a=b", "k=", "k=$HOME",
    "k=${HOME}", "k=a,b", "k=a#b", "k=é", " a=1", "k=True", "k=1.5", "k='{{ x }} y'",
    'k="{{ a }} b"', "k={{ x }}", "k={{ x | default('a b') }}", 'k="a\\"b"', "k=a\\nb",
    "ansible_user=admin ansible_port=2222", '{"a": 1, "b": [1, 2], "c": {"d": null}}',
    "{a: 1, b: 'x y'}", '{"k": "{{ x }}"}',
]  # fmt: skip
# Ansible makes these something no play means (a stray word becomes the variable `_raw_params`) or
# refuses them; gpubring refuses each with a message.
EXTRA_VARS_REFUSED = ["foo", "a=1 foo", "k=a b", "k=[1, 2]", "[1]", "a-b=1", "./vars.yml"]


def ansible_extra_vars(*args: str) -> dict[str, Any] | str:
    from ansible import context
    from ansible.module_utils.common.collections import ImmutableDict
    from ansible.parsing.dataloader import DataLoader
    from ansible.utils.vars import load_extra_vars

    saved = context.CLIARGS
    context.CLIARGS = ImmutableDict(extra_vars=args)
    load_extra_vars.extra_vars = None  # type: ignore[attr-defined]  # it memoizes the first answer
    try:
        return dict(load_extra_vars(DataLoader()))
    except Exception as exc:
        return f"error: {exc}"
    finally:
        context.CLIARGS = saved
        load_extra_vars.extra_vars = None  # type: ignore[attr-defined]


def gpubring_extra_vars(*args: str, base: Path | None = None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for source in parse_extra_vars(args, base):
        assert isinstance(source, Mapping)
        merged.update(source)
    return merged


@pytest.mark.parametrize("value", EXTRA_VARS_SAME)
def test_extra_vars_parse_as_ansible_parses_them(value: str) -> None:
    assert gpubring_extra_vars(value) == ansible_extra_vars(value)


@pytest.mark.parametrize("value", EXTRA_VARS_REFUSED)
def test_extra_vars_ansible_would_misread_are_refused(value: str) -> None:
    answer = ansible_extra_vars(value)
    assert isinstance(answer, str) or "_raw_params" in answer or any(not k.isidentifier() for k in answer)
    with pytest.raises(ExtraVarsError):
        gpubring_extra_vars(value)


def test_extra_vars_files_and_order_as_ansible(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text("a: 1\nnested: {x: [1, 2]}\nquoted: 'a=b $c {{ d }}'\n")
    (tmp_path / "b.json").write_text('{"a": "two", "b": null}')
    (tmp_path / "empty.yml").write_text("")
    args = (f"@{tmp_path}/a.yml", "a=kv", f"@{tmp_path}/b.json", "c=3")
    assert gpubring_extra_vars(*args) == ansible_extra_vars(*args)
    # The one difference, kept on purpose: an empty file is no variables to gpubring, an error to Ansible.
    empty = f"@{tmp_path}/empty.yml"
    assert (gpubring_extra_vars(empty), str(ansible_extra_vars(empty))[:39]) == (
        {},
        "error: Invalid extra vars data supplied",
    )


# --------------------------------------------------------------------------- known hosts, live


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    require_sshd()
    return KeyPair.generate(tmp_path_factory.mktemp("client") / "id_client")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, client: KeyPair) -> Iterator[Sshd]:
    with Sshd.start(tmp_path_factory.mktemp("sshd"), [client.public_line]) as started:
        yield started


def live_inventory(root: Path, server: Sshd, client: KeyPair, ssh_args: str) -> Path:
    node = {
        "ansible_host": server.address,
        "ansible_port": server.port,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(client.private),
        "ansible_ssh_common_args": f"-o IdentitiesOnly=yes -o GlobalKnownHostsFile=/dev/null {ssh_args}",
        "ansible_python_interpreter": sys.executable,
    }
    hosts = {
        "all": {
            "children": {"control_plane": {"hosts": {"node": node}}, "gpu_nodes": {"hosts": {"node": None}}}
        }
    }
    return write(root, hosts)


def check(root: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["check", str(root), "--json", "-", "--timeout", "15"])
    return dict(json.loads(result.stdout)["hosts"][0])


def ansible(root: Path, tmp: Path) -> RunResult:
    playbook = tmp / "ping.yml"
    playbook.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n")
    return process.run(
        RunSettings(
            inventory_root=root,
            hosts_file=root / "hosts.yml",
            command="test",
            playbook=playbook,
            options=RunOptions(accelerate=False),
        )
    )


def both(root: Path, tmp: Path) -> tuple[dict[str, Any], RunResult]:
    return check(root), ansible(root, tmp)


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", "-o ControlMaster=no")  # every run verifies the key again
    return tmp_path


def test_a_key_in_the_second_known_hosts_file_is_known_to_both(
    isolated: Path, server: Sshd, client: KeyPair
) -> None:
    first, second = isolated / "known_first", isolated / "known second"
    first.write_text("")
    second.write_text(server.known_hosts_line() + "\n")
    args = f"-o 'UserKnownHostsFile={first} \"{second}\"' -o StrictHostKeyChecking=yes"
    node, run = both(live_inventory(isolated / "inventory", server, client, args), isolated)
    assert (node["ok"], node["host_key"]) == (True, "known"), node
    assert run.exit_code == ExitCode.OK and run.report.stats["node"].ok == 1
    assert first.read_text() == ""  # neither wrote anything


@pytest.mark.parametrize("strict", ["accept-new", "no"])
def test_an_unknown_key_is_recorded_by_both(
    isolated: Path, server: Sshd, client: KeyPair, strict: str
) -> None:
    """Both connect and record the key in the first UserKnownHostsFile (each its own file here)."""
    recorded: list[set[tuple[str, ...]]] = []
    for tool in ("check", "ansible"):
        known = isolated / f"known_{tool}"
        args = f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking={strict}"
        root = live_inventory(isolated / f"inventory-{tool}", server, client, args)
        if tool == "check":
            node = check(root)
            assert (node["ok"], node["host_key"]) == (True, "accepted"), node
        else:
            assert ansible(root, isolated).exit_code == ExitCode.OK
        # OpenSSH's own lookup (ssh-keygen -F): Debian's ssh_config hashes the names it records.
        found = subprocess.run(
            ["ssh-keygen", "-F", server.known_hosts_name, "-f", str(known)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        recorded.append({tuple(line.split()[1:]) for line in found.splitlines() if not line.startswith("#")})
    assert recorded[0] == recorded[1] == {(server.host_key.key_type, server.host_key.blob_b64)}


@pytest.mark.parametrize("strict", ["no", "accept-new", "yes"])
def test_a_changed_key_as_ansible_decides(isolated: Path, server: Sshd, client: KeyPair, strict: str) -> None:
    """OpenSSH refuses a changed host key unless StrictHostKeyChecking is no (it logs in with the key
    all the same); check follows and says `changed` in the JSON."""
    other = KeyPair.generate(isolated / "other", comment="host")
    known = isolated / "known"
    known.write_text(f"{server.known_hosts_name} {other.key_type} {other.blob_b64}\n")
    args = f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking={strict}"
    node, run = both(live_inventory(isolated / "inventory", server, client, args), isolated)
    reached = run.exit_code == ExitCode.OK
    assert reached == (strict == "no"), run.report
    assert node["ok"] == reached, node
    assert node["host_key"] == "changed"
