"""`gpubring plan` renders with Ansible itself; the shortcut it takes for speed changes nothing.

For speed, Ansible parses a copy of hosts.yml that keeps only the host the platform play runs on; the
`groups` magic variable still lists every host. Rendered with Ansible reading the whole inventory, every
release is the same. Rendering leaves Ansible's lookup loader as it found it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _render import planned_releases
from gpubring import releases
from gpubring.inventory import load_inventory
from helpers import REPO

INVENTORIES = [
    REPO / "inventories" / "prod",
    REPO / "tests" / "data" / "inventories" / "mig-timeslicing",
    REPO / "tests" / "data" / "inventories" / "dra-kueue-rdma",
]


@pytest.mark.parametrize("root", INVENTORIES, ids=lambda p: p.name)
def test_the_pruned_inventory_renders_what_the_whole_one_does(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = load_inventory(root)
    releases.ansible_session.cache_clear()
    pruned_vars = releases.host_variables(inv)
    pruned = planned_releases(inv)  # the session's render (pruned: plan_releases as it runs)
    releases.ansible_session.cache_clear()
    monkeypatch.setattr(releases, "pruned_hosts", lambda *_: None)  # Ansible reads all of hosts.yml
    whole_vars = releases.host_variables(inv)
    whole = releases.plan_releases(inv)
    releases.ansible_session.cache_clear()
    assert pruned == whole
    for key in ("groups", "group_names", "inventory_hostname", "inventory_dir", "gpubring_matrix"):
        assert pruned_vars[key] == whole_vars[key], key
    assert set(pruned_vars["groups"]["all"]) == set(inv.hosts)


def test_rendering_puts_the_lookup_loader_back() -> None:
    from ansible._internal._templating import _jinja_plugins
    from ansible.plugins.loader import lookup_loader

    inv = load_inventory(INVENTORIES[0])
    variables = releases.host_variables(inv)
    with pytest.raises(releases.LookupRefused):
        variables.resolve("{{ lookup('pipe', 'true') }}")
    assert _jinja_plugins.lookup_loader is lookup_loader
    assert variables.resolve("{{ gpubring_matrix.helm.version }}") == inv.versions["helm"]["version"]


def test_groups_are_ansibles_own_for_hosts_under_all_and_nested_groups(tmp_path: Path) -> None:
    """Hosts directly under `all` (ungrouped), a host in two groups, nested children: the pruned
    inventory gives the same `groups` as Ansible reading the whole file."""
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(
        "all:\n"
        "  hosts:\n    lone-1:\n    lone-2:\n"
        "  children:\n"
        "    gpu_nodes:\n"
        "      hosts:\n        gpu-9:\n"
        "      children:\n        a100:\n          hosts:\n            gpu-2:\n            gpu-1:\n"
        "    control_plane:\n      hosts:\n        cp-2:\n        cp-1:\n        gpu-1:\n"
    )
    releases.ansible_session.cache_clear()
    pruned = releases.ansible_session(str(hosts), str(tmp_path), "cp-2", ("helm",), ()).variables["groups"]
    assert releases.pruned_hosts(hosts, "cp-2") is not None
    releases.ansible_session.cache_clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(releases, "pruned_hosts", lambda *_: None)
        whole = releases.ansible_session(str(hosts), str(tmp_path), "cp-2", ("helm",), ()).variables["groups"]
    releases.ansible_session.cache_clear()
    assert pruned == whole
    assert whole["ungrouped"] == ["lone-1", "lone-2"]
