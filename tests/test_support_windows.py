"""Support windows (issue 22 item 3): versions.yml's gpubring_support_windows, sourced there, and what
`gpubring versions`, `gpubring plan` and the end of `gpubring up` say about the pinned Kubernetes minor
and the NVIDIA driver branch on a given day (GPUBRING_TODAY freezes it)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import support, versions
from gpubring.app import app
from gpubring.inventory import load_inventory
from helpers import DATA

# kubernetes.io/releases/<minor>/ (versions.yml cites them): maintenance mode start, end of life.
UPSTREAM = {
    "1.33": ("2026-04-28", "2026-06-28"),
    "1.34": ("2026-08-27", "2026-10-27"),
    "1.35": ("2026-12-28", "2027-02-28"),
    "1.36": ("2027-04-28", "2027-06-28"),
}


def cli(*args: str | Path, today: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(map(str, args)), env={"COLUMNS": "300", support.TODAY_ENV: today})
    return result.exit_code, result.output


def pinned_minor() -> str:
    major, minor, *_ = str(versions.load_pinned()["kubernetes"]["version"]).split(".")
    return f"{major}.{minor}"


def test_the_windows_are_upstreams_dates_and_cited() -> None:
    windows = support.load_windows()
    for minor, (maintenance, eol) in UPSTREAM.items():
        window = windows["kubernetes"][minor]
        assert (window.maintenance, window.end_of_life) == (
            date.fromisoformat(maintenance),
            date.fromisoformat(eol),
        )
        assert "kubernetes.io/releases/" in window.source
    driver = windows["nvidia_driver"]["580"]
    assert driver.end_of_life == date(2028, 6, 30) and "June 2028" in driver.source
    # every pinnable minor has a window: the pin's and the one `upgrade` takes next
    assert pinned_minor() in windows["kubernetes"]
    assert support.next_minor(pinned_minor()) in windows["kubernetes"]


def test_versions_shows_the_windows_for_the_sample(sample_inventory: Path) -> None:
    minor = pinned_minor()
    maintenance, eol = UPSTREAM[minor]
    day = date.fromisoformat(maintenance).replace(day=1).isoformat()  # inside the pin's support
    code, out = cli("versions", sample_inventory, today=day)
    assert code == 0, out
    assert f"Support windows on {day}:" in out
    assert f"Kubernetes {minor}: supported upstream until {maintenance}, end of life {eol}" in out
    assert "NVIDIA driver branch 580: supported upstream until its end of life 2028-06-30" in out
    assert "WARNING" not in out and "maintenance mode" not in out


@pytest.mark.parametrize("command", ["versions", "plan"])
def test_past_the_end_of_life_warns_and_names_the_next_minor(
    command: str, make_inventory: Callable[..., Path]
) -> None:
    """An inventory that still pins 1.34 (the defaults before issue 22), on a day after its end of life."""
    inventory = make_inventory(
        {"group_vars/all/versions.yml": "gpubring_versions: {kubernetes: {version: 1.34.2}}\n"}
    )
    _, out = cli(command, inventory, today="2026-11-27")
    assert "WARNING: Kubernetes 1.34 reached its end of life on 2026-10-27" in out, out
    assert "The next minor `gpubring upgrade` can take is 1.35 (supported until 2027-02-28)" in out
    assert "Traceback" not in out


def test_in_maintenance_mode_is_a_note_not_a_warning() -> None:
    inv_versions = {"kubernetes": {"version": "1.35.9"}, "nvidia_driver": {"branch": "580"}}
    found = support.notes(inv_versions, date(2027, 1, 15))
    kube = found[0]
    assert kube.level == "maintenance" and kube.alarming
    assert "Kubernetes 1.35 is in maintenance mode since 2026-12-28" in kube.text
    assert "until its end of life on 2027-02-28" in kube.text and "is 1.36" in kube.text
    assert found[1].level == "ok"


def test_inside_support_nothing_alarms(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    day = date.fromisoformat(UPSTREAM[pinned_minor()][0]).replace(day=1)  # before maintenance mode
    assert not [n for n in support.notes(inv.versions, day) if n.alarming]
    assert all(n.level == "ok" for n in support.notes(inv.versions, day))


def test_the_driver_branch_past_its_end_of_life_warns() -> None:
    found = support.notes({"nvidia_driver": {"branch": "580"}}, date(2028, 7, 1))
    assert found[0].level == "end-of-life"
    assert "NVIDIA driver branch 580 reached its end of life on 2028-06-30" in found[0].text


def test_a_minor_without_a_window_says_so() -> None:
    found = support.notes({"kubernetes": {"version": "1.29.3"}}, date(2026, 11, 27))
    assert found[0].level == "unknown" and "no support window in versions.yml" in found[0].text


def test_a_bad_frozen_date_is_a_clear_line_not_a_traceback(sample_inventory: Path) -> None:
    _, out = cli("versions", sample_inventory, today="27/11/2026")
    assert "support windows: GPUBRING_TODAY=27/11/2026: expected a date YYYY-MM-DD" in out
    assert "Traceback" not in out
    with pytest.raises(support.SupportError):
        support.today({support.TODAY_ENV: "tomorrow"})
    assert support.today({support.TODAY_ENV: "2027-03-01"}) == date(2027, 3, 1)


def test_up_ends_with_the_warning_only_when_alarming(monkeypatch: pytest.MonkeyPatch) -> None:
    """The end of `gpubring up` prints support.lines(..., only_alarming=True): nothing inside support."""
    matrix = {"kubernetes": {"version": "1.34.2"}, "nvidia_driver": {"branch": "580"}}
    monkeypatch.setenv(support.TODAY_ENV, "2026-07-01")
    assert support.lines(matrix, only_alarming=True) == []
    monkeypatch.setenv(support.TODAY_ENV, "2026-11-27")
    shown = support.lines(matrix, only_alarming=True)
    assert shown[0] == "Support windows on 2026-11-27:"
    assert len(shown) == 2 and "WARNING: Kubernetes 1.34" in shown[1]


PLAY = """\
- name: A stand-in preflight phase
  hosts: all
  gather_facts: false
  tasks:
    - name: Nothing to do
      ansible.builtin.debug:
        msg: ok
