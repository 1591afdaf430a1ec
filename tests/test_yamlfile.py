"""The one YAML reader: data back, or one Problem naming the file, the line and what was expected;
duplicate keys, deep nesting, alias bombs and oversized files are refused before they do harm."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import yamlfile
from gpubring.app import app
from gpubring.yamlfile import MAX_ALIAS_NODES, MAX_BYTES, MAX_DEPTH, Opaque, YamlError

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py


def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_mapping(depth: int) -> str:
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + f"{'  ' * depth}leaf\n"


def laughs(levels: int) -> str:
    """The billion laughs: each level a list of nine aliases of the level before."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\nb: [1, 2]\n", {"a": 1, "b": [1, 2]}),
        ("", None),
        (
            "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  z: 3\n",
            {"base": {"x": 1, "y": 2}, "c": {"x": 1, "y": 2, "z": 3}},
        ),
        ("a: &a [1, 2]\nb: *a\n", {"a": [1, 2], "b": [1, 2]}),
        ("a: {b: 1}\nc: {b: 2}\n", {"a": {"b": 1}, "c": {"b": 2}}),
    ],
    ids=["plain", "empty", "merge-key", "alias", "same-key-other-mapping"],
)
def test_reads_yaml(text: str, expected: object) -> None:
    assert yamlfile.load(text, "f.yml") == expected


@pytest.mark.parametrize("text", [deep_list(MAX_DEPTH), deep_mapping(MAX_DEPTH)], ids=["list", "mapping"])
def test_nesting_up_to_the_limit_is_read(text: str) -> None:
    yamlfile.load(text, "f.yml")


def test_vault_and_unsafe_are_opaque() -> None:
    data = yamlfile.load("a: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\nb: !unsafe '{{ x }}'\n", "f.yml")
    assert isinstance(data["a"], Opaque) and data["a"].tag == "!vault"
    assert isinstance(data["b"], Opaque) and data["b"] == "{{ x }}"


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        (
            "a: 1\nb: 2\na: 3\n",
            "line 3, column 1",
            "expected each key once in a mapping, a is also at line 1",
        ),
        (
            "x:\n  - {k: 1, k: 2}\n",
            "line 2, column 12",
            "expected each key once in a mapping, k is also at line 2",
        ),
        (
            "yes: 1\ntrue: 2\n",
            "line 2, column 1",
            "expected each key once in a mapping, True is also at line 1",
        ),
        (
            deep_list(MAX_DEPTH + 1),
            f"line 1, column {MAX_DEPTH + 1}",
            f"expected nesting at most {MAX_DEPTH} deep",
        ),
        (deep_list(100_000), "line 1, column ", "expected"),
        (
            deep_mapping(MAX_DEPTH + 1),
            f"line {MAX_DEPTH + 1}, column ",
            f"expected nesting at most {MAX_DEPTH} deep",
        ),
        (
            f"a: &a {deep_list(60)}\nb: {deep_list(50)[:50]}*a{deep_list(50)[50:]}\n",
            "line 2, column 54",
            f"expected nesting at most {MAX_DEPTH} deep, *a goes deeper",
        ),
        (laughs(9), "line ", f"expected aliases to stand for at most {MAX_ALIAS_NODES} nodes"),
        ("a: &a [1, *a]\n", "line 1, column 11", "expected an alias to a complete node, *a is inside it"),
        ("a: [1\n", "line 2, column 1", "expected valid YAML ("),
        ("a: *nope\n", "line 1, column 4", "expected valid YAML (found undefined alias"),
        (
            "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n",
            "line 3, column 3",
            "expected a merge key (<<) that shadows nothing, x is also set at line 4",
        ),
        (
            "a: &a {x: 1}\nb: &b {x: 2}\nc:\n  <<: [*a, *b]\n",
            "line 4, column 3",
            "expected a merge key (<<) that shadows nothing, x is also set at line 1",
        ),
        ("- a\n---\n- b\n", "line 2, column 1", "expected valid YAML (but found another document)"),
    ],
    ids=[
        "duplicate-key",
        "duplicate-key-nested",
        "duplicate-key-same-value",
        "too-deep-list",
        "100000-deep-list",
        "too-deep-mapping",
        "too-deep-through-alias",
        "billion-laughs",
        "recursive-alias",
        "malformed",
        "undefined-alias",
        "merge-shadows-a-key",
        "merge-shadows-a-merge",
        "two-documents",
    ],
)
def test_refused_with_file_line_and_expectation(text: str, key: str, expected: str) -> None:
    with pytest.raises(YamlError) as info:
        yamlfile.load(text, "group_vars/all/x.yml")
    problem = info.value.problem
    assert problem.file == "group_vars/all/x.yml"
    assert problem.key.startswith(key), problem
    assert problem.expected.startswith(expected), problem


def test_oversized_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    with path.open("wb") as f:
        f.truncate(MAX_BYTES + 1)  # sparse: the size counts, the reader never reads it
    with pytest.raises(YamlError) as info:
        yamlfile.read(path, "big.yml")
    assert str(info.value.problem) == "big.yml: file: expected at most 16 MiB of YAML"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.mkdir(), "expected a file, found a folder"),
        (lambda p: p.write_bytes(b"a: \xff\n"), "expected UTF-8 text, the file cannot be decoded"),
        (lambda p: None, "expected a readable file (No such file or directory)"),
    ],
    ids=["folder", "not-utf8", "missing"],
)
def test_unreadable_file(tmp_path: Path, make: Callable[[Path], object], expected: str) -> None:
    path = tmp_path / "x.yml"
    make(path)
    with pytest.raises(YamlError) as info:
        yamlfile.read(path, "x.yml")
    assert str(info.value.problem) == f"x.yml: file: {expected}"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "gpubring_cni: calico\ngpubring_cni: cilium\n",
            "line 2, column 1: expected each key once in a mapping",
        ),
        (laughs(9), "expected aliases to stand for at most"),
        (f"gpubring_x: {deep_list(200)}\n", f"expected nesting at most {MAX_DEPTH} deep"),
    ],
    ids=["duplicate-key", "billion-laughs", "too-deep"],
)
def test_inventory_reports_the_refusal(make_inventory: MakeInventory, text: str, line: str) -> None:
    root = make_inventory({"group_vars/all/extra.yml": text})
    result = CliRunner().invoke(app, ["plan", str(root)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: group_vars/all/extra.yml: "), result.stderr
    assert line in result.stderr, result.stderr
