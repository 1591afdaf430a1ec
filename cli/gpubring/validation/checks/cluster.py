"""Cross-field checks of the cluster phase's inputs (kubeadm_control_plane), before any host is touched.

- An inventory name is the Kubernetes node name of its host (kubeadm registers it, node_labels and
  node_remove.yml address the Node by it): it must be a lower-case RFC 1123 subdomain.

kubeadm_control_plane also asserts at run time that several control planes have an endpoint in
front of them (gpubring_control_plane_endpoint, or kubeadm_control_plane_kube_vip_address); that is
not refused here, because test and lab inventories with three control planes and no endpoint exist
for phases that never run kubeadm.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpubring.validation.crosshost import register_validator
from gpubring.yamlfile import Problem

if TYPE_CHECKING:
    from gpubring.model import Inventory

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@register_validator
def node_names(inv: Inventory) -> list[Problem]:
    """Every inventory name must be usable as a Kubernetes node name."""
    file = inv.hosts_file.name
    return [
        Problem(
            file,
            name,
            "a host name that is also a Kubernetes node name: lower-case letters, digits, '-' and '.', "
            "at most 253 characters (RFC 1123)",
        )
        for name in inv.hosts
        if len(name) > 253 or not _NODE_NAME.match(name)
    ]