"""


@pytest.mark.parametrize(
    ("pin", "day", "warned"), [("1.34.2", "2026-11-27", True), ("1.34.2", "2026-07-01", False)]
)
def test_the_end_of_up_warns_past_the_end_of_life(tmp_path: Path, pin: str, day: str, warned: bool) -> None:
    """`gpubring up` over the local connection (a stand-in phase playbook): its last lines are the
    warning past the pin's end of life, and nothing about support windows inside support."""
    inventory = tmp_path / "inventory"
    shutil.copytree(DATA / "inventories" / "localhost", inventory)
    (inventory / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (inventory / "group_vars" / "all" / "versions.yml").write_text(
        f"gpubring_versions: {{kubernetes: {{version: {pin}}}}}\n"
    )
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "preflight.yml").write_text(PLAY)
    code, out = cli("up", inventory, "--playbooks-dir", playbooks, "--only", "preflight", today=day)
    assert code == 0, out
    tail = out.strip().splitlines()[-2:]
    if warned:
        assert tail[0] == f"Support windows on {day}:", out
        assert tail[1].startswith("  WARNING: Kubernetes 1.34 reached its end of life on 2026-10-27"), out
    else:
        assert "Support windows" not in out, out


def test_broken_windows_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "versions.yml"
    bad.write_text(
        "gpubring_support_windows:\n"
        "  kubernetes: {minors: {'1.35': {maintenance: soon}}}\n"
        "  nvidia_driver: {branches: {}}\n"
    )
    with pytest.raises(support.SupportError, match=r"kubernetes.minors.1.35.maintenance: expected a date"):
        support.load_windows(bad)


def test_versions_json_carries_the_notes(sample_inventory: Path) -> None:
    code, out = cli("versions", sample_inventory, "--json", "-", today="2030-01-01")
    assert code == 0, out
    doc = json.loads(out)["support"]
    assert doc["day"] == "2030-01-01"
    assert [n["level"] for n in doc["notes"]] == ["end-of-life", "end-of-life"]


def test_plan_json_carries_the_notes(sample_inventory: Path) -> None:
    code, out = cli("plan", sample_inventory, "--json", "-", today="2026-11-27")
    assert code == 0, out
    notes = json.loads(out)["support"]["notes"]
    assert notes[0]["text"].startswith(f"Kubernetes {pinned_minor()}: supported upstream until")
