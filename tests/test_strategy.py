"""gpubring.core.mitogen_linear (plugins/strategy/mitogen_linear.py): a real ansible-playbook run with
Mitogen, whose forked workers find the installed collections' packages already imported, and the
collection's own modules run through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpubring.run.accelerate import MITOGEN_STRATEGY, Accelerator, accelerator
from gpubring.run.strategy import GPUBRING_STRATEGY, for_runs
from helpers import BIN, REPO, collection_env, script_shows

pytest.importorskip("ansible_mitogen", reason="Mitogen is gpubring's [accel] extra: pip install -e '.[test]'")

# A filter that runs where Jinja runs: in the worker Ansible forked for the task and host.
IMPORTED_FILTER = """
import sys


class FilterModule:
    def filters(self):
        return {"imported": lambda p: sorted(m for m in sys.modules if m == p or m.startswith(p + "."))}
"""

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: The collections' packages this worker was forked with
      ansible.builtin.set_fact:
        seen: "{{ 'ansible_collections.community.general' | imported }}"
        filters: "{{ 'ansible_collections.gpubring.core.plugins.filter' | imported }}"
    - name: A module of gpubring.core, run by Mitogen
      gpubring.core.read_files:
        paths: ["{{ marker }}"]
      register: read
    - name: Show what the worker saw and what the module read
      ansible.builtin.debug:
        msg: "{{ {'seen': seen, 'filters': filters, 'content': read.files[marker].content} | to_json }}"
"""


