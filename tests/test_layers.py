"""The layers of cli/gpubring: the modules below commands/ import one another without a cycle (every
`import`/`from gpubring ...` counts, inside functions and under TYPE_CHECKING too), and the leaf
modules import nothing from gpubring."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from helpers import REPO

PACKAGE = REPO / "cli" / "gpubring"
LEAVES = ("gpubring.yamlfile", "gpubring.paths", "gpubring.exitcodes", "gpubring.events")


def module_name(path: Path) -> str:
    parts = ("gpubring", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def imported(path: Path) -> Iterator[str]:
    """The gpubring modules a file imports, anywhere in it."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("gpubring"))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("gpubring")
        ):
            module = str(node.module)
            submodules = [f"{module}.{a.name}" for a in node.names if is_module(f"{module}.{a.name}")]
            yield from submodules if len(submodules) == len(node.names) else [module, *submodules]


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module -> the modules it imports, for cli/gpubring without the command layer (commands/)."""
    out: dict[str, frozenset[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if name.startswith("gpubring.commands"):
            continue
        deps = {d for d in imported(path) if not d.startswith("gpubring.commands") and d != name}
        out[name] = frozenset(d for d in deps if d != "gpubring")
    return out


def find_cycle(edges: dict[str, frozenset[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_modules_below_commands_import_without_a_cycle() -> None:
    cycle = find_cycle(dict(graph()))
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert find_cycle(edges) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("leaf", LEAVES)
def test_leaf_imports_nothing_from_gpubring(leaf: str) -> None:
    assert graph()[leaf] == frozenset(), graph()[leaf]


def test_the_run_options_import_only_the_yaml_reader() -> None:
    """runopts parses -e with yamlfile (inside its functions); nothing else of gpubring."""
    assert graph()["gpubring.runopts"] == frozenset({"gpubring.yamlfile"})


# Output and exits belong to the command layer (commands/, app.py) and the output layer (view.py).
# Still to move: options.py (the shared typer options of up and node) and planning.py's rich
# rendering of the plan.
OUTPUT_ALLOWED = (
    "gpubring.app",
    "gpubring.view",
    "gpubring.options",
    "gpubring.planning",
    "gpubring.__main__",
)


def output_uses(path: Path) -> list[str]:
    """typer or rich imported (but for type hints), print() called, sys.exit or SystemExit used."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hints = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if id(node) in hints:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        found += [f"{node.lineno}: import {n}" for n in names if n.split(".")[0] in ("typer", "rich")]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"{node.lineno}: print()")
        if isinstance(node, ast.Attribute) and node.attr == "exit" and getattr(node.value, "id", "") == "sys":
            found.append(f"{node.lineno}: sys.exit")
        if isinstance(node, ast.Name) and node.id == "SystemExit":
            found.append(f"{node.lineno}: SystemExit")
    return found


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if not module_name(p).startswith("gpubring.commands") and module_name(p) not in OUTPUT_ALLOWED
    ],
    ids=module_name,
)
def test_no_output_or_exit_below_commands(path: Path) -> None:
    assert output_uses(path) == []


def run_path_calls(path: Path) -> list[str]:
    """Where a file starts a run (`process.run(...)`) or draws one (`RunView(...)`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
        if (owner, name) == ("process", "run") or name == "RunView":
            found.append(f"{node.lineno}: {owner + '.' if owner else ''}{name}()")
    return found


def test_one_run_path() -> None:
    """Every verb that runs a playbook (up, verify, node, upgrade, reset) goes through the executor,
    gpubring.run.steps: nothing else in cli/gpubring starts a run or draws its live view."""
    elsewhere = {
        module_name(path): calls
        for path in sorted(PACKAGE.rglob("*.py"))
        if module_name(path) != "gpubring.run.steps" and (calls := run_path_calls(path))
    }
    assert elsewhere == {}
    assert run_path_calls(PACKAGE / "run" / "steps.py")  # the checker finds the executor's own calls
