"""`gpubring etcd snapshot | restore` and the snapshot that reset and node remove take first: the
refusals before any host is reached (no --yes, a bad snapshot path, a missing record, a sha256 that does
not match, members that are not the inventory's control planes) and the plans. The snapshot and restore
themselves run on a real etcd in tests/test_etcd_real.py."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from gpubring.app import app
from gpubring.commands import etcd
from gpubring.exitcodes import ExitCode


def cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(map(str, args)), env={"COLUMNS": "300"})
    return result.exit_code, result.output


def runs_of(root: Path) -> list[Path]:
    base = root / ".gpubring" / "runs"
    return sorted(base.iterdir()) if base.is_dir() else []


def a_snapshot(root: Path, members: tuple[str, ...] = ("cp-1", "cp-2", "cp-3")) -> Path:
    folder = root / ".gpubring" / "etcd-snapshots"
    folder.mkdir(parents=True, exist_ok=True)
    snapshot = folder / "etcd-20260101T000000Z.db"
    snapshot.write_bytes(b"not a secret: test bytes")
    record = {
        "snapshot": snapshot.name,
        "sha256": hashlib.sha256(snapshot.read_bytes()).hexdigest(),
        "etcd_version": "3.5.26",
        "taken_through": "cp-1",
        "members": [
            {"id": f"{i:x}", "name": name, "peer_urls": [f"https://10.0.0.{i}:2380"], "healthy": True}
            for i, name in enumerate(members, start=1)
        ],
    }
    snapshot.with_name(snapshot.name + ".json").write_text(json.dumps(record))
    return snapshot


def test_restore_without_yes_prints_the_plan_and_runs_nothing(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    snapshot = a_snapshot(inventory)
    code, output = cli("etcd", "restore", inventory, snapshot)
    assert code == ExitCode.OK, output
    assert f"gpubring etcd restore {inventory} {snapshot}: nothing is changed without --yes" in output
    assert "on every control plane at once (cp-1, cp-2, cp-3):" in output
    assert "everything written to the cluster after the snapshot is lost" in output
    assert f"next: gpubring etcd restore {inventory} {snapshot} --yes" in output
    assert "test bytes" not in output  # the snapshot's content is never printed
    assert runs_of(inventory) == []


def test_restore_refuses_a_missing_snapshot(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    code, output = cli("etcd", "restore", inventory, inventory / "nope.db", "--yes")
    assert code == ExitCode.BAD_INPUT, output
    assert f"error: {inventory / 'nope.db'}: no such snapshot file" in output
    assert runs_of(inventory) == []


def test_restore_refuses_a_snapshot_without_its_record(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    snapshot = a_snapshot(inventory)
    snapshot.with_name(snapshot.name + ".json").unlink()
    code, output = cli("etcd", "restore", inventory, snapshot, "--yes")
    assert code == ExitCode.BAD_INPUT, output
    assert ".db.json: missing; gpubring etcd snapshot writes it beside the snapshot" in output
    assert runs_of(inventory) == []


def test_restore_refuses_a_sha256_mismatch(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    snapshot = a_snapshot(inventory)
    snapshot.write_bytes(b"changed after the snapshot")
    for extra in ((), ("--yes",)):
        code, output = cli("etcd", "restore", inventory, snapshot, *extra)
        assert code == ExitCode.BAD_INPUT, output
        assert "does not match the record's" in output and "nothing was restored" in output
        assert "changed after the snapshot" not in output.split("error:")[0]
    assert runs_of(inventory) == []


def test_restore_refuses_members_that_are_not_the_control_planes(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    snapshot = a_snapshot(inventory, ("cp-1", "cp-2", "old-cp"))
    code, output = cli("etcd", "restore", inventory, snapshot, "--yes")
    assert code == ExitCode.BAD_INPUT, output
    assert "the snapshot's etcd members (cp-1, cp-2, old-cp) are not the inventory's control planes" in output
    assert runs_of(inventory) == []


def test_restore_refuses_a_record_that_is_not_one(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    snapshot = a_snapshot(inventory)
    snapshot.with_name(snapshot.name + ".json").write_text('{"sha256": 5}')
    code, output = cli("etcd", "restore", inventory, snapshot)
    assert code == ExitCode.BAD_INPUT, output
    assert "sha256: expected the snapshot's sha256 (a string)" in output


def test_snapshots_go_under_the_inventory() -> None:
    when = datetime.datetime(2026, 11, 27, 14, 5, 9, tzinfo=datetime.UTC)
    dest = etcd.snapshot_dest(Path("/inv"), when)
    assert dest == Path("/inv/.gpubring/etcd-snapshots/etcd-20261127T140509Z.db")


def test_the_reset_plan_says_a_snapshot_comes_first(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    code, output = cli("reset", inventory, "--limit", "cp-3")
    assert code == ExitCode.OK, output
    assert f"first: an etcd snapshot to {inventory}/.gpubring/etcd-snapshots" in output
    assert (
        "each control plane's etcd member is removed from the first control plane before its reset" in output
    )
    code, output = cli("reset", inventory, "--limit", "cp-3", "--no-snapshot")
    assert code == ExitCode.OK and "no etcd snapshot first (--no-snapshot)" in output, output
    code, output = cli("reset", inventory, "--limit", "gpu-1")
    assert code == ExitCode.OK and "etcd snapshot" not in output, output


def test_node_remove_offers_no_snapshot() -> None:
    code, output = cli("node", "remove", "--help")
    assert code == ExitCode.OK and "--no-snapshot" in output, output
