"""Node filters (fit, taints, selectors, affinity, name) and node scores (fit strategies, FitPlus, scarce)."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.objects import names as n
from allot_placement.testing import a_device, a_node, a_pod, admit, engine_with, place

TAINT = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("nodes", "pod", "message", "codes"),
    [
        (
            [a_node("a", cpu="2"), a_node("b", cpu="2"), a_node("c", taints=TAINT)],
            a_pod("p", cpu="4"),
            "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient cpu.",
            ["InsufficientResource", "TaintNotTolerated"],
        ),
        (
            [a_node("a", cpu="2", memory="1Gi")],
            a_pod("p", cpu="4", memory="2Gi"),
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.",
            ["InsufficientResource"],
        ),
        ([a_node("a", pods=0)], a_pod("p"), "0/1 nodes are available: 1 Too many pods.", ["TooManyPods"]),
        (
            [a_node("a", unschedulable=True)],
            a_pod("p"),
            "0/1 nodes are available: 1 node(s) were unschedulable.",
            ["NodeUnschedulable"],
        ),
        (
            [a_node("a")],
            a_pod("p", resources={"example.com/foo": "1"}),
            "0/1 nodes are available: 1 Insufficient example.com/foo.",
            ["InsufficientResource"],
        ),
        (
            [a_node("a", extra={n.BATCH_CPU: "1000"})],
            a_pod(
                "p",
                cpu=None,
                resources={n.BATCH_CPU: "2000"},
                labels={n.LABEL_QOS: "BE", n.LABEL_PRIORITY_CLASS: "koord-batch"},
            ),
            f"0/1 nodes are available: 1 Insufficient {n.BATCH_CPU}.",
            ["InsufficientResource"],
        ),
        (
            [a_node("a", labels={"zone": "x"})],
            a_pod("p", node_selector={"zone": "y"}),
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
            ["NodeAffinityMismatch"],
        ),
        (
            [a_node("a"), a_node("b")],
            a_pod("p", node_name="c"),
            "0/2 nodes are available: 2 node(s) didn't match the requested node name.",
            ["NodeNameMismatch"],
        ),
        ([], a_pod("p"), "0/0 nodes are available.", []),
    ],
    ids=[
        "histogram-sorted",
        "all-insufficient-listed",
        "too-many-pods",
        "cordoned",
        "missing-extended-resource",
        "batch-resource",
        "node-selector",
        "node-name",
        "no-nodes",
    ],
)
def test_unschedulable_messages(nodes: list[dict], pod: dict, message: str, codes: list[str]) -> None:
    d = engine_with(*nodes).schedule(admit(pod))
    assert (d.outcome, d.message, d.codes) == (n.UNSCHEDULABLE, message, codes)


def test_reason_counts_sort_as_strings_like_kube_scheduler() -> None:
    nodes = [a_node(f"n{i:02d}", cpu="1") for i in range(10)] + [
        a_node(f"t{i}", taints=TAINT) for i in range(2)
    ]
    d = engine_with(*nodes).schedule(admit(a_pod("p", cpu="2")))
    assert d.message == (
        "0/12 nodes are available: 10 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: gpu}."
    )


def test_node_reasons_are_bounded_and_sorted_by_name() -> None:
    nodes = [a_node(f"n{i:02d}", cpu="1") for i in range(30)]
    d = engine_with(*nodes, config={"explain": {"maxNodeReasons": 5}}).schedule(admit(a_pod("p", cpu="2")))
    assert list(d.node_reasons) == [f"n{i:02d}" for i in range(5)]
    assert d.node_reasons["n00"] == ["Insufficient cpu"]


@pytest.mark.parametrize(
    ("tolerations", "feasible"),
    [
        ([], False),
        ([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}], True),
        ([{"key": "dedicated", "operator": "Exists"}], True),
        ([{"operator": "Exists"}], True),
        ([{"key": "dedicated", "value": "cpu"}], False),
        ([{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}], False),
    ],
    ids=["none", "equal", "exists-key", "exists-all", "wrong-value", "wrong-effect"],
)
def test_tolerations(tolerations: list[dict], feasible: bool) -> None:
    d = engine_with(a_node("a", taints=TAINT)).schedule(admit(a_pod("p", tolerations=tolerations)))
    assert (d.outcome == n.SCHEDULED) is feasible


def test_prefer_no_schedule_never_filters() -> None:
    taints = [{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}]
    assert engine_with(a_node("a", taints=taints)).schedule(admit(a_pod("p"))).outcome == n.SCHEDULED


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


@pytest.mark.parametrize(
    ("aff", "expected"),
    [
        (affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b", "c"]}]}), "b"),
        (affinity({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}), "b"),
        (affinity({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}), "c"),
        (affinity({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}), "a"),
        (affinity({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["64"]}]}), "c"),
        (affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}), "b"),
        (
            affinity(
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]},
            ),
            "c",
        ),
        (affinity({}), None),
        (affinity(), None),
    ],
    ids=[
        "in",
        "not-in",
        "exists",
        "does-not-exist",
        "gt",
        "match-fields",
        "terms-ored",
        "empty-term",
        "no-terms",
    ],
)
def test_required_node_affinity(aff: dict, expected: str | None) -> None:
    nodes = [
        a_node("a", labels={"zone": "a", "cores": "32"}),
        a_node("b", labels={"zone": "b", "cores": "64"}),
        a_node("c", labels={"zone": "c", "gpu": "yes", "cores": "128"}),
    ]
    d = engine_with(*nodes).schedule(admit(a_pod("p", affinity=aff)))
    assert d.node == expected


def test_invalid_affinity_is_refused_at_the_door() -> None:
    manifest = a_pod(
        "p", affinity=affinity({"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["x"]}]})
    )
    with pytest.raises(ValueError, match=r"nodeSelectorTerms\[0\]\.matchExpressions\[0\]\.values"):
        admit(manifest)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("koordinator", ["a", "b", "a", "b"]),
        ("spread", ["a", "b", "a", "b"]),
        ("binpack", ["a", "a", "a", "a"]),
    ],
    ids=["default-spreads-cpu", "spread", "binpack"],
)
def test_node_fit_strategy(policy: str, expected: list[str]) -> None:
    eng = engine_with(a_node("a", cpu="16"), a_node("b", cpu="16"), config={"policy": policy})
    assert [place(eng, a_pod(f"p{i}", cpu="2")).node for i in range(4)] == expected


def test_ties_break_by_node_name() -> None:
    eng = engine_with(a_node("zeta"), a_node("alpha"), a_node("mid"))
    d = eng.schedule(admit(a_pod("p")))
    assert d.node == "alpha"
    assert [s.node for s in d.scores] == ["alpha", "mid", "zeta"]
    assert d.scores[0].components == {"NodeResourcesFit": 97, "NodeNUMAResource": 97}  # cpu 96, memory 99


def test_fit_plus_and_scarce_resource_avoidance() -> None:
    nodes = [
        a_node("gpu-a", extra={n.NVIDIA_GPU: "8"}),
        a_device("gpu-a", gpus=8),
        a_node("gpu-b", extra={n.NVIDIA_GPU: "8"}),
        a_device("gpu-b", gpus=8),
        a_node("cpu-c"),
    ]
    cfg = {
        "scoring": {
            "nodeResourcesFitPlus": {"resources": {n.NVIDIA_GPU: {"strategy": "MostAllocated", "weight": 2}}},
            "scarceResourceAvoidance": {"resources": [n.NVIDIA_GPU]},
        }
    }
    eng = engine_with(*nodes, config=cfg)
    web = eng.schedule(admit(a_pod("web")))
    assert web.node == "cpu-c"
    assert (
        web.scores[1].components["ScarceResourceAvoidance"] == 50
    )  # {pods, nvidia.com/gpu} unrequested: 1 scarce
    assert web.scores[0].components["ScarceResourceAvoidance"] == 100
    first = place(eng, a_pod("t1", gpu=2))
    second = place(eng, a_pod("t2", gpu=2))
    assert (first.node, second.node) == ("gpu-a", "gpu-a")
    assert second.scores[0].components["NodeResourcesFitPlus"] == 50  # 4 of 8 GPUs after placement


def test_device_resources_missing_from_allocatable_are_left_to_the_device_allocator() -> None:
    eng = engine_with(a_node("a"), a_device("a", gpus=1))
    assert (
        eng.schedule(admit(a_pod("p", resources={n.GPU_CORE: "50", n.GPU_MEMORY_RATIO: "50"}))).outcome
        == n.SCHEDULED
    )


def test_node_level_device_resources_are_checked_when_advertised() -> None:
    eng = engine_with(
        a_node("a", extra={n.GPU_CORE: "100", n.GPU_MEMORY_RATIO: "100"}), a_device("a", gpus=2)
    )
    d = eng.schedule(admit(a_pod("p", gpu=None, resources={n.GPU_CORE: "200", n.GPU_MEMORY_RATIO: "200"})))
    assert d.message == (
        "0/1 nodes are available: 1 Insufficient koordinator.sh/gpu-core, "
        "1 Insufficient koordinator.sh/gpu-memory-ratio."
    )


def test_hash_tie_break_is_keyed_by_pod() -> None:
    nodes = [a_node(f"n{i}") for i in range(12)]
    eng = engine_with(*nodes, config={"tieBreak": "hash", "seed": 5})
    picks = [eng.schedule(admit(a_pod(f"p{i}"))).node for i in range(12)]
    assert len(set(picks)) > 4  # equal scores: spread by the keyed hash, not the first name
    again = engine_with(*reversed(nodes), config={"tieBreak": "hash", "seed": 5})
    assert [again.schedule(admit(a_pod(f"p{i}"))).node for i in range(12)] == picks
    assert engine_with(*nodes).schedule(admit(a_pod("p0"))).node == "n0"  # default: lowest name
