"""``allot bench placement``: placement throughput on the openb trace and engine memory at 10,000 nodes.

Throughput: the openb GPU node list (1,213 nodes; GPUs given a synthetic two-socket, PCIe-pair topology) is loaded
into a fresh engine with the ``binpack`` policy, then every pod of the pod list is scheduled in file order and
assumed when Scheduled (a failure counts as an attempt). ``placements_per_s`` = attempts / wall seconds, best of
``--repeat`` runs (other processes share the machine). ``us_per_pod_cpu``: CPU µs per pod in that loop (median);
``evaluations_per_pod``: node evaluations (filter and score runs not answered from a cache) per pod.

Cluster size: ``--node-count N`` replicates the node list with new names (``<name>-r<k>``) to N nodes and the pod
list by the same factor, so the cluster fills the same way at every size. ``--no-free-index`` runs the engine
without its free-resource index (same decisions). ``--shards N`` runs the sharded prototype of
docs/adr/0013-sharded-deciders.md instead (``allot_sim/bench/_shards.py``).

Memory: a fresh subprocess imports the engine, loads ``--rss-nodes`` nodes of 8 GPUs each and schedules
``--rss-pods`` pods; ``rss_mib_10k_nodes`` is that process's peak resident set (VmHWM, interpreter included) and
``rss_delta_mib_10k_nodes`` the growth over the freshly-imported interpreter.
"""

from __future__ import annotations

import heapq
import json
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from allot_intake.errors import InputError, UsageError
from allot_runtime import memory

REPO_ROOT = Path(__file__).resolve().parents[5]
OPENB_DIR = (REPO_ROOT / ".." / "shared" / "traces" / "openb").resolve()
DEFAULT_NODES = OPENB_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = OPENB_DIR / "openb_pod_list_default.csv"
# Placements per million reference operations (see _reference_ops_per_s), recorded in docs/benchmarks/placement.md.
BASELINE_PER_REFERENCE_MOP = 3000
GUARD_TOLERANCE = 0.2

_RSS_SCRIPT = """
import json, resource, sys
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return 0.0
from allot_placement import PlacementConfig, PlacementEngine
from allot_placement.openb import TraceNode, TracePod, load_node, trace_pod
base = status("VmRSS")
eng = PlacementEngine(PlacementConfig.from_dict({"policy": "binpack"}))
nodes, pods = int(sys.argv[1]), int(sys.argv[2])
for i in range(nodes):
    load_node(eng, TraceNode(f"node-{i:05d}", 96000, 393216, 8, "G2"))
loaded = status("VmRSS")
shapes = [(1, 1000), (1, 500), (1, 250), (2, 1000), (8, 1000)]
for k in range(pods):
    g, m = shapes[k % len(shapes)]
    d = eng.schedule(trace_pod(TracePod(f"p{k}", 4000, 16384, g, m, ())))
    if d.outcome == "Scheduled":
        eng.assume(d)
print(json.dumps({"base": base, "loaded": loaded, "now": status("VmRSS"), "peak": status("VmHWM")}))
"""


class Throughput(TypedDict):
    """One throughput run over the trace."""

    nodes: int
    pods: int
    scheduled: int
    us_per_pod_cpu: float
    evaluations_per_pod: float
    wall_s: float
    cpu_s: float
    placements_per_s: int
    digest: str


class Rss(TypedDict):
    """The memory run: a fresh process's peak resident set with the engine loaded."""

    rss_mib_10k_nodes: float
    rss_delta_mib_10k_nodes: float
    rss_loaded_mib: float
    rss_nodes: int
    rss_gpus_per_node: int
    rss_pods_scheduled: int
    rss_measure: str


class Report(TypedDict):
    """What ``allot bench placement`` prints (in key order): the median run, the machine and the guard
    (:class:`MemoryReport` with the memory run)."""

    benchmark: str
    policy: str
    free_index: bool
    placements_per_s: int
    placements_per_s_runs: list[int]
    nodes: int
    pods: int
    scheduled: int
    cpu_s: float
    us_per_pod_cpu: float
    us_per_pod_cpu_runs: list[float]
    evaluations_per_pod: float
    nodes_csv: str
    pods_csv: str
    digest: str
    reference_mops: float
    placements_per_reference_mop: int
    baseline_per_reference_mop: int
    gc: str
    python: str
    machine: str
    goals: dict[str, int]
    guard: str


