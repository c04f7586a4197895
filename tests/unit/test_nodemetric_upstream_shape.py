"""NodeMetrics exactly as koordlet writes them (every usage a ResourceMap: ``{resources: {cpu: ..}}``) reach load-aware
scheduling, overcommit and ``allot explain node`` through the services' decision code (the simulator); a flat usage
map, which koordlet never writes, is refused at the door with the path of the misplaced quantity."""

from __future__ import annotations

import asyncio
from typing import Any

import yaml

from allot_intake.documents import Document
from allot_intake.manifests import admit_all
from allot_testing.builders import a_node
from allot_testing.scenario import Scenario

# What koordlet reports for a node at 92 % cpu (29.44 of 32) and for an idle one (koordlet's shape, as
# pkg/koordlet/statesinformer/impl/states_nodemetric.go collectMetric fills NodeMetricInfo and PodMetricInfo).
METRICS = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: node-a}
spec:
  metricCollectPolicy:
    aggregateDurationSeconds: 300
    reportIntervalSeconds: 60
    nodeAggregatePolicy: {durations: [5m0s, 10m0s, 30m0s]}
status:
  nodeMetric:
    nodeUsage:
      resources: {cpu: 29440m, memory: 40Gi}
    systemUsage:
      resources: {cpu: 440m, memory: 2Gi}
    aggregatedNodeUsages:
    - duration: 5m0s
      usage:
        avg: {resources: {cpu: 29000m, memory: 40Gi}}
        p95: {resources: {cpu: 30100m, memory: 41Gi}}
  podsMetric:
  - name: batch-0
    namespace: jobs
    podUsage:
      resources: {cpu: "29", memory: 38Gi}
    priority: koord-batch
    qos: BE
---
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: node-b}
spec:
  metricCollectPolicy: {aggregateDurationSeconds: 300, reportIntervalSeconds: 60}
status:
  nodeMetric:
    nodeUsage:
      resources: {cpu: 1600m, memory: 12Gi}
    systemUsage:
      resources: {cpu: 400m, memory: 2Gi}
---
"""
POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: apps}
spec:
  containers:
  - name: web
    image: nginx
    resources:
      requests: {cpu: "2", memory: 4Gi}
"""


def cluster(config: dict[str, Any] | None = None) -> Scenario:
    """Two identical 32-CPU nodes."""
    return Scenario(config).apply(a_node("node-a"), a_node("node-b"))


def test_a_pod_goes_to_the_idle_node_when_koordlet_reports_the_other_at_92_percent() -> None:
    sc = cluster().apply_yaml(METRICS).apply_yaml(POD)
    reported = {r.payload_dict()["name"] for r in sc.events if r.type == "nodemetric.reported"}
    assert reported == {"node-a", "node-b"}
    final = {d["pod"]: d for d in sc.decisions()}
    assert final["apps/web"]["outcome"] == "Scheduled"
    assert final["apps/web"]["node"] == "node-b"


def test_a_flat_usage_map_is_refused_at_the_door_with_where_the_quantities_go() -> None:
    flat = METRICS.replace(
        "    nodeUsage:\n      resources: {cpu: 29440m, memory: 40Gi}",
        "    nodeUsage: {cpu: 29440m, memory: 40Gi}",
    )
    assert flat != METRICS
    docs = [Document(source="test", index=i, body=b) for i, b in enumerate(yaml.safe_load_all(flat)) if b]
    why = 'unknown field; a ResourceMap holds quantities under "resources" (and device usage under "devices")'
    assert list(admit_all(docs)) == [
        f"test document 1 (NodeMetric node-a): status.nodeMetric.nodeUsage.cpu: {why}",
        f"test document 1 (NodeMetric node-a): status.nodeMetric.nodeUsage.memory: {why}",
    ]


def test_explain_node_shows_the_p95_of_an_upstream_shaped_metric() -> None:
    from allot_stack.explain_node import explain_node, node_history

    sc = cluster().apply_yaml(METRICS)
    lines = explain_node("node-a", asyncio.run(node_history(sc.sim.store, "node-a")), sc.sim.clock.now_us)
    assert '  p95 over 5m0s: {"cpu": "30100m", "memory": "41Gi"}' in lines
    assert any(line.startswith("usage:      cpu 29440m (92%)") for line in lines), lines


def test_batch_overcommit_counts_the_system_usage_a_metric_leaves_out() -> None:
    # Without systemUsage, upstream's definition applies: nodeUsage - sum(podUsage) - sum(hostApplication usage)
    # = 29.44 - 29 cpu, 40Gi - 38Gi. Memory's 2 GiB is above the kubelet's reservation (none here), so it counts.
    config = {"device-allocator": {"nodeSide": {"colocation": {"colocation-config": '{"enable": true}'}}}}
    without = METRICS.replace("    systemUsage:\n      resources: {cpu: 440m, memory: 2Gi}\n", "", 1)
    assert without != METRICS
    sc = cluster(config).apply_yaml(without)
    updates = [r.payload_dict() for r in sc.events if r.type == "node.allocatable_updated"]
    [update] = [u for u in updates if u["name"] == "node-a"][-1:]
    assert update["inputs"]["systemUsed"] == {"cpu": 440, "memory": 2 * 1024**3}
    assert update["inputs"]["systemUsageDerived"] == ["cpu", "memory"]
