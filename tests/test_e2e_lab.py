"""End to end: a 3-node lab (1 control plane, 1 GPU node, 1 CPU node) and `gpubring up` over real SSH,
twice.

The test session's one lab, for the whole file; pytest runs the tests in file order, and the order
matters. First, on the fresh lab, `gpubring up --check` of the preflight and host phases fails no task
and changes nothing. Then the first real run converges the lab's phases; the second must report 0
changed on every host, read from the run's JSON report, and so must a plain `ansible-playbook
playbooks/host.yml` (the vars plugin gives it what gpubring gives a run). Then `gpubring up --check`
dry-runs the cluster and platform phases the lab cannot run for real, as far as the unreachable
repositories allow, and the upgrade playbook reads every node. Then the faults: a node's container
killed during the host phase (the others finish, exit 4, a re-run converges once it is back) and SIGTERM
during a role (exit 3, a re-run converges, a third changes nothing). Last, the node lifecycle: the lab
grows by a CPU node that `node add` sets up alone, the GPU node's container is replaced by a fresh one
that `node replace` sets up alone, `node remove` is refused (cluster phase), and `reset` plans without
--yes and resets the GPU node with it. The lab is torn down whatever happens. The lab uses its own prefix
and a temporary inventory folder, so a user's `inventories/lab` lab is never touched.

One GPU node and one CPU node rather than the README lab's two GPU nodes: every kind of node runs the
phases from the first `up` on (the CPU node's host setup without the GPU roles), and the NVIDIA driver's
DKMS build, the costliest step of the file on the test machine's two cores, runs twice (the first `up`
and `node replace`) instead of three times; two GPU nodes would run the same roles on one more host.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
# Its own prefix per test process: two e2e runs at once (a developer's and the test command's) never
# share containers, and neither touches the README's `gpub` lab.
PREFIX = f"gpube2e{os.getpid()}"
GPU = f"{PREFIX}-gpu1"
CPU = f"{PREFIX}-cpu1"
NODES = {f"{PREFIX}-cp1", GPU, CPU}
# `lab up` builds the shape it is asked for (the defaults are the README lab's two GPU nodes): every
# call for this lab names it. The GPU node runs Debian 13 and the control plane and CPU node Debian 12,
# so that each release goes through the host phase here, and the NVIDIA driver's DKMS build on each
# release runs in one place per test command: Debian 13's here, Debian 12's in the nvidia_driver
# Molecule scenario (README, "Operating system releases").
SHAPE = ("--nodes", "3", "--control-planes", "1", "--cpu-nodes", "1", "--gpu-distro", "debian13")
# The same lab grown by a CPU node (the node lifecycle tests), its GPU node still on Debian 13.
GROWN = ("--nodes", "4", "--cpu-nodes", "2", "--gpu-distro", "debian13")

pytestmark = pytest.mark.e2e


def gpubring(*args: str | Path, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child process, as an operator runs it (no TTY: plain progress lines)."""
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gpubring", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO, env=env,
    )  # fmt: skip