class MemoryReport(Report, Rss):
    """:class:`Report` with the memory run's figures."""


class ShardRun(TypedDict):
    """One prototype run: each shard's nodes, CPU time and final digest, and the rate over all of them."""

    shards: int
    shard_nodes: list[int]
    pods: int
    scheduled: int
    wall_s: float
    placements_per_s: int
    shard_cpu_s: list[float]
    shard_digests: list[str]


class ShardsReport(ShardRun):
    """What ``allot bench placement --shards N`` prints (in key order): the last run, the median rate."""

    benchmark: str
    placements_per_s_runs: list[int]
    nodes: int


@dataclass(frozen=True)
class Workload:
    """What a placement run schedules: the trace's node and pod lists, the nodes replicated with new names to
    ``node_count`` and the pods by the same factor (0: as read), the first ``limit`` pods (0: all), in ``repeat``
    runs, under placement ``policy`` (the regression guard's baseline is binpack's)."""

    nodes_csv: Path
    pods_csv: Path
    node_count: int = 0
    limit: int = 0
    repeat: int = 1
    policy: str = "binpack"


def trace_csv(path: Path, what: str) -> Path:
    """``path``, or an :class:`InputError` saying where the openb trace is looked for."""
    if not path.is_file():
        raise InputError(
            f"{what} not found: {path} (the openb trace lives in ../shared/traces/openb beside the "
            f"checkout; pass --{what.split()[0]} PATH)"
        )
    return path


def _throughput(
    nodes_csv: Path,
    pods_csv: Path,
    limit: int,
    node_count: int = 0,
    free_index: bool = True,
    policy: str = "binpack",
) -> Throughput:
    from allot_placement import PlacementConfig, PlacementEngine
    from allot_placement.openb import load_node, read_nodes, read_pods, replicate, trace_pod

    nodes = read_nodes(nodes_csv)
    pods = read_pods(pods_csv)
    if node_count:
        pods = replicate(pods, round(len(pods) * node_count / max(len(nodes), 1)))
        nodes = replicate(nodes, node_count)
    if limit:
        pods = pods[:limit]
    memory.unsettle()  # what an earlier run left frozen can go
    eng = PlacementEngine(PlacementConfig.from_dict({"policy": policy}), free_index=free_index)
    for node in nodes:
        load_node(eng, node)
    admitted = [trace_pod(p) for p in pods]  # read at the door, as the services receive them
    memory.settle()  # as the device-allocator does once its projection is built
    scheduled = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for m in admitted:
        d = eng.schedule(m)
        if d.outcome == "Scheduled":
            eng.assume(d)
            scheduled += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "nodes": len(nodes),
        "pods": len(admitted),
        "scheduled": scheduled,
        "us_per_pod_cpu": round(cpu / max(len(admitted), 1) * 1e6, 1),
        "evaluations_per_pod": round(eng.stats["evaluations"] / max(len(admitted), 1), 1),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "placements_per_s": round(len(admitted) / wall),
        "digest": eng.digest(),
    }


def _rss(nodes: int, pods: int) -> Rss:
    res = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(nodes), str(pods)], capture_output=True, text=True, check=True
    )
    m = json.loads(res.stdout)
    return {
        "rss_mib_10k_nodes": round(m["peak"], 1),
        "rss_delta_mib_10k_nodes": round(m["peak"] - m["base"], 1),
        "rss_loaded_mib": round(m["loaded"], 1),
        "rss_nodes": nodes,
        "rss_gpus_per_node": 8,
        "rss_pods_scheduled": pods,
        "rss_measure": "VmHWM of a fresh process (interpreter included)",
    }


def _reference_ops_per_s(n: int = 400_000) -> float:
    """Operations per CPU second of a fixed pure-Python workload of the engine's kind (tuple keys, dict updates, a
    bounded heap), run beside it in the same process: placements per CPU second divided by this rate is comparable
    across machines and background load, which the raw rate is not."""
    heap: list[tuple[int, int]] = []
    counts: dict[tuple[int, int], int] = {}
    started = time.process_time()
    for i in range(n):
        key = (i % 997, i % 13)
        counts[key] = counts.get(key, 0) + 1
        heapq.heappush(heap, (-(i * 7919 % 10007), i))
        if len(heap) > 64:
            heapq.heappop(heap)
    return n / (time.process_time() - started)


