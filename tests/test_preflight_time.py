"""preflight's time-sync verdict from its one read (roles/preflight/tasks/probe.yml, issue 26 item 1).

The probe's shell answers timedated's NTPSynchronized ("ntp_rc", "ntp" lines) and, in the same call,
the systemd state of each time service ("svc UNIT STATE" lines; a service_facts call of its own per
host before). The verdict is computed on the controller from those lines (vars/main.yml): these run
it through Ansible on recorded answers, one host per case, and read what preflight's check would say.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from helpers import REPO, ansible_playbook

ROLE = REPO / "roles" / "preflight"

# "Failed to connect to bus" is what timedatectl answers in a container without systemd's D-Bus.
CASES: dict[str, list[str]] = {
    "unreadable-chrony-runs": [
        "ntp_rc 1", "ntp Failed to connect to bus: No such file or directory",
        "svc chrony.service running", "svc systemd-timesyncd.service dead",
        "svc ntpsec.service ", "svc ntp.service dead",
    ],
    "unreadable-none-runs": [
        "ntp_rc 1", "ntp Failed to connect to bus: No such file or directory",
        "svc chrony.service dead", "svc systemd-timesyncd.service exited",
        "svc ntpsec.service ", "svc ntp.service dead",
    ],
    "readable-not-synced": [
        "ntp_rc 0", "ntp no", "svc chrony.service dead", "svc systemd-timesyncd.service running",
        "svc ntpsec.service dead", "svc ntp.service dead",
    ],
    "synced": ["ntp_rc 0", "ntp yes", "svc chrony.service dead", "svc systemd-timesyncd.service dead"],
}  # fmt: skip


def _verdicts(tmp_path: Path) -> dict[str, dict[str, Any]]:
    hosts = {name: {"ansible_connection": "local"} for name in CASES}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    out = tmp_path / "out"
    out.mkdir()
    play = [
        {
            "name": "The time-sync verdict",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "ansible_facts": {"os_family": "Debian"},
                "__preflight_probe": {"stdout_lines": "{{ probe_lines[inventory_hostname] }}"},
                "probe_lines": CASES,
            },
            "tasks": [
                {"name": "Defaults", "ansible.builtin.include_vars": str(ROLE / "defaults" / "main.yml")},
                {"name": "Role vars", "ansible.builtin.include_vars": str(ROLE / "vars" / "main.yml")},
                {
                    "name": "Keep",
                    "ansible.builtin.copy": {
                        "content": "{{ {'time': __preflight_time, 'services': __preflight_time_services}"
                        " | to_json }}",
                        "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
                        "mode": "0600",
                    },
                    "delegate_to": "localhost",
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = ansible_playbook("-i", tmp_path / "hosts.yml", tmp_path / "play.yml")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def test_the_time_verdict_reads_the_services_from_the_one_probe(tmp_path: Path) -> None:
    found = _verdicts(tmp_path)
    assert found["unreadable-chrony-runs"]["services"] == [
        "chrony.service", "systemd-timesyncd.service", "ntpsec.service", "ntp.service",
    ]  # fmt: skip
    chrony = found["unreadable-chrony-runs"]["time"]
    # timedated cannot be read, a time service runs: accepted (preflight_time_sync_accept_service).
    assert (chrony["readable"], chrony["active_services"], chrony["ok"]) == (False, ["chrony.service"], True)
    assert chrony["reason"] == "Failed to connect to bus: No such file or directory"
    # "exited" or no state at all (no systemctl, no such unit) is not running.
    none = found["unreadable-none-runs"]["time"]
    assert (none["active_services"], none["ok"]) == ([], False)
    # timedated says "no": a running service does not overrule it, and the line will name it.
    unsynced = found["readable-not-synced"]["time"]
    assert unsynced["readable"] and not unsynced["synchronized"]
    assert (unsynced["active_services"], unsynced["ok"]) == (["systemd-timesyncd.service"], False)
    synced = found["synced"]["time"]
    assert (synced["synchronized"], synced["ok"], synced["active_services"]) == (True, True, [])
