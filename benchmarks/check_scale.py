"""Time `gpubring check` (paramiko) against the same probe through Ansible itself, over N host aliases.

Usage: .venv/bin/python benchmarks/check_scale.py [--hosts 50] [--servers 3] [--runs 3] [--lab DIR]
       [--only TEXT]

The question (issue 20 item 3): should `check` probe through Ansible's own connection (a probe play
through the runner) instead of its own paramiko stack? Target: `check` of 50 hosts under 10 s.

Hosts: N aliases of a few real sshd servers. By default `--servers` OpenSSH servers on 127.0.0.1,
started as tests/sshd.py starts them (a client key, a known_hosts file); with `--lab DIR` the hosts of
a running lab inventory (`gpubring lab up` writes inventories/lab), each aliased N/len(hosts) times.
An alias is a name in an ssh config file (`Host n007` / `HostName 127.0.0.1`) given to both with
`-F` in ansible_ssh_common_args, with the server's port, user, key and known_hosts: so validation sees
N distinct addresses, and both tools look the host key up under `[127.0.0.1]:PORT` as for the real
host. Each alias gets its own ssh ControlPath (`%n`, fresh for every run), as N real hosts would: a
shared one would let Ansible multiplex N hosts over one connection and flatter it.

Timed, each in a fresh process, the median of `--runs`:
  check            `gpubring check INV` (its default --parallel 16)
  check --parallel N
  runner raw       the probe through gpubring's runner (ansible-runner, Mitogen when it fits, as
                   `gpubring up` runs): one `raw` task running check's own probe script (uid, kernel,
                   `sudo -n true`, /etc/os-release): the least Ansible can do to verify the same
  runner raw -f N  the same with forks = N (gpubring's default is 10)
  runner modules   ping, then slurp /etc/os-release with become (sudo unless the user is root),
                   forks = N: the probe written as an Ansible play usually is
  ansible-playbook raw -f N   plain ansible-playbook with the project's ansible.cfg (no runner)
CPU seconds are the controller's (the timed process and the children it waited for), not sshd's.
Prints figures; asserts nothing but that every probe reached every host.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


@dataclass(frozen=True)
class Origin:
    """One real sshd the aliases point at."""

    address: str
    port: int
    user: str
    key: str
    common_args: str
    python: str


def gpubring() -> str:
    script = Path(sys.executable).parent / "gpubring"
    return str(script) if script.exists() else "gpubring"


@contextmanager
def sshd_origins(folder: Path, count: int) -> Iterator[list[Origin]]:
    from sshd import KeyPair, Sshd

    client = KeyPair.generate(folder / "id_client")
    known = folder / "known_hosts"
    with ExitStack() as stack:
        servers = [
            stack.enter_context(Sshd.start(folder / f"sshd{i}", [client.public_line], log_level="ERROR"))
            for i in range(count)
        ]
        known.write_text("".join(s.known_hosts_line() + "\n" for s in servers))
        SERVER_PIDS.extend(s.process.pid for s in servers)
        args = (
            f"-o UserKnownHostsFile={known} -o GlobalKnownHostsFile=/dev/null "
            "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
        )
        yield [Origin(s.address, s.port, "root", str(client.private), args, sys.executable) for s in servers]


def lab_origins(lab: Path) -> list[Origin]:
    from gpubring.inventory import load_inventory

    inv = load_inventory(lab)
    return [
        Origin(
            h.address,
            h.port,
            h.user or "root",
            str(h.vars.get("ansible_ssh_private_key_file") or ""),
            str(h.vars.get("ansible_ssh_common_args") or ""),
            str(h.vars.get("ansible_python_interpreter") or "/usr/bin/python3"),
        )
        for h in inv.hosts.values()
    ]


def write_inventory(folder: Path, origins: Sequence[Origin], count: int, control: Path) -> Path:
    """hosts.yml of `count` aliases (n000 in control_plane, the rest gpu_nodes) and their ssh config."""
    folder.mkdir(parents=True, exist_ok=True)
    control.mkdir(parents=True, exist_ok=True)
    config = folder / "ssh_config"
    hosts: dict[str, dict[str, object]] = {}
    lines: list[str] = []
    for i in range(count):
        origin, name = origins[i % len(origins)], f"n{i:03d}"
        lines += [f"Host {name}", f"  HostName {origin.address}"]
        hosts[name] = {
            "ansible_port": origin.port,
            "ansible_user": origin.user,
            "ansible_ssh_private_key_file": origin.key,
            "ansible_ssh_common_args": f"-F {config} -o ControlPath={control}/%n {origin.common_args}",
            "ansible_python_interpreter": origin.python,
        }
    config.write_text("\n".join(lines) + "\n")
    names = list(hosts)
    data = {
        "all": {
            "children": {
                "control_plane": {"hosts": {names[0]: hosts[names[0]]}},
                "gpu_nodes": {"hosts": {n: hosts[n] for n in names[1:]}},
            }
        }
    }
    (folder / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def probe_plays(folder: Path) -> dict[str, Path]:
    from gpubring.probe import PROBE_SCRIPT

    raw = [
        {
            "name": "Probe as gpubring check does",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "uid, kernel, passwordless sudo, os-release (check's probe script)",
                    "ansible.builtin.raw": PROBE_SCRIPT.strip(),
                    "register": "__probe",
                    "changed_when": False,
                    "failed_when": "'sudo=no' in __probe.stdout or 'VERSION_ID=' not in __probe.stdout",
                }
            ],
        }
    ]
    modules = [
        {
            "name": "Probe with modules",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {"name": "Python and the connection", "ansible.builtin.ping": {}},
                {
                    "name": "Become, read /etc/os-release",
                    "ansible.builtin.slurp": {"src": "/etc/os-release"},
                    "become": "{{ (ansible_user | default('')) != 'root' }}",
                },
            ],
        }
    ]
    out = {}
    for name, play in (("raw", raw), ("modules", modules)):
        path = folder / f"probe_{name}.yml"
        path.write_text(yaml.safe_dump(play, sort_keys=False, width=1000))
        out[name] = path
    return out


RUNNER = """
import json, sys
from pathlib import Path
from gpubring.run import process
from gpubring.run.settings import RunSettings
from gpubring.runopts import RunOptions
root = Path(sys.argv[1])
result = process.run(RunSettings(inventory_root=root, hosts_file=root / "hosts.yml", command="probe",
                                 playbook=Path(sys.argv[2]), options=RunOptions(forks=int(sys.argv[3]))))
