"""A Helm release is declared once, in its role: everything else that lists releases derives the list.

gpubring.catalog reads every release from the roles (roles/<role>/vars/main.yml `__<role>_releases`,
templates/releases/<folder>/release.yml.j2, the role's defaults) and versions.yml. Checked here:
- every release folder in any role is a declared release, and every release of the platform phase
  with a chart is one `gpubring upgrade` knows, under its own pin (the upgrade used to keep a hand
  list, and skipped a chart it did not list without a word);
- every chart pin of versions.yml (a pin named `chart` or `<something>_chart`) is some release's pin;
- on a copy of the project with a fake release added to a role, the first check fails against the
  hand list the upgrade kept before (OLD_UPGRADE_RELEASES) and passes against the derived one; with a
  fake chart pin and no release, the second fails; a folder the role does not list and a chart
  version that reads no pin are refused, naming the file.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest

from gpubring import catalog, upgrade
from helpers import REPO

# upgrade.RELEASES as it was kept by hand before the catalog (git show a1465a5~1:cli/gpubring/upgrade.py).
OLD_UPGRADE_RELEASES = {
    "gpu-operator": "gpu_operator.chart",
    "network-operator": "network_operator.chart",
    "volcano": "volcano.chart",
    "kai-scheduler": "kai_scheduler.chart",
    "kueue": "kueue.chart",
    "nvidia-dra-driver-gpu": "dra_driver.chart",
    "kube-prometheus-stack": "monitoring.chart",
    "prometheus-adapter": "monitoring.prometheus_adapter_chart",
}


def releases_on_disk(root: Path) -> list[tuple[str, str]]:
    """(role, folder) of every release.yml.j2 under roles/*/templates/releases/ (read from the disk,
    not from the roles' lists)."""
    return [
        (path.parts[-5], path.parts[-2])
        for path in sorted((root / "roles").glob("*/templates/releases/*/release.yml.j2"))
    ]


def unknown_to_upgrade(root: Path, known: Mapping[str, str]) -> list[str]:
    """What the upgrade's list `known` (release name -> chart pin) gets wrong about the project at
    `root`: a platform release with a chart it lacks or pins elsewhere, or a name no role declares."""
    declared = {(r.role, r.folder): r for r in catalog.declared_releases(root)}
    out = []
    for role, folder in releases_on_disk(root):
        release = declared.get((role, folder))
        if release is None:
            out.append(f"roles/{role}/templates/releases/{folder}: not a declared release")
        elif release.phase == "platform" and release.chart and known.get(release.name) != release.pin:
            said = known.get(release.name, "nothing of it")
            out.append(f"{release.name} (roles/{role}, pin {release.pin}): the upgrade knows {said}")
    names = {r.name for r in declared.values()}
    out.extend(f"{name}: the upgrade knows it, no role declares it" for name in known if name not in names)
    return out


def pins_without_release(root: Path) -> list[str]:
    """The chart pins of versions.yml that no release of the roles reads."""
    read = {r.pin for r in catalog.declared_releases(root)}
    return [pin for pin in catalog.chart_pins(root) if pin not in read]


# -- the project as it is -------------------------------------------------------------------------


def test_every_release_in_the_roles_is_one_the_upgrade_knows() -> None:
    assert releases_on_disk(REPO), "no release found: the layout of the roles changed"
    assert unknown_to_upgrade(REPO, upgrade.release_pins()) == []


def test_every_chart_pin_of_versions_yml_has_a_release() -> None:
    assert catalog.chart_pins(REPO), "no chart pin found in versions.yml: its naming changed"
    assert pins_without_release(REPO) == []


def test_the_derived_list_is_the_hand_kept_one_it_replaces() -> None:
    """Same releases, same pins; the order is now the one the platform phase applies them in."""
    pins = upgrade.release_pins()
    # Every release the hand list had, under the same pin (releases added since come on top of it).
    assert {name: pins.get(name) for name in OLD_UPGRADE_RELEASES} == OLD_UPGRADE_RELEASES
    # storage and MetalLB first (Prometheus' claim binds to the storage class), then monitoring, before
    # the GPU Operator (whose DCGM ServiceMonitor needs monitoring's CRDs)
    names = list(pins)
    assert names[:2] == ["local-path-provisioner", "metallb"]
    assert (
        names.index("kube-prometheus-stack") < names.index("prometheus-adapter") < names.index("gpu-operator")
    )


def test_the_cni_releases_are_declared_but_not_upgraded() -> None:
    cni = {r.name: r for r in catalog.declared_releases() if r.role == "cni"}
    assert {name: (r.phase, r.pin, r.version) for name, r in cni.items()} == {
        "calico": ("cluster", "cni.calico", "v" + cni["calico"].pinned),
        "cilium": ("cluster", "cni.cilium", cni["cilium"].pinned),
    }
    assert not set(cni) & set(upgrade.release_pins())


# -- a copy of the project with a fake release ------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of what the catalog reads: roles/, playbooks/ and versions.yml."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "roles", root / "roles", ignore=shutil.ignore_patterns(".*", "__pycache__"))
    shutil.copytree(REPO / "playbooks", root / "playbooks")
    shutil.copy2(REPO / "versions.yml", root / "versions.yml")
    return root


def add_pin(root: Path, pin_yaml: str = '  fakeop:\n    chart: "1.4.2"\n') -> None:
    versions = root / "versions.yml"
    text = versions.read_text(encoding="utf-8")
    assert "\ngpubring_versions:\n" in text
    versions.write_text(text.replace("\ngpubring_versions:\n", "\ngpubring_versions:\n" + pin_yaml, 1))


def add_release(
    root: Path, *, listed: bool = True, version: str = "{{ schedulers_fakeop_chart_version | to_json }}"
) -> None:
    """A fake operator as a fourth release of the schedulers role, the way the others are."""
    role = root / "roles" / "schedulers"
    folder = role / "templates" / "releases" / "fakeop"
    folder.mkdir()
    (folder / "release.yml.j2").write_text(
        "enabled: {{ schedulers_fakeop_enabled | bool | to_json }}\n"
        "name: fakeop-operator\n"
        "chart: fakeop-operator\n"
        f"version: {version}\n"
        "repo: https://charts.example.org/\n"
        "namespace: {{ schedulers_fakeop_namespace | to_json }}\n"
        "values_overrides: {}\n",
        encoding="utf-8",
    )
    with (role / "defaults" / "main.yml").open("a", encoding="utf-8") as defaults:
        defaults.write(
            "schedulers_fakeop_enabled: false\n"
            "schedulers_fakeop_namespace: fakeop-system\n"
            'schedulers_fakeop_chart_version: "{{ gpubring_matrix.fakeop.chart }}"\n'
        )
    if listed:
        with (role / "vars" / "main.yml").open("a", encoding="utf-8") as variables:
            variables.write("  - fakeop\n")


def test_a_new_release_unknown_to_the_hand_list_fails_the_check(project: Path) -> None:
    add_pin(project)
    add_release(project)
    # The check against the list derived from the project without it: the new release is named.
    assert unknown_to_upgrade(project, upgrade.release_pins(REPO)) == [
        "fakeop-operator (roles/schedulers, pin fakeop.chart): the upgrade knows nothing of it"
    ]
    # The derived list has it, after the schedulers the role declares before it.
    pins = upgrade.release_pins(project)
    assert unknown_to_upgrade(project, pins) == []
    names = list(pins)
    at = names.index("fakeop-operator")
    assert names[at - 1 : at + 2] == ["kueue", "fakeop-operator", "nvidia-dra-driver-gpu"]
    assert pins["fakeop-operator"] == "fakeop.chart"
    assert pins_without_release(project) == []


def test_a_chart_pin_without_a_release_fails_the_check(project: Path) -> None:
    add_pin(project)
    assert pins_without_release(project) == ["fakeop.chart"]


def test_a_release_folder_the_role_does_not_list_is_refused(project: Path) -> None:
    add_pin(project)
    add_release(project, listed=False)
    with pytest.raises(catalog.CatalogError) as caught:
        catalog.declared_releases(project)
    assert caught.value.where == "roles/schedulers/vars/main.yml"
    assert "__schedulers_releases" in caught.value.message and "fakeop" in caught.value.message


def test_a_chart_version_that_reads_no_pin_is_refused(project: Path) -> None:
    add_release(project, version='"1.4.2"')
    with pytest.raises(catalog.CatalogError) as caught:
        catalog.declared_releases(project)
    assert caught.value.where == "roles/schedulers/templates/releases/fakeop/release.yml.j2"
    assert "exactly one pin of versions.yml" in caught.value.message and "reads none" in caught.value.message


def test_a_version_whose_pin_is_missing_is_refused(project: Path) -> None:
    add_release(project)  # reads gpubring_matrix.fakeop.chart, which versions.yml does not have
    with pytest.raises(catalog.CatalogError) as caught:
        catalog.declared_releases(project)
    assert caught.value.where == "roles/schedulers/templates/releases/fakeop/release.yml.j2"
    assert caught.value.message == "version: reads gpubring_matrix.fakeop, which versions.yml does not pin"
