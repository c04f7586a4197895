"""Engine behaviour: purity of schedule, assume/release, bound pods, gangs, snapshots, determinism."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import msgspec
import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import parse_device_cr, parse_node
from allot_contracts.objects.pod import Pod, parse_pod
from allot_placement import Decision, GroupDecision, PlacementEngine
from allot_placement.evaluate import evaluate, static_filter
from allot_placement.pod import pod_spec
from allot_placement.testing import (
    a_device,
    a_node,
    a_pod,
    admit,
    an_nrt,
    bound,
    engine_with,
    load,
    minors,
    place,
)

HINT = n.ANN_DEVICE_ALLOCATE_HINT


def gpu_cluster(nodes: int = 2) -> PlacementEngine:
    docs: list[dict] = []
    for i in range(nodes):
        docs += [a_node(f"n{i}", cpu="64", memory="256Gi"), a_device(f"n{i}", gpus=8)]
    return engine_with(*docs)


def test_schedule_does_not_mutate() -> None:
    eng = gpu_cluster()
    before = eng.digest()
    d = eng.schedule(admit(a_pod("p", gpu=2)))
    assert d.outcome == n.SCHEDULED and eng.digest() == before
    assert eng.schedule(admit(a_pod("p", gpu=2))) == d


def test_assume_then_release_restores_state() -> None:
    eng = gpu_cluster()
    before = eng.digest()
    d = place(eng, a_pod("p", namespace="ml", gpu=2, cpu="4"))
    assert eng.digest() != before
    assert eng.snapshot()["n0"]["devices"]["gpu"]["0"]["used"][n.GPU_CORE] == "100"
    freed = eng.release("ml", "p")
    assert freed is not None and freed.node == d.node
    assert freed.allocation is not None and freed.allocation.requests["cpu"] == 4000
    assert eng.digest() == before
    assert eng.release("ml", "p") is None


def test_assume_requires_a_scheduled_decision() -> None:
    eng = gpu_cluster()
    with pytest.raises(ValueError, match="Scheduled"):
        eng.assume(eng.schedule(admit(a_pod("p", gpu=99))))


def test_reassuming_a_pod_moves_it() -> None:
    eng = gpu_cluster()
    d = eng.schedule(admit(a_pod("p", gpu=8)))
    eng.assume(d)
    eng.assume(Decision.from_dict({**d.to_dict(), "allocation": {**d.to_dict()["allocation"], "node": "n1"}}))
    snap = eng.snapshot()
    assert snap["n0"]["devices"]["gpu"]["0"]["used"] == {} and snap["n1"]["devices"]["gpu"]["0"]["used"] != {}


def test_bound_pods_consume_and_terminated_pods_do_not() -> None:
    pod = a_pod("old", cpu="60", gpu=1)
    alloc = {
        "gpu": [
            {
                "minor": 3,
                "resources": {"kubernetes.io/gpu-core": "100", "kubernetes.io/gpu-memory-ratio": "100"},
            }
        ]
    }
    eng = engine_with(
        a_node("n0", cpu="64"), a_device("n0", gpus=4), bound(pod, "n0", device_allocated=alloc)
    )
    gpu3 = eng.snapshot()["n0"]["devices"]["gpu"]["3"]["used"]
    assert gpu3 == {n.GPU_CORE: "100", n.GPU_MEMORY: "80Gi", n.GPU_MEMORY_RATIO: "100"}  # memory completed
    assert eng.schedule(admit(a_pod("p", cpu="8"))).codes == ["InsufficientResource"]
    done = bound(pod, "n0", device_allocated=alloc)
    done["status"] = {"phase": "Succeeded"}
    load(eng, done)
    assert eng.schedule(admit(a_pod("p", cpu="8"))).outcome == n.SCHEDULED


def test_a_bound_pod_with_a_malformed_allocation_is_accounted_by_its_requests_with_a_warning() -> None:
    bad = bound(a_pod("old", cpu="8"), "n0")
    bad["metadata"]["annotations"][n.ANN_DEVICE_ALLOCATED] = "{oops"
    errors: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    pod = parse_pod(bad, errors, warnings)
    assert pod is not None and errors == []
    assert [(w.path, w.code) for w in warnings] == [
        (f'metadata.annotations["{n.ANN_DEVICE_ALLOCATED}"]', "Unreadable")
    ]
    eng = engine_with(a_node("n0", cpu="8"))
    eng.add_bound_pod(pod)
    assert eng.schedule(admit(a_pod("p", cpu="1"))).codes == ["InsufficientResource"]
    with pytest.raises(ValueError, match="not bound"):
        gpu_cluster(1).add_bound_pod(admit(a_pod("unbound")))


def test_bound_cpuset_and_numa_are_accounted() -> None:
    pod = bound(
        a_pod("old", cpu="4", labels={n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"}),
        "n0",
        resource_status={
            "cpuset": "0-1,16-17",
            "numaNodeResources": [{"node": 0, "resources": {"cpu": "4"}}],
        },
    )
    eng = engine_with(a_node("n0", cpu="32"), an_nrt("n0"), pod)
    assert eng.snapshot()["n0"]["cpusetAllocated"] == "0-1,16-17"
    d = eng.schedule(
        admit(a_pod("p", cpu="2", labels={n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"}))
    )
    assert "0" not in d.annotations[n.ANN_RESOURCE_STATUS]["cpuset"].split(",")[0].split("-")


def test_node_and_device_lifecycle() -> None:
    eng = gpu_cluster(1)
    eng.delete_device("n0")
    assert eng.schedule(admit(a_pod("p", gpu=1))).codes == ["InsufficientGPUDevices"]
    load(eng, a_device("n0", gpus=2))
    assert eng.schedule(admit(a_pod("p", gpu=1))).outcome == n.SCHEDULED
    eng.delete_node("n0")
    assert eng.schedule(admit(a_pod("p"))).message == "0/0 nodes are available."
    assert eng.nodes_total() == 0


def test_inventory_errors_have_paths() -> None:
    dev = a_device("n0", gpus=2)
    dev["spec"]["devices"][1]["minor"] = -1
    _, _, errors = parse_device_cr(dev)
    assert [e.path for e in errors] == ["spec.devices[1].minor"]
    assert parse_node({"metadata": {}})[1][0].path == "metadata.name"


def _unchecked_lsr(name: str) -> Pod:
    """An LSR pod with a fractional CPU request: the door refuses it; the engine must still reject it."""
    pod = admit(a_pod(name, cpu="1500m"))
    return msgspec.structs.replace(pod, koord_qos="LSR", koord_priority="koord-prod")


def test_decision_round_trips_through_json() -> None:
    eng = engine_with(
        a_node("n0", cpu="64", memory="256Gi"), a_device("n0", gpus=8, rdma=2, rdma_vfs=2), an_nrt("n0")
    )
    pod = a_pod(
        "p",
        cpu="4",
        gpu=2,
        resources={n.RDMA: "1"},
        labels={n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"},
        annotations={
            HINT: {"rdma": {"vfSelector": {"matchLabels": {"type": "general"}}}},
            n.ANN_DEVICE_JOINT_ALLOCATE: {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"},
        },
    )
    for d in (
        eng.schedule(admit(pod)),
        eng.schedule(admit(a_pod("q", gpu=99))),
        eng.schedule(_unchecked_lsr("r")),
    ):
        raw = d.to_dict()
        text = json.dumps(raw, sort_keys=True)
        assert json.loads(text) == raw
        assert Decision.from_dict(json.loads(text)) == d
        assert Decision.from_dict(raw).to_dict() == raw

        def no_floats(x: Any) -> bool:
            if isinstance(x, dict):
                return all(no_floats(v) for v in x.values())
            if isinstance(x, list):
                return all(no_floats(v) for v in x)
            return not isinstance(x, float)

        assert no_floats(raw)


def test_schedule_group_all_or_nothing() -> None:
    eng = gpu_cluster(2)
    before = eng.digest()
    gang = [a_pod(f"w{i}", namespace="ml", gpu=4) for i in range(4)]
    g = eng.schedule_group([admit(_m) for _m in gang])
    assert g.outcome == n.SCHEDULED and eng.digest() == before
    assert [(d.node, minors(d)) for d in g.members] == [
        ("n0", [0, 1, 2, 3]),
        ("n0", [4, 5, 6, 7]),
        ("n1", [0, 1, 2, 3]),
        ("n1", [4, 5, 6, 7]),
    ]
    assert GroupDecision.from_dict(g.to_dict()) == g
    too_big = eng.schedule_group([admit(_m) for _m in gang + [a_pod("w4", namespace="ml", gpu=4)]])
    assert too_big.outcome == n.UNSCHEDULABLE and too_big.failed_pod == "ml/w4"
    assert eng.digest() == before
    assert all(d.outcome == n.UNSCHEDULABLE for d in too_big.members)
    eng.assume_group(g)
    assert eng.schedule(admit(a_pod("x", gpu=1))).outcome == n.UNSCHEDULABLE


def test_schedule_group_explains_the_closest_offer() -> None:
    eng = gpu_cluster(1)
    place(eng, a_pod("old", gpu=1))
    scoped = {HINT: {"gpu": {"requiredTopologyScope": "PCIe"}}}
    g = eng.schedule_group(
        [
            admit(_m)
            for _m in [
                a_pod("a", gpu=2, annotations=scoped),
                a_pod("b", gpu=2, annotations=scoped),
                a_pod("c", gpu=2, annotations=scoped),
                a_pod("d", gpu=2, annotations=scoped),
            ]
        ]
    )
    assert g.outcome == n.UNSCHEDULABLE and g.failed_pod == "default/d"
    assert "needs 2 GPU(s) on one PCIe switch, best node offers 1" in g.message


def test_rejected_member_rejects_the_group() -> None:
    g = gpu_cluster(1).schedule_group([admit(a_pod("a", gpu=1)), _unchecked_lsr("b")])
    assert g.outcome == n.REJECTED and g.failed_pod == "default/b"


# --- determinism ---------------------------------------------------------------------------------------------------


def _random_cluster(rng: random.Random) -> list[dict]:
    docs: list[dict] = []
    for i in range(rng.randint(3, 9)):
        gpus = rng.choice([0, 2, 4, 8])
        labels = {"zone": rng.choice(["a", "b"])}
        taints = [{"key": "gpu", "value": "true", "effect": "NoSchedule"}] if rng.random() < 0.2 else None
        docs.append(
            a_node(
                f"node-{i}", cpu=str(rng.choice([16, 32, 64])), memory="128Gi", labels=labels, taints=taints
            )
        )
        if gpus:
            docs.append(a_device(f"node-{i}", gpus=gpus))
    return docs


def _random_pod(rng: random.Random, i: int) -> dict:
    kind = rng.random()
    tol = [{"key": "gpu", "operator": "Exists"}] if rng.random() < 0.5 else None
    sel = {"zone": "a"} if rng.random() < 0.2 else None
    if kind < 0.3:
        return a_pod(f"p{i}", cpu=str(rng.randint(1, 8)), tolerations=tol, node_selector=sel)
    if kind < 0.7:
        share = str(rng.choice([10, 25, 50, 70]))
        return a_pod(
            f"p{i}", cpu="1", resources={n.GPU_CORE: share, n.GPU_MEMORY_RATIO: share}, tolerations=tol
        )
    return a_pod(f"p{i}", cpu="2", gpu=rng.choice([1, 2, 4]), tolerations=tol, node_selector=sel)


def _naive_best(eng: PlacementEngine, pod: dict) -> str | None:
    """Reference: score every node from scratch, pick (max score, min name)."""
    spec, errors = pod_spec(admit(pod))
    assert spec is not None, errors
    best: tuple[int, str] | None = None
    for name in eng.node_names():
        state = eng.node_state(name)
        assert state is not None and state.info is not None
        if static_filter(state.info, spec):
            continue
        res = evaluate(eng.config, state, spec)
        if res.feasible and (best is None or (-res.score, name) < (-best[0], best[1])):
            best = (res.score, name)
    return best[1] if best else None


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_incremental_ranking_matches_a_naive_full_scan(seed: int) -> None:
    rng = random.Random(seed)
    docs = _random_cluster(rng)
    eng = engine_with(*docs)
    shuffled = list(docs)
    random.Random(seed + 100).shuffle(shuffled)
    other = engine_with(*shuffled)  # same objects, different arrival order
    assumed: dict[str, Decision] = {}
    for i in range(60):
        pod = _random_pod(rng, i)
        d = eng.schedule(admit(pod))
        assert d.node == _naive_best(eng, pod), f"seed {seed}: pod {i}"
        assert other.schedule(admit(pod)).to_dict() == d.to_dict()
        if d.outcome == n.SCHEDULED:
            eng.assume(d)
            other.assume(d)
            assumed[d.pod] = d
        if rng.random() < 0.15 and assumed:
            victim = sorted(assumed)[rng.randrange(len(assumed))]
            eng.release(*victim.split("/"))
            del assumed[victim]
            other = engine_with(*shuffled)  # rebuild the projection from scratch by re-assuming
            for p in sorted(assumed):
                other.assume(assumed[p])
            assert other.digest() == eng.digest()


_SCRIPT = """
import json
from allot_placement.testing import a_node, a_device, a_pod, engine_with, place
docs = []
for i in range(6):
    docs += [a_node(f"n{i}", cpu="64", memory="256Gi"), a_device(f"n{i}", gpus=8)]
