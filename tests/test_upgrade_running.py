"""gpubring's record after an upgrade that left a GPU node waiting for its driver's reboot (issue 21
item 2: installed.json says what runs, not the pin), and the Network Operator's release-line rule
(item 13: one line at a time, else refused with the hops). The pending reasons are the words the
roles write into the run's report.json (reboot_pending): the cluster_upgrade role's driver.yml and the
nvidia_driver role's reboot_flag.yml, as tests/test_reboots.py records them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpubring import hops, upgrade
from gpubring.inventory import load_inventory


def _report(hosts: list[str], pending: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "exit_code": 0,
        "check": False,
        "partial": [],
        "stats": {h: {} for h in hosts},
        "reboot_pending": {
            h: {"reasons": r, "because": "gpubring_reboot_allowed is false"} for h, r in pending.items()
        },
    }


@pytest.mark.parametrize(
    ("reasons", "running", "installed"),
    [
        (
            ["nvidia_driver: the loaded nvidia module is 570.133.20, the installed driver 580.105.08",
             "cluster_upgrade: kept cordoned, the NVIDIA module 570.133.20 runs and 580.105.08 is installed"],
            "570.133.20",
            "580.105.08",
        ),
        (["nvidia_driver: the loaded nvidia module is 570.133.20, the installed driver 580.105.08"],
         "570.133.20", "580.105.08"),
        (["nvidia_driver: nouveau is loaded; the loaded nvidia module is 570.1, the installed driver 580.2"],
         "570.1", "580.2"),
        # The reason from the flag file alone does not say which module runs: not recorded as running.
        (["nvidia_driver: the NVIDIA driver needs a reboot"], None, "PIN"),
    ],
)  # fmt: skip
def test_a_node_waiting_for_its_driver_reboot_records_what_runs(
    sample_inventory: Path, tmp_path: Path, reasons: list[str], running: str | None, installed: str
) -> None:
    inv = load_inventory(sample_inventory)
    inv = type(inv)(**{**inv.__dict__, "root": tmp_path})
    pin = inv.versions["nvidia_driver"]["version"]
    gpus = [h for h in inv.hosts if "gpu_nodes" in inv.hosts[h].groups]
    assert upgrade.record_run(inv, _report(list(inv.hosts), {gpus[0]: reasons}), ("host", "cluster"))
    rec = upgrade.load_installed(tmp_path)
    assert rec.hosts[gpus[0]].get("nvidia_driver") == running
    assert rec.hosts[gpus[0]]["nvidia_driver_installed"] == (pin if installed == "PIN" else installed)
    # The other GPU nodes run the pin; the plan upgrades the waiting node's driver again.
    assert rec.hosts[gpus[1]]["nvidia_driver"] == pin
    assert "nvidia_driver_installed" not in rec.hosts[gpus[1]]
    plan = upgrade.plan_upgrade(inv, rec)
    changes = {n.name: [c.component for c in n.changes] for n in plan.nodes}
    assert "nvidia_driver" in changes[gpus[0]]
    assert "nvidia_driver" not in changes[gpus[1]]
    # After the reboot, a run without the pending reason records the pin again.
    assert upgrade.record_run(inv, _report(list(inv.hosts), {}), ("host",))
    rec = upgrade.load_installed(tmp_path)
    assert rec.hosts[gpus[0]]["nvidia_driver"] == pin
    assert "nvidia_driver_installed" not in rec.hosts[gpus[0]]


def test_a_kernel_reboot_alone_keeps_the_driver_pin(sample_inventory: Path, tmp_path: Path) -> None:
    inv = load_inventory(sample_inventory)
    inv = type(inv)(**{**inv.__dict__, "root": tmp_path})
    gpu = next(h for h in inv.hosts if "gpu_nodes" in inv.hosts[h].groups)
    report = _report(list(inv.hosts), {gpu: ["kernel: the kernel arguments changed"]})
    assert upgrade.record_run(inv, report, ("host",))
    assert (
        upgrade.load_installed(tmp_path).hosts[gpu]["nvidia_driver"]
        == inv.versions["nvidia_driver"]["version"]
    )


@pytest.mark.parametrize(
    ("old", "new", "hops"),
    [
        ("25.7.0", "25.7.1", []),
        ("25.7.0", "25.10.0", []),
        ("25.10.1", "26.1.0", []),
        ("25.4.0", "25.10.0", ["25.4", "25.7", "25.10"]),
        ("24.10.1", "25.10.0", ["24.10", "25.1", "25.4", "25.7", "25.10"]),
    ],
)
def test_network_operator_moves_one_release_line_at_a_time(old: str, new: str, hops: list[str]) -> None:
    assert upgrade.network_operator_hops(old, new) == hops


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [("25.10.0", "25.7.0", "older release line"), ("25.5.0", "25.10.0", "not a release line")],
)
def test_network_operator_refusals(old: str, new: str, words: str) -> None:
    with pytest.raises(upgrade.UpgradeError, match=words):
        upgrade.network_operator_hops(old, new)


def test_the_plan_refuses_a_network_operator_two_lines_ahead(sample_inventory: Path, tmp_path: Path) -> None:
    inv = load_inventory(sample_inventory)
    inv = type(inv)(**{**inv.__dict__, "root": tmp_path})
    pin = str(inv.versions["network_operator"]["chart"])
    year, month = (int(p) for p in pin.split(".")[:2])
    two_back = f"{year - 1}.{month + 6}.0" if month <= 4 else f"{year}.{month - 6}.0"
    # Issue 22: the line in between has a chart in versions.yml's gpubring_upgrade_hops, so the plan
    # lists the road (gpubring.hops; `gpubring upgrade` refuses to skip it before any host).
    record = upgrade.Installed({}, {"network-operator": two_back}, {}, tmp_path / "installed.json")
    plan = upgrade.plan_upgrade(inv, record)
    [change] = [c for c in plan.releases if c.component == "network-operator"]
    assert hops.roads([change])[0].via, "the plan must take the line in between"
    # a year back: a line in between (e.g. 25.7) gpubring has no chart for is refused here
    year_back = f"{year - 1}.{month}.0"
    record = upgrade.Installed({}, {"network-operator": year_back}, {}, tmp_path / "installed.json")
    with pytest.raises(upgrade.UpgradeError, match=r"4 release lines at once.*4 upgrades"):
        upgrade.plan_upgrade(inv, record)
    one_back = f"{year - 1}.10.0" if month == 1 else f"{year}.{month - 3}.0"
    record = upgrade.Installed({}, {"network-operator": one_back}, {}, tmp_path / "installed.json")
    plan = upgrade.plan_upgrade(inv, record)
    assert [c.component for c in plan.releases if c.component == "network-operator"] == ["network-operator"]
