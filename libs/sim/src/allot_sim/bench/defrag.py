"""``allot bench defrag``: the openb trace with and without GPUDefrag, the descheduler's defragmentation planner.

The FGD paper's protocol (docs/benchmarks/fragmentation.md: pods shuffled per seed and tuned to 130 % of the GPU
capacity, node order permuted, every pod scheduled once and never retried) on a compact model of the cluster
(free CPU and per-GPU free milli-GPU per node) placing each pod with FGD: the node and GPUs whose placement raises
the cluster's fragmentation least (``FragModel`` of the workload's typical pods), then the lowest node name. With
``defrag`` a GPU pod that fits nowhere is handed to ``allot_descheduling.plan_round`` as the one waiting pod; when
it returns a plan, its migrations are carried out and the pod is placed where the plan says. Prints, per run and
as the median over the seeds: GPU allocation at 100 % and 130 % arrival, pods placed, migrations, and migrations
per pod placed by a plan (docs/benchmarks/defrag.md).
"""

from __future__ import annotations

import bisect
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypedDict, get_args

from allot_intake.errors import InputError

# the traces beside the checkout (../shared/traces/openb), looked for in each folder above it
TRACES = next(
    (
        a / "shared" / "traces" / "openb"
        for a in Path(__file__).resolve().parents[5].parents
        if (a / "shared").is_dir()
    ),
    Path(__file__).resolve().parents[5].parent / "shared" / "traces" / "openb",
)
Sig = tuple[str, int, tuple[int, ...]]
Shape = tuple[int, int, int, tuple[str, ...]]


class Cluster:
    """Free CPU and GPU per node, nodes grouped by identical state (they score alike: the lowest name wins); each
    state seen is numbered, so the per-state cache keys are small integers."""

    def __init__(self, nodes: list[Any], frag: Any) -> None:
        self.frag = frag
        self.model = {nd.name: nd.model for nd in nodes}
        self.cpu = {nd.name: nd.cpu_milli for nd in nodes}
        self.free = {nd.name: [1000] * nd.gpus for nd in nodes}
        self.ids: dict[Sig, int] = {}
        self.sigs: list[Sig] = []
        self.groups: dict[int, list[str]] = {}  # state id -> its nodes, by name
        self.state: dict[str, int] = {}
        self.memo: dict[Sig, int] = {}
        self.best: dict[tuple[int, int], tuple[int, tuple[int, ...]] | None] = {}
        self.shapes: dict[Shape, int] = {}
        self.pods: dict[str, tuple[str, int, tuple[tuple[int, int], ...], tuple[str, ...]]] = {}
        for nd in sorted(nodes, key=lambda n: n.name):
            self._join(nd.name)

    def _join(self, node: str) -> None:
        sig = (self.model[node], self.cpu[node], tuple(self.free[node]))
        sid = self.ids.get(sig)
        if sid is None:
            sid = self.ids[sig] = len(self.sigs)
            self.sigs.append(sig)
        self.state[node] = sid
        bisect.insort(self.groups.setdefault(sid, []), node)

    def f(self, sig: Sig) -> int:
        got = self.memo.get(sig)
        if got is None:
            got = self.memo[sig] = self.frag(*sig)
        return got

    def _option(self, sig: Sig, shape: Shape) -> tuple[int, tuple[int, ...]] | None:
        """The least rise of F placing ``shape`` on a node in state ``sig``, and the GPUs; None when it does not fit."""
        model, cpu, free = sig
        c, n, m, models = shape
        out: tuple[int, tuple[int, ...]] | None = None
        if cpu >= c and not (n and models and model not in models):
            holds = [i for i, left in enumerate(free) if left >= m] if n else []
            if len(holds) >= n:
                choices = [tuple(holds[:n])] if n != 1 else [(i,) for i in holds]
                for gpus in choices:
                    after = list(free)
                    for i in gpus:
                        after[i] -= m
                    delta = self.f((model, cpu - c, tuple(after))) - self.f(sig)
                    if out is None or delta < out[0]:
                        out = (delta, gpus)
        return out

    def place(self, shape: Shape) -> tuple[str, tuple[int, ...]] | None:
        best: tuple[int, str, tuple[int, ...]] | None = None
        sid = self.shapes.setdefault(shape, len(self.shapes))
        cache = self.best
        for state, names in self.groups.items():
            key = (state, sid)
            if key in cache:
                option = cache[key]
            else:
                option = cache[key] = self._option(self.sigs[state], shape)
            if option is not None and (best is None or (option[0], names[0]) < best[:2]):
                best = (option[0], names[0], option[1])
        return None if best is None else (best[1], best[2])

    def move(self, node: str, cpu: int, gpus: tuple[tuple[int, int], ...], sign: int) -> None:
        sid = self.state[node]
        group = self.groups[sid]
        group.remove(node)
        if not group:
            del self.groups[sid]
        self.cpu[node] -= sign * cpu
        for i, m in gpus:
            self.free[node][i] -= sign * m
        self._join(node)

    def bind(self, key: str, node: str, shape: Shape, gpus: tuple[int, ...]) -> None:
        held = tuple((i, shape[2]) for i in gpus)
        self.move(node, shape[0], held, +1)
        if held:
            self.pods[key] = (node, shape[0], held, shape[3])


