"""Load-aware scheduling: the estimate, the filter in upstream's words, the least-used score, pods assigned since the
last NodeMetric, metric expiry with recorded time, and the engine's caches following every change."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.objects import names as n
from allot_contracts.objects.nodemetric import NodeMetric, PodMetric
from allot_placement.config import ConfigError, PlacementConfig
from allot_placement.loadaware import (
    AssignedPod,
    LoadAwareArgs,
    PodLoad,
    estimate_pod,
    filter_and_score,
    node_load,
    parse_args,
)
from allot_placement.testing import a_node, a_pod, admit, engine_with, place, schedule

S = 1_000_000  # µs
GiB = 1024**3
T0 = 1_700_000_000 * S


def metric(
    name: str, cpu_milli: int, memory: int = 0, *, at: int = T0, pods: tuple[PodMetric, ...] = (), **kw: Any
) -> NodeMetric:
    return NodeMetric(
        name=name,
        update_time=at,
        has_node_metric=True,
        node_usage={n.CPU: cpu_milli, n.MEMORY: memory},
        pods=pods,
        **kw,
    )


def test_the_estimate_follows_upstreams_default_estimator() -> None:
    args = LoadAwareArgs()
    # max(limit, request) x factor, capped at the limit
    assert estimate_pod(args, {n.CPU: 2000, n.MEMORY: 4 * GiB}, PodLoad()) == {
        n.CPU: 1700,
        n.MEMORY: 3006477107,
    }
    assert estimate_pod(args, {n.CPU: 1000}, PodLoad(limits=((n.CPU, 4000),))) == {
        n.CPU: 3400,
        n.MEMORY: 200 * 1024 * 1024,  # nothing requested: the default 200 MiB
    }
    # batch pods are estimated on their batch resources
    batch = PodLoad(priority_class="koord-batch")
    assert estimate_pod(args, {n.BATCH_CPU: 1000, n.BATCH_MEMORY: GiB}, batch)[n.CPU] == 850
    assert estimate_pod(args, {}, PodLoad())[n.CPU] == 250


def test_args_read_upstreams_shape_and_refuse_unknown_keys() -> None:
    errors: list[Any] = []
    args = parse_args(
        {
            "usageThresholds": {"cpu": 80},
            "estimatedScalingFactors": {"cpu": 90},
            "aggregated": {
                "usageThresholds": {"cpu": 70},
                "usageAggregationType": "p95",
                "usageAggregatedDuration": "5m",
            },
        },
        "loadAware",
        errors,
    )
    assert errors == []
    assert args.usage_thresholds == ((n.CPU, 80),)
    assert dict(args.estimated_scaling_factors) == {n.CPU: 90, n.MEMORY: 70}  # defaults filled in
    assert args.aggregated.filters and args.aggregated.usage_aggregated_duration_s == 300
    with pytest.raises(ConfigError) as err:
        PlacementConfig.from_dict(
            {"loadAware": {"usageThreshold": {"cpu": 1}, "aggregated": {"usageAggregationType": "max"}}}
        )
    assert {e.path for e in err.value.errors} == {
        "loadAware.usageThreshold",
        "loadAware.aggregated.usageAggregationType",
    }


def test_a_node_at_92_percent_cpu_is_filtered_and_the_pod_goes_to_the_idle_one() -> None:
    eng = engine_with(a_node("busy", cpu="32", memory="128Gi"), a_node("idle", cpu="32", memory="128Gi"))
    eng.advance(T0 + 10 * S)
    eng.upsert_metric(metric("busy", 29_440, 20 * GiB))  # 92 %
    eng.upsert_metric(metric("idle", 1_000, 8 * GiB))
    d = schedule(eng, a_pod("web", cpu="2", memory="4Gi"))
    assert d.node == "idle"
    # busy is not merely scored lower: it fails the filter, in upstream's words
    only_busy = schedule(eng, a_pod("pinned", cpu="2", memory="4Gi", node_selector=None, node_name="busy"))
    assert only_busy.outcome == n.UNSCHEDULABLE
    assert "node(s) cpu usage exceed threshold" in only_busy.message
    assert "UsageExceedThreshold" in only_busy.codes


def test_the_score_is_least_used_weighted_and_shown_as_a_component() -> None:
    eng = engine_with(a_node("a", cpu="10", memory="100Gi"), a_node("b", cpu="10", memory="100Gi"))
    eng.advance(T0)
    eng.upsert_metric(metric("a", 5_000, 50 * GiB))
    eng.upsert_metric(metric("b", 2_000, 90 * GiB))
    d = schedule(eng, a_pod("p", cpu="1", memory="1Gi"))
    scores = {s.node: s.components for s in d.scores}
    # a: cpu (10000-5850)*100//10000 = 41, memory ~49; b: cpu 71, memory 9 -> mean 45 vs 40
    assert scores["a"]["LoadAwareScheduling"] == 45
    assert scores["b"]["LoadAwareScheduling"] == 40
    assert d.node == "a"


def test_nodes_without_a_metric_pass_and_are_not_scored() -> None:
    eng = engine_with(a_node("plain"))
    d = schedule(eng, a_pod("p"))
    assert d.node == "plain" and "LoadAwareScheduling" not in d.scores[0].components


def test_pods_assigned_since_the_last_metric_are_estimated() -> None:
    eng = engine_with(a_node("a", cpu="10", memory="64Gi"))
    eng.advance(T0 + S)
    eng.upsert_metric(metric("a", 5_000, 8 * GiB))  # 50 %: room for one 1-cpu pod (estimate 0.85) below 65 %
    first = place(eng, a_pod("p1", cpu="1"))
    eng.track_assigned("a", _assigned("default/p1", T0 + 2 * S))
    assert first.node == "a"
    # 5000 + 850 (p1) + 850 (p2) = 6700 -> 67 % > 65 %: a second pod no longer fits until the next metric
    second = schedule(eng, a_pod("p2", cpu="1"))
    assert second.outcome == n.UNSCHEDULABLE and "cpu usage exceed threshold" in second.message
    # the next report accounts p1 by its real usage (0.2 cpu) and p2 fits again
    eng.advance(T0 + 200 * S)
    pm = PodMetric(namespace="default", name="p1", usage={n.CPU: 200, n.MEMORY: GiB})
    eng.upsert_metric(metric("a", 5_200, 9 * GiB, at=T0 + 200 * S, pods=(pm,)))
    assert schedule(eng, a_pod("p2", cpu="1")).node == "a"


def _assigned(key: str, at: int, cpu: int = 1000, priority: str = "") -> AssignedPod:
    return AssignedPod(
        key=key,
        uid="",
        requests=((n.CPU, cpu), (n.MEMORY, GiB)),
        load=PodLoad(priority_class=priority),
        at=at,
    )


def test_assignment_timing_decides_which_pods_are_estimated() -> None:
    args = LoadAwareArgs()
    update = T0 + 100 * S
    pods = tuple(PodMetric(namespace="ns", name=f"p{i}", usage={n.CPU: 100}) for i in range(4))
    m = metric("a", 4_000, at=update, pods=pods, report_interval_s=60)
    assigned = [
        _assigned("ns/p0", update - 200 * S),  # long before: its metric is trusted
        _assigned("ns/p1", update - 30 * S),  # within the report interval before the metric: estimated
        _assigned("ns/p2", update + 5 * S),  # after the metric: estimated
        _assigned("ns/p9", update - 200 * S),  # no pod metric: estimated
    ]
    load = node_load(args, m, {n.CPU: 10_000}, assigned, update + 10 * S)
    # 4000 - (100 + 100 of p1 and p2) + 3 x 850
    assert dict(load.filter_used)[n.CPU] == 4000 - 200 + 3 * 850


def test_prod_pods_use_prod_thresholds_over_prod_usage() -> None:
    args = parse_args({"prodUsageThresholds": {"cpu": 30}}, "", [])
    prod = PodMetric(namespace="ns", name="db", usage={n.CPU: 2_000}, priority="koord-prod")
    be = PodMetric(namespace="ns", name="job", usage={n.CPU: 5_000}, priority="koord-batch")
    load = node_load(args, metric("a", 7_500, pods=(prod, be)), {n.CPU: 10_000}, [], T0)
    why, _ = filter_and_score(args, load, {n.CPU: 1000}, PodLoad(priority_class="koord-prod"))
    assert why is None  # prod usage 2000 + 850 = 28.5 % <= 30 %
    why, _ = filter_and_score(args, load, {n.CPU: 2000}, PodLoad(priority_class="koord-prod"))
    assert why == ("node(s) cpu usage exceed threshold", "UsageExceedThreshold")  # 37 %
    why, _ = filter_and_score(args, load, {n.CPU: 1000}, PodLoad(priority_class="koord-batch"))
    assert why is not None  # non-prod pods see the whole node: 75 % + 8.5 % > 65 %


def test_the_aggregated_filter_says_so() -> None:
    from allot_contracts.objects.nodemetric import AggregatedUsage

    args = parse_args(
        {
            "aggregated": {
                "usageThresholds": {"cpu": 60},
                "usageAggregationType": "p95",
                "usageAggregatedDuration": "5m",
            }
        },
        "",
        [],
    )
    m = metric(
        "a", 1_000, aggregated_node_usages=(AggregatedUsage(duration_s=300, usage={"p95": {n.CPU: 7_000}}),)
    )
    load = node_load(args, m, {n.CPU: 10_000}, [], T0)
    why, _ = filter_and_score(args, load, {n.CPU: 100}, PodLoad())
    assert why == ("node(s) cpu aggregated usage exceed threshold", "AggregatedUsageExceedThreshold")


def test_expiry_uses_recorded_time_and_is_reversible_by_a_fresh_metric() -> None:
    eng = engine_with(a_node("a"), a_node("b"))
    eng.advance(T0)
    eng.upsert_metric(metric("a", 1_000))
    assert schedule(eng, a_pod("p")).node == "a"  # scored above b (which has no metric)
    eng.advance(T0 + 179 * S)
    assert schedule(eng, a_pod("p")).node == "a"
    eng.advance(T0 + 180 * S)  # nodeMetricExpirationSeconds: 180
    d = schedule(eng, a_pod("p", node_name="a"))
    assert d.outcome == n.UNSCHEDULABLE and "node(s) nodeMetric expired" in d.message
    assert schedule(eng, a_pod("p")).node == "b"
    eng.upsert_metric(metric("a", 1_000, at=T0 + 181 * S))
    assert schedule(eng, a_pod("p")).node == "a"


def test_expired_nodes_can_be_allowed() -> None:
    eng = engine_with(a_node("a"), config={"loadAware": {"enableScheduleWhenNodeMetricsExpired": True}})
    eng.advance(T0 + 1000 * S)
    eng.upsert_metric(metric("a", 30_000))  # expired on arrival: let through unchecked
    d = schedule(eng, a_pod("p", node_name="a"))
    assert d.node == "a" and d.scores[0].components["LoadAwareScheduling"] == 0


def test_daemonset_pods_pass_the_filter() -> None:
    eng = engine_with(a_node("a", cpu="10"))
    eng.advance(T0)
    eng.upsert_metric(metric("a", 9_500))
    pod = a_pod("ds", cpu="100m")
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "x"}
    ]
    assert schedule(eng, pod).node == "a"
    assert schedule(eng, a_pod("plain", cpu="100m")).outcome == n.UNSCHEDULABLE


def test_disabled_plugin_changes_nothing() -> None:
    eng = engine_with(a_node("busy"), a_node("idle"), config={"loadAware": {"enabled": False}})
    eng.advance(T0)
    eng.upsert_metric(metric("busy", 31_000))
    d = schedule(eng, a_pod("p"))
    assert d.node == "busy" and "LoadAwareScheduling" not in d.scores[0].components  # name order decides


def test_a_default_config_keeps_its_version() -> None:
    """A configuration that does not set loadAware records the same config version as before it existed."""
    assert "loadAware" not in PlacementConfig().to_dict()
    assert PlacementConfig.from_dict({"loadAware": {"weight": 2}}).version != PlacementConfig().version


def test_decisions_track_metric_changes_through_the_engine_caches() -> None:
    eng = engine_with(*(a_node(f"n{i}") for i in range(4)))
    eng.advance(T0)
    pod = admit(a_pod("p"))
    for i in range(4):
        eng.upsert_metric(metric(f"n{i}", 1000 * (i + 1)))
    assert eng.schedule(pod).node == "n0"
    eng.upsert_metric(metric("n0", 25_000))  # n0 becomes the busiest: the cached ranking must follow
    assert eng.schedule(pod).node == "n1"
    eng.delete_metric("n1")
    assert eng.schedule(pod).node == "n2"
