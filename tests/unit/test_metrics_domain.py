"""Domain metrics read from the services' projections at scrape time: names, labels and values, and that a scrape
never changes a projection (the digest replay compares stays the same)."""

from __future__ import annotations

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from allot_contracts.envelope import NewEvent
from allot_contracts.events import ObjectRef, PodBound
from allot_runtime.service import Handled
from allot_testing.builders import a_gpu_device, a_node, a_pod, a_quota
from allot_testing.scenario import Scenario
from binder.observe import BindLatency
from device_allocator.observe import placement_metrics
from gang_coordinator.observe import gang_metrics
from quota_manager.observe import quota_metrics

MODEL = "node.koordinator.sh/gpu-model"
HALF_GPU = {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}
ONE_GPU_TYPICAL = {
    "fragmentation": {"typicalPods": [{"cpuMilli": 1000, "gpuCount": 1, "gpuMilli": 1000, "weight": 1}]}
}


def scrape(factory, processor) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(factory(lambda: processor))
    return registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def names(registry: CollectorRegistry) -> set[str]:
    return {family.name for family in registry.collect()}


def gpu_scenario(configs=None) -> Scenario:
    s = Scenario(configs)
    s.apply(
        a_node("node-a", gpus=8, labels={MODEL: "A100", "allot.dev/pool": "training"}),
        a_gpu_device("node-a", gpus=8, memory="80Gi"),
        a_node("node-b", gpus=2, labels={MODEL: "T4"}),
        a_gpu_device("node-b", gpus=2, memory="16Gi"),
        a_node("cpu-only"),
    )
    return s


def on(node: str, pod: dict) -> dict:
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def test_gpus_and_shares_per_node_model_and_pool():
    s = gpu_scenario()
    s.apply(on("node-a", a_pod("whole", gpus=2)), on("node-a", a_pod("half", extra=HALF_GPU)))
    assert {p["node"] for p in s.of_type("pod.placed")} == {"node-a"}
    r = scrape(placement_metrics, s.sim.host("device-allocator").processor)
    a = {"node": "node-a", "model": "A100", "pool": "training"}
    assert value(r, "allot_node_gpus_allocatable", **a) == 8
    assert value(r, "allot_node_gpus_allocated", **a) == 3
    assert value(r, "allot_node_gpus_shared", **a) == 1
    assert value(r, "allot_node_gpu_cores_allocatable_gpus", **a) == 8
    assert value(r, "allot_node_gpu_cores_allocated_gpus", **a) == 2.5
    assert value(r, "allot_node_gpu_memory_allocatable_bytes", **a) == 8 * 80 * 2**30
    assert value(r, "allot_node_gpu_memory_allocated_bytes", **a) == 2.5 * 80 * 2**30
    b = {"node": "node-b", "model": "T4", "pool": ""}
    assert value(r, "allot_node_gpus_allocatable", **b) == 2
    assert value(r, "allot_node_gpus_allocated", **b) == 0
    assert value(r, "allot_node_gpu_cores_allocated_gpus", **b) == 0
    assert value(r, "allot_node_gpus_allocatable", node="cpu-only", model="", pool="") is None, (
        "no GPUs, no series"
    )


def test_fragmentation_per_model_and_cluster_against_configured_typical_pods():
    s = gpu_scenario({"device-allocator": ONE_GPU_TYPICAL})
    s.apply(on("node-a", a_pod("half", extra=HALF_GPU)))
    r = scrape(placement_metrics, s.sim.host("device-allocator").processor)
    model, total = "A100", 8
    # the half-used GPU's remaining 0.5 cannot take the typical pod (one whole GPU): that half is fragmented
    assert value(r, "allot_gpu_idle_gpus", model=model) == total - 0.5
    assert value(r, "allot_gpu_fragmented_gpus", model=model) == 0.5
    assert value(r, "allot_gpu_fragmentation_ratio", model=model) == pytest.approx(0.5 / (total - 0.5))
    assert value(r, "allot_gpu_fragmented_gpus", model="T4") == 0
    assert value(r, "allot_cluster_gpu_fragmentation_ratio") == pytest.approx(0.5 / 9.5)
    assert value(r, "allot_gpu_typical_pods") == 1


def test_fragmentation_without_configured_typical_pods_uses_the_known_pods():
    s = gpu_scenario()
    s.apply(a_pod("whole", gpus=1), a_pod("half", extra=HALF_GPU))
    r = scrape(placement_metrics, s.sim.host("device-allocator").processor)
    assert value(r, "allot_gpu_typical_pods") == 2  # one-GPU and half-GPU shapes, from the two pods
    assert value(r, "allot_cluster_gpu_fragmentation_ratio") is not None


