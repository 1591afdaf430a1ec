"""The preflight download check (issue 25 item 2): gpubring.core.download_reachable's action plugin
computes, on the controller, the downloads the run's phases make on each host (the roles' tasks whose
conditions hold, rendered by Ansible with the host's variables) and its module opens one connection per
host and port, all at once, each within the timeout. Real runs of ansible-playbook on localhost (facts of
a Debian 12 host given, not gathered), one host per case in ONE run: the lab's own variables (nothing
third-party to fetch), a GPU node that owns the container toolkit with no mirror (NVIDIA's repository is
out of reach from this machine: the real resolver's failure, named with gpubring_apt_mirror), the same
with gpubring_apt_mirror on a local HTTP server (reached), and the same through the preflight role's
tasks/downloads.yml (the lines join the host's problems)."""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpubring import lab
from helpers import ansible_playbook, inventory_problems

DEBIAN12 = {
    "os_family": "Debian",
    "distribution": "Debian",
    "distribution_major_version": "12",
    "distribution_release": "bookworm",
    "distribution_version": "12.8",
    "architecture": "x86_64",
    "kernel": "6.1.0-41-amd64",
}
TOOLKIT_KEY = "https://nvidia.github.io/libnvidia-container/gpgkey"


@pytest.fixture(scope="module")
def mirror() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/mirror"
    server.shutdown()


def _lab_vars() -> dict[str, Any]:
    """The variables `lab up` writes for a Debian 12 GPU node (the kernel fact given)."""
    out: dict[str, Any] = {}
    for var in lab.lab_vars():
        if "debian12" in var.distros:
            out[var.name] = DEBIAN12["kernel"] if isinstance(var.value, lab.LabFact) else var.value
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, mirror: str) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("download_reachable")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **_lab_vars()}
    owner = {"nvidia_container_toolkit_owner": "host"}
    hosts = {
        "lab": {},
        "owner": owner,
        "mirrored": {**owner, "gpubring_apt_mirror": mirror},
        "role": owner,
    }
    inventory = {"all": {"vars": local, "children": {"gpu_nodes": {"hosts": hosts}}}}
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    out = tmp / "out"
    play = [
        {
            "name": "The download check",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"ansible_facts": DEBIAN12, "preflight_downloads_timeout": 3},
            "tasks": [
                {
                    "name": "Check",
                    "gpubring.core.download_reachable": {"timeout": 3},
                    "register": "r",
                    "failed_when": False,
                    "when": "inventory_hostname != 'role'",
                },
                {
                    "name": "Through the preflight role",
                    "ansible.builtin.include_role": {
                        "name": "gpubring.core.preflight",
                        "tasks_from": "downloads",
                        # Its role variables (the problem lines, vars/main.yml) seen by the next task.
                        "public": True,
                    },
                    "when": "inventory_hostname == 'role'",
                },
                {
                    "name": "Keep",
                    "ansible.builtin.copy": {
                        "content": "{{ (r if inventory_hostname != 'role' else "
                        "{'failures': __preflight_download_failures}) | to_json }}",
                        "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
                        "mode": "0600",
                    },
                },
            ],
        }
    ]
    (tmp / "play.yml").write_text(yaml.safe_dump(play), encoding="utf-8")
    out.mkdir()
    started = time.monotonic()
    run = ansible_playbook("-i", tmp / "hosts.yml", tmp / "play.yml")
    elapsed = time.monotonic() - started
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    found = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in out.glob("*.json")}
    found["elapsed"] = {"seconds": elapsed}
    return found


def test_the_lab_fetches_nothing_third_party(results: dict[str, dict[str, Any]]) -> None:
    """The lab's variables (driver from Debian, toolkit left to the GPU Operator, phases preflight, host,
    verify) leave no download a mirror variable covers: the online lab passes the check."""
    lab_result = results["lab"]
    assert (lab_result["downloads"], lab_result["problems"], lab_result["not_checked"]) == ([], [], [])


def test_an_unreachable_download_is_named_with_its_variable(results: dict[str, dict[str, Any]]) -> None:
    owner = results["owner"]
    urls = {d["url"] for d in owner["downloads"]}
    assert TOOLKIT_KEY in urls
    assert all(d["variable"] == "gpubring_apt_mirror" for d in owner["downloads"])
    (check,) = owner["checked"]
    assert (check["host"], check["port"], check["ok"]) == ("nvidia.github.io", 443, False)
    line = next(p for p in owner["problems"] if TOOLKIT_KEY in p)
    assert line.startswith(f"download out of reach: {TOOLKIT_KEY} (roles/nvidia_container_toolkit/tasks/")
    assert line.endswith("; set gpubring_apt_mirror to a mirror this host reaches")
    assert "of this run are out of reach from this host" in owner["msg"]
    # Not a hang: the whole run (four hosts, ansible's start-up included) within seconds.
    assert results["elapsed"]["seconds"] < 30


def test_a_reachable_mirror_passes(results: dict[str, dict[str, Any]], mirror: str) -> None:
    mirrored = results["mirrored"]
    assert f"{mirror}/libnvidia-container/gpgkey" in {d["url"] for d in mirrored["downloads"]}
    assert [c["ok"] for c in mirrored["checked"]] == [True]
    assert (mirrored["problems"], mirrored.get("failed", False)) == ([], False)


def test_the_preflight_role_turns_them_into_problem_lines(results: dict[str, dict[str, Any]]) -> None:
    """The role's lines (its checks.yml adds them to the host's problems after its own checks' lines)."""
    failures = results["role"]["failures"]
    assert any(TOOLKIT_KEY in line and "gpubring_apt_mirror" in line for line in failures), failures


def test_host_patterns() -> None:
    from helpers import collection_module

    action = collection_module("action.download_reachable")
    groups = {"all": ["a", "b", "c"], "control_plane": ["a", "b"], "gpu_nodes": ["b", "c"]}
    assert action.host_in("all", "c", groups)
    assert action.host_in("control_plane[0]", "a", groups)
    assert not action.host_in("control_plane[0]", "b", groups)
    assert action.host_in("control_plane:gpu_nodes", "c", groups)
    assert not action.host_in("gpu_nodes:!control_plane", "b", groups)
    assert action.host_in("gpu_nodes:&control_plane", "b", groups)


@pytest.mark.parametrize(
    ("value", "refused"), [("0", True), ("-5", True), ("0.05", True), ("0.5", False), ("5", False)]
)
def test_the_download_timeout_is_bounded_before_any_host(
    make_inventory: Any, value: str, refused: bool
) -> None:
    """A timeout of no time would call every download unreachable: refused by `check`/`up`, naming the key."""
    root = make_inventory({"group_vars/all/downloads.yml": f"preflight_downloads_timeout: {value}\n"})
    problems = [p for p in inventory_problems(root) if "preflight_downloads_timeout" in p]
    assert bool(problems) is refused, problems
    if refused:
        assert "group_vars/all/downloads.yml" in problems[0]
