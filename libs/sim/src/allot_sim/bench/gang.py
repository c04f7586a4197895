"""``allot bench gang``: place or reject many gangs of whole-node GPU pods on the openb cluster.

Default: 200 gangs of 8 pods × 8 GPUs (`nvidia.com/gpu: 8`, min-available 8) on the 1,213 GPU nodes of the openb
trace (`../shared/traces/openb/openb_node_list_gpu_node.csv`; 617 of them have 8 GPUs, so 77 gangs fit and the rest
must be rejected whole). Every pod goes through the seven services' decision code, chained over an in-memory log
(the simulator): gang gate, group quota admission, group placement (all or nothing), binding. Prints one JSON object:
wall time to place or reject them all, per-gang decision latency (p50/p99, the time from the last member's arrival
to the group's placement or rejection), gangs placed/rejected and pods bound. A check at the end asserts that no
gang is partially placed.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import TypedDict

from allot_contracts.jsonvalue import JsonObject
from allot_intake.errors import InputError, UsageError

DEFAULT_NODES = (
    Path(__file__).resolve().parents[5].parent
    / "shared"
    / "traces"
    / "openb"
    / "openb_node_list_gpu_node.csv"
)


class Report(TypedDict):
    """What ``allot bench gang`` prints."""

    gangs: int
    gang_size: int
    gpus_per_pod: int
    nodes: int
    gpus_total: int
    gangs_placed: int
    gangs_rejected: int
    pods_bound: int
    partially_placed_gangs: int
    seconds_all_gangs: float
    gangs_per_s: float
    gang_decision_ms_p50: float
    gang_decision_ms_p99: float
    events_in_log: int
    path: str
    python: str


def _gang_pod(gang: int, member: int, size: int, gpus: int) -> JsonObject:
    requests: JsonObject = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"g{gang:03d}-w{member}",
            "namespace": "bench",
            "annotations": {
                "gang.scheduling.koordinator.sh/name": f"g{gang:03d}",
                "gang.scheduling.koordinator.sh/min-available": str(size),
            },
        },
        "spec": {"containers": [{"name": "w", "resources": {"requests": requests, "limits": requests}}]},
    }


def measure(nodes: str | None, *, gangs: int, size: int, gpus: int) -> Report:
    from allot_intake.documents import Document
    from allot_intake.manifests import to_input
    from allot_placement.openb import node_manifests, read_nodes
    from allot_sim.simulator import Simulation

    nodes_csv = Path(nodes) if nodes else DEFAULT_NODES
    if not nodes_csv.exists():
        raise InputError(f"node list not found: {nodes_csv} (pass --nodes CSV)")
    sim = Simulation()
    index = 0

    def apply(body: JsonObject) -> None:
        nonlocal index
        sim.apply(to_input(Document(source="bench", index=index, body=body)))
        index += 1

    trace_nodes = read_nodes(nodes_csv)
    started = time.perf_counter()
    for node in trace_nodes:
        node_manifest, device = node_manifests(node)
        apply(node_manifest)
        if device is not None:
            apply(device)
    load_s = time.perf_counter() - started
    print(f"# cluster: {len(trace_nodes)} nodes loaded in {load_s:.1f}s", file=sys.stderr)

    latencies: list[float] = []
    started = time.perf_counter()
    for gang in range(gangs):
        for member in range(size - 1):
            apply(_gang_pod(gang, member, size, gpus))
        t0 = time.perf_counter()
        apply(_gang_pod(gang, size - 1, size, gpus))
        latencies.append(time.perf_counter() - t0)
        if (gang + 1) % 50 == 0:
            print(f"# {gang + 1}/{gangs} gangs", file=sys.stderr)
    wall = time.perf_counter() - started

    placed = [e.payload_dict() for e in sim.store.events if e.type == "gang.group_placed"]
    rejected = {e.payload_dict()["group"] for e in sim.store.events if e.type == "gang.group_unschedulable"}
    bound: dict[str, int] = {}
    for e in sim.store.events:
        if e.type == "pod.bound":
            gang_name = e.payload_dict()["pod"]["name"].split("-")[0]
            bound[gang_name] = bound.get(gang_name, 0) + 1
    partial = sorted(g for g, n in bound.items() if n != size)
    if partial:
        raise UsageError(f"gangs partially bound: {partial[:5]}")
    gpus_total = sum(n.gpus for n in trace_nodes)
    result: Report = {
        "gangs": gangs,
        "gang_size": size,
        "gpus_per_pod": gpus,
        "nodes": len(trace_nodes),
        "gpus_total": gpus_total,
        "gangs_placed": len(placed),
        "gangs_rejected": len(rejected - {p["group"] for p in placed}),
        "pods_bound": sum(bound.values()),
        "partially_placed_gangs": 0,
        "seconds_all_gangs": round(wall, 3),
        "gangs_per_s": round(gangs / wall, 1),
        "gang_decision_ms_p50": round(statistics.median(latencies) * 1000, 2),
        "gang_decision_ms_p99": round(sorted(latencies)[max(0, int(len(latencies) * 0.99) - 1)] * 1000, 2),
        "events_in_log": len(sim.store.events),
        "path": "seven services' processors over an in-memory log (allot sim)",
        "python": sys.version.split()[0],
    }
    return result