eng = engine_with(*docs)
out = []
for i in range(40):
    share = str([10, 25, 50, 100][i % 4])
    d = place(eng, a_pod(f"p{i}", resources={"koordinator.sh/gpu-core": share, "koordinator.sh/gpu-memory-ratio": share}))
    out.append(d.to_dict())
print(json.dumps({"decisions": out, "digest": eng.digest()}, sort_keys=True))
"""


def test_decisions_are_byte_identical_across_processes() -> None:
    outs = []
    for hash_seed in ("1", "12345"):
        res = subprocess.run(
            [sys.executable, "-c", _SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": hash_seed, "PATH": ""},
        )
        outs.append(res.stdout)
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["decisions"][0]["outcome"] == n.SCHEDULED


def test_every_memo_stays_within_its_bound_when_few_node_results_are_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Binpack answers most pods from a few node results, so the node-result bound alone never trims: the
    free-resource tests and the interned contents have bounds of their own, and trimming them changes no decision."""
    import allot_placement.engine as engine_mod

    rng = random.Random(11)
    docs = _random_cluster(rng)
    pods = [_random_pod(rng, i) for i in range(120)]

    normal = engine_with(*docs, config={"policy": "binpack"})
    expected = [place(normal, p).to_dict() for p in pods]
    monkeypatch.setattr(engine_mod, "_MEMO_LIMIT", 1000)  # the node results never reach their bound ...
    monkeypatch.setattr(engine_mod, "_MEMO_PER_NODE", 0)
    monkeypatch.setattr(
        engine_mod, "_TESTS_PER_RESULT", 0.016
    )  # ... while the tests' (16) and the contents' (4) bind
    monkeypatch.setattr(engine_mod, "_CONTENTS_PER_RESULT", 0.004)
    bounded = engine_with(*docs, config={"policy": "binpack"})
    seen = {"admit": 0, "ids": 0}
    decided = []
    for p in pods:
        decided.append(place(bounded, p).to_dict())
        seen["admit"] = max(seen["admit"], len(bounded._admit_memo))
        seen["ids"] = max(seen["ids"], len(bounded._ids))
    assert decided == expected
    assert 16 < len(bounded._memo) <= 1000  # the node results, never trimmed, outnumber the bounded tests
    # checked as nodes change: one pod may add a test per node, or a content per node it changes, first
    nodes = len(bounded._nodes)
    assert seen["admit"] <= 16 + nodes and seen["ids"] <= 4 + nodes  # without the bounds: 227 and 102


def test_cache_resets_never_change_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    import allot_placement.engine as engine_mod

    rng = random.Random(9)
    docs = _random_cluster(rng)
    pods = [_random_pod(rng, i) for i in range(80)]
    normal = engine_with(*docs)
    expected = [place(normal, p).to_dict() for p in pods]
    monkeypatch.setattr(engine_mod, "_MEMO_LIMIT", 3)
    monkeypatch.setattr(engine_mod, "_MEMO_PER_NODE", 0)
    monkeypatch.setattr(engine_mod, "_INDEX_ENTRY_BUDGET", 1)
    tiny = engine_with(*docs)
    assert [place(tiny, p).to_dict() for p in pods] == expected
