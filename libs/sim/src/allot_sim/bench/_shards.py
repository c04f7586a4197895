"""``allot bench placement --shards N``: a prototype of device-allocator shards over node partitions (ADR 0013).

The nodes are split by a stable hash of their name into ``N`` partitions; each partition gets its own engine in
its own process (``multiprocessing``, one per shard). A router in the parent sends the pods in rounds of
``ROUND`` pods: each pod to the shard its key hashes to, a pod its shard found unschedulable to the next shard in
the following round, until every shard has refused it. Shards decide their part of a round in parallel and assume
what they place. Figures: pods per wall second over the whole run (routing, pipes and waiting included), each
shard's CPU seconds in its decision loop, and the digests of every shard's final state (runs must agree).

Not measured here: the log (decisions are not appended), spanning gangs, and decision quality against one engine.
"""

from __future__ import annotations

import hashlib
import time
from multiprocessing import Pipe, Process
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from allot_sim.bench.placement import ShardRun

ROUND = 256


def shard_of(key: str, shards: int) -> int:
    """A stable shard number for a node name or pod key."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "big") % shards


def _shard_main(
    conn: Connection, nodes_csv: str, pods_csv: str, node_count: int, shard: int, shards: int
) -> None:
    from allot_placement import PlacementConfig, PlacementEngine
    from allot_placement.openb import load_node, read_nodes, read_pods, replicate, trace_pod

    nodes = read_nodes(Path(nodes_csv))
    pods = read_pods(Path(pods_csv))
    if node_count:
        pods = replicate(pods, round(len(pods) * node_count / max(len(nodes), 1)))
        nodes = replicate(nodes, node_count)
    eng = PlacementEngine(PlacementConfig.from_dict({"policy": "binpack"}))
    for node in nodes:
        if shard_of(node.name, shards) == shard:
            load_node(eng, node)
    admitted = [trace_pod(p) for p in pods]
    conn.send(len(eng.node_names()))
    cpu = 0.0
    while True:
        batch = conn.recv()
        if batch is None:
            break
        c0 = time.process_time()
        out = []
        for i in batch:
            d = eng.schedule(admitted[i])
            if d.outcome == "Scheduled":
                eng.assume(d)
            out.append(d.outcome == "Scheduled")
        cpu += time.process_time() - c0
        conn.send(out)
    conn.send({"cpu_s": round(cpu, 3), "digest": eng.digest()})


def run_shards(nodes_csv: Path, pods_csv: Path, node_count: int, shards: int, pods_total: int) -> ShardRun:
    """One prototype run (see the module docstring)."""
    conns, procs = [], []
    for s in range(shards):
        parent, child = Pipe()
        p = Process(target=_shard_main, args=(child, str(nodes_csv), str(pods_csv), node_count, s, shards))
        p.start()
        conns.append(parent)
        procs.append(p)
    sizes = [c.recv() for c in conns]
    # pod i first goes to the shard its index hashes to, then to the following ones
    pending = [(i, shard_of(f"pod-{i}", shards), 0) for i in range(pods_total)]
    scheduled = 0
    t0 = time.perf_counter()
    while pending:
        now, pending = pending[: ROUND * shards], pending[ROUND * shards :]
        per: list[list[tuple[int, int, int]]] = [[] for _ in range(shards)]
        for item in now:
            per[item[1]].append(item)
        for s in range(shards):
            conns[s].send([i for i, _, _ in per[s]])
        for s in range(shards):
            for (i, shard, tried), ok in zip(per[s], conns[s].recv(), strict=True):
                if ok:
                    scheduled += 1
                elif tried + 1 < shards:
                    pending.append((i, (shard + 1) % shards, tried + 1))
    wall = time.perf_counter() - t0
    for c in conns:
        c.send(None)
    results = [c.recv() for c in conns]
    for p in procs:
        p.join()
    return {
        "shards": shards,
        "shard_nodes": sizes,
        "pods": pods_total,
        "scheduled": scheduled,
        "wall_s": round(wall, 3),
        "placements_per_s": round(pods_total / wall),
        "shard_cpu_s": [r["cpu_s"] for r in results],
        "shard_digests": [r["digest"][:16] for r in results],
    }
