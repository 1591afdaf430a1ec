"""Pod autoscaling on GPU metrics (issue 23 item 2): prometheus-adapter's pod_gpu_utilization and the
GPU-idle alert select the right series.

dcgm-exporter labels a GPU's series with the pod, namespace and container that hold it, and only
then (internal/pkg/transformation/kubernetes.go at 4.5.3-4.8.2: the attributes are set `if exists`
in the device-to-pod map). Prometheus gives a series without them the labels of its scrape target
(the Prometheus Operator's ServiceMonitor: namespace, pod, container, service, endpoint), so with
the GPU Operator's honorLabels a GPU that no pod holds reads as a GPU of the exporter pod. The series
below are built by those two rules for one node with two GPUs, one held by team-a/train-0.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from typing import Any

import kubernetes_validate
import yaml

import upstream
from _render import planned_releases, schema_version
from gpubring import releases
from gpubring.inventory import load_inventory
from gpubring.versions import load_pinned
from helpers import DATA, module_utils

_TARGET = {  # the ServiceMonitor's target labels of the GPU Operator's exporter pod
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-7xk2q",
    "container": "nvidia-dcgm-exporter",
    "service": "nvidia-dcgm-exporter",
    "endpoint": "gpu-metrics",
}
SERIES = [
    # GPU 0 held by a pod: the exporter's own labels win (honorLabels)
    {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "gpu-1"}
    | _TARGET
    | {"namespace": "team-a", "pod": "train-0", "container": "trainer"},
    # GPU 1 held by no pod: only the target's labels
    {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "1", "Hostname": "gpu-1"} | _TARGET,
]
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


def selects(selector: str, series: dict[str, str]) -> bool:
    """PromQL's instant-vector selector `name{l op "v", ...}` against one series' labels."""
    name, _, rest = selector.partition("{")
    if name and series.get("__name__") != name:
        return False
    body = rest.rstrip().removesuffix("}")
    for label, op, value in _MATCHER.findall(body):
        have = series.get(label, "")
        ok = {
            "=": have == value,
            "!=": have != value,
            "=~": re.fullmatch(value, have) is not None,
            "!~": re.fullmatch(value, have) is None,
        }[op]
        if not ok:
            return False
    assert _MATCHER.sub("", body) == "", f"unparsed matchers in {selector!r}"
    return True


@cache
def _all_on() -> dict[str, Any]:
    return {r.name: r for r in planned_releases(load_inventory(DATA / "inventories" / "all-on"))}


def test_pod_gpu_utilization_is_served_for_the_pod_that_holds_the_gpu_only() -> None:
    (rule,) = _all_on()["prometheus-adapter"].values["rules"]["custom"]
    assert rule["name"] == {"matches": "^DCGM_FI_DEV_GPU_UTIL$", "as": "pod_gpu_utilization"}
    assert rule["resources"]["overrides"] == {
        "namespace": {"resource": "namespace"},
        "pod": {"resource": "pod"},
    }
    found = [s for s in SERIES if selects(rule["seriesQuery"], s)]
    assert [(s["namespace"], s["pod"]) for s in found] == [("team-a", "train-0")]
    # The adapter puts <<.LabelMatchers>> (namespace="...",pod=~"...") into metricsQuery: asked for
    # the exporter's pods, it still finds none of the free GPUs.
    asked = 'namespace="gpu-operator",pod=~"nvidia-dcgm-exporter-7xk2q"'
    query = rule["metricsQuery"].replace("<<.Series>>", "DCGM_FI_DEV_GPU_UTIL")
    query = query.replace("<<.LabelMatchers>>", asked)
    selector = re.search(r"DCGM_FI_DEV_GPU_UTIL\{[^}]*\}", query)
    assert selector is not None, query
    assert not [s for s in SERIES if selects(selector.group(0), s)]
    assert "by (<<.GroupBy>>)" in rule["metricsQuery"]


def test_the_gpu_idle_alert_is_about_workloads_not_the_exporter() -> None:
    rules = _all_on()["gpu-alerts"].manifests[0]["spec"]["groups"][0]["rules"]
    (idle,) = [r for r in rules if r["alert"] == "GPUIdle"]
    selector = re.search(r"DCGM_FI_DEV_GPU_UTIL\{[^}]*\}", idle["expr"])
    assert selector is not None, idle["expr"]
    found = [s for s in SERIES if selects(selector.group(0), s)]
    assert [s["pod"] for s in found] == ["train-0"]


def test_the_selector_reader_reads_what_it_is_given() -> None:
    assert selects('DCGM_FI_DEV_GPU_UTIL{pod!=""}', SERIES[1])
    assert not selects('DCGM_FI_DEV_GPU_UTIL{pod=~"train-.*",namespace="team-a"}', SERIES[1])
    assert selects('DCGM_FI_DEV_GPU_UTIL{pod=~"train-.*",namespace="team-a"}', SERIES[0])
    assert not selects('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{pod!=""}', SERIES[0])


# -- the verify checks: resource_metrics, hpa_gpu_metric, service_monitor_scrape ---------------------
#
# What the tasks of roles/verify/tasks/cluster_autoscaling.yml register, in the shapes the APIs answer
# (not recorded on a cluster: the lab has no kubelet): NodeMetrics (k8s.io/metrics
# pkg/apis/metrics/v1beta1 types.go), a MetricValueList (k8s.io/metrics pkg/apis/custom_metrics/v1beta1),
# an autoscaling/v2 HPA status, and the Prometheus HTTP API's instant-query answer.

V = module_utils("verify_autoscaling")
NS = "gpubring-verify"
ON = {
    "verify_resource_metrics": True,
    "verify_hpa_gpu": True,
    "verify_service_monitor": True,
    "verify_namespace": NS,
}
OFF = dict.fromkeys(("verify_resource_metrics", "verify_hpa_gpu", "verify_service_monitor"), False) | {
    "verify_namespace": NS
}


def _node_metrics(node: str, cpu: str = "352m", memory: str = "8123456Ki") -> dict[str, Any]:
    return {
        "item": node,
        "changed": False,
        "attempts": 2,
        "api_found": True,
        "resources": [
            {
                "kind": "NodeMetrics",
                "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                "timestamp": "2026-11-27T17:02:11Z",
                "window": "20.031s",
                "usage": {"cpu": cpu, "memory": memory},
            }
        ],
    }


def _kubectl(answer: Any, rc: int = 0, stderr: str = "") -> dict[str, Any]:
    return {
        "changed": False,
        "rc": rc,
        "stdout": json.dumps(answer) if answer is not None else "",
        "stderr": stderr,
    }


POD = "verify-hpa-gpu-6b9d4c7f5d-x2x7q"
CUSTOM = {
    "kind": "MetricValueList",
    "apiVersion": "custom.metrics.k8s.io/v1beta1",
    "metadata": {},
    "items": [
        {
            "describedObject": {"kind": "Pod", "namespace": NS, "name": POD, "apiVersion": "/v1"},
            "metric": {"name": "pod_gpu_utilization", "selector": None},
            "timestamp": "2026-11-27T17:03:40Z",
            "value": "0",
        }
    ],
}
HPA = {
    "resources": [
        {
            "metadata": {"name": "verify-hpa-gpu", "namespace": NS},
            "status": {
                "currentReplicas": 1,
                "desiredReplicas": 1,
                "currentMetrics": [
                    {
                        "type": "Pods",
                        "pods": {"metric": {"name": "pod_gpu_utilization"}, "current": {"averageValue": "0"}},
                    }
                ],
                "conditions": [
                    {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
                    {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"},
                ],
            },
        }
    ]
}
PROMETHEUS = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [
            {
                "metric": {"__name__": name, "namespace": NS, "service": "verify-metrics-app"},
                "value": [1764262990.118, "1"],
            }
            for name in ("http_requests_total", "version")
        ],
    },
}
PASSED: dict[str, Any] = {
    "__verify_test_nodes": ["gpu-01", "gpu-02"],
    "__verify_node_metrics": {
        "results": [_node_metrics("gpu-01"), _node_metrics("gpu-02")],
        "changed": False,
    },
    "__verify_custom_metrics": _kubectl(CUSTOM),
    "__verify_hpa": HPA,
    "__verify_prometheus_query": _kubectl(PROMETHEUS),
}
# Every check fails (test_verify_verdicts.py's failures scenario adds this): gpu-02 has no NodeMetrics,
# the adapter serves nothing for the test pod and the HPA cannot read it, Prometheus has only `up`.
AUTOSCALING_FAILED: dict[str, Any] = ON | {
    "__verify_node_metrics": {
        "results": [
            _node_metrics("gpu-01"),
            {"item": "gpu-02", "resources": [], "api_found": True, "attempts": 60, "changed": False},
            _node_metrics("gpu-03"),
        ]
    },
    "__verify_custom_metrics": _kubectl(CUSTOM | {"items": []}),
    "__verify_hpa": {
        "resources": [
            {
                "status": {
                    "currentReplicas": 1,
                    "desiredReplicas": 0,
                    "conditions": [
                        {"type": "ScalingActive", "status": "False", "reason": "FailedGetPodsMetric"}
                    ],
                }
            }
        ]
    },
    "__verify_prometheus_query": _kubectl(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {
                        "metric": {"__name__": "up", "namespace": NS, "service": "verify-metrics-app"},
                        "value": [1, "1"],
                    },
                ],
            },
        }
    ),
}


def _checks(data: dict[str, Any], settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    checks = V.autoscaling_checks(data, settings)
    assert [c["name"] for c in checks] == list(V.NAMES)
    return {c["name"]: c for c in checks}


def test_every_check_passes_on_a_cluster_that_serves_them() -> None:
    checks = _checks(PASSED, ON)
    assert {n: c["status"] for n, c in checks.items()} == dict.fromkeys(V.NAMES, "passed")
    assert checks["resource_metrics"]["output"]["gpu-02"] == {"cpu": "352m", "memory": "8123456Ki"}
    assert checks["hpa_gpu_metric"]["output"]["custom_metrics"] == {POD: "0"}
    assert checks["hpa_gpu_metric"]["output"]["hpa_current"] == "0"  # an idle GPU is a value too
    assert checks["service_monitor_scrape"]["output"] == ["http_requests_total", "version"]


def test_every_check_fails_with_what_is_missing() -> None:
    checks = _checks({"__verify_test_nodes": ["gpu-01", "gpu-02"]} | AUTOSCALING_FAILED, ON)
    assert {n: (c["status"], c["reason"]) for n, c in checks.items()} == {
        "resource_metrics": ("failed", "no NodeMetrics (cpu, memory) for gpu-02"),
        "hpa_gpu_metric": (
            "failed",
            "custom.metrics.k8s.io returns no pod_gpu_utilization for a pod of verify-hpa-gpu",
        ),
        "service_monitor_scrape": (
            "failed",
            "Prometheus has no series of verify-metrics-app but its own (is the ServiceMonitor selected?)",
        ),
    }
    assert checks["hpa_gpu_metric"]["output"]["hpa_conditions"] == {
        "ScalingActive": "False FailedGetPodsMetric"
    }


def test_the_hpa_must_read_the_value_the_api_serves() -> None:
    no_current = {"resources": [{"status": {"currentReplicas": 1, "currentMetrics": None}}]}
    check = _checks(PASSED | {"__verify_hpa": no_current}, ON)["hpa_gpu_metric"]
    assert (check["status"], check["reason"]) == (
        "failed",
        "the HPA verify-hpa-gpu has no current pod_gpu_utilization",
    )
    # Another pod's value is not the test pod's.
    other = CUSTOM | {
        "items": [CUSTOM["items"][0] | {"describedObject": {"kind": "Pod", "name": "trainer-0"}}]
    }
    check = _checks(PASSED | {"__verify_custom_metrics": _kubectl(other)}, ON)["hpa_gpu_metric"]
    assert check["status"] == "failed" and check["output"]["custom_metrics"] == {}


def test_an_api_that_does_not_answer_is_a_failure_that_says_so() -> None:
    refused = _kubectl(
        None, rc=1, stderr="Error from server (NotFound): the server could not find the requested resource\n"
    )
    checks = _checks(PASSED | {"__verify_custom_metrics": refused, "__verify_prometheus_query": refused}, ON)
    assert checks["hpa_gpu_metric"]["reason"] == (
        "custom.metrics.k8s.io did not answer (exit 1: Error from server (NotFound): the server "
        "could not find the requested resource)"
    )
    assert checks["service_monitor_scrape"]["status"] == "failed"
    bad = _kubectl({"status": "error", "errorType": "bad_data", "error": "parse error"})
    check = _checks(PASSED | {"__verify_prometheus_query": bad}, ON)["service_monitor_scrape"]
    assert check["reason"] == "Prometheus refused the query (bad_data: parse error)"
    garbled = {"rc": 0, "stdout": "<html>502</html>", "stderr": ""}
    check = _checks(PASSED | {"__verify_prometheus_query": garbled}, ON)["service_monitor_scrape"]
    assert check["reason"] == "Prometheus' query API did not answer (the answer is not JSON)"
    # A metric of another service of the namespace is not the workload's.
    elsewhere = copy.deepcopy(PROMETHEUS)
    for series in elsewhere["data"]["result"]:
        series["metric"]["service"] = "something-else"
    check = _checks(PASSED | {"__verify_prometheus_query": _kubectl(elsewhere)}, ON)["service_monitor_scrape"]
    assert check["status"] == "failed"


def test_each_check_is_skipped_with_its_reason() -> None:
    off = _checks({}, OFF)
    assert {n: (c["status"], c["reason"], c["output"]) for n, c in off.items()} == {
        "resource_metrics": ("skipped", "metrics-server is off (metrics_server_enabled)", None),
        "hpa_gpu_metric": (
            "skipped",
            "prometheus-adapter is off (monitoring_enabled, monitoring_adapter)",
            None,
        ),
        "service_monitor_scrape": (
            "skipped",
            "kube-prometheus-stack is off (monitoring_enabled, monitoring_stack)",
            None,
        ),
    }
    stopped = _checks({}, ON)
    assert {c["reason"] for c in stopped.values()} == {V.STOPPED}
    assert {c["status"] for c in stopped.values()} == {"skipped"}
    # The GPU Deployment's tasks skipped: no device-plugin node in this run (a DRA-only cluster).
    skipped = {"skipped": True, "changed": False, "false_condition": "__verify_hpa_resource | length > 0"}
    no_gpu = _checks(PASSED | {"__verify_custom_metrics": skipped, "__verify_hpa": skipped}, ON)
    assert no_gpu["hpa_gpu_metric"]["status"] == "skipped"
    assert no_gpu["hpa_gpu_metric"]["reason"].startswith("no device-plugin GPU node in this run")
    no_node = _checks(PASSED | {"__verify_test_nodes": [], "__verify_node_metrics": {"results": []}}, ON)
    assert no_node["resource_metrics"]["reason"] == "no GPU node of this run to test"


def test_the_verify_role_publishes_them() -> None:
    verdicts = module_utils("verify_verdicts")
    assert set(V.NAMES) <= set(verdicts.CHECK_NAMES)
    names = [c["name"] for c in verdicts.verify_checks({}, OFF)]
    assert [n for n in names if n in V.NAMES] == list(V.NAMES)


# -- the test objects, rendered and validated -------------------------------------------------------


@cache
def _verify_render(name: str, **inputs: Any) -> list[dict[str, Any]]:
    inv = load_inventory(DATA / "inventories" / "all-on")
    text = releases.render_template(inv, f"verify/templates/smoke/{name}", host_vars=inputs)
    objects = yaml.safe_load(text)
    assert isinstance(objects, list)
    return objects


def _service_monitor_crd() -> Any:
    """The ServiceMonitor CRD of the pinned kube-prometheus-stack (its crds subchart), alone: reading
    every pinned chart's CRDs (upstream.crds) takes seconds."""
    version = load_pinned()["monitoring"]["chart"]
    folder = upstream.chart_dir("kube-prometheus-stack", version, to_render=False)
    found = upstream.crd_from_file(folder / "charts" / "crds" / "crds" / "crd-servicemonitors.yaml")
    return found[("monitoring.coreos.com/v1", "ServiceMonitor")]


