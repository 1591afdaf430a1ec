"""The built wheel carries the Ansible content: install it in a fresh venv, run `gpubring plan` outside
the checkout, and see the phases and roles that only the shipped playbooks can provide."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from helpers import REPO


@pytest.mark.slow
def test_wheel_installs_and_plans_the_sample_outside_the_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = dist.glob("gpubring-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in (
        "gpubring/project/playbooks/site.yml",
        "gpubring/project/playbooks/platform.yml",
        "gpubring/project/roles/nvidia_driver/meta/argument_specs.yml",
        "gpubring/project/versions.yml",
        "gpubring/project/settings.yml",
        "gpubring/project/galaxy.yml",
        "gpubring/lab/vars.yml",  # the lab's variables: package data, read at `lab up`
        "gpubring/conformance_checklists.yml",  # the AI Conformance checklists, read by verify --report
    ):
        assert shipped in names, shipped

    # A fresh venv gets the wheel alone; its dependencies come from the test environment's
    # site-packages through a path file (the `ansible` package alone is some 40,000 files to unpack
    # again), whose own path files, the checkout's editable gpubring among them, Python does not read
    # there. `pip check` then holds the wheel's declared requirements against what it finds.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    site_packages = next((env_dir / "lib").glob("python*/site-packages"))
    ours = [p for p in map(Path, sys.path) if p.name == "site-packages" and p.is_dir()]
    (site_packages / "zz-test-dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    for argv in (["install", "--quiet", "--no-deps", str(wheel)], ["check"]):
        done = subprocess.run([python, "-m", "pip", *argv], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    where = subprocess.run(
        [python, "-c", "import gpubring; print(gpubring.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(site_packages)), where
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    gpubring = str(env_dir / "bin" / "gpubring")
    sample = REPO / "inventories" / "prod"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([gpubring, *args], cwd=elsewhere, capture_output=True, text=True, check=False)

    plan = run("plan", str(sample))
    assert plan.returncode == 0, plan.stderr
    for phase in ("preflight", "host", "cluster", "platform", "verify"):
        assert any(line.lstrip().startswith(phase) for line in plan.stdout.splitlines()), phase
    for role in ("nvidia_driver", "kubeadm_join", "gpu_operator", "verify"):
        assert role in plan.stdout

    as_json = run("plan", str(sample), "--json", "-")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    playbook_root = site_packages / "gpubring" / "project"
    assert [p["phase"] for p in doc["phases"]] == ["preflight", "host", "cluster", "platform", "verify"]
    assert (playbook_root / doc["phases"][1]["playbook"]).is_file()
    plays = {play["name"]: play for play in doc["phases"][1]["plays"]}
    assert plays["GPU host setup on GPU nodes"]["roles"] == [
        "nvidia_driver",
        "nvidia_container_toolkit",
        "rdma",
        "kubelet_topology",
    ]

    bad = run("plan", str(elsewhere))
    assert bad.returncode == 2
    assert bad.stderr.startswith(f"error: {elsewhere}: hosts.yml: expected hosts.yml")
