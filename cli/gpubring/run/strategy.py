"""The strategy gpubring's runs use: where the accelerator chose Mitogen's linear strategy,
gpubring.core.mitogen_linear, the same strategy with the installed collections listed once in
ansible-playbook's main process before it forks a worker per task and host (plugins/strategy/
mitogen_linear.py says why: about 0.13 s of controller CPU per collection module call and host, issue 26).

Kept apart from gpubring.run.accelerate, which the Molecule scenarios also use: they test roles under
Mitogen's own strategy, as a plain `molecule test` or ansible-playbook run would."""

from __future__ import annotations

from dataclasses import replace

from gpubring.run.accelerate import MITOGEN_STRATEGY, Accelerator

GPUBRING_STRATEGY = "gpubring.core.mitogen_linear"


def for_runs(accel: Accelerator) -> Accelerator:
    """`accel` with gpubring's strategy in place of Mitogen's linear one (Mitogen's strategy folder stays
    on the plugin path: gpubring's strategy is Mitogen's with one step added); any other unchanged."""
    if accel.strategy != MITOGEN_STRATEGY:
        return accel
    env = {**accel.env, "ANSIBLE_STRATEGY": GPUBRING_STRATEGY}
    return replace(accel, strategy=GPUBRING_STRATEGY, env=env)