def _playbook(tmp_path: Path, strategy: str, variables: dict[str, str], **env: str) -> dict[str, Any]:
    """ansible-playbook of tmp_path/play.yml on localhost under `strategy`: its JSON callback's document."""
    environment = collection_env(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_STRATEGY=strategy,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        **env,
    )
    extra = json.dumps({"ansible_python_interpreter": sys.executable, **variables})
    command = [str(BIN / "ansible-playbook"), "--inventory=localhost,", "--connection=local"]
    proc = subprocess.run(
        [*command, f"--extra-vars={extra}", str(tmp_path / "play.yml")],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    document: dict[str, Any] = json.loads(proc.stdout)
    return document


def _run(tmp_path: Path, strategy: str) -> dict[str, object]:
    (tmp_path / "filter_plugins").mkdir(exist_ok=True)
    (tmp_path / "filter_plugins" / "imported.py").write_text(IMPORTED_FILTER)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    marker = tmp_path / "marker.txt"
    marker.write_text("read through the strategy\n")
    document = _playbook(
        tmp_path, strategy, {"marker": str(marker)}, ANSIBLE_FILTER_PLUGINS=str(tmp_path / "filter_plugins")
    )
    last = document["plays"][0]["tasks"][-1]["hosts"]["localhost"]
    return json.loads(last["msg"])


def test_runs_use_it_where_mitogen_applies() -> None:
    chosen = for_runs(accelerator(True))
    assert chosen.strategy == GPUBRING_STRATEGY == "gpubring.core.mitogen_linear"
    assert chosen.env["ANSIBLE_STRATEGY"] == GPUBRING_STRATEGY
    # Mitogen's own folder stays on the path, and Mitogen's choice (Molecule's) is Mitogen's strategy.
    assert chosen.env["ANSIBLE_STRATEGY_PLUGINS"] == accelerator(True).env["ANSIBLE_STRATEGY_PLUGINS"]
    assert accelerator(True).strategy == MITOGEN_STRATEGY
    linear = Accelerator("linear", {}, "Mitogen is not installed")
    assert for_runs(linear) is linear


def test_workers_inherit_the_listed_collections(tmp_path: Path) -> None:
    shown = _run(tmp_path, GPUBRING_STRATEGY)
    assert shown["content"] == "read through the strategy\n"
    # Listed once in the main process before the fork: the worker has the package without importing it.
    assert "ansible_collections.community.general" in shown["seen"]
    # gpubring.core's filters were loaded before the fork: the worker, which named none of them, has them.
    assert "ansible_collections.gpubring.core.plugins.filter.gpu_expect" in shown["filters"]


def test_ansible_linear_workers_do_not(tmp_path: Path) -> None:
    """The control: with Ansible's own linear strategy nothing lists the collections before the fork."""
    shown = _run(tmp_path, "linear")
    assert shown["content"] == "read through the strategy\n"
    assert shown["seen"] == []
    assert shown["filters"] == []


def test_refuses_to_start_without_mitogen() -> None:
    """Importable without Mitogen (ansible-test's import check, a wheel without [accel]); it says what is
    missing when a play would start."""
    code = (
        "import sys\n"
        "sys.modules['ansible_mitogen'] = None\n"
        "sys.modules['ansible_mitogen.strategy'] = None\n"
        "from helpers import collection_module\n"
        "plugin = collection_module('strategy.mitogen_linear')\n"
        "assert plugin.MITOGEN_ERROR is not None\n"
        "try:\n"
        "    plugin.StrategyModule(None)\n"
        "except Exception as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO / "tests", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("AnsibleError gpubring.core.mitogen_linear needs Mitogen")
    assert "pip install 'gpubring[accel]'" in proc.stdout


GOOD_FILTER = """
class FilterModule:
    def filters(self):
        return {"shout": lambda s: s.upper() + "!"}
"""

BROKEN_FILTER = """
raise RuntimeError("this filter file is broken on purpose")
"""

SHOUT_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: A filter of the collection whose other filter file cannot be imported
      ansible.builtin.debug:
        msg: "{{ 'ready' | gpubring.core.shout }}"
"""


def test_a_broken_filter_file_does_not_stop_the_run(tmp_path: Path) -> None:
    """The filters are loaded before the fork from the collection as installed: a filter file that cannot be
    imported is left to the worker that names one of its filters (Ansible's loader warns and skips it), and
    every other filter of the collection still works."""
    collection = tmp_path / "ansible_collections" / "gpubring" / "core"
    (collection / "plugins" / "filter").mkdir(parents=True)
    # the strategy, and what it imports
    for used in ("strategy/mitogen_linear.py", "plugin_utils/jinja_cache.py"):
        (collection / "plugins" / used).parent.mkdir(parents=True, exist_ok=True)
        (collection / "plugins" / used).write_text((REPO / "plugins" / used).read_text())
    (collection / "plugins" / "filter" / "good.py").write_text(GOOD_FILTER)
    (collection / "plugins" / "filter" / "broken.py").write_text(BROKEN_FILTER)
    (tmp_path / "play.yml").write_text(SHOUT_PLAYBOOK)
    document = _playbook(tmp_path, GPUBRING_STRATEGY, {}, ANSIBLE_COLLECTIONS_PATH=str(tmp_path))
    assert document["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"] == "READY!"


# Whether a template whose source holds a marker was compiled before, in this process or one it was
# forked from: gpubring.core's compile cache (plugins/plugin_utils/jinja_cache.py) holds its code.
COMPILED_FILTER = """
from ansible_collections.gpubring.core.plugins.plugin_utils import jinja_cache


class FilterModule:
    def filters(self):
        return {"compiled": lambda marker: any(marker in key[1] for key in jinja_cache._CODE)}
"""

# The same Jinja source rendered where Ansible compiles it differently: in a task's arguments (backslashes
# escaped at compile time) and in a template file (not escaped), and in a file whose #jinja2: header
# changes the delimiters. Each pass renders all of them; the second pass finds them compiled.
OVERRIDES = "#jinja2:variable_start_string:'[%', variable_end_string:'%]'\n"
SAME_SOURCE = "{{ 'a\\tb' }} [% greeting %] {{ greeting }}\n"
CACHE_PLAYBOOK = """
- hosts: all
  gather_facts: false
  vars:
    greeting: hello
    words: [one, two, three]
  tasks:
    - name: Nothing with the marker compiled yet
      ansible.builtin.set_fact:
        before: "{{ ['PROBE', '7f3'] | join('-') | compiled }}"
    - name: Render the marker
      ansible.builtin.debug:
        msg: "{{ 'PROBE-7f3' | lower }}"
    - name: The marker's template, compiled by the worker before, is in this worker
      ansible.builtin.set_fact:
        after: "{{ ['PROBE', '7f3'] | join('-') | compiled }}"
    - name: Render each kind twice
      ansible.builtin.include_tasks: renders.yml
      loop: [1, 2]
      loop_control:
        loop_var: round
    - name: What each round rendered
      ansible.builtin.debug:
        msg: "{{ {'before': before, 'after': after, 'rounds': rounds} | to_json }}"
"""
RENDERS = """
- name: A task's arguments, each item
  ansible.builtin.set_fact:
    args_text: "{{ 'a\\\\tb' }} [% greeting %] {{ greeting }}\\n"
    items_text: "{{ words | map('upper') | join(',') }}"
    seen: "{{ (seen | default([])) + [item ~ '-' ~ greeting] }}"
  loop: "{{ words }}"
  when: "item is string and greeting | length == 5"
- name: Template files
  ansible.builtin.template:
    src: "{{ playbook_dir }}/{{ item }}.j2"
    dest: "{{ playbook_dir }}/{{ item }}-{{ round }}.txt"
    mode: "0600"
  loop: [plain, overridden]
- name: Keep this round
  ansible.builtin.set_fact:
    rounds: "{{ (rounds | default([])) + [{'args': args_text, 'items': items_text, 'seen': seen,
      'plain': lookup('file', playbook_dir ~ '/plain-' ~ round ~ '.txt', rstrip=false),
      'overridden': lookup('file', playbook_dir ~ '/overridden-' ~ round ~ '.txt', rstrip=false)}] }}"
    seen: []