def test_the_test_objects_validate_at_the_pinned_kubernetes_and_crds() -> None:
    upstream.upstream_dir()
    inv = load_inventory(DATA / "inventories" / "all-on")
    schema = schema_version(inv)
    hpa_objects = _verify_render("autoscaling.yml.j2", __verify_hpa_resource="nvidia.com/gpu")
    app_objects = _verify_render("service-metrics.yml.j2", __verify_service_metrics=True)
    assert [o["kind"] for o in hpa_objects] == ["Deployment", "HorizontalPodAutoscaler"]
    assert [o["kind"] for o in app_objects] == ["Deployment", "Service", "ServiceMonitor"]
    for obj in [*hpa_objects, *app_objects]:
        assert obj["metadata"]["namespace"] == NS
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            assert upstream.crd_errors(obj, _service_monitor_crd()) == [], obj
        else:
            kubernetes_validate.validate(obj, schema, strict=True)
    deployment, hpa = hpa_objects
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "verify-hpa-gpu",
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == "pod_gpu_utilization"
    assert hpa["spec"]["maxReplicas"] == 1  # reads the metric, never takes a second GPU
    app, service, monitor = app_objects
    assert (
        app["spec"]["template"]["spec"]["containers"][0]["image"]
        == load_pinned()["service_metrics"]["app_image"]
    )
    assert service["spec"]["selector"] == app["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"] == service["metadata"]["labels"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    # The verdict's query names the Service the ServiceMonitor scrapes (its `service` target label).
    assert service["metadata"]["name"] == V.METRICS_APP and deployment["metadata"]["name"] == V.HPA_APP


def test_nothing_is_rendered_without_its_input() -> None:
    assert _verify_render("autoscaling.yml.j2") == []
    assert _verify_render("service-metrics.yml.j2") == []
