"""The verify phase's structured results, read from a run's job events.

The roles publish them with set_fact, and ansible-runner gives a set_fact's result whole, facts
included, in the `runner_on_ok` event of the task (artifacts/<ident>/job_events/<counter>-<uuid>.json
in the run folder, see gpubring.run):

- `verify_results` (roles/verify tasks/cluster_results.yml): the cluster smoke tests, on the first
  host of the play: {control_plane, tested_nodes, dra_nodes, checks: [{name, status, expected,
  reason, output}]};
- `gpu_acceptance_result` (roles/gpu_acceptance tasks/report.yml): one per GPU node: {verdict,
  checks: [{name, status, expected, measured, reason}], expected};
- `fabric_test_result` (roles/fabric_test tasks/report.yml): the NCCL fabric test, on the host that
  ran it: {verdict, checks, nodes, gpus_per_node}.

`published` keeps, per fact, the `created` time ansible-runner gave the last event that carried it
(the conformance report's timestamps).

The last value a host published wins. A leaf: it imports nothing from gpubring, prints nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERIFY_FACT = "verify_results"
ACCEPTANCE_FACT = "gpu_acceptance_result"
FABRIC_FACT = "fabric_test_result"


@dataclass(frozen=True)
class VerifyFacts:
    """host -> the fact it published last, for each of the two facts."""

    verify_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpu_acceptance: dict[str, dict[str, Any]] = field(default_factory=dict)
    fabric_test: dict[str, dict[str, Any]] = field(default_factory=dict)
    published: dict[str, str] = field(default_factory=dict)

    def report_fields(self) -> dict[str, Any]:
        """The fields a run report gets from them (`verify_results`, `gpu_acceptance`, `fabric_test`,
        `facts_published`)."""
        return {
            "verify_results": dict(self.verify_results),
            "gpu_acceptance": dict(self.gpu_acceptance),
            "fabric_test": dict(self.fabric_test),
            "facts_published": dict(self.published),
        }


def _facts(event: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    if event.get("event") != "runner_on_ok":
        return None
    data = event.get("event_data")
    if not isinstance(data, Mapping):
        return None
    res = data.get("res")
    facts = res.get("ansible_facts") if isinstance(res, Mapping) else None
    if not isinstance(facts, Mapping):
        return None
    return str(data.get("host") or ""), facts


def from_events(events: Iterable[Mapping[str, Any]]) -> VerifyFacts:
    """The facts the events carry, in event order (the last one of a host wins)."""
    found = VerifyFacts()
    for event in events:
        picked = _facts(event)
        if picked is None:
            continue
        host, facts = picked
        for name, into in (
            (VERIFY_FACT, found.verify_results),
            (ACCEPTANCE_FACT, found.gpu_acceptance),
            (FABRIC_FACT, found.fabric_test),
        ):
            value = facts.get(name)
            if isinstance(value, Mapping):
                into[host] = dict(value)
                if isinstance(event.get("created"), str):
                    found.published[name] = str(event["created"])
    return found


def _counter(event: Mapping[str, Any]) -> int:
    value = event.get("counter")
    return value if isinstance(value, int) else 0


def job_events(run_folder: Path) -> list[dict[str, Any]]:
    """The job events ansible-runner kept for a run (artifacts/*/job_events/*.json), by counter.

    A file that cannot be read or is not a JSON object (a run killed while writing it) is left out."""
    out: list[dict[str, Any]] = []
    for path in sorted(run_folder.glob("artifacts/*/job_events/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return sorted(out, key=_counter)


def from_run_folder(run_folder: Path) -> VerifyFacts:
    """The verify facts of the run whose folder this is."""
    return from_events(job_events(run_folder))
