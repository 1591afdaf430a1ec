# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""The verdicts of the verify role's autoscaling and service-metrics tests
(roles/verify/tasks/cluster_autoscaling.yml).

autoscaling_checks(gathered, settings) -> [resource_metrics, hpa_gpu_metric, service_monitor_scrape]

CNCF Kubernetes AI Conformance: pod_autoscaling and accelerator_metrics (an HPA on a GPU metric),
ai_service_metrics (Prometheus scrapes a workload's own metrics through a ServiceMonitor).

- resource_metrics: metrics.k8s.io/v1beta1 (metrics-server) returns a NodeMetrics with CPU and memory
  usage for every tested GPU node (kubernetes.core.k8s_info per node: __verify_node_metrics, a loop's
  results, each {item: node, resources: [NodeMetrics]}).
- hpa_gpu_metric: a raw GET of /apis/custom.metrics.k8s.io/v1beta1/namespaces/NS/pods/*/pod_gpu_utilization
  (kubectl get --raw: __verify_custom_metrics, {rc, stdout: a MetricValueList}) returns a value for a
  pod of the one-GPU test Deployment verify-hpa-gpu, and the HPA verify-hpa-gpu (k8s_info:
  __verify_hpa) carries the metric in status.currentMetrics (type Pods, metric.name
  pod_gpu_utilization, current.averageValue).
- service_monitor_scrape: Prometheus' query API, through the API server's service proxy (kubectl get
  --raw: __verify_prometheus_query, {rc, stdout: the query API's JSON}), returns series of the test
  workload verify-metrics-app (namespace NS, service verify-metrics-app) other than the ones Prometheus
  writes itself for every target (up, scrape_*).

A gathered name that is missing or None is a test the run did not reach; a registered result with
`skipped` is a test whose switch was off. Each check: {name, status, expected, output, reason}.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpubring.core.plugins.module_utils import verify_common

STOPPED = verify_common.STOPPED
_check = verify_common.check
_map = verify_common.mapping
_bool = verify_common.truthy

NAMES = ("resource_metrics", "hpa_gpu_metric", "service_monitor_scrape")
METRIC = "pod_gpu_utilization"
HPA_APP = "verify-hpa-gpu"
METRICS_APP = "verify-metrics-app"
# Series Prometheus adds for every target it scrapes (not the workload's own).
SYNTHETIC = ("up", "scrape_duration_seconds", "scrape_samples_scraped",
             "scrape_samples_post_metric_relabeling", "scrape_series_added")  # fmt: skip


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _json(result: Any) -> tuple[Any, str]:
    """The JSON a `kubectl get --raw` printed, or None and why not."""
    result = _map(result)
    if result.get("rc") != 0:
        said = str(result.get("stderr") or result.get("msg") or "").strip().splitlines()
        return None, f"exit {result.get('rc')}: {said[-1] if said else 'no message'}"
    try:
        return json.loads(str(result.get("stdout", ""))), ""
    except ValueError:
        return None, "the answer is not JSON"


def resource_metrics(node_metrics: Any, test_nodes: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    expected = (
        "metrics.k8s.io/v1beta1 returns a NodeMetrics with cpu and memory usage for every tested GPU node"
    )
    results = _list(_map(node_metrics).get("results"))
    usage: dict[str, Any] = {}
    for result in results:
        node = str(_map(result).get("item", ""))
        found = [r for r in _list(_map(result).get("resources")) if _map(r).get("kind") == "NodeMetrics"]
        usage[node] = _map(_map(found[0]).get("usage")) if found else None
        if not found and _map(result).get("msg"):
            usage[node] = {"error": str(_map(result)["msg"])}
    output = usage if node_metrics is not None else None
    if not _bool(settings.get("verify_resource_metrics")):
        return _check(NAMES[0], expected, None, "skipped", "metrics-server is off (metrics_server_enabled)")
    if test_nodes is None or node_metrics is None:
        return _check(NAMES[0], expected, output, "skipped", STOPPED)
    if not test_nodes:
        return _check(NAMES[0], expected, output, "skipped", "no GPU node of this run to test")
    missing = [
        node for node in test_nodes
        if not (isinstance(usage.get(node), Mapping) and {"cpu", "memory"} <= set(usage[node]))
    ]  # fmt: skip
    if missing:
        return _check(
            NAMES[0], expected, output, "failed", "no NodeMetrics (cpu, memory) for " + ", ".join(missing)
        )
    return _check(NAMES[0], expected, output, "passed", "")


def _pod_values(answer: Any) -> dict[str, str]:
    """pod name -> value of pod_gpu_utilization in a custom.metrics.k8s.io MetricValueList."""
    values: dict[str, str] = {}
    for item in _list(_map(answer).get("items")):
        described = _map(_map(item).get("describedObject"))
        if described.get("kind") == "Pod" and _map(_map(item).get("metric")).get("name", METRIC) == METRIC:
            values[str(described.get("name"))] = str(_map(item).get("value"))
    return values


def _hpa_current(hpa: Any) -> tuple[str | None, Any]:
    """The HPA's current averageValue of pod_gpu_utilization (None: not there) and its status."""
    found = _list(_map(hpa).get("resources"))
    status = _map(_map(found[0]).get("status")) if found else {}
    for metric in _list(status.get("currentMetrics")):
        pods = _map(_map(metric).get("pods"))
        if _map(metric).get("type") == "Pods" and _map(pods.get("metric")).get("name") == METRIC:
            value = _map(pods.get("current")).get("averageValue")
            return (None if value is None else str(value)), status
    return None, status


def hpa_gpu_metric(custom: Any, hpa: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    expected = (
        f"custom.metrics.k8s.io returns {METRIC} for a pod of the one-GPU Deployment {HPA_APP}, and the "
        f"HorizontalPodAutoscaler {HPA_APP} reads it (status.currentMetrics)"
    )
    if not _bool(settings.get("verify_hpa_gpu")):
        reason = "prometheus-adapter is off (monitoring_enabled, monitoring_adapter)"
        return _check(NAMES[1], expected, None, "skipped", reason)
    if custom is None or hpa is None:
        return _check(NAMES[1], expected, None, "skipped", STOPPED)
    if _map(custom).get("skipped") or _map(hpa).get("skipped"):
        reason = "no device-plugin GPU node in this run (the test Deployment asks for one GPU)"
        return _check(NAMES[1], expected, None, "skipped", reason)
    answer, why = _json(custom)
    ours = {pod: value for pod, value in _pod_values(answer).items() if pod.startswith(HPA_APP + "-")}
    current, status = _hpa_current(hpa)
    output = {
        "custom_metrics": ours if answer is not None else why,
        "hpa_current": current,
        "hpa_conditions": {
            str(_map(c).get("type")): f"{_map(c).get('status')} {_map(c).get('reason', '')}".strip()
            for c in _list(status.get("conditions"))
        },
    }
    if answer is None:
        return _check(NAMES[1], expected, output, "failed", f"custom.metrics.k8s.io did not answer ({why})")
    if not ours:
        reason = f"custom.metrics.k8s.io returns no {METRIC} for a pod of {HPA_APP}"
        return _check(NAMES[1], expected, output, "failed", reason)
    if current is None:
        return _check(NAMES[1], expected, output, "failed", f"the HPA {HPA_APP} has no current {METRIC}")
    return _check(NAMES[1], expected, output, "passed", "")


def service_monitor_scrape(query: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    expected = (
        f"Prometheus' query API returns the own series of {METRICS_APP} (namespace "
        f"{settings.get('verify_namespace')}), scraped through its ServiceMonitor"
    )
    if not _bool(settings.get("verify_service_monitor")):
        reason = "kube-prometheus-stack is off (monitoring_enabled, monitoring_stack)"
        return _check(NAMES[2], expected, None, "skipped", reason)
    if query is None:
        return _check(NAMES[2], expected, None, "skipped", STOPPED)
    answer, why = _json(query)
    if answer is None:
        return _check(NAMES[2], expected, why, "failed", f"Prometheus' query API did not answer ({why})")
    if _map(answer).get("status") != "success":
        error = f"{_map(answer).get('errorType', '')}: {_map(answer).get('error', '')}".strip(": ")
        return _check(NAMES[2], expected, error, "failed", f"Prometheus refused the query ({error})")
    names = sorted(
        {
            str(_map(_map(r).get("metric")).get("__name__"))
            for r in _list(_map(_map(answer).get("data")).get("result"))
            if _map(_map(r).get("metric")).get("namespace") == settings.get("verify_namespace")
            and _map(_map(r).get("metric")).get("service") == METRICS_APP
        }
        - set(SYNTHETIC)
    )
    if not names:
        reason = f"Prometheus has no series of {METRICS_APP} but its own (is the ServiceMonitor selected?)"
        return _check(NAMES[2], expected, names, "failed", reason)
    return _check(NAMES[2], expected, names, "passed", "")


def autoscaling_checks(gathered: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The three checks, in the order of NAMES."""
    return [
        resource_metrics(
            gathered.get("__verify_node_metrics"), gathered.get("__verify_test_nodes"), settings
        ),
        hpa_gpu_metric(gathered.get("__verify_custom_metrics"), gathered.get("__verify_hpa"), settings),
        service_monitor_scrape(gathered.get("__verify_prometheus_query"), settings),
    ]
