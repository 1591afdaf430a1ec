"""The site's Helm releases (helm_releases, helm_release_defaults) are checked against the helm role's
argument spec, entry point `release` (the one list of a release's fields), and its formats.yml when
the inventory is validated: `gpubring check` and `plan` exit 2 naming the file, the entry and the
key, before any host is touched, instead of Ansible refusing the entry half-way through a rollout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring.app import app
from gpubring.validation import specs
from helpers import REPO

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py
SITE = "group_vars/all/zz-site.yml"
GOOD = """\
  - name: site-app
    chart: site-app
    version: "1.0.0"
    repo: https://charts.example.internal
    namespace: site
"""


def releases(*entries: str) -> str:
    return "---\nhelm_releases:\n" + GOOD + "".join(entries)


def entry(**fields: str) -> str:
    """A good second release with these fields added, replaced or (value '-') removed."""
    base = {
        "name": "other-app",
        "chart": "oci://registry.example.internal/charts/other",
        "version": '"2.1.0"',
    }
    base["namespace"] = "other"
    base.update(fields)
    lines = [f"{k}: {v}" for k, v in base.items() if v != "-"]
    return "  - " + "\n    ".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        pytest.param(
            releases(entry(chart_vesion='"2.1.0"')),
            "helm_releases[1].chart_vesion",
            "unknown key, expected one of chart, chart_path, create_namespace, manifests, name, "
            "namespace, namespace_labels, pre_manifests, ready, repo, timeout, upgrade_crds, values, "
            "version, wait; did you mean version?",
            id="unknown-key",
        ),
        pytest.param(
            releases(entry(namespace="-")),
            "helm_releases[1].namespace",
            "expected this required key, it is missing",
            id="required-missing",
        ),
        pytest.param(
            releases(entry(name="''")),
            "helm_releases[1].name",
            "expected a DNS-1123 name",
            id="name-empty",
        ),
        pytest.param(
            releases(entry(version="")),
            "helm_releases[1].version",
            "expected a value for this required key, it is empty",
            id="required-null",
        ),
        pytest.param(
            releases(entry(wait="maybe")),
            "helm_releases[1].wait",
            "expected a boolean (true or false), got 'maybe'",
            id="wrong-type-bool",
        ),
        pytest.param(
            releases(entry(values="[a, b]")),
            "helm_releases[1].values",
            "expected a mapping, got ['a', 'b']",
            id="wrong-type-dict",
        ),
        pytest.param(
            releases(entry(manifests="[{kind: ConfigMap}, oops]")),
            "helm_releases[1].manifests[1]",
            "expected a mapping, got 'oops'",
            id="wrong-element",
        ),
        pytest.param(
            releases("  - just-a-release-name\n"),
            "helm_releases[1]",
            "expected a mapping, got 'just-a-release-name'",
            id="entry-not-a-mapping",
        ),
        pytest.param(
            releases(entry(name="Other_App")),
            "helm_releases[1].name",
            "expected a DNS-1123 name",
            id="name-format",
        ),
        pytest.param(
            releases(entry(name="a" * 54)),
            "helm_releases[1].name",
            "expected at most 53 characters, got 54",
            id="name-too-long-for-helm",
        ),
        pytest.param(
            releases(entry(namespace="Other.NS")),
            "helm_releases[1].namespace",
            "expected a DNS-1123 label",
            id="namespace-format",
        ),
        pytest.param(
            releases(entry(repo="ftp://charts.example.internal")),
            "helm_releases[1].repo",
            "expected an http:// or https:// URL with a host",
            id="repo-format",
        ),
        pytest.param(
            releases(entry(timeout="soon")),
            "helm_releases[1].timeout",
            "expected a positive duration",
            id="timeout-format",
        ),
        pytest.param(
            releases(entry(ready="[{api_version: v1, kind: X, name: y, stat: ready}]")),
            "helm_releases[1].ready[0].stat",
            "unknown key, expected one of api_version,",
            id="ready-unknown-key",
        ),
        pytest.param(
            releases(entry(ready="[{api_version: v1, name: y}]")),
            "helm_releases[1].ready[0].kind",
            "expected this required key, it is missing",
            id="ready-required-missing",
        ),
        pytest.param(
            releases(entry(name="site-app", namespace="site")),
            "helm_releases[1]",
            "expected no two items with the same name and namespace; helm_releases[0] has the same "
            "(name 'site-app', namespace 'site')",
            id="duplicate-release",
        ),
        pytest.param(
            "---\nhelm_releases: {name: site-app}\n",
            "helm_releases",
            "expected a list, got",
            id="not-a-list",
        ),
        pytest.param(
            "---\nhelm_release_defaults: {timout: 5m, wait: true}\n",
            "helm_release_defaults.timout",
            "unknown key, expected one of chart, chart_path,",
            id="defaults-unknown-key",
        ),
        pytest.param(
            releases(entry(upgrade_crds="maybe")),
            "helm_releases[1].upgrade_crds",
            "expected a boolean (true or false), got 'maybe'",
            id="upgrade-crds-wrong-type",
        ),
        pytest.param(
            "---\nhelm_release_defaults: {wait: maybe}\n",
            "helm_release_defaults.wait",
            "expected a boolean (true or false), got 'maybe'",
            id="defaults-wrong-type",
        ),
    ],
)
@pytest.mark.parametrize("command", ["check", "plan"])
def test_a_broken_release_is_refused_before_any_host(
    make_inventory: MakeInventory, command: str, text: str, key: str, expected: str
) -> None:
    root = make_inventory({SITE: text})
    result = CliRunner().invoke(app, [command, str(root)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = result.stderr.splitlines()
    assert any(e.startswith(f"error: {SITE}: {key}: {expected}") for e in errors), errors
    assert all(e.startswith("error: ") for e in errors), errors


def test_the_spec_constraints_of_a_ready_check_are_enforced(make_inventory: MakeInventory) -> None:
    ready = specs.load_specs().keys["helm_releases"].options["ready"]  # type: ignore[index]
    if not ready.mutually_exclusive:
        pytest.skip("roles/helm's spec declares no mutually_exclusive for ready")
    both = ready.mutually_exclusive[0][:2]
    text = releases(entry(ready=f"[{{api_version: v1, kind: X, name: y, {both[0]}: a, {both[1]}: b}}]"))
    result = CliRunner().invoke(app, ["plan", str(make_inventory({SITE: text}))])
    assert result.exit_code == 2, result.output
    expected = f"expected only one of {', '.join(ready.mutually_exclusive[0])}; {', '.join(both)} are set"
    assert f"error: {SITE}: helm_releases[1].ready[0].{both[1]}: {expected}" in result.stderr


def test_the_key_path_names_the_entry_in_hosts_yml_inline_vars(make_inventory: MakeInventory) -> None:
    root = make_inventory()
    hosts = (root / "hosts.yml").read_text()
    assert "all:\n" in hosts
    release = "{name: x, chart: x, version: '1', namespace: x, wiat: true}"
    inline = f"all:\n  vars:\n    helm_releases:\n      - {release}\n"
    (root / "hosts.yml").write_text(hosts.replace("all:\n", inline, 1))
    result = CliRunner().invoke(app, ["plan", str(root)])
    assert result.exit_code == 2, result.output
    assert "error: hosts.yml: all.vars.helm_releases[0].wiat: unknown key" in result.stderr
    assert "did you mean wait?" in result.stderr


def test_host_vars_are_checked_too(make_inventory: MakeInventory) -> None:
    root = make_inventory({"host_vars/cp-1.yml": releases(entry(wait="sometimes"))})
    result = CliRunner().invoke(app, ["check", str(root)])
    assert result.exit_code == 2, result.output
    assert "error: host_vars/cp-1.yml: helm_releases[1].wait: expected a boolean" in result.stderr


def test_every_problem_of_every_entry_is_reported_at_once(make_inventory: MakeInventory) -> None:
    root = make_inventory({SITE: releases(entry(chart_vesion="x", wait="maybe"), entry(name="Bad_Name"))})
    result = CliRunner().invoke(app, ["plan", str(root)])
    assert result.exit_code == 2
    keys = [line.split(": ")[2] for line in result.stderr.splitlines()]
    assert keys == ["helm_releases[1].chart_vesion", "helm_releases[1].wait", "helm_releases[2].name"]


def test_good_releases_are_accepted(make_inventory: MakeInventory) -> None:
    text = releases(
        entry(),  # an OCI chart: no repo
        entry(
            name="site-app",
            namespace="site-two",  # the same name in another namespace is another release
            chart_path="charts/site-app-1.0.0.tgz",
            create_namespace="false",
            namespace_labels="{pod-security.kubernetes.io/enforce: privileged}",
            values="{replicas: 2, image: {tag: v1}}",
            pre_manifests="[{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}]",
            manifests="[]",
            wait="true",
            timeout="15m",
            ready="[{api_version: example.com/v1, kind: SiteApp, name: site-app, namespace: site-two, "
            "state: ready}]",
        ),
        entry(name="'{{ site_release_name }}'", namespace="'{{ site_namespace }}'", version="'{{ v }}'"),
    )
    own = "site_release_name: third-app\nsite_namespace: third\nv: '3.0.0'\n"
    root = make_inventory({SITE: text + own})
    result = CliRunner().invoke(app, ["plan", str(root)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


def test_the_release_fields_are_read_from_the_argument_spec() -> None:
    """One source of truth: the fields come from argument_specs.yml (entry point release), not Python."""
    import yaml

    data = yaml.safe_load((REPO / "roles" / "helm" / "meta" / "argument_specs.yml").read_text())
    declared = data["argument_specs"]["release"]["options"]["helm_release"]["options"]
    table = specs.load_specs()
    assert table.problems == ()
    assert set(table.keys["helm_releases"].options or {}) == set(declared)
    assert set(table.keys["helm_release_defaults"].options or {}) == set(declared)
    assert not any(s.required for s in (table.keys["helm_release_defaults"].options or {}).values())


ROLE_SPEC = """\
argument_specs:
  main:
    options:
      x_items: {type: list, elements: dict}
      x_base: {type: dict}
      x_name: {type: str}
  one:
    options:
      x_item:
        type: dict
        options:
          id: {type: str, required: true}
          a: {type: str}
          b: {type: str}
        required_together: [[a, b]]
        required_one_of: [[a, id]]
