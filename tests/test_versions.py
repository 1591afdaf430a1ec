"""versions.yml: overrides, the rule language, the rules' verdicts and `gpubring versions`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpubring import versions
from gpubring.app import app
from gpubring.inventory import InventoryError, load_inventory
from gpubring.validation import rules

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py

DRA_ON = "dra_driver_enabled: true\ndra_driver_compute_domains: true\n"
PINNED_KUBERNETES = str(versions.load_pinned()["kubernetes"]["version"])


def run(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def overrides(text: str) -> dict[str, str]:
    return {"group_vars/all/versions.yml": "gpubring_versions:\n" + text}


# The pinned matrix and the rule language ------------------------------------------------------------


def test_pinned_matrix_has_every_component() -> None:
    pinned = versions.load_pinned()
    for component in (
        "nvidia_driver", "cuda_repo", "nvidia_container_toolkit", "containerd", "kubernetes", "cni", "helm",
        "gpu_operator", "network_operator", "volcano", "kai_scheduler", "kueue", "dra_driver", "monitoring",
    ):  # fmt: skip
        assert component in pinned


def test_pinned_matrix_passes_every_rule_that_always_applies() -> None:
    results = rules.evaluate_rules(versions.load_pinned(), {})
    applicable = [r for r in results if r.applicable]
    assert applicable, "some rule has no `when`"
    assert all(r.ok for r in applicable), [r.detail for r in applicable if not r.ok]


@pytest.mark.parametrize(
    ("actual", "bound", "expected"),
    [
        ("1.34.2", "1.34", 0),
        ("1.34.9", "1.34", 0),
        ("1.35.0", "1.34", 1),
        ("1.33.9", "1.34", -1),
        ("580.95.05", "580", 0),
        ("570.195.03", "580", -1),
        ("v25.10.0", "25.9", 1),
        ("1.34", "1.34.1", -1),
    ],
)
def test_compare_on_the_components_of_the_bound(actual: str, bound: str, expected: int) -> None:
    a, b = versions.parse_version(actual), versions.parse_version(bound)
    assert a is not None and b is not None
    assert versions.compare(a, b) == expected


def test_parse_version_rejects_words() -> None:
    assert versions.parse_version("latest") is None
    assert versions.parse_version("v0.9.8") == (0, 9, 8)


def test_effective_deep_merges_and_lists_overridden_paths() -> None:
    pinned = versions.load_pinned()
    over = {"kubernetes": {"version": "1.34.3"}, "nvidia_driver": {"version": 580}}
    eff = versions.effective(pinned, over)
    assert eff["kubernetes"]["version"] == "1.34.3"
    assert eff["nvidia_driver"] == {"branch": pinned["nvidia_driver"]["branch"], "version": "580"}
    assert eff["helm"] == pinned["helm"]
    assert versions.overridden_paths(pinned, over) == ["kubernetes.version", "nvidia_driver.version"]


def test_check_overrides_shapes() -> None:
    pinned = versions.load_pinned()
    problems = rules.check_overrides(pinned, {"kubernetes": "1.34", "cni": {"calico": ["3.30"]}})
    assert problems == [
        ("gpubring_versions.kubernetes", "expected a mapping of pins (version)"),
        ("gpubring_versions.cni.calico", f'expected a version string such as "{pinned["cni"]["calico"]}"'),
    ]
    assert rules.check_overrides(pinned, ["1.34"]) == [
        ("gpubring_versions", "expected a mapping shaped like gpubring_versions in versions.yml")
    ]


RULES = (
    versions.Rule(
        id="needs-a",
        message="feature a needs component x >= 2",
        when={"a_enabled": True},
        require=(versions.Requirement(path="x.version", min="2", max="3"),),
    ),
    versions.Rule(
        id="x-in-y-range",
        message="x within y's range",
        when={},
        require=(versions.Requirement(path="x.version", min_path="y.min", max_path="y.max"),),
    ),
    versions.Rule(
        id="x-equal-z",
        message="x equals z",
        when={"mode": "strict"},
        require=(versions.Requirement(path="x.version", equal="z.version"),),
    ),
)
MATRIX = {"x": {"version": "2.5.1"}, "y": {"min": "2.4", "max": "2.5"}, "z": {"version": "2.5.1"}}


def test_rules_pass_fail_and_not_applicable() -> None:
    results = {r.id: r for r in rules.evaluate_rules(MATRIX, {"a_enabled": "yes"}, RULES)}
    assert results["needs-a"].verdict == "pass"
    assert results["x-in-y-range"].verdict == "pass"
    assert results["x-equal-z"].verdict == "not applicable"
    assert results["x-equal-z"].detail == "applies when mode=strict"

    low = versions.effective(MATRIX, {"x": {"version": "1.9"}})
    results = {r.id: r for r in rules.evaluate_rules(low, {"a_enabled": True, "mode": "strict"}, RULES)}
    assert results["needs-a"].verdict == "fail"
    assert results["needs-a"].failures[0] == versions.Failure("x.version", ">= 2", "1.9")
    assert results["x-in-y-range"].detail == "x.version 1.9 is not >= 2.4 (y.min, of the range 2.4 to 2.5)"
    assert results["x-equal-z"].failures[0].expected == "equal to z.version (2.5.1)"
    assert results["x-equal-z"].failures[0].refs == ("z.version",)


def test_merge_results_over_contexts() -> None:
    on = rules.evaluate_rules(
        versions.effective(MATRIX, {"x": {"version": "1.0"}}), {"a_enabled": True}, RULES
    )
    off = rules.evaluate_rules(
        versions.effective(MATRIX, {"x": {"version": "1.0"}}), {"a_enabled": False}, RULES
    )
    merged = rules.merge_results([off, on])
    assert merged[0].verdict == "fail"
    assert merged[2].verdict == "not applicable"


def test_broken_versions_file_is_reported(tmp_path: Path) -> None:
    broken = tmp_path / "versions.yml"
    broken.write_text(
        "gpubring_versions: {kubernetes: {version: '1.34.2'}}\n"
        "gpubring_version_rules:\n"
        "  - id: bad\n"
        "    require:\n"
        "      - {path: kubernetes.versoin, min: '1.30'}\n"
        "      - {path: kubernetes.version, mni: '1.30'}\n"
    )
    with pytest.raises(versions.VersionsFileError) as info:
        versions.load_file(broken)
    text = [str(p) for p in info.value.problems]
    assert (
        "versions.yml: gpubring_version_rules[0].require[0].path: expected a pin in gpubring_versions, "
        "got kubernetes.versoin" in text
    )
    assert any(
        t.startswith("versions.yml: gpubring_version_rules[0].require[1]: expected path plus any of")
        for t in text
    )


# Rules broken by an inventory's overrides ----------------------------------------------------------


def test_dra_with_kubernetes_1_33_fails_naming_the_rule(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {**overrides("  kubernetes: {version: '1.33.5'}\n"), "group_vars/all/dra.yml": DRA_ON}
    )
    result = run("plan", root)
    assert result.exit_code == 2
    # The DRA rule, and the ranges 1.33 is also outside of (the DRA driver's 1.34.2+, Calico's 1.34+).
    lines = result.stderr.splitlines()
    assert (
        "error: group_vars/all/versions.yml: gpubring_versions.kubernetes.version: expected "
        "kubernetes.version >= 1.34, got 1.33.5 (rule dra-needs-kubernetes-1.34: NVIDIA's DRA driver needs "
        "Kubernetes >= 1.34 (resource.k8s.io/v1))"
    ) in lines
    assert all(
        line.startswith("error: group_vars/all/versions.yml: gpubring_versions.kubernetes.version:")
        for line in lines
    )


def test_kubernetes_1_33_without_dra_is_fine(make_inventory: MakeInventory, sample_inventory: Path) -> None:
    # Flannel: Calico v3.32 is tested from 1.34 on only.
    cluster = (sample_inventory / "group_vars/all/cluster.yml").read_text()
    root = make_inventory(
        {
            **overrides("  kubernetes: {version: '1.33.5'}\n"),
            "group_vars/all/dra.yml": "dra_driver_enabled: false\n",
            "group_vars/all/cluster.yml": cluster.replace("gpubring_cni: calico", "gpubring_cni: flannel"),
        }
    )
    inv = load_inventory(root)
    verdicts = {r.id: r.verdict for r in inv.rule_results}
    assert verdicts["dra-needs-kubernetes-1.34"] == "not applicable"
    assert verdicts["gpu-operator-kubernetes-range"] == "pass"


def test_driver_570_fails_the_branch_rule(make_inventory: MakeInventory) -> None:
    root = make_inventory(overrides("  nvidia_driver: {version: '570.195.03'}\n"))
    with pytest.raises(InventoryError) as info:
        load_inventory(root)
    assert [str(p) for p in info.value.problems] == [
        "group_vars/all/versions.yml: gpubring_versions.nvidia_driver.version: expected "
        "nvidia_driver.version with the same major version as nvidia_driver.branch (580), got 570.195.03 "
        "(rule driver-version-in-branch: the driver version must belong to the pinned driver branch)"
    ]


def test_driver_570_with_dra_fails_the_dra_rule(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {
            **overrides("  nvidia_driver: {branch: '570', version: '570.195.03'}\n"),
            "group_vars/all/dra.yml": DRA_ON,
        }
    )
    with pytest.raises(InventoryError) as info:
        load_inventory(root)
    (problem,) = info.value.problems
    assert problem.file == "group_vars/all/versions.yml"
    assert problem.key == "gpubring_versions.nvidia_driver.version"
    assert problem.expected.startswith(
        "expected nvidia_driver.version >= 580, got 570.195.03 (rule dra-needs-driver-580:"
    )


def test_rule_applies_when_one_host_matches_and_blames_its_setting(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {**overrides("  nvidia_driver: {branch: '510', version: '510.108.03'}\n"),
         "host_vars/gpu-3.yml": "nvidia_driver_kernel_modules: open\n"}
    )  # fmt: skip
    with pytest.raises(InventoryError) as info:
        load_inventory(root)
    (problem,) = info.value.problems
    assert problem.key == "gpubring_versions.nvidia_driver.version"
    assert "rule open-modules-need-driver-515" in problem.expected


def test_pin_out_of_operator_range_without_override_names_versions_yml(make_inventory: MakeInventory) -> None:
    root = make_inventory(overrides("  gpu_operator: {kubernetes_max: '1.33'}\n"))
    with pytest.raises(InventoryError) as info:
        load_inventory(root)
    (problem,) = info.value.problems
    assert (problem.file, problem.key) == (
        "group_vars/all/versions.yml",
        "gpubring_versions.gpu_operator.kubernetes_max",
    )
    assert "<= 1.33 (gpu_operator.kubernetes_max, of the range 1.33 to 1.33)" in problem.expected


def test_override_of_all_vars_in_hosts_yml_is_named(
    make_inventory: MakeInventory, sample_inventory: Path
) -> None:
    text = (
        (sample_inventory / "hosts.yml")
        .read_text()
        .replace(
            "all:\n  children:",
            "all:\n  vars:\n    gpubring_versions: {kubernetes: {version: '1.37.0'}}\n  children:",
        )
    )
    root = make_inventory({"hosts.yml": text, "group_vars/all/versions.yml": None})
    with pytest.raises(InventoryError) as info:
        load_inventory(root)
    # One problem per rule 1.37 breaks (the GPU Operator's range, Calico's), each naming the override.
    assert {(p.file, p.key) for p in info.value.problems} == {
        ("hosts.yml", "all.vars.gpubring_versions.kubernetes.version")
    }
    assert len(info.value.problems) >= 2


# gpubring versions ------------------------------------------------------------------------------------


def test_versions_command_prints_matrix_and_verdicts(sample_inventory: Path) -> None:
    result = run("versions", sample_inventory)
    assert result.exit_code == 0, result.output
    assert "kubernetes.version" in result.stdout
    assert PINNED_KUBERNETES in result.stdout
    for rule in versions.load_rules():
        assert rule.id in result.stdout
    assert "not applicable" in result.stdout
    assert "pass" in result.stdout


def test_versions_command_flags_overrides(make_inventory: MakeInventory) -> None:
    root = make_inventory(overrides("  kubernetes: {version: '1.34.3'}\n"))
    result = run("versions", root)
    assert result.exit_code == 0, result.output
    line = next(s for s in result.stdout.splitlines() if "kubernetes.version" in s)
    assert "1.34.3" in line
    assert f"inventory override (pinned {PINNED_KUBERNETES})" in line


def test_versions_command_json(make_inventory: MakeInventory) -> None:
    root = make_inventory(overrides("  kubernetes: {version: '1.34.3'}\n"))
    result = run("versions", root, "--json", "-")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["versions"]["kubernetes"]["version"] == "1.34.3"
    entry = next(m for m in doc["matrix"] if m["path"] == "kubernetes.version")
    assert entry == {
        "path": "kubernetes.version",
        "version": "1.34.3",
        "overridden": True,
        "pinned": PINNED_KUBERNETES,
    }
    assert {r["id"] for r in doc["rules"]} == {r.id for r in versions.load_rules()}
    assert {r["verdict"] for r in doc["rules"]} <= {"pass", "fail", "not applicable"}


def test_versions_command_prints_verdicts_then_exits_2_on_a_failed_rule(
    make_inventory: MakeInventory, tmp_path: Path
) -> None:
    root = make_inventory(
        {**overrides("  kubernetes: {version: '1.33.5'}\n"), "group_vars/all/dra.yml": DRA_ON}
    )
    out = tmp_path / "versions.json"
    result = run("versions", root, "--json", out)
    assert result.exit_code == 2
    line = next(s for s in result.stdout.splitlines() if "dra-needs-kubernetes-1.34" in s)
    assert line.split()[0] == "fail"
    assert "kubernetes.version 1.33.5 is not >= 1.34" in line
    assert result.stderr.startswith(
        "error: group_vars/all/versions.yml: gpubring_versions.kubernetes.version:"
    )
    doc = json.loads(out.read_text())
    assert next(r for r in doc["rules"] if r["id"] == "dra-needs-kubernetes-1.34")["verdict"] == "fail"