"""


def _render_kinds(tmp_path: Path, strategy: str) -> dict[str, Any]:
    (tmp_path / "filter_plugins").mkdir()
    (tmp_path / "filter_plugins" / "compiled.py").write_text(COMPILED_FILTER)
    (tmp_path / "play.yml").write_text(CACHE_PLAYBOOK)
    (tmp_path / "renders.yml").write_text(RENDERS)
    (tmp_path / "plain.j2").write_text(SAME_SOURCE)
    (tmp_path / "overridden.j2").write_text(OVERRIDES + SAME_SOURCE)
    (tmp_path / "tmp").mkdir()
    plugins, temporary = str(tmp_path / "filter_plugins"), str(tmp_path / "tmp")
    document = _playbook(
        tmp_path, strategy, {}, ANSIBLE_FILTER_PLUGINS=plugins, TMPDIR=temporary, ANSIBLE_LOCAL_TEMP=temporary
    )
    last = document["plays"][0]["tasks"][-1]["hosts"]["localhost"]
    shown: dict[str, Any] = json.loads(last["msg"])
    shown["left"] = sorted(path.name for path in (tmp_path / "tmp").iterdir())
    return shown


@pytest.mark.parametrize("strategy", [GPUBRING_STRATEGY, "linear"])
def test_compiled_templates_render_as_ansible_renders_them(tmp_path: Path, strategy: str) -> None:
    """The compile cache: what one worker compiled, a worker forked after it has, and every kind renders
    what Ansible's own linear strategy renders, the second time (compiled before) as the first. The same
    source compiled with other settings (a task's arguments escape backslashes, a template file does not;
    a #jinja2: header changes the delimiters) is not taken for it. The cache's folder is gone after."""
    shown = _render_kinds(tmp_path, strategy)
    assert shown["before"] is False
    assert shown["after"] is (strategy == GPUBRING_STRATEGY)  # linear: nothing is kept
    expected = {
        "args": "a\\tb [% greeting %] hello\n",  # a task's argument: the backslash is kept
        "items": "ONE,TWO,THREE",
        "seen": ["one-hello", "two-hello", "three-hello"],
        "plain": "a\tb [% greeting %] hello\n",  # the same source in a template file: Jinja reads \t as a tab
        "overridden": "{{ 'a\\tb' }} hello {{ greeting }}\n",  # the same body under the header's delimiters
    }
    assert shown["rounds"] == [expected, expected]
    assert shown["left"] == []  # ansible-playbook's own temporary folders and the cache's are removed


MERGE_SCRIPT = """
import json, marshal, os, sys
from helpers import collection_module
cache = collection_module("plugin_utils.jinja_cache")
assert cache.install()
from ansible._internal._templating._jinja_bits import AnsibleEnvironment
folder = cache._STATE["dir"]
child = os.fork()
if child == 0:  # a worker: compiles, and writes what it compiled when its task ends
    AnsibleEnvironment().from_string("{{ 'from the worker' | upper }}")
    cache.write()
    os._exit(0)
os.waitpid(child, 0)
def blob(keys, codes):
    head = marshal.dumps(keys)
    return len(head).to_bytes(8, "big") + head + marshal.dumps(codes)
junk = {
    "random.code": os.urandom(64), "short.code": b"\\x00\\x01", "empty.code": b"",
    "number.code": blob(5, []), "unhashable.code": blob([[1]], [1]), "uneven.code": blob([("k",)], []),
    "not-code.code": blob([("k",)], ["not code"]), ".x.part": b"half written",
}
for name, data in junk.items():
    with open(os.path.join(folder, name), "wb") as stream:
        stream.write(data)
added = cache.merge()
sources = [key[1] for key in cache._CODE]
where = os.path.basename(os.path.dirname(folder))  # Ansible's local temporary folder of the process
print(json.dumps({"added": added, "sources": sources, "left": sorted(os.listdir(folder)), "in": where}))
"""


def test_the_main_process_merges_what_a_worker_compiled_and_nothing_else(tmp_path: Path) -> None:
    """A forked worker's compilations reach the main process; files that are not what a worker writes
    (garbage, cut short, wrong shapes) are dropped without an error in the main process, and a file still
    being written (.part) is left to its writer."""
    shown = script_shows(MERGE_SCRIPT, tmp_path)
    assert shown["added"] == 1
    assert shown["sources"] == ["{{ 'from the worker' | upper }}"]
    assert shown["left"] == [".x.part"]
    assert shown["in"].startswith("ansible-local-")  # removed by Ansible when the process ends


WAIT_SCRIPT = """
import json, multiprocessing, time
from helpers import collection_module
strategy = collection_module("strategy.mitogen_linear")

class Counted(multiprocessing.get_context("fork").Process):
    checks = 0
    def is_alive(self):
        Counted.checks += 1
        return super().is_alive()

workers = [Counted(target=time.sleep, args=(delay,)) for delay in (30, 0.2, 30)]
for worker in workers:
    worker.start()
started = time.monotonic()
strategy.wait_for_a_free_worker(workers, timeout=0.05)
waited = time.monotonic() - started
checks = Counted.checks
alive = [worker.is_alive() for worker in workers]
for worker in workers:
    worker.terminate()
    worker.join()
looked = Counted.checks
strategy.wait_for_a_free_worker([None, *workers])  # an empty slot: no wait
print(json.dumps({"alive": alive, "checks": checks, "waited": waited, "after": Counted.checks - looked}))
"""


def test_a_full_worker_list_is_waited_on_not_polled(tmp_path: Path) -> None:
    """With every slot busy, the main process sleeps until a worker ends (the 0.2 s one here) and looks
    at the workers a few times, where Ansible's loop looks at each every 0.1 ms (thousands of times in
    0.2 s). It wakes when a worker ends or its 0.05 s timeout passes, so however long a loaded machine
    takes to run the 0.2 s worker, it looks at the three workers at most once per 0.05 s waited (and
    at the start, and a wake's timer may run late); a fixed bound failed a clean-clone CI run under
    load."""
    shown = script_shows(WAIT_SCRIPT, tmp_path)
    assert shown["alive"] == [True, False, True]
    wakes = shown["waited"] / 0.05 + 3
    assert 3 <= shown["checks"] <= 3 * wakes, shown
    assert shown["after"] == 0  # an empty slot: it returns without a look


AFFINITY_SCRIPT = """
import json, os
import ansible_mitogen.affinity
from helpers import collection_module
strategy = collection_module("strategy.mitogen_linear")
before = sorted(os.sched_getaffinity(0))
strategy.release_cpus()
ansible_mitogen.affinity.policy.assign_controller()
ansible_mitogen.affinity.policy.assign_worker()
ansible_mitogen.affinity.policy.assign_muxprocess(0)
print(json.dumps({"before": before, "after": sorted(os.sched_getaffinity(0))}))
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="Mitogen pins nothing on one CPU")
def test_the_controller_processes_are_not_pinned_to_cpus(tmp_path: Path) -> None:
    """Mitogen pins the main process and every worker to one CPU on a 2-3 CPU controller, and every
    ansible-playbook process (each shard) pins its main process to the same CPU. With the strategy's
    release_cpus(), what Mitogen assigns to the main process, a worker and a multiplexer leaves each
    free to run on every CPU it had (checked to fail with Mitogen's own policy: one CPU after)."""
    shown = script_shows(AFFINITY_SCRIPT, tmp_path)
    assert len(shown["before"]) >= 2
    assert shown["after"] == shown["before"]
