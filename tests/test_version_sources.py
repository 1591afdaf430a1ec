"""versions.yml against its upstreams: every rule cites where the upstream says so, the default matrix
passes every rule for every combination of the settings that turn rules on, and the pinned Kubernetes
version satisfies the `kubeVersion` of every pinned chart in $GPUBRING_UPSTREAM_DIR/charts."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import Version

from gpubring import paths, versions
from gpubring.validation import rules
from upstream import PINNED_FOLDERS, upstream_dir

PINNED, RULES = versions.load_file()
KUBERNETES = str(PINNED["kubernetes"]["version"])

# A tag or version in a source: "v1.14.4", "at 25.8.0", "gpu-operator-v25.10", "v1.18.x".
_TAG = re.compile(r"\bv?\d+\.\d+(\.(\d+|x))?\b")


# Every rule names its source ---------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_names_its_source_with_a_tag(rule: versions.Rule) -> None:
    assert rule.source.strip(), f'{rule.id}: add `source:` ("<document> at <tag>: <what it says>")'
    assert _TAG.search(rule.source), f"{rule.id}: its source names no tag or version: {rule.source!r}"


def test_every_kubernetes_range_pin_has_a_rule() -> None:
    """A kubernetes_min/max pin that no rule reads would be a range nobody checks."""
    read = {
        ref
        for rule in RULES
        for req in rule.require
        for ref in (req.min_path, req.max_path, req.same_major_as, req.equal)
        if ref
    }
    ranges = [path for path, _ in versions.flatten(PINNED) if re.search(r"kubernetes_m(in|ax)$", path)]
    assert ranges
    assert [p for p in ranges if p not in read] == []


# The default matrix passes every rule in every combination of `when` settings ----------------------


def _setting_values() -> dict[str, list[Any]]:
    """Each `when` setting with the values it can take: both for a boolean, else the values the rules
    name plus one no rule names (another CNI, say)."""
    values: dict[str, list[Any]] = {}
    for rule in RULES:
        for key, want in rule.when.items():
            values.setdefault(key, [])
            if want not in values[key]:
                values[key].append(want)
    for key, seen in values.items():
        if all(isinstance(v, bool) for v in seen):
            values[key] = [True, False]
        else:
            values[key] = [*seen, "<none of the rules'>"]
    return values


_VALUES = _setting_values()


def _rule_combinations(rule: versions.Rule) -> list[dict[str, Any]]:
    """Every combination of the values of the rule's own `when` settings."""
    keys = list(rule.when)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(_VALUES[k] for k in keys))]


def test_rules_are_judged_each_on_its_own_settings() -> None:
    """evaluate_rules judges a rule on its `when` settings and the matrix alone, so the verdicts of the
    whole product of settings (2^13 combinations and growing with each optional component) are those of
    each rule over its own settings' combinations, which the test below walks."""
    everything = {key: values[0] for key, values in _VALUES.items()}
    together = rules.evaluate_rules(PINNED, everything, RULES)
    alone = [result for rule in RULES for result in rules.evaluate_rules(PINNED, everything, [rule])]
    assert together == alone


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_default_matrix_passes_every_rule(rule: versions.Rule) -> None:
    for settings in _rule_combinations(rule):
        results = rules.evaluate_rules(PINNED, settings, [rule])
        assert [f"{r.id} with {settings}: {r.detail}" for r in results if not r.ok] == []


def test_every_rule_applies_in_some_combination() -> None:
    applied = {
        r.id
        for rule in RULES
        for settings in _rule_combinations(rule)
        for r in rules.evaluate_rules(PINNED, settings, [rule])
        if r.applicable
    }
    assert applied == {r.id for r in RULES}


