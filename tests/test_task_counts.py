"""Less work per host (issue 26 item 1): what a run schedules on a converged host.

Facts are read once per run: no play of playbooks/ gathers facts itself (Ansible's implicit gathering
was a full read per play: four per lab GPU node in a `gpubring up`, six with the cluster phase); each
play that needs them imports playbooks/tasks/facts_once.yml first, and a real ansible-playbook run of
several such plays reads them once, fresh, whatever an earlier run left in the fact cache.

Work that does not apply to a host is one skipped include, not a skipped task per step: the verify role's
cluster smoke tests on a host whose control plane has no cluster yet (the lab, a first run, check mode:
about 90 skipped tasks before), and preflight's wait for a busy package manager when it is free (three
skipped tasks at the start of every play that installs packages). A real run of each on this machine
counts what it scheduled.

Reads folded into one module call (gpubring.core.read_files) where a role ran a stat or slurp task per
file, or a loop of them: verify's sysctl checks (a slurp per sysctl before), and the toolkit role on a
node whose toolkit the GPU Operator owns (its host-side steps one skipped include, five before).

preflight, the per-host verify and gpu_acceptance on a GPU node (run on localhost): 25, 19 and 40
results (one a loop of 6) before the steps every host runs were imported and their reads and verdicts
folded; 8, 10 and 13 now (verify imports its kernel checks, read in one call and judged in one assert;
gpu_acceptance's health, kernel log, NVLink and PCIe reads are one shell call, its gate's outcomes one
set_fact, its two refusals and the display of its checks one assert).
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import REPO, ansible_playbook_json, collection_env, set_fact_args, tasks_in

PLAYBOOKS = REPO / "playbooks"
FACTS_ONCE = PLAYBOOKS / "tasks" / "facts_once.yml"
FACTS_TASK = "Read the host's facts once per run"


def _plays() -> list[tuple[str, dict[str, Any]]]:
    """Every play (not import_playbook) of every playbook under playbooks/, with its file name."""
    found = []
    for path in sorted(PLAYBOOKS.glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if "ansible.builtin.import_playbook" not in play:
                found.append((path.name, play))
    return found


def _first_pre_task(play: dict[str, Any]) -> dict[str, Any]:
    """The play's first pre_task, after the host phase's end_host of an unchanged host (playbooks/host.yml:
    it comes before, so that a host left out reads no facts)."""
    tasks = [t for t in play.get("pre_tasks") or [{}] if t.get("ansible.builtin.meta") != "end_host"]
    return dict(tasks[0]) if tasks else {}


def _imports_facts_once(play: dict[str, Any]) -> bool:
    return bool(_first_pre_task(play).get("ansible.builtin.import_tasks") == "tasks/facts_once.yml")


# The playbooks whose plays reach the same host one after another in one run. (upgrade.yml's gathering
# plays are disjoint: the first control plane, the others, the workers; each host's facts are read once.)
CHAINED = ("preflight.yml", "host.yml", "cluster.yml", "platform.yml", "verify.yml", "node_add.yml")
# verify.yml imports its plays from these; preflight_collisions.yml follows preflight in a sharded run.
CHAINED += ("verify_hosts.yml", "verify_smoke.yml", "verify_fabric.yml", "preflight_collisions.yml")


def test_no_play_of_a_run_reads_the_facts_again() -> None:
    gathering = [
        f"{name}: {play['name']}"
        for name, play in _plays()
        if name in CHAINED and play.get("gather_facts", True)
    ]
    assert gathering == [], (
        "plays that read every host's facts again (use tasks/facts_once.yml):\n" + "\n".join(gathering)
    )


@pytest.mark.parametrize(
    ("playbook", "play"),
    [
        ("preflight.yml", "Preflight checks on every host"),
        ("host.yml", "Host setup on every node"),
        ("host.yml", "GPU host setup on GPU nodes"),
        ("cluster.yml", "Kubernetes packages on every node"),
        ("cluster.yml", "Control plane"),
        ("cluster.yml", "Workers join"),
        ("node_add.yml", "Kubernetes packages on the new nodes"),
    ],
)
def test_plays_that_read_facts_import_facts_once_first(playbook: str, play: str) -> None:
    """The plays whose roles read ansible_facts (OS, addresses, the GPU facts) get them first thing,
    tagged always as Ansible's own gathering is (a --tags run still has them)."""
    plays = {p["name"]: p for name, p in _plays() if name == playbook}
    assert _imports_facts_once(plays[play]), plays[play].get("pre_tasks")
    assert "always" in _first_pre_task(plays[play])["tags"]


