# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filters of the cluster_upgrade role: the decisions of `gpubring upgrade`, on recorded API objects.

cluster_upgrade_node_ready(node, version, since) -> {ready: bool, why: str}
    The Ready gate after a kubelet restart: the Node object's status.nodeInfo.kubeletVersion is
    v<version>, and its Ready condition is True with a lastHeartbeatTime after `since` (the node's
    clock, read just before the restart, RFC 3339). A kubelet reports its node status as soon as it
    starts (its first status update always patches: kubelet_node_status.go, tryUpdateNodeStatus,
    nodeStatusReportFrequency measured from a zero lastStatusReportTime), so a kubelet that came up
    has a heartbeat newer than the restart; an older one is the status of the kubelet before it.
cluster_upgrade_not_ready(nodes) -> [str]
    The names of the Node objects (a `kubectl get nodes -o json` list) whose Ready condition is not True.
cluster_upgrade_driver_state(loaded, installed) -> {loaded, installed, reboot_needed}
    The NVIDIA kernel module that runs (/sys/module/nvidia/version) against the one installed for the
    running kernel (modinfo): a node whose driver user space changed under an old module needs a reboot.
cluster_upgrade_pdb_blockers(pdbs, pods, nodes) -> [{namespace, name, pods}]
    The PodDisruptionBudgets (policy/v1 list items) with status.disruptionsAllowed 0 that select a pod
    (not a DaemonSet's, a mirror pod or a finished one: a drain does not evict those) on one of `nodes`.
cluster_upgrade_deprecated_apis(metrics) -> [{group, version, resource, removed_release, text}]
    The series of apiserver_requested_deprecated_apis in the API server's /metrics text (a deprecated
    API that was requested since the API server started; value 1).
cluster_upgrade_containerd_config_version(version) -> int
    The config format of a containerd release: 3 for containerd 2.x, 2 for 1.x (containerd's
    docs/PLUGINS.md and RELEASES.md: 2.0 reads version 3 and migrates older files).
cluster_upgrade_toml_version(text) -> int | None
    The top-level `version = N` of a containerd config file (a drop-in).
cluster_upgrade_containerd_runtimes(dump) -> [str]
    The CRI runtime names of `containerd config dump` (1.x: plugins."io.containerd.grpc.v1.cri",
    2.x: plugins."io.containerd.cri.v1.runtime"), parsed as TOML.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    text = str(value).strip().replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _ready_condition(node: Mapping[str, Any]) -> Mapping[str, Any]:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond
    return {}


def cluster_upgrade_node_ready(node: Mapping[str, Any] | None, version: str, since: str) -> dict[str, Any]:
    if not node:
        return {"ready": False, "why": "the Node object is missing"}
    want = "v" + str(version).lstrip("v")
    have = str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "")
    if have != want:
        return {"ready": False, "why": f"its kubelet reports {have or 'no version'}, not {want}"}
    cond = _ready_condition(node)
    start = _time(since)
    beat = _time(cond.get("lastHeartbeatTime"))
    if start is None:
        return {"ready": False, "why": f"the restart time {since!r} is not a time"}
    if beat is None or beat <= start:
        seen = cond.get("lastHeartbeatTime") or "none"
        return {
            "ready": False,
            "why": f"no Ready heartbeat since the restart at {since} (the last: {seen}): the status is the old kubelet's",
        }
    if cond.get("status") != "True":
        reason = cond.get("reason") or cond.get("status") or "no Ready condition"
        return {"ready": False, "why": f"Ready is {cond.get('status', 'missing')} ({reason})"}
    return {"ready": True, "why": f"kubelet {want}, Ready, heartbeat {cond.get('lastHeartbeatTime')}"}


