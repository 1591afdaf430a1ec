"""gpu_acceptance's reads in one call (issue 26 item 1): the GPUs' health, the kernel log (journalctl,
else dmesg), the NVLinks and the PCIe links are one shell task per host (five tasks before, each a
task result of its own), and every check reads what its own command printed, as when it was a task.

The role runs for real on two local hosts that see a synthetic H100 through gpu_facts' root option
(tests/data/record_acceptance.py's tree) and stand-in nvidia-smi, journalctl and dmesg first on PATH:
nvidia-smi prints the captured outputs of tests/fixtures/hw/misc, journalctl fails on one host (so
dmesg is read there) and prints a kernel log on the other (so dmesg must not be called there).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import HW, ansible_playbook_json, module_utils

sys.path.insert(0, str(Path(__file__).resolve().parent / "data"))
from record_acceptance import fake_tree  # tests/data is no package: on sys.path above

E = module_utils("gpu_expect")
NAMES = ["health", "journal", "dmesg", "nvlink", "pcie"]
SMI_Q = HW / "misc" / "nvidia-smi-q-text-8x-h100-80gb-hbm3-535.161.08.txt"
NVLINK = HW / "misc" / "nvidia-smi-nvlink-s-1x-h100-sxm-590.48.01.txt"
XID_79 = "[ 5.1] NVRM: Xid (PCI:0000:9b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
NOISE = "[ 1.0] Linux version 6.1.0 (a line of the kernel log that is no Xid)"
XID_13 = "Nov 28 09:00:00 node kernel: NVRM: Xid (PCI:0000:9b:00): 13, pid=99, Graphics Exception"


def test_each_read_comes_back_as_its_task_registered_it() -> None:
    lines = [
        "health_rc 0",
        "health ==============NVSMI LOG==============",
        "health ",
        "health     Pending Page Blacklist    : No",
        "journal_rc 1",
        "dmesg_rc 0",
        "dmesg [ 1.0] first",
        "dmesg health_rc 7",  # a line of dmesg's output that looks like another read's rc line
        "nvlink_rc -1",
        "stray line from nowhere",
        "other_rc 0",
        "other text",
    ]
    reads = E.parse_reads(lines, NAMES)
    assert reads["health"] == {
        "rc": 0,
        "stdout_lines": ["==============NVSMI LOG==============", "", "    Pending Page Blacklist    : No"],
        "stdout": "==============NVSMI LOG==============\n\n    Pending Page Blacklist    : No",
    }
    assert reads["journal"] == {"rc": 1, "stdout_lines": [], "stdout": ""}
    assert reads["dmesg"]["stdout_lines"] == ["[ 1.0] first", "health_rc 7"]
    assert reads["nvlink"]["rc"] == -1
    assert set(reads) == {"health", "journal", "dmesg", "nvlink"}  # pcie did not run, "other" is no read
    assert E.parse_reads([], NAMES) == {}


def _tools(folder: Path, journal: str | None, called: Path) -> Path:
    """nvidia-smi (`nvlink -s` failing where the journal answers), journalctl (failing when `journal`
    is None) and dmesg (noting each call in `called`)."""
    folder.mkdir()
    nvlink = f"cat {NVLINK}" if journal is None else "exit 3"
    scripts = {
        "nvidia-smi": f'case "$1" in -q) cat {SMI_Q};; nvlink) {nvlink};; *) exit 9;; esac\n',
        "journalctl": "exit 1\n" if journal is None else f"printf '%s\\n' '{NOISE}' '{journal}'\n",
        "dmesg": f"echo called >> {called}\nprintf '%s\\n' '{NOISE}' '{XID_79}'\n",
    }
    for name, body in scripts.items():
        path = folder / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("reads")
    hosts = {}
    for host, journal in (("no-journal", None), ("journal", XID_13)):
        tree = tmp / host / "tree"
        fake_tree(tree, "gpu-1")
        called = tmp / host / "dmesg-called"
        tools = _tools(tmp / host / "bin", journal, called)
        hosts[host] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "acceptance_root": str(tree),
            "acceptance_path": f"{tools}{os.pathsep}{os.environ['PATH']}",
            "dmesg_called": str(called),
        }
    inventory = tmp / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    play = {
        "name": "acceptance",
        "hosts": "gpu_nodes",
        "gather_facts": False,
        "environment": {"PATH": "{{ acceptance_path }}"},
        "module_defaults": {"gpubring.core.gpu_facts": {"root": "{{ acceptance_root }}"}},
        "roles": [
            {
                "role": "gpubring.core.gpu_acceptance",
                "vars": {"gpubring_acceptance_gate": False, "gpu_acceptance_fail_on_failure": True},
            }
        ],
    }
    playbook = tmp / "play.yml"
    playbook.write_text(yaml.safe_dump([play]))
    done = ansible_playbook_json(inventory, playbook)
    # Both hosts fail their acceptance (the H100 capture's slowdowns), at the role's last task.
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    tasks = result["plays"][0]["tasks"]
    per_host: dict[str, Any] = {}
    for host, attrs in hosts.items():
        ran = [
            (t["task"]["name"].removeprefix("gpubring.core.gpu_acceptance : "), t["hosts"][host])
            for t in tasks
            if host in t["hosts"]
        ]
        published = next(r for name, r in ran if name == "Publish gpu_acceptance_result")
        per_host[host] = {
            "names": [name for name, _ in ran],
            "checks": {c["name"]: c for c in published["ansible_facts"]["gpu_acceptance_result"]["checks"]},
            "dmesg_called": Path(attrs["dmesg_called"]).exists(),
            "last": ran[-1],
            "read": next(r for name, r in ran if name.startswith("Read the GPUs' health")),
        }
    return per_host


def test_the_reads_are_one_task_result_per_host(run: dict[str, Any]) -> None:
    for host in run.values():
        reads = [n for n in host["names"] if n.startswith("Read the GPUs' health")]
        assert len(reads) == 1, host["names"]
        before = ("Read the NVLink state", "Read the kernel ring buffer (no journal)")
        assert not [n for n in host["names"] if n in before], host["names"]


def test_each_check_reads_what_its_command_printed(run: dict[str, Any]) -> None:
    for host in run.values():
        checks = host["checks"]
        # nvidia-smi -q: the H100 capture, whose GPUs were slowed down by the hardware.
        health = [c for name, c in checks.items() if name.startswith("gpu_health:")]
        assert len(health) == 8 and {c["status"] for c in health} == {"failed"}, health
        assert "HW Slowdown" in health[0]["reason"]
        # The synthetic device has no PCIe link in this machine's sysfs.
        assert checks["pcie"]["status"] == "skipped", checks["pcie"]


def test_a_failed_check_fails_the_host_naming_it(run: dict[str, Any]) -> None:
    for name, host in run.items():
        task, result = host["last"]
        assert task == "Fail the host when a check failed, or when nothing could be measured"
        assert result.get("failed"), result
        assert result["msg"].startswith(f"gpu_acceptance: {name} failed gpu_health:0000:19:00.0, "), result
        assert "clocks slowed down by HW Slowdown" in result["msg"], result


def test_the_nvlink_check_reads_its_commands_answer(run: dict[str, Any]) -> None:
    # nvidia-smi nvlink -s answered: the check ran (the synthetic topology expects no NVLink).
    answered = run["no-journal"]["checks"]["nvlink:0000:9b:00.0"]
    assert (answered["status"], answered["reason"]) == ("skipped", "no NVLink expected (topology shows none)")
    # It failed (exit 3): the check fails with its exit code.
    failed = run["journal"]["checks"]["nvlink"]
    assert (failed["status"], failed["measured"]) == ("failed", "rc 3"), failed


def test_only_the_xid_lines_of_the_kernel_log_come_back(run: dict[str, Any]) -> None:
    for host in run.values():
        lines = host["read"]["stdout_lines"]
        assert any("NVRM: Xid" in line for line in lines), lines
        assert not [line for line in lines if "no Xid" in line], lines


def test_dmesg_is_read_only_when_the_journal_cannot_be(run: dict[str, Any]) -> None:
    # journalctl failed: the Xid 79 of dmesg fails the check.
    assert run["no-journal"]["dmesg_called"]
    xid = run["no-journal"]["checks"]["gpu_xid"]
    assert xid["status"] == "failed" and "79" in json.dumps(xid), xid
    # journalctl answered (an application's Xid 13, ignored): dmesg is never called.
    assert not run["journal"]["dmesg_called"]
    assert run["journal"]["checks"]["gpu_xid"]["status"] == "passed", run["journal"]["checks"]["gpu_xid"]
