"""The etcd task files of roles/kubeadm_control_plane against a REAL etcd cluster: three members of
Debian's etcd-server on loopback, TLS laid out as kubeadm lays it out (tests/etcd_cluster.py), driven by
the same task files reset.yml, node_remove.yml, upgrade.yml and the etcd playbooks include, through
ansible-playbook on localhost. The only seam is how etcdctl is reached: kubeadm_control_plane_etcdctl
(here etcdctl with one member's endpoint and kubeadm's healthcheck-client certificate; in production
etcdctl in the etcd static pod) and, for the restore, kubeadm_control_plane_etcdutl.

Skipped, saying so, where the etcd binaries are absent (scripts/setup.sh installs etcd-server and
etcd-client).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from etcd_cluster import ETCD, ETCDCTL, Cluster, make_cluster
from helpers import BIN, ansible_playbook, localhost_inventory

pytestmark = [
    pytest.mark.skipif(
        ETCD is None or ETCDCTL is None,
        reason="etcd binaries absent: install Debian's etcd-server and etcd-client (scripts/setup.sh does)",
    ),
    pytest.mark.skipif(
        shutil.which("ansible-playbook", path=str(BIN)) is None, reason="no ansible-playbook in the venv"
    ),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = make_cluster(tmp_path / "etcd")
    try:
        for member in made.members:
            made.start(member)
        for member in made.members:
            made.wait_healthy(member)
        yield made
    finally:
        made.stop_all()


Step = tuple[str, dict[str, Any], int]  # entry point, its variables, the member etcdctl goes through


def run_steps(tmp_path: Path, cluster: Cluster, steps: list[Step]) -> tuple[list[dict[str, Any]], str]:
    """One ansible-playbook run on localhost (a control plane) that includes kubeadm_control_plane's
    entry points one after the other, each in a block whose failure is recorded (not fatal), and
    returns per step: ok, the failure message, and the facts the entry point set."""
    inventory = localhost_inventory(tmp_path)
    report = tmp_path / "steps.json"
    seen = (
        "{'gone': __kubeadm_control_plane_etcd_member_gone | default(None),"
        " 'healthy': __kubeadm_control_plane_etcd_healthy | default(None),"
        " 'members': __kubeadm_control_plane_etcd_members | default([]) | map(attribute='name') | list,"
        " 'version': __kubeadm_control_plane_etcd_version | default(None)}"
    )
    tasks: list[dict[str, Any]] = [
        {"name": "Start the record", "ansible.builtin.set_fact": {"steps_done": []}}
    ]
    for number, (entry, role_vars, via) in enumerate(steps):
        variables = {
            "kubeadm_control_plane_etcdctl": cluster.members[via].etcdctl(),
            "kubeadm_control_plane_etcd_peer": "localhost",
            **role_vars,
        }
        tasks.append(
            {
                "name": f"Step {number}: {entry}",
                "block": [
                    {
                        "name": f"Step {number}: the entry point {entry}",
                        "ansible.builtin.include_role": {
                            "name": "gpubring.core.kubeadm_control_plane",
                            "tasks_from": entry,
                        },
                        "vars": variables,
                    },
                    {
                        "name": f"Step {number}: record success",
                        "ansible.builtin.set_fact": {
                            "steps_done": "{{ steps_done + [{'ok': true, 'facts': " + seen + "}] }}"
                        },
                    },
                ],
                "rescue": [
                    {
                        "name": f"Step {number}: record the failure",
                        "ansible.builtin.set_fact": {
                            "steps_done": "{{ steps_done + [{'ok': false, 'msg': ansible_failed_result.msg"
                            " | default(''), 'facts': " + seen + "}] }}"
                        },
                    }
                ],
            }
        )
    tasks.append(
        {
            "name": "Write the record",
            "ansible.builtin.copy": {
                "dest": str(report),
                "content": "{{ steps_done | to_json }}",
                "mode": "0600",
            },
        }
    )
    play = [{"name": "kubeadm_control_plane's etcd tasks on a real etcd", "hosts": "localhost",
             "gather_facts": False, "tasks": tasks}]  # fmt: skip
    playbook = tmp_path / "steps.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    result = ansible_playbook("-i", inventory, playbook)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    done: list[dict[str, Any]] = json.loads(report.read_text())
    for step in done:
        step["msg"] = " ".join(str(step.get("msg", "")).split())
    assert len(done) == len(steps), out[-4000:]
    return done, " ".join(out.split())


def member_names(cluster: Cluster, via: int = 0) -> list[str]:
    done = cluster.ctl(cluster.members[via], "member", "list", "-w", "simple")
    assert done.returncode == 0, done.stderr
    return sorted(line.split(", ")[2] for line in done.stdout.splitlines() if line.strip())


def remove(name: str, **more: Any) -> Step:
    return ("etcd_member_remove", {"kubeadm_control_plane_etcd_member": name, **more}, 0)


def test_members_gate_and_removals_on_a_healthy_cluster(tmp_path: Path, cluster: Cluster) -> None:
    """Membership and health read; the version gate (Debian's etcd 3.4 is older than 3.5.26: Kubernetes
    1.34, etcd 3.6, refused with the fix; 1.33 passes); members removed from a healthy peer down to the
    last one, which goes only with the whole cluster."""
    done, out = run_steps(
        tmp_path,
        cluster,
        [
            # etcd_gate reads the cluster with etcd_members.yml (through etcd_check.yml) first.
            ("etcd_gate", {"kubeadm_control_plane_etcd_gate_version": "1.34.2"}, 0),
            ("etcd_gate", {"kubeadm_control_plane_etcd_gate_version": "1.33.6"}, 0),
            remove("cp-3"),
            remove("cp-3"),
            remove("cp-2"),
            remove("cp-1"),
            remove("cp-1", kubeadm_control_plane_etcd_last_member=True),
        ],
    )
    gate_new, gate_old, cp3, cp3_again, cp2, last, last_whole = done
    assert sorted(gate_new["facts"]["healthy"]) == ["cp-1", "cp-2", "cp-3"]
    assert sorted(gate_new["facts"]["members"]) == ["cp-1", "cp-2", "cp-3"]
    assert gate_new["facts"]["version"].startswith("3.4.")
    assert "3 members, 3 healthy" in out and "alarms: none" in out
    assert not gate_new["ok"]
    assert "Kubernetes 1.34.2 runs etcd 3.6, and this cluster runs etcd 3.4." in gate_new["msg"]
    assert "from etcd 3.5.26 or later" in gate_new["msg"] and "zombie_members_upgrade" in gate_new["msg"]
    assert gate_old["ok"], gate_old
    assert cp3["ok"] and cp3["facts"]["gone"] is True, cp3
    assert (
        cp3_again["ok"] and cp3_again["facts"]["gone"] is True and "cp-3 has no etcd member (any more)" in out
    )
    assert cp2["ok"], cp2
    assert not last["ok"] and "it is the last member of the cluster" in last["msg"], last
    assert last["facts"]["gone"] is False
    assert last_whole["ok"] and last_whole["facts"]["gone"] is True
    assert member_names(cluster) == ["cp-1"]


def test_a_removal_that_breaks_quorum_is_refused_and_the_data_stays(tmp_path: Path, cluster: Cluster) -> None:
    """Two of three members stopped: neither can be removed; each step fails naming the member, which
    stays registered with its data in place; the etcd-changing checks refuse a cluster without quorum."""
    cp2, cp3 = cluster.members[1], cluster.members[2]
    cluster.stop(cp2)
    cluster.stop(cp3)
    done, out = run_steps(tmp_path, cluster, [remove("cp-3"), remove("cp-2"), ("etcd_check", {}, 0)])
    for step, name in zip(done, ("cp-3", "cp-2"), strict=False):
        assert not step["ok"] and step["facts"]["gone"] is False, step
        assert f"etcd member {name} (id " in step["msg"], step
        assert f"was NOT removed and its data stays on {name}" in step["msg"], step
        # Without a quorum no member is healthy (etcd's health check is a quorum read): all three named.
        assert "without it 0 healthy members would be left" in step["msg"], step
        assert "Bring the unhealthy control planes back (" in step["msg"] and "cp-3" in step["msg"], step
    assert not done[2]["ok"] and "etcd's alarms could not be read" in done[2]["msg"], done[2]
    assert "cp-3: UNHEALTHY" in out
    assert (cp3.data_dir / "member").is_dir() and (cp2.data_dir / "member").is_dir()
    cluster.start(cp2)
    cluster.wait_healthy(cp2)
    assert member_names(cluster) == ["cp-1", "cp-2", "cp-3"]


def test_snapshot_and_restore_bring_back_the_data(tmp_path: Path, cluster: Cluster) -> None:
    """A snapshot copied to the controller (0600, sha256 and members beside it, the peer's copy gone,
    the oldest snapshots over the retention removed); a restore with a wrong sha256 changes nothing;
    the real restore of all three members brings back what was there at the snapshot."""
    cp1 = cluster.members[0]
    assert cluster.ctl(cp1, "put", "/gpubring/before", "kept").returncode == 0
    folder = tmp_path / "controller" / ".gpubring" / "etcd-snapshots"
    folder.mkdir(parents=True)
    for age, old in enumerate(("etcd-20240101T000000Z.db", "etcd-20240201T000000Z.db")):
        (folder / old).write_bytes(b"old")
        (folder / f"{old}.json").write_text("{}")
        os.utime(folder / old, (1_700_000_000 + age, 1_700_000_000 + age))
    dest = folder / "etcd-20260101T000000Z.db"
    remote = tmp_path / "peer-snapshot.db"
    done, _ = run_steps(
        tmp_path,
        cluster,
        [
            (
                "etcd_snapshot",
                {
                    "kubeadm_control_plane_etcd_snapshot_remote": str(remote),
                    "kubeadm_control_plane_etcd_snapshot_dest": str(dest),
                    "kubeadm_control_plane_etcd_snapshot_keep": 2,
                },
                0,
            )
        ],
    )
    assert done[0]["ok"], done
    assert dest.stat().st_mode & 0o777 == 0o600
    assert not remote.exists(), "the peer's copy stayed"
    assert sorted(p.name for p in folder.iterdir()) == [
        "etcd-20240201T000000Z.db", "etcd-20240201T000000Z.db.json",
        "etcd-20260101T000000Z.db", "etcd-20260101T000000Z.db.json",
    ]  # fmt: skip
    record = json.loads(dest.with_name(dest.name + ".json").read_text())
    assert record["sha256"] == hashlib.sha256(dest.read_bytes()).hexdigest()
    assert sorted(m["name"] for m in record["members"]) == ["cp-1", "cp-2", "cp-3"]
    assert all(m["peer_urls"] and m["healthy"] is True for m in record["members"])

    # After the snapshot: a key written, the key of before deleted. The restore must undo both.
    assert cluster.ctl(cp1, "put", "/gpubring/after", "lost").returncode == 0
    assert cluster.ctl(cp1, "del", "/gpubring/before").returncode == 0
    cluster.stop_all()

    def restore(index: int, sha256: str) -> Step:
        member = cluster.members[index]
        return (
            "etcd_restore",
            {
                "kubeadm_control_plane_etcd_member": member.name,
                "kubeadm_control_plane_etcd_data_dir": str(member.data_dir),
                "kubeadm_control_plane_etcd_restore_snapshot": str(dest),
                "kubeadm_control_plane_etcd_restore_sha256": sha256,
                "kubeadm_control_plane_etcd_restore_members": record["members"],
                "kubeadm_control_plane_etcdutl": [str(ETCDCTL)],
            },
            index,
        )

    # First a restore with a wrong sha256 (refused, nothing changed: one data folder kept per member
    # below, by the real restore), then the real one.
    done, _ = run_steps(
        tmp_path, cluster, [restore(0, "0" * 64)] + [restore(i, record["sha256"]) for i in range(3)]
    )
    assert not done[0]["ok"] and "the record says " + "0" * 64 in done[0]["msg"], done
    assert all(step["ok"] for step in done[1:]), done
    for member in cluster.members:
        kept = list(member.data_dir.parent.glob("etcd.before-restore-*"))
        assert len(kept) == 1 and (kept[0] / "member").is_dir(), "the replaced data was not kept"
    for member in cluster.members:
        cluster.start(member)
    for member in cluster.members:
        cluster.wait_healthy(member)
    got = cluster.ctl(cluster.members[1], "get", "/gpubring/", "--prefix")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["/gpubring/before", "kept"]
    assert member_names(cluster, via=2) == ["cp-1", "cp-2", "cp-3"]


def test_gpubring_etcd_snapshot_end_to_end(tmp_path: Path, cluster: Cluster) -> None:
    """`gpubring etcd snapshot` on an inventory whose first control plane is this machine, etcdctl given
    with -e (the seam): the snapshot lands under the inventory's .gpubring/etcd-snapshots, 0600, with its
    record, the retention setting applied, and the snapshot's bytes in no run artifact."""
    from typer.testing import CliRunner

    from gpubring.app import app

    root = tmp_path / "inventory"
    root.mkdir()
    (root / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        '    ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
        "    ansible_become: false\n"  # this machine's root runs it; no sudo here
        "    gpubring_etcd_snapshot_keep: 1\n"
        "  children:\n    control_plane:\n      hosts:\n        node1: {}\n"
        "    gpu_nodes:\n      hosts:\n        node2: {}\n",
        encoding="utf-8",
    )
    folder = root / ".gpubring" / "etcd-snapshots"
    folder.mkdir(parents=True)
    (folder / "etcd-20240101T000000Z.db").write_bytes(b"old")
    os.utime(folder / "etcd-20240101T000000Z.db", (1_700_000_000, 1_700_000_000))
    assert cluster.ctl(cluster.members[0], "put", "/gpubring/secret", "s3cr3t-value").returncode == 0
    seam = tmp_path / "seam.json"
    seam.write_text(
        json.dumps(
            {
                "kubeadm_control_plane_etcdctl": cluster.members[0].etcdctl(),
                "kubeadm_control_plane_etcd_snapshot_remote": str(tmp_path / "peer.db"),
            }
        )
    )
    result = CliRunner().invoke(
        app, ["etcd", "snapshot", str(root), "-e", f"@{seam}"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output[-4000:]
    snapshots = sorted(folder.glob("*.db"))
    assert len(snapshots) == 1 and snapshots[0].name != "etcd-20240101T000000Z.db", snapshots
    assert f"snapshot: {snapshots[0]}" in result.output
    assert snapshots[0].stat().st_mode & 0o777 == 0o600
    record = json.loads(snapshots[0].with_name(snapshots[0].name + ".json").read_text())
    assert record["sha256"] == hashlib.sha256(snapshots[0].read_bytes()).hexdigest()
    assert b"s3cr3t-value" in snapshots[0].read_bytes()  # the key is in the snapshot ...
    runs = root / ".gpubring" / "runs"
    leaked = [p for p in runs.rglob("*") if p.is_file() and b"s3cr3t-value" in p.read_bytes()]
    assert leaked == [], f"the snapshot's content reached run artifacts: {leaked}"  # ... and in no log
