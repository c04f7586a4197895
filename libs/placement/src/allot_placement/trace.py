"""The FGD paper's trace protocol on the placement engine: workload tuning, one pass, per-pod metrics.

Protocol (as the paper's simulator runs it; ``allot sim trace`` drives it):
1. The workload is the pod list sorted by name; the typical-pod distribution is taken from it (``typical_pods``).
2. A seeded ``random.Random(seed)`` (created by the caller and passed in as data) shuffles the pods, then appends pods sampled from the workload (named
   ``<name>-tuned-<i>``) until the next one would take the arrived GPU request above ``tune`` × cluster GPU
   capacity (the simulator compares the sampled pod's per-GPU milli, which we keep), then permutes the node order:
   node ``i`` (by name) is named ``<perm[i]:04d>-<sn>``, which randomises the name-order tie-break per seed exactly
   as the simulator's node-name prefixes do.
3. Every pod is scheduled once by the engine (``schedule`` + ``assume``), in order; failures are never retried and
   pods never leave.
4. After each pod a row records the arrived GPU-milli (failed pods included), the allocated GPU-milli (shares count
   fractionally), the cluster fragmentation (``fragmentation.FragModel``) and the idle GPU-milli.
``discretize`` turns rows into allocation (or fragmentation) per integer arrival percent: rows whose rounded arrival
equals x are averaged, or those within x±1 when none does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec

from allot_contracts.objects import names as n
from allot_placement.config import PlacementConfig, TypicalPod
from allot_placement.engine import PlacementEngine
from allot_placement.fragmentation import MILLI, FragModel, typical_pods
from allot_placement.openb import TraceNode, TracePod, load_node, trace_pod
from allot_placement.policies import node_gpu_state

__all__ = ["Rng", "TraceRun", "discretize", "prepare", "run_trace", "trace_config", "workload_typical_pods"]


class Rng(Protocol):
    """The part of ``random.Random`` the protocol uses (the shell creates ``random.Random(seed)``)."""

    def shuffle(self, x: list[Any]) -> None: ...

    def randrange(self, start: int, stop: int | None = ..., step: int = ...) -> int: ...


class TraceRun(msgspec.Struct, kw_only=True):
    policy: str
    seed: int
    total_gpus: int
    pods_total: int
    pods_scheduled: int
    frag_weight: int
    # per pod: (arrived gpu-milli, allocated gpu-milli, fragmentation (weight × milli), idle gpu-milli)
    rows: list[tuple[int, int, int, int]]
    digest: str = ""


def workload_typical_pods(pods: Sequence[TracePod]) -> tuple[TypicalPod, ...]:
    return typical_pods((p.cpu_milli, p.num_gpu, p.gpu_milli, p.gpu_spec) for p in pods)


def trace_config(policy: str, typical: Sequence[TypicalPod], seed: int) -> PlacementConfig:
    frag = {"typicalPods": [t.as_config() for t in typical]}
    return PlacementConfig.from_dict({"policy": policy, "fragmentation": frag, "seed": seed})


def prepare(
    nodes: Sequence[TraceNode], pods: Sequence[TracePod], rng: Rng, tune: float
) -> tuple[list[TraceNode], list[tuple[str, TracePod]]]:
    """Renamed nodes and the ordered ``(pod name, pod)`` arrivals for one seed's ``rng``."""
    workload = sorted(pods, key=lambda p: p.name)
    order = [(p.name, p) for p in workload]
    rng.shuffle(order)
    capacity = MILLI * sum(nd.gpus for nd in nodes)
    total = sum(p.gpu_request_milli for p in workload)
    target = tune * capacity
    if tune > 0 and total < target:
        i = 0
        while True:
            p = workload[rng.randrange(len(workload))]
            if total + p.gpu_milli > target:
                break
            total += p.gpu_request_milli
            order.append((f"{p.name}-tuned-{i}", p))
            i += 1
    by_name = sorted(nodes, key=lambda nd: nd.name)
    perm = list(range(len(by_name)))
    rng.shuffle(perm)
    renamed = [
        TraceNode(f"{perm[i]:04d}-{nd.name}", nd.cpu_milli, nd.memory_mib, nd.gpus, nd.model)
        for i, nd in enumerate(by_name)
    ]
    return renamed, order


