# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""gpubring.core.mitogen_linear: Mitogen's linear strategy, with what every forked worker would load for
itself loaded once, in the controller's main process, before the workers fork."""

from __future__ import annotations

DOCUMENTATION = r"""
name: mitogen_linear
short_description: Mitogen's linear strategy, with the collections, filters and compiled templates loaded before the workers fork
description:
  - Runs every play as Mitogen's C(mitogen_linear) strategy does (Ansible's C(linear) with Mitogen's
    connections), and before the first play of the process lists the installed collections once in the
    controller's main process, so that the workers Ansible forks for each task and host inherit them
    instead of each listing them again.
  - "Why. For every module that lives in a collection (C(gpubring.core.gpu_facts), C(host_state),
    C(read_files), C(download_reachable) and any other collection's), Mitogen's planner lists every
    installed collection (C(_load_collections) in C(ansible_mitogen/planner.py), Mitogen 0.3.x). In a
    fresh worker that imports each collection's package and parses its C(meta/runtime.yml), about 0.13 s
    of controller CPU per module call and host with the C(ansible) package's 90-odd collections, a third
    of the worker's CPU for such a task (gpubring's fleet profile, docs/fleet.md). Listed once before the
    fork, the packages are already imported in every worker, and a worker's listing costs about 0.02 s."
  - "It also loads, once in the main process, the filter and test plugins of C(ansible.builtin) and every
    filter of C(gpubring.core). Ansible loads them in each worker that renders a template naming one (a
    filter of a collection imports each of that collection's filter files and their module_utils): about
    40-90 ms of a worker's CPU for a task that names one, before it renders anything (gpubring's fleet
    profile, docs/fleet.md)."
  - "And it keeps the compiled code of every Jinja template for the rest of the run
    (C(plugins/plugin_utils/jinja_cache.py)): ansible-core 2.19 compiles a template each time it renders
    one, in a fresh worker for each task and host. A worker's compilations are merged into the main
    process before it forks the next worker, so the hosts after the first workers of a task, and later
    tasks that read the same variables, find them compiled. The rendering is Ansible's own."
  - "With more hosts than forks, it waits for a worker to end by sleeping on the workers' process
    sentinels, where Ansible's own loop polls every worker each 0.1 ms and keeps a core busy."
  - "It leaves the controller's processes to the kernel's scheduler. Mitogen pins them to CPUs
    (C(ansible_mitogen/affinity.py), Mitogen 0.3.x): the connection multiplexer to CPU 0, the main
    process to CPU 1, and the workers from CPU 2 on; on a controller with fewer than 4 CPUs the main
    process and every worker share the CPUs after the first. Each ansible-playbook process pins the same
    way, so the shards of a sharded run put every main process on CPU 1 and every multiplexer on CPU 0;
    on a 2-CPU controller one CPU ran all the controller's Ansible work (gpubring's fleet measurements,
    docs/fleet.md)."
  - Needs Mitogen (C(pip install 'gpubring[accel]')). C(gpubring up) chooses this strategy whenever it
    would use Mitogen's (C(cli/gpubring/run/strategy.py)), and Ansible's C(linear) otherwise.
author: gpubring maintainers (!UNKNOWN)
"""

import pkgutil  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from functools import cache  # noqa: E402 (DOCUMENTATION first, as ansible-doc reads it)
from importlib import import_module  # noqa: E402
from multiprocessing.connection import wait  # noqa: E402
from typing import Any  # noqa: E402

from ansible.collections.list import list_collection_dirs  # noqa: E402
from ansible.errors import AnsibleError  # noqa: E402
from ansible.plugins.loader import filter_loader, test_loader  # noqa: E402
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategy  # noqa: E402
from ansible_collections.gpubring.core.plugins.plugin_utils import jinja_cache  # noqa: E402

try:
    import ansible_mitogen.affinity
    from ansible_mitogen.strategy import StrategyMixin
except ImportError as error:  # Mitogen is an optional extra of gpubring
    MITOGEN_ERROR: ImportError | None = error

    class StrategyMixin:  # type: ignore[no-redef]
        """Stands in for Mitogen's mixin so that the module imports; the strategy refuses to start."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise AnsibleError(
                "gpubring.core.mitogen_linear needs Mitogen (pip install 'gpubring[accel]'), "
                f"which cannot be imported: {MITOGEN_ERROR}"
            )

else:
    MITOGEN_ERROR = None

COLLECTION = "gpubring.core"


@cache
def prepare_workers() -> int:
    """List the installed collections in this (the main) process, once: the collections' packages stay
    imported for every worker forked after it, whichever play. Returns how many collections were found."""
    return len(list(list_collection_dirs()))


@cache
def load_jinja_plugins() -> int:
    """Load the filter and test plugins a task's templates can name, once, in this (the main) process:
    ansible.builtin's (the first lookup of a filter or test loads all of its kind) and this collection's
    filter files (a worker's first lookup of one of its filters imports every file and its module_utils:
    about 60 ms; with the files imported, a lookup takes about 1 ms, and Ansible keeps nothing of a
    lookup to inherit, so this imports the files and looks nothing up). Returns how many of this
    collection's filters the files define."""
    filter_loader.get("ansible.builtin.default")
    test_loader.get("ansible.builtin.version")
    package = import_module(f"ansible_collections.{COLLECTION}.plugins.filter")
    count = 0
    for info in pkgutil.iter_modules(package.__path__):
        try:
            count += len(import_module(f"{package.__name__}.{info.name}").FilterModule().filters())
        except Exception:  # left to the worker that names one of its filters: Ansible's loader reports it
            continue
    return count


def release_cpus() -> None:
    """Turn Mitogen's CPU pinning off in this process before Mitogen sets it up (the first play's run):
    its base Policy assigns nothing, and the workers forked after inherit it (module docstring)."""
    ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()


def wait_for_a_free_worker(workers: Sequence[Any], timeout: float = 0.05) -> None:
    """Return when a worker slot is free: empty, or its process ended. Ansible's _queue_task, when every
    slot is busy, polls each worker's is_alive() every 0.1 ms until one ends (ansible/plugins/strategy/
    __init__.py, v2.19.14): with more hosts than forks, that kept the main process busy on a core the
    workers need. This sleeps on the workers' sentinels instead, waking when one ends (or after
    `timeout`, to look again). A worker's sentinel is ready once it has closed its files, a moment before
    the kernel lets it be reaped; that worker is joined (waitpid) rather than looked at again at once,
    which spun hundreds of times on a loaded machine."""
    while True:
        busy = {}
        for worker in workers:
            if worker is None or not worker.is_alive():
                return
            busy[worker.sentinel] = worker
        for sentinel in wait(list(busy), timeout):
            busy[sentinel].join()


class StrategyModule(StrategyMixin, LinearStrategy):  # type: ignore[misc]
    def run(self, iterator: Any, play_context: Any, *args: Any, **kwargs: Any) -> Any:
        release_cpus()
        prepare_workers()
        load_jinja_plugins()
        jinja_cache.install()
        return super().run(iterator, play_context, *args, **kwargs)

    def _queue_task(self, host: Any, task: Any, task_vars: Any, play_context: Any) -> Any:
        wait_for_a_free_worker(self._workers)
        jinja_cache.merge()  # what the workers before this one compiled, for this one to inherit
        return super()._queue_task(host, task, task_vars, play_context)
