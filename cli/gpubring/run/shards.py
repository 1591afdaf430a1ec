"""Sharded runs: the per-host work of preflight, the host phase and verify as several ansible-playbook
processes (ansible-runner jobs) over disjoint slices of the hosts, merged into the run's one state,
view, summary and report.

The steps of a run (`segments_of`; PARTS names the playbooks of each phase's parts):

    preflight   sharded: each shard runs preflight.yml on its slice with gpubring_sharded, which turns
                its collision check off (roles/preflight/tasks/main.yml): that check compares each host
                with every other host, and a shard sees only its slice.
    collisions  preflight_collisions.yml, the first play of the step after preflight's shards (in each
                host-phase shard, before any host-phase task), or a step of its own when nothing
                follows. It connects to no host: each host still in the run is compared with every host
                the preflight step ran on (gpubring_preflight_peers), from the facts the shards just
                wrote to the inventory's fact cache; the same words as one process's check.
    host        sharded: each shard runs the whole of host.yml (kernel and containerd, the GPU host
                setup, the reboot play) on its slice. The reboot play cannot run apart from the roles
                before it: they hand it gpubring_reboot_reasons (and what blocks a reboot) as plain
                set_fact, which lives only inside one ansible-playbook process. Instead, the batches
                are kept: each shard gets an integer gpubring_serial, and the shards' batch sizes add up
                to at most the batch of one process (`shard_serials`), so never more nodes are drained or
                rebooted at once than `gpubring_serial` allows. A serial that leaves fewer batch slots
                than shards runs on fewer shards (gpubring_serial 1: one process, as today).
    cluster, platform
                one process, in order: they coordinate hosts (control planes, the cluster API).
    verify      sharded: verify_hosts.yml (the verify role's host checks, the control planes' own
                certificates, the GPU nodes' acceptance) per slice; with gpubring_sharded the role keeps
                what its cluster smoke tests read of each host in the fact cache instead of running them
                on the first host of its slice. Then one process: verify_smoke.yml (the smoke tests,
                once, on the first host still in the run) and verify_fabric.yml (the fabric test
                occupies the GPUs of the nodes it tests: after every shard's acceptance).

Two phases never share a sharded step (one process stops between them where a whole batch failed);
consecutive once parts share one process. Each phase playbook already runs on its own (`--only`,
`--from`): nothing a phase needs from an earlier one lives in a process (facts persist in the
inventory's fact cache). As in one process, a host that failed or was unreachable is left out of what
runs after (the next process is limited to the hosts still in the run), and the run stops where one
process would have stopped: on a cancel, an ansible error, or a shard whose playbook ended before its
last play (a whole batch failed).

With gpubring_shards auto, preflight and verify get at most one shard per CHECK_HOSTS_PER_SHARD hosts
(one process below two shards' worth); the host phase one per core. With one shard (gpubring_shards
1, `--shards 1`, one host, a run with none of preflight, host and verify, a --limit @file) nothing here
runs: process.run runs one ansible-playbook as before, over verify.yml (which imports verify_hosts.yml
and verify_fabric.yml: the same plays in the same order). A phase playbooks folder without a phase's
split playbooks (another --playbooks-dir) runs that phase as one process.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpubring import paths, runstore
from gpubring.events import (
    Cancelled,
    Event,
    HostCounts,
    HostResult,
    Notice,
    PhasePlay,
    PlaybookStats,
    PlayStart,
    TaskStart,
)
from gpubring.run.folder import _write_yaml, cmdline, plays_of
from gpubring.run.session import Session
from gpubring.run.settings import RunSettings

if TYPE_CHECKING:
    from gpubring.model import Inventory

SHARDED_PHASE = "host"
# What of each sharded phase runs per slice and what once, as playbooks of the phase playbooks' folder
# (module docstring). A phase missing one of its files there (another --playbooks-dir) runs as one
# process. The once part of preflight compares hosts that the shards read: it goes first in the step
# after the shards (a play that connects to no host), or alone when nothing follows.
PARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "preflight": (("preflight",), ("preflight_collisions",)),
    "host": (("host",), ()),
    "verify": (("verify_hosts",), ("verify_smoke", "verify_fabric")),
}
COLLISIONS = "preflight_collisions"
# With gpubring_shards auto, preflight and verify get one shard per this many hosts at most (and stay one
# process under two shards' worth): each extra ansible-playbook costs ~1-2 CPU-s to start, and preflight
# and verify cost their one main process ~0.5 s per host each (docs/fleet.md, "Measured cost"), so a
# slice of 8 hosts saves about twice its start. The host phase is sharded from 2 hosts, as before. A
# number of shards asked for (--shards N, gpubring_shards: N) is used for all three.
CHECK_HOSTS_PER_SHARD = 8
SHARDED_VAR = "gpubring_sharded"
PEERS_VAR = "gpubring_preflight_peers"
GPU_GROUP = "gpu_nodes"
SHARDS_SETTING = "gpubring_shards"
# ansible-playbook's exit statuses that only say hosts failed or were unreachable (ansible-core's
# TaskQueueManager: RUN_OK 0, RUN_FAILED_HOSTS 2, RUN_UNREACHABLE_HOSTS 4); anything else is an error.
HOST_LEVEL_RC = frozenset({0, 2, 4})


class ShardsError(ValueError):
    """gpubring_shards or --shards holds what is no shard count."""


def controller_cores() -> int:
    """The CPUs this process may run on (os.sched_getaffinity), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def shard_count(value: Any, hosts: int, cores: int | None = None) -> int:
    """The shards asked for ("auto": the controller's cores; an integer >= 1), at most one per host."""
    if isinstance(value, str) and value.strip() == "auto":
        wanted = cores if cores is not None else controller_cores()
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        wanted = value
    elif isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
        wanted = int(value)
    else:
        raise ShardsError(f"{SHARDS_SETTING}: expected 'auto' or an integer >= 1, got {value!r}")
    return max(1, min(wanted, hosts))


