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

import re
from functools import cache
from typing import Any

from gpubring.inventory import load_inventory
from gpubring.releases import plan_releases
from helpers import DATA

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
    return {r.name: r for r in plan_releases(load_inventory(DATA / "inventories" / "all-on"))}


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