"""


@pytest.mark.parametrize(
    ("formats", "key", "expected"),
    [
        ("x_items: {items_like: one.x_itme}\n", "x_items.items_like", "did you mean one.x_item?"),
        ("x_items: {items_like: one.x_item, uniq: [id]}\n", "x_items.uniq", "did you mean unique?"),
        (
            "x_items[].id: {format: dns_label, unique: [id]}\n",
            "x_items[].id.unique",
            "expected one of format,",
        ),
        ("x_name: {items_like: one.x_item}\n", "x_name.items_like", "expected on an input of type list"),
        ("x_items: {fields_like: one.x_item}\n", "x_items.fields_like", "expected on an input of type dict"),
        ("x_name: {unique: [id]}\n", "x_name.unique", "expected on an input of type list"),
    ],
)
def test_a_broken_formats_rule_is_reported(tmp_path: Path, formats: str, key: str, expected: str) -> None:
    root = _role(tmp_path, formats)
    problems = [(p.file, p.key, p.expected) for p in specs.load_specs(root).problems]
    assert [(f, k) for f, k, _ in problems] == [("roles/x/meta/formats.yml", key)], problems
    assert expected in problems[0][2]


def test_items_like_brings_the_constraints_of_the_option(tmp_path: Path) -> None:
    table = specs.load_specs(_role(tmp_path, "x_items: {items_like: one.x_item, unique: [id]}\n"))
    assert table.problems == ()

    def check(value: object) -> list[tuple[str, str]]:
        return specs.check_key(table, "x_items", value, "x_items")

    assert check([{"id": "p"}, {"id": "q", "a": "1", "b": "2"}]) == []
    assert check([{"id": "p", "a": "1"}, {"b": "2"}, {"id": "p", "b": None}]) == [
        ("x_items[0].b", "expected a, b together; a set without it"),
        ("x_items[1].id", "expected this required key, it is missing"),
        ("x_items[1]", "expected one of a, id; none is set"),
        ("x_items[1].a", "expected a, b together; b set without it"),
        ("x_items[2]", "expected no two items with the same id; x_items[0] has the same (id 'p')"),
    ]


def _role(tmp_path: Path, formats: str) -> Path:
    (tmp_path / "settings.yml").write_text("options: {}\n")
    (tmp_path / "versions.yml").write_text("gpubring_versions: {}\n")
    meta = tmp_path / "roles" / "x" / "meta"
    meta.mkdir(parents=True)
    (meta / "argument_specs.yml").write_text(ROLE_SPEC)
    (meta / "formats.yml").write_text("---\n" + formats)
    return tmp_path