ok = sum(1 for s in result.report.stats.values() if s.ok and not s.failed and not s.unreachable)
print(json.dumps({"exit": int(result.exit_code), "ok": ok}))
"""


@dataclass
class Figure:
    name: str
    walls: list[float]
    cpus: list[float]
    servers: list[float]


SERVER_PIDS: list[int] = []  # the sshd listeners started here (their sessions' CPU comes back to them)
FAILED: list[str] = []  # what went wrong in a run, printed with the figures (the run still counts)


def server_cpu() -> float:
    """CPU seconds of the local sshd servers and their finished sessions (utime, stime, cutime, cstime)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in SERVER_PIDS:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += sum(int(f) for f in fields[11:15])
    return total / ticks


def timed(
    argv: list[str], env: dict[str, str] | None = None
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def case_check(parallel: int | None) -> Callable[[Path, int], tuple[float, float]]:
    def run(inv: Path, count: int) -> tuple[float, float]:
        extra = ["--parallel", str(parallel)] if parallel else []
        wall, cpu, proc = timed([gpubring(), "check", str(inv), "--json", "-", *extra])
        data = json.loads(proc.stdout or "{}")
        if proc.returncode != 0 or data.get("summary", {}).get("ok") != count:
            bad = [h for h in data.get("hosts", []) if not h.get("ok")]
            first = f"{bad[0]['name']}: {bad[0]['problem']['message']}" if bad else proc.stderr[-2000:]
            FAILED.append(f"check exited {proc.returncode}, {len(bad)} host(s) not ok; {first}")
        return wall, cpu

    return run


def case_runner(play: Path, forks: int) -> Callable[[Path, int], tuple[float, float]]:
    def run(inv: Path, count: int) -> tuple[float, float]:
        wall, cpu, proc = timed([sys.executable, "-c", RUNNER, str(inv), str(play), str(forks)])
        last = (proc.stdout.strip().splitlines() or ["{}"])[-1]
        data = json.loads(last) if last.startswith("{") else {}
        if data.get("exit") != 0 or data.get("ok") != count:
            FAILED.append(f"runner probe: {data or proc.stderr[-2000:]}")
        return wall, cpu

    return run


def case_playbook(play: Path, forks: int) -> Callable[[Path, int], tuple[float, float]]:
    def run(inv: Path, count: int) -> tuple[float, float]:
        env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
        playbook = str(Path(sys.executable).parent / "ansible-playbook")
        wall, cpu, proc = timed([playbook, "-i", str(inv / "hosts.yml"), "-f", str(forks), str(play)], env)
        recap = [line for line in proc.stdout.splitlines() if " : ok=" in line]
        good = [line for line in recap if "unreachable=0" in line and "failed=0" in line]
        if proc.returncode != 0 or len(good) != count:
            FAILED.append(f"ansible-playbook exited {proc.returncode}: {len(good)} of {count} hosts ok")
        return wall, cpu

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=50, help="aliases to probe (default 50)")
    parser.add_argument("--servers", type=int, default=3, help="sshd servers to start (default 3)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each case (default 3); the median")
    parser.add_argument("--lab", type=Path, help="alias the hosts of this running lab inventory instead")
    parser.add_argument("--only", default="", help="time only the cases whose name contains this")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cs", dir="/tmp"))  # short: ControlPath is a unix socket
    try:
        with ExitStack() as stack:
            if args.lab:
                origins = lab_origins(args.lab)
                source = f"{len(origins)} lab host(s) of {args.lab}"
            else:
                origins = stack.enter_context(sshd_origins(work / "servers", args.servers))
                source = f"{len(origins)} sshd on 127.0.0.1"
            plays = probe_plays(work)
            n = args.hosts
            cases = {
                "gpubring check (--parallel 16, its default)": case_check(None),
                f"gpubring check --parallel {n}": case_check(n),
                "runner, raw probe script, forks 10 (gpubring's default)": case_runner(plays["raw"], 10),
                f"runner, raw probe script, forks {n}": case_runner(plays["raw"], n),
                f"runner, ping + become slurp os-release, forks {n}": case_runner(plays["modules"], n),
                f"ansible-playbook (no runner), raw probe script, -f {n}": case_playbook(plays["raw"], n),
            }
            cases = {name: case for name, case in cases.items() if args.only in name}
            print(f"{n} aliases of {source}; {args.runs} run(s) each; {os.cpu_count()} CPUs")
            figures: list[Figure] = []
            for k, (name, case) in enumerate(cases.items()):
                figure = Figure(name, [], [], [])
                for r in range(args.runs):
                    inv = write_inventory(work / f"inv{k}-{r}", origins, n, work / f"c{k}{r}")
                    failed = len(FAILED)
                    before = server_cpu()
                    wall, cpu = case(inv, n)
                    time.sleep(0.5)  # the last sessions end and are reaped
                    figure.servers.append(server_cpu() - before)
                    if len(FAILED) > failed:
                        print(f"  run {r + 1}: {FAILED[-1][:600]}", flush=True)
                    figure.walls.append(wall)
                    figure.cpus.append(cpu)
                figures.append(figure)
                wall, cpu = statistics.median(figure.walls), statistics.median(figure.cpus)
                load = os.getloadavg()[0]
                print(
                    f"{name}: {wall:.2f} s wall (min {min(figure.walls):.2f}, max {max(figure.walls):.2f}), "
                    f"{cpu:.2f} s CPU; per host {wall / n * 1000:.0f} ms wall, {cpu / n * 1000:.0f} ms CPU "
                    f"(load average {load:.1f})"
                    + (f"; sshd {statistics.median(figure.servers):.2f} s CPU" if SERVER_PIDS else ""),
                    flush=True,
                )
            base = statistics.median(figures[0].walls) if figures else 0.0
            for figure in figures[1:]:
                print(f"  {figure.name}: {statistics.median(figure.walls) / base:.1f}x check's wall time")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