def on(node: str, script: str) -> subprocess.CompletedProcess[str]:
    """A shell script run in a lab node's container (as root), not over SSH."""
    return subprocess.run(
        ["docker", "exec", node, "bash", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


# What `up` writes on a lab GPU node: containerd's configuration, kubelet topology's drop-in, the
# driver's modules. (The lab leaves the container toolkit to the GPU Operator: no nvidia runtime drop-in.)
HOST_SETUP = (
    "/etc/containerd/config.toml",
    "/etc/kubernetes/kubelet.conf.d/50-gpubring-topology.conf",
    "/etc/modules-load.d/nvidia.conf",
)


def _tail(proc: subprocess.CompletedProcess[str], lines: int = 60) -> str:
    out = (proc.stdout + "\n" + proc.stderr).strip().splitlines()
    return "\n".join(out[-lines:])


def host_stats(report: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Per-host ok/changed/failed/unreachable/skipped from a run report (its `stats`)."""
    return {host: {k: int(v) for k, v in counts.items()} for host, counts in report["stats"].items()}


def _changed_tasks(proc: subprocess.CompletedProcess[str]) -> str:
    """The lines of a run's output that name changed tasks (plain, non-TTY output)."""
    lines = [ln for ln in proc.stdout.splitlines() if "changed" in ln.lower()]
    return "\n".join(lines[-40:]) or _tail(proc)


# The lab runs air-gapped (issue 25 item 3): `lab up --airgap DIR` builds the apt part of a bundle for
# the lab's nodes into DIR (`gpubring bundle --only apt` of an inventory of the lab's shape, with the
# kernel and ccache `lab up` installs on GPU nodes), puts the nodes on an internal network with no route
# out and a mirror container serving DIR as their only apt source. So every `up` below, the first host
# phase with its DKMS build included, installs from the bundle alone. DIR is this machine's cache (a
# second test run resumes it in seconds; GPUBRING_E2E_BUNDLE names another). GPUBRING_E2E_ONLINE=1
# runs the lab online instead, to tell an air-gap problem from another.
ONLINE = os.environ.get("GPUBRING_E2E_ONLINE", "") == "1"
BUNDLE = Path(
    os.environ.get("GPUBRING_E2E_BUNDLE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpubring" / "e2e-bundle"
)
AIRGAP_ONLY = pytest.mark.skipif(ONLINE, reason="GPUBRING_E2E_ONLINE=1: the e2e lab runs online")


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A running 3-node lab (control plane, GPU node, CPU node), air-gapped unless GPUBRING_E2E_ONLINE=1;
    `gpubring lab down` always runs afterwards, whatever the tests did."""
    engine = subprocess.run(
        ["bash", str(REPO / "scripts" / "engine.sh")], capture_output=True, text=True, check=False
    )
    if engine.returncode != 0:
        pytest.skip("no Docker engine could be started (scripts/engine.sh): " + _tail(engine, 10))
    base = tmp_path_factory.mktemp("e2e-lab")
    inventory = base / "lab"
    try:
        airgap = () if ONLINE else ("--airgap", BUNDLE)
        up = gpubring(
            "lab", "up", *SHAPE, *airgap, "--prefix", PREFIX, "--inventory-dir", inventory, timeout=1800,
        )  # fmt: skip
        assert up.returncode == 0, f"gpubring lab up failed:\n{_tail(up)}"
        yield inventory
    finally:
        runs = inventory / ".gpubring"
        if runs.is_dir():  # keep the run folders for a post-mortem; the lab itself goes
            shutil.copytree(runs, base / "kept-runs", dirs_exist_ok=True)
        down = gpubring("lab", "down", "--prefix", PREFIX, "--inventory-dir", inventory, timeout=300)
        assert down.returncode == 0, f"gpubring lab down failed:\n{_tail(down)}"


def test_lab_status_shows_every_node_answering_ssh(lab_dir: Path) -> None:
    status = gpubring("lab", "status", "--inventory-dir", lab_dir, timeout=120)
    assert status.returncode == 0, _tail(status)
    for node in NODES:
        line = next((ln for ln in status.stdout.splitlines() if node in ln), "")
        assert "running" in line and "answers" in line, status.stdout


def test_lab_up_again_reuses_the_running_lab(lab_dir: Path) -> None:
    before = json.loads((lab_dir / ".gpubring-lab.json").read_text())
    again = gpubring("lab", "up", *SHAPE, "--inventory-dir", lab_dir, timeout=900)
    assert again.returncode == 0, _tail(again)
    reused = sorted(ln.split()[1] for ln in again.stdout.splitlines() if ln.startswith("reuse "))
    # An air-gapped lab's mirror container is reused too, and its bundle resumed (nothing to fetch).
    assert reused == sorted(NODES | (set() if ONLINE else {f"{PREFIX}-mirror"}))
    assert "create " not in again.stdout
    after = json.loads((lab_dir / ".gpubring-lab.json").read_text())
    assert after["nodes"] == before["nodes"]


def test_host_key_checking_is_on(lab_dir: Path) -> None:
    """Ansible reaches a node through the lab inventory, and refuses it once its known key is wrong."""
    node = f"{PREFIX}-gpu1"
    env = {**os.environ, "ANSIBLE_SSH_ARGS": "-o ControlMaster=no", "ANSIBLE_HOST_KEY_CHECKING": "True"}
    ansible = [
        str(Path(sys.executable).parent / "ansible"),
        node,
        "-i",
        str(lab_dir),
        "-m",
        "ansible.builtin.ping",
    ]

    def ping() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ansible, capture_output=True, text=True, timeout=120, check=False, cwd=REPO, env=env
        )

    good = ping()
    assert good.returncode == 0, good.stdout + good.stderr
    known = lab_dir / ".ssh" / "known_hosts"
    original = known.read_text()
    nodes = json.loads((lab_dir / ".gpubring-lab.json").read_text())["nodes"]
    # known_hosts names a node `[127.0.0.1]:PORT`, or an air-gapped one by its own address (port 22).
    ends = {
        n["name"]: n["address"] if n["port"] == 22 else f"[{n.get('address', '127.0.0.1')}]:{n['port']}"
        for n in nodes
    }
    mine, other = f"{ends[node]} ", f"{ends[f'{PREFIX}-cp1']} "
    lines = original.splitlines()
    # gpu1's entries replaced by cp1's keys: the key gpu1 presents no longer matches.
    swapped = [ln for ln in lines if not ln.startswith(mine)]
    swapped += [ln.replace(other, mine, 1) for ln in lines if ln.startswith(other)]
    try:
        known.write_text("\n".join(swapped) + "\n")
        bad = ping()
    finally:
        known.write_text(original)
    assert bad.returncode != 0
    assert "Host key verification failed" in bad.stdout + bad.stderr, bad.stdout + bad.stderr


def test_a_download_no_mirror_covers_fails_preflight_naming_it(lab_dir: Path) -> None:
    """The container toolkit owned by the host needs NVIDIA's repository, which neither the air-gapped
    lab nor this machine reaches, and gpubring_apt_mirror is empty: the preflight phase fails on the GPU
    node naming the download and the variable (not a timeout later in the host phase),
    and changes nothing."""
    run = gpubring(
        "up", lab_dir, "--only", "preflight", "-e", "nvidia_container_toolkit_owner=host", timeout=300
    )
    out = " ".join((run.stdout + run.stderr).split())  # the summary wraps long lines
    assert run.returncode != 0, _tail(run)
    # The preflight check's own line (a run that timed out later would name no download or variable).
    assert "download out of reach: https://nvidia.github.io/libnvidia-container/gpgkey" in out, _tail(run)
    assert "set gpubring_apt_mirror to a mirror this host reaches" in out, _tail(run)
    assert "Traceback" not in out


def _archive_host() -> str | None:
    """The host of this machine's first apt source (its own configuration; no registry named here)."""
    for path in [*sorted(Path("/etc/apt").glob("sources.list.d/*.sources")), Path("/etc/apt/sources.list")]:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        found = re.search(r"^(?:URIs:|deb(?:\s+\[[^]]*\])?)\s+https?://([^/\s:]+)", text, re.MULTILINE)
        if found:
            return found.group(1)
    return None


_CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], 80), timeout=5).close()\n"
    "    print('OPEN')\n"
    "except OSError as exc:\n"
    "    print('CLOSED', exc)\n"
)