def test_pending_pods_by_reason_code_from_the_device_allocator():
    s = gpu_scenario()
    s.apply(a_pod("huge", gpus=16))
    codes = s.of_type("pod.unschedulable")[0]["codes"]
    assert codes
    r = scrape(placement_metrics, s.sim.host("device-allocator").processor)
    for code in codes:
        assert value(r, "allot_pending_pods", service="device-allocator", reason=code) == 1
    assert value(r, "allot_held_pods", service="device-allocator") == 1
    s.delete("Pod", "huge")
    r = scrape(placement_metrics, s.sim.host("device-allocator").processor)
    assert value(r, "allot_held_pods", service="device-allocator") == 0
    assert value(r, "allot_pending_pods", service="device-allocator", reason=codes[0]) is None


def test_quota_min_max_runtime_used_borrowed_and_waiting_reason():
    s = gpu_scenario()
    s.apply(
        a_quota(
            "lender",
            namespace="lender",
            min={"cpu": "6", "memory": "64Gi"},
            max={"cpu": "6", "memory": "64Gi"},
        ),
        a_quota(
            "team", namespace="team", min={"cpu": "2", "memory": "8Gi"}, max={"cpu": "5", "memory": "64Gi"}
        ),
    )
    s.apply(a_pod("a", namespace="team", cpu="4"), a_pod("b", namespace="team", cpu="2"))
    assert s.phase("team/b") == "Waiting"
    processor = s.sim.host("quota-manager").processor
    r = scrape(quota_metrics, processor)
    team = {"quota": "team", "namespace": "team", "tree": "koordinator-root-quota"}
    assert value(r, "allot_quota_min", **team, resource="cpu", unit="cores") == 2
    assert value(r, "allot_quota_max", **team, resource="cpu", unit="cores") == 5
    assert value(r, "allot_quota_used", **team, resource="cpu", unit="cores") == 4
    assert value(r, "allot_quota_borrowed", **team, resource="cpu", unit="cores") == 2
    assert value(r, "allot_quota_request", **team, resource="cpu", unit="cores") == 6
    assert (
        value(r, "allot_quota_runtime", **team, resource="cpu", unit="cores") == 5
    )  # capped by max; the lender's min is idle
    assert value(r, "allot_quota_min", **team, resource="memory", unit="bytes") == 8 * 2**30
    assert value(r, "allot_quota_borrowed", **team, resource="memory", unit="bytes") is None, (
        "nothing used above min"
    )
    assert value(r, "allot_quota_pods", **team) == 2
    root = {
        "quota": "koordinator-root-quota",
        "namespace": "koordinator-system",
        "tree": "koordinator-root-quota",
    }
    assert value(r, "allot_quota_max", **root, resource="cpu", unit="cores") is None, (
        "an unlimited max has no sample"
    )
    assert value(r, "allot_quota_runtime", **root, resource="cpu", unit="cores") == 96, (
        "the three nodes × 32 cores"
    )
    assert value(r, "allot_quota_borrowed", **root, resource="cpu", unit="cores") is None, (
        "a tree root lends, never borrows"
    )
    system = {"quota": "koordinator-system-quota", "namespace": "koordinator-system", "tree": ""}
    assert value(r, "allot_quota_max", **system, resource="cpu", unit="cores") is None, (
        "the built-in 'no limit' amount"
    )
    assert value(r, "allot_quota_runtime", **system, resource="cpu", unit="cores") is None
    assert value(r, "allot_pending_pods", service="quota-manager", reason="InsufficientQuota") == 1
    assert value(r, "allot_held_pods", service="quota-manager") == 1


def test_gang_members_waiting_for_their_gang():
    s = gpu_scenario()
    gang = {"gang.scheduling.koordinator.sh/name": "job", "gang.scheduling.koordinator.sh/min-available": "3"}
    s.apply(a_pod("w-0", annotations=gang), a_pod("w-1", annotations=gang))
    r = scrape(gang_metrics, s.sim.host("gang-coordinator").processor)
    assert value(r, "allot_pending_pods", service="gang-coordinator", reason="GangWaiting") == 2
    assert value(r, "allot_held_pods", service="gang-coordinator") == 2


