"""`gpubring dev scenarios`: which Molecule scenarios a git change touches.

Each test builds a small real git repository with the gpubring layout (roles, plugins, module_utils,
Molecule scenarios and the shared Molecule files), commits it, changes files and checks the set of
scenarios computed from git's answer. No Docker here.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring import scenarios
from gpubring.commands.dev import app
from gpubring.paths import project_root

GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@localhost",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
}

TREE = {
    ".config/molecule/config.yml": "driver: {name: docker}\n",
    "molecule/images/build.sh": "#!/bin/sh\necho build\n",
    "molecule/images/recipe/packages.txt": "systemd\n",
    "molecule/images/README.md": "# images\n",
    "molecule/images/vm/build.sh": "#!/bin/sh\necho vm image\n",
    "molecule/shared/prepare_apt.yml": "- hosts: all\n",
    "scripts/molecule-all.sh": "#!/bin/sh\nprintf 'ran:%s\\n' \"$*\"\n",
    "versions.yml": "gpubring_versions: {x: {version: '1.0'}}\n",
    # role a: plain tasks, and a filter from plugins/filter/topology.py in a template
    "roles/a/tasks/main.yml": "- name: A\n  ansible.builtin.debug:\n    msg: a\n",
    "roles/a/templates/etc/a.conf.j2": "cpus = {{ x | gpubring.core.reserved_cpus }}\n",
    "roles/a/defaults/main.yml": "a_value: 1\n",
    # role b: uses the module x, which imports module_utils, and reads the pinned versions
    "roles/b/tasks/main.yml": textwrap.dedent(
        """\
        - name: Facts
          gpubring.core.x:
            detail: true
        - name: In a block
          block:
            - name: Debug
              ansible.builtin.debug:
                msg: b
        """
    ),
    "roles/b/defaults/main.yml": 'b_version: "{{ gpubring_matrix.x.version }}"\n',
    # role c: includes role b
    "roles/c/tasks/main.yml": "- name: B first\n  ansible.builtin.include_role:\n    name: gpubring.core.b\n",
    # role d: no scenario of its own; scenario vm converges it
    "roles/d/tasks/main.yml": "- name: D\n  ansible.builtin.debug:\n    msg: d\n",
    "plugins/modules/x.py": textwrap.dedent(
        """\
        from ansible.module_utils.basic import AnsibleModule
        from ansible_collections.gpubring.core.plugins.module_utils.x_parse import parse
        """
    ),
    "plugins/modules/unused.py": "from ansible.module_utils.basic import AnsibleModule\n",
    "plugins/module_utils/x_parse.py": "from .common import helper\n",
    "plugins/module_utils/common.py": "def helper():\n    return 1\n",
    "plugins/module_utils/other.py": "def other():\n    return 2\n",
    "plugins/filter/topology.py": textwrap.dedent(
        """\
        class FilterModule:
            def filters(self):
                return {"reserved_cpus": len}
        """
    ),
    "molecule/a/molecule.yml": "scenario: {name: a}\n",
    "molecule/a/converge.yml": "- hosts: all\n  roles: [gpubring.core.a]\n",
    "molecule/b/molecule.yml": "scenario: {name: b}\n",
    "molecule/b/converge.yml": "- hosts: all\n  roles: [gpubring.core.b]\n",
    "molecule/b/verify.yml": "- hosts: all\n",
    "molecule/c/molecule.yml": "scenario: {name: c}\n",
    "molecule/c/converge.yml": "- hosts: all\n  roles: [gpubring.core.c]\n",
    "molecule/vm/molecule.yml": "scenario: {name: vm}\n",
    "molecule/vm/converge.yml": (
        "- hosts: all\n  vars_files: [../../versions.yml]\n  roles: [gpubring.core.d]\n"
    ),
    "molecule/vm/create.yml": (
        "- hosts: localhost\n  tasks:\n    - ansible.builtin.command:\n"
        '        argv: ["{{ molecule_scenario_directory }}/../images/vm/build.sh"]\n'
    ),
    "docs/index.md": "# docs\n",
}
ALL = {"a", "b", "c", "vm"}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    )
    return done.stdout.strip()


def write(repo: Path, path: str, text: str) -> None:
    target = repo / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "team-repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for path, text in TREE.items():
        write(root, path, text)
    commit(root, "initial tree")
    git(root, "checkout", "-q", "-b", "feature")
    return root


def touched(repo: Path, rev: str = "main") -> set[str]:
    return set(scenarios.select(repo, scenarios.changed_paths(repo, rev)))


def test_discover_lists_folders_with_molecule_yml(repo: Path) -> None:
    assert scenarios.discover(repo) == ["a", "b", "c", "vm"]


def test_dependencies_follow_modules_module_utils_roles_and_versions(repo: Path) -> None:
    b = scenarios.dependencies(repo, "b")
    assert b.roles == ("b",)
    assert b.plugins == ("plugins/modules/x.py",)
    assert b.module_utils == ("plugins/module_utils/common.py", "plugins/module_utils/x_parse.py")
    assert b.uses_versions

    c = scenarios.dependencies(repo, "c")
    assert c.roles == ("b", "c")
    assert c.plugins == ("plugins/modules/x.py",)

    a = scenarios.dependencies(repo, "a")
    assert a.roles == ("a",)
    assert a.plugins == ("plugins/filter/topology.py",)
    assert a.module_utils == ()
    assert not a.uses_versions

    vm = scenarios.dependencies(repo, "vm")
    assert vm.roles == ("d",)
    assert vm.uses_versions


def test_a_role_file_touches_its_scenario_only(repo: Path) -> None:
    write(repo, "roles/a/defaults/main.yml", "a_value: 2\n")
    commit(repo, "change role a")
    assert touched(repo) == {"a"}


def test_a_module_utils_file_touches_every_role_that_uses_its_module(repo: Path) -> None:
    write(repo, "plugins/module_utils/common.py", "def helper():\n    return 3\n")
    commit(repo, "change common")
    assert touched(repo) == {"b", "c"}


def test_the_module_itself_touches_its_users(repo: Path) -> None:
    write(repo, "plugins/modules/x.py", TREE["plugins/modules/x.py"] + "# more\n")
    commit(repo, "change x")
    assert touched(repo) == {"b", "c"}


def test_a_filter_file_touches_the_roles_that_use_its_filters(repo: Path) -> None:
    write(repo, "plugins/filter/topology.py", TREE["plugins/filter/topology.py"] + "# more\n")
    commit(repo, "change filter")
    assert touched(repo) == {"a"}


def test_an_included_role_touches_the_including_scenario(repo: Path) -> None:
    write(repo, "roles/b/tasks/main.yml", TREE["roles/b/tasks/main.yml"] + "# more\n")
    commit(repo, "change b")
    assert touched(repo) == {"b", "c"}


def test_a_role_without_own_scenario_touches_the_scenario_that_converges_it(repo: Path) -> None:
    write(repo, "roles/d/tasks/main.yml", TREE["roles/d/tasks/main.yml"] + "# more\n")
    commit(repo, "change d")
    assert touched(repo) == {"vm"}


@pytest.mark.parametrize(
    "shared",
    [
        ".config/molecule/config.yml",
        "molecule/images/build.sh",
        "molecule/images/recipe/packages.txt",
        "molecule/shared/prepare_apt.yml",
    ],
)
def test_shared_molecule_files_touch_every_scenario(repo: Path, shared: str) -> None:
    write(repo, shared, (repo / shared).read_text() + "# more\n")
    commit(repo, f"change {shared}")
    assert touched(repo) == ALL


def test_another_image_recipe_touches_only_the_scenarios_that_build_it(repo: Path) -> None:
    assert scenarios.dependencies(repo, "vm").images == ("molecule/images/vm/",)
    assert scenarios.dependencies(repo, "a").images == ()
    write(repo, "molecule/images/vm/build.sh", "#!/bin/sh\necho vm image 2\n")
    write(repo, "molecule/images/README.md", "# images, documented\n")
    commit(repo, "change the vm image and the images readme")
    assert touched(repo) == {"vm"}


def test_a_scenario_folder_touches_that_scenario(repo: Path) -> None:
    write(repo, "molecule/b/verify.yml", "- hosts: all\n  tasks: []\n")
    commit(repo, "change verify of b")
    assert touched(repo) == {"b"}


def test_versions_touch_the_scenarios_that_read_them(repo: Path) -> None:
    write(repo, "versions.yml", "gpubring_versions: {x: {version: '2.0'}}\n")
    commit(repo, "bump x")
    assert touched(repo) == {"b", "c", "vm"}


def test_unrelated_files_touch_nothing(repo: Path) -> None:
    write(repo, "plugins/modules/unused.py", TREE["plugins/modules/unused.py"] + "# more\n")
    write(repo, "plugins/module_utils/other.py", "def other():\n    return 5\n")
    write(repo, "docs/index.md", "# more docs\n")
    commit(repo, "unrelated")
    assert touched(repo) == set()


def test_uncommitted_and_untracked_changes_count_for_a_single_revision(repo: Path) -> None:
    write(repo, "roles/a/tasks/extra.yml", "- name: New\n  ansible.builtin.debug:\n")
    write(repo, "molecule/b/verify.yml", "- hosts: all\n  tasks: []\n")
    assert touched(repo) == {"a", "b"}


def test_a_range_counts_only_its_commits(repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    write(repo, "roles/a/defaults/main.yml", "a_value: 3\n")
    second = commit(repo, "change a")
    write(repo, "plugins/module_utils/common.py", "def helper():\n    return 4\n")
    commit(repo, "change common")
    assert touched(repo, f"{first}..{second}") == {"a"}
    assert touched(repo, "main") == {"a", "b", "c"}


def test_changes_on_the_base_branch_are_not_the_pull_requests(repo: Path) -> None:
    git(repo, "checkout", "-q", "main")
    write(repo, "roles/b/defaults/main.yml", "b_version: other\n")
    commit(repo, "base moved on")
    git(repo, "checkout", "-q", "feature")
    write(repo, "roles/a/defaults/main.yml", "a_value: 4\n")
    commit(repo, "feature change")
    assert touched(repo, "main") == {"a"}


def test_a_bad_revision_is_an_error_with_gits_message(repo: Path) -> None:
    with pytest.raises(scenarios.ScenarioError, match="no-such-rev"):
        scenarios.changed_paths(repo, "no-such-rev")


def test_cli_prints_the_touched_scenarios_and_why(repo: Path) -> None:
    write(repo, "plugins/module_utils/common.py", "def helper():\n    return 6\n")
    commit(repo, "change common")
    runner = CliRunner()
    result = runner.invoke(app, ["scenarios", "--changed-since", "main", "--root", str(repo)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["b", "c"]
    result = runner.invoke(app, ["scenarios", "--changed-since", "main", "--explain", "--root", str(repo)])
    assert result.output.splitlines() == [
        "b\tplugins/module_utils/common.py",
        "c\tplugins/module_utils/common.py",
    ]


def test_cli_lists_every_scenario_with_its_dependencies(repo: Path) -> None:
    result = CliRunner().invoke(app, ["scenarios", "--list", "--root", str(repo)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "a: roles/a, plugins/filter/topology.py"
    assert lines[1] == (
        "b: roles/b, plugins/modules/x.py, plugins/module_utils/common.py, plugins/module_utils/x_parse.py"
    )
    assert len(lines) == 4


def test_cli_run_passes_only_the_touched_scenarios_to_molecule_all(
    repo: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    write(repo, "roles/d/tasks/main.yml", TREE["roles/d/tasks/main.yml"] + "# more\n")
    write(repo, "molecule/a/converge.yml", TREE["molecule/a/converge.yml"] + "# more\n")
    commit(repo, "change a and d")
    result = CliRunner().invoke(app, ["scenarios", "--changed-since", "main", "--run", "--root", str(repo)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["a", "vm"]
    # The repository's scripts/molecule-all.sh ran once, with exactly the touched scenarios.
    assert capfd.readouterr().out.splitlines() == ["ran:a vm"]


def test_cli_run_returns_the_runners_exit_code(repo: Path) -> None:
    write(repo, "scripts/molecule-all.sh", "#!/bin/sh\necho '0 passed, 1 failed'\nexit 1\n")
    write(repo, "molecule/a/converge.yml", TREE["molecule/a/converge.yml"] + "# more\n")
    commit(repo, "runner that fails")
    result = CliRunner().invoke(app, ["scenarios", "--changed-since", "HEAD~1", "--run", "--root", str(repo)])
    # The runner itself changed: it is shared, so every scenario is selected, and its failure is ours.
    assert result.output.splitlines() == sorted(ALL)
    assert result.exit_code == 1


def test_cli_run_with_nothing_touched_runs_nothing(repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    write(repo, "docs/index.md", "# other\n")
    commit(repo, "docs")
    result = CliRunner().invoke(app, ["scenarios", "--changed-since", "main", "--run", "--root", str(repo)])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "nothing to run" in result.stderr
    assert "ran:" not in capfd.readouterr().out


def test_cli_bad_input_exits_2_with_a_message(repo: Path) -> None:
    result = CliRunner().invoke(app, ["scenarios", "--changed-since", "no-such-rev", "--root", str(repo)])
    assert result.exit_code == 2
    assert "no-such-rev" in result.output
    result = CliRunner().invoke(app, ["scenarios", "--root", str(repo / "docs")])
    assert result.exit_code == 2
    assert "no molecule/ folder" in result.output


def test_the_kernel_scenario_of_this_repository_depends_on_its_role() -> None:
    root = project_root()
    assert "kernel" in scenarios.discover(root)
    deps = scenarios.dependencies(root, "kernel")
    # The kernel role, and the reboot play it flags for (with the roles that play includes).
    assert deps.roles[0] == "kernel" and "reboot" in deps.roles
    assert "roles/kernel/" in deps.paths()
    assert ".config/molecule/" in deps.paths()
