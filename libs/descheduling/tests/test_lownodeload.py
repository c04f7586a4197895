"""One LowNodeLoad round, as tables: which nodes are low / high / excluded, when an anomaly is confirmed, which pods
may not move (and why), in which order the others are taken, and where they go."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from allot_contracts.objects.nodemetric import HostAppMetric, NodeMetric, PodMetric
from allot_descheduling import (
    Caps,
    Detector,
    NodeInput,
    PodInput,
    Profile,
    RoundOutcome,
    parse_config,
    run_round,
)

AT = 1_800_000_000_000_000
GI = 1024**3
MIN = 60_000_000


def profile(
    low: dict[str, Any] | None = None,
    high: dict[str, Any] | None = None,
    migration: dict[str, Any] | None = None,
    **args: Any,
) -> Profile:
    plugin_args = {
        "lowThresholds": low or {"cpu": 30, "memory": 30},
        "highThresholds": high or {"cpu": 60, "memory": 80},
        "anomalyCondition": {"consecutiveAbnormalities": 1},
        **args,
    }
    config: list[dict[str, Any]] = [{"name": "LowNodeLoad", "args": plugin_args}]
    if migration:
        config.append({"name": "MigrationController", "args": migration})
    return parse_config({"profiles": [{"name": "p", "pluginConfig": config}]}).profiles[0]


def node(name: str, cpu: int = 10_000, **kw: Any) -> NodeInput:
    return NodeInput(name=name, allocatable={"cpu": cpu, "memory": 100 * GI}, **kw)


def pod(name: str, on: str = "hot", **kw: Any) -> PodInput:
    kw.setdefault("requests", {"cpu": 1000, "memory": GI})
    return PodInput(key=f"ns/{name}", uid=f"uid-{name}", node=on, **kw)


def metric(
    name: str,
    cpu: int,
    pods: dict[str, int] | None = None,
    *,
    age: int = 0,
    prod: frozenset[str] = frozenset(),
    memory: int = 10 * GI,
) -> NodeMetric:
    return NodeMetric(
        name=name,
        update_time=AT - age,
        has_node_metric=True,
        node_usage={"cpu": cpu, "memory": memory},
        pods=tuple(
            PodMetric(
                namespace="ns",
                name=p,
                usage={"cpu": c, "memory": GI},
                priority="koord-prod" if p in prod else "",
            )
            for p, c in (pods or {}).items()
        ),
    )


def run(
    prof: Profile,
    nodes: list[NodeInput],
    pods: list[PodInput],
    metrics: list[NodeMetric],
    detectors: dict[str, Detector] | None = None,
    round_no: int = 1,
) -> RoundOutcome:
    return run_round(
        prof,
        at=AT,
        round_no=round_no,
        nodes=nodes,
        pods=pods,
        metrics={m.name: m for m in metrics},
        detectors=detectors or {},
    )


def states(outcome: RoundOutcome) -> dict[str, str]:
    return {n.name: n.state for n in outcome.nodes}


def codes(outcome: RoundOutcome) -> dict[str, str]:
    return {c.pod.split("/")[1]: c.code for c in outcome.candidates}


def moved(outcome: RoundOutcome) -> dict[str, str]:
    return {m.pod.split("/")[1]: m.target for m in outcome.moves}


HOT = metric("hot", 8000, {"a": 1500, "b": 1500, "c": 1500, "d": 1500})
IDLE = metric("idle", 1000)
PODS = [pod(x) for x in "abcd"]


# --- classification and when nothing moves ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("usages", "want_states", "message"),
    [
        ({"hot": 8000, "idle": 1000}, {"hot": "high", "idle": "low"}, "1 pod(s) to move off 1 of 1"),
        (
            {"hot": 8000, "idle": 4000},
            {"hot": "high", "idle": "normal"},
            "no node is under the low thresholds",
        ),
        (
            {"hot": 2000, "idle": 1000},
            {"hot": "low", "idle": "low"},
            "every node is under the low thresholds",
        ),
        (
            {"hot": 5000, "idle": 1000},
            {"hot": "normal", "idle": "low"},
            "no node is above the high thresholds",
        ),
        (
            {"hot": 6000, "idle": 3000},
            {"hot": "normal", "idle": "low"},
            "no node is above",
        ),  # equal is not above
    ],
    ids=["hot-and-idle", "no-target", "all-low", "none-hot", "at-the-thresholds"],
)
def test_nodes_are_classified_against_their_thresholds(
    usages: dict[str, int], want_states: dict[str, str], message: str
) -> None:
    metrics = [metric(n, c, {"a": 1500} if n == "hot" else {}) for n, c in usages.items()]
    out = run(profile(), [node("hot"), node("idle")], [pod("a")], metrics)
    assert states(out) == want_states
    assert message in out.message


def test_usage_is_system_usage_plus_the_reported_pods_as_upstream_counts_it() -> None:
    # utilization_util.go getNodeUsage: usage = SystemUsage + sum(podUsage). A host application's 3 CPUs in nodeUsage
    # (8 CPUs) are neither: the node is at 5 of 10 CPUs, not above its high threshold (60 %).
    with_app = msgspec.structs.replace(
        HOT,
        system_usage={"cpu": 0, "memory": GI},
        host_apps=(HostAppMetric(name="agent", usage={"cpu": 3000}),),
    )
    out = run(profile(), [node("hot"), node("idle")], PODS, [with_app, IDLE])
    hot = next(n for n in out.nodes if n.name == "hot")
    assert (hot.state, hot.usage["cpu"]) == ("normal", 6000)
    # without systemUsage it is derived (nodeUsage - pods - host applications = 0 here): the same
    derived = msgspec.structs.replace(HOT, host_apps=with_app.host_apps)
    out = run(profile(), [node("hot"), node("idle")], PODS, [derived, IDLE])
    assert next(n for n in out.nodes if n.name == "hot").usage["cpu"] == 6000
    # a metric whose pods report more than nodeUsage counts the pods (system usage at least 0)
    over = metric("hot", 5000, {"a": 3000, "b": 4000})
    out = run(profile(), [node("hot"), node("idle")], [pod("a"), pod("b")], [over, IDLE])
    assert next(n for n in out.nodes if n.name == "hot").usage["cpu"] == 7000


def test_number_of_nodes_needs_more_low_nodes_than_it_says() -> None:
    out = run(profile(numberOfNodes=1), [node("hot"), node("idle")], PODS, [HOT, IDLE])
    assert "at most numberOfNodes (1)" in out.message and not out.moves


def test_an_unschedulable_node_is_never_a_target() -> None:
    out = run(profile(), [node("hot"), node("idle", unschedulable=True)], PODS, [HOT, IDLE])
    assert states(out)["idle"] == "normal" and not out.moves


def test_paused_does_nothing() -> None:
    out = run(profile(paused=True), [node("hot"), node("idle")], PODS, [HOT, IDLE])
    assert out.message == "LowNodeLoad is paused" and not out.moves and not out.nodes


@pytest.mark.parametrize(
    ("kw", "hot_metric", "reason"),
    [
        ({}, None, "no NodeMetric reported"),
        ({}, metric("hot", 8000, age=3 * MIN), "NodeMetric expired (updated 180s ago)"),
        ({"settled_at": AT - 10}, metric("hot", 8000, age=60), "predates the last migration"),
        ({"busy": "PodMigrationJob j is still moving ns/x off it"}, HOT, "PodMigrationJob j is still moving"),
    ],
    ids=["no-metric", "expired", "older-than-a-migration", "migration-under-way"],
)
def test_excluded_nodes_are_neither_source_nor_target(
    kw: dict[str, Any], hot_metric: NodeMetric | None, reason: str
) -> None:
    metrics = [IDLE] + ([hot_metric] if hot_metric is not None else [])
    out = run(profile(), [node("hot", **kw), node("idle")], PODS, metrics)
    hot = next(n for n in out.nodes if n.name == "hot")
    assert hot.state == "excluded" and reason in hot.reason
    assert not out.moves


# --- anomaly detection ------------------------------------------------------------------------------------------------
def test_an_anomaly_is_confirmed_after_consecutive_rounds_above_high() -> None:
    prof = profile(anomalyCondition={"consecutiveAbnormalities": 3})
    nodes = [node("hot"), node("idle")]
    first = run(prof, nodes, PODS, [HOT, IDLE], round_no=1)
    assert first.detectors["hot"] == Detector(abnormal=1, round=1) and not first.moves
    assert "needs 3 consecutive rounds" in first.message
    second = run(prof, nodes, PODS, [HOT, IDLE], first.detectors, round_no=2)
    assert second.detectors["hot"].abnormal == 2 and not second.moves
    third = run(prof, nodes, PODS, [HOT, IDLE], second.detectors, round_no=3)
    assert third.moves and "hot" not in third.detectors  # moving pods off it resets its counter
    # a gap (a round in which it was not above high) starts the count again
    gap = run(prof, nodes, PODS, [HOT, IDLE], second.detectors, round_no=4)
    assert gap.detectors["hot"].abnormal == 1 and not gap.moves


# --- victims that may not move ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("victim", "prof", "code"),
    [
        (pod("a", owner_kind="DaemonSet"), profile(), "DaemonSet"),
        (
            pod("a", annotations={"scheduling.koordinator.sh/eviction-cost": "2147483647"}),
            profile(),
            "EvictionDisabled",
        ),
        (
            pod("a", annotations={"descheduler.alpha.kubernetes.io/prevent-eviction": "true"}),
            profile(),
            "EvictionDisabled",
        ),
        (pod("a", gang="ns/train"), profile(), "GangMember"),
        (pod("a", reservation="r1"), profile(), "Reserved"),
        (pod("a", local_storage=True), profile(), "LocalStorage"),
        (pod("a", migrating="job-1"), profile(), "Migrating"),
        (pod("a", terminating=True), profile(), "Terminating"),
        (pod("a", annotations={"kubernetes.io/config.mirror": "x"}), profile(), "MirrorPod"),
        (pod("a", priority=2_000_000_000), profile(), "SystemCritical"),
        (pod("a"), profile(evictableNamespaces={"exclude": ["ns"]}), "NamespaceExcluded"),
        (pod("a"), profile(evictableNamespaces={"include": ["other"]}), "NamespaceExcluded"),
        (
            pod("a"),
            profile(podSelectors=[{"name": "web", "selector": {"matchLabels": {"app": "web"}}}]),
            "NotSelected",
        ),
        (pod("x"), profile(), "NoPodMetric"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_pods_that_must_not_move_are_skipped_with_a_reason(
    victim: PodInput, prof: Profile, code: str
) -> None:
    out = run(prof, [node("hot"), node("idle")], [victim], [metric("hot", 8000, {"a": 3000}), IDLE])
    assert codes(out) == {victim.key.split("/")[1]: code}
    assert not out.moves and out.candidates[0].reason


def test_local_storage_and_system_critical_pods_move_when_the_migration_controller_allows() -> None:
    prof = profile(migration={"evictLocalStoragePods": True, "evictSystemCriticalPods": True})
    victims = [pod("a", local_storage=True), pod("b", priority=2_000_000_000)]
    out = run(prof, [node("hot"), node("idle")], victims, [metric("hot", 8000, {"a": 1500, "b": 1500}), IDLE])
    assert codes(out) == {"a": "Chosen", "b": "Chosen"}


# --- order and how many ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pods", "first"),
    [
        ([pod("a", koord_priority="koord-prod"), pod("b", koord_priority="koord-batch")], "b"),
        ([pod("a", koord_priority="koord-mid"), pod("b", koord_priority="koord-free")], "b"),
        ([pod("a", priority=10), pod("b", priority=5)], "b"),
        ([pod("a", kube_qos="Guaranteed"), pod("b", kube_qos="BestEffort")], "b"),
        ([pod("a", koord_qos="LSR"), pod("b", koord_qos="BE")], "b"),
        ([pod("a", annotations={"controller.kubernetes.io/pod-deletion-cost": "100"}), pod("b")], "b"),
        ([pod("a", annotations={"scheduling.koordinator.sh/eviction-cost": "5"}), pod("b")], "b"),
    ],
    ids=[
        "batch-before-prod",
        "free-before-mid",
        "lower-priority",
        "besteffort-first",
        "koord-be-first",
        "deletion-cost",
        "eviction-cost",
    ],
)
def test_the_least_important_pod_moves_first(pods: list[PodInput], first: str) -> None:
    # either pod alone relieves the node: exactly one moves, the one taken first
    out = run(
        profile(), [node("hot"), node("idle")], pods, [metric("hot", 7000, {"a": 1500, "b": 1500}), IDLE]
    )
    assert moved(out) == {first: "idle"}
    assert codes(out)[{"a": "b", "b": "a"}[first]] == "SourceRelieved"


def test_segmented_usage_the_smallest_sufficient_pod_else_the_largest_first() -> None:
    # 7500 of 10000 cpu, high 60 %: 1500 must go. c (1600) and d (3000) each suffice alone: the smaller one moves
    usages = {"a": 500, "b": 1000, "c": 1600, "d": 3000}
    out = run(
        profile(), [node("hot"), node("idle")], [pod(x) for x in usages], [metric("hot", 7500, usages), IDLE]
    )
    assert moved(out) == {"c": "idle"}
    # 9200: 3200 must go and no pod suffices alone: the largest first (d, then c), segments being taken from the
    # usage at the start of the round
    out = run(
        profile(), [node("hot"), node("idle")], [pod(x) for x in usages], [metric("hot", 9200, usages), IDLE]
    )
    assert [m.pod for m in out.moves] == ["ns/d", "ns/c"]
    hot = next(n for n in out.nodes if n.name == "hot")
    assert hot.usage_after["cpu"] == 4600 and hot.usage["cpu"] == 9200
    assert codes(out) == {"a": "SourceRelieved", "b": "SourceRelieved", "c": "Chosen", "d": "Chosen"}


def test_targets_are_never_pushed_above_their_high_thresholds() -> None:
    # node-hot (20 cores) must shed 5000m to get under 60 %; each idle node (10 cores) has room for one 2000m pod
    usages = {x: 2000 for x in "abcde"}
    out = run(
        profile(),
        [node("hot", cpu=20_000), node("idle-1"), node("idle-2")],
        [pod(x) for x in usages],
        [metric("hot", 17_000, usages), metric("idle-1", 2900), metric("idle-2", 2950)],
    )
    assert moved(out) == {"a": "idle-1", "b": "idle-2"}
    assert codes(out) == {"a": "Chosen", "b": "Chosen", "c": "NoTarget", "d": "NoTarget", "e": "NoTarget"}
    after = {n.name: n.usage_after for n in out.nodes}
    assert after["idle-1"]["cpu"] == 4900 and after["idle-2"]["cpu"] == 4950
    assert all(n.usage_after["cpu"] <= n.high["cpu"] for n in out.nodes if n.state == "low")


def test_the_target_with_the_least_usage_after_the_move_is_chosen() -> None:
    usages = {"a": 1500, "b": 1500}
    out = run(
        profile(),
        [node("hot"), node("idle-1"), node("idle-2")],
        [pod(x) for x in usages],
        [metric("hot", 8500, usages), metric("idle-1", 2000), metric("idle-2", 1000)],
    )
    assert moved(out) == {"a": "idle-2", "b": "idle-1"}


@pytest.mark.parametrize(("node_fit", "want"), [(True, "NoTarget"), (False, "Chosen")])
def test_node_fit_checks_the_targets_free_requests(node_fit: bool, want: str) -> None:
    victim = pod("a", requests={"cpu": 3000})
    target = node("idle", requested={"cpu": 8000})
    out = run(
        profile(nodeFit=node_fit), [node("hot"), target], [victim], [metric("hot", 8000, {"a": 2500}), IDLE]
    )
    assert codes(out) == {"a": want}


def test_deviation_thresholds_are_around_the_pool_average() -> None:
    # average cpu 40 %: low = 40 − 10 = 30 %, high = 40 + 10 = 50 %
    prof = profile(low={"cpu": 10}, high={"cpu": 10}, useDeviationThresholds=True)
    out = run(
        prof,
        [node("hot"), node("mid"), node("idle")],
        PODS,
        [metric("hot", 5500, {"a": 1000, "b": 1000}), metric("mid", 4000), metric("idle", 2500)],
    )
    assert states(out) == {"hot": "high", "mid": "normal", "idle": "low"}
    hot = next(n for n in out.nodes if n.name == "hot")
    assert hot.high == {"cpu": 5000} and hot.low == {"cpu": 3000}
    assert moved(out) == {"a": "idle"}


def test_prod_thresholds_look_at_the_prod_pods_usage() -> None:
    # the node is under its high cpu threshold, but its prod pods use 55 % > prod high 50 %: prod pods move
    prof = profile(prodLowThresholds={"cpu": 30}, prodHighThresholds={"cpu": 50})
    pods = [
        pod("p1", koord_priority="koord-prod"),
        pod("p2", koord_priority="koord-prod"),
        pod("b1", koord_priority="koord-batch"),
    ]
    hot = metric("hot", 5800, {"p1": 2750, "p2": 2750, "b1": 300}, prod=frozenset({"p1", "p2"}))
    out = run(prof, [node("hot"), node("idle")], pods, [hot, IDLE])
    assert states(out)["hot"] == "high"
    hot_node = next(n for n in out.nodes if n.name == "hot")
    assert hot_node.reason == "above high: prod cpu 55% > 50%"
    assert hot_node.prod_usage == {"cpu": 5500} and hot_node.prod_high == {"cpu": 5000}
    assert codes(out) == {"b1": "NotHelping", "p1": "Chosen", "p2": "SourceRelieved"}
    assert moved(out) == {"p1": "idle"}


def test_each_pool_has_its_own_thresholds_and_targets() -> None:
    prof = profile(
        nodePools=[
            {
                "name": "gpu",
                "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                "lowThresholds": {"cpu": 10, "memory": 10},
                "highThresholds": {"cpu": 90, "memory": 90},
            },
            {"name": "cpu"},
        ]
    )
    nodes = [
        node("g-hot", labels={"pool": "gpu"}),
        node("g-idle", labels={"pool": "gpu"}),
        node("hot"),
        node("idle"),
    ]
    pods = [pod("g", on="g-hot"), *PODS]
    metrics = [metric("g-hot", 8000, {"g": 2000}), metric("g-idle", 500), HOT, IDLE]
    out = run(prof, nodes, pods, metrics)
    pools = {n.name: (n.pool, n.state) for n in out.nodes}
    assert pools == {
        "g-hot": ("gpu", "normal"),
        "g-idle": ("gpu", "low"),
        "hot": ("cpu", "high"),
        "idle": ("cpu", "low"),
    }
    assert set(moved(out).values()) == {"idle"}  # never across pools
    assert out.message.startswith("gpu: no node is above the high thresholds; cpu: ")


# --- upstream's LowNodeLoad corners (low_node_load_test.go) -----------------------------------------------------------
def test_the_pods_threshold_counts_the_pods_on_a_node_one_per_pod_moved() -> None:
    # cpu is under its high threshold (50 %), the pod count (5 of 8) is above it: pods move until 4 of 8 remain
    prof = profile(low={"cpu": 30, "pods": 30}, high={"cpu": 60, "pods": 50})
    nodes = [
        NodeInput(name="hot", allocatable={"cpu": 10_000, "memory": 100 * GI, "pods": 8}),
        NodeInput(name="idle", allocatable={"cpu": 10_000, "memory": 100 * GI, "pods": 8}),
    ]
    pods = [pod(x, requests={"cpu": 100}) for x in "abcde"]
    hot = metric("hot", 2500, {x: 500 for x in "abcde"})
    out = run(prof, nodes, pods, [hot, IDLE])
    assert states(out) == {"hot": "high", "idle": "low"}
    assert moved(out) == {"a": "idle"}
    hot_node = next(n for n in out.nodes if n.name == "hot")
    assert hot_node.usage_after["pods"] == 4


def test_a_node_above_its_node_thresholds_is_relieved_by_node_usage_alone() -> None:
    # above both node (cpu 80 % > 60 %) and prod (a, b: 60 % > 40 %) thresholds: the batch pod c is enough
    prof = profile(prodLowThresholds={"cpu": 10}, prodHighThresholds={"cpu": 40})
    pods = [pod("a", koord_priority="koord-prod"), pod("b", koord_priority="koord-prod"), pod("c")]
    pods[2] = pod("c", koord_priority="koord-batch")
    hot = metric("hot", 8000, {"a": 3000, "b": 3000, "c": 2000}, prod=frozenset({"a", "b"}))
    out = run(prof, [node("hot"), node("idle")], pods, [hot, IDLE])
    assert moved(out) == {"c": "idle"}
    assert codes(out)["a"] == codes(out)["b"] == "SourceRelieved"


def test_a_node_above_only_its_prod_thresholds_moves_prod_pods_only() -> None:
    prof = profile(prodLowThresholds={"cpu": 10}, prodHighThresholds={"cpu": 40})
    pods = [pod(x, koord_priority="koord-prod") for x in "ab"] + [pod("c", koord_priority="koord-batch")]
    hot = metric("hot", 5500, {"a": 2500, "b": 2000, "c": 1000}, prod=frozenset({"a", "b"}))
    out = run(prof, [node("hot"), node("idle")], pods, [hot, IDLE])
    assert moved(out) == {"b": "idle"}
    assert codes(out)["c"] == "NotHelping"
    assert out.moves[0].evict_reason == "node is overutilized, prod cpu usage(45.00%)>threshold(40.00%)"


def test_the_job_reason_is_upstreams() -> None:
    out = run(profile(), [node("hot"), node("idle")], PODS, [HOT, IDLE])
    assert out.moves[0].evict_reason == "node is overutilized, node cpu usage(80.00%)>threshold(60.00%)"


def test_node_fit_asks_the_host_whether_the_pod_may_run_on_the_target() -> None:
    out = run_round(
        profile(),
        at=AT,
        round_no=1,
        nodes=[node("hot"), node("idle")],
        pods=PODS,
        metrics={"hot": HOT, "idle": IDLE},
        detectors={},
        node_fit=lambda p, n: "selector" if p.key == "ns/a" else "",
    )
    assert codes(out)["a"] == "NoTarget"
    assert moved(out) == {"b": "idle", "c": "idle"}


def test_the_rounds_eviction_caps_are_shared_by_its_profiles() -> None:
    caps = Caps(total=1)
    prof = profile(high={"cpu": 30, "memory": 80}, low={"cpu": 20, "memory": 30})
    kw: dict[str, Any] = {"at": AT, "round_no": 1, "metrics": {"hot": HOT, "idle": IDLE}, "detectors": {}}
    first = run_round(prof, nodes=[node("hot"), node("idle")], pods=PODS, caps=caps, **kw)
    assert len(first.moves) == 1
    assert set(codes(first).values()) >= {"Chosen", "EvictionLimit"}
    again = run_round(prof, nodes=[node("hot"), node("idle")], pods=PODS, caps=caps, **kw)
    assert again.moves == []
