"""NodeMetric and the co-location configuration read at the door: exact values, every malformed field named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.colocation import parse_colocation_configmap
from allot_contracts.objects.nodemetric import (
    NodeMetric,
    format_time,
    nodemetric_manifest,
    parse_nodemetric,
    parse_time,
)

GiB = 1024**3


def metric_manifest(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "node-a"},
        "spec": {
            "metricCollectPolicy": {
                "reportIntervalSeconds": 30,
                "nodeAggregatePolicy": {"durations": ["5m", "10m0s"]},
            }
        },
        "status": status,
    }


def parse(manifest: dict[str, Any]) -> tuple[NodeMetric | None, list[FieldIssue], list[FieldIssue]]:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    return parse_nodemetric(manifest, issues, warnings), issues, warnings


def rm(**quantities: str) -> dict[str, Any]:
    """A ResourceMap as upstream writes it."""
    return {"resources": quantities}


def test_a_koordlet_nodemetric_reads_exactly() -> None:
    manifest = metric_manifest(
        updateTime="2026-01-02T03:04:05Z",
        nodeMetric={
            "nodeUsage": rm(cpu="11500m", memory="40Gi"),
            "systemUsage": rm(cpu="500m", memory="2Gi"),
            "aggregatedNodeUsages": [
                {"duration": "5m0s", "usage": {"avg": rm(cpu="10"), "p95": rm(cpu="12", memory="41Gi")}},
                {"duration": "30m", "usage": {"p95": rm(cpu="14")}},
            ],
        },
        podsMetric=[
            {
                "namespace": "web",
                "name": "a",
                "podUsage": rm(cpu="2", memory="4Gi"),
                "priority": "koord-prod",
            },
            {"podUsage": rm(cpu="1"), "extensions": {"allot.dev/pod-uid": "u-1"}},
        ],
        hostApplicationMetric=[
            {"name": "nginx", "usage": rm(cpu="1"), "priority": "koord-prod", "qos": "LS"}
        ],
        prodReclaimableMetric={"resource": rm(cpu="3", memory="6Gi")},
    )
    metric, issues, warnings = parse(manifest)
    assert issues == [] and warnings == []
    assert metric is not None
    assert metric.update_time == parse_time("2026-01-02T03:04:05Z", "", [])
    assert metric.report_interval_s == 30 and metric.aggregate_durations_s == (300, 600)
    assert metric.node_usage == {"cpu": 11500, "memory": 40 * GiB}
    assert metric.system_usage == {"cpu": 500, "memory": 2 * GiB}
    assert metric.prod_reclaimable == {"cpu": 3000, "memory": 6 * GiB}
    assert [(h.name, h.usage) for h in metric.host_apps] == [("nginx", {"cpu": 1000})]
    assert [(p.key, p.uid, p.usage.get("cpu")) for p in metric.pods] == [
        ("", "u-1", 1000),
        ("web/a", "", 2000),
    ]
    # the chosen aggregate: the window asked for, else the longest with a value, else nodeUsage
    assert metric.aggregated("p95", 300) == {"cpu": 12000, "memory": 41 * GiB}
    assert metric.aggregated("p95") == {"cpu": 14000}
    assert metric.aggregated("avg", 1800) is None
    assert metric.aggregated("p99") == metric.node_usage
    # reported system usage is used as it is
    assert metric.effective_system_usage() == {"cpu": 500, "memory": 2 * GiB}
    assert metric.system_usage_derived() == ()


@pytest.mark.parametrize(
    ("where", "status"),
    [
        ("status.nodeMetric.nodeUsage.cpu", {"nodeMetric": {"nodeUsage": {"cpu": "2", "memory": "1Gi"}}}),
        ("status.nodeMetric.systemUsage.cpu", {"nodeMetric": {"systemUsage": {"cpu": "1"}}}),
        (
            "status.nodeMetric.aggregatedNodeUsages[0].usage.p95.cpu",
            {"nodeMetric": {"aggregatedNodeUsages": [{"duration": "5m", "usage": {"p95": {"cpu": "1"}}}]}},
        ),
        ("status.podsMetric[0].podUsage.cpu", {"podsMetric": [{"name": "a", "podUsage": {"cpu": "1"}}]}),
        (
            "status.hostApplicationMetric[0].usage.memory",
            {"hostApplicationMetric": [{"name": "nginx", "usage": {"memory": "1Gi"}}]},
        ),
        ("status.prodReclaimableMetric.resource.cpu", {"prodReclaimableMetric": {"resource": {"cpu": "1"}}}),
        ("status.prodPeakMetric.resource.cpu", {"prodPeakMetric": {"resource": {"cpu": "1"}}}),
        (
            "status.nodeMetric.numaUsages[0].nodeUsage.cpu",
            {"nodeMetric": {"numaUsages": [{"numaNodeID": 0, "nodeUsage": {"cpu": "1"}}]}},
        ),
    ],
)
def test_a_flat_usage_map_is_refused_where_a_resource_map_belongs(where: str, status: dict[str, Any]) -> None:
    metric, issues, _ = parse(metric_manifest(**status))
    assert metric is None
    found = {i.path: i.message for i in issues}
    assert where in found, found
    assert 'a ResourceMap holds quantities under "resources"' in found[where]


def test_every_malformed_field_is_named() -> None:
    manifest = metric_manifest(
        updateTime="yesterday",
        nodeMetric={
            "nodeUsage": rm(cpu="lots", memory="-1Gi"),
            "systemUsage": [],
            "aggregatedNodeUsages": [{"duration": "5x", "usage": {"max": rm(cpu="1")}}],
            "numaUsages": [{"nodeUsage": rm(cpu="1")}, {"numaNodeID": 0}, {"numaNodeID": 0}],
        },
        podsMetric=[
            {"podUsage": rm(cpu="1")},
            {"name": "x", "uid": "u-2", "podUsage": {"resources": {"cpu": "1"}, "devices": {}}},
        ],
    )
    manifest["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] = 0
    metric, issues, _ = parse(manifest)
    assert metric is None
    paths = {i.path for i in issues}
    assert {
        "status.updateTime",
        "status.nodeMetric.nodeUsage.resources[cpu]",
        "status.nodeMetric.nodeUsage.resources[memory]",
        "status.nodeMetric.systemUsage",
        "status.nodeMetric.aggregatedNodeUsages[0].duration",
        "status.nodeMetric.aggregatedNodeUsages[0].usage.max",
        "status.nodeMetric.numaUsages[0].numaNodeID",
        "status.nodeMetric.numaUsages[2].numaNodeID",
        "status.podsMetric[0].name",
        "status.podsMetric[1].uid",
        "status.podsMetric[1].podUsage.devices",
        "spec.metricCollectPolicy.reportIntervalSeconds",
    } <= paths


def test_what_is_read_but_not_acted_on_is_a_warning() -> None:
    metric, issues, warnings = parse(
        metric_manifest(
            nodeMetric={
                "nodeUsage": {
                    "resources": {"cpu": "1"},
                    "devices": [{"type": "gpu", "minor": 0, "health": True}],
                },
                "numaUsages": [
                    {"numaNodeID": 1, "nodeUsage": rm(cpu="400m"), "systemUsage": rm(cpu="100m")},
                    {"numaNodeID": 0, "nodeUsage": rm(cpu="600m")},
                ],
            },
            podsMetric=[{"name": "a", "podUsage": rm(cpu="1"), "extensions": {"vendor.io/x": {"y": 1}}}],
            prodPeakMetric={"resource": rm(cpu="9", memory="20Gi")},
        )
    )
    assert metric is not None and issues == []
    assert sorted(w.path for w in warnings) == [
        "status.nodeMetric.nodeUsage.devices",
        "status.nodeMetric.numaUsages",
        'status.podsMetric[0].extensions["vendor.io/x"]',
        "status.prodPeakMetric",
    ]
    assert [(u.numa_node_id, u.node_usage, u.system_usage) for u in metric.numa_usages] == [
        (0, {"cpu": 600}, {}),
        (1, {"cpu": 400}, {"cpu": 100}),
    ]
    assert metric.prod_peak == {"cpu": 9000, "memory": 20 * GiB}


def test_a_missing_system_usage_is_derived_as_upstream_defines_it() -> None:
    # NodeMetricInfo: SystemUsage = NodeUsage - sum(podUsage) - sum(hostApplicationUsage)
    metric, issues, _ = parse(
        metric_manifest(
            nodeMetric={"nodeUsage": rm(cpu="10", memory="8Gi"), "systemUsage": rm(memory="1Gi")},
            podsMetric=[
                {"name": "a", "podUsage": rm(cpu="6", memory="4Gi")},
                {"name": "b", "podUsage": rm(cpu="1500m", memory="5Gi")},
            ],
            hostApplicationMetric=[{"name": "nginx", "usage": rm(cpu="500m")}],
        )
    )
    assert metric is not None and issues == []
    # cpu derived: 10 - 7.5 - 0.5 = 2; memory reported (derived would be negative: clamped, but it is reported)
    assert metric.effective_system_usage() == {"cpu": 2000, "memory": 1 * GiB}
    assert metric.system_usage_derived() == ("cpu",)
    assert metric.system_and_pods_usage() == {"cpu": 9500, "memory": 10 * GiB}
    over, _, _ = parse(
        metric_manifest(
            nodeMetric={"nodeUsage": rm(cpu="1")}, podsMetric=[{"name": "a", "podUsage": rm(cpu="2")}]
        )
    )
    assert over is not None and over.effective_system_usage() == {"cpu": 0}


def test_written_metrics_read_back_the_same() -> None:
    written = metric_manifest(
        updateTime="2026-01-02T03:04:05.250000Z",
        nodeMetric={
            "nodeUsage": rm(cpu="1500m", memory="3Gi"),
            "systemUsage": rm(cpu="100m", memory="1Gi"),
            "aggregatedNodeUsages": [{"duration": "5m0s", "usage": {"p50": rm(cpu="1")}}],
            "aggregatedSystemUsages": [{"duration": "5m0s", "usage": {"p50": rm(cpu="100m")}}],
            "numaUsages": [{"numaNodeID": 0, "nodeUsage": rm(cpu="1500m"), "systemUsage": {}}],
        },
        podsMetric=[
            {"namespace": "a", "name": "b", "podUsage": rm(cpu="1"), "priority": "koord-batch"},
            {"podUsage": rm(cpu="200m"), "qos": "LS", "extensions": {"allot.dev/pod-uid": "x"}},
        ],
        hostApplicationMetric=[{"name": "nginx", "usage": rm(memory="100Mi"), "qos": "LS"}],
        prodReclaimableMetric={"resource": rm(cpu="0")},
        prodPeakMetric={"resource": rm(cpu="2")},
    )
    written["spec"]["metricCollectPolicy"].update(aggregateDurationSeconds=300)
    written["spec"]["metricCollectPolicy"]["nodeAggregatePolicy"]["durations"] = ["5m0s", "10m0s"]
    original, issues, _ = parse(written)
    assert issues == [] and original is not None
    manifest = nodemetric_manifest(original)
    # the object comes back as upstream writes it (same order of pods aside: they are sorted)
    written["status"]["podsMetric"].reverse()
    assert manifest == written
    again, issues, _ = parse(manifest)
    assert issues == [] and again == original
    assert format_time(original.update_time or 0) == "2026-01-02T03:04:05.250000Z"


CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
    "data": {
        "colocation-config": json.dumps(
            {
                "enable": True,
                "cpuReclaimThresholdPercent": 70,
                "memoryCalculatePolicy": "request",
                "resourceDiffThreshold": 0.05,
                "nodeConfigs": [
                    {"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "enable": False},
                ],
            }
        ),
        "cpu-normalization-config": json.dumps(
            {"enable": True, "ratioModel": {"Intel Xeon": {"baseRatio": 1.2, "hyperThreadEnabledRatio": 1.1}}}
        ),
        "resource-qos-config": "{}",
    },
}


def test_the_slo_controller_configmap_reads_with_node_overrides() -> None:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    config = parse_colocation_configmap(CONFIGMAP, issues, warnings)
    assert issues == [] and config is not None
    assert [w.path for w in warnings] == ["data[resource-qos-config]"]
    cluster, normalization, _ = config.for_node({"pool": "cpu"})
    assert cluster.enable and cluster.cpu_reclaim_threshold_percent == 70
    assert cluster.memory_calculate_policy == "request" and cluster.resource_diff_threshold == "0.05"
    assert cluster.memory_reclaim_threshold_percent == 65  # Koordinator's default where unset
    node, _, _ = config.for_node({"pool": "gpu"})
    assert not node.enable and node.cpu_reclaim_threshold_percent == 70  # inherits the cluster strategy
    assert dict(normalization.ratio_model)["Intel Xeon"].hyper_thread == "1.10"


@pytest.mark.parametrize(
    ("key", "body", "path"),
    [
        (
            "colocation-config",
            {"cpuCalculatePolicy": "request"},
            "data[colocation-config].cpuCalculatePolicy",
        ),
        (
            "colocation-config",
            {"cpuReclaimThresholdPercent": -1},
            "data[colocation-config].cpuReclaimThresholdPercent",
        ),
        ("colocation-config", {"cpuReclaimThreshold": 60}, "data[colocation-config].cpuReclaimThreshold"),
        ("cpu-normalization-config", {"defaultRatio": 9}, "data[cpu-normalization-config].defaultRatio"),
        ("colocation-config", "{not json", "data[colocation-config]"),
    ],
)
def test_a_bad_configuration_is_refused_with_its_path(key: str, body: Any, path: str) -> None:
    issues: list[FieldIssue] = []
    text = body if isinstance(body, str) else json.dumps(body)
    assert parse_colocation_configmap({"data": {key: text}}, issues, []) is None
    assert path in {i.path for i in issues}


def test_a_v1_nodemetric_recorded_flat_reads_as_it_did() -> None:
    """A log recorded before NodeMetrics followed upstream's shape holds flat usage maps and top-level pod uids:
    they are upcast to upstream's shape on read, and read to the same metric."""
    import msgspec

    from allot_contracts.events import AnyEvent, NodeMetricApplied
    from allot_contracts.upcasters import upcast

    recorded = """{"type": "nodemetric.applied.v1", "name": "n1", "manifest": {
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"},
        "status": {
            "updateTime": "2026-01-02T03:04:05Z",
            "nodeMetric": {
                "nodeUsage": {"cpu": "12", "memory": "40Gi"},
                "systemUsage": {"cpu": "500m"},
                "aggregatedNodeUsages": [{"duration": "5m", "usage": {"p95": {"cpu": "14"}}}]
            },
            "podsMetric": [{"namespace": "ns", "name": "web-0", "uid": "u-1", "podUsage": {"cpu": "2"}}],
            "hostApplicationMetric": [{"name": "nginx", "usage": {"cpu": "1"}}],
            "prodReclaimableMetric": {"resource": {"cpu": "3"}}
        }}}"""  # a payload as a v1 log holds it
    payload = upcast("nodemetric.applied.v1", json.loads(recorded))
    event = msgspec.convert(payload, AnyEvent)
    assert isinstance(event, NodeMetricApplied)
    issues: list[FieldIssue] = []
    metric = parse_nodemetric(event.manifest, issues, [])
    assert issues == [] and metric is not None
    assert metric.node_usage == {"cpu": 12_000, "memory": 40 * 2**30}
    assert metric.system_usage == {"cpu": 500}
    assert metric.aggregated("p95") == {"cpu": 14_000}
    assert [(p.name, p.uid, p.usage) for p in metric.pods] == [("web-0", "u-1", {"cpu": 2000})]
    assert metric.prod_reclaimable == {"cpu": 3000}
    assert [h.usage for h in metric.host_apps] == [{"cpu": 1000}]
    # already in upstream's shape: unchanged
    nested = event.manifest
    again = upcast(
        "nodemetric.applied.v1", {"type": "nodemetric.applied.v1", "name": "n1", "manifest": nested}
    )
    assert again["manifest"] == nested
