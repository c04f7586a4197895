"""NUMA policies, the topology-manager merge, NUMA distribution, CPU bind and exclusive policies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_contracts.objects import names as n
from allot_contracts.objects.cpuset import parse_cpuset
from allot_placement.testing import a_device, a_node, a_pod, admit, an_nrt, engine_with, place

NUMA_SPEC, RSPEC = n.ANN_NUMA_TOPOLOGY_SPEC, n.ANN_RESOURCE_SPEC
LSR = {n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"}
# an_nrt defaults: 2 NUMA nodes x 8 cores x 2 threads; CPU id = thread*16 + core; cores 0-7 on NUMA 0.


def numa_node(labels: dict[str, str] | None = None, policy: str | None = None, **nrt: Any) -> Any:
    return engine_with(
        a_node("n1", cpu="32", memory="128Gi", labels=labels), an_nrt("n1", policy=policy, **nrt)
    )


def status(d: Any) -> dict[str, Any]:
    return d.annotations.get(n.ANN_RESOURCE_STATUS, {})


def numa_of(d: Any) -> list[int]:
    return [z["node"] for z in status(d).get("numaNodeResources", [])]


def cpus(d: Any) -> list[int]:
    return parse_cpuset(status(d).get("cpuset", ""))


@pytest.mark.parametrize(
    ("node_policy", "cpu", "outcome", "numa"),
    [
        ("SingleNUMANode", "12", n.SCHEDULED, [0]),
        ("SingleNUMANode", "20", n.UNSCHEDULABLE, None),
        ("Restricted", "20", n.SCHEDULED, [0, 1]),
        ("BestEffort", "20", n.SCHEDULED, [0, 1]),
        ("BestEffort", "40", n.UNSCHEDULABLE, None),
    ],
    ids=[
        "single-fits",
        "single-too-big",
        "restricted-spans",
        "besteffort-spans",
        "besteffort-still-needs-room",
    ],
)
def test_node_numa_policy(node_policy: str, cpu: str, outcome: str, numa: list[int] | None) -> None:
    eng = numa_node(labels={n.LABEL_NUMA_TOPOLOGY_POLICY: node_policy})
    d = eng.schedule(admit(a_pod("p", cpu=cpu, memory="8Gi")))
    assert d.outcome == outcome, d.message
    if numa is not None:
        assert numa_of(d) == numa
        total = sum(int(z["resources"]["cpu"]) for z in status(d)["numaNodeResources"])
        assert total == int(cpu)


def test_kubelet_policy_from_topology_object() -> None:
    eng = numa_node(policy="SingleNUMANodePodLevel")
    assert eng.schedule(admit(a_pod("p", cpu="20"))).codes == ["NUMAAffinityUnaligned"]


def test_pod_policy_must_match_node_policy() -> None:
    eng = numa_node(labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"})
    d = eng.schedule(admit(a_pod("p", annotations={NUMA_SPEC: {"numaTopologyPolicy": "SingleNUMANode"}})))
    assert d.codes == ["NUMAPolicyMismatch"]
    assert d.message == "0/1 nodes are available: 1 node(s) NUMA Topology policy not match."


def test_numa_policy_needs_topology() -> None:
    eng = engine_with(a_node("n1"))
    d = eng.schedule(admit(a_pod("p", annotations={NUMA_SPEC: {"numaTopologyPolicy": "SingleNUMANode"}})))
    assert d.codes == ["NUMATopologyUnknown"]
    d = eng.schedule(admit(a_pod("p", annotations={NUMA_SPEC: {"numaTopologyPolicy": "BestEffort"}})))
    assert d.outcome == n.SCHEDULED


def test_pod_numa_policy_on_plain_node() -> None:
    eng = numa_node()
    d = eng.schedule(
        admit(a_pod("p", cpu="4", annotations={NUMA_SPEC: {"numaTopologyPolicy": "SingleNUMANode"}}))
    )
    assert numa_of(d) == [0]


def test_memory_is_distributed_per_numa() -> None:
    eng = numa_node(labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"})
    place(eng, a_pod("a", cpu="2", memory="60Gi"))  # NUMA 0 has 4Gi left
    d = eng.schedule(admit(a_pod("b", cpu="2", memory="10Gi")))
    assert numa_of(d) == [1]


@pytest.mark.parametrize(
    ("spec", "cpu", "expected"),
    [
        ({}, "4", [0, 1, 16, 17]),  # FullPCPUs default: two whole cores
        ({"preferredCPUBindPolicy": "SpreadByPCPUs"}, "4", [0, 1, 2, 3]),  # one thread per core
        ({"requiredCPUBindPolicy": "FullPCPUs"}, "16", [*range(8), *range(16, 24)]),  # one whole NUMA node
    ],
    ids=["full-pcpus", "spread", "full-numa"],
)
def test_cpu_bind_policies(spec: dict, cpu: str, expected: list[int]) -> None:
    d = numa_node().schedule(
        admit(a_pod("p", cpu=cpu, labels=LSR, annotations={RSPEC: spec} if spec else None))
    )
    assert cpus(d) == expected


def test_required_full_pcpus_needs_whole_cores() -> None:
    d = numa_node().schedule(
        admit(a_pod("p", cpu="3", labels=LSR, annotations={RSPEC: {"requiredCPUBindPolicy": "FullPCPUs"}}))
    )
    assert d.codes == ["CPUsNotMultipleOfCore"]


def test_cpuset_needs_cpu_topology() -> None:
    d = engine_with(a_node("n1")).schedule(admit(a_pod("p", cpu="2", labels=LSR)))
    assert d.codes == ["InvalidCPUTopology"]


@pytest.mark.parametrize(
    ("node_bind", "pod", "expected"),
    [
        ("FullPCPUsOnly", a_pod("p", cpu="2"), ([0, 16], "requiredCPUBindPolicy")),
        ("FullPCPUsOnly", a_pod("p", cpu="1500m"), "NonIntegerCPUs"),
        (
            "SpreadByPCPUs",
            a_pod("p", cpu="2", labels=LSR, annotations={RSPEC: {"requiredCPUBindPolicy": "FullPCPUs"}}),
            "CPUBindPolicyConflict",
        ),
    ],
    ids=["node-forces-binding", "node-forces-integer", "conflicting-required-policy"],
)
def test_node_cpu_bind_policy(node_bind: str, pod: dict, expected: Any) -> None:
    d = numa_node(labels={n.LABEL_CPU_BIND_POLICY: node_bind}).schedule(admit(pod))
    if isinstance(expected, str):
        assert d.codes == [expected]
    else:
        assert cpus(d) == expected[0]
        assert d.annotations[n.ANN_RESOURCE_SPEC] == {expected[1]: "FullPCPUs"}


def test_resource_spec_written_back_as_preferred_for_default_policy() -> None:
    d = numa_node().schedule(admit(a_pod("p", cpu="2", labels=LSR)))
    assert d.annotations[n.ANN_RESOURCE_SPEC] == {"preferredCPUBindPolicy": "FullPCPUs"}
    d = numa_node().schedule(
        admit(a_pod("p", cpu="2", labels=LSR, annotations={RSPEC: {"preferredCPUBindPolicy": "FullPCPUs"}}))
    )
    assert n.ANN_RESOURCE_SPEC not in d.annotations


def test_pcpu_level_exclusive_avoids_shared_cores() -> None:
    eng = numa_node()
    spec = {RSPEC: {"preferredCPUBindPolicy": "SpreadByPCPUs", "preferredCPUExclusivePolicy": "PCPULevel"}}
    first = place(eng, a_pod("a", cpu="2", labels=LSR, annotations=spec))
    second = place(eng, a_pod("b", cpu="2", labels=LSR, annotations=spec))
    cores = lambda cs: {c % 16 for c in cs}  # noqa: E731
    assert cores(cpus(first)).isdisjoint(cores(cpus(second)))


def test_numa_level_exclusive_avoids_numa_nodes() -> None:
    eng = numa_node(labels={n.LABEL_NUMA_ALLOCATE_STRATEGY: "MostAllocated"})
    spec = {RSPEC: {"preferredCPUExclusivePolicy": "NUMANodeLevel"}}
    first = place(eng, a_pod("a", cpu="2", labels=LSR, annotations=spec))
    second = place(eng, a_pod("b", cpu="2", labels=LSR, annotations=spec))
    numa = lambda cs: {0 if c % 16 < 8 else 1 for c in cs}  # noqa: E731
    assert numa(cpus(first)) != numa(cpus(second))


def test_most_allocated_numa_strategy_packs() -> None:
    eng = numa_node(labels={n.LABEL_NUMA_ALLOCATE_STRATEGY: "MostAllocated"})
    first = place(eng, a_pod("a", cpu="2", labels=LSR))
    second = place(eng, a_pod("b", cpu="2", labels=LSR))
    assert cpus(first) == [0, 16] and cpus(second) == [1, 17]


def test_reserved_cpus_are_never_allocated() -> None:
    d = numa_node(reserved="0-1,16-17").schedule(admit(a_pod("p", cpu="2", labels=LSR)))
    assert cpus(d) == [8, 24]  # NUMA 1 has more free CPUs (LeastAllocated)
    eng = numa_node(reserved="0-1,16-17", labels={n.LABEL_NUMA_ALLOCATE_STRATEGY: "MostAllocated"})
    assert cpus(eng.schedule(admit(a_pod("p", cpu="2", labels=LSR)))) == [2, 18]


@pytest.mark.parametrize(
    ("exclusive", "outcome"),
    [("Required", n.UNSCHEDULABLE), ("Preferred", n.SCHEDULED)],
    ids=["required-keeps-single-numa-nodes-single", "preferred-allows"],
)
def test_single_numa_node_exclusive(exclusive: str, outcome: str) -> None:
    eng = numa_node(labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"})
    place(eng, a_pod("small", cpu="2", annotations={NUMA_SPEC: {"numaTopologyPolicy": "Restricted"}}))
    d = eng.schedule(
        admit(
            a_pod(
                "wide",
                cpu="20",
                annotations={
                    NUMA_SPEC: {"numaTopologyPolicy": "Restricted", "singleNUMANodeExclusive": exclusive}
                },
            )
        )
    )
    assert d.outcome == outcome


def test_gpus_and_cpus_aligned_on_one_numa_node() -> None:
    eng = engine_with(
        a_node("n1", cpu="32", memory="128Gi", labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"}),
        a_device("n1", gpus=8),
        an_nrt("n1"),
    )
    place(eng, a_pod("a", cpu="2", gpu=3))
    d = eng.schedule(admit(a_pod("b", cpu="4", gpu=2, labels=LSR)))
    gpus = [e["minor"] for e in d.annotations[n.ANN_DEVICE_ALLOCATED]["gpu"]]
    assert gpus == [4, 5] and numa_of(d) == [1]
    assert all(c % 16 >= 8 for c in cpus(d))


def test_gpu_request_larger_than_a_numa_node_fails_single_numa() -> None:
    eng = engine_with(
        a_node("n1", cpu="32", memory="128Gi", labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"}),
        a_device("n1", gpus=8),
        an_nrt("n1"),
    )
    assert eng.schedule(admit(a_pod("p", cpu="2", gpu=6))).codes == ["NUMAAffinityUnaligned"]
    eng2 = engine_with(
        a_node("n1", cpu="32", memory="128Gi", labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"}),
        a_device("n1", gpus=8),
        an_nrt("n1"),
    )
    assert eng2.schedule(admit(a_pod("p", cpu="2", gpu=6))).outcome == n.SCHEDULED


def test_non_integer_cpus_on_a_binding_node_keep_upstreams_reason() -> None:
    d = numa_node(labels={n.LABEL_CPU_BIND_POLICY: "FullPCPUsOnly"}).schedule(admit(a_pod("p", cpu="1500m")))
    assert d.message == "0/1 nodes are available: 1 the requested CPUs must be integer."


def test_reserved_cpus_leave_the_numa_zone_that_reports_them() -> None:
    # zones report 16 CPUs each; the kubelet reserves 12 CPUs of NUMA 0, so NUMA 0 offers 4
    eng = numa_node(reserved="0-5,16-21", labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"})
    assert numa_of(place(eng, a_pod("big", cpu="16", memory="1Gi"))) == [1]
    assert eng.schedule(admit(a_pod("p", cpu="5", memory="1Gi"))).codes == ["UnsatisfiedNUMAResource"]
    assert numa_of(eng.schedule(admit(a_pod("p", cpu="4", memory="1Gi")))) == [0]


def test_node_reservation_cpus_leave_their_numa_zone() -> None:
    reservation = json.dumps({"reservedCPUs": "0-5,16-21"})
    eng = engine_with(
        a_node(
            "n1",
            cpu="32",
            memory="128Gi",
            labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"},
            annotations={n.ANN_NODE_RESERVATION: reservation},
        ),
        an_nrt("n1"),
    )
    assert numa_of(eng.schedule(admit(a_pod("p", cpu="5", memory="1Gi")))) == [1]


def test_numa_split_rounds_down_first() -> None:
    eng = numa_node(labels={n.LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"})
    d = eng.schedule(admit(a_pod("p", cpu="17", labels=LSR)))
    assert [(z["node"], z["resources"]["cpu"]) for z in status(d)["numaNodeResources"]] == [
        (0, "8"),
        (1, "9"),
    ]
    assert len(cpus(d)) == 17


def uneven_nrt(zones: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "n1"},
        "topologyPolicies": ["None"],
        "zones": [
            {
                "name": f"node-{z}",
                "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": cpu, "allocatable": cpu, "available": cpu},
                    {"name": "memory", "capacity": mem, "allocatable": mem, "available": mem},
                ],
            }
            for z, (cpu, mem) in enumerate(zones)
        ],
    }


@pytest.mark.parametrize(
    ("policy", "outcome", "numa"),
    [("Restricted", n.UNSCHEDULABLE, None), ("BestEffort", n.SCHEDULED, [0, 1, 2])],
    ids=["restricted-refuses", "besteffort-gives-up-alignment"],
)
def test_resource_without_any_numa_hint(policy: str, outcome: str, numa: list[int] | None) -> None:
    # only NUMA 0 has cpu; every NUMA set holding the pod's 8Gi includes a node without cpu: cpu gets no hint
    eng = engine_with(
        a_node("n1", cpu="8", memory="12Gi", labels={n.LABEL_NUMA_TOPOLOGY_POLICY: policy}),
        uneven_nrt([("4", "4Gi"), ("0", "4Gi"), ("0", "4Gi")]),
    )
    d = eng.schedule(admit(a_pod("p", cpu="4", memory="8Gi")))
    assert d.outcome == outcome, d.message
    if numa is None:
        assert d.codes == ["UnsatisfiedNUMAResource"]
        assert d.message == "0/1 nodes are available: 1 Unsatisfied NUMA cpu."
    else:
        assert numa_of(d) == numa


@pytest.mark.parametrize(
    ("spec", "node_bind", "written"),
    [
        (
            {"preferredCPUExclusivePolicy": "PCPULevel"},
            None,
            {"preferredCPUBindPolicy": "FullPCPUs", "preferredCPUExclusivePolicy": "PCPULevel"},
        ),
        ({"preferredCPUBindPolicy": "Default"}, None, {"preferredCPUBindPolicy": "FullPCPUs"}),
        (
            {"requiredCPUBindPolicy": "SpreadByPCPUs", "preferredCPUBindPolicy": "Default"},
            None,
            {"requiredCPUBindPolicy": "SpreadByPCPUs", "preferredCPUBindPolicy": "SpreadByPCPUs"},
        ),
        ({"requiredCPUBindPolicy": "SpreadByPCPUs"}, None, None),
        (
            {"preferredCPUBindPolicy": "FullPCPUs"},
            "FullPCPUsOnly",
            {"requiredCPUBindPolicy": "FullPCPUs", "preferredCPUBindPolicy": "FullPCPUs"},
        ),
    ],
    ids=[
        "keeps-exclusive",
        "default-preferred",
        "default-preferred-with-required",
        "complete",
        "node-forced",
    ],
)
def test_resource_spec_written_back_completed(
    spec: dict, node_bind: str | None, written: dict | None
) -> None:
    labels = {n.LABEL_CPU_BIND_POLICY: node_bind} if node_bind else None
    d = numa_node(labels=labels).schedule(admit(a_pod("p", cpu="2", labels=LSR, annotations={RSPEC: spec})))
    assert cpus(d)
    assert d.annotations.get(n.ANN_RESOURCE_SPEC) == written


@pytest.mark.parametrize(
    ("scoring", "expected"),
    [
        ({"nodeNUMAResource": {"strategy": "MostAllocated"}}, [8, 24]),  # the node score only: cpusets spread
        ({"numaNodes": {"strategy": "MostAllocated"}}, [1, 17]),  # numaScoringStrategy: cpusets pack
    ],
    ids=["scoring-strategy", "numa-scoring-strategy"],
)
def test_numa_allocate_strategy_defaults_to_the_numa_nodes_strategy(
    scoring: dict[str, Any], expected: list[int]
) -> None:
    eng = engine_with(a_node("n1", cpu="32", memory="128Gi"), an_nrt("n1"), config={"scoring": scoring})
    place(eng, a_pod("a", cpu="2", labels=LSR))
    assert cpus(eng.schedule(admit(a_pod("b", cpu="2", labels=LSR)))) == expected
