"""The CPU accumulator (``take_cpus``) against Koordinator's takeCPUs table (cpu_accumulator_test.go)."""

from __future__ import annotations

import json

import pytest

from allot_contracts.objects import names as n
from allot_contracts.objects.cpuset import parse_cpuset
from allot_contracts.objects.inventory import Topology, parse_nrt
from allot_placement.cpus import take_cpus


def builder_topology(sockets: int, numa_per_socket: int, cores_per_numa: int, threads: int) -> Topology:
    """Koordinator's buildCPUTopologyForTest: CPU ids run through each core's threads in turn."""
    detail, cpu, core, numa = [], 0, 0, 0
    for socket in range(sockets):
        for _ in range(numa_per_socket):
            for _ in range(cores_per_numa):
                for _ in range(threads):
                    detail.append({"id": cpu, "core": core, "socket": socket, "node": numa})
                    cpu += 1
                core += 1
            numa += 1
    nrt = {"metadata": {"name": "n1", "annotations": {n.ANN_CPU_TOPOLOGY: json.dumps({"detail": detail})}}}
    _, topo, errors = parse_nrt(nrt)
    assert topo is not None and not errors
    return topo


def take(
    dims: tuple[int, int, int, int],
    held: str,
    need: int,
    bind: str,
    most: bool,
    exclusive: str = "",
    held_policy: str = "",
) -> str:
    topo = builder_topology(*dims)
    taken = set(parse_cpuset(held))
    owner = {c: held_policy for c in taken}
    got = take_cpus(topo, [c for c in topo.cpus if c not in taken], owner, need, bind, exclusive, most)
    assert got is not None
    return ",".join(str(c) for c in got)


# Koordinator's TestTakeFullPCPUs / TestTakeSpreadByPCPUs tables (and their NUMALeastAllocated variants)
TAKE = [
    ("FullPCPUs", (1, 1, 4, 2), "", 2, True, "0,1"),
    ("FullPCPUs", (2, 1, 4, 2), "0-1", 8, True, "8,9,10,11,12,13,14,15"),
    ("FullPCPUs", (2, 1, 4, 2), "", 12, True, "0,1,2,3,4,5,6,7,8,9,10,11"),
    ("FullPCPUs", (2, 2, 4, 2), "0-5,16-23", 6, True, "24,25,26,27,28,29"),
    ("FullPCPUs", (2, 2, 4, 2), "0-5,16-23", 6, False, "8,9,10,11,12,13"),
    ("FullPCPUs", (2, 2, 4, 2), "0-5,16-23", 12, True, "6,7,8,9,10,11,12,13,14,15,24,25"),
    ("FullPCPUs", (2, 2, 4, 2), "0-3,8-11", 4, True, "4,5,6,7"),
    ("FullPCPUs", (2, 2, 4, 2), "0-3,8-11", 4, False, "16,17,18,19"),
    ("FullPCPUs", (2, 2, 2, 2), "0,2,4,8,12", 4, True, "10,11,14,15"),
    ("FullPCPUs", (2, 2, 2, 2), "0,2,4,8,10,12", 6, True, "5,6,7,13,14,15"),
    ("FullPCPUs", (2, 2, 2, 2), "0,2,4,8,10,12", 6, False, "1,3,6,7,14,15"),
    ("FullPCPUs", (2, 2, 2, 2), "0,2,4,8,9,10,12", 6, True, "6,7,11,13,14,15"),
    ("SpreadByPCPUs", (1, 1, 4, 2), "", 4, True, "0,2,4,6"),
    ("SpreadByPCPUs", (2, 1, 4, 2), "0,2", 4, True, "1,3,4,6"),
    ("SpreadByPCPUs", (2, 1, 4, 2), "0-3", 4, True, "8,10,12,14"),
    ("SpreadByPCPUs", (2, 1, 4, 2), "0,2", 6, True, "1,3,4,5,6,7"),
    ("SpreadByPCPUs", (2, 1, 4, 2), "0,2", 4, False, "8,10,12,14"),
    ("SpreadByPCPUs", (2, 1, 4, 2), "0,2", 6, False, "8,9,10,11,12,14"),
]


@pytest.mark.parametrize(("bind", "dims", "held", "need", "most", "want"), TAKE)
def test_take_cpus(
    bind: str, dims: tuple[int, int, int, int], held: str, need: int, most: bool, want: str
) -> None:
    assert take(dims, held, need, bind, most) == want


def test_full_pcpus_ranks_numa_nodes_by_their_free_whole_cores() -> None:
    # NUMA 0 has 5 free threads but one free core (6,7); NUMA 1 has 4 free threads in two free cores (12-15)
    assert take((2, 1, 4, 2), "0,2,4,8-11", 2, "FullPCPUs", most=False) == "12,13"
    assert take((2, 1, 4, 2), "0,2,4,8-11", 2, "FullPCPUs", most=True) == "6,7"


@pytest.mark.parametrize(
    ("dims", "held_policy", "exclusive", "bind", "want"),
    [
        ((2, 1, 4, 2), "PCPULevel", "PCPULevel", "SpreadByPCPUs", "8,10,12,14"),
        ((2, 1, 8, 2), "PCPULevel", "PCPULevel", "SpreadByPCPUs", "4,6,8,10"),
        ((2, 1, 8, 2), "PCPULevel", "", "SpreadByPCPUs", "1,3,4,6"),
        ((2, 1, 4, 2), "NUMANodeLevel", "NUMANodeLevel", "SpreadByPCPUs", "8,10,12,14"),
        ((2, 1, 4, 2), "NUMANodeLevel", "", "SpreadByPCPUs", "1,3,4,6"),
        ((2, 1, 4, 2), "NUMANodeLevel", "NUMANodeLevel", "FullPCPUs", "8,9,10,11"),
        ((2, 1, 4, 2), "NUMANodeLevel", "", "FullPCPUs", "4,5,6,7"),
    ],
)
def test_exclusive_policies(
    dims: tuple[int, int, int, int], held_policy: str, exclusive: str, bind: str, want: str
) -> None:
    assert take(dims, "0,2", 4, bind, True, exclusive, held_policy) == want


def test_overlapped_cpus_with_pcpu_level() -> None:
    assert take((2, 1, 4, 2), "", 10, "SpreadByPCPUs", True, "PCPULevel") == "0,1,2,3,4,6,8,10,12,14"
