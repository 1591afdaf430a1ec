"""gpubring's runner turns Ansible's injected fact variables off (ANSIBLE_INJECT_FACT_VARS=False,
cli/gpubring/run/folder.py: the main process would deep-copy every host's facts for each task it queues).
So no role, playbook or template may read a fact by its injected name (`ansible_distribution`): only as
`ansible_facts['distribution']`. The names are the ones `setup` returns here, on this machine."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

from gpubring.run.accelerate import Accelerator
from gpubring.run.folder import environment
from gpubring.run.settings import RunSettings
from helpers import BIN, REPO, collection_env, set_fact_args, tasks_in

SCANNED = ("roles", "playbooks", "molecule", "inventories")
SUFFIXES = {".yml", ".yaml", ".j2"}


def _fact_names() -> set[str]:
    proc = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-m", "ansible.builtin.setup", "-o"],
        cwd=REPO,
        env=collection_env(
            ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="1", ANSIBLE_CACHE_PLUGIN="memory"
        ),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads(proc.stdout.split(" => ", 1)[1])
    return {name for name in document["ansible_facts"] if name.startswith("ansible_")}


# The setup task's filter names the facts it keeps (setup's own names, with the prefix): no read.
FACTS_FILTER = REPO / "playbooks" / "tasks" / "facts_once.yml"


def test_no_injected_fact_is_read() -> None:
    names = _fact_names()
    assert {"ansible_distribution", "ansible_default_ipv4", "ansible_memtotal_mb"} <= names
    # Connection settings share the prefix and are inventory variables, not facts.
    names -= {"ansible_python_interpreter", "ansible_user", "ansible_host", "ansible_port"}
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    pattern = re.compile(r"(?<![\w.'\"\[])(" + alternatives + r")\b")
    found = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or path == FACTS_FILTER:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.lstrip().startswith("#"):
                    continue
                for match in pattern.finditer(line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {match.group(1)}")
    assert found == [], "read as ansible_facts['...'] instead:\n" + "\n".join(found)


def test_runner_turns_injection_off(tmp_path: Path) -> None:
    settings = RunSettings(
        inventory_root=tmp_path,
        hosts_file=tmp_path / "hosts.yml",
        command="test",
        playbook=tmp_path / "x.yml",
    )
    assert environment(settings, Accelerator("linear", {}), tmp_path)["ANSIBLE_INJECT_FACT_VARS"] == "False"


def _cached_by_set_fact() -> dict[str, Path]:
    """The names a `set_fact` with `cacheable: true` keeps in the fact cache, and the file that sets each."""
    out: dict[str, Path] = {}
    for path in sorted((REPO / "roles").rglob("tasks/*.yml")):
        for task in tasks_in(yaml.safe_load(path.read_text(encoding="utf-8"))):
            args = set_fact_args(task)
            if args is not None and args.get("cacheable") is True:
                out.update({name: path for name in args if name != "cacheable"})
    return out


def test_cached_names_are_read_from_ansible_facts_across_hosts() -> None:
    """A name a set_fact caches comes back in another ansible-playbook process (the smoke tests after a
    sharded verify's shards) only under ansible_facts, injection being off: every file that reads it from
    another host's hostvars reads ansible_facts too."""
    cached = _cached_by_set_fact()
    assert {"__verify_gpu_host", "__verify_rdma_devices"} <= cached.keys()
    missing = []
    for path in sorted((REPO / "roles").rglob("*.yml")):
        text = path.read_text(encoding="utf-8")
        if "hostvars" not in text:
            continue
        for name, setter in cached.items():
            if path != setter and name in text and f"['ansible_facts']['{name}']" not in text:
                missing.append(f"{path.relative_to(REPO)}: {name}")
    assert missing == [], "read from hostvars[h]['ansible_facts'] as well:\n" + "\n".join(missing)
