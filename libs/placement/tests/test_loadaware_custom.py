"""Load-aware scheduling beyond the defaults: a node's own thresholds, a pod's own estimation, forced estimation after
scheduling or initialization, the newer arguments, and the members of one gang seeing each other's estimate."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.load_aware import (
    ANN_ESTIMATED_SCALING_FACTORS,
    ANN_ESTIMATED_SECONDS_AFTER_INITIALIZED,
    ANN_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
    ANN_USAGE_THRESHOLDS,
    CustomAggregatedUsage,
    CustomUsageThresholds,
    LoadEstimation,
    read_load_estimation,
    read_usage_thresholds,
)
from allot_contracts.objects.nodemetric import NodeMetric, PodMetric
from allot_contracts.objects.nodes import admit_node
from allot_placement.config import ConfigError, PlacementConfig
from allot_placement.loadaware import (
    AssignedPod,
    LoadAwareArgs,
    PodLoad,
    estimate_pod,
    estimation_deadline,
    filter_and_score,
    node_load,
    node_thresholds,
    parse_args,
)
from allot_placement.testing import a_node, a_pod, admit, engine_with, schedule

S = 1_000_000
GiB = 1024**3
T0 = 1_700_000_000 * S
CPU_FAIL = ("node(s) cpu usage exceed threshold", "UsageExceedThreshold")


def metric(name: str, cpu: int, *, at: int = T0, pods: tuple[PodMetric, ...] = (), **kw: Any) -> NodeMetric:
    return NodeMetric(
        name=name,
        update_time=at,
        has_node_metric=True,
        node_usage={n.CPU: cpu, n.MEMORY: GiB},
        pods=pods,
        **kw,
    )


def _args(**raw: Any) -> LoadAwareArgs:
    errors: list[FieldIssue] = []
    args = parse_args(raw, "loadAware", errors)
    assert errors == []
    return args


# --- the node's own thresholds ----------------------------------------------------------------------------------------
def test_a_nodes_annotation_is_read_at_the_door() -> None:
    warnings: list[FieldIssue] = []
    value = {
        "usageThresholds": {"cpu": 50},
        "prodUsageThresholds": {"memory": 80},
        "aggregatedUsage": {
            "usageThresholds": {"cpu": 60},
            "usageAggregationType": "p95",
            "usageAggregatedDuration": "5m",
        },
    }
    got = read_usage_thresholds({ANN_USAGE_THRESHOLDS: json.dumps(value)}, warnings)
    assert warnings == []
    assert got == CustomUsageThresholds(
        usage_thresholds=((n.CPU, 50),),
        prod_usage_thresholds=((n.MEMORY, 80),),
        aggregated=CustomAggregatedUsage(
            usage_thresholds=((n.CPU, 60),), aggregation_type="p95", duration_s=300
        ),
    )
    issues: list[FieldIssue] = []
    node = admit_node(a_node("a", annotations={ANN_USAGE_THRESHOLDS: json.dumps(value)}), issues, warnings)
    assert issues == [] and node is not None and node.usage_thresholds == got


@pytest.mark.parametrize(
    ("raw", "path", "code"),
    [
        ("{cpu: 50", f'metadata.annotations["{ANN_USAGE_THRESHOLDS}"]', "InvalidAnnotation"),
        ('["cpu"]', f'metadata.annotations["{ANN_USAGE_THRESHOLDS}"]', "InvalidAnnotation"),
        (
            '{"usageThresholds": {"cpu": "50"}}',
            f'metadata.annotations["{ANN_USAGE_THRESHOLDS}"].usageThresholds[cpu]',
            "InvalidAnnotation",
        ),
        (
            '{"usageThresholds": {"cpu": 150}}',
            f'metadata.annotations["{ANN_USAGE_THRESHOLDS}"].usageThresholds[cpu]',
            "InvalidAnnotation",
        ),
        (
            '{"aggregatedUsage": {"usageThresholds": {"cpu": 60}, "usageAggregationType": "p42"}}',
            f'metadata.annotations["{ANN_USAGE_THRESHOLDS}"].aggregatedUsage.usageAggregationType',
            "InvalidAnnotation",
        ),
    ],
)
def test_a_malformed_node_annotation_is_a_warning_and_the_node_keeps_the_plugins_thresholds(
    raw: str, path: str, code: str
) -> None:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    node = admit_node(a_node("a", annotations={ANN_USAGE_THRESHOLDS: raw}), issues, warnings)
    assert issues == [] and node is not None  # never a refusal
    assert node.usage_thresholds is None
    assert [(w.path, w.code) for w in warnings] == [(path, code)]
    assert "the annotation is ignored" in warnings[0].message


def test_read_but_not_acted_on_parts_of_the_node_annotation_are_warnings() -> None:
    warnings: list[FieldIssue] = []
    raw = '{"usageThreshold": {"cpu": 1}, "usageThresholds": {"cpu": 50}, "aggregatedUsage": {"usageThresholds": {"cpu": 9}}}'
    got = read_usage_thresholds({ANN_USAGE_THRESHOLDS: raw}, warnings)
    assert got == CustomUsageThresholds(usage_thresholds=((n.CPU, 50),))  # the rest is used
    prefix = f'metadata.annotations["{ANN_USAGE_THRESHOLDS}"]'
    assert [(w.path, w.code) for w in warnings] == [
        (f"{prefix}.usageThreshold", "Ignored"),
        (f"{prefix}.aggregatedUsage", "Ignored"),  # thresholds without an aggregation type
    ]


def test_each_part_of_the_annotation_replaces_the_plugins_part() -> None:
    args = _args(prodUsageThresholds={"cpu": 30})
    th = node_thresholds(args, CustomUsageThresholds(usage_thresholds=((n.CPU, 40),)))
    assert th.usage == ((n.CPU, 40),)  # memory's 95 is gone with the rest of the plugin's part
    assert th.prod == ((n.CPU, 30),)  # not set by the node: the plugin's
    agg = CustomAggregatedUsage(usage_thresholds=((n.CPU, 70),), aggregation_type="p90")
    th = node_thresholds(args, CustomUsageThresholds(aggregated=agg))
    assert (th.aggregated, th.aggregation_type, th.usage) == (((n.CPU, 70),), "p90", args.usage_thresholds)


def test_a_node_threshold_for_a_resource_outside_the_plugins_vector_is_skipped_unless_supported() -> None:
    custom = CustomUsageThresholds(usage_thresholds=((n.CPU, 40), ("ephemeral-storage", 10)))
    assert node_thresholds(LoadAwareArgs(), custom).usage == ((n.CPU, 40),)
    args = _args(supportedResources=["ephemeral-storage"])
    assert node_thresholds(args, custom).usage == ((n.CPU, 40), ("ephemeral-storage", 10))


def test_a_node_with_its_own_lower_threshold_is_filtered_where_the_plugins_would_pass() -> None:
    ann = {ANN_USAGE_THRESHOLDS: json.dumps({"usageThresholds": {"cpu": 40}})}
    eng = engine_with(a_node("strict", cpu="10", annotations=ann), a_node("plain", cpu="10"))
    eng.advance(T0)
    eng.upsert_metric(metric("strict", 3_000))  # 30 % + 8.5 % = 39 %: passes 40
    eng.upsert_metric(metric("plain", 5_000))  # 50 % + 8.5 % = 59 %: passes 65
    pinned = a_pod("p", cpu="1", node_name="strict")
    assert schedule(eng, pinned).outcome == n.SCHEDULED
    eng.upsert_metric(metric("strict", 4_000))  # 40 % + 8.5 % = 49 % > 40
    d = schedule(eng, pinned)
    assert d.outcome == n.UNSCHEDULABLE and CPU_FAIL[0] in d.message
    assert schedule(eng, a_pod("q", cpu="1")).node == "plain"
    # the annotation removed: the node is held to the plugin's 65 % again
    eng.upsert_node(admit_node(a_node("strict", cpu="10"), [], []))  # type: ignore[arg-type]
    assert schedule(eng, pinned).outcome == n.SCHEDULED


def test_a_nodes_own_prod_thresholds_make_prod_pods_use_the_prod_view() -> None:
    custom = CustomUsageThresholds(prod_usage_thresholds=((n.CPU, 30),))
    prod = PodMetric(namespace="ns", name="db", usage={n.CPU: 2_500}, priority="koord-prod")
    load = node_load(LoadAwareArgs(), metric("a", 3_000, pods=(prod,)), {n.CPU: 10_000}, [], T0, custom)
    prod_pod = PodLoad(priority_class="koord-prod")
    assert filter_and_score(LoadAwareArgs(), load, {n.CPU: 1000}, prod_pod)[0] == CPU_FAIL  # 25 + 8.5 > 30
    assert filter_and_score(LoadAwareArgs(), load, {n.CPU: 1000}, PodLoad())[0] is None  # 30 + 8.5 <= 65


# --- the pod's own estimation ---------------------------------------------------------------------------------------------
def test_pod_estimation_annotations_are_read_at_the_door() -> None:
    pod = admit(
        a_pod(
            "p",
            annotations={
                ANN_ESTIMATED_SCALING_FACTORS: {"cpu": 100},
                ANN_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED: "120",
                ANN_ESTIMATED_SECONDS_AFTER_INITIALIZED: "0",
            },
        )
    )
    assert pod.load_estimation == LoadEstimation(
        scaling_factors=((n.CPU, 100),), seconds_after_pod_scheduled=120, seconds_after_initialized=0
    )
    assert admit(a_pod("plain")).load_estimation is None


def test_unreadable_pod_estimation_annotations_are_warnings() -> None:
    warnings: list[FieldIssue] = []
    got = read_load_estimation(
        {
            ANN_ESTIMATED_SCALING_FACTORS: '{"cpu": -5}',
            ANN_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED: "soon",
            ANN_ESTIMATED_SECONDS_AFTER_INITIALIZED: "-1",
        },
        warnings,
    )
    assert got is None
    assert [w.path for w in warnings] == [
        f'metadata.annotations["{ANN_ESTIMATED_SCALING_FACTORS}"][cpu]',
        f'metadata.annotations["{ANN_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED}"]',
        f'metadata.annotations["{ANN_ESTIMATED_SECONDS_AFTER_INITIALIZED}"]',
    ]


def test_a_pods_own_scaling_factors_count_only_when_the_plugin_allows_it() -> None:
    own = PodLoad(estimation=LoadEstimation(scaling_factors=((n.CPU, 100),)))
    requests = {n.CPU: 2000, n.MEMORY: GiB}
    assert estimate_pod(LoadAwareArgs(), requests, own)[n.CPU] == 1700
    allowed = _args(allowCustomizeEstimation=True)
    assert estimate_pod(allowed, requests, own) == {n.CPU: 2000, n.MEMORY: round(GiB * 0.7)}
    # the pod's factors change its filter result (and are part of the engine's cache key)
    eng = engine_with(a_node("a", cpu="10"), config={"loadAware": {"allowCustomizeEstimation": True}})
    eng.advance(T0)
    eng.upsert_metric(metric("a", 5_000))
    plain = a_pod("p", cpu="1600m", node_name="a")  # 50 % + 13.6 % = 64 %
    assert schedule(eng, plain).outcome == n.SCHEDULED
    greedy = a_pod("g", cpu="1600m", node_name="a", annotations={ANN_ESTIMATED_SCALING_FACTORS: {"cpu": 100}})
    assert schedule(eng, greedy).outcome == n.UNSCHEDULABLE  # 50 % + 16 % = 66 % > 65 %
    assert schedule(eng, plain).outcome == n.SCHEDULED


# --- forced estimation ----------------------------------------------------------------------------------------------------
def _pod(at: int, *, initialized: int | None = None, estimation: LoadEstimation | None = None) -> AssignedPod:
    return AssignedPod(
        key="ns/p",
        uid="",
        requests=((n.CPU, 2000),),
        load=PodLoad(estimation=estimation),
        at=at,
        initialized_at=initialized,
    )


def test_the_estimation_deadline_follows_upstreams_precedence() -> None:
    args = _args(estimatedSecondsAfterPodScheduled=300, estimatedSecondsAfterInitialized=60)
    assert estimation_deadline(args, _pod(T0)) == T0 + 300 * S
    assert estimation_deadline(args, _pod(T0, initialized=T0 + 10 * S)) == T0 + 70 * S  # initialized wins
    assert estimation_deadline(LoadAwareArgs(), _pod(T0)) is None
    own = LoadEstimation(seconds_after_pod_scheduled=30, seconds_after_initialized=0)
    assert estimation_deadline(args, _pod(T0, estimation=own)) == T0 + 300 * S  # not allowed: ignored
    allowed = _args(
        estimatedSecondsAfterPodScheduled=300,
        estimatedSecondsAfterInitialized=60,
        allowCustomizeEstimation=True,
    )
    # the pod's own 0 turns the initialized deadline off; its 30 s replace the plugin's 300
    assert estimation_deadline(allowed, _pod(T0, initialized=T0 + 10 * S, estimation=own)) == T0 + 30 * S


def test_a_pod_is_estimated_until_a_metric_taken_after_its_deadline() -> None:
    args = _args(estimatedSecondsAfterPodScheduled=600)
    reported = (PodMetric(namespace="ns", name="p", usage={n.CPU: 100}),)
    pod = _pod(T0)  # assigned long before the metrics below, so only the deadline can force its estimate

    def used(update: int) -> int:
        m = metric("a", 3_000, at=update, pods=reported)
        return dict(node_load(args, m, {n.CPU: 10_000}, [pod], update).filter_used)[n.CPU]

    assert used(T0 + 300 * S) == 3_000 - 100 + 1_700  # forced: the estimate replaces the early usage
    assert used(T0 + 600 * S) == 3_000  # a metric taken at the deadline: the pod's usage is trusted
    args = LoadAwareArgs()  # without a deadline the pod's early usage is trusted
    assert used(T0 + 300 * S) == 3_000


def test_the_newer_arguments_are_read_and_checked() -> None:
    args = _args(
        dominantResourceWeight=2,
        prodUsageIncludeSys=True,
        estimatedSecondsAfterPodScheduled=60,
        estimatedSecondsAfterInitialized=30,
        allowCustomizeEstimation=True,
        supportedResources=["ephemeral-storage"],
    )
    assert args.resource_weights == ()  # upstream: no default weights with a dominant weight
    assert _args(resourceWeights={"cpu": 0}, dominantResourceWeight=1).resource_weights == ((n.CPU, 0),)
    assert "ephemeral-storage" in args.resources
    d = args.to_dict()
    assert d["dominantResourceWeight"] == 2 and d["supportedResources"] == ["ephemeral-storage"]
    assert "allowCustomizeEstimation" not in LoadAwareArgs().to_dict()  # versions of older configs unchanged
    with pytest.raises(ConfigError) as err:
        PlacementConfig.from_dict(
            {
                "loadAware": {
                    "dominantResourceWeight": 101,
                    "estimatedSecondsAfterPodScheduled": -1,
                    "supportedResources": "gpu",
                    "allowCustomizeEstimation": "yes",
                }
            }
        )
    assert {e.path for e in err.value.errors} == {
        "loadAware.dominantResourceWeight",
        "loadAware.estimatedSecondsAfterPodScheduled",
        "loadAware.supportedResources",
        "loadAware.allowCustomizeEstimation",
    }


def test_the_dominant_resource_weighs_the_most_used_resource() -> None:
    m = NodeMetric(
        name="a", update_time=T0, has_node_metric=True, node_usage={n.CPU: 1_000, n.MEMORY: 80 * GiB}
    )
    alloc = {n.CPU: 10_000, n.MEMORY: 100 * GiB}
    plain = LoadAwareArgs()
    dominant = _args(dominantResourceWeight=2, resourceWeights={"cpu": 1, "memory": 1})
    alone = _args(dominantResourceWeight=1)  # no weights: the dominant resource decides alone
    pod = {n.CPU: 0, n.MEMORY: 0}
    # cpu (10000-1250)*100//10000 = 87; memory 19 (80 GiB + 200 MiB)
    _, score = filter_and_score(plain, node_load(plain, m, alloc, [], T0), pod, PodLoad())
    assert score == (87 + 19) // 2
    _, score = filter_and_score(dominant, node_load(dominant, m, alloc, [], T0), pod, PodLoad())
    assert score == (87 + 19 + 2 * 19) // 4
    _, score = filter_and_score(alone, node_load(alone, m, alloc, [], T0), pod, PodLoad())
    assert score == 19


def test_prod_usage_can_include_the_system_usage() -> None:
    prod = PodMetric(namespace="ns", name="db", usage={n.CPU: 2_000}, priority="koord-prod")
    m = metric("a", 4_000, pods=(prod,), system_usage={n.CPU: 1_000})
    prod_pod = PodLoad(priority_class="koord-prod")
    for include, used in ((False, 2_000), (True, 3_000)):
        args = _args(prodUsageThresholds={"cpu": 30}, prodUsageIncludeSys=include)
        assert dict(node_load(args, m, {n.CPU: 10_000}, [], T0).prod_used)[n.CPU] == used
        why, _ = filter_and_score(args, node_load(args, m, {n.CPU: 10_000}, [], T0), {n.CPU: 500}, prod_pod)
        assert (why is None) is (not include)  # 20 + 4.25 <= 30 < 30 + 4.25


def test_prod_usage_includes_the_derived_system_usage_when_the_metric_has_none() -> None:
    # upstream's pod_assign_cache adds SystemUsage; a NodeMetric without it has nodeUsage - pods - host apps
    prod = PodMetric(namespace="ns", name="db", usage={n.CPU: 2_000}, priority="koord-prod")
    m = metric("a", 4_000, pods=(prod,))
    assert m.system_usage == {}
    args = _args(prodUsageThresholds={"cpu": 30}, prodUsageIncludeSys=True)
    assert dict(node_load(args, m, {n.CPU: 10_000}, [], T0).prod_used)[n.CPU] == 2_000 + (4_000 - 2_000)


# --- gangs ------------------------------------------------------------------------------------------------------------------
def test_members_of_one_gang_see_each_others_estimate() -> None:
    eng = engine_with(a_node("a", cpu="10", memory="64Gi"), a_node("b", cpu="10", memory="64Gi"))
    eng.advance(T0)
    eng.upsert_metric(metric("a", 5_000))  # 50 % + 8.5 % = 58.5 %: one member fits, two (67 %) do not
    eng.upsert_metric(metric("b", 5_500))  # 55 %: scored below a, takes one member
    before = eng.digest()
    loads = dict(eng.loads.loads)
    group = eng.schedule_group([admit(a_pod(f"w{i}", namespace="ml", cpu="1")) for i in range(2)])
    assert group.outcome == n.SCHEDULED
    assert [d.node for d in group.members] == ["a", "b"]
    # nothing stays behind: the engine's view and the loads are as before
    assert eng.digest() == before and eng.loads.loads == loads and "ml/w0" not in eng.loads.where
    # a gang of three cannot fit: a takes one, b one, the third fails both
    three = eng.schedule_group([admit(a_pod(f"x{i}", namespace="ml", cpu="1")) for i in range(3)])
    assert three.outcome != n.SCHEDULED
    assert eng.loads.loads == loads
