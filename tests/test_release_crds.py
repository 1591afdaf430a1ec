"""Which platform releases get their CRDs applied before a chart upgrade (`upgrade_crds`), read from the
pinned charts themselves ($GPUBRING_UPSTREAM_DIR/charts).

Helm installs a chart's crds/ folders (its own and its subcharts') on the first install and never again.
A chart that ships a pre-upgrade hook applying its CRDs (a hook template named for them: the GPU
Operator's templates/upgrade_crd.yaml, the Network Operator's templates/upgrade-crd-hook.yaml, KAI's
templates/hooks/pre/crd-upgrader.yaml) keeps them current itself; every other chart with a crds/ folder
needs the release engine's roles/helm/tasks/crds.yml, which the release's `upgrade_crds: true` turns on.
A release whose chart has no crds/ (its CRDs are templates, which Helm upgrades: Volcano, Kueue) needs
neither. Calico's tigera-operator has no CRDs from v3.32: the cni role applies the
crd.projectcalico.org.v1 chart of the same tag before it, on every run (roles/cni/tasks/calico_crds.yml).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import upstream
from _render import planned_releases
from gpubring.app import app
from gpubring.catalog import declared_releases
from gpubring.inventory import load_inventory
from gpubring.releases import Release, host_variables, role_releases
from helpers import REPO, ansible_playbook

ALL_ON = REPO / "tests" / "data" / "inventories" / "all-on"
PROD = REPO / "inventories" / "prod"
HOOK = re.compile(r"helm\.sh/hook[\"']?\s*:\s*[\"']?[^\n]*pre-upgrade")


def crd_files(chart: Path) -> list[Path]:
    """The CRD files Helm installs from crds/ (links followed): the chart's and every subchart's."""
    folders = [chart / "crds", *sorted(chart.glob("charts/*/crds"))]
    return sorted(p for folder in folders if folder.is_dir() for p in folder.rglob("*.y*ml"))


def crd_hooks(chart: Path) -> list[str]:
    """The chart's own templates that are pre-upgrade hooks and name CRDs in their file name."""
    return sorted(
        str(p.relative_to(chart))
        for p in (chart / "templates").rglob("*.yaml")
        if "crd" in p.name.lower() and HOOK.search(p.read_text(encoding="utf-8"))
    )


@pytest.fixture(scope="module")
def releases() -> list[Release]:
    """Every release gpubring installs: the platform phase of all-on, and the CNI's of the sample with
    each chart CNI chosen in turn (gpubring_cni enables one of them)."""
    inv = load_inventory(PROD)
    cni = [
        release
        for choice in ("calico", "cilium")
        for release in role_releases(
            "cni", host_variables(inv, roles=("cni",), host_vars={"gpubring_cni": choice})
        )
    ]
    return [*planned_releases(load_inventory(ALL_ON)), *cni]


def _chart(release: Release) -> Path:
    return upstream.chart_dir(release.chart.rsplit("/", 1)[-1], release.version, to_render=False)


def test_every_chart_release_is_examined(releases: list[Release]) -> None:
    names = {r.name for r in releases if r.chart}
    assert {r.name for r in declared_releases() if r.chart} <= names


def test_upgrade_crds_is_set_exactly_where_helm_would_leave_crds_behind(releases: list[Release]) -> None:
    wrong = []
    for release in releases:
        if not release.chart:
            continue
        chart = _chart(release)
        crds, hooks = crd_files(chart), crd_hooks(chart)
        needed = bool(crds) and not hooks
        if release.upgrade_crds != needed:
            wrong.append(
                f"{release.name} {release.version}: upgrade_crds is {release.upgrade_crds}, but its chart "
                f"has {len(crds)} CRD file(s) in crds/ and the CRD upgrade hooks {hooks or 'none'}"
            )
    assert not wrong, "\n".join(wrong)


def test_the_two_releases_that_need_it(releases: list[Release]) -> None:
    """Pinned today: these charts keep CRDs in crds/ with no hook; the others do not need it (Calico's
    operator chart has none from v3.32)."""
    marked = {r.name for r in releases if r.upgrade_crds}
    # kuberay-operator v1.7.0 keeps its four CRDs in crds/ too (roles/kuberay); gateway-helm v1.9.0 its
    # crds subchart's (the Gateway API and Envoy Gateway CRDs, roles/ai_inference).
    assert marked == {"nvidia-dra-driver-gpu", "kube-prometheus-stack", "kuberay-operator", "gateway-helm"}