def test_the_acceptance_play_reads_only_the_gpu_facts() -> None:
    """verify_hosts.yml's acceptance play imports no facts_once.yml (one task result less per GPU
    node): gpu_acceptance reads no fact of Ansible's own, only gpubring_gpu_facts, which the verify play
    before it gathered on the same host or the role gathers itself."""
    plays = {p["name"]: p for name, p in _plays() if name == "verify_hosts.yml"}
    assert not _imports_facts_once(plays["Accept the GPU nodes"])
    role = REPO / "roles" / "gpu_acceptance"
    text = "\n".join(path.read_text() for path in sorted(role.rglob("*.yml")))
    uses = re.findall(r"ansible_facts\W{1,2}(\w+)", text)
    assert uses and set(uses) == {"gpubring_gpu_facts"}, uses
    assert not re.findall(r"\bansible_(?!facts\b|check_mode\b|failed_|collections\b|version\b)\w+", text)


def _run_json(playbook: Path, cache: Path) -> dict[str, Any]:
    """ansible-playbook with gpubring's gathering settings (implicit, a jsonfile fact cache that never
    expires), its result as ansible.posix.json's document."""
    env = collection_env(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_GATHERING="implicit",
        ANSIBLE_CACHE_PLUGIN="jsonfile",
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(cache),
        ANSIBLE_CACHE_PLUGIN_TIMEOUT="0",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(playbook)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def _facts_reads(result: dict[str, Any]) -> list[str]:
    """Per play, what the facts task did on localhost: 'read' or 'skipped'."""
    seen = []
    for play in result["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == FACTS_TASK:
                host = task["hosts"]["localhost"]
                seen.append("skipped" if host.get("skipped") else "read")
    return seen


def test_a_run_of_several_plays_reads_the_facts_once_and_fresh(tmp_path: Path) -> None:
    """Three plays import facts_once.yml: the first reads the facts, the others reuse them (the last
    still sees ansible_facts). A second run reads them again although the first run's facts are in the
    fact cache (cached facts are an earlier run's, not this one's)."""
    play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "pre_tasks": [{"name": "Facts", "ansible.builtin.import_tasks": str(FACTS_ONCE), "tags": ["always"]}],
    }
    check = {
        "name": "The facts are there",
        "ansible.builtin.assert": {
            "that": [
                "ansible_facts.os_family | length > 0",
                "ansible_facts.memtotal_mb | int > 0",
                "ansible_facts.processor_vcpus | int > 0",
                # only what gpubring reads: no mounts, block devices, interfaces or environment
                "ansible_facts.mounts is not defined and ansible_facts.devices is not defined",
                "ansible_facts.interfaces is not defined and ansible_facts.env is not defined",
            ]
        },
    }
    playbook = tmp_path / "plays.yml"
    playbook.write_text(
        yaml.safe_dump(
            [{**play, "name": "one"}, {**play, "name": "two"}, {**play, "name": "three", "tasks": [check]}]
        )
    )
    cache = tmp_path / "facts"
    first = _run_json(playbook, cache)
    assert _facts_reads(first) == ["read", "skipped", "skipped"]
    assert first["stats"]["localhost"]["failures"] == 0
    assert any(cache.iterdir()), "the run wrote no fact cache (the second run proves nothing)"
    second = _run_json(playbook, cache)
    assert _facts_reads(second) == ["read", "skipped", "skipped"]


def _module_facts(action: str) -> set[str]:
    """The facts a module returns (its RETURN's ansible_facts: the keys it contains, else its sample's), for
    gpubring.core's modules and ansible.builtin's; empty for any other action."""
    short = action.rsplit(".", 1)[-1]
    if action.startswith("gpubring.core."):
        path = REPO / "plugins" / "modules" / f"{short}.py"
        if not path.is_file():
            return set()
        assigned = {
            node.targets[0].id: node.value.value
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
        }  # fmt: skip
        doc = assigned.get("RETURN")
    elif action.startswith("ansible.builtin."):
        try:
            doc = getattr(importlib.import_module(f"ansible.modules.{short}"), "RETURN", None)
        except ImportError:
            return set()
    else:
        return set()
    facts = (yaml.safe_load(doc) or {}).get("ansible_facts") if isinstance(doc, str) else None
    if not isinstance(facts, dict):
        return set()
    sample = facts.get("sample")
    return set(facts.get("contains") or (sample if isinstance(sample, dict) else {}))


def _facts_set_by_gpubring() -> set[str]:
    """The facts gpubring's own tasks set: set_fact's names, and what the modules its tasks call return."""
    names: set[str] = set()
    files = [*REPO.glob("roles/*/tasks/**/*.yml"), *PLAYBOOKS.rglob("*.yml")]
    for path in files:
        document = yaml.safe_load(path.read_text())
        sections = [document]
        if path.parent == PLAYBOOKS and isinstance(document, list):  # plays: their task lists
            sections = [play.get(k) for play in document for k in ("pre_tasks", "tasks", "post_tasks")]
        for task in (t for section in sections for t in tasks_in(section)):
            args = set_fact_args(task)
            if args is not None:
                names.update(k for k in args if k != "cacheable")
            else:
                names.update(n for key in task if "." in key for n in _module_facts(key))
    return names


def test_every_fact_gpubring_reads_is_read_by_facts_once() -> None:
    """facts_once.yml keeps only the facts gpubring reads (its filter): every ansible_facts name a role,
    a playbook or a plugin reads is one of them, or set by one of gpubring's tasks (set_fact, gpu_facts,
    package_facts ...). A fact read through a variable holding a host's facts is not seen here; each of
    those (hostname, default_ipv4, the distribution) is also read directly."""
    kept = yaml.safe_load(FACTS_ONCE.read_text())[0]["ansible.builtin.setup"]["filter"]
    read: dict[str, set[str]] = {}
    for path in [*REPO.glob("roles/**/*"), *PLAYBOOKS.rglob("*"), *(REPO / "plugins").rglob("*")]:
        if path.suffix not in {".yml", ".j2", ".py"} or not path.is_file():
            continue
        for name in re.findall(r"ansible_facts(?:\.|\[['\"])(\w+)", path.read_text()):
            read.setdefault(name, set()).add(str(path.relative_to(REPO)))
    assert {"os_family", "default_ipv4", "gpubring_gpu_facts"} <= set(read)  # the scan sees the reads
    own = _facts_set_by_gpubring()
    assert {"gpubring_gpu_facts", "packages", "__verify_gpu_host"} <= own  # ... and the facts set
    missing = {
        name: sorted(where)
        for name, where in read.items()
        if name not in own and not any(fnmatch.fnmatch(f"ansible_{name}", pattern) for pattern in kept)
    }
    assert missing == {}, f"facts read but not in {FACTS_ONCE.name}'s filter: {missing}"


def test_facts_once_is_a_plain_tasks_file() -> None:
    """ansible-lint and the playbooks read it as a tasks file: one setup task, nothing else."""
    tasks = yaml.safe_load(FACTS_ONCE.read_text())
    assert [t["name"] for t in tasks] == [FACTS_TASK]
    assert "ansible.builtin.setup" in tasks[0]


def _results(result: dict[str, Any], play: str) -> dict[str, str]:
    """Task name -> what it did on localhost ('ok', 'skipped', 'failed'), for one play of a json result."""
    seen = {}
    for item in next(p for p in result["plays"] if p["play"]["name"] == play)["tasks"]:
        host = item["hosts"]["localhost"]
        name = item["task"]["name"].split(" : ", 1)[-1]  # without the "gpubring.core.ROLE : " prefix
        seen[name] = "failed" if host.get("failed") else "skipped" if host.get("skipped") else "ok"
    return seen


def test_gated_work_is_one_skipped_include(tmp_path: Path) -> None:
    """verify's cluster tests with a control plane that has no kubeconfig, and preflight's package-manager
    wait on a free package manager: each schedules a handful of tasks, the skipped work one include."""
    role_play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
    }
    plays = [
        {
            **role_play,
            "name": "verify cluster",
            "tasks": [
                {
                    "name": "The cluster smoke tests",
                    "ansible.builtin.include_role": {"name": "gpubring.core.verify", "tasks_from": "cluster"},
                    "vars": {
                        "verify_control_plane": "localhost",
                        "verify_kubeconfig": str(tmp_path / "none.conf"),
                    },
                }
            ],
        },
        {
            **role_play,
            "name": "package lock",
            "tasks": [
                {
                    "name": "The package-manager wait",
                    "ansible.builtin.include_role": {
                        "name": "gpubring.core.preflight",
                        "tasks_from": "package_lock",
                    },
                    "vars": {
                        "preflight_package_lock_paths": [str(tmp_path / "free.lock")],
                        "preflight_package_busy_commands": [],
                        "ansible_facts": {"os_family": "Debian"},
                    },
                }
            ],
        },
    ]
    (tmp_path / "free.lock").write_text("")
    playbook = tmp_path / "gated.yml"
    playbook.write_text(yaml.safe_dump(plays))
    result = _run_json(playbook, tmp_path / "facts")

    verify = _results(result, "verify cluster")
    assert verify.get("Run the smoke tests") == "skipped", verify
    assert verify.get("Say that there is no cluster to test yet") == "ok", verify
    assert "Plan the smoke tests" not in verify and "Pick the GPU nodes to test" not in verify
    assert len(verify) <= 6, verify  # ~90 task results before (every smoke-test step skipped one by one)

    lock = _results(result, "package lock")
    assert lock.get("Find who holds the package manager's locks") == "ok", lock
    assert lock.get("Wait for the package manager") == "skipped", lock
    assert "Say who holds it" not in lock and "Stop when the package manager stayed busy" not in lock
    assert len(lock) <= 4, lock  # with the include_role and its argument check; 6 before