def test_setting_names_exist() -> None:
    """A `when` on a misspelled setting never applies: every key must be a real input."""
    root = paths.versions_file().parent
    declared: set[str] = set(yaml.safe_load((root / "settings.yml").read_text())["options"])
    for spec in (root / "roles").glob("*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text()) or {}).get("argument_specs", {}).values():
            declared.update((entry or {}).get("options", {}))
    assert sorted(k for k in _VALUES if k not in declared) == []


# The pinned Kubernetes version against each pinned chart's kubeVersion ------------------------------


def satisfies(version: str, constraint: str) -> bool:
    """A release version against a Helm (Masterminds semver) constraint: `||` between alternatives,
    commas or spaces between comparisons that must all hold. A `-0` pre-release bound (">= 1.21.0-0")
    only admits pre-releases too, so for a release version it compares as the release. `^1.25.0` is
    >= 1.25.0 < 2.0.0 (`^0.2.3`: < 0.3.0), `~1.2.3` is >= 1.2.3 < 1.3.0 (`~1`: < 2), as Masterminds
    semver reads them (grafana 12.11.1's kubeVersion is "^1.25.0-0")."""
    have = Version(version.lstrip("vV"))
    for alternative in constraint.split("||"):
        parts = re.findall(r"(>=|<=|!=|>|<|=|\^|~)?\s*v?(\d+(?:\.\d+){0,2})(?:-[0-9A-Za-z.]+)?", alternative)
        if not parts:
            raise ValueError(f"no comparison in {constraint!r}")
        ok = True
        for op, bound in parts:
            want = Version(bound)
            if op in ("^", "~"):
                nums = [int(n) for n in bound.split(".")]
                # ~ and ^ of a 0.x version raise the minor; ^ of 1+ the major; ~ of a bare major too.
                if (op == "^" and nums[0] > 0) or len(nums) == 1:
                    upper = Version(f"{nums[0] + 1}")
                else:
                    upper = Version(f"{nums[0]}.{nums[1] + 1}")
                ok = ok and want <= have < upper
                continue
            ok = (
                ok
                and {
                    ">=": have >= want,
                    "<=": have <= want,
                    ">": have > want,
                    "<": have < want,
                    "!=": have != want,
                    "=": have == want,
                    "": have == want,
                }[op]
            )
        if ok:
            return True
    return False


@pytest.mark.parametrize(
    ("version", "constraint", "expected"),
    [
        ("1.34.2", ">= 1.21.0-0", True),
        ("1.34.2", ">=1.32.0-0", True),
        ("1.31.9", ">=1.32.0-0", False),
        ("1.34.2", ">= 1.21.0", True),
        ("1.34.2", ">=1.25.0-0 <1.34.0-0", False),
        ("1.33.1", ">=1.25.0-0, <1.34.0-0", True),
        ("1.34.2", "<1.30.0 || >=1.34.0", True),
        ("1.35.9", "^1.25.0-0", True),
        ("1.24.9", "^1.25.0-0", False),
        ("2.0.0", "^1.25.0-0", False),
        ("0.3.0", "^0.2.3", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
    ],
)
def test_satisfies(version: str, constraint: str, expected: bool) -> None:
    assert satisfies(version, constraint) is expected


_CHARTS = [(pin, pattern.format(versions.get_path(PINNED, pin))) for pin, pattern in PINNED_FOLDERS]


def test_every_pinned_chart_is_in_the_upstream_folder() -> None:
    """The other tests skip a chart they cannot find; this one fails, naming every pinned chart (and
    manifest) that $GPUBRING_UPSTREAM_DIR/charts lacks, so a new pin cannot go untested quietly."""
    charts = upstream_dir() / "charts"
    missing = [f"{folder} (pin {pin})" for pin, folder in _CHARTS if not (charts / folder).is_dir()]
    assert missing == [], f"add these folders to {charts} (charts/SOURCES.md says where each comes from)"


@pytest.mark.parametrize(("pin", "folder"), _CHARTS, ids=[f for _, f in _CHARTS])
def test_pinned_kubernetes_fits_the_charts_kube_version(pin: str, folder: str) -> None:
    root: Path = upstream_dir() / "charts" / folder
    if not root.is_dir():
        pytest.skip(f"no chart for the pin {pin} at {root}: add charts/{folder} (see charts/SOURCES.md)")
    if not (root / "Chart.yaml").is_file():
        pytest.skip(f"{folder} has no Chart.yaml (a manifest or CRDs, not a chart): no kubeVersion to check")
    # The chart's own Chart.yaml and its subcharts' (Helm checks the chart's; a subchart's is a claim too).
    constraints = {
        str(chart.relative_to(root)): str(constraint)
        for chart in sorted(root.rglob("Chart.yaml"))
        if (constraint := (yaml.safe_load(chart.read_text()) or {}).get("kubeVersion"))
    }
    if not constraints:
        pytest.skip(f"{folder}/Chart.yaml sets no kubeVersion")
    outside = {f"{folder}/{k}": v for k, v in constraints.items() if not satisfies(KUBERNETES, v)}
    assert outside == {}, f"kubernetes.version {KUBERNETES} is outside these kubeVersion constraints"
