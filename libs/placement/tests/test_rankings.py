"""The per-shape rankings' memory bound counts what the rankings hold, and never changes a decision.

A ranking built through the free-resource index holds only the nodes that can fit the shape, so a cluster with many
nodes and narrow shapes keeps many more rankings within the same entry budget than a cap that assumed every ranking
holds every node; the budget is still kept, and decisions are those of an engine without caches.
"""

from __future__ import annotations

import msgspec
import pytest

from allot_contracts.objects import names as n
from allot_placement import PlacementConfig, PlacementEngine, engine
from allot_placement._index import Rankings, ShapeIndex
from allot_placement.openb import TraceNode, TracePod, load_node, trace_pod

NODES = [TraceNode(f"cpu-{i:03d}", 8000, 32768, 0, "") for i in range(190)] + [
    TraceNode(f"gpu-{i:02d}", 96000, 393216, 8, "G2") for i in range(10)
]
SHAPES = [TracePod(f"pod-{i:02d}", 1000 + 100 * i, 4096, 1, 1000, ()) for i in range(50)]  # GPU nodes only


def loaded(**kw: bool) -> PlacementEngine:
    eng = PlacementEngine(PlacementConfig.from_dict({"policy": "binpack"}), **kw)
    for node in NODES:
        load_node(eng, node)
    return eng


def held(eng: PlacementEngine) -> int:
    return sum(idx.entries() for idx in eng._indexes.by_key.values())


def test_rankings_of_narrow_shapes_are_kept_by_what_they_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "_INDEX_ENTRY_BUDGET", 2000)  # a node-count cap would keep 2000 // 200 = 10
    eng = loaded()
    for pod in SHAPES:
        assert eng.schedule(trace_pod(pod)).outcome == n.SCHEDULED
    assert len(eng._indexes) == len(SHAPES)
    assert eng._indexes.total == held(eng) <= 2000


def test_budget_is_kept_and_decisions_match_an_engine_without_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "_INDEX_ENTRY_BUDGET", 120)
    cached, fresh = loaded(), loaded(caches=False)
    for round_ in range(3):
        for pod in SHAPES:
            got = [eng.schedule(trace_pod(pod)) for eng in (cached, fresh)]
            assert msgspec.json.encode(got[0]) == msgspec.json.encode(got[1]), (round_, pod.name)
            assert cached._indexes.total == held(cached)
            assert cached._indexes.total <= 120 or len(cached._indexes) == 1
            if got[0].outcome == n.SCHEDULED and round_ < 2:
                for eng, d in zip((cached, fresh), got, strict=True):
                    eng.assume(d)
    assert 1 < len(cached._indexes) < len(SHAPES)  # evicted, yet more than one kept
    assert cached.digest() == fresh.digest()


def test_rankings_drop_least_recently_used_but_never_the_one_that_grew() -> None:
    rankings = Rankings()
    for key in (b"a", b"b", b"c"):
        idx = ShapeIndex(0)
        idx.infeasible = {f"n{i}": () for i in range(10)}
        rankings.put(key, idx)
    rankings.touch(b"a")  # order: b, c, a
    grown = rankings.get(b"a")
    assert grown is not None
    before = grown.entries()
    grown.infeasible.update({f"m{i}": () for i in range(30)})
    rankings.grew(b"a", grown, before, 45)
    assert list(rankings.by_key) == [b"a"]  # b and c dropped; a (40 entries) kept
    assert rankings.total == 40
    rankings.put(b"a", ShapeIndex(0))  # a replaced ranking no longer counts
    assert rankings.total == 0
