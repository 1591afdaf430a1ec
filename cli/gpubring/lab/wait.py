"""Waiting for a lab node: systemd in its container finished booting, sshd answers with the lab key."""

from __future__ import annotations

import shlex
import time

from gpubring.lab.docker import run_command
from gpubring.lab.inventory import LabPaths, ssh_common_args
from gpubring.lab.shape import LabError


def wait_for_systemd(name: str, timeout: float = 90) -> None:
    """Until systemd in the container has finished booting (running or degraded)."""
    deadline = time.monotonic() + timeout
    state = "unknown"
    while time.monotonic() < deadline:
        argv = ["docker", "exec", name, "systemctl", "is-system-running"]
        proc = run_command(argv, check=False, timeout=30)
        state = proc.stdout.strip() or proc.stderr.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    logs = run_command(["docker", "logs", "--tail", "15", name], check=False).stdout
    raise LabError(f"{name}: systemd did not finish booting within {timeout:.0f}s (state: {state})\n{logs}")


def ssh_argv(
    paths: LabPaths, port: int, *command: str, timeout: int = 5, address: str = "127.0.0.1"
) -> list[str]:
    """ssh to a lab node with the options the inventory gives Ansible (host key checking on)."""
    return [
        "ssh",
        "-i", str(paths.key),
        *shlex.split(ssh_common_args(paths)),
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={timeout}",
        "-o", "LogLevel=ERROR",
        "-p", str(port),
        f"root@{address}",
        *command,
    ]  # fmt: skip


def ssh_answers(paths: LabPaths, port: int, address: str = "127.0.0.1") -> bool:
    try:
        argv = ssh_argv(paths, port, "true", address=address)
        return run_command(argv, timeout=15, check=False).returncode == 0
    except LabError:
        return False


def wait_for_ssh(paths: LabPaths, port: int, timeout: float = 60, address: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while True:
        proc = run_command(ssh_argv(paths, port, "true", address=address), timeout=15, check=False)
        if proc.returncode == 0:
            return
        if time.monotonic() >= deadline:
            why = proc.stderr.strip()
            raise LabError(f"{address}:{port}: SSH did not answer within {timeout:.0f}s: {why}")
        time.sleep(1)