def slices(hosts: Sequence[str], gpu: Sequence[str], count: int) -> list[tuple[str, ...]]:
    """`hosts` cut into `count` disjoint slices whose union is `hosts`: GPU nodes dealt round robin
    first, then the other hosts, continuing from the emptiest slice; each slice in inventory order."""
    count = max(1, min(count, len(hosts)))
    order = {host: index for index, host in enumerate(hosts)}
    gpu_set = set(gpu)
    buckets: list[list[str]] = [[] for _ in range(count)]
    dealt = [h for h in hosts if h in gpu_set] + [h for h in hosts if h not in gpu_set]
    for host in dealt:
        min(buckets, key=len).append(host)
    return [tuple(sorted(bucket, key=order.__getitem__)) for bucket in buckets if bucket]


def _batch(serial: str, items: int) -> int:
    """The batch size ansible-core makes of one serial value over `items` hosts (its pct_to_int in
    lib/ansible/utils/helpers.py: int(pct / 100 * items) or 1; a count as it is)."""
    text = serial.strip()
    if text.endswith("%"):
        return int(int(text[:-1]) / 100.0 * items) or 1
    return int(text)


def shard_serials(serial: str | None, hosts: int, gpu: int, count: int) -> list[str] | None:
    """One gpubring_serial per shard, whose batches together never hold more hosts than one
    process's batch of the GPU host setup play (over `gpu` GPU nodes) or of the reboot play (over
    `hosts` hosts). Fewer entries than `count` when the batch has fewer slots; None for a serial that
    is a list (several batch sizes in turn: one process)."""
    if serial is None:
        return [str(hosts)] * count
    text = str(serial).strip()
    if text.startswith("[") or "," in text:
        return None
    try:
        batches = [(_batch(text, hosts), hosts)] + ([(_batch(text, gpu), gpu)] if gpu else [])
    except ValueError:
        return None
    if all(size >= items for size, items in batches):  # one batch each: every shard takes its whole slice
        return [text] * count
    total = max(1, min(size for size, _ in batches))
    used = min(count, total)
    return [str(total // used + (1 if index < total % used else 0)) for index in range(used)]


def _extra_var(settings: RunSettings, name: str) -> Any:
    """The operator's -e value of `name` (the last -e that sets it wins, as in Ansible), or None."""
    value = None
    for source in settings.options.extra_vars:
        if isinstance(source, Mapping) and name in source:
            value = source[name]
    return value


def _effective_serial(settings: RunSettings) -> str | None:
    """gpubring_serial as the plays get it: the operator's -e wins over the inventory's setting."""
    value = _extra_var(settings, "gpubring_serial")
    if value is None:
        return settings.serial
    return json.dumps(value) if isinstance(value, list) else str(value)


@dataclass(frozen=True)
class Segment:
    """Playbooks that run in one step: one process, or one per slice when `sharded`. Each part is
    (its phase, the playbook's name in the phase playbooks' folder, without .yml)."""

    parts: tuple[tuple[str, str], ...]
    sharded: bool = False
    shards: int = 0  # the most processes of a sharded step; 0: the plan's count

    @property
    def phases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(phase for phase, _ in self.parts))

    @property
    def stems(self) -> tuple[str, ...]:
        return tuple(stem for _, stem in self.parts)


@dataclass(frozen=True)
class Plan:
    shards: int
    segments: tuple[Segment, ...]
    hosts: tuple[str, ...]  # the run's hosts (inventory order, --limit applied)
    gpu: tuple[str, ...]


def _inventory(settings: RunSettings) -> Inventory | None:
    from gpubring.inventory import InventoryError, load_inventory

    try:
        return load_inventory(settings.inventory_root, check_rules=False)
    except (InventoryError, OSError):
        return None


def plan(settings: RunSettings, inv: Inventory | None = None, cores: int | None = None) -> Plan | None:
    """The sharded plan of a run, or None when it runs as one process (module docstring)."""
    requested = settings.options.shards
    if settings.playbook is not None or not any(phase in PARTS for phase in settings.phases):
        return None
    if requested == 1:
        return None
    limit = settings.options.limit
    if limit and limit.startswith("@"):
        return None
    inv = inv or _inventory(settings)
    if inv is None:
        return None
    from gpubring.phases import resolve_pattern

    order = list(inv.hosts)
    hosts = resolve_pattern(limit, inv.groups, order) if limit else tuple(order)
    value: Any = requested if requested is not None else _extra_var(settings, SHARDS_SETTING)
    if value is None:
        value = inv.settings.get(SHARDS_SETTING, "auto")
    count = shard_count(value, len(hosts), cores)
    if count < 2:
        return None
    auto = isinstance(value, str) and value.strip() == "auto"
    checks = min(count, len(hosts) // CHECK_HOSTS_PER_SHARD) if auto else count
    split = {SHARDED_PHASE} | ({"preflight", "verify"} if checks >= 2 else set())
    gpu = tuple(h for h in resolve_pattern(GPU_GROUP, inv.groups, order) if h in set(hosts))
    segments = tuple(
        replace(s, shards=checks) if s.sharded and SHARDED_PHASE not in s.phases else s
        for s in segments_of(settings.phases, settings.playbooks_dir or paths.playbooks_dir(), split)
    )
    if not any(segment.sharded for segment in segments):
        return None
    return Plan(shards=count, segments=segments, hosts=hosts, gpu=gpu)


def segments_of(
    phases: Sequence[str], playbooks: Path, split: Collection[str] = tuple(PARTS)
) -> tuple[Segment, ...]:
    """The steps of a sharded run over `phases` (module docstring): the per-slice parts of each phase,
    and runs of once parts, in phase order; the collision check joined to the front of the step after
    it. Two phases never share a sharded step: one process stops between them where a batch failed.
    A phase not in `split` runs whole, once."""
    items: list[tuple[bool, tuple[str, str]]] = []
    for phase in phases:
        per_slice, once = PARTS.get(phase, ((), (phase,))) if phase in split else ((), (phase,))
        if phase in PARTS and not all((playbooks / f"{s}.yml").is_file() for s in per_slice + once):
            per_slice, once = (), (phase,)
        items += [(True, (phase, stem)) for stem in per_slice] + [(False, (phase, stem)) for stem in once]
    segments: list[Segment] = []
    lead: tuple[tuple[str, str], ...] = ()  # the collision check, waiting for the step after it
    for sharded, part in items:
        if part[1] == COLLISIONS:
            lead = (part,)
        elif (
            lead
            or not segments
            or segments[-1].sharded != sharded
            or (sharded and part[0] not in segments[-1].phases)
        ):
            segments.append(Segment((*lead, part), sharded))
            lead = ()
        else:
            segments[-1] = Segment((*segments[-1].parts, part), sharded)
    if lead:
        segments.append(Segment(lead))
    return tuple(segments)


RunOne = Callable[..., tuple[int | None, str]]


@dataclass
class _Merge:
    """Folds the shards' events into the run's one Session: each host's counts summed over every
    process, each play announced once, the cancel said once (by the run's own Session.finish)."""

    main: Session
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: dict[str, HostCounts] = field(default_factory=dict)
    started: set[tuple[int, str, str]] = field(default_factory=set)
    order: Mapping[str, int] = field(default_factory=dict)
    # Where each failure (and ignored failure) happened: (step, the shard's task round, the host's place
    # in the inventory), to list them as one process's linear strategy would, task by task.
    where: dict[int, dict[int, tuple[int, int, int]]] = field(default_factory=lambda: {0: {}, 1: {}})

    def forwarder(self, segment: int, shard: Session) -> Callable[[Event], None]:
        rounds = [0]
        last: list[tuple[str, str, str]] = [("", "", "")]

        def forward(event: Event) -> None:
            with self.lock:
                if isinstance(event, Cancelled):
                    return
                if isinstance(event, TaskStart) and (shard.state.play, event.task, event.role) != last[0]:
                    last[0] = (shard.state.play, event.task, event.role)
                    rounds[0] += 1
                lists = (self.main.state.failures, self.main.state.ignored)
                before = [len(items) for items in lists]
                if isinstance(event, PlayStart):
                    key = (segment, event.phase, event.name)
                    if key in self.started:
                        return
                    self.started.add(key)
                elif isinstance(event, PlaybookStats):
                    for host, row in event.hosts.items():
                        old = self.counts.get(host, HostCounts()).as_dict()
                        self.counts[host] = HostCounts(**{k: v + old[k] for k, v in row.as_dict().items()})
                    event = PlaybookStats(hosts=dict(sorted(self.counts.items())))
                else:
                    # Events are folded under the phase and play of the shard that sent them.
                    self.main.state.phase, self.main.state.play = shard.state.phase, shard.state.play
                self.main.emit(event)
                if isinstance(event, HostResult):
                    for kind, items in enumerate(lists):
                        if len(items) > before[kind]:
                            host_place = self.order.get(event.host, len(self.order))
                            self.where[kind][len(items) - 1] = (segment, rounds[0], host_place)

        return forward

    def sort_failures(self) -> None:
        """The failures in the order one process would have listed them (`where`)."""
        state = self.main.state
        for kind, name in enumerate(("failures", "ignored")):
            items = getattr(state, name)
            keyed = sorted(range(len(items)), key=lambda i: self.where[kind].get(i, (0, 0, 0)))
            setattr(state, name, [items[i] for i in keyed])

    def dead(self) -> set[str]:
        with self.lock:
            return {host for host, row in self.counts.items() if row.failed or row.unreachable}


@dataclass
class _Job:
    ident: str
    limit: str | None
    session: Session
    extra: list[str]
    last_play: str
    rc: int | None = None
    status: str = ""
    error: BaseException | None = None


def _part_playbooks(settings: RunSettings, segment: Segment) -> list[tuple[str, Path]]:
    """(phase, playbook) of each part of `segment`, in the phase playbooks' folder."""
    base = (settings.playbooks_dir or paths.playbooks_dir()).resolve()
    return [(phase, base / f"{stem}.yml") for phase, stem in segment.parts]


def _segment_playbook(settings: RunSettings, folder: Path, number: int, segment: Segment) -> Path:
    return _write_yaml(
        folder / "project" / f"run-{number}.yml",
        f"# Generated by gpubring for this run: step {number} of a sharded run.\n",
        [
            {"name": f"Phase {p} ({path.stem})", "ansible.builtin.import_playbook": str(path)}
            for p, path in _part_playbooks(settings, segment)
        ],
    )


def run(
    settings: RunSettings,
    folder: Path,
    main: Session,
    the_plan: Plan,
    *,
    inventories: Sequence[Path],
    run_one: RunOne,
) -> tuple[int | None, str]:
    """Run the plan's segments in order (module docstring); the combined exit status of
    ansible-playbook (the first that was not 0) and ansible-runner's status ("canceled" when cancelled)."""
    merge = _Merge(main, order={host: index for index, host in enumerate(the_plan.hosts)})
    try:
        return _segments(settings, folder, main, the_plan, merge, inventories=inventories, run_one=run_one)
    finally:
        merge.sort_failures()


def _segments(
    settings: RunSettings,
    folder: Path,
    main: Session,
    the_plan: Plan,
    merge: _Merge,
    *,
    inventories: Sequence[Path],
    run_one: RunOne,
) -> tuple[int | None, str]:
    combined: int | None = 0
    status = "successful"
    serial = _effective_serial(settings)
    peers: list[str] = []  # the hosts preflight ran on: those the collision check compares
    for number, segment in enumerate(the_plan.segments, start=1):
        dead = merge.dead()
        alive = [h for h in the_plan.hosts if h not in dead]
        if main.cancel.is_set():  # between two steps: what is left does not run, the run is cancelled
            return combined, "canceled"
        if not alive:
            break
        if "preflight" in segment.stems:
            peers = alive
        playbook = _segment_playbook(settings, folder, number, segment)
        plays = [
            PhasePlay(p, name) for p, path in _part_playbooks(settings, segment) for name in plays_of(path)
        ]
        last_play = plays[-1].play if plays else ""
        limit = ",".join(alive) if dead else settings.options.limit
        shared: dict[str, Any] = {PEERS_VAR: peers} if COLLISIONS in segment.stems else {}
        groups = _groups(the_plan, segment, alive, serial=serial, main=main, limit=limit, shared=shared)
        jobs: list[_Job] = []
        for index, (part_limit, values) in enumerate(groups, start=1):
            ident = f"{folder.name}-{number}" + (f"-{index}" if len(groups) > 1 else "")
            extra: list[str] = []
            if values:
                (folder / "vars").mkdir(mode=0o700, exist_ok=True)
                file = folder / "vars" / f"gpubring-shard-{number}-{index}.json"
                runstore.write_private(file, json.dumps(values))
                extra = ["-e", f"@{file}"]
            shard = Session(
                settings, folder, plays, main.envvars, on_event=None, cancel=main.cancel, ident=ident
            )
            shard.on_event = merge.forwarder(number, shard)
            jobs.append(_Job(ident, part_limit, shard, extra, last_play))
        own_serial = len(groups) > 1 and SHARDED_PHASE in segment.phases  # each shard's, in its -e file
        args = cmdline(replace(settings, serial=None if own_serial else settings.serial), folder)
        threads = [
            threading.Thread(target=_work, args=(job, run_one, playbook, inventories, args), daemon=True)
            for job in jobs
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():  # the main thread stays free for the cancel signals
                thread.join(0.2)
        stop = False
        dead = merge.dead()
        for job in jobs:
            if job.error is not None:
                raise job.error
            if job.status == "canceled":
                status = "canceled"
            if job.rc != 0 and combined == 0:
                combined = job.rc
            if job.rc not in HOST_LEVEL_RC:
                stop = True
            elif job.rc and job.session.state.play != job.last_play and _left(job, dead, len(jobs)):
                stop = True  # that playbook ended early (a whole batch failed): one process's would have
        if stop or status == "canceled" or main.cancel.is_set():
            if main.cancel.is_set():
                status = "canceled"
            break
    return combined, status


def _groups(
    the_plan: Plan,
    segment: Segment,
    alive: Sequence[str],
    *,
    serial: str | None,
    main: Session,
    limit: str | None,
    shared: dict[str, Any],
) -> list[tuple[str | None, dict[str, Any]]]:
    """The processes of one step: (--limit, the -e values) of each; one per slice when sharded. A
    sharded step cut into one slice (one host left) is one process that still leaves what compares
    hosts to the step after it (gpubring_sharded), which runs it whatever the count."""
    if not segment.sharded:
        return [(limit, shared)]
    # The host phase's batches (shard_serials) where it is part of the step; else every shard takes
    # its whole slice, as one process's plays without a serial take every host.
    gpu = [h for h in the_plan.gpu if h in set(alive)]
    serials = (
        shard_serials(serial, len(alive), len(gpu), the_plan.shards) or []
        if SHARDED_PHASE in segment.phases
        else [""] * (segment.shards or the_plan.shards)
    )
    cut = slices(alive, gpu, len(serials))
    if len(cut) < 2:
        return [(limit, {**shared, SHARDED_VAR: True})]
    main.emit(
        Notice(
            f"{' and '.join(segment.phases)} phase{'s' * (len(segment.phases) > 1)} in {len(cut)} shards: "
            + "; ".join(
                f"{len(part)} host(s)" + (f", serial {s}" if s else "")
                for part, s in zip(cut, serials, strict=True)
            )
        )
    )
    return [
        (",".join(part), {**shared, SHARDED_VAR: True, **({"gpubring_serial": s} if s else {})})
        for part, s in zip(cut, serials, strict=True)
    ]


def _left(job: _Job, dead: set[str], processes: int) -> bool:
    """Whether a playbook that ended early left hosts of its own behind: always for a step of one
    process (ansible-playbook stopped the whole run); for a shard, only when hosts of its slice are still
    in the run (a shard whose hosts all failed or were unreachable stopped nothing that would have run)."""
    if processes == 1 or not job.limit:
        return True
    return any(host not in dead for host in job.limit.split(","))


def _work(job: _Job, run_one: RunOne, playbook: Path, inventories: Sequence[Path], args: str) -> None:
    try:
        extra = " ".join(job.extra)
        job.rc, job.status = run_one(
            job.session,
            playbook,
            inventories,
            ident=job.ident,
            limit=job.limit,
            args=f"{args} {extra}".strip(),  # last: the shard's serial wins over an -e gpubring_serial
        )
    except BaseException as exc:  # re-raised in the main thread
        job.error = exc
    finally:
        job.session.finish(job.status)