@AIRGAP_ONLY
def test_an_airgapped_node_reaches_nothing_but_the_mirror(lab_dir: Path) -> None:
    """From inside each node: apt's sources name only the lab's mirror, the Debian archive this machine
    installs from (which this machine reaches) cannot be reached, and the mirror answers."""
    mirror = f"http://{PREFIX}-mirror/apt/"
    archive = _archive_host()
    assert archive, "no apt source on this machine to try from the nodes"
    here = subprocess.run(
        [sys.executable, "-c", _CONNECT, archive], capture_output=True, text=True, check=False, timeout=60
    )
    assert here.stdout.startswith("OPEN"), f"this machine does not reach {archive}: {here.stdout}"
    for node in sorted(NODES):
        sources = on(
            node, "grep -rhv '^#' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null || true"
        )
        lines = [ln for ln in sources.stdout.splitlines() if ln.strip()]
        assert lines and all(mirror in ln for ln in lines), (node, lines)
        out = on(node, f"python3 -c \"$(cat <<'EOF'\n{_CONNECT}EOF\n)\" {archive}")
        assert out.stdout.startswith("CLOSED"), (node, archive, out.stdout, out.stderr)
        fetched = on(
            node, f"python3 -c 'import urllib.request as u; print(u.urlopen(\"{mirror}\", timeout=5).status)'"
        )
        assert fetched.stdout.strip() == "200", (node, fetched.stdout, fetched.stderr)


def test_check_mode_on_a_fresh_lab_fails_no_task(lab_dir: Path, tmp_path: Path) -> None:
    """Before the first real run: `up --check` of preflight and host goes through every host role.

    Must run before test_up_twice_the_second_run_changes_nothing (file order): it needs hosts that no
    run has touched yet."""
    run = gpubring("up", lab_dir, "--check", "--only", "preflight,host", "--json", tmp_path / "f.json")
    assert run.returncode == 0, f"`gpubring up --check` on a fresh lab failed:\n{_tail(run)}"
    report = json.loads((tmp_path / "f.json").read_text())
    assert report["options"]["check"] is True
    assert report["phases"]["run"] == ["preflight", "host"]
    stats = host_stats(report)
    assert set(stats) == NODES, stats
    for host, counts in stats.items():
        assert counts["ok"] > 0 and counts["failed"] == 0 and counts["unreachable"] == 0, (host, counts)
    # No failure let pass either: what check mode cannot look at before an install (a package's hold,
    # version, DKMS build, units) is skipped by the roles, which say so.
    assert report["ignored"] == [], report["ignored"]
    said = "\n".join(_run_messages(report))
    for node in sorted(NODES):
        assert f"Check mode: containerd is not installed on {node} yet" in said, said
    assert f"Check mode: the driver packages are not installed on {GPU} yet" in said, said
    # The GPU roles are left out on the control plane and the CPU node.
    for node in sorted(NODES - {GPU}):
        assert f"the driver packages are not installed on {node}" not in said, said

    # Check mode changed nothing: no driver, no kubelet drop-in, no modules-load.d entry.
    for path in ("/etc/modules-load.d/nvidia.conf", "/etc/kubernetes/kubelet.conf.d", "/usr/bin/nvidia-smi"):
        probe = subprocess.run(
            ["docker", "exec", f"{PREFIX}-gpu1", "test", "-e", path], capture_output=True, check=False
        )
        assert probe.returncode == 1, f"{path} exists on {PREFIX}-gpu1 after a check-mode run"


def test_up_twice_the_second_run_changes_nothing(lab_dir: Path, tmp_path: Path) -> None:
    first = gpubring("up", lab_dir, "--json", tmp_path / "r1.json")
    assert first.returncode == 0, f"first `gpubring up` failed:\n{_tail(first)}"
    r1 = host_stats(json.loads((tmp_path / "r1.json").read_text()))
    assert set(r1) == NODES, r1
    for host, stats in r1.items():
        assert stats["ok"] > 0, (host, stats)
        assert stats["failed"] == 0 and stats["unreachable"] == 0, (host, stats)
    # The lab runs preflight, host and verify; the report says which phases were skipped and why.
    phases = json.loads((tmp_path / "r1.json").read_text())["phases"]
    assert phases["run"] == ["preflight", "host", "verify"]
    assert [p["phase"] for p in phases["skipped"]] == ["cluster", "platform"]
    assert all("kubelet" in p["reason"] for p in phases["skipped"])

    second = gpubring("up", lab_dir, "--json", tmp_path / "r2.json")
    assert second.returncode == 0, f"second `gpubring up` failed:\n{_tail(second)}"
    r2 = host_stats(json.loads((tmp_path / "r2.json").read_text()))
    assert set(r2) == NODES, r2
    changed = {host: stats["changed"] for host, stats in r2.items()}
    assert changed == dict.fromkeys(NODES, 0), (
        f"the second run changed something: {changed}\n{_changed_tasks(second)}"
    )
    # Issue 26 item 1: the first run recorded each node's state; the second found every node as it was
    # left and ran none of the host phase's roles on it (test_plain_ansible_playbook_... below runs them
    # all, without gpubring's inputs, and sees them converged; the drift test sees a change found).
    assert _roles_run(tmp_path / "r1.json", "kernel") == NODES
    assert _roles_run(tmp_path / "r2.json", "kernel") == set(), "a node left as it was ran the kernel role"


def _roles_run(report_path: Path, role: str) -> set[str]:
    """The hosts on which a task of `role` ran (ok, changed or skipped) in a run (its job events)."""
    report = json.loads(report_path.read_text())
    hosts = set()
    for path in Path(report["run_folder"]).glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        ran = str(event.get("event", "")).startswith("runner_on_")
        if ran and data.get("role") == role and data.get("host"):
            hosts.add(str(data["host"]))
    return hosts