def _host_results(result: dict[str, Any], play: str) -> list[dict[str, Any]]:
    """(name, localhost's result) of every task of one play, in order."""
    found = []
    for item in next(p for p in result["plays"] if p["play"]["name"] == play)["tasks"]:
        found.append({"name": item["task"]["name"].split(" : ", 1)[-1], **item["hosts"]["localhost"]})
    return found


def test_the_sysctl_check_reads_every_value_in_one_call(tmp_path: Path) -> None:
    """verify's kernel checks (run on every host by the verify play, and after a reboot): the drop-in, the
    swap areas and every live value the drop-in names in one module call (gpubring.core.read_files and
    its sysctl_files), judged by one assert; not a slurp per sysctl (a loop of N executions: 9 on a lab
    node, 19 s in the TCG guest of kernel-vm), nor a call for the file and one for its values with an
    assert each. A value changed by hand is still named, and so is a name the running kernel does not
    have."""
    live = {
        key: Path("/proc/sys", key.replace(".", "/")).read_text().strip()
        for key in ("kernel.ostype", "kernel.osrelease", "kernel.pid_max")
    }
    good = tmp_path / "good.conf"
    good.write_text("# comment\n" + "".join(f"{key} = {value}\n" for key, value in live.items()))
    drifted = tmp_path / "drifted.conf"
    drifted.write_text(
        f"kernel.ostype = {live['kernel.ostype']}\nkernel.pid_max = {int(live['kernel.pid_max']) + 1}\n"
        "-kernel.gpubring_no_such_sysctl = 1\n"
    )

    def play(name: str, dropin: Path, swap_off: bool = False) -> dict[str, Any]:
        return {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "name": name,
            "vars": {"ansible_python_interpreter": sys.executable},
            "tasks": [
                {
                    "name": "The kernel checks",
                    "ansible.builtin.include_role": {"name": "gpubring.core.verify", "tasks_from": "kernel"},
                    "vars": {"verify_sysctl_file": str(dropin), "verify_sysctls_live": True,
                             "verify_swap_off": swap_off},
                }
            ],
        }  # fmt: skip

    playbook = tmp_path / "kernel.yml"
    missing = tmp_path / "no-such.conf"
    playbook.write_text(
        yaml.safe_dump(
            [
                play("good", good),
                {**play("drifted", drifted), "ignore_errors": True},
                {**play("missing", missing), "ignore_errors": True},
                # The swap check reads this machine's /proc/swaps: it fails where swap is on, naming it.
                {**play("swap", good, swap_off=True), "ignore_errors": True},
            ]
        )
    )
    result = _run_json(playbook, tmp_path / "facts")

    passed = {r["name"]: r for r in _host_results(result, "good")}
    reads = [r for r in passed.values() if r.get("action") == "gpubring.core.read_files"]
    assert [r["name"] for r in reads] == [
        "Read the sysctl drop-in, the live value of each sysctl it sets, and the swap areas",
    ], passed
    assert all("results" not in r for r in reads), "a read runs as a loop (one execution per file)"
    entries = reads[0]["sysctls"][str(good)]["entries"]
    assert {e["path"] for e in entries.values()} == {f"/proc/sys/{k.replace('.', '/')}" for k in live}
    check_name = "Check that every sysctl has its configured value and that no swap area is active"
    assert not passed[check_name].get("failed"), passed
    # With the include_role; 7 before (one a loop of a slurp per sysctl), then 5 (two reads, two asserts).
    assert len(passed) <= 3, list(passed)

    drift = {r["name"]: r for r in _host_results(result, "drifted")}
    check = drift[check_name]
    assert check.get("failed"), check
    pid_max = live["kernel.pid_max"]
    assert f"kernel.pid_max is {pid_max}, expected {int(pid_max) + 1}" in check["msg"]
    assert "kernel.gpubring_no_such_sysctl is unknown to the running kernel" in check["msg"]
    assert "kernel.ostype" not in check["msg"]

    gone = {r["name"]: r for r in _host_results(result, "missing")}[check_name]
    assert gone.get("failed"), gone
    assert f"verify: {missing} cannot be read on localhost (no such file)" in gone["msg"], gone

    areas = [ln.split()[0] for ln in Path("/proc/swaps").read_text().splitlines()[1:] if ln.strip()]
    swap = {r["name"]: r for r in _host_results(result, "swap")}[check_name]
    assert bool(swap.get("failed")) == bool(areas), swap
    if areas:
        assert f"verify: swap is on on localhost ({', '.join(areas)})" in swap["msg"], swap
        assert "sysctls of" not in swap["msg"], swap


