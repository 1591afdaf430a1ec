"""The ansible-runner wrapper: inputs, the accelerator choice, and real runs against localhost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
from datetime import datetime
from pathlib import Path

import pytest

from gpubring import report, runstore
from gpubring.events import Event, TaskStart
from gpubring.exitcodes import ExitCode
from gpubring.phases import PHASES, PhaseError, select_phases
from gpubring.run import process
from gpubring.run.accelerate import Accelerator, accelerator, mitogen_declared_range
from gpubring.run.cancel import CancelFlag
from gpubring.run.folder import plays_of
from gpubring.run.settings import RunSettings
from gpubring.runopts import ExtraVarsError, RunOptions, extra_var_names, parse_extra_vars
from helpers import DATA

PLAYBOOKS = DATA / "playbooks"


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    """tests/data/inventories/localhost copied to a temporary folder (run folders go under it)."""
    root = tmp_path / "inventory"
    shutil.copytree(DATA / "inventories" / "localhost", root)
    return root


def settings_for(
    root: Path, playbook: str, options: RunOptions | None = None, *, keep_runs: int = runstore.DEFAULT_KEEP
) -> RunSettings:
    return RunSettings(
        inventory_root=root,
        hosts_file=root / "hosts.yml",
        command="test",
        playbook=PLAYBOOKS / playbook,
        options=options or RunOptions(),
        keep_runs=keep_runs,
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


# --- phases -----------------------------------------------------------------------------------------


def test_select_phases_orders_and_explains() -> None:
    sel = select_phases(PHASES, "host,preflight", None, PHASES)
    assert sel.run == ("preflight", "host")
    assert dict(sel.skipped) == {
        p: "not asked for (--only preflight,host)" for p in ("cluster", "platform", "verify")
    }
    sel = select_phases(PHASES, None, "cluster", PHASES)
    assert sel.run == ("cluster", "platform", "verify")
    assert [p for p, _ in sel.skipped] == ["preflight", "host"]
    assert select_phases(PHASES, None, None, PHASES).run == PHASES


def test_select_phases_honours_the_inventory() -> None:
    lab = ("preflight", "host")
    sel = select_phases(PHASES, None, None, lab, "containers cannot run a kubelet")
    assert sel.run == lab
    assert dict(sel.skipped)["cluster"] == "the inventory leaves it out: containers cannot run a kubelet"
    sel = select_phases(PHASES, "preflight,cluster", None, lab, "")
    assert sel.run == ("preflight",)
    assert (
        dict(sel.skipped)["cluster"] == "the inventory leaves it out: not in this inventory's gpubring_phases"
    )
    with pytest.raises(PhaseError, match=r"no phase left to run.*cluster: the inventory leaves"):
        select_phases(PHASES, None, "cluster", lab, "containers cannot run a kubelet")


def test_select_phases_runs_check_only_phases_in_check_mode() -> None:
    lab = ("preflight", "host", "verify")
    dry = ("cluster", "platform")
    sel = select_phases(PHASES, None, None, lab, "no kubelet in a container", check_only=dry)
    assert sel.run == lab
    assert dict(sel.skipped)["cluster"] == (
        "the inventory leaves it out: no kubelet in a container (it runs in check mode: gpubring up --check)"
    )
    sel = select_phases(PHASES, None, None, lab, "", check=True, check_only=dry)
    assert sel.run == PHASES
    sel = select_phases(PHASES, "cluster,platform", None, lab, "", check=True, check_only=dry)
    assert sel.run == dry
    # Check mode alone does not bring back a phase the inventory leaves out.
    sel = select_phases(PHASES, None, None, lab, "", check=True, check_only=("cluster",))
    assert sel.run == ("preflight", "host", "cluster", "verify")
    assert [p for p, _ in sel.skipped] == ["platform"]


@pytest.mark.parametrize(
    ("only", "from_phase", "message"),
    [
        ("preflight,hots", None, "--only: unknown phase hots; the phases are preflight, host, cluster"),
        (",", None, "--only: unknown phase \\(empty\\)"),
        (None, "clutser", "--from: unknown phase clutser"),
        (None, "host,cluster", "--from takes one phase"),
        ("host", "cluster", "--only and --from cannot be used together"),
    ],
)
def test_select_phases_rejects_bad_names(only: str | None, from_phase: str | None, message: str) -> None:
    with pytest.raises(PhaseError, match=message):
        select_phases(PHASES, only, from_phase, PHASES)


# --- extra vars -------------------------------------------------------------------------------------


def test_extra_vars_forms(tmp_path: Path) -> None:
    (tmp_path / "vars.yml").write_text("a: 1\nnested: {b: [1, 2]}\n")
    (tmp_path / "vars.json").write_text('{"c": true}')
    (tmp_path / "vault.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n3132\n")
    (tmp_path / "empty.yml").write_text("")
    sources = parse_extra_vars(
        [
            "k=v",
            "x='two words' y=3",
            '{"j": 1}',
            "@vars.yml",
            f"@{tmp_path / 'vars.json'}",
            "@vault.yml",
            "@empty.yml",
        ],
        base=tmp_path,
    )
    assert sources == (
        {"k": "v"},
        {"x": "two words", "y": "3"},
        {"j": 1},
        {"a": 1, "nested": {"b": [1, 2]}},
        {"c": True},
        (tmp_path / "vault.yml").resolve(),
        {},
    )
    assert extra_var_names(sources) == ["k", "x", "y", "j", "a", "nested", "c", "@vault.yml (vault)"]


@pytest.mark.parametrize(
    ("arg", "content", "message"),
    [
        ("@missing.yml", None, "-e @.*missing.yml: no such file"),
        ("@bad.yml", "a: [1, 2\nb: 3\n", "-e @.*bad.yml: invalid YAML/JSON at line 2"),
        ("@list.yml", "- a\n- b\n", "-e @.*list.yml: expected a mapping of variables, found list"),
        ("S3cr3t-only-a-value", None, "'S3cr3t-only-a-value' is not KEY=VALUE"),
        ("1bad=x", None, "'1bad' is not KEY=VALUE"),
        ("{not: [closed", None, "not a valid JSON/YAML mapping"),
        ("", None, "empty value"),
    ],
)
def test_extra_vars_errors(tmp_path: Path, arg: str, content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / arg[1:]).write_text(content)
    with pytest.raises(ExtraVarsError, match=message):
        parse_extra_vars([arg], base=tmp_path)


# --- accelerator, defaults, plays ---------------------------------------------------------------------


def test_accelerator_choice(tmp_path: Path) -> None:
    assert accelerator(False) == Accelerator("linear", {})
    # This venv has mitogen (the test extra) and an ansible-core line Mitogen supports.
    fast = accelerator(True)
    assert fast.strategy == "mitogen_linear"
    assert fast.notice == ""
    assert (Path(fast.env["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()
    too_new = accelerator(True, ansible_core=(2, 99, 0))
    assert too_new.strategy == "linear"
    assert too_new.env == {}
    assert "Mitogen is not enabled for ansible-core 2.99.0" in too_new.notice
    too_old = accelerator(True, ansible_core=(2, 9, 27))
    assert too_old.strategy == "linear"
    # Mitogen's own declaration is read, a maximum too when a release declares one.
    loaders = tmp_path / "loaders.py"
    loaders.write_text("ANSIBLE_VERSION_MIN = (2, 12)\nANSIBLE_VERSION_MAX = (2, 17)\n")
    assert mitogen_declared_range(loaders) == ((2, 12), (2, 17))


def test_plays_of_follows_imports(tmp_path: Path) -> None:
    (tmp_path / "inner.yml").write_text("- hosts: gpu_nodes\n  tasks: []\n")
    (tmp_path / "outer.yml").write_text(
        "- name: First\n  hosts: all\n  tasks: []\n- ansible.builtin.import_playbook: inner.yml\n"
    )
    assert plays_of(tmp_path / "outer.yml") == ["First", "gpu_nodes"]
    assert plays_of(tmp_path / "missing.yml") == []


def test_cancel_flag_catches_sigterm() -> None:
    flag = CancelFlag()
    before = signal.getsignal(signal.SIGTERM)
    with flag.on_signals():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next statement
    assert flag.is_set()
    assert flag.reason == "SIGTERM received"
    assert signal.getsignal(signal.SIGTERM) is before


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    base = runstore.runs_dir(tmp_path)
    made = [
        runstore.new_run_folder(tmp_path, "up", datetime(2025, 1, day, 12, 0, 0).astimezone())
        for day in (3, 1, 2)
    ]
    same_second = runstore.new_run_folder(tmp_path, "up", datetime(2025, 1, 2, 12, 0, 0).astimezone())
    assert same_second.name.endswith("-up-2")
    (base / "notes").mkdir()  # not a run folder: never touched
    removed = runstore.prune(base, keep=2)
    assert [p.name for p in removed] == [made[1].name, made[2].name]
    assert [p.name for p in runstore.run_folders(base)] == [same_second.name, made[0].name]
    assert (base / "notes").is_dir()
    assert mode(base) == 0o700
    assert mode(base.parent) == 0o700


# --- real runs against localhost ----------------------------------------------------------------------


def test_real_run_of_the_mixed_playbook(local_inventory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUBRING_TEST_SHELL_TOKEN", "sh3ll-t0ken-value")
    seen: list[Event] = []
    result = process.run(
        settings_for(
            local_inventory, "mixed.yml", RunOptions(extra_vars=({"gpubring_test_secret": "S3cr3t-runner"},))
        ),
        on_event=seen.append,
    )
    assert result.exit_code == ExitCode.TASK_FAILED
    assert result.status == "failed"
    data = result.report.to_json()
    assert set(report.REPORT_FIELDS) <= set(data)
    assert data["stats"]["node1"] == {
        "ok": 2,
        "changed": 1,
        "failed": 1,
        "unreachable": 0,
        "skipped": 1,
        "rescued": 0,
        "ignored": 0,
    }
    assert data["failures"] == [
        {
            "host": "node1",
            "task": "Break on purpose",
            "role": "",
            "status": "failed",
            "message": "gpubring-test failure message",
            "phase": "",
            "play": "Mixed results",
        }
    ]
    assert data["exit_code"] == 1
    assert data["ansible_rc"] == 2
    assert data["stopped_at"] is None
    assert data["options"]["extra_vars"] == ["gpubring_test_secret"]
    assert datetime.fromisoformat(data["started"]) <= datetime.fromisoformat(data["ended"])
    assert data["duration_s"] >= 0
    assert any(isinstance(e, TaskStart) and e.role == "hello" for e in seen)

    folder = result.run_folder
    assert folder.parent == local_inventory.resolve() / ".gpubring" / "runs"
    assert folder.name.endswith("-test")
    assert json.loads((folder / "report.json").read_text()) == data
    assert mode(folder) == 0o700
    for path in files_under(folder):
        assert mode(path) == 0o600, path
    # Inventory: the absolute path of hosts.yml only (GPU_NOTES 15: never a relative dir, never a dict).
    command = json.loads(next(folder.glob("artifacts/*/command")).read_text())
    args = command["command"]
    inventories = [args[i + 1] for i, a in enumerate(args) if a == "-i"]
    assert inventories == [str(local_inventory.resolve() / "hosts.yml")]
    assert command["env"]["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert command["env"]["ANSIBLE_PIPELINING"] == "True"
    assert "GPUBRING_TEST_SHELL_TOKEN" not in command["env"]
    # The operator's extra vars went through a private file under the run folder, removed since.
    var_files = [Path(a[1:]) for a in args if a.startswith("@") and "extra-vars" in a]
    assert var_files and all(not p.exists() and p.parent == folder / "vars" for p in var_files)
    for path in files_under(folder):
        text = path.read_bytes()
        assert b"S3cr3t-runner" not in text, path
        assert b"sh3ll-t0ken-value" not in text, path


def test_defaults_rank_below_inventory_group_vars_and_runs_rotate(local_inventory: Path) -> None:
    group_vars = local_inventory / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    (group_vars / "network.yml").write_text("---\ngpubring_cni: cilium\n")
    (group_vars / "versions.yml").write_text("---\ngpubring_versions: {kubernetes: {version: 1.34.9}}\n")
    base = runstore.runs_dir(local_inventory)
    old = [
        runstore.new_run_folder(local_inventory, "up", datetime(2024, 5, d).astimezone()) for d in (1, 2, 3)
    ]
    result = process.run(
        settings_for(
            local_inventory,
            "vars.yml",
            RunOptions(extra_vars=parse_extra_vars(["gpubring_from_extra_vars=yes"]), accelerate=False),
            keep_runs=3,
        )
    )
    assert result.exit_code == ExitCode.OK, result.report
    assert result.report.stats["node1"].ok == 1
    assert result.report.options["strategy"] == "linear"
    # The defaults and the matrix come from the collection's vars plugin, not from files gpubring writes.
    assert not (result.run_folder / "inventory").exists()
    assert [p.name for p in runstore.run_folders(base)] == [old[1].name, old[2].name, result.run_folder.name]


@pytest.mark.parametrize("accelerate", [True, False], ids=["mitogen", "linear"])
def test_cancel_stops_the_run_and_its_workers(local_inventory: Path, accelerate: bool) -> None:
    flag = CancelFlag()

    def on_event(event: Event) -> None:
        if isinstance(event, TaskStart) and event.task == "Wait for the cancel":
            flag.set("test cancel")

    settings = settings_for(local_inventory, "wait.yml", RunOptions(accelerate=accelerate))
    result = process.run(settings, on_event, flag)
    assert result.exit_code == ExitCode.CANCELLED
    assert result.status == "cancelled"
    stopped = result.report.to_json()["stopped_at"]
    assert stopped["play"] == "Wait to be cancelled"
    assert stopped["hosts"]["node1"] == {
        "phase": "",
        "play": "Wait to be cancelled",
        "task": "Wait for the cancel",
        "role": "",
        "finished": False,
    }
    assert json.loads((result.run_folder / "report.json").read_text())["status"] == "cancelled"
    # Nothing of this run is left running (ansible's workers detach into their own sessions). Every
    # process of the run names the playbook; the run folder is on no command line.
    marker = str(PLAYBOOKS / "wait.yml").encode()
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes():
                    left.append(entry.name)
            except OSError:
                continue
    assert left == []


def test_unreachable_host_outranks_a_failed_task(tmp_path: Path) -> None:
    root = tmp_path / "inventory"
    root.mkdir()
    shutil.copy(DATA / "inventories" / "record.yml", root / "hosts.yml")
    result = process.run(settings_for(root, "mixed.yml"))
    assert result.exit_code == ExitCode.UNREACHABLE
    assert result.report.status == "unreachable"
    assert result.report.stats["nobody"].unreachable == 1
    assert result.report.stats["localhost"].failed == 1
    unreachable = [f for f in result.report.failures if f.status == "unreachable"]
    assert [(f.host, f.task) for f in unreachable] == [("nobody", "Change something")]
    assert "Connection refused" in unreachable[0].message