# Issue 26 item 1: the host phase does less per host, and must still find a host changed by hand.
SYSCTL_FILE = "/etc/sysctl.d/90-gpubring.conf"  # the kernel role's sysctl file
GRUB_DROPIN = "/etc/default/grub.d/gpubring.cfg"  # the kernel role's GRUB drop-in (kernel arguments)


def _changed_tasks_on(report_path: Path, host: str) -> set[str]:
    """The tasks and handlers that changed something on `host`, read from the run's job events (every
    ansible-playbook process of the run, shards included)."""
    report = json.loads(report_path.read_text())
    names = set()
    for path in Path(report["run_folder"]).glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("host") == host and data["res"].get("changed"):
            names.add(str(data.get("task")))
    return names


def test_drift_on_the_converged_gpu_node_is_found_and_fixed(lab_dir: Path, tmp_path: Path) -> None:
    """Four things changed by hand on the converged GPU node: containerd's config.toml (systemd cgroups
    off), the hold on the containerd package, a value in the kernel role's sysctl file (a container does
    not apply sysctls live, kernel_sysctl_apply_now is false: the file is what the role owns) and a kernel
    argument in the kernel role's GRUB drop-in (the lab asks for none, so the hand-written drop-in is the
    drift). One host-phase run reports each as changed and puts it back; the next changes nothing."""
    sysctls = on(GPU, f"cat {SYSCTL_FILE}")
    assert sysctls.returncode == 0, sysctls.stderr
    key, value = next(
        (k.strip(), v.strip())
        for k, _, v in (line.partition(" = ") for line in sysctls.stdout.splitlines())
        if v.strip().isdigit()
    )
    drift = on(
        GPU,
        "set -e\n"
        "grep -q 'SystemdCgroup = true' /etc/containerd/config.toml\n"
        "sed -i 's/SystemdCgroup = true/SystemdCgroup = false/' /etc/containerd/config.toml\n"
        "apt-mark showhold | grep -qx containerd\n"
        "apt-mark unhold containerd\n"
        f"sed -i 's/^{key} = .*/{key} = {int(value) + 1}/' {SYSCTL_FILE}\n"
        f"test ! -e {GRUB_DROPIN}\n"
        "mkdir -p /etc/default/grub.d\n"
        f"echo 'GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX nosmt\"' > {GRUB_DROPIN}\n",
    )
    assert drift.returncode == 0, f"could not change the GPU node by hand:\n{_tail(drift)}"

    fix = gpubring("up", lab_dir, "--only", "host", "--json", tmp_path / "fix.json")
    assert fix.returncode == 0, f"the run after the drift failed:\n{_tail(fix)}"
    changed = _changed_tasks_on(tmp_path / "fix.json", GPU)
    for task in (
        "Write /etc/containerd/config.toml (owned whole)",  # containerd
        "Restart containerd",  # its handler: the fixed configuration is live
        "Hold the containerd package",  # containerd
        "Write the sysctls applied at every boot",  # kernel
        "Remove the GRUB drop-in when no kernel argument is asked for",  # kernel
    ):
        assert task in changed, f"{task!r} did not change on {GPU}; changed: {sorted(changed)}"
    fixed = on(
        GPU,
        "grep -c 'SystemdCgroup = true' /etc/containerd/config.toml; apt-mark showhold; "
        f"grep '^{key} = ' {SYSCTL_FILE}; test ! -e {GRUB_DROPIN} && echo no-dropin; "
        "systemctl is-active containerd",
    )
    assert "containerd\n" in fixed.stdout and f"{key} = {value}\n" in fixed.stdout, fixed.stdout
    assert "no-dropin\nactive" in fixed.stdout and not fixed.stdout.startswith("0"), fixed.stdout
    # The removed kernel argument flags a reboot (the lab allows none, the report names it pending);
    # a reboot would clear /run, and so does the test, leaving the lab as the next tests expect it.
    assert GPU in json.loads((tmp_path / "fix.json").read_text())["reboot_pending"]
    cleared = on(GPU, "rm -f /run/reboot-required /run/reboot-required.pkgs")
    assert cleared.returncode == 0, cleared.stderr

    again = gpubring("up", lab_dir, "--only", "host", "--json", tmp_path / "again.json")
    assert again.returncode == 0, f"the run after the fix failed:\n{_tail(again)}"
    stats = host_stats(json.loads((tmp_path / "again.json").read_text()))
    assert {host: counts["changed"] for host, counts in stats.items()} == dict.fromkeys(NODES, 0), (
        _changed_tasks(again)
    )


RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)"
)


