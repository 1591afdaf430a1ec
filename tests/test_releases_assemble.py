"""The helm role's release assembly (plugins/filter/helm_release.py), the one function a run
(roles/helm/tasks/role_release.yml, release.yml, main.yml) and `gpubring plan` (releases.py) call.
That both give the same releases is test_releases_render.py's test_ansible_renders_the_same_releases;
here the function itself: its merge is Ansible's combine(recursive=true), and a template of the wrong
shape is named."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.plugins.filter.core import combine

from helpers import collection_module

helm_release = collection_module("filter.helm_release")

CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {}),
    ({"a": 1}, {"b": 2}),
    ({"a": {"x": 1, "y": [1, 2]}}, {"a": {"y": [3], "z": None}}),
    ({"a": {"x": 1}}, {"a": 5}),
    ({"a": 5}, {"a": {"x": 1}}),
    ({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"d": 3}, "e": {}}}),
    ({"list": [{"k": 1}]}, {"list": [{"k": 2}, {"j": 3}]}),
]


@pytest.mark.parametrize(("left", "right"), CASES)
def test_values_merge_as_ansibles_recursive_combine(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert helm_release.merge_values(left, right) == combine(left, right, recursive=True)


def test_a_release_is_assembled_from_its_three_templates() -> None:
    head = {
        "enabled": True,
        "name": "gpu-operator",
        "chart": "gpu-operator",
        "values_overrides": {"driver": {"enabled": True}, "extra": 1},
        "ready": [],
    }
    values = {"driver": {"enabled": False, "version": "x"}}
    objects = {"pre_manifests": [{"kind": "ConfigMap"}], "manifests": None}
    assert helm_release.helm_release_assemble(head, values, objects) == {
        "name": "gpu-operator",
        "chart": "gpu-operator",
        "ready": [],
        "values": {"driver": {"enabled": True, "version": "x"}, "extra": 1},
        "pre_manifests": [{"kind": "ConfigMap"}],
        "manifests": [],
    }
    # Empty templates (from_yaml of nothing is None) are no values and no objects.
    assert helm_release.helm_release_assemble({"name": "a"}, None, None) == {
        "name": "a",
        "values": {},
        "pre_manifests": [],
        "manifests": [],
    }


def test_a_release_is_completed_as_the_engine_combines_the_defaults() -> None:
    fields = {"wait": True, "timeout": "10m", "repo": ""}
    defaults = {"timeout": "20m", "values": {"x": 1}}
    release = {"name": "a", "values": {"y": 2}}
    completed = helm_release.helm_release_complete(release, fields, defaults)
    assert completed == combine(fields, defaults, release)
    assert completed == {"wait": True, "timeout": "20m", "repo": "", "name": "a", "values": {"y": 2}}
    assert helm_release.helm_release_complete(release, fields) == {**fields, **release}


@pytest.mark.parametrize(
    ("head", "values", "objects", "template", "message"),
    [
        ("just text", None, None, "release.yml.j2", "expected a mapping (the release)"),
        ({"name": "a"}, ["a"], None, "values.yml.j2", "expected a mapping (the chart's values)"),
        ({"name": "a", "values_overrides": [1]}, None, None, "release.yml.j2", "values_overrides: expected"),
        (
            {"name": "a"},
            None,
            "text",
            "manifests.yml.j2",
            "expected {pre_manifests: [...], manifests: [...]}",
        ),
    ],
)
def test_a_template_of_the_wrong_shape_is_named(
    head: Any, values: Any, objects: Any, template: str, message: str
) -> None:
    with pytest.raises(helm_release.ReleaseShapeError) as caught:
        helm_release.helm_release_assemble(head, values, objects)
    assert caught.value.template == template
    assert caught.value.message.startswith(message)
