"""``allot bench quota``: cost of one pod request change in a 1,000-quota, 4-level elastic-quota tree.

What is measured (wall time, ``time.perf_counter_ns``, one process, after a warm-up):

- ``incremental``: one pod request change through the engine API (``add_pending`` of a new pod, or
  ``remove_pod`` of an earlier one, in a random leaf). Each call parses the pod, propagates the request delta up
  the tree, brings the leaf's runtime up to date (the calculators on the path root → leaf, recomputed only if
  stale) and returns its record. This is what the quota-manager pays per pod event.
- ``propagate`` / ``recompute_path``: the same change on the core alone, split into the request propagation and
  the path recompute (``calculators_recomputed_per_change`` counts the calculators that actually ran).
- ``incremental_all``: an API change plus bringing *every* runtime up to date (only stale calculators recompute).
- ``full_recompute``: every calculator recomputed from scratch (the baseline for the ratio).

The tree: 4 top-level quotas, 6 children each, 6 grandchildren each, and the remaining quotas as leaves spread
evenly under the third level (1,000 quotas in all), three dimensions (cpu, memory, nvidia.com/gpu), two pending
pods per leaf so requests exceed the cluster and calculators must share surplus. Seeded, so runs are comparable.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # the engine is imported by the functions that run the benchmark
    from allot_contracts.objects.pod import Pod
    from allot_contracts.objects.quota import QuotaSpec
    from allot_quota import QuotaEngine
    from allot_quota.tree import PodEntry

LEVELS = 4


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def build_tree(quotas: int, seed: int) -> tuple[QuotaEngine, list[str]]:
    from allot_quota import QuotaEngine
    from allot_quota.testing import a_node, a_pod, a_quota

    rng = random.Random(seed)
    engine = QuotaEngine()
    engine.set_nodes([a_node(f"n{i:03d}", cpu=64, memory="256Gi", gpu=8) for i in range(40)])
    full: dict[str, str | int] = {"cpu": 2560, "memory": "10Ti", "nvidia.com/gpu": 320}
    level1 = [f"l1-{i}" for i in range(4)]
    level2 = [f"l2-{i:02d}" for i in range(24)]
    level3 = [f"l3-{i:03d}" for i in range(144)]
    n_leaves = max(1, quotas - len(level1) - len(level2) - len(level3))
    specs: list[QuotaSpec] = []
    for name in level1:
        specs.append(
            a_quota(name, min={"cpu": 500, "memory": "2Ti", "nvidia.com/gpu": 60}, max=full, is_parent=True)
        )
    inner = (  # each inner level: its quotas, their parents (six children each), each one's min
        (level2, level1, {"cpu": 80, "memory": "320Gi", "nvidia.com/gpu": 10}),
        (level3, level2, {"cpu": 12, "memory": "48Gi", "nvidia.com/gpu": 1}),
    )
    for names, parents, minimum in inner:
        for i, name in enumerate(names):
            specs.append(a_quota(name, min=minimum, max=full, parent=parents[i // 6], is_parent=True))
    leaves = [f"l4-{i:03d}" for i in range(n_leaves)]
    for i, name in enumerate(leaves):
        specs.append(
            a_quota(
                name,
                min={"cpu": 2, "memory": "8Gi", "nvidia.com/gpu": 0},
                max={"cpu": 64, "memory": "256Gi", "nvidia.com/gpu": 8},
                parent=level3[i % len(level3)],
                shared_weight={
                    "cpu": rng.randint(1, 4),
                    "memory": "1Gi",
                    "nvidia.com/gpu": rng.randint(1, 2),
                },
            )
        )
    for spec in specs:
        errors = engine.apply_quota(spec)
        if errors:
            raise RuntimeError(f"benchmark tree refused: {errors[0]}")
    for name in leaves:
        for j in range(2):
            engine.add_pending(
                a_pod(
                    f"{name}-seed-{j}",
                    quota=name,
                    cpu=rng.randint(1, 8),
                    memory=f"{rng.randint(1, 32)}Gi",
                    gpu=rng.randint(0, 1),
                )
            )
    return engine, leaves


class Report(TypedDict):
    """What ``allot bench quota`` prints (milliseconds)."""

    benchmark: str
    quotas: int
    levels: int
    calculators: int
    changes: int
    seed: int
    incremental_ms_p50: float
    incremental_ms_p99: float
    propagate_ms_p50: float
    recompute_path_ms_p50: float
    recompute_path_ms_p99: float
    calculators_recomputed_per_change: float
    incremental_all_ms_p50: float
    incremental_all_ms_p99: float
    full_recompute_ms: float
    full_over_incremental: float | None
    goal_ms: float
    goal_met: bool


def run(quotas: int, changes: int, seed: int) -> Report:
    from allot_quota.model import pod_info
    from allot_quota.testing import a_pod
    from allot_quota.tree import PodEntry

    engine, leaves = build_tree(quotas, seed)
    h = engine.hierarchy
    rng = random.Random(seed + 1)
    engine.snapshot()  # everything fresh before measuring
    live: list[Pod] = []

    def one_change(i: int) -> None:
        """Through the engine API (the pod read at the door first, as the services receive it): propagate,
        refresh the leaf's runtime path, build the record."""
        if live and rng.random() < 0.5:
            engine.remove_pod(live.pop(rng.randrange(len(live))))
            return
        pod = a_pod(
            f"bench-{i}",
            quota=rng.choice(leaves),
            cpu=rng.randint(1, 16),
            memory=f"{rng.randint(1, 64)}Gi",
            gpu=rng.randint(0, 2),
        )
        live.append(pod)
        engine.add_pending(pod)

    for i in range(200):  # warm-up
        one_change(-i - 1)
    incremental = []
    for i in range(changes):
        t0 = time.perf_counter_ns()
        one_change(i)
        incremental.append((time.perf_counter_ns() - t0) / 1e6)

    # The core alone: request propagation, then the path recompute, timed separately.
    entries: list[PodEntry] = []
    propagate, path_only = [], []
    recomputed_before = h.recomputed
    for i in range(changes):
        if entries and rng.random() < 0.5:
            entry = entries.pop(rng.randrange(len(entries)))
            t0 = time.perf_counter_ns()
            h.remove_pod(entry)
        else:
            leaf = rng.choice(leaves)
            info = pod_info(a_pod(f"core-{i}", quota=leaf, cpu=rng.randint(1, 16), gpu=rng.randint(0, 2)))
            entry = PodEntry(info=info, quota=leaf, masked={}, assigned=False, seq=i)
            entries.append(entry)
            t0 = time.perf_counter_ns()
            h.add_pod(entry)
        t1 = time.perf_counter_ns()
        h.runtime(entry.quota)
        t2 = time.perf_counter_ns()
        propagate.append((t1 - t0) / 1e6)
        path_only.append((t2 - t1) / 1e6)
    per_change = (h.recomputed - recomputed_before) / max(1, changes)

    everything = []
    for i in range(max(50, changes // 10)):
        t0 = time.perf_counter_ns()
        one_change(changes + i)
        h.refresh_all()
        everything.append((time.perf_counter_ns() - t0) / 1e6)
    full = []
    for _ in range(20):
        h.invalidate()
        t0 = time.perf_counter_ns()
        h.refresh_all()
        full.append((time.perf_counter_ns() - t0) / 1e6)
    p50 = statistics.median(incremental)
    full_ms = statistics.median(full)
    return {
        "benchmark": "quota",
        "quotas": len(h.nodes) - 3,  # without the built-in root, system and default quotas
        "levels": LEVELS,
        "calculators": sum(1 for n in h.nodes.values() if n.children),
        "changes": changes,
        "seed": seed,
        "incremental_ms_p50": round(p50, 4),
        "incremental_ms_p99": round(_percentile(incremental, 0.99), 4),
        "propagate_ms_p50": round(statistics.median(propagate), 4),
        "recompute_path_ms_p50": round(statistics.median(path_only), 4),
        "recompute_path_ms_p99": round(_percentile(path_only, 0.99), 4),
        "calculators_recomputed_per_change": round(per_change, 2),
        "incremental_all_ms_p50": round(statistics.median(everything), 4),
        "incremental_all_ms_p99": round(_percentile(everything, 0.99), 4),
        "full_recompute_ms": round(full_ms, 4),
        "full_over_incremental": round(full_ms / p50, 1) if p50 else None,
        "goal_ms": 5.0,
        "goal_met": _percentile(incremental, 0.99) <= 5.0,
    }