def test_a_node_whose_toolkit_the_operator_owns_schedules_no_host_toolkit_work(tmp_path: Path) -> None:
    """nvidia_container_toolkit on a GPU node whose toolkit the GPU Operator owns (the lab's, and every
    cluster that lets the operator install it): the host's repository, packages, drop-in, config and CDI
    steps are one skipped include (five skipped includes before), and the operator side reads the drop-in
    in one call (a stat and a slurp before). A real run of the role on localhost."""
    dropin = tmp_path / "99-nvidia.toml"
    dropin.write_text("# the GPU Operator's own drop-in\n")
    play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "name": "operator owns the toolkit",
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [
            {
                "name": "The toolkit role",
                "ansible.builtin.include_role": {"name": "gpubring.core.nvidia_container_toolkit"},
                "vars": {
                    "nvidia_container_toolkit_owner": "operator",
                    "nvidia_container_toolkit_version": "1.17.8",
                    "nvidia_container_toolkit_containerd_dropin": str(dropin),
                    "ansible_facts": {
                        "os_family": "Debian", "distribution": "Debian", "distribution_major_version": "12",
                        "distribution_version": "12.8", "distribution_release": "bookworm",
                        "architecture": "x86_64",
                    },
                },
            }
        ],
    }  # fmt: skip
    playbook = tmp_path / "toolkit.yml"
    playbook.write_text(yaml.safe_dump([play]))
    result = _run_json(playbook, tmp_path / "facts")
    seen = _results(result, "operator owns the toolkit")
    assert seen.get("Install and configure the toolkit on the host") == "skipped", seen
    assert "Configure NVIDIA's apt repository" not in seen and "Generate the CDI spec" not in seen, seen
    assert seen.get("Read the nvidia runtime drop-in") == "ok", seen
    # The operator's drop-in (no marker of the role) stays.
    assert seen.get("Remove the drop-in that this role wrote while the host owned the toolkit") == "skipped"
    assert dropin.read_text() == "# the GPU Operator's own drop-in\n"
    # 16 before (7 skipped: five includes of the host's steps), with a stat and a slurp; 11 now (3 skipped).
    assert len(seen) <= 11, seen