def _defrag(cluster: Cluster, key: str, shape: Shape, max_per_plan: int) -> int | None:
    """Plan for one waiting pod; carry the plan out. The migrations it took, None when there is no plan."""
    from allot_descheduling import DefragInput, DefragLimits, GpuNode, GpuPod, PendingGpuPod, plan_round

    models = shape[3]
    if (
        sum(sum(f) for n, f in cluster.free.items() if not models or cluster.model[n] in models)
        < shape[1] * shape[2]
    ):
        return None  # the planner's InsufficientFree, without building its input
    data = DefragInput(
        nodes=tuple(
            GpuNode(name=n, model=cluster.model[n], cpu_free=cluster.cpu[n], free=tuple(cluster.free[n]))
            for n in cluster.model
        ),
        pods=tuple(
            GpuPod(key=k, node=node, cpu=cpu, gpus=gpus, models=models)
            for k, (node, cpu, gpus, models) in cluster.pods.items()
        ),
        pending=(
            PendingGpuPod(key=key, cpu=shape[0], gpu_count=shape[1], gpu_milli=shape[2], models=shape[3]),
        ),
        limits=DefragLimits(max_per_plan=max_per_plan, max_plans=1),
    )
    out = plan_round(data, lambda model, cpu, free: cluster.f((model, cpu, tuple(free))))
    if not out.plans:
        return None
    plan = out.plans[0]
    for mv in plan.moves:
        node, cpu, gpus, models = cluster.pods.pop(mv.pod)
        cluster.move(node, cpu, gpus, -1)
        cluster.bind(mv.pod, mv.target, (cpu, len(gpus), gpus[0][1], models), tuple(mv.gpus))
    cluster.bind(key, plan.target, shape, tuple(plan.gpus))
    return len(plan.moves)


class DefragRun(TypedDict):
    """One seed's run, without or with defragmentation."""

    seed: int
    defrag: bool
    alloc_pct_at_100: float | None
    alloc_pct_at_130: float | None
    pods_total: int
    pods_placed: int
    pods_placed_by_plans: int
    migrations: int
    migrations_per_pod_placed: float
    wall_s: float


Figure = Literal[
    "alloc_pct_at_100",
    "alloc_pct_at_130",
    "pods_placed",
    "pods_placed_by_plans",
    "migrations",
    "migrations_per_pod_placed",
    "wall_s",
]
MEDIANS: tuple[Figure, ...] = get_args(Figure)  # the figures of a run whose median is reported, in this order


