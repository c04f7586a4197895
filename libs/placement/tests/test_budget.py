"""The feasible-node budget (``percentageOfNodesToScore``): how many nodes a placement examines, that which nodes
it examines depends only on the node set and the pod (a rebuilt or replaying engine re-derives every decision), and
that bad values are refused with the field's path."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from allot_contracts.objects import names as n
from allot_placement import ConfigError, PlacementConfig, PlacementEngine
from allot_placement.budget import nodes_to_find
from allot_placement.testing import a_node, a_pod, admit, load

CPUS = ("8", "16", "32", "64")


def cluster(count: int) -> list[dict[str, Any]]:
    return [a_node(f"node-{i:04d}", cpu=CPUS[i % len(CPUS)], memory="256Gi") for i in range(count)]


def engine(nodes: list[dict[str, Any]], percentage: int | None, *, caches: bool = True) -> PlacementEngine:
    raw: dict[str, Any] = {"policy": "binpack"}
    if percentage is not None:
        raw["percentageOfNodesToScore"] = percentage
    eng = PlacementEngine(PlacementConfig.from_dict(raw), caches=caches)
    load(eng, *nodes)
    return eng


def pods(count: int) -> list[Any]:
    return [admit(a_pod(f"p-{i}", cpu=str(1 + i % 7), memory="1Gi")) for i in range(count)]


def evaluations(eng: PlacementEngine, pod: Any) -> int:
    before = eng.stats["evaluations"]
    eng.schedule(pod)
    return eng.stats["evaluations"] - before


def test_upstream_share_of_nodes_to_find() -> None:
    # kube-scheduler's numFeasibleNodesToFind: adaptive 50% - nodes/125 (floor 5%), at least 100 nodes
    assert nodes_to_find(0, 50) == 50
    assert nodes_to_find(10, 99) == 99
    assert nodes_to_find(0, 1213) == 1213 * 41 // 100
    assert nodes_to_find(0, 6065) == 6065 * 5 // 100
    assert nodes_to_find(10, 1213) == 121
    assert nodes_to_find(10, 500) == 100
    assert nodes_to_find(100, 5000) == 5000


@pytest.mark.parametrize(
    ("percentage", "expected"), [(None, 300), (100, 300), (10, 100), (50, 150), (0, 144)]
)
def test_budget_limits_the_nodes_scored(percentage: int | None, expected: int) -> None:
    # 300 nodes, all feasible, no caches: every node examined is evaluated once, and the top ones again for the
    # decision's explanation; adaptive at 300 nodes: 50% - 300/125 = 48%
    eng = engine(cluster(300), percentage, caches=False)
    for pod in pods(5):
        assert evaluations(eng, pod) == expected + eng.config.top_scores


def test_budget_chooses_among_the_nodes_it_examined() -> None:
    eng = engine(cluster(400), 10, caches=False)
    full = engine(cluster(400), None, caches=False)
    differs = 0
    for pod in pods(40):
        d, best = eng.schedule(pod), full.schedule(pod)
        assert d.outcome == best.outcome == n.SCHEDULED
        differs += d.node != best.node
    assert differs  # a share of the nodes: not always the cluster-wide best


def decisions(eng: PlacementEngine, batch: list[Any]) -> list[bytes]:
    out = []
    for pod in batch:
        d = eng.schedule(pod)
        if d.outcome == n.SCHEDULED:
            eng.assume(d)
        out.append(msgspec.json.encode(d))
    return out


@pytest.mark.parametrize("percentage", [0, 10, 35])
def test_replay_and_rebuild_re_derive_every_decision(percentage: int) -> None:
    nodes = cluster(260)
    batch = pods(120) + [admit(a_pod("too-big", cpu="128"))]
    first = engine(nodes, percentage)
    recorded = decisions(first, batch)
    # replay: a fresh engine, nodes arriving in another order, caches on or off
    for caches in (True, False):
        again = engine(list(reversed(nodes)), percentage, caches=caches)
        assert decisions(again, batch) == recorded
        assert again.digest() == first.digest()
    # rebuild mid-way: the first half's recorded allocations applied to a new engine, then the rest decided
    half = len(batch) // 2
    rebuilt = engine(nodes[130:] + nodes[:130], percentage)
    for raw in reversed(recorded[:half]):
        d = msgspec.json.decode(raw, type=type(first.schedule(batch[0])))
        if d.outcome == n.SCHEDULED:
            rebuilt.assume(d)
    assert decisions(rebuilt, batch[half:]) == recorded[half:]
    assert rebuilt.digest() == first.digest()


def test_unschedulable_with_budget_explains_every_node() -> None:
    eng = engine(cluster(200), 10)
    d = eng.schedule(admit(a_pod("too-big", cpu="128")))
    assert d.outcome != n.SCHEDULED
    full = engine(cluster(200), None).schedule(admit(a_pod("too-big", cpu="128")))
    assert d.message == full.message


@pytest.mark.parametrize("bad", [-1, 101, "50", True, 12.5, None])
def test_bad_percentage_is_refused(bad: Any) -> None:
    if bad is None:  # absent: the default, score every node
        assert (
            PlacementConfig.from_dict({"percentageOfNodesToScore": None}).percentage_of_nodes_to_score == 100
        )
        return
    with pytest.raises(ConfigError) as exc:
        PlacementConfig.from_dict({"percentageOfNodesToScore": bad})
    [issue] = exc.value.errors
    assert issue.path == "percentageOfNodesToScore"
    assert "from 0 to 100" in issue.message


def test_default_keeps_the_config_version() -> None:
    assert PlacementConfig.from_dict({"percentageOfNodesToScore": 100}).version == PlacementConfig().version
    cfg = PlacementConfig.from_dict({"percentageOfNodesToScore": 0})
    assert cfg.version != PlacementConfig().version
    assert PlacementConfig.from_dict(cfg.to_dict()) == cfg
