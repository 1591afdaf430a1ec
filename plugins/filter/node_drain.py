# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Filters of the node_drain role: its decisions, taken from the Node object and the node's pods as the
API returns them (``kubectl get node NAME -o json``, ``kubectl get pods -A --field-selector
spec.nodeName=NAME -o json``), so that they can be tested on recorded objects without an API server.

Filters (FQCN gpubring.core.<name>):

node_drain_cordoned_by(node, annotation_key, annotation_value)
    -> '' (schedulable), 'gpubring' (cordoned, with gpubring's annotation) or 'operator' (cordoned by
       someone else: no annotation). Only gpubring's own cordon is ever undone.
node_drain_workloads(pods)
    -> [{namespace, pod, kind, workload, marker}]: the pods of run-to-completion and gang workloads
       (Jobs, Kueue, Volcano, KAI, Kubeflow MPIJob/PyTorchJob), the ones a GPU-aware drain waits for.
node_drain_workload_names(workloads) -> ['Job team-a/train', ...]: each workload once, in order.
node_drain_remaining_pods(pods)
    -> ['namespace/name', ...]: the pods that keep the node from being empty (not a DaemonSet's, not a
       static pod's mirror, not finished).

The label and annotation names come from the upstream source at the tags gpubring pins (versions.yml)
or, for the Kubeflow operators gpubring does not install, at the release named:

- Kueue v0.14.2: ``kueue.x-k8s.io/queue-name`` (pkg/controller/constants/constants.go QueueLabel: on a
  plain Pod the integration manages), ``kueue.x-k8s.io/podset`` (same file, PodSetLabel: set on the pod
  template of every admitted job by pkg/controller/jobframework/reconciler.go), and
  ``kueue.x-k8s.io/pod-group-name`` (pkg/controller/jobs/pod/constants/constants.go GroupNameLabel).
- Volcano v1.14.4: the pod annotation ``scheduling.k8s.io/group-name``
  (staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go KubeGroupNameAnnotationKey, set by
  pkg/controllers/job/job_controller_util.go and, for any pod Volcano schedules, by
  pkg/controllers/podgroup) and ``volcano.sh/job-name`` (staging/.../batch/v1alpha1/labels.go JobNameKey,
  a label and an annotation of a Volcano Job's pods).
- KAI Scheduler v0.9.8: the pod annotation ``pod-group-name`` (pkg/common/constants/constants.go
  PodGroupAnnotationForPod, set on every pod it schedules by pkg/podgrouper/pod_controller.go).
- Kubeflow training-operator v1.9.4 (PyTorchJob, TFJob, ..., pkg/apis/kubeflow.org/v1/common_types.go)
  and mpi-operator v0.8.0 (MPIJob v2beta1, pkg/apis/kubeflow/v2beta1/constants.go): the pod label
  ``training.kubeflow.org/job-name`` (JobNameLabel). Kubeflow Trainer v2's TrainJob runs its pods in
  batch Jobs (through a JobSet): they are Job pods.

Volcano and KAI annotate the pods of Deployments and StatefulSets they schedule too; those never finish,
so a pod whose controller is a ReplicaSet, StatefulSet, ReplicationController or DaemonSet is never
waited for: it is evicted under its PodDisruptionBudget like any service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

# Controllers whose pods run until deleted: never waited for.
LONG_RUNNING = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController", "DaemonSet"})
# (kind, where, key, what): the first that a pod carries names its workload. A pod of a Kubeflow job
# queued by Kueue is reported as the Kubeflow job: the most specific owner first.
MARKERS: tuple[tuple[str, str, str, str], ...] = (
    ("kubeflow", "labels", "training.kubeflow.org/job-name", "Kubeflow job"),
    ("volcano", "labels", "volcano.sh/job-name", "Volcano Job"),
    ("volcano", "annotations", "volcano.sh/job-name", "Volcano Job"),
    ("volcano", "annotations", "scheduling.k8s.io/group-name", "Volcano PodGroup"),
    ("kai", "annotations", "pod-group-name", "KAI PodGroup"),
    ("kueue", "labels", "kueue.x-k8s.io/pod-group-name", "Kueue pod group"),
    ("kueue", "labels", "kueue.x-k8s.io/podset", "Kueue workload"),
    ("kueue", "labels", "kueue.x-k8s.io/queue-name", "Kueue workload"),
)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED = frozenset({"Succeeded", "Failed"})


def _mapping(value: Any, what: str, filter_name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(
            f"{filter_name}: expected {what} (a mapping, as the API returns it), got {value!r}"
        )
    return value


def _pods(value: Any, filter_name: str) -> list[Mapping[str, Any]]:
    """The pods of a PodList (``{'items': [...]}``) or of a plain list."""
    if isinstance(value, Mapping):
        value = value.get("items")
    if not isinstance(value, list):
        raise AnsibleFilterError(
            f"{filter_name}: expected a PodList (kubectl get pods -o json) or a list of Pods"
        )
    return [_mapping(pod, "a Pod", filter_name) for pod in value]


def _meta(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = (obj.get("metadata") or {}).get(key) or {}
    return value if isinstance(value, Mapping) else {}


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def _active(pod: Mapping[str, Any]) -> bool:
    """A pod that still occupies the node: not finished, not a static pod's mirror."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in FINISHED and MIRROR_ANNOTATION not in _meta(pod, "annotations")


def _name(
    pod: Mapping[str, Any],
    owner: Mapping[str, Any] | None,
    *,
    namespace: str,
    what: str,
    key: str,
    value: Any,
) -> str:
    """How the report names a pod's workload: its owner when the marker's value is not the workload's name
    (a Kueue podset or queue), the owning job's kind for a Kubeflow job."""
    if key in {"kueue.x-k8s.io/podset", "kueue.x-k8s.io/queue-name"}:
        if owner is not None:
            return f"{owner.get('kind')} {namespace}/{owner.get('name')} (Kueue)"
        return f"Pod {namespace}/{(pod.get('metadata') or {}).get('name')} (Kueue)"
    if key == "training.kubeflow.org/job-name" and owner is not None:
        return f"{owner.get('kind')} {namespace}/{value}"
    return f"{what} {namespace}/{value}"


def cordoned_by(node: Any, annotation_key: str, annotation_value: str = "gpubring") -> str:
    """Who cordoned the node: '' when it is schedulable, 'gpubring' when gpubring's annotation is there,
    'operator' for any other cordon (an operator's, another tool's)."""
    node = _mapping(node, "a Node object", "node_drain_cordoned_by")
    if not (node.get("spec") or {}).get("unschedulable"):
        return ""
    return "gpubring" if _meta(node, "annotations").get(annotation_key) == annotation_value else "operator"


def workloads(pods: Any) -> list[dict[str, str]]:
    """The node's pods that belong to a Job or a gang workload and still run (or wait to)."""
    out: list[dict[str, str]] = []
    for pod in _pods(pods, "node_drain_workloads"):
        if not _active(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        owner = _controller(pod)
        if owner is not None and owner.get("kind") in LONG_RUNNING:
            continue
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        found = None
        for kind, where, key, what in MARKERS:
            value = _meta(pod, where).get(key)
            if value:
                found = {
                    "kind": kind,
                    "workload": _name(pod, owner, namespace=namespace, what=what, key=key, value=value),
                    "marker": key,
                }
                break
        if (
            found is None
            and owner is not None
            and owner.get("kind") == "Job"
            and str(owner.get("apiVersion", "")).startswith("batch/")
        ):
            found = {
                "kind": "job",
                "workload": f"Job {namespace}/{owner.get('name')}",
                "marker": "ownerReferences",
            }
        if found is not None:
            out.append({"namespace": namespace, "pod": str(pod["metadata"].get("name")), **found})
    return out


def workload_names(found: Any) -> list[str]:
    """Each workload of node_drain_workloads' result once, in the order found."""
    if not isinstance(found, list):
        raise AnsibleFilterError(
            f"node_drain_workload_names: expected node_drain_workloads' list, got {found!r}"
        )
    return list(dict.fromkeys(str(item.get("workload")) for item in found if isinstance(item, Mapping)))


def remaining_pods(pods: Any) -> list[str]:
    """'namespace/name' of each pod that keeps the node from being empty after a drain."""
    out = []
    for pod in _pods(pods, "node_drain_remaining_pods"):
        owner = _controller(pod)
        if not _active(pod) or (owner is not None and owner.get("kind") == "DaemonSet"):
            continue
        meta = pod.get("metadata") or {}
        out.append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    return out


class FilterModule:
    """gpubring node drain filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "node_drain_cordoned_by": cordoned_by,
            "node_drain_workloads": workloads,
            "node_drain_workload_names": workload_names,
            "node_drain_remaining_pods": remaining_pods,
        }
