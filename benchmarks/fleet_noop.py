"""A no-op `gpubring up` over a fleet of inventory hosts: the lab's containers, each under several names.

    .venv/bin/python benchmarks/fleet_noop.py [--nodes 3] [--cpu-nodes 1] [--aliases 10] [--shards 1,2]
        [--distro debian12] [--forks N] [--lab-dir DIR] [--keep-lab | --converge-only] [--json out.json]

1. `gpubring lab up` (prefix gpubfleet, a temporary inventory folder unless --lab-dir names one): --nodes
   containers, one control plane, --cpu-nodes CPU-only workers, the rest GPU nodes; then one `gpubring
   up` on the lab's own inventory converges them (the first converge of a GPU node builds the NVIDIA
   driver with DKMS, minutes on 2 cores: hence few GPU nodes and CPU nodes beside them).
2. A fleet inventory derived from the lab's (write_fleet_inventory): every GPU and CPU node under
   --aliases names (`<node>-a00`, `<node>-a01`, ...), the control plane under 3 (a cluster has 1 or
   an odd number of them), each name in its node's groups. gpubring refuses two hosts on one address
   and port, so no name has an ansible_host: the fleet's ssh_config (`-F`, as benchmarks/check_scale.py
   does) maps each name to its container's address. Each name is its own SSH host and connection
   (Ansible's ControlPath hashes the name), as separate machines would be, and OpenSSH checks the key
   of the address and port, so the lab's known_hosts serves them all (host key checking stays on).
   preflight_check_collisions is off: the names of one container share its host name and address on
   purpose.
3. One untimed `gpubring up` of the fleet (it must change nothing: a changed task there is a role
   that templates from inventory_hostname and the script stops), then per --shards value a timed
   no-op `gpubring up` of the fleet: wall time, changed tasks (must be 0), controller CPU seconds per
   host, the busiest controller process and its share, how busy the machine's CPUs were, the nodes'
   CPU seconds. `gpubring lab down` at the end unless --keep-lab. The small fleet (--small names per
   container) gets its own untimed run first too: a host's record of its last host phase covers the
   inventory folder (hosts left as they are), so an inventory's first run goes through the host
   phase's roles and only the runs after it are no-ops.

What the aliases share, and what this does not measure:
- The host phase templates nothing from inventory_hostname (the node name is used by the cluster
  phase's kubeadm join and node labels, which a lab does not run); each alias therefore finds its
  container converged. The no-op run before the timed ones proves it (0 changed on every name).
- Each alias runs every task against the same container: apt/dpkg reads and their locks, package
  fact gathering, file checksums run K times on one container at the same moment. That contention
  is real load on the nodes' side (it shows in the nodes' CPU) that K separate machines would not
  have; it does not add controller CPU. The controller's cost per host is what scales with the fleet
  and is what this measures; the nodes' CPU is reported, not projected (real nodes have their own).
- The containers share this machine's cores with the controller, so wall time here is bounded by
  controller + nodes' CPU / cores; the projection (docs/fleet.md) uses the controller's CPU only.
- Reboots, DKMS builds and the cluster and platform phases are not in a no-op of the lab.

Controller CPU: the gpubring process and all its descendants. getrusage(RUSAGE_CHILDREN) counts each
descendant once its parent reaped it; /proc/<pid>/stat of every descendant is sampled every
--interval seconds (each pid's last utime+stime kept) for the per-process split and for the
processes that leave the tree before they end (SSH ControlPersist masters, re-parented to init):
those are added to the total. --shards N passes `--shards N` to `gpubring up` when its --help offers
it, else `-e gpubring_shards=N` when settings.yml declares gpubring_shards, else the row says
"unsharded" and measures one process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lab_noop import lab_cpu, must  # benchmarks/ beside this script

from gpubring.run.shards import CHECK_HOSTS_PER_SHARD, PARTS, SHARDED_PHASE

REPO = Path(__file__).resolve().parent.parent
PREFIX = "gpubfleet"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEFAULT_FORKS = 10  # gpubring up's --forks default
PLAYBOOK = "ansible-playboo"  # ansible-playbook's command name in /proc (15 characters)
# The parts of the phases as gpubring's sharded runs cut them (cli/gpubring/run/shards.py, PARTS): the
# playbooks run per slice of the hosts (preflight, host, verify_hosts) and those run once
# (preflight_collisions, verify_smoke, verify_fabric); a phase with no parts (cluster, platform) is one.
PHASES = ("preflight", "host", "cluster", "platform", "verify")
PER_SLICE = {stem: phase for phase, (per_slice, _) in PARTS.items() for stem in per_slice}
PART_PHASE = {
    **{phase: phase for phase in PHASES},
    **{stem: phase for phase, (per_slice, once) in PARTS.items() for stem in (*per_slice, *once)},
}


# ---------------------------------------------------------------------------------------------------
# The fleet inventory


def alias_names(node: str, aliases: int) -> list[str]:
    """The inventory names of one container: `<node>-a00` .. (two digits, DNS-label safe)."""
    if aliases < 1:
        raise ValueError(f"aliases: expected 1 or more, got {aliases}")
    width = max(2, len(str(aliases - 1)))
    return [f"{node}-a{i:0{width}d}" for i in range(aliases)]


def aliases_of(group: str, aliases: int) -> int:
    """How many names a container of this group gets: control planes 3 (1 below 3 aliases), since a
    cluster has 1 or an odd number of them (etcd's majority, checked by gpubring's validation); the
    GPU and CPU nodes `aliases`."""
    if group == "control_plane":
        return 3 if aliases >= 3 else 1
    return aliases


def alias_plan(lab_hosts: Mapping[str, Any], aliases: int) -> dict[str, list[str]]:
    """The alias names of each lab host ({lab host: [alias, ...]}), by the first group listing it."""
    plan: dict[str, list[str]] = {}
    for group, body in (lab_hosts["all"].get("children") or {}).items():
        for host in (body or {}).get("hosts") or {}:
            plan.setdefault(host, alias_names(host, aliases_of(group, aliases)))
    return plan


def fleet_hosts(
    lab_hosts: Mapping[str, Any], plan: Mapping[str, Sequence[str]], ssh_config: str
) -> dict[str, Any]:
    """hosts.yml of the fleet from the lab's: each lab host under its alias names (plan), in its groups,
    with its vars but no ansible_host: each name is its own SSH host name, which the fleet's ssh_config
    (`-F`, put before the lab's own SSH options) maps to the container's address. A lab host the plan
    leaves out is not in the fleet (node_add.py keeps its fresh nodes out until it adds one)."""
    root = lab_hosts["all"]
    children: dict[str, Any] = {}
    for group, body in (root.get("children") or {}).items():
        members: dict[str, Any] = {}
        for host, hostvars in ((body or {}).get("hosts") or {}).items():
            own = {k: v for k, v in (hostvars or {}).items() if k != "ansible_host"}
            for name in plan.get(host, ()):
                members[name] = dict(own)
        children[group] = {"hosts": members}
    top = dict(root.get("vars") or {})
    top["ansible_ssh_common_args"] = f"-F {ssh_config} {top.get('ansible_ssh_common_args', '')}".strip()
    return {"all": {"vars": top, "children": children}}


def ssh_config_lines(lab_hosts: Mapping[str, Any], plan: Mapping[str, Sequence[str]]) -> list[str]:
    """The fleet's ssh_config: `Host <alias>` / `HostName <its container's address>` per alias. OpenSSH
    then checks the host key of HostName and port, so the lab's known_hosts serves every alias."""
    address: dict[str, str] = {}
    for body in (lab_hosts["all"].get("children") or {}).values():
        for host, hostvars in ((body or {}).get("hosts") or {}).items():
            address.setdefault(host, str((hostvars or {}).get("ansible_host", host)))
    return [
        line
        for host, names in plan.items()
        for n in names
        for line in (f"Host {n}", f"  HostName {address[host]}")
    ]


FLEET_VARS = {
    # The aliases of one container share its host name and default address on purpose.
    "preflight_check_collisions": False,
    # One container answers for up to --aliases machines on a loaded machine: the SSH connect timeout
    # (10 s by default) is no measure of the controller.
    "ansible_ssh_timeout": 60,
}


def write_fleet_inventory(lab_dir: Path, fleet_dir: Path, plan: Mapping[str, Sequence[str]]) -> list[str]:
    """The fleet's inventory folder from the lab's: hosts.yml, ssh_config, group_vars (copied, plus
    fleet.yml), host_vars per alias; returns the fleet's host names."""
    lab_hosts = yaml.safe_load((lab_dir / "hosts.yml").read_text(encoding="utf-8"))
    if fleet_dir.exists():
        shutil.rmtree(fleet_dir)
    fleet_dir.mkdir(parents=True)
    config = fleet_dir / "ssh_config"
    config.write_text("\n".join(ssh_config_lines(lab_hosts, plan)) + "\n", encoding="utf-8")
    hosts = fleet_hosts(lab_hosts, plan, shlex.quote(str(config.resolve())))
    (fleet_dir / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False), encoding="utf-8")
    if (lab_dir / "group_vars").is_dir():
        shutil.copytree(lab_dir / "group_vars", fleet_dir / "group_vars")
    all_vars = fleet_dir / "group_vars" / "all"
    all_vars.mkdir(parents=True, exist_ok=True)
    (all_vars / "fleet.yml").write_text(
        "# benchmarks/fleet_noop.py: aliases of one container share its name and address.\n---\n"
        + yaml.safe_dump(FLEET_VARS),
        encoding="utf-8",
    )
    for folder in sorted((lab_dir / "host_vars").glob("*")) if (lab_dir / "host_vars").is_dir() else []:
        for name in plan.get(folder.name, []):
            shutil.copytree(folder, fleet_dir / "host_vars" / name)
    return sorted({n for g in hosts["all"]["children"].values() for n in g["hosts"]})


# ---------------------------------------------------------------------------------------------------
# CPU accounting from /proc


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    ppid: int
    cpu_ticks: int  # utime + stime
    start: int  # starttime, in ticks since boot: tells a reused pid from the first


def parse_stat(text: str) -> ProcStat:
    """One /proc/<pid>/stat line (the command name may hold spaces and parentheses)."""
    head, _, tail = text.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    fields = tail.split()
    # fields[0] is the state (field 3); utime, stime are fields 14, 15; starttime field 22.
    return ProcStat(int(pid_text), comm, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19]))


def read_stats(proc: Path) -> dict[int, ProcStat]:
    """Every process's stat under a /proc tree (processes gone meanwhile are left out)."""
    out: dict[int, ProcStat] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            out[int(entry.name)] = parse_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
    return out


def read_cmdline(proc: Path, pid: int) -> str:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def cpu_times(proc: Path = Path("/proc")) -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat's first line."""
    fields = [int(v) for v in (proc / "stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """How busy the CPUs were between two cpu_times() readings (0..1)."""
    return (after[0] - before[0]) / max(after[1] - before[1], 1)


@dataclass
class Tracked:
    stat: ProcStat
    cmdline: str
    seen_at: float = 0.0  # time.monotonic() of its first sample
    orphaned: bool = False  # seen with a parent outside the tree: its parent never reaps it for us


@dataclass
class TreeSampler:
    """The CPU of a process tree, sampled: each descendant's last utime+stime, by pid and start time."""

    root: int
    proc: Path = Path("/proc")
    seen: dict[tuple[int, int], Tracked] = field(default_factory=dict)

    def sample(self, now: float = 0.0) -> None:
        stats = read_stats(self.proc)
        tree = {self.root}
        children: dict[int, list[int]] = {}
        for st in stats.values():
            children.setdefault(st.ppid, []).append(st.pid)
        todo = [self.root]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in tree:
                    tree.add(child)
                    todo.append(child)
        for pid, st in stats.items():
            key = (pid, st.start)
            known = self.seen.get(key)
            if pid in tree:
                if known is None:
                    self.seen[key] = Tracked(st, read_cmdline(self.proc, pid), now)
                else:
                    known.stat = st
            elif known is not None:
                known.stat = st
                known.orphaned = True

    def seconds(self, key: tuple[int, int]) -> float:
        return self.seen[key].stat.cpu_ticks / CLK_TCK

    def orphaned_seconds(self) -> float:
        """CPU of descendants that left the tree (re-parented): no getrusage of ours counts them."""
        return sum(t.stat.cpu_ticks for t in self.seen.values() if t.orphaned) / CLK_TCK

    def busiest(self, comm: str | None = None) -> tuple[str, float]:
        """The process (of this command name, when given) with the most CPU: (its command line, cut
        short; its CPU seconds)."""
        pool = [t for t in self.seen.values() if comm is None or t.stat.comm == comm]
        if not pool:
            return "", 0.0
        top = max(pool, key=lambda t: t.stat.cpu_ticks)
        return top.cmdline[:100] or top.stat.comm, top.stat.cpu_ticks / CLK_TCK

    def root_seconds(self) -> float:
        """The root process's own CPU seconds (as last sampled)."""
        mine = [t for (pid, _), t in self.seen.items() if pid == self.root]
        return max((t.stat.cpu_ticks for t in mine), default=0) / CLK_TCK

    def first_seen(self, comm: str) -> float | None:
        """When a process of this command name was first sampled (time.monotonic()), None if never."""
        return min((t.seen_at for t in self.seen.values() if t.stat.comm == comm), default=None)

    def segments(self, comm: str) -> list[dict[str, Any]]:
        """The processes of this command name grouped under their main process (the one whose parent
        is another command: ansible-playbook's workers and helpers are its forks): per main, its
        playbook (the last `.yml` of its command line), its busiest process's and all their CPU."""
        by_pid = {pid: t for (pid, _), t in self.seen.items()}
        groups: dict[int, dict[str, Any]] = {}
        for t in self.seen.values():
            if t.stat.comm != comm:
                continue
            main = t
            while (parent := by_pid.get(main.stat.ppid)) is not None and parent.stat.comm == comm:
                main = parent
            playbook = next((w for w in reversed(main.cmdline.split()) if w.endswith(".yml")), "?")
            group = groups.setdefault(main.stat.pid, {"playbook": playbook, "busiest_s": 0.0, "total_s": 0.0})
            seconds = t.stat.cpu_ticks / CLK_TCK
            group["busiest_s"] = max(group["busiest_s"], seconds)
            group["total_s"] += seconds
        return list(groups.values())

    def by_command(self) -> dict[str, float]:
        """CPU seconds per command name (as sampled: short-lived forks are under-counted)."""
        out: dict[str, float] = {}
        for t in self.seen.values():
            out[t.stat.comm] = out.get(t.stat.comm, 0.0) + t.stat.cpu_ticks / CLK_TCK
        return out


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------------------------------------
# The projection


@dataclass(frozen=True)
class Cost:
    """What the projection starts from, all measured by the timed runs (docs/fleet.md)."""

    per_host_cpu: float  # controller CPU-seconds per host (every process of the tree, one shard)
    root_per_host: float  # gpubring's own process's (one process however many shards)
    once_per_host: float  # the busiest process of each step that runs once (one process), added up
    host_per_host: float  # the busiest process of the host phase's step, at `measured_shards` shards
    checks_per_host: float  # preflight's and verify's sharded steps: their busiest processes, added up
    measured_shards: int
    per_process_cpu: float  # controller CPU-seconds each ansible-playbook process beyond the first adds
    startup_s: float  # from the command's start to its first ansible-playbook process
    round_s: float  # seconds per task when every host is worked at once (one fork round)
    tasks_once: int  # task results per host in the parts that run once
    tasks_host: int  # task results per host in the host phase (sharded one per core)
    tasks_checks: int  # task results per host in preflight's and verify's per-slice parts


@dataclass(frozen=True)
class Projection:
    hosts: int
    cores: int
    shards: int
    check_shards: int  # preflight's and verify's shards (gpubring_shards auto: one per 8 hosts)
    forks: int
    processes: int  # ansible-playbook processes of the run (main ones: one per shard and once-only step)
    cpu_bound_s: float  # all controller CPU spread over the cores
    serial_bound_s: float  # the busiest single process of each step, one after the other, one core each
    latency_bound_s: float  # task rounds: each task waits for ceil(hosts / (its shards x forks)) rounds
    wall_s: float  # the terms overlapping fully (the longest of them): the low end
    wall_upper_s: float  # the busiest process's path and the task rounds not overlapping: the high end


def auto_check_shards(hosts: int, shards: int) -> int:
    """Preflight's and verify's shards under gpubring_shards auto with `shards` for the host phase: at
    most one per CHECK_HOSTS_PER_SHARD hosts, one process below two shards' worth (shards.plan)."""
    checks = min(shards, hosts // CHECK_HOSTS_PER_SHARD)
    return checks if checks >= 2 else 1


def project(
    cost: Cost, *, hosts: int, cores: int, shards: int, forks: int, check_shards: int | None = None
) -> Projection:
    """Wall time of a no-op over `hosts` on a `cores`-core controller, the host phase in `shards`
    ansible-playbook processes and preflight's and verify's per-host parts in `check_shards` (default:
    what gpubring_shards auto gives them), `forks` forks each: the start-up, plus the longest of
    - all controller CPU spread over the cores: the one process's cost per host, plus what each
      further ansible-playbook process costs (its start, inventory and variables: per_process_cpu);
    - the busiest process's path, on one core: gpubring's own (concurrent with the rest), or the steps
      one after the other: each once-only step's process, and each sharded step's busiest process,
      which carries measured_shards / its shards of what it carried when measured;
    - the task rounds: each task waits for ceil(hosts / forks) rounds in a part that runs once,
      ceil(hosts / (shards x forks)) in a sharded one.
    The nodes' CPU is their own. The high end adds the last two instead (no overlap at all)."""
    checks = auto_check_shards(hosts, shards) if check_shards is None else check_shards
    m = cost.measured_shards
    processes = playbook_processes(shards, checks)
    cpu_bound = (hosts * cost.per_host_cpu + (processes - 1) * cost.per_process_cpu) / cores
    split = cost.host_per_host * m / max(1, shards) + cost.checks_per_host * m / max(1, checks)
    serial = hosts * max(cost.root_per_host, cost.once_per_host + split)
    latency = cost.round_s * (
        cost.tasks_once * -(-hosts // max(1, forks))
        + cost.tasks_host * -(-hosts // max(1, shards * forks))
        + cost.tasks_checks * -(-hosts // max(1, checks * forks))
    )
    wall = cost.startup_s + max(cpu_bound, serial, latency)
    upper = cost.startup_s + max(cpu_bound, serial + latency)
    return Projection(hosts, cores, shards, checks, forks, processes, cpu_bound, serial, latency, wall, upper)


def playbook_processes(shards: int, check_shards: int) -> int:
    """The main ansible-playbook processes of a no-op of preflight, host and verify: one when nothing
    is sharded; else the host phase's shards, preflight's and verify's (one process each when they are
    not split: their whole phase) and one for verify's once-only parts when verify is split."""
    if shards < 2 and check_shards < 2:
        return 1
    if check_shards < 2:
        return shards + 2
    return shards + 2 * check_shards + 1


def split_costs(row: Mapping[str, Any]) -> tuple[float, float, float]:
    """(once, host, checks) CPU-seconds per host of a sharded row's busiest processes. The processes
    are grouped by the step's playbook (run-N.yml): a step run by one main process runs once (their
    busiest processes add up: the steps run one after the other); a step run by several is sharded:
    the host phase's step (the one importing host.yml) or a step of preflight's or verify's per-slice
    parts, each counted by its busiest shard. A sharded step whose parts were not recorded counts as
    the host phase's (rows measured before the parts were)."""
    steps: dict[str, list[dict[str, Any]]] = {}
    for seg in row["segments"]:
        steps.setdefault(seg["playbook"], []).append(seg)
    once = host = checks = 0.0
    for step in steps.values():
        busiest = max(s["busiest_s"] for s in step)
        parts = step[0].get("parts") or []
        if len(step) == 1:
            once += busiest
        elif SHARDED_PHASE in parts or not parts:
            host += busiest
        else:
            checks += busiest
    return once / row["hosts"], host / row["hosts"], checks / row["hosts"]


# ---------------------------------------------------------------------------------------------------
# Runs


def gpubring_cmd(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "gpubring", *map(str, args)]


def gpubring(*args: str | Path, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        gpubring_cmd(*args), capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO, env=env
    )


def shard_args(shards: int) -> tuple[list[str], str]:
    """How to ask `gpubring up` for `shards` processes, and how the row names it."""
    if shards <= 0:
        return [], "default"
    helptext = gpubring("up", "--help").stdout
    if "--shards" in helptext:
        return ["--shards", str(shards)], f"--shards {shards}"
    settings = (REPO / "settings.yml").read_text(encoding="utf-8")
    if "gpubring_shards:" in settings:
        return ["-e", f"gpubring_shards={shards}"], f"gpubring_shards={shards}"
    return [], "unsharded (gpubring up has no shards yet)"


SSHD_DROP_IN = "/etc/ssh/sshd_config.d/gpubfleet.conf"


def sshd_for_aliases(prefix: str) -> None:
    """Let each container's sshd take its aliases' connections at once: one sshd stands for up to
    --aliases machines, and its default MaxStartups (10:30:100) drops connections beyond 10 that are
    not yet logged in (`kex_exchange_identification: Connection closed by remote host`), which K
    separate sshd would never see. A drop-in of the test container only; no role manages sshd."""
    ids = subprocess.run(
        ["docker", "ps", "--quiet", "--filter", f"label=io.gpubring.lab.prefix={prefix}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    script = f"printf 'MaxStartups 200\\nMaxSessions 200\\n' > {SSHD_DROP_IN} && systemctl reload ssh"
    for cid in ids:
        subprocess.run(["docker", "exec", cid, "sh", "-c", script], check=True, capture_output=True)


def report_stats(path: Path) -> dict[str, dict[str, int]]:
    data = json.loads(path.read_text())
    return {h: {k: int(v) for k, v in c.items()} for h, c in data["stats"].items()}


def play_phases(folder: Path) -> dict[str, str]:
    """{play name: part} of the phase playbooks in a folder: each part is a playbook of PART_PHASE
    (preflight.yml, preflight_collisions.yml, host.yml, verify_hosts.yml, ...), named without .yml.
    Other playbooks (node_add.yml, upgrade.yml, site.yml's imports) are not read: a play of theirs
    with a phase's play name must not take it over."""
    out: dict[str, str] = {}
    for stem in PART_PHASE:
        playbook = folder / f"{stem}.yml"
        plays = yaml.safe_load(playbook.read_text(encoding="utf-8")) if playbook.is_file() else None
        for play in plays if isinstance(plays, list) else []:
            if isinstance(play, dict) and isinstance(play.get("name"), str) and "hosts" in play:
                out.setdefault(play["name"], stem)
    return out


def step_parts(playbook: Path, run_folder: Path | None = None) -> list[str]:
    """The phase parts a run's generated playbook imports (run-N.yml of a sharded run's step, or the
    one process's playbook; a name without a folder is looked for in the run folder's project/, where
    ansible-runner starts ansible-playbook): the imported playbooks' names without .yml, in order; []
    when the file is gone or imports nothing."""
    if not playbook.is_absolute() and run_folder is not None:
        playbook = run_folder / "project" / playbook
    try:
        entries = yaml.safe_load(playbook.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []
    key = "ansible.builtin.import_playbook"
    listed = entries if isinstance(entries, list) else []
    return [Path(str(e[key])).stem for e in listed if isinstance(e, dict) and key in e]


def run_folder(report: Path) -> Path | None:
    """The run folder a run report names (None when it names none)."""
    folder = json.loads(report.read_text()).get("run_folder") if report.is_file() else None
    return Path(folder) if folder else None


def phase_tasks(report: Path) -> dict[str, int]:
    """Task results per host and part (the busiest host's), from the run's ansible-runner job events
    (every shard's artifacts). An event names its play; the play's part is the phase playbook that
    holds a play of that name (play_phases; the event's own playbook is the run's generated one)."""
    phases = play_phases(REPO / "playbooks")
    folder = Path(json.loads(report.read_text()).get("run_folder") or "")
    counts: dict[tuple[str, str], int] = {}
    for event in folder.glob("artifacts/*/job_events/*.json") if folder.is_dir() else []:
        try:
            data = json.loads(event.read_text())
        except (OSError, ValueError):
            continue
        if data.get("event") not in {
            "runner_on_ok",
            "runner_on_failed",
            "runner_on_skipped",
            "runner_on_unreachable",
        }:
            continue
        info = data.get("event_data") or {}
        phase = phases.get(str(info.get("play")), Path(str(info.get("playbook", "?"))).stem)
        key = (phase, str(info.get("host", "?")))
        counts[key] = counts.get(key, 0) + 1
    out: dict[str, int] = {}
    for (phase, _), n in counts.items():
        out[phase] = max(out.get(phase, 0), n)
    return out


def timed_run(
    inventory: Path, extra: Sequence[str], report: Path, interval: float, prefix: str = PREFIX
) -> dict[str, Any]:
    """One `gpubring up` with the controller's process tree sampled; its figures."""
    env = {**os.environ, "NO_COLOR": "1"}
    nodes0 = lab_cpu(prefix)
    cpu0 = cpu_times()
    rusage0 = children_cpu()
    start = time.monotonic()
    proc = subprocess.Popen(
        gpubring_cmd("up", inventory, *extra, "--json", report),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, env=env, text=True,
    )  # fmt: skip
    sampler = TreeSampler(proc.pid)
    out_chunks: list[str] = []
    # The output is read by a thread so the pipe never fills while the main loop samples.
    reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read() if proc.stdout else ""))
    reader.start()
    while proc.poll() is None:
        sampler.sample(time.monotonic())
        time.sleep(interval)
    wall = time.monotonic() - start
    reader.join()
    rusage1 = children_cpu()
    cpu1 = cpu_times()
    sampler.sample(time.monotonic())  # the re-parented ones (SSH masters) still alive: their CPU so far
    nodes1 = lab_cpu(prefix)
    if proc.returncode != 0:
        tail = "\n".join("".join(out_chunks).strip().splitlines()[-40:])
        raise SystemExit(f"gpubring up {' '.join(extra)} failed (exit {proc.returncode}):\n{tail}")
    stats = report_stats(report)
    busiest_cmd, busiest_s = sampler.busiest()
    _, playbook_s = sampler.busiest(PLAYBOOK)
    first = sampler.first_seen(PLAYBOOK)
    controller = (rusage1 - rusage0) + sampler.orphaned_seconds()
    return {
        "hosts": len(stats),
        "wall_s": wall,
        "changed": sum(s.get("changed", 0) for s in stats.values()),
        "tasks_per_host": max(sum(s.get(k, 0) for k in ("ok", "failed", "skipped", "unreachable"))
                              for s in stats.values()),
        "controller_cpu_s": controller,
        "orphaned_cpu_s": sampler.orphaned_seconds(),
        "busiest": busiest_cmd,
        "busiest_cpu_s": busiest_s,
        "playbook_cpu_s": playbook_s,  # the busiest ansible-playbook process
        "root_cpu_s": sampler.root_seconds(),  # gpubring's own process
        "startup_s": None if first is None else first - start,
        "by_command": sampler.by_command(),
        "segments": [{**seg, "parts": step_parts(Path(seg["playbook"]), run_folder(report))}
                     for seg in sampler.segments(PLAYBOOK)],
        "phase_tasks": phase_tasks(report),
        "cpu_busy": busy_share(cpu0, cpu1),
        "nodes_cpu_s": None if nodes0 is None or nodes1 is None else nodes1 - nodes0,
    }  # fmt: skip


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3, help="lab containers (default 3)")
    parser.add_argument("--cpu-nodes", type=int, default=1, help="of them CPU-only workers (default 1)")
    parser.add_argument("--aliases", type=int, default=10, help="inventory names per container (10)")
    parser.add_argument("--shards", default="1,2", help="shard counts to time, comma-separated (1,2)")
    parser.add_argument("--distro", default="debian12", choices=("debian12", "debian13"))
    parser.add_argument("--forks", type=int, default=None, help="ansible forks (default: gpubring up's)")
    parser.add_argument("--interval", type=float, default=0.2, help="/proc sampling period (0.2 s)")
    parser.add_argument("--small", type=int, default=1, help="also time this many aliases (fixed cost)")
    parser.add_argument("--lab-dir", type=Path, default=None, help="the lab's inventory folder (kept)")
    parser.add_argument("--keep-lab", action="store_true", help="leave the lab up afterwards")
    parser.add_argument(
        "--converge-only", action="store_true", help="lab up and converge, then stop (the lab is kept)"
    )
    parser.add_argument(
        "--reuse-lab",
        action="store_true",
        help="the lab in --lab-dir is converged and its aliases proven: no converge, no untimed run",
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="the figures, saved after each row (default: work folder)"
    )
    parser.add_argument("--prefix", default=PREFIX, help=f"the lab's container prefix ({PREFIX})")
    parser.add_argument(
        "--summarise",
        type=Path,
        default=None,
        metavar="JSON",
        help="print the table, projection and goals from a saved --json (no lab, no run)",
    )
    return parser.parse_args()


def save_rows(path: Path, rows: Sequence[Mapping[str, Any]], aliases: int, forks: int, done: bool) -> None:
    """The rows measured so far, written at once (a file beside, then renamed): a run that dies later
    (killed with the session that started it, as the two-shard row of the first 23-host run was, mid
    verify) loses no row, and `--summarise` prints the table and projection from them."""
    tmp = path.with_name(path.name + ".tmp")
    payload = {"aliases": aliases, "forks": forks, "complete": done, "rows": list(rows)}
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def load_rows(path: Path) -> tuple[list[dict[str, Any]], int, int]:
    """(rows, aliases, forks) of a file save_rows wrote. A process group saved without the parts of its
    step (a row measured before they were recorded) gets them from its step's playbook when that is
    still on disk (the run folder lives in the fleet's inventory folder)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = list(data["rows"])
    for row in rows:
        for seg in row.get("segments") or []:
            if "parts" not in seg and seg.get("playbook", "?") != "?":
                seg["parts"] = step_parts(Path(seg["playbook"]))
    return rows, int(data["aliases"]), int(data["forks"])


def _stop(signum: int, _frame: object) -> None:
    # SIGTERM or SIGHUP (the terminal or session gone): unwind, so that the lab goes down and the rows
    # measured so far are summarised; SIGKILL cannot be caught, save_rows covers it.
    raise SystemExit(f"stopped by signal {signal.Signals(signum).name}")


def main() -> None:
    args = arguments()
    fork_count = args.forks or DEFAULT_FORKS
    if args.summarise:
        saved, aliases, fork_count = load_rows(args.summarise)
        summarise(saved, aliases, fork_count, None)
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    work = Path(tempfile.mkdtemp(prefix="gpubring-fleet-"))
    out = args.json or work / "fleet.json"
    print(f"figures: {out} (saved after each row; --summarise {out} prints them again)", flush=True)
    lab_dir = args.lab_dir or work / "lab"
    lab = ("--prefix", args.prefix, "--inventory-dir", lab_dir)
    rows: list[dict[str, Any]] = []
    done = False
    try:
        done = measure(args, work, lab_dir, out, rows)
    finally:
        if not (args.keep_lab or args.converge_only):
            gpubring("lab", "down", *lab, timeout=600)
        if rows:
            save_rows(out, rows, args.aliases, fork_count, done=done)
            if not done:
                print(f"\nthe run stopped early: the rows measured so far ({out})", flush=True)
            summarise(rows, args.aliases, fork_count, out)


def measure(
    args: argparse.Namespace, work: Path, lab_dir: Path, out: Path, rows: list[dict[str, Any]]
) -> bool:
    """Lab up, converge, the untimed and the timed runs; each row appended to `rows` and saved to `out`
    as soon as measured. True when every asked row was measured."""
    shard_counts = [int(s) for s in args.shards.split(",") if s.strip()]
    forks = ["--forks", str(args.forks)] if args.forks else []
    lab = ("--prefix", args.prefix, "--inventory-dir", lab_dir)
    shape = ("--nodes", str(args.nodes), "--cpu-nodes", str(args.cpu_nodes), "--distro", args.distro)
    must(gpubring("lab", "up", *shape, *lab), "lab up")
    sshd_for_aliases(args.prefix)
    if not args.reuse_lab:
        start = time.monotonic()
        must(gpubring("up", lab_dir, *forks, "--json", work / "converge.json"), "converging run")
        print(f"lab of {args.nodes} node(s) converged in {time.monotonic() - start:.0f} s", flush=True)
    if args.converge_only:
        return True
    lab_hosts = yaml.safe_load((lab_dir / "hosts.yml").read_text(encoding="utf-8"))
    # The full fleet first: its untimed run proves every alias a no-op; the small fleet's names
    # are a subset of it, timed once for the start-up and the time per task round.
    sizes = [args.aliases, *([args.small] if 0 < args.small < args.aliases else [])]
    for aliases in sizes:
        fleet = work / f"fleet{aliases}"
        plan = alias_plan(lab_hosts, aliases)
        names = write_fleet_inventory(lab_dir, fleet, plan)
        # Untimed first: it proves the aliases equivalent, and the inventory folder is part of what a
        # host's record of its last host phase covers (hosts left as they are): an inventory's first
        # run goes through the host phase's roles, its later runs are the no-op measured.
        if not args.reuse_lab:
            warm = timed_run(fleet, forks, work / f"warm{aliases}.json", args.interval, args.prefix)
            print(
                f"{len(names)} hosts ({aliases} alias(es) per node): untimed run {warm['wall_s']:.0f} s, "
                f"{warm['changed']} changed",
                flush=True,
            )
            if warm["changed"]:
                raise SystemExit("the aliases are not equivalent: the first fleet run changed tasks")
        for shards in shard_counts if aliases == args.aliases else [shard_counts[0]]:
            extra, label = shard_args(shards)
            if shards > 1 and not extra:
                print(f"{shards} shards: skipped, {label}", flush=True)
                continue
            row = timed_run(fleet, [*forks, *extra], work / f"noop{aliases}-{shards}.json",
                            args.interval, args.prefix)  # fmt: skip
            row.update(aliases=aliases, shards=shards, shard_label=label)
            rows.append(row)
            save_rows(out, rows, args.aliases, args.forks or DEFAULT_FORKS, done=False)
            print(json.dumps({k: v for k, v in row.items() if k != "by_command"}), flush=True)
            if row["changed"]:
                raise SystemExit(f"the no-op changed {row['changed']} task(s)")
    return True


def table_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rows as a Markdown table (the README's figures)."""
    lines = [
        "| hosts | shards | no-op (s) | changed | tasks/host | controller CPU/host (s) "
        "| busiest process CPU/host (s) | its share | gpubring's own CPU/host (s) | CPUs busy "
        "| nodes' CPU (s) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        nodes = "n/a" if r["nodes_cpu_s"] is None else f"{r['nodes_cpu_s']:.0f}"
        lines.append(
            f"| {r['hosts']} | {r['shard_label']} | {r['wall_s']:.1f} | {r['changed']} | "
            f"{r['tasks_per_host']} | "
            f"{r['controller_cpu_s'] / r['hosts']:.2f} | {r['busiest_cpu_s'] / r['hosts']:.2f} | "
            f"{r['busiest_cpu_s'] / r['controller_cpu_s']:.0%} | {r['root_cpu_s'] / r['hosts']:.2f} | "
            f"{r['cpu_busy']:.0%} | {nodes} |"
        )
    return lines


def measured_cost(rows: Sequence[Mapping[str, Any]], aliases: int, forks: int = DEFAULT_FORKS) -> Cost | None:
    """What the projection starts from (docs/fleet.md): the full fleet's one-shard row for the CPU per
    host and the task results per part, its first sharded row for the split of the busiest process,
    the small fleet's row (else the full fleet's, whose hosts took ceil(hosts / forks) rounds per task)
    for the start-up and a task round (its wall time over its own task results). None without a row of
    the full fleet."""
    big = [r for r in rows if r["aliases"] == aliases]
    small = [r for r in rows if r["aliases"] != aliases]
    if not big:
        return None
    one = big[0]
    sharded = [r for r in big if r["shards"] > 1]
    base = small[0] if small else one
    # The task results of the no-op: the full fleet's one-shard row's (the small fleet's inventory is
    # another folder, so a lab measured before its untimed run went through the host phase's roles).
    tasks = one["phase_tasks"] or {"?": one["tasks_per_host"]}
    base_tasks = sum(base["phase_tasks"].values()) or base["tasks_per_host"]
    if sharded:
        once, host, checks = split_costs(sharded[0])
        measured = int(sharded[0]["shards"])
        kinds = {part: task_kind(part) for part in tasks}
        # what the sharded row's extra processes cost beyond the one-shard row's (same hosts)
        extra = len(sharded[0]["segments"]) - max(1, len(one["segments"]))
        more = sharded[0]["controller_cpu_s"] - one["controller_cpu_s"]
        per_process = max(0.0, more / extra) if extra > 0 else 0.0
    else:  # nothing measured of shards: the one process's busiest, every part once
        once, host, checks, measured = one["busiest_cpu_s"] / one["hosts"], 0.0, 0.0, 1
        per_process = 0.0
        kinds = {part: "once" for part in tasks}
    startup = base["startup_s"] or 0.0
    return Cost(
        per_host_cpu=one["controller_cpu_s"] / one["hosts"],
        root_per_host=max(r["root_cpu_s"] / r["hosts"] for r in big),
        once_per_host=once,
        host_per_host=host,
        checks_per_host=checks,
        measured_shards=measured,
        per_process_cpu=per_process,
        startup_s=startup,
        round_s=(base["wall_s"] - startup) / max(1, base_tasks * -(-base["hosts"] // max(1, forks))),
        tasks_once=sum(n for p, n in tasks.items() if kinds[p] == "once"),
        tasks_host=sum(n for p, n in tasks.items() if kinds[p] == "host"),
        tasks_checks=sum(n for p, n in tasks.items() if kinds[p] == "checks"),
    )


def task_kind(part: str) -> str:
    """How a sharded run runs a part's tasks: "host" (the host phase, one shard per core), "checks"
    (preflight's and verify's per-slice parts) or "once"."""
    if part not in PER_SLICE:
        return "once"
    return "host" if PER_SLICE[part] == SHARDED_PHASE else "checks"


def projections_of(cost: Cost, forks: int, cores: int = 16) -> list[Projection]:
    """1, 100 and 1,000 hosts on `cores` cores, one shard per core (gpubring_shards auto) up to the
    hosts, at the measured forks and at 50."""
    return [
        project(cost, hosts=n, cores=cores, shards=min(cores, n), forks=f)
        for n in (1, 100, 1000)
        for f in sorted({forks, 50})
    ]


def _verdict(low: float, high: float, goal: float) -> str:
    if high <= goal:
        return "met"
    if low > goal:
        return "not met"
    return "open (the goal lies inside the projected range)"


# The goals of issue 26, measured by this benchmark: (hosts projected, seconds at most).
WALL_GOALS = ((1, 10.0), (100, 120.0), (1000, 600.0))


def goal_lines(
    rows: Sequence[Mapping[str, Any]], aliases: int, projections: Sequence[Projection], forks: int
) -> list[str]:
    """Each goal of issue 26 this benchmark measures, with the figure and met / not met."""
    big = [r for r in rows if r["aliases"] == aliases]
    if not big:
        return []
    one = big[0]
    per_host = one["controller_cpu_s"] / one["hosts"]
    lines = [
        f"controller CPU per host per no-op {per_host:.2f} s (goal <= 2 s): "
        + ("met" if per_host <= 2.0 else "not met")
    ]
    sharded = [r for r in big if r["shards"] > 1]
    if sharded:
        r = sharded[0]
        ratio = (r["busiest_cpu_s"] / r["hosts"]) / (one["busiest_cpu_s"] / one["hosts"])
        lines.append(
            f"{r['shard_label']}: the busiest process carries {ratio:.0%} of the CPU-seconds per host of "
            f"the busiest with one shard (goal <= 55 %): {'met' if ratio <= 0.55 else 'not met'}; CPUs "
            f"{r['cpu_busy']:.0%} busy (goal >= 90 %): {'met' if r['cpu_busy'] >= 0.90 else 'not met'}"
        )
    else:
        lines.append("shards: no sharded row measured (goals <= 55 % and >= 90 % busy: not measured)")
    for hosts, goal in WALL_GOALS:
        for p in projections:
            if p.hosts == hosts and p.forks == forks:
                verdict = _verdict(p.wall_s, p.wall_upper_s, goal)
                lines.append(
                    f"projected {hosts} host(s) on {p.cores} cores, forks {p.forks}: {p.wall_s:.0f}-"
                    f"{p.wall_upper_s:.0f} s (goal <= {goal:.0f} s): {verdict}"
                )
    return lines


def summarise(rows: list[dict[str, Any]], aliases: int, forks: int, out: Path | None) -> None:
    """Print the table, the measured cost, the projection and the goals; add the last three to `out`."""
    print()
    print("\n".join(table_lines(rows)))
    cost = measured_cost(rows, aliases, forks)
    if cost is None:
        print(f"no row of the full fleet ({aliases} aliases): no projection")
        return
    for r in rows:
        parts = ", ".join(f"{part} {n}" for part, n in r["phase_tasks"].items())
        print(f"task results per host, {r['hosts']} hosts {r['shard_label']}: {parts or 'not recorded'}")
    print(f"\nmeasured: {cost}")
    projections = projections_of(cost, forks)
    for p in projections:
        print(
            f"projected {p.hosts} host(s) on {p.cores} cores, {p.shards} shard(s) of {p.forks} forks "
            f"(preflight and verify {p.check_shards}): "
            f"{p.wall_s:.0f}-{p.wall_upper_s:.0f} s (start-up {cost.startup_s:.0f} s; CPU over cores "
            f"{p.cpu_bound_s:.0f} s, busiest process path {p.serial_bound_s:.0f} s, task rounds "
            f"{p.latency_bound_s:.0f} s)"
        )
    print("\ngoals (issue 26):")
    for line in goal_lines(rows, aliases, projections, forks):
        print(f"- {line}")
    if out:
        payload = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
        payload.update(cost=cost.__dict__, projections=[p.__dict__ for p in projections])
        out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