def _role_play(name: str, hosts: str, role: str, role_vars: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "hosts": hosts,
        "gather_facts": False,
        "ignore_errors": True,  # this machine is no converged node: count what runs, not its verdicts
        "roles": [{"role": f"gpubring.core.{role}", "vars": role_vars}],
    }


def test_preflight_verify_and_acceptance_schedule_few_results_per_host(tmp_path: Path) -> None:
    """preflight, the per-host verify and gpu_acceptance on localhost as a GPU node (issue 26 item 1):
    the steps every host runs are imported (an include is a result of its own per host), reads no module
    makes are one tagged shell call each (preflight's df, timedatectl and mountinfo; verify's containerd
    unit, plugins, config.toml and merged configuration; the acceptance tools), verdicts are computed in
    one task (preflight's NUMA warnings, verify's containerd check, each acceptance record). Before:
    preflight 25 results, verify 19, gpu_acceptance 40 and a loop of 6. preflight then: its time
    services read in its one shell call (a service_facts call before), its OS variables a dictionary
    (an include_vars), its checks, downloads and collision lines published in the task that checks (a
    set_fact each before), the warnings printed with the summary: 9; the summary printed by the
    assert that fails an unfit host (a debug and a fail task before): 8. verify imports its kernel checks:
    12; its drop-in, live sysctls and swap areas one read and one assert (two of each before): 10.
    gpu_acceptance: its health, kernel log, NVLink and PCIe reads one shell call (five tasks
    before), the NICs to measure a variable, the gate's outcomes one set_fact (one per outcome before),
    one assert for a failed check and for nothing measured (two before): 14; that assert shows the
    checks when it passes (a debug task before): 13."""
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "gpu_nodes": {"hosts": {"localhost": local}},
                        "control_plane": {"hosts": {"localhost": {}}},
                    }
                }
            }
        )
    )
    facts = {"name": "Facts", "ansible.builtin.import_tasks": str(FACTS_ONCE)}
    preflight = _role_play(
        "preflight", "all", "preflight",
        {"preflight_require_gpu": False, "preflight_disk_min_gib": 0, "preflight_check_downloads": False,
         "preflight_check_collisions": False},
    )  # fmt: skip
    plays = [
        {**preflight, "pre_tasks": [facts]},
        _role_play("verify", "all", "verify", {"verify_cluster": False}),
        _role_play(
            "acceptance", "gpu_nodes", "gpu_acceptance", {"gpu_acceptance_control_plane": "localhost"}
        ),
    ]
    playbook = tmp_path / "roles.yml"
    playbook.write_text(yaml.safe_dump(plays))
    done = ansible_playbook_json(inventory, playbook)
    result = json.loads(done.stdout)
    counts = {}
    for play in result["plays"]:
        ran = [item["hosts"]["localhost"] for item in play["tasks"] if "localhost" in item["hosts"]]
        assert not [r for r in ran if r.get("results")], "a task ran as a loop (one execution per item)"
        counts[play["play"]["name"]] = len(ran)
    seen = {name: [r["name"] for r in _host_results(result, name)] for name in counts}
    # The collision check's index of host names and addresses is one result per play (run_once, on its
    # first host: localhost here), not per host; the host's own results stay 8.
    index = "Index the host names and addresses of the hosts compared"
    assert seen["preflight"].count(index) == 1, seen["preflight"]
    # The download check is imported: off here, its one task is the one skipped result (an include of
    # it was a result of its own, and two results per host with the check on).
    assert "Check that every download of this run is reachable from the host" in seen["preflight"]
    assert "Check that every download of this run is reachable" not in seen["preflight"]
    assert counts["preflight"] - 1 <= 8, seen["preflight"]  # with the facts and the argument check; 25, 16, 9
    assert counts["verify"] <= 10, seen["verify"]  # 19 before (with the kernel checks localhost runs); 13, 12
    assert counts["acceptance"] <= 13, seen["acceptance"]  # 40 before, one of them a loop of 6; 23, 14
    # The GPU facts verify gathered (the play before, same host) are read, not gathered again; the
    # gpu_acceptance scenario (no verify before it) gathers them.
    acceptance = {r["name"]: r for r in _host_results(result, "acceptance")}
    assert acceptance["Gather the GPU, NVSwitch, RDMA NIC and NUMA facts"].get("skipped"), acceptance
    # Nothing measured here, and gpu_acceptance_fail_on_skipped_only is off: the one refusal passes (the
    # play ignores errors, so a failure would not stop it).
    refusal = acceptance["Fail the host when a check failed, or when nothing could be measured"]
    assert not refusal.get("failed") and not refusal.get("skipped"), refusal
    assert "Check containerd" in seen["verify"] and "Publish gpu_acceptance_result" in seen["acceptance"]
    # The acceptance records are still every check, each skipped here with its reason.
    published = next(
        r for r in _host_results(result, "acceptance") if r["name"] == "Publish gpu_acceptance_result"
    )
    checks = published["ansible_facts"]["gpu_acceptance_result"]["checks"]
    assert [c["name"] for c in checks] == [
        "dcgm_diag", "gpu_health", "gpu_xid", "nvlink", "nic_link", "pcie", "rdma_write_bw",
    ]  # fmt: skip
    assert all(c["status"] == "skipped" and c["reason"] for c in checks), checks


def _templated_defaults(options: dict[str, Any], where: str) -> list[str]:
    found = []
    for name, spec in options.items():
        if "{{" in json.dumps(spec.get("default")) or "{%" in json.dumps(spec.get("default")):
            found.append(f"{where}.{name}")
        found.extend(_templated_defaults(spec.get("options") or {}, f"{where}.{name}"))
    return found


def test_verify_spec_renders_nothing_per_host() -> None:
    """Ansible validates verify's 63 options on every host of the play, rendering the whole specification
    each time: a templated default there (a pin through gpubring_matrix) costs controller CPU per host and
    per run for nothing (the values come from defaults/main.yml). Those defaults are in defaults/main.yml
    only, as the role's other computed defaults are."""
    specs = yaml.safe_load(
        (REPO / "roles" / "verify" / "meta" / "argument_specs.yml").read_text(encoding="utf-8")
    )
    options = specs["argument_specs"]["main"]["options"]
    assert len(options) > 40
    assert _templated_defaults(options, "main") == []
    defaults = yaml.safe_load(
        (REPO / "roles" / "verify" / "defaults" / "main.yml").read_text(encoding="utf-8")
    )
    assert "gpubring_matrix.verify.cuda_image" in defaults["verify_cuda_image"]