def run_trace(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    rng: Rng,
    tune: float = 1.3,
    progress: Callable[[int, int], None] | None = None,
) -> TraceRun:
    """One seed of the protocol; ``rng`` is ``random.Random(seed)`` (the seed also keys hash tie-breaks)."""
    typical = workload_typical_pods(pods)
    renamed, order = prepare(nodes, pods, rng, tune)
    eng = PlacementEngine(trace_config(policy, typical, seed))
    for nd in renamed:
        load_node(eng, nd)
    model = FragModel(typical)
    names = [nd.name for nd in renamed]
    node_frag = {name: _frag(eng, model, name) for name in names}
    frag = sum(node_frag.values())
    capacity = MILLI * sum(nd.gpus for nd in renamed)
    arrived = used = scheduled = 0
    rows: list[tuple[int, int, int, int]] = []
    for i, (name, pod) in enumerate(order):
        arrived += pod.gpu_request_milli
        d = eng.schedule(trace_pod(pod, name=name))
        if d.outcome == n.SCHEDULED and d.node is not None:
            eng.assume(d)
            scheduled += 1
            used += pod.gpu_request_milli
            new = _frag(eng, model, d.node)
            frag += new - node_frag[d.node]
            node_frag[d.node] = new
        rows.append((arrived, used, frag, capacity - used))
        if progress is not None:
            progress(i + 1, len(order))
    return TraceRun(
        policy=policy,
        seed=seed,
        total_gpus=capacity // MILLI,
        pods_total=len(order),
        pods_scheduled=scheduled,
        frag_weight=model.total_weight,
        rows=rows,
        digest=eng.digest(),
    )


def _frag(eng: PlacementEngine, model: FragModel, name: str) -> int:
    state = eng.node_state(name)
    assert state is not None
    gpu_model, cpu_left, lefts, _ = node_gpu_state(state)
    return model.frag(gpu_model, cpu_left, lefts)


def discretize(run: TraceRun, metric: str = "alloc") -> dict[int, float]:
    """Per integer arrival percent (0–130): the mean of ``metric`` (alloc | frag | frag_ratio), in percent."""
    cap = run.total_gpus * MILLI
    points: dict[int, list[float]] = {}
    for arrived, used, frag, idle in run.rows:
        x = round(arrived * 100 / cap)
        if metric == "alloc":
            v = used * 100 / cap
        elif metric == "frag":
            v = frag * 100 / (run.frag_weight * cap)
        else:
            v = frag * 100 / (run.frag_weight * idle) if idle else 0.0
        points.setdefault(x, []).append(round(v, 2))
    out: dict[int, float] = {}
    for x in range(131):
        vals = points.get(x)
        if not vals:
            vals = [v for k in (x - 1, x, x + 1) for v in points.get(k, [])]
        if vals:
            out[x] = round(sum(vals) / len(vals), 2)
    return out


def summary(runs: Sequence[TraceRun], walls: Sequence[float]) -> dict[str, Any]:
    """The ``--summary-json`` object for one policy over several seeds (means, plus ``per_seed``)."""
    per_seed: list[dict[str, Any]] = []
    for run, wall in zip(runs, walls):
        alloc, frag = discretize(run, "alloc"), discretize(run, "frag")
        per_seed.append(
            {
                "seed": run.seed,
                "alloc_pct_at_100": alloc.get(100),
                "alloc_pct_at_130": alloc.get(130),
                "unallocated_pct_at_130": round(100 - alloc.get(130, 0.0), 2),
                "frag_pct_at_100": frag.get(100),
                "pods_total": run.pods_total,
                "pods_scheduled": run.pods_scheduled,
                "wall_s": round(wall, 2),
                "digest": run.digest,
            }
        )

    def mean(key: str) -> float | None:
        vals = [float(s[key]) for s in per_seed if s[key] is not None]
        return round(sum(vals) / len(vals), 2) if vals else None

    return {
        "policy": runs[0].policy if runs else "",
        "seeds": [r.seed for r in runs],
        **{
            k: mean(k)
            for k in (
                "alloc_pct_at_100",
                "alloc_pct_at_130",
                "unallocated_pct_at_130",
                "frag_pct_at_100",
                "pods_total",
                "pods_scheduled",
                "wall_s",
            )
        },
        "per_seed": per_seed,
    }