@pytest.mark.parametrize("service", ["device-allocator", "quota-manager", "gang-coordinator"])
def test_a_scrape_changes_no_projection(service):
    s = gpu_scenario()
    s.apply(a_quota("team", namespace="team", min={"cpu": "2"}, max={"cpu": "5", "memory": "64Gi"}))
    s.apply(a_pod("a", namespace="team", cpu="4", gpus=1), a_pod("b", namespace="team", cpu="2"))
    host = s.sim.host(service)
    factory = {
        "device-allocator": placement_metrics,
        "quota-manager": quota_metrics,
        "gang-coordinator": gang_metrics,
    }
    before = host.digest()
    if service == "quota-manager":  # the calculators the decisions keep are not refreshed by a scrape
        h = host.processor.engine.hierarchy
        calc = {name: (node.calc_done, node.runtime) for name, node in h.nodes.items()}
        h.invalidate()
        stale = {name: node.calc_done for name, node in h.nodes.items()}
    r = scrape(factory[service], host.processor)
    assert list(r.collect())
    assert host.digest() == before
    if service == "quota-manager":
        assert {name: node.calc_done for name, node in h.nodes.items()} == stale
        assert all(h.nodes[name].runtime is runtime for name, (_, runtime) in calc.items())
    s.assert_replays()


def test_the_collectors_register_their_names_before_the_service_has_a_projection():
    for factory, expected in [
        (
            placement_metrics,
            {"allot_node_gpus_allocatable", "allot_gpu_fragmented_gpus", "allot_pending_pods"},
        ),
        (quota_metrics, {"allot_quota_runtime", "allot_quota_borrowed", "allot_held_pods"}),
        (gang_metrics, {"allot_pending_pods"}),
    ]:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(factory(lambda: None))
        assert expected <= set(registry._names_to_collectors)
        assert list(registry.collect()) == []


def test_submit_to_bound_latency():
    s = gpu_scenario()
    s.apply(a_pod("a"))
    submitted = next(e for e in s.events if e.type == "pod.submitted")
    bound = next(e for e in s.events if e.type == "pod.bound")
    latency = BindLatency()
    registry = CollectorRegistry()
    registry.register(latency.histogram)
    late = msgspec.structs.replace(bound, recorded_at=submitted.recorded_at + 250_000)
    latency.observe([Handled(submitted, [], 0.0)], now_us=0)
    latency.observe([Handled(late, [], 0.0)], now_us=0)  # Kubernetes mode: the outcome is an input
    name = "allot_pod_submit_to_bound_duration_seconds"
    assert registry.get_sample_value(f"{name}_count") == 1
    assert registry.get_sample_value(f"{name}_sum") == pytest.approx(0.25)
    assert registry.get_sample_value(f"{name}_bucket", {"le": "0.32"}) == 1
    assert registry.get_sample_value(f"{name}_bucket", {"le": "0.16"}) == 0
    # standalone: the decision is the binding, timed at the commit of its batch
    resubmitted = msgspec.structs.replace(submitted, recorded_at=1_000_000)
    decision = NewEvent(
        stream_id=submitted.stream_id,
        event=PodBound(pod=ObjectRef(namespace="default", name="a"), attempt=1, node="node-a"),
        event_id="bound-2",
    )
    placed = next(e for e in s.events if e.type == "pod.placed")
    latency.observe([Handled(resubmitted, [], 0.0)], now_us=0)
    latency.observe([Handled(placed, [decision], 0.0)], now_us=3_500_000)
    assert registry.get_sample_value(f"{name}_count") == 2
    assert registry.get_sample_value(f"{name}_sum") == pytest.approx(0.25 + 2.5)
    assert latency.submitted == {}, "a bound pod is forgotten"


def test_cached_node_figures_follow_changes_and_rebuilt_projections():
    s = gpu_scenario({"device-allocator": ONE_GPU_TYPICAL})
    host = s.sim.host("device-allocator")
    current = {"processor": host.processor}
    registry = CollectorRegistry(auto_describe=True)
    registry.register(placement_metrics(lambda: current["processor"]))
    a = {"node": "node-a", "model": "A100", "pool": "training"}
    assert value(registry, "allot_node_gpus_allocated", **a) == 0
    s.apply(on("node-a", a_pod("half", extra=HALF_GPU)))
    assert value(registry, "allot_node_gpus_allocated", **a) == 1, (
        "the node changed: its figures are recomputed"
    )
    assert value(registry, "allot_gpu_fragmented_gpus", model="A100") == 0.5
    s.delete("Pod", "half")
    assert value(registry, "allot_node_gpus_allocated", **a) == 0
    # a projection rebuilt from scratch starts its versions over: nothing cached for the old one may be reused
    rebuilt = Scenario({"device-allocator": ONE_GPU_TYPICAL})
    rebuilt.apply(
        a_node("node-a", gpus=8, labels={MODEL: "A100", "allot.dev/pool": "training"}),
        a_gpu_device("node-a", gpus=8, memory="80Gi"),
    )
    rebuilt.apply(on("node-a", a_pod("whole", gpus=4)))
    current["processor"] = rebuilt.sim.host("device-allocator").processor
    assert value(registry, "allot_node_gpus_allocated", **a) == 4
    assert value(registry, "allot_node_gpus_allocatable", node="node-b", model="T4", pool="") is None
