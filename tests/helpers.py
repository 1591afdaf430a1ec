"""What the tests share, defined once: the repository's folders, the collection import, and the Ansible
environment of a run from this checkout. Light on purpose (no kubernetes_validate, no gpubring model);
_render.py holds the rendering tests' heavier helpers."""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from gpubring.paths import collections_path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
DATA = TESTS / "data"
FIXTURES = TESTS / "fixtures"
HW = FIXTURES / "hw"
BIN = Path(sys.executable).parent  # the venv's ansible, ansible-playbook, ...

# The releases the sample inventory (inventories/prod) plans, in the platform play's order (storage
# before monitoring's claim): the platform the README sells.
SAMPLE_RELEASES = (
    "local-path-provisioner",
    "metallb",
    "kube-prometheus-stack",
    "gpu-alerts",
    "prometheus-adapter",
    "metrics-server",
    "gpu-operator",
    "network-operator",
    "teams",
    "volcano",
    "kai-scheduler",
    "kueue",
    "kuberay-operator",
    "mpi-operator",
    "gateway-helm",
)


def collection_module(name: str) -> ModuleType:
    """plugins/<name> (dotted: `module_utils.gpu_parsers`, `filter.kubelet_topology`) as
    ansible_collections.gpubring.core.plugins.<name>, imported the way Ansible does: through the
    gpubring.core collection path."""
    path = str(collections_path())
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("ansible_collections.gpubring.core.plugins." + name)


def module_utils(name: str) -> ModuleType:
    """plugins/module_utils/<name>.py through the collection (collection_module)."""
    return collection_module("module_utils." + name)


def tasks_in(node: Any) -> Iterator[dict[str, Any]]:
    """Every task of a task list (a task file as YAML loads it), and those inside its blocks' block, rescue
    and always sections, depth first."""
    if isinstance(node, list):
        for item in node:
            yield from tasks_in(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from tasks_in(node.get(key))


def set_fact_args(task: Mapping[str, Any]) -> dict[str, Any] | None:
    """The arguments of a task that is a set_fact (its FQCN or short key), else None."""
    for key in ("ansible.builtin.set_fact", "set_fact"):
        args = task.get(key)
        if isinstance(args, dict):
            return args
    return None


def collection_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """`base` (the process environment by default) with the gpubring.core collection on
    ANSIBLE_COLLECTIONS_PATH, then `extra`."""
    env = dict(os.environ if base is None else base)
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections_path())
    env.update(extra)
    return env


def script_shows(script: str, tmp_path: Path) -> dict[str, Any]:
    """A Python script run from tests/ with the collection importable and Ansible's local temporary
    folder in tmp_path: the JSON document its last line prints."""
    env = collection_env(ANSIBLE_LOCAL_TEMP=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO / "tests", env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return shown


def ansible_playbook(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The venv's ansible-playbook, run from the repository with its ansible.cfg and the collection."""
    env = collection_env(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), *map(str, args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def ansible_playbook_json(inventory: str | Path, playbook: Path) -> subprocess.CompletedProcess[str]:
    """The venv's ansible-playbook with the repository's ansible.cfg, the collection and an in-memory
    fact cache, ansible.posix.json's document of the run on stdout."""
    env = collection_env(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOCALHOST_WARNING="false",
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def cache_facts(inventory_root: Path, hosts: Mapping[str, Mapping[str, Any]]) -> None:
    """Facts in the inventory's fact cache as a run leaves them: ansible-playbook with gpubring's cache
    settings (jsonfile in <inventory>/.gpubring/facts, gpubring.run.folder) sets each host's facts (a
    cacheable set_fact, run on this machine under the host's name)."""
    from gpubring.factcache import FACTS_FOLDER

    work = inventory_root / ".cache-facts"
    work.mkdir(exist_ok=True)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {"hosts": {name: {**local, "cached_facts": dict(facts)} for name, facts in hosts.items()}}
    }
    names = sorted({name for facts in hosts.values() for name in facts})
    setting = {"cacheable": True, **{name: "{{ cached_facts['" + name + "'] }}" for name in names}}
    task = {"name": "Cache the host's facts", "ansible.builtin.set_fact": setting}
    (work / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (work / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [task]}]))
    env = collection_env(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="jsonfile",
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(inventory_root / FACTS_FOLDER),
        ANSIBLE_CACHE_PLUGIN_TIMEOUT="0",
        ANSIBLE_NOCOLOR="1",
    )
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(work / "hosts.yml"), str(work / "play.yml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def folded(raw_events: Sequence[Mapping[str, Any]]) -> Any:
    """A run's state (gpubring.events.RunState) after every event of a recorded stream, as the runner
    folds them."""
    from gpubring import events

    state = events.RunState()
    for raw in raw_events:
        for event in events.parse_all(raw):
            state.apply(event)
    return state


def runs_cli(*args: str | Path) -> tuple[int, str]:
    """`gpubring runs ARGS` through typer's CliRunner, wide enough for the listing: (exit code, output)."""
    from typer.testing import CliRunner

    from gpubring.app import app

    result = CliRunner().invoke(app, ["runs", *map(str, args)], env={"COLUMNS": "250"})
    return result.exit_code, result.output


def refused(command: str, inventory: Path) -> str:
    """`gpubring COMMAND INVENTORY` through typer's CliRunner must refuse the inventory before any host:
    exit 2, no traceback. Its stderr, for the caller to hold to the expected lines."""
    from typer.testing import CliRunner

    from gpubring.app import app

    result = CliRunner().invoke(app, [command, str(inventory)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.stderr


def inventory_problems(root: Path) -> list[str]:
    """What `load_inventory` refuses in the inventory at root, a line per problem ([] when it loads)."""
    from gpubring.inventory import load_inventory
    from gpubring.model import InventoryError

    try:
        load_inventory(root)
    except InventoryError as err:
        return [str(p) for p in err.problems]
    return []


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie does not count), from /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# Sockets of closed_port(), kept bound (never listening) for the life of the test process.
_HELD_PORTS: list[socket.socket] = []


def closed_port() -> int:
    """A local TCP port where nothing listens: bound and kept bound without listen(), so a connection
    to it is refused and no other process can take it while the test runs (a port bound and let go
    could be taken by the e2e lab or another worker between two runs of one test, and the second run
    would then report another error)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(s)
    return int(s.getsockname()[1])


def unreachable_kubeconfig(folder: Path) -> Path:
    """folder/admin.conf: a kubeconfig whose API server address has nothing listening, for roles run
    for real on localhost: they find a cluster's kubeconfig, and every API call is refused."""
    path = folder / "admin.conf"
    server = f"https://127.0.0.1:{closed_port()}"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "test"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def localhost_inventory(folder: Path, groups: Sequence[str] = ("control_plane",)) -> Path:
    """hosts.yml in `folder`: this machine as `localhost` (local connection, this Python) in `groups`,
    for a play that runs a role's tasks here as they run on a host of those groups."""
    inventory = folder / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"localhost": {"ansible_connection": "local"}},
                    "vars": {"ansible_python_interpreter": sys.executable},
                    "children": {group: {"hosts": {"localhost": {}}} for group in groups},
                }
            }
        )
    )
    return inventory
