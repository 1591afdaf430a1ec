"""Version rules: the verdict of versions.yml's compatibility rules and the shape of overrides.

gpubring.versions reads versions.yml (pins and rules, parsed once); this module judges a set of
effective versions and settings against them. See gpubring.versions for the rule language.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpubring.versions import (
    VERSIONS_KEY,
    Failure,
    Requirement,
    Rule,
    RuleResult,
    compare,
    get_path,
    load_rules,
    parse_version,
)
from gpubring.yamlfile import did_you_mean

__all__ = ["applies", "check_overrides", "evaluate_rules", "merge_results"]


def check_overrides(
    pinned: Mapping[str, Any], overrides: Any, prefix: str = VERSIONS_KEY
) -> list[tuple[str, str]]:
    """(key path, expected) for every override that does not fit the pinned matrix's shape."""
    if not isinstance(overrides, Mapping):
        if prefix == VERSIONS_KEY:
            return [(prefix, f"expected a mapping shaped like {VERSIONS_KEY} in versions.yml")]
        return [(prefix, f"expected a mapping of pins ({', '.join(pinned)})")]
    out: list[tuple[str, str]] = []
    for key, value in overrides.items():
        path = f"{prefix}.{key}"
        if key not in pinned:
            out.append(
                (
                    path,
                    f"unknown version pin, expected one of {', '.join(pinned)}"
                    f"{did_you_mean(str(key), pinned)}",
                )
            )
        elif isinstance(pinned[key], Mapping):
            out.extend(check_overrides(pinned[key], value, path))
        elif isinstance(value, float):
            out.append(
                (
                    path,
                    f'expected a quoted version string such as "{pinned[key]}" '
                    f"(YAML read {value} as a number)",
                )
            )
        elif not isinstance(value, str | int) or isinstance(value, bool):
            out.append((path, f'expected a version string such as "{pinned[key]}"'))
    return out


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("yes", "true", "on", "y", "t", "1"):
        return True
    if isinstance(value, str) and value.lower() in ("no", "false", "off", "n", "f", "0"):
        return False
    return None


def applies(rule: Rule, settings: Mapping[str, Any]) -> bool:
    for key, want in rule.when.items():
        if key not in settings:
            return False
        have = settings[key]
        if isinstance(want, bool):
            if _as_bool(have) is not want:
                return False
        elif str(have) != str(want):
            return False
    return True


def _check(req: Requirement, versions: Mapping[str, Any]) -> tuple[list[str], list[Failure]]:
    raw = get_path(versions, req.path)
    actual = parse_version(raw)
    if actual is None:
        return [], [Failure(req.path, "a version number", str(raw))]
    passed: list[str] = []
    failed: list[Failure] = []

    # A range read from two pins (a component's kubernetes_min/max) is named whole when one end fails.
    whole = (
        f", of the range {get_path(versions, req.min_path)} to {get_path(versions, req.max_path)}"
        if req.min_path is not None and req.max_path is not None
        else ""
    )

    def bound(op: str, text: str, ref: str | None) -> None:
        parsed = parse_version(text)
        label = f"{op} {text}" + (f" ({ref})" if ref else "")
        if parsed is None:
            failed.append(Failure(req.path, f"{label}, which is no version", str(raw)))
        elif (compare(actual, parsed) >= 0) if op == ">=" else (compare(actual, parsed) <= 0):
            passed.append(f"{req.path} {raw} {label}")
        else:
            failed.append(Failure(req.path, f"{op} {text} ({ref}{whole})" if ref else label, str(raw)))

    if req.min is not None:
        bound(">=", req.min, None)
    if req.max is not None:
        bound("<=", req.max, None)
    if req.min_path is not None:
        bound(">=", str(get_path(versions, req.min_path)), req.min_path)
    if req.max_path is not None:
        bound("<=", str(get_path(versions, req.max_path)), req.max_path)
    if req.same_major_as is not None:
        other = get_path(versions, req.same_major_as)
        other_v = parse_version(other)
        label = f"the same major version as {req.same_major_as} ({other})"
        if other_v is not None and actual[0] == other_v[0]:
            passed.append(f"{req.path} {raw} has {label}")
        else:
            failed.append(Failure(req.path, f"with {label}", str(raw)))
    if req.equal is not None:
        other = get_path(versions, req.equal)
        label = f"equal to {req.equal} ({other})"
        if str(other) == str(raw):
            passed.append(f"{req.path} {raw} {label}")
        else:
            failed.append(Failure(req.path, label, str(raw)))
    refs = tuple(p for p in (req.min_path, req.max_path, req.same_major_as, req.equal) if p)
    return passed, [replace(f, refs=refs) for f in failed]


def evaluate_rules(
    versions: Mapping[str, Any], settings: Mapping[str, Any], rules: Iterable[Rule] | None = None
) -> list[RuleResult]:
    """The verdict of every rule for one set of settings (defaults included by the caller)."""
    results: list[RuleResult] = []
    for rule in load_rules() if rules is None else rules:
        if not applies(rule, settings):
            when = ", ".join(f"{k}={_show(v)}" for k, v in rule.when.items())
            results.append(RuleResult(rule.id, rule.message, True, f"applies when {when}", applicable=False))
            continue
        passed: list[str] = []
        failed: list[Failure] = []
        for req in rule.require:
            ok_texts, bad = _check(req, versions)
            passed.extend(ok_texts)
            failed.extend(bad)
        if failed:
            detail = "; ".join(f"{f.path} {f.actual} is not {f.expected}" for f in failed)
        else:
            detail = "; ".join(passed)
        results.append(RuleResult(rule.id, rule.message, not failed, detail, failures=tuple(failed)))
    return results


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def merge_results(per_context: list[list[RuleResult]]) -> list[RuleResult]:
    """One verdict per rule over several settings contexts (for example per host): a rule fails if
    it fails anywhere, passes if it applies somewhere and never fails, else is not applicable."""
    if not per_context:
        return []
    merged: list[RuleResult] = []
    for results in zip(*per_context, strict=True):
        failing = [r for r in results if r.applicable and not r.ok]
        passing = [r for r in results if r.applicable and r.ok]
        merged.append(failing[0] if failing else passing[0] if passing else results[0])
    return merged
