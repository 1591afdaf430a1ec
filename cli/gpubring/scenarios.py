"""Which Molecule scenarios a change touches, for CI that tests only what a pull request changed.

A scenario is a folder molecule/<name>/ with a molecule.yml; the scenario of a role has the role's
name. A scenario depends on:

- its own folder;
- the shared Molecule files (SHARED): the base config, shared playbooks, the test-host image recipe
  and the scripts that run them — a change there touches every scenario;
- another image recipe (molecule/images/<name>/) when its files name `images/<name>/`;
- the role of the same name, and every role that one (or the scenario's playbooks) names as
  `gpubring.core.<role>`, transitively;
- every plugin those files name as `gpubring.core.<name>` (plugins/<type>/<name>.py, or a filter or
  test file that defines <name>), and the module_utils those plugins import, transitively;
- versions.yml when the scenario's playbooks load it or its roles read `gpubring_matrix`.

`changed_paths` asks git what a range changed; `select` maps the paths to scenarios.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

SHARED: tuple[str, ...] = (
    ".config/molecule/",
    "molecule/shared/",
    "molecule/images/build.sh",
    "molecule/images/recipe/",
    "scripts/engine.sh",
    "scripts/molecule-all.sh",
    "plugins/vars/",
    "settings.yml",
)
"""Paths (folders end with /) whose change touches every scenario: the shared base config, shared
playbooks, the vars plugin and the settings defaults it gives every play, the test-host image recipe
every container scenario runs on, and the scripts that run them. Another image recipe in a subfolder
(molecule/images/<name>/, such as a VM image) touches only the scenarios whose files name
`images/<name>/`."""

NAMESPACE = "gpubring.core."
_REFERENCE = re.compile(r"\bgpubring\.core\.([A-Za-z_][A-Za-z0-9_]*)\b")
_TEXT_SUFFIXES = (".yml", ".yaml", ".j2", ".json", ".cfg", ".conf")
_MODULE_UTILS_PREFIX = "ansible_collections.gpubring.core.plugins.module_utils"


class ScenarioError(Exception):
    """A git range or a scenario name that cannot be used; the message says why."""


@dataclass(frozen=True)
class ScenarioDeps:
    """What one scenario depends on, as repository-relative paths (folders end with /)."""

    name: str
    roles: tuple[str, ...]
    plugins: tuple[str, ...]
    module_utils: tuple[str, ...]
    uses_versions: bool
    images: tuple[str, ...] = ()

    def paths(self) -> tuple[str, ...]:
        own = [f"molecule/{self.name}/", *SHARED, *self.images]
        own += [f"roles/{role}/" for role in self.roles]
        own += [*self.plugins, *self.module_utils]
        if self.uses_versions:
            own.append("versions.yml")
        return tuple(own)

    def reason(self, changed: Iterable[str]) -> str | None:
        """The first changed path this scenario depends on, or None."""
        deps = self.paths()
        for path in changed:
            if any(path == dep or (dep.endswith("/") and path.startswith(dep)) for dep in deps):
                return path
        return None


def discover(root: Path) -> list[str]:
    """Names of the scenarios under root/molecule (folders with a molecule.yml), sorted."""
    return sorted(p.parent.name for p in (root / "molecule").glob("*/molecule.yml"))


def _texts(folder: Path) -> Iterable[str]:
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in _TEXT_SUFFIXES:
            yield path.read_text(encoding="utf-8", errors="replace")


def _references(texts: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for text in texts:
        found.update(_REFERENCE.findall(text))
    return found


def _plugin_files(root: Path, name: str) -> set[str]:
    """Plugin files that provide gpubring.core.<name>: by file name, or filters/tests by definition."""
    plugins = root / "plugins"
    found = {
        p.relative_to(root).as_posix()
        for p in plugins.glob(f"*/{name}.py")
        if p.parent.name != "module_utils"
    }
    defines = re.compile(rf"""["']{re.escape(name)}["']\s*:""")
    for kind in ("filter", "test"):
        for path in sorted((plugins / kind).glob("*.py")):
            if defines.search(path.read_text(encoding="utf-8", errors="replace")):
                found.add(path.relative_to(root).as_posix())
    return found


def _module_utils_file(root: Path, dotted: str) -> str | None:
    """plugins/module_utils/<dotted>.py (or the package folder) if it exists."""
    base = root / "plugins" / "module_utils" / Path(*dotted.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py").relative_to(root).as_posix()
    if base.is_dir():
        return base.relative_to(root).as_posix() + "/"
    return None


def imported_module_utils(root: Path, plugin: str) -> set[str]:
    """The module_utils files that one plugin file imports, directly (absolute or relative imports)."""
    path = root / plugin
    if not path.is_file():
        return set()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError:
        return set()
    in_module_utils = path.parent.name == "module_utils" or "module_utils/" in plugin
    dotted: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(_MODULE_UTILS_PREFIX + "."):
                    dotted.add(alias.name[len(_MODULE_UTILS_PREFIX) + 1 :])
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module == _MODULE_UTILS_PREFIX:
                dotted.update(alias.name for alias in node.names)
            elif node.level == 0 and module.startswith(_MODULE_UTILS_PREFIX + "."):
                dotted.add(module[len(_MODULE_UTILS_PREFIX) + 1 :])
            elif node.level == 1 and in_module_utils:
                dotted.update([module] if module else [alias.name for alias in node.names])
            elif node.level == 2 and module.startswith("module_utils"):
                rest = module[len("module_utils") :].lstrip(".")
                dotted.update([rest] if rest else [alias.name for alias in node.names])
    return {f for name in dotted if (f := _module_utils_file(root, name))}


def dependencies(root: Path, name: str) -> ScenarioDeps:
    """What the scenario molecule/<name>/ depends on (see the module docstring)."""
    scenario_dir = root / "molecule" / name
    if not (scenario_dir / "molecule.yml").is_file():
        raise ScenarioError(f"molecule/{name}/molecule.yml: no such scenario")
    role_names = (
        {p.name for p in (root / "roles").iterdir() if p.is_dir()} if (root / "roles").is_dir() else set()
    )
    scenario_texts = list(_texts(scenario_dir))
    references = _references(scenario_texts)
    uses_versions = any("versions.yml" in text for text in scenario_texts)
    images = sorted(
        f"molecule/images/{sub.name}/"
        for sub in (root / "molecule" / "images").glob("*/")
        if sub.is_dir() and sub.name != "recipe" and any(f"images/{sub.name}/" in t for t in scenario_texts)
    )

    roles: set[str] = set()
    pending = ({name} | references) & role_names
    while pending:
        role = pending.pop()
        roles.add(role)
        texts = list(_texts(root / "roles" / role))
        uses_versions = uses_versions or any("gpubring_matrix" in text for text in texts)
        found = _references(texts)
        references |= found
        pending |= (found & role_names) - roles

    plugins: set[str] = set()
    for ref in sorted(references - role_names):
        plugins |= _plugin_files(root, ref)

    module_utils: set[str] = set()
    pending_files = set(plugins)
    while pending_files:
        found_utils = imported_module_utils(root, pending_files.pop().rstrip("/"))
        pending_files |= found_utils - module_utils
        module_utils |= found_utils
    return ScenarioDeps(
        name=name,
        roles=tuple(sorted(roles)),
        plugins=tuple(sorted(plugins)),
        module_utils=tuple(sorted(module_utils)),
        uses_versions=uses_versions,
        images=tuple(images),
    )


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise ScenarioError("git is not installed") from None
    except subprocess.CalledProcessError as exc:
        raise ScenarioError(f"git {' '.join(args)}: {exc.stderr.strip() or exc}") from None
    return done.stdout


def changed_paths(root: Path, rev: str) -> list[str]:
    """Repository-relative paths changed since REV.

    `A..B` or `A...B`: the files a range of commits changed. A single revision: every file changed
    from the merge base of REV and HEAD to the work tree (committed, staged, unstaged, and new
    untracked files), which is what a pull request against REV changes.
    """
    if ".." in rev:
        out = _git(root, "diff", "--name-only", "--no-renames", rev, "--")
        return sorted(set(out.split("\n")) - {""})
    base = _git(root, "merge-base", rev, "HEAD").strip()
    out = _git(root, "diff", "--name-only", "--no-renames", base, "--")
    out += _git(root, "ls-files", "--others", "--exclude-standard")
    return sorted(set(out.split("\n")) - {""})


def select(root: Path, changed: Sequence[str]) -> dict[str, str]:
    """The scenarios the changed paths touch: name -> the first changed path that touches it."""
    touched: dict[str, str] = {}
    for name in discover(root):
        reason = dependencies(root, name).reason(changed)
        if reason is not None:
            touched[name] = reason
    return touched


def run(root: Path, names: Sequence[str]) -> int:
    """Run the named scenarios through scripts/molecule-all.sh; its exit code."""
    script = root / "scripts" / "molecule-all.sh"
    if not script.is_file():
        raise ScenarioError(f"{script}: not found (run from a gpubring checkout)")
    return subprocess.run(["bash", str(script), *names], cwd=root, check=False).returncode


def repository_root(start: Path) -> Path:
    """The git work tree holding start (where molecule/ and roles/ are)."""
    return Path(_git(start, "rev-parse", "--show-toplevel").strip())
