"""What the node side adds below the node: NUMA-level batch resources and CPU amplification (``nodeside``)."""

from __future__ import annotations

import json
from typing import Any

from allot_contracts.objects import names as n
from allot_placement.nodeside import INSUFFICIENT_AMPLIFIED_CPU, NodeOverrides
from allot_placement.testing import a_node, a_pod, an_nrt, engine_with, place, schedule

NUMA_SPEC = n.ANN_NUMA_TOPOLOGY_SPEC
SINGLE = {NUMA_SPEC: {"numaTopologyPolicy": "SingleNUMANode"}}
LSR = {n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"}
BE = {n.LABEL_QOS: "BE", n.LABEL_PRIORITY_CLASS: "koord-batch"}


def be_pod(name: str, batch_cpu: str, numa: bool = True) -> dict[str, Any]:
    return a_pod(
        name,
        cpu=None,
        memory=None,
        resources={n.BATCH_CPU: batch_cpu, n.BATCH_MEMORY: "1Gi"},
        labels=BE,
        annotations=SINGLE if numa else None,
    )


def numa_zones(d: Any) -> dict[int, dict[str, str]]:
    status = d.annotations.get(n.ANN_RESOURCE_STATUS, {})
    return {z["node"]: z["resources"] for z in status.get("numaNodeResources", [])}


def batch_node() -> Any:
    eng = engine_with(a_node("n1"), an_nrt("n1"))
    eng.set_overrides(
        "n1",
        NodeOverrides(
            allocatable=((n.BATCH_CPU, 14000), (n.BATCH_MEMORY, 64 << 30)),
            numa=(
                (0, ((n.BATCH_CPU, 8000), (n.BATCH_MEMORY, 32 << 30))),
                (1, ((n.BATCH_CPU, 6000), (n.BATCH_MEMORY, 32 << 30))),
            ),
        ),
    )
    return eng


def test_a_numa_bound_be_pod_is_placed_on_one_zones_batch_resources() -> None:
    eng = batch_node()
    first = place(eng, be_pod("etl-1", "7000"))
    assert first.outcome == n.SCHEDULED, first.message
    (zone,) = numa_zones(first).values()  # one NUMA node holds all of it
    assert zone[n.BATCH_CPU] == "7000"


def test_no_zone_has_the_batch_cpu_left_though_the_node_has() -> None:
    eng = batch_node()
    assert place(eng, be_pod("etl-1", "7000")).outcome == n.SCHEDULED
    second = schedule(eng, be_pod("etl-2", "7000"))
    assert second.outcome == n.UNSCHEDULABLE
    # the two zones together have 7000 (1000 + 6000), but SingleNUMANode allows one zone only
    assert "Unaligned NUMA Hint" in second.message
    # the same request without a NUMA policy is checked against the node-level amount only: it fits
    assert schedule(eng, be_pod("etl-3", "7000", numa=False)).outcome == n.SCHEDULED


def test_a_restricted_pod_spans_zones_and_fails_only_when_they_lack_batch_cpu() -> None:
    eng = batch_node()

    def restricted(name: str, batch_cpu: str) -> dict[str, Any]:
        pod = be_pod(name, batch_cpu, numa=False)
        spec = {"numaTopologyPolicy": "Restricted", "singleNUMANodeExclusive": "Preferred"}
        pod["metadata"]["annotations"] = {NUMA_SPEC: json.dumps(spec)}
        return pod

    d = place(eng, restricted("etl-1", "12000"))
    assert d.outcome == n.SCHEDULED, d.message
    assert {z: r[n.BATCH_CPU] for z, r in numa_zones(d).items()} == {0: "6000", 1: "6000"}
    assert schedule(eng, restricted("etl-2", "2500")).outcome == n.UNSCHEDULABLE  # 2000 left, all in zone 0
    d = schedule(eng, restricted("etl-2", "2000"))
    assert d.outcome == n.SCHEDULED, d.message
    assert list(numa_zones(d)) == [0]


def test_without_numa_level_batch_the_zones_do_not_constrain_batch_pods() -> None:
    eng = engine_with(a_node("n1"), an_nrt("n1"))
    eng.set_overrides("n1", NodeOverrides(allocatable=((n.BATCH_CPU, 14000), (n.BATCH_MEMORY, 64 << 30))))
    assert place(eng, be_pod("etl-1", "7000")).outcome == n.SCHEDULED
    assert place(eng, be_pod("etl-2", "7000")).outcome == n.SCHEDULED


def test_numa_level_batch_follows_the_recorded_overrides() -> None:
    eng = batch_node()
    assert place(eng, be_pod("etl-1", "7000")).outcome == n.SCHEDULED
    assert schedule(eng, be_pod("etl-2", "7000")).outcome == n.UNSCHEDULABLE
    eng.set_overrides(
        "n1",
        NodeOverrides(
            allocatable=((n.BATCH_CPU, 20000), (n.BATCH_MEMORY, 64 << 30)),
            numa=((0, ((n.BATCH_CPU, 10000),)), (1, ((n.BATCH_CPU, 10000),))),
        ),
    )
    assert schedule(eng, be_pod("etl-2", "7000")).outcome == n.SCHEDULED
    state = eng.node_state("n1")
    assert (
        state.base_topology.numa_allocatable[0].get(n.BATCH_CPU) is None
    )  # the parsed topology is untouched


def amplified_node(policy: str | None = None) -> Any:
    """32 CPUs (2 NUMA nodes x 8 cores x 2 threads) amplified by 2: 64 cpu allocatable, 32 per zone."""
    eng = engine_with(a_node("n1", cpu="32"), an_nrt("n1", policy=policy))
    eng.set_overrides("n1", NodeOverrides(allocatable=((n.CPU, 64000),), cpu_amplification="2.00"))
    return eng


def test_a_cpuset_pod_consumes_its_amplified_cpu() -> None:
    eng = amplified_node()
    lsr = place(eng, a_pod("lsr", cpu="16", memory="1Gi", labels=LSR))
    assert lsr.outcome == n.SCHEDULED
    assert lsr.allocation.requests[n.CPU] == 16000  # the recorded request is the pod's own
    # 16 cpuset CPUs count 32: 32 more fit, then nothing
    assert place(eng, a_pod("ls", cpu="32", memory="1Gi")).outcome == n.SCHEDULED
    d = schedule(eng, a_pod("one-more", cpu="1", memory="1Gi"))
    assert d.outcome == n.UNSCHEDULABLE
    assert INSUFFICIENT_AMPLIFIED_CPU[0] in d.message


def test_the_incoming_cpuset_pod_is_counted_amplified() -> None:
    eng = amplified_node()
    assert place(eng, a_pod("ls", cpu="40", memory="1Gi")).outcome == n.SCHEDULED
    d = schedule(eng, a_pod("lsr", cpu="16", memory="1Gi", labels=LSR))  # 40 + 2 x 16 > 64
    assert d.outcome == n.UNSCHEDULABLE
    assert INSUFFICIENT_AMPLIFIED_CPU[0] in d.message
    assert schedule(eng, a_pod("ls-2", cpu="16", memory="1Gi")).outcome == n.SCHEDULED


def test_without_amplification_cpuset_pods_count_as_requested() -> None:
    eng = engine_with(a_node("n1", cpu="64"), an_nrt("n1"))
    assert place(eng, a_pod("lsr", cpu="16", memory="1Gi", labels=LSR)).outcome == n.SCHEDULED
    assert place(eng, a_pod("ls", cpu="48", memory="1Gi")).outcome == n.SCHEDULED


def test_zone_cpu_is_amplified_and_cpuset_pods_count_amplified_in_their_zone() -> None:
    eng = amplified_node()
    # 20 cpu in one NUMA node: only possible because each zone's 16 CPUs count 32
    first = place(eng, a_pod("ls-single", cpu="20", memory="1Gi", annotations=SINGLE))
    assert first.outcome == n.SCHEDULED, first.message
    (busy,) = numa_zones(first)
    # 6 cpuset CPUs in the other zone count 12 there: 32 - 12 = 20 left, and 12 left where the first pod is
    lsr = place(eng, a_pod("lsr", cpu="6", memory="1Gi", labels=LSR, annotations=SINGLE))
    assert lsr.outcome == n.SCHEDULED, lsr.message
    assert list(numa_zones(lsr)) == [1 - busy]
    d = schedule(eng, a_pod("ls-21", cpu="21", memory="1Gi", annotations=SINGLE))
    assert d.outcome == n.UNSCHEDULABLE
    assert schedule(eng, a_pod("ls-20", cpu="20", memory="1Gi", annotations=SINGLE)).outcome == n.SCHEDULED


def test_scores_count_cpuset_pods_amplified() -> None:
    eng = engine_with(
        a_node("a", cpu="32"), an_nrt("a"), a_node("b", cpu="64"), an_nrt("b", cores_per_numa=16)
    )
    eng.set_overrides("a", NodeOverrides(allocatable=((n.CPU, 64000),), cpu_amplification="2.00"))
    # both nodes offer 64 cpu; a cpuset pod of 8 on a counts 16 there, 8 on b: LeastAllocated prefers b
    d = schedule(eng, a_pod("lsr", cpu="8", memory="1Gi", labels=LSR))
    assert d.outcome == n.SCHEDULED
    scores = {s.node: s.components["NodeResourcesFit"] for s in d.scores}
    assert scores["b"] > scores["a"], scores
    assert d.node == "b"
