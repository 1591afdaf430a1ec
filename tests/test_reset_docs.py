"""What the docs say a reset does to the firewall is what roles/kubeadm_join/tasks/reset.yml does
(issue 21 item 10): docs/cluster.md and the kubeadm_join README said iptables rules were left, while
the role removes the chains of kube-proxy, the kubelet and the CNI plugins (the prefixes of
vars/reset.yml), deletes kube-proxy's and Calico's nftables tables, keeps the host's own rules and
leaves IPVS. Each reset doc names those prefixes and tables, and none says the rules are left."""

from __future__ import annotations

import re

import pytest
import yaml

from helpers import REPO

RESET_VARS = yaml.safe_load((REPO / "roles" / "kubeadm_join" / "vars" / "reset.yml").read_text())
RESET_TASKS = (REPO / "roles" / "kubeadm_join" / "tasks" / "reset.yml").read_text()
DOCS = ["docs/cluster.md", "roles/kubeadm_join/README.md", "docs/operations.md"]


def test_the_role_does_what_the_docs_are_held_to() -> None:
    """The facts the docs are checked against: the role restores iptables tables without the chains
    and deletes the nftables tables (a change there must change the docs and this test)."""
    assert RESET_VARS["__kubeadm_join_reset_chain_prefixes"] == [
        "KUBE-",
        "CNI-",
        "cali-",
        "CILIUM_",
        "FLANNEL-",
    ]
    assert RESET_VARS["__kubeadm_join_reset_nft_names"] == ["kube-proxy", "calico"]
    assert "iptables-save" in RESET_TASKS and "ip6tables-save" in RESET_TASKS
    assert "replace('-save', '-restore')" in RESET_TASKS
    assert "['nft', 'delete', 'table']" in RESET_TASKS


@pytest.mark.parametrize("doc", DOCS)
def test_each_reset_doc_says_what_happens_to_the_firewall(doc: str) -> None:
    text = " ".join((REPO / doc).read_text(encoding="utf-8").split())
    for prefix in RESET_VARS["__kubeadm_join_reset_chain_prefixes"]:
        assert f"`{prefix}*`" in text, f"{doc}: the chains {prefix}* the reset removes are not named"
    for table in RESET_VARS["__kubeadm_join_reset_nft_names"]:
        assert f"`{table}`" in text, f"{doc}: the nftables table {table} the reset deletes is not named"
    assert "IPVS" in text, f"{doc}: does not say IPVS tables are left"
    wrong = re.search(r"iptables(/IPVS)? rules are (left|not flushed)", text)
    assert wrong is None, f"{doc}: says {wrong.group(0)!r}, but reset.yml removes Kubernetes' chains"