def sharded(workload: Workload, *, shards: int) -> ShardsReport:
    """The sharded prototype (ADR 0013): the workload's runs over ``shards`` engines in as many processes."""
    from allot_placement.openb import read_nodes, read_pods
    from allot_sim.bench._shards import run_shards

    nodes_csv, pods_csv, node_count = workload.nodes_csv, workload.pods_csv, workload.node_count
    nodes, pods = len(read_nodes(nodes_csv)), len(read_pods(pods_csv))
    total = round(pods * node_count / max(nodes, 1)) if node_count else pods
    if workload.limit:
        total = min(total, workload.limit)
    runs = [
        run_shards(nodes_csv, pods_csv, node_count, shards, total) for _ in range(max(workload.repeat, 1))
    ]
    if len({tuple(r["shard_digests"]) for r in runs}) != 1:
        raise UsageError("runs disagree on the shards' final digests: the prototype is not deterministic")
    rates = [r["placements_per_s"] for r in runs]
    return {
        **runs[-1],
        "benchmark": "placement-shards",
        "placements_per_s": round(statistics.median(rates)),
        "placements_per_s_runs": rates,
        "nodes": node_count or nodes,
    }


def measure(workload: Workload, *, free_index: bool, rss: tuple[int, int] | None) -> Report:
    """Throughput (the median of the workload's runs, interleaved with the reference workload) and, unless ``rss`` is
    None, the memory run at ``rss = (nodes, pods)``. ``guard`` is ``ok`` unless the normalised rate regressed."""
    memory.configure()  # the collector as the services run it
    nodes_csv, pods_csv = workload.nodes_csv, workload.pods_csv
    runs, references = [], []
    for _ in range(max(workload.repeat, 1)):  # interleaved, so that both see the same background load
        references.append(_reference_ops_per_s())
        runs.append(
            _throughput(nodes_csv, pods_csv, workload.limit, workload.node_count, free_index, workload.policy)
        )
    if len({r["digest"] for r in runs}) != 1:
        raise UsageError("runs disagree on the final allocation digest: the engine is not deterministic")
    rates = [r["placements_per_s"] for r in runs]
    median = statistics.median(rates)
    reference = statistics.median(references) / 1e6
    # CPU time on both sides: what other processes take from this one cancels out, not only the machine's speed
    normalized = round(statistics.median(r["pods"] / r["cpu_s"] for r in runs) / reference)
    last = runs[-1]
    floor = round(BASELINE_PER_REFERENCE_MOP * (1 - GUARD_TOLERANCE))
    out: Report = {
        "benchmark": "placement",
        "policy": workload.policy,
        "free_index": free_index,
        "placements_per_s": round(median),
        "placements_per_s_runs": rates,
        "nodes": last["nodes"],
        "pods": last["pods"],
        "scheduled": last["scheduled"],
        "cpu_s": last["cpu_s"],
        "us_per_pod_cpu": statistics.median(r["us_per_pod_cpu"] for r in runs),
        "us_per_pod_cpu_runs": [r["us_per_pod_cpu"] for r in runs],
        "evaluations_per_pod": last["evaluations_per_pod"],
        "nodes_csv": str(nodes_csv),
        "pods_csv": str(pods_csv),
        "digest": last["digest"],
        "reference_mops": round(reference, 3),
        "placements_per_reference_mop": normalized,
        "baseline_per_reference_mop": BASELINE_PER_REFERENCE_MOP,
        "gc": f"thresholds {memory.THRESHOLDS}, cluster frozen after loading (as the device-allocator runs)",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "goals": {"placements_per_s": 3000, "rss_mib_10k_nodes": 300},
        "guard": "not checked: the baseline is binpack's"
        if workload.policy != "binpack"
        else "ok"
        if normalized >= floor
        else f"REGRESSION: {normalized} < {floor} placements per reference Mop",
    }
    if rss is not None:
        measured: MemoryReport = {**out, **_rss(*rss)}
        return measured
    return out