def test_plain_ansible_playbook_finds_the_converged_host_phase(lab_dir: Path) -> None:
    """Issue 10 item 2: `ansible-playbook playbooks/host.yml` without gpubring gets the settings defaults and
    the version matrix from the vars plugin, so on the hosts gpubring converged it changes nothing.

    Runs after test_up_twice_the_second_run_changes_nothing (file order)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab_dir / "hosts.yml"),
         str(REPO / "playbooks" / "host.yml")],
        capture_output=True, text=True, timeout=3600, check=False, cwd=REPO, env=env,
    )  # fmt: skip
    assert run.returncode == 0, f"plain ansible-playbook failed:\n{_tail(run)}"
    recap = {m["host"]: m.groupdict() for m in map(RECAP.match, run.stdout.splitlines()) if m}
    assert set(recap) == NODES, run.stdout[-4000:]
    for host, counts in recap.items():
        assert counts["failed"] == "0" and counts["unreachable"] == "0", (host, counts)
    changed = {host: int(counts["changed"]) for host, counts in recap.items()}
    assert changed == dict.fromkeys(NODES, 0), (
        f"plain ansible-playbook changed what gpubring converged: {changed}\n{_changed_tasks(run)}"
    )


# Every platform release the roles have, turned on for the dry run (the lab's own inventory keeps the
# role defaults); the lab's containers have no RDMA NIC, so the Network Operator is told which to select.
PLATFORM_ON = """\
network_operator_enabled: true
network_operator_rdma_selectors: {vendors: ["15b3"], deviceIDs: ["101b"]}
schedulers_volcano_enabled: true
schedulers_kai_enabled: true
schedulers_kueue_enabled: true
monitoring_enabled: true
"""
RELEASES = (
    "gpu-operator", "network-operator", "volcano", "kai-scheduler", "kueue",
    "kube-prometheus-stack", "prometheus-adapter", "gpu-alerts",
)  # fmt: skip
# What check mode cannot get past on the build machines: downloads from the Kubernetes package repository
# and Helm's release site, and what needs the packages they would bring (kubeadm, the kubelet service).
OUT_OF_REACH = re.compile(
    r"Request failed|No package matching 'kube|Failed to find package 'kube"
    r"|Could not find the requested service kubelet"
)


def _run_messages(report: Mapping[str, Any]) -> list[str]:
    """The `msg` of every debug task in a run's events (its run folder keeps ansible-runner's artifacts)."""
    messages = []
    for path in Path(report["run_folder"]).glob("artifacts/*/job_events/*.json"):
        data = json.loads(path.read_text()).get("event_data", {})
        msg = (data.get("res") or {}).get("msg")
        if data.get("task_action") in ("debug", "ansible.builtin.debug") and isinstance(msg, str):
            messages.append(msg)
    return messages


def test_check_mode_runs_the_cluster_and_platform_phases(lab_dir: Path, tmp_path: Path) -> None:
    """The lab cannot run cluster and platform for real; `up --check` takes them as far as it can reach."""
    extra = tmp_path / "platform-on.yml"
    extra.write_text(PLATFORM_ON)
    run = gpubring(
        "up",
        lab_dir,
        "--check",
        "-e",
        f"@{extra}",
        "--only",
        "cluster,platform",
        "--json",
        tmp_path / "c.json",
    )
    assert run.returncode == 0, f"`gpubring up --check` failed:\n{_tail(run)}"
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["options"]["check"] is True
    assert report["phases"]["run"] == ["cluster", "platform"]
    stats = host_stats(report)
    assert set(stats) == NODES, stats
    for host, counts in stats.items():
        assert counts["ok"] > 0 and counts["failed"] == 0 and counts["unreachable"] == 0, (host, counts)

    # Only what is out of reach was let pass, and only in the roles that download it.
    stopped = [(i["role"], i["task"], i["message"]) for i in report["ignored"]]
    assert {role for role, _, _ in stopped} <= {"kubernetes_packages", "helm"}, stopped
    assert all(OUT_OF_REACH.search(message) for _, _, message in stopped), stopped
    assert any("Download the key" in task for _, task, _ in stopped), stopped

    # Past the downloads every role ran on: kubeadm config, join, CNI, labels, each release.
    said = "\n".join(_run_messages(report))
    for node in sorted(NODES - {f"{PREFIX}-cp1"}):
        assert f"Check mode: {node} would join as a worker" in said, said
    # GPU node labels and taints: the GPU node only (cluster.yml's node_labels play).
    assert f"no cluster yet on {PREFIX}-cp1; {GPU} would get" in said, said
    assert f"{CPU} would get" not in said, said
    assert "calico would be applied with the pod network" in said, said
    for release in RELEASES:
        assert f"; {release} would be " in said, (release, said)

    # Check mode changed nothing: no Kubernetes source, no /etc/kubernetes.
    for path in ("/etc/apt/sources.list.d/kubernetes.sources", "/etc/kubernetes"):
        probe = subprocess.run(
            ["docker", "exec", f"{PREFIX}-cp1", "test", "-e", path], capture_output=True, check=False
        )
        assert probe.returncode == 1, f"{path} exists on {PREFIX}-cp1 after a check-mode run"


def test_upgrade_plans_from_the_record_and_its_playbook_reads_every_node(lab_dir: Path) -> None:
    """Issue 13 item 1 as far as the lab goes (it has no cluster): the converging `gpubring up` recorded
    what it installed; `upgrade --check` plans from that record; `upgrade` itself is refused before any
    host (the lab leaves the cluster phase out); the playbook in check mode reads every node and leaves
    them as they were; for real it stops on the first control plane, no cluster, before any other node."""
    record = json.loads((lab_dir / ".gpubring" / "installed.json").read_text())
    assert "nvidia_driver" in record["hosts"].get(GPU, {}), record
    assert "nvidia_driver" not in record["hosts"].get(CPU, {}), record  # no driver on a CPU node
    assert all("kubernetes" not in v for v in record["hosts"].values()), "the lab ran no cluster phase"

    plan = gpubring("upgrade", lab_dir, "--check", timeout=300)
    assert plan.returncode == 0, _tail(plan)
    assert f"first control plane {PREFIX}-cp1" in plan.stdout, plan.stdout
    # Issue 22: the lab's record holds no platform release (no platform phase), so no operator hop is
    # planned; `versions` on the lab's inventory ends with the pins' support windows.
    assert "runs of `gpubring upgrade`" not in plan.stdout, plan.stdout
    windows = gpubring("versions", lab_dir, timeout=300)
    assert "Support windows on " in windows.stdout, _tail(windows)
    runs_before = sorted((lab_dir / ".gpubring" / "runs").iterdir())
    refused = gpubring("upgrade", lab_dir, timeout=300)
    assert refused.returncode == 2, _tail(refused)
    assert "an upgrade is the cluster phase" in refused.stderr, refused.stderr
    assert sorted((lab_dir / ".gpubring" / "runs").iterdir()) == runs_before, (
        "a refused upgrade started a run"
    )

    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    playbook = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab_dir / "hosts.yml"),
                str(REPO / "playbooks" / "upgrade.yml"), "--skip-tags", "platform"]  # fmt: skip
    check = subprocess.run(
        [*playbook, "--check"], capture_output=True, text=True, timeout=1800, check=False, cwd=REPO, env=env
    )
    assert check.returncode == 0, f"upgrade.yml --check failed:\n{_tail(check)}"
    assert f"Check mode: no cluster on {PREFIX}-cp1" in check.stdout, _tail(check)
    for node in NODES:
        assert f"{node}: at the pins, nothing to upgrade (in no cluster" in check.stdout, (node, _tail(check))
    recap = {m["host"]: m.groupdict() for m in map(RECAP.match, check.stdout.splitlines()) if m}
    assert set(recap) == NODES, check.stdout[-4000:]
    assert {h: c["changed"] for h, c in recap.items()} == dict.fromkeys(NODES, "0"), _changed_tasks(check)

    real = subprocess.run(
        playbook, capture_output=True, text=True, timeout=1800, check=False, cwd=REPO, env=env
    )
    assert real.returncode != 0, _tail(real)
    assert "there is no cluster to upgrade here" in real.stdout, _tail(real)
    recap = {m["host"]: m.groupdict() for m in map(RECAP.match, real.stdout.splitlines()) if m}
    assert set(recap) == {f"{PREFIX}-cp1"}, "an upgrade without a cluster reached other nodes:\n" + _tail(
        real
    )


# -- faults: a node dying mid-run, SIGTERM mid-role (issue 13 item 5) ---------------------------------

HOST_PLAY = "Host setup on every node"  # the first play of playbooks/host.yml


def _started(lab: Path, before: set[Path], task_of_role: str, host: str | None = None) -> Path | None:
    """The run folder of the run started after `before` once one of its events is a task of the role
    `task_of_role` starting in the host play (on `host`, when given: the host phase runs in shards,
    each at its own pace, so a task starting in one shard says nothing of a host in another); None
    until then."""
    runs = lab / ".gpubring" / "runs"
    for folder in sorted(set(runs.iterdir()) - before):
        for path in folder.glob("artifacts/*/job_events/*.json"):
            try:
                event = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being written
            data = event.get("event_data") or {}
            kind = "runner_on_start" if host else "playbook_on_task_start"
            if (
                event.get("event") == kind
                and data.get("play") == HOST_PLAY
                and data.get("role") == task_of_role
                and (host is None or data.get("host") == host)
            ):
                return folder
    return None


def _start_up_and_wait_for(
    lab: Path, role: str, *extra: str, host: str | None = None
) -> tuple[subprocess.Popen[str], Path]:
    """`gpubring up LAB --only host` in a child process, returned once a task of `role` has started
    (on `host`, when given)."""
    runs = lab / ".gpubring" / "runs"
    before = set(runs.iterdir())
    child = subprocess.Popen(
        # --full: the lab is converged, and a host left as it is would never start a task of `role`.
        [sys.executable, "-m", "gpubring", "up", str(lab), "--only", "host", "--full", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and child.poll() is None:
        folder = _started(lab, before, role, host)
        if folder is not None:
            return child, folder
        time.sleep(0.5)
    out = child.communicate(timeout=600)[0] if child.poll() is None else child.stdout.read()  # type: ignore[union-attr]
    pytest.fail(f"no task of role {role} started in the host play (exit {child.returncode}):\n{out[-4000:]}")


def _wait_for_ssh(lab: Path) -> None:
    deadline = time.monotonic() + 300
    while True:
        probe = gpubring("check", lab, "--timeout", "5", timeout=120)
        if probe.returncode == 0 or time.monotonic() > deadline:
            assert probe.returncode == 0, f"the lab did not answer SSH again:\n{_tail(probe)}"
            return
        time.sleep(3)


def test_a_node_that_dies_mid_host_phase_is_named_and_a_rerun_converges(
    lab_dir: Path, tmp_path: Path
) -> None:
    """A GPU node's container is killed while the host phase runs: the other nodes finish, the summary
    names the dead node, exit 4; once it is started again, a re-run converges (exit 0, nothing failed)."""
    victim = GPU
    child, _ = _start_up_and_wait_for(lab_dir, "kernel", "--json", str(tmp_path / "dead.json"), host=victim)
    try:
        killed = subprocess.run(["docker", "kill", victim], capture_output=True, text=True, check=False)
        assert killed.returncode == 0, killed.stderr
        out = child.communicate(timeout=1800)[0]
    finally:
        if child.poll() is None:
            child.kill()
        subprocess.run(["docker", "start", victim], capture_output=True, check=False)
    assert child.returncode == 4, f"exit {child.returncode}, expected 4 (unreachable):\n{out[-4000:]}"
    report = json.loads((tmp_path / "dead.json").read_text())
    stats = host_stats(report)
    assert stats[victim]["unreachable"] > 0, stats
    for host in NODES - {victim}:
        assert stats[host]["failed"] == 0 and stats[host]["unreachable"] == 0, (host, stats)
        assert stats[host]["ok"] > 0, (host, stats)
    summary = [ln for ln in out.splitlines() if victim in ln and "unreachable" in ln.lower()]
    assert summary, f"the summary does not name {victim} as unreachable:\n{out[-4000:]}"

    _wait_for_ssh(lab_dir)
    again = gpubring("up", lab_dir, "--only", "host", "--json", tmp_path / "again.json")
    assert again.returncode == 0, f"the re-run after the node came back failed:\n{_tail(again)}"
    stats = host_stats(json.loads((tmp_path / "again.json").read_text()))
    assert set(stats) == NODES and all(s["failed"] == 0 and s["unreachable"] == 0 for s in stats.values()), (
        stats
    )


def test_sigterm_mid_role_exits_3_and_reruns_converge(lab_dir: Path, tmp_path: Path) -> None:
    """SIGTERM while a role runs: exit 3 and a cancelled report; no half-written file on any node (Ansible
    writes a file to a temporary name beside it and renames it); a re-run converges and a third run
    changes nothing."""
    child, folder = _start_up_and_wait_for(lab_dir, "containerd")
    child.send_signal(signal.SIGTERM)
    out = child.communicate(timeout=1800)[0]
    assert child.returncode == 3, f"exit {child.returncode}, expected 3 (cancelled):\n{out[-4000:]}"
    report = json.loads((folder / "report.json").read_text())
    assert report["status"] == "cancelled", report["status"]
    assert report["stopped_at"], report
    if len(os.sched_getaffinity(0)) >= 2:  # gpubring_shards auto: the host phase ran in shards
        jobs = sorted(p.name for p in folder.glob("artifacts/*"))
        assert len([j for j in jobs if j.startswith(f"{folder.name}-1-")]) >= 2, jobs

    for node in sorted(NODES):
        leftovers = subprocess.run(
            ["docker", "exec", node, "find", "/etc", "/usr/local", "-name", ".ansible_tmp*"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert leftovers.stdout.strip() == "", f"half-written files on {node}:\n{leftovers.stdout}"

    second = gpubring("up", lab_dir, "--only", "host", "--json", tmp_path / "s2.json")
    assert second.returncode == 0, f"the re-run after SIGTERM failed:\n{_tail(second)}"
    third = gpubring("up", lab_dir, "--only", "host", "--json", tmp_path / "s3.json")
    assert third.returncode == 0, f"the third run failed:\n{_tail(third)}"
    changed = {h: s["changed"] for h, s in host_stats(json.loads((tmp_path / "s3.json").read_text())).items()}
    assert changed == dict.fromkeys(NODES, 0), (
        f"the third run changed something: {changed}\n{_changed_tasks(third)}"
    )


# -- the node lifecycle on a grown lab (issue 13 item 5) ----------------------------------------------


def test_node_add_on_a_grown_lab_touches_only_the_new_node(lab_dir: Path, tmp_path: Path) -> None:
    """`lab up` with one more (CPU) node keeps the running nodes and names the node add to run; `node
    add` runs the preflight, host and verify phases on that node alone (its report's hosts). `node
    remove` is the cluster phase, which the lab leaves out: refused before any host (exit 2), and in
    check mode it says what a run would do.

    The lab has four nodes from here on (file order)."""
    new = f"{PREFIX}-cpu2"
    grow = gpubring(
        "lab", "up", *GROWN, "--prefix", PREFIX, "--inventory-dir", lab_dir, timeout=1800,
    )  # fmt: skip
    assert grow.returncode == 0, f"growing the lab failed:\n{_tail(grow)}"
    assert f"next: gpubring node add {lab_dir} {new}" in grow.stdout, grow.stdout

    add = gpubring("node", "add", lab_dir, new, "--json", tmp_path / "add.json")
    assert add.returncode == 0, f"`gpubring node add` failed:\n{_tail(add)}"
    report = json.loads((tmp_path / "add.json").read_text())
    stats = host_stats(report)
    assert set(stats) == {new}, f"node add touched other nodes: {sorted(stats)}"
    assert stats[new]["ok"] > 0 and stats[new]["changed"] > 0 and stats[new]["failed"] == 0, stats

    runs_before = sorted((lab_dir / ".gpubring" / "runs").iterdir())
    remove = gpubring("node", "remove", lab_dir, new)
    assert remove.returncode == 2, _tail(remove)
    assert "removing a node is the cluster phase" in remove.stderr, remove.stderr
    assert sorted((lab_dir / ".gpubring" / "runs").iterdir()) == runs_before
    # In check mode (the lab's check-only cluster phase) node_remove.yml runs, finds no cluster and
    # says what a run would do to the node; nothing changes.
    dry = gpubring("node", "remove", lab_dir, new, "--check", "--json", tmp_path / "remove.json")
    assert dry.returncode == 0, _tail(dry)
    stats = host_stats(json.loads((tmp_path / "remove.json").read_text()))
    assert set(stats) == {new} and stats[new]["changed"] == 0, stats
    assert f"a run would drain {new}, kubeadm reset it, and delete its Node object" in " ".join(
        _messages(tmp_path / "remove.json").split()
    )


def test_node_replace_of_a_gpu_node_by_a_fresh_container(lab_dir: Path, tmp_path: Path) -> None:
    """A GPU node's OS is installed afresh (its container removed and created again by `lab up`, with
    new host keys): `lab up` names `node replace` for it, and `node replace` brings the fresh node to
    the host setup of the others, touching only it (the stale Node object's removal is the cluster
    phase, which the lab leaves out)."""
    victim = GPU
    before = on(victim, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout
    removed = subprocess.run(
        ["docker", "rm", "-f", "-v", victim], capture_output=True, text=True, check=False
    )
    assert removed.returncode == 0, removed.stderr
    again = gpubring(
        "lab", "up", *GROWN, "--prefix", PREFIX, "--inventory-dir", lab_dir, timeout=1800,
    )  # fmt: skip
    assert again.returncode == 0, f"`lab up` did not bring the node back:\n{_tail(again)}"
    assert f"create {victim}" in again.stdout, again.stdout
    assert f"next: gpubring node replace {lab_dir} {victim}" in again.stdout, again.stdout
    assert on(victim, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout != before, "not a fresh container"
    fresh = on(victim, f"for p in {' '.join(HOST_SETUP)}; do test -e $p && echo $p; done")
    assert fresh.stdout.strip() == "", f"the fresh node already has host setup:\n{fresh.stdout}"

    first = gpubring("node", "replace", lab_dir, victim, "--json", tmp_path / "r1.json")
    assert first.returncode == 0, f"`gpubring node replace` failed:\n{_tail(first)}"
    stats = host_stats(json.loads((tmp_path / "r1.json").read_text()))
    assert set(stats) == {victim}, f"node replace touched other nodes: {sorted(stats)}"
    assert stats[victim]["changed"] > 0 and stats[victim]["failed"] == 0, stats
    done = on(victim, f"for p in {' '.join(HOST_SETUP)}; do test -e $p || echo $p; done")
    assert done.stdout.strip() == "", f"host setup missing after node replace:\n{done.stdout}"


# -- reset (issue 13 item 2) on a converged GPU node ---------------------------------------------------

# What a joined node has (kubeadm's files, kubelet's state, the CNI's), which the lab cannot make
# (no kubeadm): the files stand for what it would have written. The host setup is the real one `up`
# converged, which the reset keeps.
KUBE_STATE = (
    "/etc/kubernetes/kubelet.conf",
    "/etc/kubernetes/pki/ca.crt",
    "/etc/kubernetes/manifests",
    "/var/lib/kubelet/config.yaml",
    "/var/lib/kubelet/pki/kubelet.crt",
    "/etc/cni/net.d/10-calico.conflist",
    "/var/lib/cni/networks/k8s-pod-network/10.244.1.2",
    "/root/.kube/config",
)
FIREWALL = [
    "iptables -N MYFW", "iptables -A INPUT -p tcp --dport 2222 -j MYFW",
    "iptables -N KUBE-FIREWALL", "iptables -A INPUT -j KUBE-FIREWALL",
    "iptables -t nat -N KUBE-SERVICES", "iptables -t nat -A PREROUTING -j KUBE-SERVICES",
    "iptables -t nat -A KUBE-SERVICES -d 10.96.0.1 -p tcp -j RETURN",
    "iptables -t nat -N CNI-HOSTPORT-DNAT", "iptables -t nat -A PREROUTING -j CNI-HOSTPORT-DNAT",
]  # fmt: skip


def _messages(report_path: Path) -> str:
    report = json.loads(report_path.read_text())
    said = []
    for path in Path(report["run_folder"]).glob("artifacts/*/job_events/*.json"):
        msg = (json.loads(path.read_text()).get("event_data", {}).get("res") or {}).get("msg")
        said += [msg] if isinstance(msg, str) else []
    return "\n".join(said)


def test_reset_without_yes_plans_and_with_yes_removes_kubernetes_and_keeps_the_host_setup(
    lab_dir: Path, tmp_path: Path
) -> None:
    """`reset --limit` of a converged GPU node: without --yes the plan, and no run; with --yes the
    node's Kubernetes state, its CNI files and the KUBE-/CNI- firewall chains go, the host setup `up`
    converged (containerd, kubelet topology, the driver's modules) and the host's own firewall
    rules stay; a second reset changes nothing. Runs last: the lab is torn down after it."""
    worker = GPU
    runs_before = sorted((lab_dir / ".gpubring" / "runs").iterdir())
    plan = gpubring("reset", lab_dir, "--limit", worker, timeout=300)
    assert plan.returncode == 0, _tail(plan)
    assert "nothing is changed without --yes" in plan.stdout, plan.stdout
    assert f"next: gpubring reset {lab_dir} --limit {worker} --yes" in plan.stdout, plan.stdout
    assert sorted((lab_dir / ".gpubring" / "runs").iterdir()) == runs_before, "the plan started a run"

    dirs = " ".join(sorted({str(Path(p).parent) for p in KUBE_STATE} | {"/etc/kubernetes/manifests"}))
    files = " ".join(p for p in KUBE_STATE if "manifests" not in p)
    seeded = on(worker, f"mkdir -p {dirs} && touch {files}")
    assert seeded.returncode == 0, seeded.stderr
    iptables = on(
        worker, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables && " + " && ".join(FIREWALL)
    )
    firewall = iptables.returncode == 0  # the archive may be out of reach: the files are tested all the same

    first = gpubring("reset", lab_dir, "--yes", "--limit", worker, "--json", tmp_path / "r1.json")
    assert first.returncode == 0, _tail(first)
    stats = json.loads((tmp_path / "r1.json").read_text())["stats"]
    assert list(stats) == [worker] and stats[worker]["changed"] > 0, stats
    assert f"kubeadm is not installed on {worker}: kubeadm reset is skipped" in _messages(
        tmp_path / "r1.json"
    )
    left = on(
        worker, f"for p in {' '.join(KUBE_STATE)}; do test -e $p && echo $p; done; ls -A /etc/cni/net.d"
    )
    assert left.stdout.strip() == "", f"left after the reset:\n{left.stdout}"
    kept = on(worker, f"for p in {' '.join(HOST_SETUP)}; do test -e $p || echo $p; done")
    assert kept.stdout.strip() == "", f"host setup removed by the reset:\n{kept.stdout}"
    if firewall:
        rules = on(worker, "iptables-save").stdout
        assert "KUBE-" not in rules and "CNI-" not in rules, rules
        assert "-A INPUT -p tcp -m tcp --dport 2222 -j MYFW" in rules, rules  # the host's own rules stay
        assert "DOCKER_OUTPUT" in rules, rules

    again = gpubring("reset", lab_dir, "--yes", "--limit", worker, "--json", tmp_path / "r2.json")
    assert again.returncode == 0, _tail(again)
    stats = json.loads((tmp_path / "r2.json").read_text())["stats"]
    assert stats[worker]["changed"] == 0, stats
    assert f"{worker} is already reset" in _messages(tmp_path / "r2.json")
