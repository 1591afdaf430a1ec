"""`gpubring reset`: the plan without --yes (no run), the quorum guard before any host, the playbook's
own confirmation, and one e2e run on a lab node (marked e2e).

The e2e test has its own two-node lab (one control plane, one GPU node) with its own prefix. It runs
after tests/test_e2e_lab.py (file order), whose lab is down by then, so the machine never holds two
labs at once; the reset touches the GPU node only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import nodeops, paths, runner
from gpubring.app import app
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.runopts import RunOptions
from helpers import REPO


def reset(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["reset", *map(str, args)], env={"COLUMNS": "300"})
    return result.exit_code, result.output


def runs_of(root: Path) -> list[Path]:
    base = root / ".gpubring" / "runs"
    return sorted(base.iterdir()) if base.is_dir() else []


# -- the plan: exit 0, no run ----------------------------------------------------------------------


def test_without_yes_it_prints_the_plan_and_runs_nothing(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    code, output = reset(inventory)
    assert code == ExitCode.OK, output
    assert "(every host: the whole cluster): nothing is changed without --yes" in output
    lines = output.splitlines()
    order = [ln.strip() for ln in lines if ln.startswith("  ") and ". " in ln and "control plane" in ln]
    assert order == ["6. control plane cp-3", "7. control plane cp-2",
                     "8. control plane cp-1 (the first control plane, last)"]  # fmt: skip
    assert "1-5. workers, in parallel (up to --forks): gpu-1, gpu-2, gpu-3, gpu-4, cpu-1" in output
    assert "/var/lib/kubelet" in output and "/var/lib/etcd" in output and "KUBE-*" in output
    assert "kept: containerd" in output
    assert f"next: gpubring reset {inventory} --yes" in output
    assert runs_of(inventory) == []


def test_the_plan_of_a_limit_and_purge(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    code, output = reset(inventory, "--limit", "gpu-2,cp-3", "--purge-host")
    assert code == ExitCode.OK, output
    assert "(--limit gpu-2,cp-3)" in output
    assert "1. workers, in parallel (up to --forks): gpu-2" in output
    assert "2. control plane cp-3" in output
    assert "--purge-host, also removed:" in output and "kubeadm, kubelet, kubectl" in output
    assert "kept: containerd" not in output
    assert "the Node objects of these hosts stay (NotReady)" in output
    assert runs_of(inventory) == []


def test_the_steps_variables_and_order(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    whole = nodeops.plan_reset(inv, None)
    assert whole.whole_cluster and whole.step.limit == ""
    assert whole.hosts == ("gpu-1", "gpu-2", "gpu-3", "gpu-4", "cpu-1", "cp-3", "cp-2", "cp-1")
    assert whole.step.playbook == paths.playbooks_dir().resolve() / "reset.yml"
    assert dict(whole.step.extra_vars) == {"reset_confirm": "yes"}
    # A --limit that selects every host is the whole cluster.
    assert nodeops.plan_reset(inv, "all").whole_cluster
    some = nodeops.plan_reset(inv, "gpu_nodes[0:1]", purge_host=True)
    assert (some.whole_cluster, some.step.limit) == (False, "gpu-1,gpu-2")
    assert dict(some.step.extra_vars) == {"reset_confirm": "yes", "reset_purge_host": True}
    settings = nodeops.settings(inv, whole.step, RunOptions(limit=None))
    assert settings.options.limit is None and settings.command == "reset"


# -- the guard: exit 2 before any host -------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("cp-2,cp-3", "error: removing cp-2, cp-3 leaves 1 of 3 etcd members; quorum needs 2 (a majority"),
        ("control_plane", "error: removing cp-1, cp-2, cp-3 leaves no control plane"),
        ("cp-1", "error: cp-1 is the first control plane (control_plane[0])"),
        ("gpu-9", "error: --limit gpu-9: matches no host of"),
    ],
)  # fmt: skip
def test_a_limit_that_breaks_etcd_is_refused(
    make_inventory: Callable[..., Path], limit: str, message: str
) -> None:
    inventory = make_inventory()
    for yes in ([], ["--yes"]):
        code, output = reset(inventory, "--limit", limit, *yes)
        assert code == ExitCode.BAD_INPUT, output
        assert message in output
        assert "Traceback" not in output
    assert runs_of(inventory) == []


def test_five_control_planes_lose_two_at_most(make_inventory: Callable[..., Path]) -> None:
    inv = load_inventory(make_inventory())
    cps = ("cp-1", "cp-2", "cp-3", "cp-4", "cp-5")
    hosts = {**inv.hosts, "cp-4": inv.hosts["cp-3"], "cp-5": inv.hosts["cp-3"]}
    five = dataclasses.replace(inv, hosts=hosts, groups={**inv.groups, "control_plane": cps})
    assert nodeops.plan_reset(five, "cp-4,cp-5").control_planes == ("cp-5", "cp-4")
    with pytest.raises(nodeops.NodeError, match="leaves 2 of 5 etcd members; quorum needs 3"):
        nodeops.plan_reset(five, "cp-3,cp-4,cp-5")
    with pytest.raises(nodeops.NodeError, match="leaves 2 of 5 etcd members; quorum needs 3"):
        nodeops.check_nodes(five, ["cp-3", "cp-4", "cp-5"], removing=True)
    assert nodeops.check_nodes(five, ["cp-4", "cp-5"], removing=True) == ("cp-4", "cp-5")


def test_the_playbook_refuses_a_run_without_confirmation(tmp_path: Path) -> None:
    """reset.yml itself (plain ansible-playbook, AWX) stops at its first task without reset_confirm."""
    root = tmp_path / "local"
    root.mkdir()
    (root / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        '    ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
        "  children:\n    control_plane:\n      hosts:\n        node1: {}\n"
        "    gpu_nodes:\n      hosts:\n        node2: {}\n",
        encoding="utf-8",
    )
    inv = load_inventory(root)
    result = runner.run(
        runner.RunSettings(
            inventory_root=inv.root,
            hosts_file=inv.hosts_file,
            command="reset",
            playbook=paths.playbooks_dir() / "reset.yml",
        )
    )
    assert result.exit_code == ExitCode.TASK_FAILED
    [failure] = result.report["failures"]
    assert failure["task"] == "Refuse a reset without confirmation"
    assert "Confirm with -e reset_confirm=yes" in failure["message"]
    assert all(row["changed"] == 0 for row in result.report["stats"].values())


# -- e2e: a real reset of a lab node over SSH ------------------------------------------------------

PREFIX = f"gpubrst{os.getpid()}"
WORKER = f"{PREFIX}-gpu1"
# What a joined node has (kubeadm's files, kubelet's state, the CNI's) and what the host roles wrote,
# which the reset keeps. The lab cannot run kubeadm: the files stand for what it would have written.
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
HOST_SETUP = (
    "/etc/containerd/config.toml",
    "/etc/containerd/conf.d/99-nvidia.toml",
    "/etc/kubernetes/kubelet.conf.d/50-gpubring-topology.conf",
    "/etc/modules-load.d/nvidia.conf",
)
FIREWALL = [
    "iptables -N MYFW", "iptables -A INPUT -p tcp --dport 2222 -j MYFW",
    "iptables -N KUBE-FIREWALL", "iptables -A INPUT -j KUBE-FIREWALL",
    "iptables -t nat -N KUBE-SERVICES", "iptables -t nat -A PREROUTING -j KUBE-SERVICES",
    "iptables -t nat -A KUBE-SERVICES -d 10.96.0.1 -p tcp -j RETURN",
    "iptables -t nat -N CNI-HOSTPORT-DNAT", "iptables -t nat -A PREROUTING -j CNI-HOSTPORT-DNAT",
]  # fmt: skip


def gpubring(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpubring", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip


def on(node: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "exec", node, "bash", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    return "\n".join((proc.stdout + "\n" + proc.stderr).strip().splitlines()[-40:])


@pytest.fixture(scope="module")
def reset_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    engine = subprocess.run(
        ["bash", str(REPO / "scripts" / "engine.sh")], capture_output=True, text=True, check=False
    )
    if engine.returncode != 0:
        pytest.skip("no Docker engine could be started (scripts/engine.sh): " + _tail(engine))
    base = tmp_path_factory.mktemp("reset-lab")
    inventory = base / "lab"
    try:
        up = gpubring(
            "lab", "up", "--nodes", "2", "--prefix", PREFIX, "--inventory-dir", inventory, timeout=900
        )
        assert up.returncode == 0, f"gpubring lab up failed:\n{_tail(up)}"
        yield inventory
    finally:
        if (inventory / ".gpubring").is_dir():
            shutil.copytree(inventory / ".gpubring", base / "kept-runs", dirs_exist_ok=True)
        down = gpubring(
            "lab", "down", "--purge", "--prefix", PREFIX, "--inventory-dir", inventory, timeout=300
        )
        assert down.returncode == 0, f"gpubring lab down failed:\n{_tail(down)}"


def _messages(report_path: Path) -> str:
    report = json.loads(report_path.read_text())
    said = []
    for path in Path(report["run_folder"]).glob("artifacts/*/job_events/*.json"):
        msg = (json.loads(path.read_text()).get("event_data", {}).get("res") or {}).get("msg")
        said += [msg] if isinstance(msg, str) else []
    return "\n".join(said)


@pytest.mark.e2e
def test_reset_of_a_worker_removes_kubernetes_and_keeps_the_host_setup(
    reset_lab: Path, tmp_path: Path
) -> None:
    dirs = " ".join(
        sorted({str(Path(p).parent) for p in KUBE_STATE + HOST_SETUP} | {"/etc/kubernetes/manifests"})
    )
    seeded = on(
        WORKER,
        f"mkdir -p {dirs} && touch {' '.join(p for p in KUBE_STATE + HOST_SETUP if 'manifests' not in p)}",
    )
    assert seeded.returncode == 0, seeded.stderr
    iptables = on(
        WORKER, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables && " + " && ".join(FIREWALL)
    )
    firewall = iptables.returncode == 0  # the archive may be out of reach: the files are tested all the same

    first = gpubring("reset", reset_lab, "--yes", "--limit", WORKER, "--json", tmp_path / "r1.json")
    assert first.returncode == 0, _tail(first)
    stats = json.loads((tmp_path / "r1.json").read_text())["stats"]
    assert list(stats) == [WORKER] and stats[WORKER]["changed"] > 0, stats
    assert f"kubeadm is not installed on {WORKER}: kubeadm reset is skipped" in _messages(
        tmp_path / "r1.json"
    )

    left = on(
        WORKER, f"for p in {' '.join(KUBE_STATE)}; do test -e $p && echo $p; done; ls -A /etc/cni/net.d"
    )
    assert left.stdout.strip() == "", f"left after the reset:\n{left.stdout}"
    kept = on(WORKER, f"for p in {' '.join(HOST_SETUP)}; do test -e $p || echo $p; done")
    assert kept.stdout.strip() == "", f"host setup removed by the reset:\n{kept.stdout}"
    if firewall:
        rules = on(WORKER, "iptables-save").stdout
        assert "KUBE-" not in rules and "CNI-" not in rules, rules
        assert "-A INPUT -p tcp -m tcp --dport 2222 -j MYFW" in rules, rules  # the host's own rules stay
        assert "DOCKER_OUTPUT" in rules, rules

    again = gpubring("reset", reset_lab, "--yes", "--limit", WORKER, "--json", tmp_path / "r2.json")
    assert again.returncode == 0, _tail(again)
    stats = json.loads((tmp_path / "r2.json").read_text())["stats"]
    assert stats[WORKER]["changed"] == 0, stats
    assert f"{WORKER} is already reset" in _messages(tmp_path / "r2.json")
