"""node-reporter's Kubernetes watch: its own node's Node, Device, NodeResourceTopology and NodeMetric into the log,
real changes only, restart-safe."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

from allot_testing.builders import a_gpu_device, a_node
from allot_testing.fake_kube import FakeKube
from node_reporter.adapters.kube import NodeWatch, producer_for

pytestmark = pytest.mark.integration


def a_topology(node: str, available: str = "16") -> dict[str, Any]:
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "topologyPolicies": ["None"],
        "zones": [
            {
                "name": "node-0",
                "type": "Node",
                "resources": [{"name": "cpu", "capacity": "16", "allocatable": "16", "available": available}],
            }
        ],
    }


async def test_a_node_instance_records_its_own_objects_once_and_only_real_changes(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, log_of: Any, settled: Any
) -> None:
    for name in ("n1", "n2"):
        kube.create(a_node(name, gpus=2))
        kube.create(a_gpu_device(name, gpus=2))
    kube.create(a_topology("n1"))
    producer = producer_for("n1")
    assert producer == "node-reporter@n1.kube"

    async def counts() -> collections.Counter[tuple[str, str]]:
        return collections.Counter((t, s) for t, s, _ in await log_of(store, producer=producer))

    watch = NodeWatch(store=store, client=client, instance="n1", watch_timeout=2, backoff=(0.05, 0.2))
    runner = running(watch.run)
    await eventually(lambda: watch.synced, what="first lists")
    assert await settled(counts) == {
        ("node.applied", "node:n1"): 1,
        ("device.applied", "device:n1"): 1,
        ("topology.applied", "topology:n1"): 1,
    }
    # Only its own node is asked for.
    selectors = {q.get("fieldSelector") for _, path, q in kube.requests if path != "/"}
    assert selectors == {"metadata.name=n1"}
    recorded = {s: p for _, s, p in await log_of(store, producer=producer)}
    assert set(recorded["node:n1"]["manifest"]["status"]) == {"allocatable", "capacity"}
    assert "managedFields" not in recorded["node:n1"]["manifest"]["metadata"]
    assert "available" not in recorded["topology:n1"]["manifest"]["zones"][0]["resources"][0]

    # Heartbeats, conditions, available amounts and other nodes: nothing.
    kube.heartbeat("Node", "n1")
    kube.heartbeat("Node", "n1")
    kube.update(
        "NodeResourceTopology", "n1", lambda o: o["zones"][0]["resources"][0].update({"available": "3"})
    )
    kube.update("Node", "n2", lambda o: o["metadata"]["labels"].update({"x": "y"}))
    kube.heartbeat("Device", "n1")  # a status-only change of the Device
    assert sum((await settled(counts)).values()) == 3

    # What matters: labels, taints, unschedulable, allocatable; the device list.
    kube.update("Node", "n1", lambda o: o["metadata"]["labels"].update({"pool": "a"}))
    kube.update("Node", "n1", lambda o: o["spec"].update({"taints": [{"key": "k", "effect": "NoSchedule"}]}))
    kube.update("Node", "n1", lambda o: o["spec"].update({"unschedulable": True}))
    kube.update("Node", "n1", lambda o: o["status"]["allocatable"].update({"cpu": "31"}))
    kube.update("Device", "n1", lambda o: o["spec"]["devices"][1].update({"health": False}))
    assert await settled(counts) == {
        ("node.applied", "node:n1"): 5,
        ("device.applied", "device:n1"): 2,
        ("topology.applied", "topology:n1"): 1,
    }
    await runner.close()

    # Restarted: nothing again; what happened meanwhile (the topology deleted) is caught up by the list.
    kube.delete("NodeResourceTopology", "n1")
    for _ in range(2):
        watch = NodeWatch(store=store, client=client, instance="n1", watch_timeout=2, backoff=(0.05, 0.2))
        runner = running(watch.run)
        await eventually(lambda w=watch: w.synced, what="lists after restart")
        assert await settled(counts) == {
            ("node.applied", "node:n1"): 5,
            ("device.applied", "device:n1"): 2,
            ("topology.applied", "topology:n1"): 1,
            ("topology.deleted", "topology:n1"): 1,
        }
        await runner.close()

    # Deleted while watched.
    runner = running(
        NodeWatch(store=store, client=client, instance="n1", watch_timeout=2, backoff=(0.05, 0.2)).run
    )
    await asyncio.sleep(0.3)
    kube.delete("Node", "n1")
    await eventually(lambda: _deleted(log_of, store, producer), what="node.deleted")
    assert (await settled(counts))[("node.deleted", "node:n1")] == 1


async def test_koordlets_node_metrics_are_recorded_at_every_report(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, log_of: Any
) -> None:
    def metric(node: str, at: str, cpu: str) -> dict[str, Any]:
        return {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {"name": node},
            "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
            "status": {
                "updateTime": at,
                "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}},
            },
        }

    kube.create(a_node("n1"))
    kube.create(metric("n1", "2026-01-01T00:00:00Z", "2"))
    kube.create(metric("n2", "2026-01-01T00:00:00Z", "9"))
    producer = producer_for("n1")
    watch = NodeWatch(store=store, client=client, instance="n1", watch_timeout=2, backoff=(0.05, 0.2))
    running(watch.run)
    await eventually(lambda: watch.synced, what="first lists")

    async def metrics() -> list[dict[str, Any]]:
        return [p for t, _, p in await log_of(store, producer=producer) if t == "nodemetric.applied"]

    async def recorded(count: int) -> bool:
        return len(await metrics()) == count

    await eventually(lambda: recorded(1), what="the NodeMetric of n1")
    # the same usage reported again is a new report (its updateTime moved): recorded, so it never looks stale
    kube.update("NodeMetric", "n1", lambda o: o["status"].update({"updateTime": "2026-01-01T00:01:00Z"}))
    await eventually(lambda: recorded(2), what="the second report")
    assert [m["manifest"]["status"]["updateTime"] for m in await metrics()] == [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:01:00Z",
    ]
    assert {m["name"] for m in await metrics()} == {"n1"}


async def _deleted(log_of: Any, store: Any, producer: str) -> bool:
    return any(t == "node.deleted" for t, _, _ in await log_of(store, producer=producer))


async def test_without_an_instance_every_node_is_watched(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, log_of: Any
) -> None:
    kube.create(a_node("n1"))
    kube.create(a_node("n2"))
    watch = NodeWatch(store=store, client=client, watch_timeout=2, backoff=(0.05, 0.2))
    running(watch.run)
    await eventually(lambda: watch.synced, what="first lists")

    async def both() -> bool:
        return {s for _, s, _ in await log_of(store, producer="node-reporter.kube")} == {"node:n1", "node:n2"}

    await eventually(both, what="both nodes recorded")


async def test_large_lists_are_read_in_pages(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, log_of: Any
) -> None:
    for i in range(5):
        kube.create(a_node(f"n{i}"))
    watch = NodeWatch(store=store, client=client, watch_timeout=2, backoff=(0.05, 0.2))
    for reflector in watch.reflectors:
        reflector.page_size = 2
    running(watch.run)
    await eventually(lambda: watch.synced, what="first lists")

    async def all_nodes() -> bool:
        return len(await log_of(store, producer="node-reporter.kube", types={"node.applied"})) == 5

    await eventually(all_nodes, what="five nodes recorded")
    pages = [q for _, path, q in kube.requests if path == "/api/v1/nodes" and "watch" not in q]
    assert [q.get("limit") for q in pages] == ["2", "2", "2"] and sum("continue" in q for q in pages) == 2