def test_calico_crds_come_from_their_own_chart_before_the_operator(releases: list[Release]) -> None:
    """tigera-operator at the pin carries no CRD; the crd.projectcalico.org.v1 chart of the same tag
    holds the operator.tigera.io ones the release and gpubring's Installation need, and the cni role
    applies that chart (its defaults name it, at the Calico pin) before the release, each CRD waited
    for until Established."""
    calico = next(r for r in releases if r.name == "calico")
    operator = _chart(calico)
    assert not crd_files(operator), f"{operator.name} has CRDs in crds/ again"
    crd_chart = upstream.chart_dir("crd.projectcalico.org.v1", calico.version, to_render=False)
    kinds = {
        str(doc["spec"]["names"]["kind"])
        for path in sorted((crd_chart / "templates").rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    }
    installation = calico.manifests[0]
    assert installation["kind"] in kinds and "TigeraStatus" in kinds, sorted(kinds)
    assert ("operator.tigera.io/v1", "Installation") in upstream.crds()
    assert not upstream.crd_errors(installation), upstream.crd_errors(installation)

    defaults = yaml.safe_load((REPO / "roles/cni/defaults/main.yml").read_text(encoding="utf-8"))
    assert defaults["cni_calico_crds_chart"] == "crd.projectcalico.org.v1"
    helm_tasks = yaml.safe_load((REPO / "roles/cni/tasks/helm.yml").read_text(encoding="utf-8"))
    names = [
        t.get("ansible.builtin.include_tasks") or t.get("ansible.builtin.include_role", {}).get("tasks_from")
        for t in helm_tasks
    ]
    assert names.index("calico_crds.yml") < names.index("role_releases"), names
    crd_tasks = yaml.safe_load((REPO / "roles/cni/tasks/calico_crds.yml").read_text(encoding="utf-8"))
    apply = next(t for t in crd_tasks if "block" in t)["block"][-1]["kubernetes.core.k8s"]
    assert apply["server_side_apply"]["field_manager"] == "gpubring"
    assert apply["wait"] is True and apply["wait_condition"] == {"type": "Established", "status": "True"}


def test_the_hooks_gpubring_relies_on_stay_on(releases: list[Release]) -> None:
    """The charts whose own hook upgrades their CRDs: the hook is on in their chart defaults and
    gpubring's values do not turn it off."""
    by_name = {r.name: r for r in releases}
    # templates/upgrade_crd.yaml: {{- if .Values.operator.upgradeCRD }};
    # templates/upgrade-crd-hook.yaml: {{- if .Values.upgradeCRDs }}
    switches: dict[str, tuple[str, ...]] = {
        "gpu-operator": ("operator", "upgradeCRD"),
        "network-operator": ("upgradeCRDs",),
    }
    for name, path in switches.items():
        release = by_name[name]
        chart = _chart(release)
        defaults: Any = yaml.safe_load((chart / "values.yaml").read_text(encoding="utf-8"))
        ours: Any = release.values
        for key in path:
            defaults = defaults[key]
            ours = ours.get(key, {}) if isinstance(ours, dict) else {}
        assert defaults is True, (name, path)
        assert ours in ({}, True), f"gpubring's values of {name} set {'.'.join(path)} to {ours!r}"
    # KAI's crd-upgrader Job has no switch (v0.17.0: templates/hooks/pre/crd-upgrader.yaml): always rendered.
    kai = _chart(by_name["kai-scheduler"])
    upgrader = next((kai / "templates").rglob("crd-upgrader.yaml")).read_text(encoding="utf-8")
    assert not upgrader.lstrip().startswith("{{- if"), upgrader[:200]


def test_the_crds_command_keeps_hostile_values_as_single_words(tmp_path: Path) -> None:
    """The shell line of crds.yml, rendered by Ansible from the task's own text with a chart reference,
    repository and version that try to break out of the command: each comes back as one word of the
    helm command (shlex, as bash splits it), and no `;`, `$(...)` or backquote is left to the shell."""
    tasks = yaml.safe_load((REPO / "roles" / "helm" / "tasks" / "crds.yml").read_text(encoding="utf-8"))
    apply = next(t for t in tasks if "ansible.builtin.shell" in t)
    out = tmp_path / "cmd.txt"
    play = [{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        "tasks": [{
            "name": "Render the command",
            "vars": apply["vars"],
            "ansible.builtin.copy": {"content": apply["ansible.builtin.shell"]["cmd"], "dest": str(out)},
        }],
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play), encoding="utf-8")
    hostile = {
        "chart_ref": "x; touch /tmp/pwned $(id) `id`",
        "chart_repo_url": 'https://h/\'"q"$HOME',
        "chart_version": "1.0 && reboot",
    }
    extra = {
        "__helm_source": hostile,
        "helm_install_dir": "/usr/local/bin",
        "helm_kubeconfig": "/etc/kubernetes/admin.conf",
    }
    (tmp_path / "extra.json").write_text(json.dumps(extra), encoding="utf-8")
    ran = ansible_playbook("-i", "localhost,", "-e", f"@{tmp_path / 'extra.json'}", tmp_path / "play.yml")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    cmd = out.read_text(encoding="utf-8")
    head, show, apply_words = cmd.split(" && ", 1)[0], *cmd.split(" && ", 1)[1].split(" | ")
    assert head == "set -o pipefail"
    assert shlex.split(show) == [
        "/usr/local/bin/helm", "show", "crds", hostile["chart_ref"],
        "--repo", hostile["chart_repo_url"], "--version", hostile["chart_version"],
    ]  # fmt: skip
    assert shlex.split(apply_words) == [
        "kubectl", "--kubeconfig=/etc/kubernetes/admin.conf", "apply", "--server-side", "--force-conflicts",
        "--field-manager=gpubring", "--filename=-",
    ]  # fmt: skip


def test_plan_says_which_releases_get_their_crds_first() -> None:
    result = CliRunner().invoke(app, ["plan", str(ALL_ON)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for name in ("nvidia-dra-driver-gpu", "kube-prometheus-stack"):
        assert f"on a chart upgrade, the CRDs of {name} (its chart's crds/" in text, name
    assert "the CRDs of gpu-operator" not in text and "the CRDs of kueue" not in text