def run_one(
    nodes: list[Any], pods: list[Any], seed: int, *, defrag: bool, tune: float, max_per_plan: int
) -> DefragRun:
    from allot_placement.fragmentation import MILLI, FragModel
    from allot_placement.trace import TraceRun, discretize, prepare, workload_typical_pods

    typical = workload_typical_pods(pods)
    renamed, order = prepare(nodes, pods, random.Random(seed), tune)
    cluster = Cluster(renamed, FragModel(typical).frag)
    capacity = MILLI * sum(nd.gpus for nd in renamed)
    arrived = used = placed = rescued = moved = 0
    rows: list[tuple[int, int, int, int]] = []
    started = time.perf_counter()
    for name, pod in order:
        shape: Shape = (
            pod.cpu_milli,
            pod.num_gpu,
            pod.gpu_milli if pod.num_gpu else 0,
            pod.gpu_spec if pod.num_gpu else (),
        )
        key = f"openb/{name}"
        arrived += pod.gpu_request_milli
        where = cluster.place(shape)
        if where is not None:
            cluster.bind(key, where[0], shape, where[1])
        elif defrag and pod.num_gpu:
            took = _defrag(cluster, key, shape, max_per_plan)
            if took is None:
                rows.append((arrived, used, 0, capacity - used))
                continue
            rescued += 1
            moved += took
        else:
            rows.append((arrived, used, 0, capacity - used))
            continue
        placed += 1
        used += pod.gpu_request_milli
        rows.append((arrived, used, 0, capacity - used))
    run = TraceRun(
        policy="fgd",
        seed=seed,
        total_gpus=capacity // MILLI,
        pods_total=len(order),
        pods_scheduled=placed,
        frag_weight=1,
        rows=rows,
    )
    if any(left < 0 for free in cluster.free.values() for left in free) or min(cluster.cpu.values()) < 0:
        raise AssertionError("a plan overcommitted a node")  # the planner's state and the cluster's disagreed
    alloc = discretize(run, "alloc")
    return {
        "seed": seed,
        "defrag": defrag,
        "alloc_pct_at_100": alloc.get(100),
        "alloc_pct_at_130": alloc.get(130),
        "pods_total": len(order),
        "pods_placed": placed,
        "pods_placed_by_plans": rescued,
        "migrations": moved,
        "migrations_per_pod_placed": round(moved / rescued, 2) if rescued else 0.0,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def measure(
    *,
    nodes: str | None,
    pods: str | None,
    trace: str,
    seeds: list[int],
    tune: float,
    max_per_plan: int,
    on_run: Callable[[DefragRun], None] | None = None,
) -> dict[str, str | int | float | list[int]]:
    """The median over ``seeds`` of the trace without and with defragmentation (``without_defrag.<figure>``,
    ``with_defrag.<figure>`` for each figure of :data:`MEDIANS`); ``on_run`` sees every run."""
    from allot_placement.openb import read_nodes, read_pods

    nodes_csv = Path(nodes) if nodes else TRACES / "openb_node_list_gpu_node.csv"
    pods_csv = Path(pods) if pods else TRACES / f"openb_pod_list_{trace}.csv"
    for path in (nodes_csv, pods_csv):
        if not path.exists():
            raise InputError(f"trace file not found: {path} (pass --nodes / --pods)")
    trace_nodes, trace_pods = read_nodes(nodes_csv), read_pods(pods_csv)
    result: dict[str, str | int | float | list[int]] = {
        "trace": pods_csv.stem,
        "seeds": seeds,
        "max_migrations_per_plan": max_per_plan,
    }
    for defrag in (False, True):
        runs = [
            run_one(trace_nodes, trace_pods, seed, defrag=defrag, tune=tune, max_per_plan=max_per_plan)
            for seed in seeds
        ]
        if on_run is not None:
            for r in runs:
                on_run(r)
        label = "with_defrag" if defrag else "without_defrag"
        for key in MEDIANS:
            result[f"{label}.{key}"] = statistics.median(float(r[key] or 0) for r in runs)
    return result
