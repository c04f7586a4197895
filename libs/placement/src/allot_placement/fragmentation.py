"""GPU fragmentation against a typical-pod distribution (Weng et al., USENIX ATC '23), in exact integers.

Definitions (the paper's, as its simulator computes them). A node offers ``cpu_left`` and per-GPU leftovers
``lefts`` (milli-GPU, 1000 = a whole GPU). For each typical pod shape ``t`` (cpu, GPU count ``n``, milli per GPU ``m``,
allowed GPU models) with popularity weight ``w_t``:

- CPU-only shape, or a model the node does not have: every idle GPU-milli of the node is a fragment for ``t``;
- the node can host ``t`` (at least ``n`` GPUs with ``left >= m`` and ``cpu_left >= cpu``): only the GPUs whose
  leftover is smaller than ``m`` are fragments (``sum(left for left < m)``);
- otherwise (lacks GPU or CPU): every idle GPU-milli is a fragment.

``F(node) = sum_t w_t * frag_t(node)`` (``frag_int``; the paper's value is ``frag_int / W`` with
``W = sum_t w_t``). Cluster fragmentation is the sum over nodes; the fragmentation ratio divides by idle GPU-milli.

FGD scores a placement by the fall in ``F``: ``score = int(100 * sigmoid((F_before - F_after) / W / 1000))``. To be
exact and identical on every platform the score is computed with integer thresholds derived once with ``decimal``:
``score >= k  <=>  (F_before - F_after) >= ceil(1000 * W * ln(k / (100 - k)))``.

``typical_pods`` builds the distribution from a workload the paper's way: shapes ordered by count (ties by shape),
kept until they cover 95 % of the pods, weights = counts. Pure; no floats in any decision.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from decimal import ROUND_CEILING, Decimal, localcontext

from allot_contracts.objects.pod import Pod
from allot_placement.config import TypicalPod

__all__ = ["MILLI", "FragModel", "lefts_after", "sigmoid_thresholds", "typical_pods"]

MILLI = 1000


def typical_pods(
    shapes: Iterable[tuple[int, int, int, tuple[str, ...]]], threshold_pct: int = 95
) -> tuple[TypicalPod, ...]:
    """The most popular ``(cpu_milli, gpu_count, gpu_milli, models)`` shapes covering ``threshold_pct`` % of pods."""
    counts: dict[tuple[int, int, int, tuple[str, ...]], int] = {}
    for s in shapes:
        key = (s[0], s[1], s[2] if s[1] else 0, tuple(sorted(s[3])) if s[1] else ())
        counts[key] = counts.get(key, 0) + 1
    total = sum(counts.values())
    out: list[TypicalPod] = []
    covered = 0
    for key, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if covered * 100 >= threshold_pct * total:
            break
        out.append(
            TypicalPod(cpu_milli=key[0], gpu_count=key[1], gpu_milli=key[2], gpu_models=key[3], weight=c)
        )
        covered += c
    return tuple(out)


def sigmoid_thresholds(total_weight: int) -> list[int]:
    """``T_k = ceil(1000 * W * ln(k / (100 - k)))`` for k = 1..99 (ascending)."""
    out = []
    with localcontext() as ctx:
        ctx.prec = 60
        for k in range(1, 100):
            t = Decimal(1000 * total_weight) * (Decimal(k) / Decimal(100 - k)).ln()
            out.append(int(t.to_integral_value(rounding=ROUND_CEILING)))
    return out


class FragModel:
    """Fragmentation of one node against a fixed typical-pod distribution (precomputed groups)."""

    __slots__ = ("cpu_only_weight", "groups", "thresholds", "total_weight")

    def __init__(self, pods: Sequence[TypicalPod]) -> None:
        self.total_weight = sum(p.weight for p in pods)
        self.cpu_only_weight = sum(p.weight for p in pods if p.gpu_count == 0)
        grouped: dict[tuple[int, int, tuple[str, ...]], list[tuple[int, int]]] = {}
        for p in pods:
            if p.gpu_count:
                grouped.setdefault((p.gpu_count, p.gpu_milli, p.gpu_models), []).append(
                    (p.cpu_milli, p.weight)
                )
        # (count, milli, models, sorted cpus, prefix weights, group weight)
        self.groups: list[tuple[int, int, frozenset[str], list[int], list[int], int]] = []
        for (count, milli, models), items in sorted(grouped.items()):
            items.sort()
            prefix, acc = [], 0
            for _, w in items:
                acc += w
                prefix.append(acc)
            self.groups.append((count, milli, frozenset(models), [c for c, _ in items], prefix, acc))
        self.thresholds = sigmoid_thresholds(self.total_weight) if self.total_weight else [0] * 99

    def frag(self, model: str, cpu_left: int, lefts: Sequence[int]) -> int:
        """``F`` of a node (integer, weight × milli-GPU)."""
        g_left = sum(lefts)
        if g_left == 0:
            return 0
        f = self.total_weight * g_left
        for count, milli, models, cpus, prefix, _ in self.groups:
            if models and model not in models:
                continue
            fits = 0
            small = 0
            for left in lefts:
                if left >= milli:
                    fits += 1
                else:
                    small += left
            if fits < count:
                continue
            i = bisect_right(cpus, cpu_left)
            if i:
                f -= prefix[i - 1] * (g_left - small)
        return f

    def score(self, delta: int) -> int:
        """``int(100 * sigmoid(delta / W / 1000))`` exactly, for an integer fall ``delta`` of ``F``."""
        return bisect_right(self.thresholds, delta)


def lefts_after(lefts: Sequence[int], take: Iterable[tuple[int, int]]) -> tuple[int, ...]:
    """``lefts`` with ``(index, milli)`` taken."""
    out = list(lefts)
    for i, m in take:
        out[i] -= m
    return tuple(out)


def pod_shape(pod: Pod) -> tuple[int, int, int, tuple[str, ...]]:
    """A pod's shape for the typical-pod distribution: ``(cpu_milli, gpu_count, gpu_milli_per_gpu, gpu_models)``,
    the models being the ``In`` values of a required node-affinity term on the GPU-model label."""
    from allot_contracts.objects import names as n

    gpu = pod.devices.get(n.GPU)
    count, milli = 0, 0
    if gpu is not None:
        per = gpu.per_instance
        count, milli = gpu.count, per.get(n.GPU_MEMORY_RATIO, per.get(n.GPU_CORE, 100)) * 10
    models: list[str] = []
    for expressions, _fields in pod.affinity or ():
        for key, op, values in expressions:
            if key == n.LABEL_GPU_MODEL and op == "In":
                models += list(values)
    return pod.requests.get(n.CPU, 0), count, milli, tuple(sorted(set(models)))
