"""scripts/molecule_inputs.py: which repository files go into a Molecule scenario's key.

The key decides whether scripts/molecule-all.sh runs a scenario again (its result cache), so a file a
scenario reads and the key leaves out would let a change go untested: these tests read the real
scenarios and check that what each one reads is in, and that what it cannot read stays out.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from helpers import REPO

SCRIPT = REPO / "scripts" / "molecule_inputs.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("molecule_inputs", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MI = _module()
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def _files(scenario: str) -> set[str]:
    return {str(p.relative_to(REPO)) for p in MI.scenario_files(scenario)}


def _roles(files: set[str]) -> set[str]:
    return {f.split("/")[1] for f in files if f.startswith("roles/")}


def test_the_driver_scenario_reads_its_role_the_fact_module_and_the_os_table_and_no_platform_role() -> None:
    files = _files("nvidia_driver")
    assert "roles/nvidia_driver/tasks/main.yml" in files
    assert "meta/os_support.yml" in files  # roles/nvidia_driver/tasks/vars.yml: ../../meta/os_support.yml
    assert "plugins/modules/gpu_facts.py" in files
    assert "plugins/module_utils/gpu_parsers.py" in files  # imported by gpu_facts
    assert "molecule/nvidia_driver/converge.yml" in files
    assert ".config/molecule/config.yml" in files
    assert "molecule/images/recipe/configure.sh" in files
    assert not _roles(files) & {"helm", "gpu_operator", "schedulers", "preflight"}
    assert not [f for f in files if f.startswith(("cli/gpubring/commands", "tests/", "docs/"))]


def test_a_role_read_through_a_relative_path_and_filters_by_name_are_in() -> None:
    files = _files("cni")
    # roles/cni/tasks/calico_crds.yml renders ../helm/templates/source.yml.j2 (from the role's folder).
    assert "roles/helm/templates/source.yml.j2" in files
    assert "plugins/filter/helm_release.py" in files
    assert "plugins/filter/gpu_expect.py" not in files


def test_fixtures_a_scenario_reads_by_path_are_in() -> None:
    files = _files("cluster_upgrade")
    fixtures = sorted((REPO / "tests" / "fixtures" / "cluster_upgrade").rglob("*"))
    assert fixtures
    assert {str(p.relative_to(REPO)) for p in fixtures if p.is_file()} <= files


def test_a_role_named_by_a_template_puts_every_role_in() -> None:
    # molecule/kernel/verify.yml: include_role with name "{{ item }}".
    every = {p.name for p in (REPO / "roles").iterdir() if p.is_dir()}
    assert _roles(_files("kernel")) == every


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_role_and_plugin_a_scenario_names_is_in_its_key(scenario: str) -> None:
    files = _files(scenario)
    roles = _roles(files)
    folder = REPO / "molecule" / scenario
    for path in folder.rglob("*.yml"):
        for name in MI.FQCN.findall(path.read_text()):
            if (REPO / "roles" / name).is_dir():
                assert name in roles, (path, name)
            module = REPO / "plugins" / "modules" / f"{name}.py"
            if module.is_file():
                assert str(module.relative_to(REPO)) in files, (path, name)
    # Each role in it brings every file of its own.
    for role in roles:
        for path in (REPO / "roles" / role).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                assert str(path.relative_to(REPO)) in files


def test_the_key_moves_with_the_distro_and_not_with_the_order_asked() -> None:
    common = MI.platform_lines()
    images: dict[str, str] = {"debian12": "sha256:one", "debian13": "sha256:two"}
    plain = MI.key("containerd@debian12", common, images)
    assert plain == MI.key("containerd@debian12", common, images)
    assert plain != MI.key("containerd@debian13", common, images)
    assert plain != MI.key("containerd@debian12", common, {**images, "debian12": "sha256:rebuilt"})
    assert plain != MI.key("containerd@debian12", [*common, "strategy mitogen_linear"], images)


def test_an_unknown_scenario_is_refused_by_name() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "key", "nvidia_driver", "nvidia_drvier"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no scenario nvidia_drvier" in proc.stderr
    assert proc.stdout == ""
    usage = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert usage.returncode == 2
    assert "molecule_inputs.py key SCENARIO" in usage.stderr


def test_the_key_command_prints_one_line_a_scenario(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "key", "helm", "containerd@debian12"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert [name for name, _ in lines] == ["helm", "containerd@debian12"]
    assert all(len(key) == 64 for _, key in lines)
