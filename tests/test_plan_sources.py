"""`gpubring versions` and `plan` show what each host really gets where its inputs choose the source.

The driver (nvidia_driver_source), containerd (containerd_source) and the container toolkit
(nvidia_container_toolkit_owner) are chosen per host: a distribution source installs the distribution's
package (Debian 12: driver 535, containerd 1.6), not the pin, and the toolkit of an operator-owned node is
the GPU Operator's. The versions table shows one row per group of hosts that share a source.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from gpubring import planning
from gpubring.inventory import load_inventory

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py

DISTRIBUTION = {
    # Every host: Debian's containerd. Two GPU nodes: Debian's driver, one held at a version.
    "group_vars/all/containerd.yml": "---\ncontainerd_source: distribution\n",
    "host_vars/gpu-1.yml": "---\nnvidia_driver_source: distribution\n",
    "host_vars/gpu-2.yml": (
        "---\nnvidia_driver_source: distribution\nnvidia_driver_distribution_version: 535.261.03-1\n"
    ),
    "host_vars/gpu-3.yml": "---\nnvidia_container_toolkit_owner: operator\n",
}


def _rows(root: Path) -> dict[tuple[str, str], tuple[str, ...]]:
    return {(s.pin, s.version): s.hosts for s in planning.host_sources(load_inventory(root))}


def test_sample_hosts_get_the_pins(sample_inventory: Path) -> None:
    inv = load_inventory(sample_inventory)
    rows = _rows(sample_inventory)
    gpus = tuple(inv.groups["gpu_nodes"])
    assert rows[("nvidia_driver.version", inv.versions["nvidia_driver"]["version"])] == gpus
    assert rows[("containerd.version", inv.versions["containerd"]["version"])] == tuple(inv.hosts)
    assert (
        rows[("nvidia_container_toolkit.version", inv.versions["nvidia_container_toolkit"]["version"])]
        == gpus
    )


def test_distribution_sources_show_the_distribution_package(make_inventory: MakeInventory) -> None:
    root = make_inventory(DISTRIBUTION)
    inv = load_inventory(root)
    pin = inv.versions["nvidia_driver"]["version"]
    sources = {(s.pin, s.source, s.version): s.hosts for s in planning.host_sources(inv)}
    assert sources == {
        ("nvidia_driver.branch", "nvidia_driver_source: distribution", planning.DISTRIBUTION_PACKAGE): (
            "gpu-1",
            "gpu-2",
        ),
        (
            "nvidia_driver.branch",
            "nvidia_driver_source: cuda_repo",
            inv.versions["nvidia_driver"]["branch"],
        ): (
            "gpu-3",
            "gpu-4",
        ),
        ("nvidia_driver.version", "nvidia_driver_source: distribution", planning.DISTRIBUTION_PACKAGE): (
            "gpu-1",
        ),
        ("nvidia_driver.version", "nvidia_driver_source: distribution", "535.261.03-1"): ("gpu-2",),
        ("nvidia_driver.version", "nvidia_driver_source: cuda_repo", pin): ("gpu-3", "gpu-4"),
        ("containerd.version", "containerd_source: distribution", planning.DISTRIBUTION_PACKAGE): tuple(
            inv.hosts
        ),
        (
            "nvidia_container_toolkit.version",
            "nvidia_container_toolkit_owner: host",
            inv.versions["nvidia_container_toolkit"]["version"],
        ): ("gpu-1", "gpu-2", "gpu-4"),
        (
            "nvidia_container_toolkit.version",
            "nvidia_container_toolkit_owner: operator",
            f"the GPU Operator's toolkit (chart {inv.versions['gpu_operator']['chart']})",
        ): ("gpu-3",),
    }


def test_versions_and_plan_print_the_source_per_group_of_hosts(make_inventory: MakeInventory) -> None:
    from gpubring.app import app

    root = make_inventory(DISTRIBUTION)
    inv = load_inventory(root)
    for command in ("versions", "plan"):
        result = CliRunner().invoke(app, [command, str(root)])
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        containerd = [
            " ".join(line.split()) for line in lines if line.strip().startswith("containerd.version")
        ]
        assert containerd == [
            "containerd.version distribution package containerd_source: distribution on "
            "cp-1, cp-2, cp-3, gpu-1, gpu-2, gpu-3, gpu-4, cpu-1 [8]"
        ], command
        driver = [line for line in lines if line.strip().startswith("nvidia_driver.version")]
        assert len(driver) == 3, driver
        assert any("distribution package" in d and "gpu-1 [1]" in d for d in driver), driver
        assert any("535.261.03-1" in d and "gpu-2 [1]" in d for d in driver), driver
        pinned = inv.versions["nvidia_driver"]["version"]
        assert any(pinned in d and "cuda_repo on gpu-3, gpu-4 [2]" in d for d in driver), driver
        assert not any(
            inv.versions["containerd"]["version"] in line for line in lines if "containerd" in line
        )
    result = CliRunner().invoke(app, ["versions", str(root), "--json", "-"])
    per_host = json.loads(result.output)["per_host"]
    assert {
        "pin": "containerd.version",
        "source": "containerd_source: distribution",
        "version": "distribution package",
        "hosts": list(inv.hosts),
    } in per_host
