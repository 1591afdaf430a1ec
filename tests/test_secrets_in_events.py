"""Helm values can hold passwords and tokens: a run of the release engine (in check mode, on this
machine, without a cluster) leaves none of them in the output, the job events or anywhere in its run
folder, while `gpubring plan` still shows them to the operator who asked."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from gpubring.run import process
from gpubring.run.settings import RunSettings
from gpubring.runopts import RunOptions
from helpers import DATA, REPO

SECRET = "gpubring-test-secret-7f3a9c"
VARS = f"""\
gpu_operator_values:
  operator:
    annotations: {{example.com/token: {SECRET}}}
helm_releases:
  - name: site-app
    chart: site-app
    version: "1.0.0"
    repo: https://charts.example.internal
    namespace: site
    values: {{auth: {{password: {SECRET}}}}}
    pre_manifests:
      - apiVersion: v1
        kind: Secret
        metadata: {{name: site-auth, namespace: site}}
        stringData: {{password: {SECRET}}}
"""


def test_a_release_run_leaves_no_value_in_its_events_or_run_folder(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    shutil.copytree(DATA / "inventories" / "localhost", inv)
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "group_vars" / "all" / "site.yml").write_text(VARS)
    plan = subprocess.run(
        [sys.executable, "-m", "gpubring", "plan", str(inv)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert SECRET in plan.stdout  # the input is real: the values hold it
    result = process.run(
        RunSettings(
            inventory_root=inv,
            hosts_file=inv / "hosts.yml",
            command="test",
            playbook=DATA / "playbooks" / "releases.yml",
            options=RunOptions(check=True, verbosity=2, accelerate=False),
        )
    )
    events = list(result.run_folder.rglob("job_events/*.json"))
    assert events, f"no job events in {result.run_folder}"
    text = "".join(e.read_text() for e in events)
    assert result.report.stats["node1"].failed == 0, result.report
    # The engine got the releases: check mode says what it would apply for each.
    assert "site-app would be" in text and "gpu-operator would be" in text
    leaked = [
        str(p) for p in result.run_folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()
    ]
    assert not leaked, leaked
