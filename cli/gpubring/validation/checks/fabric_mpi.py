"""The fabric test's N-node run needs an MPI operator (fabric_test, mpi_operator), before any host is touched.

The fabric_test role runs its N-node all_reduce_perf as a Kubeflow MPIJob (kubeflow.org/v2beta1); only
the MPI operator reconciles one. With `fabric_test_enabled` and `fabric_test_multi_node` on two or more
tested nodes (`fabric_test_nodes`, else the hosts of `fabric_test_gpu_group`), the inventory must install
it (`mpi_operator_enabled`) or say that the site runs its own (`fabric_test_site_mpi_operator`):
otherwise the run would only report the N-node test as skipped, and the fabric between the nodes would
go untested. Both roles run on the first control plane, so that host's values are the ones checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpubring.validation import specs
from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem

if TYPE_CHECKING:
    from gpubring.model import Inventory

KEYS = (
    "fabric_test_enabled",
    "fabric_test_multi_node",
    "fabric_test_nodes",
    "fabric_test_gpu_group",
    "fabric_test_site_mpi_operator",
    "mpi_operator_enabled",
)


@register_validator
def fabric_test_has_an_mpi_operator(inv: Inventory) -> list[Problem]:
    """A multi-node fabric test needs the MPI operator, installed by gpubring or by the site."""
    first = next(iter(inv.groups.get("control_plane", ())), None)
    if first is None or first not in inv.hosts:
        return []
    host = inv.hosts[first]
    defaults = specs.load_specs().defaults()
    values: dict[str, Any] = {key: host.vars.get(key, defaults.get(key)) for key in KEYS}
    if any(specs.templated(v) for v in values.values()):
        return []  # Ansible evaluates templates; a wrong type is the argument spec check's
    if values["fabric_test_enabled"] is not True or values["fabric_test_multi_node"] is not True:
        return []
    if values["mpi_operator_enabled"] is True or values["fabric_test_site_mpi_operator"] is True:
        return []
    nodes = values["fabric_test_nodes"] or inv.groups.get(str(values["fabric_test_gpu_group"]), ())
    if not isinstance(nodes, (list, tuple)) or len(nodes) < 2:
        return []  # one node: the N-node run is skipped with that reason, no MPIJob is created
    found = inv.origin(first, "fabric_test_enabled") or inv.origin(first, "fabric_test_multi_node")
    file, key = found if found is not None else (inv.hosts_file.name, "fabric_test_enabled")
    return [
        Problem(
            file,
            key,
            "expected mpi_operator_enabled: true (or fabric_test_site_mpi_operator: true where the site runs "
            "its own MPI operator) with fabric_test_enabled and fabric_test_multi_node on "
            f"{len(nodes)} nodes: "
            "the N-node all_reduce_perf is a Kubeflow MPIJob (kubeflow.org/v2beta1) and without an MPI "
            "operator it never runs; or set fabric_test_multi_node: false to test each node alone",
        )
    ]