def cluster_upgrade_not_ready(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    out = []
    for node in nodes or []:
        if _ready_condition(node).get("status") != "True":
            out.append(str((node.get("metadata") or {}).get("name", "")))
    return out


def cluster_upgrade_driver_state(loaded: str | None, installed: str | None) -> dict[str, Any]:
    run = str(loaded or "").strip()
    have = str(installed or "").strip()
    return {"loaded": run, "installed": have, "reboot_needed": bool(run and have and run != have)}


def _selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector (metav1.LabelSelector). A null selector selects nothing, an empty one every
    pod of the namespace (policy/v1 PodDisruptionBudget semantics)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _evicted(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def cluster_upgrade_pdb_blockers(
    pdbs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], nodes: Sequence[str]
) -> list[dict[str, Any]]:
    drained = set(nodes or [])
    candidates = [p for p in pods or [] if (p.get("spec") or {}).get("nodeName") in drained and _evicted(p)]
    out = []
    for pdb in pdbs or []:
        if int((pdb.get("status") or {}).get("disruptionsAllowed") or 0) > 0:
            continue
        meta = pdb.get("metadata") or {}
        namespace = meta.get("namespace", "")
        selector = (pdb.get("spec") or {}).get("selector")
        hit = [
            f"{namespace}/{p['metadata']['name']} on {p['spec']['nodeName']}"
            for p in candidates
            if (p.get("metadata") or {}).get("namespace") == namespace
            and _selects(selector, (p.get("metadata") or {}).get("labels") or {})
        ]
        if hit:
            out.append({"namespace": namespace, "name": meta.get("name", ""), "pods": hit})
    return out


_DEPRECATED = re.compile(r"^apiserver_requested_deprecated_apis\{([^}]*)\}\s+(\S+)", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def cluster_upgrade_deprecated_apis(metrics: str) -> list[dict[str, str]]:
    out = []
    for labels, value in _DEPRECATED.findall(metrics or ""):
        if value in ("0", "0.0"):
            continue
        found = dict(_LABEL.findall(labels))
        entry = {
            "group": found.get("group", ""),
            "version": found.get("version", ""),
            "resource": found.get("resource", "")
            + (f"/{found['subresource']}" if found.get("subresource") else ""),
            "removed_release": found.get("removed_release", ""),
        }
        removal = (
            f"removed in {entry['removed_release']}" if entry["removed_release"] else "no removal planned"
        )
        api = f"{entry['group']}/{entry['version']}" if entry["group"] else entry["version"]
        entry["text"] = f"{entry['resource']} {api} ({removal})"
        out.append(entry)
    return sorted(out, key=lambda d: (d["removed_release"], d["group"], d["resource"]))


def cluster_upgrade_containerd_config_version(version: str) -> int:
    match = re.match(r"\s*v?(\d+)\.", str(version or ""))
    return 3 if match and int(match.group(1)) >= 2 else 2


def cluster_upgrade_toml_version(text: str) -> int | None:
    match = re.search(r"(?m)^\s*version\s*=\s*(\d+)\s*$", str(text or ""))
    return int(match.group(1)) if match else None


def cluster_upgrade_containerd_runtimes(dump: str) -> list[str]:
    try:
        data = tomllib.loads(str(dump or ""))
    except tomllib.TOMLDecodeError:
        return []
    names: list[str] = []
    for plugin, conf in (data.get("plugins") or {}).items():
        if "cri" not in plugin or not isinstance(conf, Mapping):
            continue
        runtimes = (conf.get("containerd") or {}).get("runtimes") or {}
        names.extend(str(n) for n in runtimes if n not in names)
    return names


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "cluster_upgrade_node_ready": cluster_upgrade_node_ready,
            "cluster_upgrade_not_ready": cluster_upgrade_not_ready,
            "cluster_upgrade_driver_state": cluster_upgrade_driver_state,
            "cluster_upgrade_pdb_blockers": cluster_upgrade_pdb_blockers,
            "cluster_upgrade_deprecated_apis": cluster_upgrade_deprecated_apis,
            "cluster_upgrade_containerd_config_version": cluster_upgrade_containerd_config_version,
            "cluster_upgrade_toml_version": cluster_upgrade_toml_version,
            "cluster_upgrade_containerd_runtimes": cluster_upgrade_containerd_runtimes,
        }
