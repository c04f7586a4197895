"""The free-resource index: its buckets and checks, and that the engine decides the same with it as without it.

The equivalence tests place a cluster's pods twice, with ``PlacementEngine(..., free_index=False)`` (every node
of a new pod shape evaluated, the engine as before the index) and with the index, and compare every decision —
node, devices, scores, reasons and the explanation of unschedulable pods — and the final allocation digest.
"""

from __future__ import annotations

import heapq
import random
from pathlib import Path

import pytest

from allot_contracts.objects import names as n
from allot_placement import PlacementConfig, PlacementEngine, _index
from allot_placement import engine as engine_module
from allot_placement._free import FreeIndex, bucket, fits, gpu_free, need
from allot_placement._index import Rankings, ShapeIndex
from allot_placement.evaluate import NodeResult
from allot_placement.openb import TraceNode, TracePod, load_node, read_nodes, read_pods, replicate, trace_pod
from allot_placement.pod import pod_spec
from allot_placement.reasons import Reason

# the openb trace lives in shared/traces beside the checkout (or beside the folder of worktrees)
OPENB = next(
    (
        p / "shared" / "traces" / "openb"
        for p in Path(__file__).resolve().parents[4:6]
        if (p / "shared" / "traces" / "openb").is_dir()
    ),
    Path("shared") / "traces" / "openb",
)
MODELS = (
    ("G2", 8, 96000, 393216),
    ("T4", 2, 32000, 131072),
    ("V100M32", 4, 64000, 262144),
    ("", 0, 16000, 65536),
)
TYPICAL = {
    "typicalPods": [
        {"cpuMilli": 4000, "gpuCount": 1, "gpuMilli": 500, "weight": 3},
        {"cpuMilli": 4000, "gpuCount": 1, "gpuMilli": 1000, "weight": 2},
    ]
}
SHAPES = (  # cpu milli, memory MiB, GPUs, GPU milli each
    (4000, 16384, 1, 1000),
    (8000, 32768, 2, 1000),
    (2000, 8192, 1, 500),
    (1000, 4096, 1, 250),
    (16000, 65536, 8, 1000),
    (3000, 12288, 0, 0),
    (200000, 1024, 0, 0),  # fits nowhere: explained
)


def generated(count: int, seed: int) -> tuple[list[TraceNode], list[TracePod]]:
    rng = random.Random(seed)
    nodes = []
    for i in range(count):
        model, gpus, cpu, mem = MODELS[rng.randrange(len(MODELS))]
        nodes.append(TraceNode(f"node-{i:04d}", cpu, mem, gpus, model))
    pods = []
    for i in range(count * 6):
        cpu, mem, g, milli = SHAPES[rng.randrange(len(SHAPES))]
        pods.append(TracePod(f"pod-{i:05d}", cpu + rng.randrange(3) * 500, mem, g, milli, ()))
    return nodes, pods


