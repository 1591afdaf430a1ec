"""Reboots in one place (issue 13 item 4): the reboot play of playbooks/host.yml runs in gpubring_serial
batches, the reboot role's verdict reaches the run's summary and report.json, and the role itself,
run for real on local hosts that may not reboot, says which host needs a reboot and why not."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from gpubring import events, report, view
from helpers import DATA, FIXTURES, REPO, ansible_playbook
from helpers import folded as _state

RECORDED = FIXTURES / "events" / "reboot.jsonl"
HOST_YML = REPO / "playbooks" / "host.yml"

GPU01 = [
    "kernel: kernel arguments changed (iommu=pt intel_iommu=on)",
    "nvidia_driver: the loaded nvidia module is 570.133.20, the installed driver 580.105.08",
]
GPU02 = ["nvidia_driver: nouveau is loaded"]


def _cpu01(flag_dir: str) -> list[str]:
    return [
        "rdma: the IOMMU kernel arguments changed",
        f"linux-image-6.1.0-28-amd64 ({flag_dir}/cpu01/reboot-required.pkgs)",
    ]


def _report(state: events.RunState, tmp_path: Path) -> dict[str, Any]:
    now = datetime.now(UTC)
    meta = report.RunMeta("up", tmp_path, tmp_path / "hosts.yml", tmp_path, "run.yml", now, now, 0)
    return report.build(state, meta)


def _summary(doc: dict[str, Any]) -> str:
    out = io.StringIO()
    view.summary(
        Console(file=out, width=400, force_terminal=False, color_system=None), report.RunReport.from_json(doc)
    )
    return out.getvalue()


# --- the play -------------------------------------------------------------------------------------


def test_host_yml_reboots_last_in_gpubring_serial_batches() -> None:
    plays = yaml.safe_load(HOST_YML.read_text())
    last = plays[-1]
    assert [r["role"] for r in last["roles"]] == ["gpubring.core.reboot"]
    assert last["hosts"] == "all"
    assert "gpubring_serial" in last["serial"]
    # No other play reboots: the roles only flag.
    assert all("gpubring.core.reboot" not in str(p.get("roles")) for p in plays[:-1])


@pytest.mark.parametrize("serial", ["1", "50%"])
def test_the_reboot_play_takes_its_batch_size_from_gpubring_serial(serial: str) -> None:
    sample = REPO / "inventories" / "prod"
    done = ansible_playbook("-i", sample, "--syntax-check", HOST_YML)
    assert done.returncode == 0, done.stdout + done.stderr
    done = ansible_playbook(
        "-i", sample, "--list-tasks", "--tags", "reboot", "-e", f"gpubring_serial={serial}", HOST_YML
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    play = out[out.index("play #4 (all): Reboot the hosts that need it") :]
    assert "gpubring.core.reboot : Collect why this host needs a reboot" in play
    # Ansible templates serial before any host; a bad value fails here, a good one lists the play.
    bad = ansible_playbook(
        "-i", sample, "--list-tasks", "--tags", "reboot", "-e", "gpubring_serial=many", HOST_YML
    )
    assert bad.returncode == 0 or "serial" in (bad.stdout + bad.stderr)


def test_no_role_reboots_by_itself() -> None:
    tasks = [p for p in (REPO / "roles").glob("*/tasks/*.yml") if p.parts[-3] != "reboot"]
    offenders = [str(p.relative_to(REPO)) for p in tasks if "ansible.builtin.reboot" in p.read_text()]
    assert offenders == []


# --- the role for real, on local hosts that may not reboot ----------------------------------------


def test_the_reboot_role_reports_why_each_host_is_not_rebooted(tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    (flags / "cpu01").mkdir(parents=True)
    (flags / "cpu01" / "reboot-required").write_text("*** System restart required ***\n")
    (flags / "cpu01" / "reboot-required.pkgs").write_text(
        "gpubring-rdma-cmdline\nlinux-image-6.1.0-28-amd64\n"
    )
    out = tmp_path / "facts"
    play = tmp_path / "play.yml"
    plays = yaml.safe_load((DATA / "playbooks" / "reboot.yml").read_text())
    plays.append(
        {
            "name": "Keep the facts",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Write the reboot facts",
                    "ansible.builtin.copy": {
                        "dest": f"{out}-{{{{ inventory_hostname }}}}.json",
                        "content": "{{ {'pending': gpubring_reboot_pending | default(None),"
                        " 'because': gpubring_reboot_pending_because | default(None),"
                        " 'rebooted': gpubring_rebooted | default(None)} | to_json }}",
                        "mode": "0600",
                    },
                }
            ],
        }
    )
    play.write_text(yaml.safe_dump(plays, sort_keys=False))
    done = ansible_playbook("-i", DATA / "inventories" / "reboot.yml", "-e", f"reboot_test_dir={flags}", play)
    assert done.returncode == 0, done.stdout + done.stderr
    facts = {h: json.loads(Path(f"{out}-{h}.json").read_text()) for h in ("gpu01", "gpu02", "cpu01", "cpu02")}
    assert facts["gpu01"] == {
        "pending": GPU01,
        "because": "gpubring_reboot_allowed is false",
        "rebooted": None,
    }
    assert facts["gpu02"] == {"pending": GPU02, "because": "nvidia_driver_reboot is false", "rebooted": None}
    assert facts["cpu01"] == {
        "pending": _cpu01(str(flags)),
        "because": "gpubring_reboot_allowed is false",
        "rebooted": None,
    }
    assert facts["cpu02"] == {"pending": None, "because": None, "rebooted": None}
    # The reboot play changed nothing, and the flag stays for the next run.
    assert "changed: [" not in done.stdout[: done.stdout.index("PLAY [Keep the facts]")]
    assert (flags / "cpu01" / "reboot-required").exists()


def test_check_mode_reboots_nothing_and_says_so(tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    done = ansible_playbook(
        "-i", DATA / "inventories" / "reboot.yml", "--check", "--limit", "gpu01",
        "-e", f"reboot_test_dir={flags}", "-e", "gpubring_reboot_allowed=true", "-v",
        DATA / "playbooks" / "reboot.yml",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "and it is not done (check mode (--check))" in done.stdout


# --- what gpubring shows --------------------------------------------------------------------------


def test_the_recorded_stream_gives_the_summary_and_the_report_the_pending_reboots(tmp_path: Path) -> None:
    state = _state(events.load_events(RECORDED.read_text().splitlines()))
    doc = _report(state, tmp_path)
    assert list(report.REPORT_FIELDS) == list(doc)
    assert doc["reboot_pending"] == {
        "cpu01": {"reasons": _cpu01("/tmp/gpubring-test"), "because": "gpubring_reboot_allowed is false"},
        "gpu01": {"reasons": GPU01, "because": "gpubring_reboot_allowed is false"},
        "gpu02": {"reasons": GPU02, "because": "nvidia_driver_reboot is false"},
    }
    assert doc["rebooted"] == {}
    lines = _summary(doc).splitlines()
    assert (
        "reboot needed (gpubring_reboot_allowed is false): "
        f"cpu01 ({'; '.join(_cpu01('/tmp/gpubring-test'))}), gpu01 ({'; '.join(GPU01)})"
    ) in lines
    assert "reboot needed (nvidia_driver_reboot is false): gpu02 (nvidia_driver: nouveau is loaded)" in lines
    assert not any(line.startswith("rebooted:") for line in lines)


def _set_fact(host: str, facts: dict[str, Any]) -> dict[str, Any]:
    return {
        "event": "runner_on_ok",
        "event_data": {
            "host": host,
            "task": "Publish",
            "role": "reboot",
            "res": {"changed": False, "ansible_facts": facts},
        },
    }


def test_a_host_rebooted_in_a_later_batch_is_no_longer_pending(tmp_path: Path) -> None:
    reasons = ["kernel: kernel arguments changed (hugepages=16)"]
    state = _state(
        [
            _set_fact("gpu01", {"gpubring_reboot_pending": reasons, "gpubring_reboot_pending_because": "x"}),
            _set_fact("gpu02", {"gpubring_reboot_pending": GPU02, "gpubring_reboot_pending_because": "y"}),
            _set_fact("gpu01", {"gpubring_rebooted": reasons, "gpubring_reboot_pending": []}),
            _set_fact("gpu03", {"preflight_summary": {"os": "Debian 12"}}),
        ]
    )
    doc = _report(state, tmp_path)
    assert doc["rebooted"] == {"gpu01": reasons}
    assert doc["reboot_pending"] == {"gpu02": {"reasons": GPU02, "because": "y"}}
    lines = _summary(doc).splitlines()
    assert "rebooted: gpu01 (kernel: kernel arguments changed (hugepages=16))" in lines
    assert "reboot needed (y): gpu02 (nvidia_driver: nouveau is loaded)" in lines


def test_a_run_without_reboots_says_nothing_about_them(tmp_path: Path) -> None:
    state = _state(events.load_events((FIXTURES / "events" / "mixed.jsonl").read_text().splitlines()))
    doc = _report(state, tmp_path)
    assert doc["rebooted"] == {} and doc["reboot_pending"] == {}
    lines = _summary(doc).splitlines()
    assert not [line for line in lines if line.startswith(("rebooted:", "reboot needed"))]


def test_the_drain_before_a_reboot_is_a_no_op_without_a_control_plane_group(tmp_path: Path) -> None:
    # Ansible resolves delegate_to before `when`: an inventory without control_plane must not fail there.
    play = tmp_path / "drain.yml"
    tasks = [
        {"ansible.builtin.include_role": {"name": "gpubring.core.node_drain", "tasks_from": entry}}
        for entry in ("drain", "uncordon")
    ]
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    done = ansible_playbook("-i", DATA / "inventories" / "reboot.yml", "--limit", "cpu02", play)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cpu02 is in no cluster yet (no control_plane group): nothing to" in done.stdout
