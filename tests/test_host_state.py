"""Hosts left as they are (issue 26 item 1): gpubring.core.host_state and the host phase's gate.

A converged host that nothing changed skips the host phase's roles: playbooks/host.yml's first play
compares each host with the record its last complete host phase wrote, and only the others run the
roles. Two things keep that honest, and are tested here:

- the module finds a change: it runs for real (ansible-playbook, this machine as the host) on folders of
  the test's own, and says which part changed, that a blocker (a pending reboot) keeps the host in the
  run, and that other inputs are no match;
- what it reads covers what the roles write: every file path a task of the host phase's roles writes
  (template, copy, file, lineinfile, ...) lies under a path of playbooks/vars/host_state.yml.
The lab's drift test (tests/test_e2e_lab.py) changes four things by hand on a converged node and sees
each found and put back through this gate.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from gpubring.run import hoststate
from gpubring.run.settings import RunSettings
from gpubring.runopts import RunOptions
from helpers import BIN, REPO, collection_env, tasks_in

HOST_YML = REPO / "playbooks" / "host.yml"
STATE_VARS = yaml.safe_load((REPO / "playbooks" / "vars" / "host_state.yml").read_text())


def _play(tmp_path: Path, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """`tasks` on this machine (local connection), each result kept by its name."""
    out = tmp_path / "results.json"
    keep = {
        "name": "Keep the results",
        "ansible.builtin.copy": {"dest": str(out), "content": "{{ results | to_json }}", "mode": "0600"},
        "vars": {"results": {t["register"]: f"{{{{ {t['register']} }}}}" for t in tasks}},
    }
    play = [
        {
            "name": "host_state on this machine",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": sys.executable},
            "tasks": [*tasks, keep],
        }
    ]
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump(play))
    env = collection_env(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="1"
    )
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(path)],
        capture_output=True, text=True, env=env, cwd=REPO, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return dict(json.loads(out.read_text()))


def _state(name: str, mode: str, args: dict[str, Any], **when: Any) -> dict[str, Any]:
    task: dict[str, Any] = {
        "name": name,
        "gpubring.core.host_state": {"mode": mode, **args},
        "register": name,
    }
    task.update(when)
    return task


def test_the_module_finds_each_change_and_records_only_without_a_pending_reboot(tmp_path: Path) -> None:
    managed = tmp_path / "etc"
    (managed / "conf.d").mkdir(parents=True)
    (managed / "conf.d" / "a.conf").write_text("x = 1\n")
    link_target = tmp_path / "target"
    link_target.write_text("t")
    (managed / "link").symlink_to(link_target)
    flag = tmp_path / "reboot-required"
    record = tmp_path / "state" / "host-state.json"
    args = {
        "inputs": "digest-1",
        "paths": [str(managed), str(tmp_path / "absent"), str(tmp_path / "glob*")],
        "blockers": [str(flag)],
        "record": str(record),
    }
    changes = [
        ("file_edit", f"echo 'x = 2' > {managed}/conf.d/a.conf"),
        ("file_added", f"touch {managed}/conf.d/b.conf"),
        ("mode", f"chmod 0600 {managed}/conf.d/b.conf"),
        ("link", f"ln -sfn {tmp_path} {managed}/link"),
        ("absent_created", f"touch {tmp_path}/absent"),
        ("glob_match", f"mkdir {tmp_path}/glob1"),
    ]
    tasks = [
        _state("first", "check", args),
        _state("recorded", "record", args),
        _state("same", "check", args),
        _state("other_inputs", "check", {**args, "inputs": "digest-2"}),
    ]
    for name, command in changes:
        tasks.append({"name": f"change {name}", "ansible.builtin.shell": command, "register": f"cmd_{name}"})
        tasks.append(_state(name, "check", args))
        tasks.append(_state(f"rerecord_{name}", "record", args))
    tasks += [
        {"name": "flag a reboot", "ansible.builtin.copy": {"dest": str(flag), "content": "", "mode": "0644"},
         "register": "flag_written"},
        _state("blocked", "check", args),
        _state("blocked_record", "record", args),
    ]  # fmt: skip
    results = _play(tmp_path, tasks)

    assert results["first"]["converged"] is False and results["first"]["reasons"] == ["no record"]
    assert results["recorded"]["recorded"] is True and results["recorded"]["changed"] is True
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    assert json.loads(record.read_text())["inputs"] == "digest-1"
    assert results["same"]["converged"] is True and results["same"]["reasons"] == []
    assert results["other_inputs"]["converged"] is False and results["other_inputs"]["reasons"] == ["inputs"]
    for name, _ in changes:
        assert results[name]["converged"] is False, name
        assert results[name]["reasons"] == ["files"], (name, results[name]["reasons"])
    assert results["blocked"]["converged"] is False
    assert results["blocked"]["reasons"] == [f"blocker {flag}"]
    assert results["blocked_record"]["recorded"] is False
    # The record still holds the state before the reboot flag: the next check is no match either.
    assert json.loads(record.read_text())["parts"] == results["rerecord_glob_match"]["parts"]


def test_the_module_refuses_empty_inputs_and_relative_paths(tmp_path: Path) -> None:
    tasks = [
        _state("empty", "check", {"inputs": " "}, ignore_errors=True),
        _state("relative", "check", {"inputs": "d", "paths": ["etc/x"]}, ignore_errors=True),
    ]
    results = _play(tmp_path, tasks)
    assert results["empty"]["failed"] and "inputs is empty" in results["empty"]["msg"]
    assert results["relative"]["failed"] and "paths must be absolute, got etc/x" in results["relative"]["msg"]


# --- the gate in playbooks/host.yml ---------------------------------------------------------------


def test_every_play_leaves_out_an_unchanged_host_first_and_the_reboot_play_records_the_others() -> None:
    plays = yaml.safe_load(HOST_YML.read_text())
    gate, *rest = plays
    assert gate["hosts"] == "all" and "roles" not in gate
    (check,) = gate["tasks"]
    assert check["gpubring.core.host_state"]["inputs"] == "{{ gpubring_host_inputs }}"
    assert check["register"] == "__gpubring_host_state" and "always" in check["tags"]
    for play in rest:
        first = play["pre_tasks"][0]
        assert first["ansible.builtin.meta"] == "end_host", play["name"]
        assert first["when"] == "__gpubring_host_state.converged | default(false)", play["name"]
        assert "always" in first["tags"], play["name"]
    record = rest[-1]["post_tasks"][-1]
    assert record["gpubring.core.host_state"]["mode"] == "record"
    assert "not ansible_check_mode" in record["when"]
    assert "gpubring_reboot_pending | default([]) | length == 0" in record["when"]


def _settings(tmp_path: Path, *extra: dict[str, Any]) -> RunSettings:
    return RunSettings(
        inventory_root=tmp_path / "inv", hosts_file=tmp_path / "inv" / "hosts.yml",
        options=RunOptions(extra_vars=tuple(extra)),
    )  # fmt: skip


def test_the_inputs_change_with_the_inventory_and_the_extra_vars_not_the_runs(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all: {}\n")
    (inv / "group_vars" / "all" / "main.yml").write_text("containerd_version: '1.7'\n")
    first = hoststate.inputs_digest(_settings(tmp_path))
    assert len(first) == 64 and first == hoststate.inputs_digest(_settings(tmp_path))
    (inv / ".gpubring" / "runs" / "x").mkdir(parents=True)  # runs, facts, locks: not inputs
    (inv / ".gpubring" / "runs" / "x" / "report.json").write_text("{}")
    assert hoststate.inputs_digest(_settings(tmp_path)) == first
    assert hoststate.inputs_digest(_settings(tmp_path, {"kernel_hugepages": 4})) != first
    (inv / "group_vars" / "all" / "main.yml").write_text("containerd_version: '2.0'\n")
    assert hoststate.inputs_digest(_settings(tmp_path)) != first


def test_a_fifo_in_the_inventory_folder_is_named_not_read(tmp_path: Path) -> None:
    """Reading a FIFO blocks until a writer comes: the digest would hang the run before any host."""
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all: {}\n")
    os.mkfifo(inv / "pipe")
    digest = hoststate.inputs_digest(_settings(tmp_path))
    (inv / "pipe").unlink()
    assert hoststate.inputs_digest(_settings(tmp_path)) != digest


# --- what the module reads covers what the roles write ---------------------------------------------

HOST_ROLES = (
    "kernel", "containerd", "nvidia_driver", "nvidia_container_toolkit", "rdma", "kubelet_topology", "reboot",
)  # fmt: skip
WRITERS = {
    "ansible.builtin.template": "dest",
    "ansible.builtin.copy": "dest",
    "ansible.builtin.file": "path",
    "ansible.builtin.lineinfile": "path",
    "ansible.builtin.blockinfile": "path",
    "ansible.builtin.replace": "path",
    "ansible.builtin.get_url": "dest",
    "community.general.ini_file": "path",
}
# Not configuration: the reboot flags (blockers: a host with one always runs the roles), device nodes, and
# the kubelet's own checkpoints, which kubelet_topology removes only when a policy of its drop-in (read)
# changes.
NOT_STATE = ("/run/reboot-required*", "/dev/*", "/var/lib/kubelet/*_manager_state")


def _role_vars(role: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for folder in ("defaults", "vars"):
        for path in sorted((REPO / "roles" / role / folder).glob("*.yml")):
            found.update(yaml.safe_load(path.read_text()) or {})
    return found


class _Any(jinja2.Undefined):
    def __str__(self) -> str:
        return "*"


def _resolve(text: str, variables: dict[str, Any]) -> str:
    env = jinja2.Environment(undefined=_Any)
    env.filters.update(dirname=os.path.dirname, basename=os.path.basename)
    env.filters.setdefault("default", lambda value, *_: value)
    for _ in range(6):
        if "{{" not in text:
            break
        try:
            text = env.from_string(text).render(**variables)
        except jinja2.TemplateError:  # a filter this walk does not know: that expression is any name
            text = re.sub(r"\{\{.*?\}\}", "*", text)
    return text


def _loop_paths(expression: str, variables: dict[str, Any]) -> list[str]:
    """The paths a loop expression can give: its quoted absolute paths (one followed by `~` as a prefix of
    any name) and the role variables it names that hold an absolute path."""
    found = [m[1] + ("*" if m[2] else "") for m in re.finditer(r"'(/[^']*)'(\s*~)?", expression)]
    for name in re.findall(r"\b([A-Za-z_]\w*)\b", expression):
        value = variables.get(name)
        values = value if isinstance(value, list) else [value]
        for each in values:
            if isinstance(each, str) and _resolve(each, variables).startswith("/"):
                found.append(_resolve(each, variables))
    return found or ["*"]


def _written_paths() -> list[tuple[str, str]]:
    written = []
    for role in HOST_ROLES:
        variables = _role_vars(role)
        for path in sorted((REPO / "roles" / role).glob("*/*.yml")):
            if path.parent.name not in ("tasks", "handlers"):
                continue
            for task in tasks_in(yaml.safe_load(path.read_text())):
                for module, key in WRITERS.items():
                    args = task.get(module)
                    if isinstance(args, dict) and isinstance(args.get(key), str):
                        target = args[key]
                        if target.strip() == "{{ item }}":
                            loop = task.get("loop") or task.get("with_items") or []
                            targets = loop if isinstance(loop, list) else _loop_paths(loop, variables)
                        else:
                            targets = [target]
                        where = f"{path.relative_to(REPO)}: {task.get('name')}"
                        written += [(where, _resolve(str(each), variables)) for each in targets]
    return written


def _covered(path: str) -> bool:
    if any(fnmatch.fnmatch(path, pattern) for pattern in NOT_STATE):
        return True
    for top in STATE_VARS["gpubring_host_state_paths"]:
        if fnmatch.fnmatch(path, top) or fnmatch.fnmatch(path, top.rstrip("/") + "/*"):
            return True
    return False


def test_every_path_the_host_roles_write_is_read_by_the_gate() -> None:
    written = _written_paths()
    assert len(written) > 30, written  # the walk found the roles' writers
    missing = [f"{where}: {path}" for where, path in written if not _covered(path)]
    assert missing == [], "paths the host phase writes that host_state does not read:\n" + "\n".join(missing)


@pytest.mark.parametrize("path", ["/etc/passwd", "/opt/other/file"])
def test_a_path_outside_the_read_folders_is_not_covered(path: str) -> None:
    assert not _covered(path)


# --- what the run report and the summary say -------------------------------------------------------


def _verdict(host: str, unchanged: bool, reasons: list[str]) -> dict[str, Any]:
    """A result of the gate's check task as ansible-runner's job event carries it."""
    facts = {"gpubring_host_state": {"unchanged": unchanged, "reasons": reasons}}
    return {
        "event": "runner_on_ok",
        "event_data": {
            "host": host,
            "task": "Compare the host with the record of its last complete host phase",
            "res": {
                "changed": False,
                "ansible_facts": facts,
            },
        },
    }


def test_the_report_and_the_summary_name_the_hosts_left_as_they_were_and_why_the_others_ran(
    tmp_path: Path,
) -> None:
    from datetime import UTC, datetime

    from gpubring import report, view
    from helpers import folded

    state = folded(
        [
            _verdict("gpu01", True, []),
            _verdict("gpu02", False, ["files", "packages"]),
            _verdict("cpu01", True, []),
            _verdict("gpu03", False, ["no record"]),
        ]
    )
    now = datetime.now(UTC)
    meta = report.RunMeta("up", tmp_path, tmp_path / "hosts.yml", tmp_path, "run.yml", now, now, 0)
    doc = report.build(state, meta)
    assert doc["host_state"] == {
        "cpu01": {"unchanged": True, "reasons": []},
        "gpu01": {"unchanged": True, "reasons": []},
        "gpu02": {"unchanged": False, "reasons": ["files", "packages"]},
        "gpu03": {"unchanged": False, "reasons": ["no record"]},
    }
    again = report.RunReport.from_json(doc)
    assert again.to_json()["host_state"] == doc["host_state"]
    lines = [str(line) for line in view.host_state_lines(again)]
    assert lines == [
        "left as their last complete host phase left them (its roles skipped; --full runs them): "
        "2 host(s): cpu01, gpu01",
        "host phase ran (files, packages): gpu02",
        "host phase ran (no record): gpu03",
    ]