def decisions(
    nodes: list[TraceNode], pods: list[TracePod], policy: str, *, free_index: bool, release_every: int = 7
) -> tuple[list[bytes], str]:
    import msgspec

    cfg = {"policy": policy, "fragmentation": TYPICAL} if policy == "fgd" else {"policy": policy}
    eng = PlacementEngine(PlacementConfig.from_dict(cfg), free_index=free_index)
    for node in nodes:
        load_node(eng, node)
    out, placed = [], []
    for i, p in enumerate(pods):
        d = eng.schedule(trace_pod(p))
        out.append(msgspec.json.encode(d))
        if d.outcome == n.SCHEDULED:
            eng.assume(d)
            placed.append(d.pod)
        if release_every and i % release_every == release_every - 1 and placed:  # releases free capacity
            ns, _, name = placed.pop(len(placed) // 2).partition("/")
            eng.release(ns, name)
    return out, eng.digest()


@pytest.mark.parametrize("policy", ["binpack", "fgd", "spread"])
def test_generated_cluster_same_decisions_with_and_without_the_index(policy: str) -> None:
    nodes, pods = generated(60, seed=7)
    without, digest = decisions(nodes, pods, policy, free_index=False)
    with_index, digest_index = decisions(nodes, pods, policy, free_index=True)
    assert sum(b'"Scheduled"' in d for d in without) > len(pods) // 3  # the run places pods...
    assert sum(b'"Scheduled"' not in d for d in without) > 10  # ...and explains unschedulable ones
    for i, (a, b) in enumerate(zip(without, with_index, strict=True)):
        assert a == b, f"decision {i} differs"
    assert digest == digest_index


@pytest.mark.skipif(
    not (OPENB / "openb_pod_list_default.csv").is_file(),
    reason="the openb trace is not at ../shared/traces/openb beside the checkout (the generated clusters still run)",
)
@pytest.mark.parametrize("policy", ["binpack", "fgd"])
def test_openb_subset_same_decisions_with_and_without_the_index(policy: str) -> None:
    nodes = read_nodes(OPENB / "openb_node_list_gpu_node.csv")[::12]
    pods = read_pods(OPENB / "openb_pod_list_default.csv")[: len(nodes) * 8]
    without, digest = decisions(nodes, pods, policy, free_index=False, release_every=0)
    with_index, digest_index = decisions(nodes, pods, policy, free_index=True, release_every=0)
    assert without == with_index
    assert digest == digest_index


def test_index_skips_nodes_that_cannot_fit() -> None:
    nodes, pods = generated(60, seed=3)
    engines = []
    for free_index in (False, True):
        eng = PlacementEngine(PlacementConfig.from_dict({"policy": "binpack"}), free_index=free_index)
        for node in nodes:
            load_node(eng, node)
        for p in pods:
            d = eng.schedule(trace_pod(p))
            if d.outcome == n.SCHEDULED:
                eng.assume(d)
        engines.append(eng)
    assert engines[1].stats["evaluations"] < engines[0].stats["evaluations"]


def test_replicated_nodes_get_new_names() -> None:
    nodes = [TraceNode("a", 1000, 1024, 0, ""), TraceNode("b", 1000, 1024, 0, "")]
    assert [x.name for x in replicate(nodes, 5)] == ["a", "b", "a-r1", "b-r1", "a-r2"]
    assert nodes[0].name == "a"


def test_bucket_is_monotone() -> None:
    values = [-5, 0, 1, 2, 3, 64, 100, 127, 128, 96000, 10**12]
    for a in values:
        for b in values:
            if a >= b > 0:
                assert bucket(a) >= bucket(b)
    assert bucket(-1) < bucket(0)


def _engine(*nodes: TraceNode) -> PlacementEngine:
    eng = PlacementEngine(PlacementConfig.from_dict({"policy": "binpack"}))
    for node in nodes:
        load_node(eng, node)
    return eng


def _want(cpu: int, mem: int, gpus: int, milli: int) -> tuple[object, ...]:
    spec, _ = pod_spec(trace_pod(TracePod("p", cpu, mem, gpus, milli, ())), "", b"k")
    assert spec is not None
    return need(spec)


def test_index_follows_allocation_and_release() -> None:
    eng = _engine(TraceNode("g8", 96000, 393216, 8, "G2"), TraceNode("cpu", 16000, 65536, 0, ""))
    idx = FreeIndex()
    for name in ("g8", "cpu"):
        idx.update(name, eng.node_state(name))
    whole4 = _want(4000, 1024, 4, 1000)
    assert sorted(idx.candidates(whole4)) == ["g8"]  # type: ignore[arg-type]
    assert sorted(idx.candidates(_want(1000, 1024, 0, 0))) == ["cpu", "g8"]  # type: ignore[arg-type]
    d = eng.schedule(trace_pod(TracePod("big", 4000, 1024, 6, 1000, ())))
    eng.assume(d)
    idx.update("g8", eng.node_state("g8"))
    assert gpu_free(eng.node_state("g8")) == (100, 100, 0, 0, 0, 0, 0, 0)  # type: ignore[arg-type]
    assert idx.candidates(whole4) == []  # type: ignore[arg-type]
    assert idx.candidates(_want(1000, 1024, 2, 1000)) == ["g8"]  # type: ignore[arg-type]
    assert not idx.admits("g8", whole4)  # type: ignore[arg-type]
    eng.release("openb", "big")
    idx.update("g8", eng.node_state("g8"))
    assert idx.admits("g8", whole4)  # type: ignore[arg-type]
    idx.update("g8", None)
    assert idx.candidates(whole4) == [] and len(idx) == 1  # type: ignore[arg-type]


def test_candidates_are_exactly_the_nodes_that_pass_the_check() -> None:
    nodes, pods = generated(80, seed=11)
    eng = _engine(*nodes)
    for p in pods[:200]:
        d = eng.schedule(trace_pod(p))
        if d.outcome == n.SCHEDULED:
            eng.assume(d)
    idx = FreeIndex()
    for node in nodes:
        idx.update(node.name, eng.node_state(node.name))
    for cpu, mem, g, milli in SHAPES:
        want = _want(cpu, mem, g, milli)
        expected = sorted(
            nd.name
            for nd in nodes
            if fits(eng.node_state(nd.name), gpu_free(eng.node_state(nd.name)), want)  # type: ignore[arg-type]
        )
        assert sorted(idx.candidates(want)) == expected  # type: ignore[arg-type]


def test_walked_holds_every_candidate_and_admission_is_remembered_by_node_state() -> None:
    """A node back in an earlier state is admitted as it was then; a node in a new state is tested afresh."""
    eng = _engine(TraceNode("g8", 96000, 393216, 8, "G2"), TraceNode("cpu", 16000, 65536, 0, ""))
    assert eng._free is not None
    whole4 = trace_pod(TracePod("whole4", 4000, 1024, 4, 1000, ()))
    for want in (_want(4000, 1024, 4, 1000), _want(1000, 1024, 0, 0), _want(200000, 1024, 0, 0)):
        assert set(eng._free.candidates(want)) <= set(eng._free.walked(want))  # type: ignore[arg-type]
    for _ in range(3):  # the same states again and again: the remembered answers must follow them
        assert eng.schedule(whole4).node == "g8"
        d = eng.schedule(trace_pod(TracePod("big", 4000, 1024, 6, 1000, ())))
        eng.assume(d)
        assert eng.schedule(whole4).outcome != n.SCHEDULED  # 2 whole GPUs left on g8
        eng.release("openb", "big")
    assert eng._admit_memo  # the tests were remembered


# --- the rankings: rebuilt when more nodes changed than a rebuild checks, kept within a budget of entries held,
# and explaining unschedulable pods from a name-ordered heap; none of it changes a decision

_FULL: Reason = ("Insufficient cpu", "InsufficientResource")


@pytest.mark.parametrize("policy", ["binpack", "fgd"])
def test_rebuilds_evictions_and_compaction_change_no_decision(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes, pods = generated(60, seed=5)
    without, digest = decisions(nodes, pods, policy, free_index=False)
    # every catch-up of more changed nodes than a rebuild checks rebuilds; a few hundred entries keep two or three
    # rankings; the change log drops its older half past 240 changes
    monkeypatch.setattr(_index, "_REBUILD_FLOOR", 0)
    monkeypatch.setattr(engine_module, "_INDEX_ENTRY_BUDGET", 300)
    monkeypatch.setattr(engine_module, "_LOG_SLACK", 0)
    with_index, digest_index = decisions(nodes, pods, policy, free_index=True)
    for i, (a, b) in enumerate(zip(without, with_index, strict=True)):
        assert a == b, f"decision {i} differs"
    assert digest == digest_index


def test_first_infeasible_is_the_name_order_under_changes() -> None:
    rng = random.Random(3)
    names = [f"n{i:03d}" for i in range(120)]
    state: dict[str, tuple[int, NodeResult]] = {}
    idx = ShapeIndex(0)
    for step in range(400):
        changed = rng.sample(names, rng.randrange(1, 12))
        for name in changed:
            feasible = rng.random() < 0.5
            res = (
                NodeResult(feasible=True, score=rng.randrange(100))
                if feasible
                else NodeResult(feasible=False, reasons=(_FULL,))
            )
            state[name] = (step, res)
        idx.update(changed, state.get)
        infeasible = sorted(name for name, (_, r) in state.items() if not r.feasible)
        assert [name for name, _ in idx.first_infeasible(5)] == infeasible[:5]
        assert idx.counts.get(_FULL[0], 0) == len(infeasible)
        assert len(idx.names) <= 2 * len(infeasible) + 64 + 12  # stale names are dropped
    assert heapq.nsmallest(3, idx.infeasible) == [name for name, _ in idx.first_infeasible(3)]


def test_pending_rebuilds_only_when_more_nodes_changed_than_a_rebuild_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_index, "_REBUILD_FLOOR", 2)
    idx = ShapeIndex(0)
    log = ["a", "b", "a", "c", "a"]
    assert idx.pending(log, 0, lambda: 4) == ["a", "b", "c"]  # three distinct nodes, a rebuild checks four
    assert idx.pending(log, 0, lambda: 3) is None
    assert idx.pending(log, 3, lambda: 1) == ["c", "a"]  # at the floor: caught up
    assert idx.pending(log, 0, None) == ["a", "b", "c"]  # without the free-resource index: always caught up
    idx.whole = True
    assert idx.pending(log, 0, lambda: 1) == ["a", "b", "c"]  # a ranking of every node is kept complete


def test_rankings_count_what_they_hold_and_stay_within_budget() -> None:
    live = [f"n{i:02d}" for i in range(40)]
    results = {name: (1, NodeResult(feasible=True, score=i)) for i, name in enumerate(live)}
    rankings = Rankings(budget=200)
    changes: list[str] = []
    for step in range(30):
        key = f"shape-{step % 7}".encode()
        changes.append(live[step % len(live)])
        idx = rankings.ranking(key, (changes, 0), None, results.get, lambda: list(live))
        assert idx.top(1) == [("n39", 39)]
        assert rankings.held == sum(r.held() for r in rankings.by_key.values())
        assert rankings.held <= 200 or len(rankings) == 1
        assert next(reversed(rankings.by_key)) == key  # the one just used is the last to go
    assert len(rankings) < 7  # 40 nodes and 40 heap entries each: two rankings fit


def test_top_is_the_best_nodes_when_scores_rise_fall_and_nodes_leave() -> None:
    rng = random.Random(5)
    names = [f"n{i:03d}" for i in range(80)]
    state: dict[str, tuple[int, NodeResult]] = {}
    for name in names:
        state[name] = (0, NodeResult(feasible=True, score=rng.randrange(50)))
    idx = ShapeIndex(0)
    idx.build(names, state.get)
    assert sorted(map(id, idx.feasible.values())) == sorted(map(id, idx.heap))  # one tuple for both
    for step in range(1, 600):
        changed = rng.sample(names, rng.randrange(1, 8))
        for (
            name
        ) in changed:  # mostly falling scores (an allocation), some rising, some nodes gone or infeasible
            roll = rng.random()
            if roll < 0.1:
                state.pop(name, None)
            elif roll < 0.15:
                state[name] = (step, NodeResult(feasible=False, reasons=(_FULL,)))
            else:
                old = state.get(name)
                base = old[1].score if old is not None and old[1].feasible else 25
                delta = rng.randrange(-6, 3) if roll < 0.85 else rng.randrange(0, 10)
                state[name] = (step, NodeResult(feasible=True, score=max(base + delta, 0)))
        idx.update(changed, state.get)
        ranked = sorted((-r.score, name) for name, (_, r) in state.items() if r.feasible)
        assert idx.top(3) == [(name, -neg) for neg, name in ranked[:3]]
        assert dict(idx.scores()) == {n: -neg for neg, n in ranked}
        # a node's entry is the heap's own tuple unless its score fell since it was pushed (memory: one tuple)
        in_heap = {id(entry) for entry in idx.heap}
        separate = [name for name, entry in idx.feasible.items() if id(entry) not in in_heap]
        assert all(any(e[1] == name and e[0] < idx.feasible[name][0] for e in idx.heap) for name in separate)
