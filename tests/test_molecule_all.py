"""scripts/molecule-all.sh's runs on a second Debian release (molecule/releases.txt, NAME@DISTRO).

The script itself runs, in a copy of the layout it needs, with stand-ins for what it drives (the
`molecule` command, the engine and image scripts): each stand-in records what it was asked, and the
tests read those records. The repository's own molecule/releases.txt is checked against its scenarios.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpubring.lab.shape import DISTROS
from helpers import REPO

# `molecule test -s NAME`: records its start and end with MOLECULE_DISTRO, and OVERLAP when another run
# of the same scenario is still going (Molecule keeps one state per scenario); FAIL_<NAME>_<DISTRO>
# makes that run fail.
FAKE_MOLECULE = r"""#!/usr/bin/env bash
[[ $1 == test && $2 == -s ]] || { echo "unexpected: $*" >&2; exit 9; }
name=$3 distro=${MOLECULE_DISTRO:-}
mark=$RECORD.running.$name
[[ -e $mark ]] && echo "OVERLAP $name" >>"$RECORD"
: >"$mark"
echo "start $name ${distro:-default}" >>"$RECORD"
sleep 0.4
rm -f "$mark"
echo "end $name ${distro:-default}" >>"$RECORD"
fail="FAIL_${name}_${distro:-default}"
[[ -z ${!fail:-} ]]
"""


def _tree(root: Path) -> None:
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "molecule-all.sh", root / "scripts" / "molecule-all.sh")
    (root / "scripts" / "engine.sh").write_text("#!/bin/sh\nexit 0\n")
    images = root / "molecule" / "images"
    images.mkdir(parents=True)
    (images / "build.sh").write_text('#!/bin/sh\necho "image $1" >>"$RECORD"\n')
    # a: the shared base's platform (debian12 unless MOLECULE_DISTRO); b: its own, debian13 by default.
    (root / "molecule" / "a").mkdir()
    (root / "molecule" / "a" / "molecule.yml").write_text("provisioner: {name: ansible}\n")
    (root / "molecule" / "b").mkdir()
    (root / "molecule" / "b" / "molecule.yml").write_text(
        'platforms:\n  - image: "gpubring-testhost:${MOLECULE_DISTRO:-debian13}"\n'
    )
    # The two runs of a are the longest: started first, they would share the two lanes.
    (root / "molecule" / "durations.txt").write_text("# seconds\n9 a\n8 a@debian13\n1 b\n")
    (root / "molecule" / "releases.txt").write_text("# NAME@DISTRO\na@debian13\n\nb@debian12  # why\n")
    for script in (root / "scripts" / "molecule-all.sh", root / "scripts" / "engine.sh", images / "build.sh"):
        script.chmod(0o755)


def _run(root: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "molecule").exists():  # a test may have put its own stand-in there
        (bin_dir / "molecule").write_text(FAKE_MOLECULE)
    # The collection link does nothing here; the result cache's keys come from the real script.
    (bin_dir / "python3").write_text(
        f'#!/bin/sh\ncase "$1" in *molecule_inputs.py) exec {sys.executable} "$@";; esac\nexit 0\n'
    )
    for tool in ("molecule", "python3"):
        (bin_dir / tool).chmod(0o755)
    record = root / "record.txt"
    record.write_text("")
    full_env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(root / "home"),
        "RECORD": str(record),
        "GPUBRING_CCACHE_DIR": str(root / "ccache"),
        "GPUBRING_MOLECULE_JOBS": "2",
        "GPUBRING_MOLECULE_CACHE_DIR": str(root / "passes"),
        **env,
    }
    proc = subprocess.run(
        ["bash", str(root / "scripts" / "molecule-all.sh"), *args],
        capture_output=True, text=True, timeout=120, check=False, env=full_env,
    )  # fmt: skip
    return proc, record.read_text().splitlines()


def test_the_listed_scenarios_run_again_on_their_release_never_beside_their_first_run(tmp_path: Path) -> None:
    _tree(tmp_path)
    proc, record = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "4 passed, 0 failed"
    for name in ("a", "a@debian13", "b", "b@debian12"):
        assert re.search(rf"^  PASS  {re.escape(name)} \(\d+s\)$", proc.stdout, re.M), proc.stdout
    runs = sorted(line for line in record if line.startswith("start "))
    assert runs == ["start a debian13", "start a default", "start b debian12", "start b default"]
    # Two lanes, and the two runs of a at the head of the queue: the second waited for the first.
    assert not [line for line in record if line.startswith("OVERLAP")], record
    # Every image a run uses is built first: the base's debian12, b's debian13, and the listed ones.
    assert sorted(line for line in record if line.startswith("image ")) == [
        "image debian12",
        "image debian13",
    ]
    durations = (tmp_path / ".gpubring" / "molecule" / "durations.txt").read_text().split("\n")
    assert {line.split(" ")[1] for line in durations if line} == {"a", "a@debian13", "b", "b@debian12"}


def test_a_failed_release_run_is_named_with_its_release(tmp_path: Path) -> None:
    _tree(tmp_path)
    proc, _ = _run(tmp_path, FAIL_a_debian13="1")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == "3 passed, 1 failed"
    assert re.search(
        r"^  FAIL  a@debian13 \(\d+s, exit 1, log: .gpubring/molecule/a@debian13.log\)$", proc.stdout, re.M
    )
    assert re.search(r"^  PASS  a \(\d+s\)$", proc.stdout, re.M)


def test_named_scenarios_run_alone_and_name_at_distro_sets_the_release(tmp_path: Path) -> None:
    _tree(tmp_path)
    proc, record = _run(tmp_path, "b@debian12")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line for line in record if line.startswith("start ")] == ["start b debian12"]
    assert [line for line in record if line.startswith("image ")] == ["image debian12"]


# --- the repository's list ------------------------------------------------------------------------


def _releases() -> list[tuple[str, str]]:
    lines = (REPO / "molecule" / "releases.txt").read_text().splitlines()
    entries = [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]
    return [(e.split("@")[0], e.split("@")[1]) for e in entries]


def _default_distro(name: str) -> str:
    text = (REPO / "molecule" / name / "molecule.yml").read_text()
    match = re.search(r"gpubring-testhost:\$\{MOLECULE_DISTRO:-([a-z0-9]+)\}", text)
    return match.group(1) if match else "debian12"  # the shared base's default


@pytest.mark.parametrize(("name", "distro"), _releases(), ids=str)
def test_each_listed_run_is_a_scenario_on_the_release_its_default_does_not_run(
    name: str, distro: str
) -> None:
    assert (REPO / "molecule" / name / "molecule.yml").is_file(), f"no scenario {name}"
    assert distro in DISTROS
    assert distro != _default_distro(name), f"{name}@{distro} would run its default release again"
    durations = (REPO / "molecule" / "durations.txt").read_text().split()
    assert f"{name}@{distro}" in durations, f"molecule/durations.txt has no time for {name}@{distro}"


# --- the result cache -------------------------------------------------------------------------------


def _cached_tree(root: Path) -> None:
    """The tree above, with the key script and two roles: a's converge names r1, b's names r2."""
    _tree(root)
    shutil.copy(REPO / "scripts" / "molecule_inputs.py", root / "scripts" / "molecule_inputs.py")
    for role in ("r1", "r2"):
        (root / "roles" / role / "tasks").mkdir(parents=True)
        (root / "roles" / role / "tasks" / "main.yml").write_text(
            f"- name: {role}\n  ansible.builtin.ping:\n"
        )
    for scenario, role in (("a", "r1"), ("b", "r2")):
        (root / "molecule" / scenario / "converge.yml").write_text(
            f"- hosts: all\n  roles:\n    - role: gpubring.core.{role}\n"
        )


def _started(record: list[str]) -> list[str]:
    return sorted(line.removeprefix("start ") for line in record if line.startswith("start "))


def test_a_scenario_whose_inputs_did_not_change_is_not_run_again(tmp_path: Path) -> None:
    _cached_tree(tmp_path)
    first, record = _run(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _started(record) == ["a debian13", "a default", "b debian12", "b default"]
    assert "molecule-all: 0 of 4 scenarios from the result cache" in first.stdout

    again, record = _run(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _started(record) == []
    assert again.stdout.splitlines()[-1] == "4 passed, 0 failed"
    assert "molecule-all: 4 of 4 scenarios from the result cache" in again.stdout
    for name in ("a", "a@debian13", "b", "b@debian12"):
        assert re.search(
            rf"^  PASS  {re.escape(name)} \(from the cache: passed in \d+s at unknown on "
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; its inputs have not changed\)$",
            again.stdout,
            re.M,
        ), again.stdout
    # The cached runs keep their place in the durations a later run orders by.
    durations = (tmp_path / ".gpubring" / "molecule" / "durations.txt").read_text().split("\n")
    assert {line.split(" ")[1] for line in durations if line} == {"a", "a@debian13", "b", "b@debian12"}

    # GPUBRING_MOLECULE_CACHE=0 runs them all.
    forced, record = _run(tmp_path, GPUBRING_MOLECULE_CACHE="0")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert _started(record) == ["a debian13", "a default", "b debian12", "b default"]


def test_a_change_runs_again_only_the_scenarios_that_read_what_changed(tmp_path: Path) -> None:
    _cached_tree(tmp_path)
    assert _run(tmp_path)[0].returncode == 0
    (tmp_path / "roles" / "r1" / "tasks" / "main.yml").write_text(
        "- name: r1 changed\n  ansible.builtin.ping:\n"
    )
    proc, record = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _started(record) == ["a debian13", "a default"]
    # A change to b's own folder, and to the shared base, which every scenario reads.
    (tmp_path / "molecule" / "b" / "verify.yml").write_text("- hosts: all\n")
    assert _started(_run(tmp_path)[1]) == ["b debian12", "b default"]
    (tmp_path / ".config" / "molecule").mkdir(parents=True)
    (tmp_path / ".config" / "molecule" / "config.yml").write_text("driver: {name: docker}\n")
    assert _started(_run(tmp_path)[1]) == ["a debian13", "a default", "b debian12", "b default"]


def test_a_failed_run_is_not_kept_and_an_old_pass_runs_again(tmp_path: Path) -> None:
    _cached_tree(tmp_path)
    proc, _ = _run(tmp_path, FAIL_a_default="1")
    assert proc.returncode == 1
    proc, record = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _started(record) == ["a default"]
    # A pass older than GPUBRING_MOLECULE_CACHE_DAYS is removed and its scenario runs.
    old = 8 * 24 * 3600
    for entry in (tmp_path / "passes" / "b").iterdir():
        stat = entry.stat()
        os.utime(entry, (stat.st_atime - old, stat.st_mtime - old))
    proc, record = _run(tmp_path)
    assert _started(record) == ["b default"]
    assert len(list((tmp_path / "passes" / "b").iterdir())) == 2  # the new pass and its log


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("GPUBRING_MOLECULE_CACHE", "yes", "(expected 0 or 1)"),
        ("GPUBRING_MOLECULE_CACHE_DAYS", "0", "(expected a whole number >= 1)"),
        ("GPUBRING_MOLECULE_CACHE_DAYS", "7d", "(expected a whole number >= 1)"),
    ],
)
def test_bad_cache_settings_are_refused_before_any_run(
    tmp_path: Path, variable: str, value: str, expected: str
) -> None:
    _cached_tree(tmp_path)
    proc, record = _run(tmp_path, **{variable: value})
    assert proc.returncode == 2
    assert f"molecule-all: error: {variable}={value} {expected}" in proc.stderr
    assert record == []


def test_an_unwritable_cache_folder_runs_every_scenario_and_says_so(tmp_path: Path) -> None:
    _cached_tree(tmp_path)
    (tmp_path / "passes").write_text("a file, not a folder")
    proc, record = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no result cache" in proc.stdout
    assert len(_started(record)) == 4


def test_a_pass_whose_inputs_changed_while_it_ran_is_not_kept(tmp_path: Path) -> None:
    _cached_tree(tmp_path)
    # The stand-in for molecule edits the role that scenario a reads while a runs.
    fake = tmp_path / "bin" / "molecule"
    fake.parent.mkdir()
    edit = f'[[ $3 == a ]] && echo "# edited" >>{tmp_path}/roles/r1/tasks/main.yml\n'
    fake.write_text(FAKE_MOLECULE.replace("sleep 0.4\n", "sleep 0.4\n" + edit))
    proc, _ = _run(tmp_path, "a", "b")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "molecule-all: a: its inputs changed while it ran: its pass is not kept" in proc.stdout
    assert not (tmp_path / "passes" / "a").exists()
    assert len(list((tmp_path / "passes" / "b").iterdir())) == 2
