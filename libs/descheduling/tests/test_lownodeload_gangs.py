"""LowNodeLoad and gangs: a picked gang member moves with every member of its gang (each one a migration, all
within the limits) when the gang's policy allows it, or none of them moves, with why."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.objects.nodemetric import NodeMetric, PodMetric
from allot_descheduling import (
    Caps,
    DeschedulerConfigError,
    NodeInput,
    PodInput,
    Profile,
    RoundOutcome,
    parse_config,
    run_round,
)

AT = 1_800_000_000_000_000
GI = 1024**3


def profile(**args: Any) -> Profile:
    thresholds = {
        "lowThresholds": {"cpu": 30},
        "highThresholds": {"cpu": 60},
        "anomalyCondition": {"consecutiveAbnormalities": 1},
    }
    plugin = {"name": "LowNodeLoad", "args": {**thresholds, **args}}
    return parse_config({"profiles": [{"name": "p", "pluginConfig": [plugin]}]}).profiles[0]


def node(name: str) -> NodeInput:
    return NodeInput(name=name, allocatable={"cpu": 10_000, "memory": 100 * GI})


def pod(name: str, on: str = "hot", **kw: Any) -> PodInput:
    return PodInput(key=f"ns/{name}", uid=f"uid-{name}", node=on, requests={"cpu": 1000, "memory": GI}, **kw)


def metric(name: str, cpu: int, pods: dict[str, int] | None = None) -> NodeMetric:
    usage = [PodMetric(namespace="ns", name=p, usage={"cpu": c}) for p, c in (pods or {}).items()]
    return NodeMetric(
        name=name, update_time=AT, has_node_metric=True, node_usage={"cpu": cpu}, pods=tuple(usage)
    )


def codes(outcome: RoundOutcome) -> dict[str, str]:
    return {c.pod.split("/")[1]: c.code for c in outcome.candidates}


def moved(outcome: RoundOutcome) -> dict[str, str]:
    return {m.pod.split("/")[1]: m.target for m in outcome.moves}


WHOLE = {"descheduler.allot.dev/gang-migration": "Whole"}
SKIP = {"descheduler.allot.dev/gang-migration": "Skip"}
# hot: 80 % cpu, above 60 %; a (3000) alone relieves it and is picked first; its gang mate m runs on warm (45 %)
NODES = [node("hot"), node("warm"), node("idle-1"), node("idle-2")]
METRICS = [
    metric("hot", 8000, {"a": 3000, "b": 500}),
    metric("warm", 4500, {"m": 1000}),
    metric("idle-1", 1000),
    metric("idle-2", 1200),
]


def gang(a: dict[str, Any] | None = None, m: dict[str, Any] | None = None) -> list[PodInput]:
    return [
        pod("a", gang="ns/train", **(a or {})),
        pod("b"),
        pod("m", gang="ns/train", **{"on": "warm", **(m or {})}),
    ]


def run(
    pods: list[PodInput], caps: Caps | None = None, metrics: list[NodeMetric] = METRICS, **args: Any
) -> RoundOutcome:
    return run_round(
        profile(**args),
        at=AT,
        round_no=1,
        nodes=NODES,
        pods=pods,
        metrics={x.name: x for x in metrics},
        detectors={},
        caps=caps,
    )


@pytest.mark.parametrize(
    ("pods", "args"),
    [
        (gang(), {"gangMigration": "Whole"}),
        (gang({"annotations": WHOLE}, {"annotations": WHOLE}), {}),
    ],
    ids=["by-arg", "by-annotation"],
)
def test_a_picked_gang_member_moves_with_its_whole_gang(pods: list[PodInput], args: dict[str, Any]) -> None:
    out = run(pods, **args)
    # each member to the low node it fits best, the ones placed before it counted: a fills idle-1, m goes to idle-2
    assert moved(out) == {"a": "idle-1", "m": "idle-2"}
    assert codes(out) == {"a": "Chosen", "m": "Chosen", "b": "SourceRelieved"}
    m = next(c for c in out.candidates if c.pod == "ns/m")
    assert m.node == "warm" and "gang ns/train whole (2 pods)" in m.reason
    assert all("gang ns/train moves whole" in x.evict_reason for x in out.moves)
    warm = next(n for n in out.nodes if n.name == "warm")
    assert warm.usage_after["cpu"] == 3500


def test_by_default_a_gang_member_stays_where_it_is() -> None:
    out = run(gang())
    assert codes(out)["a"] == "GangMember" and "Skip" in out.candidates[0].reason
    assert "a" not in moved(out) and "m" not in moved(out)


def test_a_member_stating_skip_keeps_the_whole_gang() -> None:
    out = run(gang(m={"annotations": SKIP}), gangMigration="Whole")
    assert codes(out)["a"] == "GangMember"
    assert "member ns/m does not allow it" in next(c.reason for c in out.candidates if c.pod == "ns/a")
    assert not set(moved(out)) & {"a", "m"}


@pytest.mark.parametrize(
    ("m", "words"),
    [
        ({"local_storage": True}, "member ns/m may not move: LocalStorage"),
        ({"migrating": "job-1"}, "member ns/m may not move: Migrating"),
        ({"on": "gone"}, "its node gone is not measured this round"),
    ],
    ids=["refused-by-the-evictor", "already-migrating", "node-not-measured"],
)
def test_one_member_that_may_not_move_keeps_them_all(m: dict[str, Any], words: str) -> None:
    out = run(gang(m=m), gangMigration="Whole")
    a = next(c for c in out.candidates if c.pod == "ns/a")
    assert a.code == "GangMemberHeld" and words in a.reason, a.reason
    assert not set(moved(out)) & {"a", "m"}


def test_the_limits_count_every_member_and_refuse_a_gang_larger_than_they_allow() -> None:
    out = run(gang(), caps=Caps(total=1), gangMigration="Whole")
    a = next(c for c in out.candidates if c.pod == "ns/a")
    assert a.code == "EvictionLimit" and "counted as 2 migrations" in a.reason
    assert moved(out) == {"b": "idle-1"}  # the one migration the limit allows goes to a pod that moves alone
    out = run(gang(), caps=Caps(total=2), gangMigration="Whole")
    assert set(moved(out)) == {"a", "m"}


def test_no_target_for_one_member_keeps_them_all() -> None:
    heavy = [pod("a", gang="ns/train"), pod("m", on="warm", gang="ns/train")]
    metrics = [
        metric("hot", 8000, {"a": 3000}),
        metric("warm", 5800, {"m": 5200}),  # room for a on idle-1, none left for m
        metric("idle-1", 1000),
        metric("idle-2", 1200),
    ]
    out = run(heavy, metrics=metrics, gangMigration="Whole")
    a = next(c for c in out.candidates if c.pod == "ns/a")
    assert a.code == "NoTarget" and "member ns/m" in a.reason
    assert not out.moves


def test_gang_migration_must_be_skip_or_whole() -> None:
    with pytest.raises(DeschedulerConfigError) as err:
        profile(gangMigration="Sometimes")
    [issue] = err.value.issues
    assert (
        issue.path.endswith("profiles[0].pluginConfig[0].args.gangMigration")
        and "Skip, Whole" in issue.message
    )
