"""Device allocators: the default allocator (RDMA, FPGA, fallback GPU), GPU partitions and topology-scoped GPUs.

Responsibility: choose concrete minors (and VFs) of one device type on one node for ``count`` instances of a
per-instance request, over a ``TypeView``. Results are ``[(minor, resources, vfs)]``; failures are a ``Reason``.

GPU strategy order (Koordinator's, with our decisions applied):
1. Partitions (whole-GPU requests only). The table is the Device's ``gpu-partitions`` annotation, or the built-in
   Hopper table for nvidia H100/H800/H20 nodes. Groups are tried **highest** ``allocationScore`` first (decision 2);
   ``Restricted`` uses only the best-scored group. Among feasible partitions the one that keeps the most larger
   partitions free wins (weights 8→10000, 4→100, 2→1); ties go to table order. A pod with ``gpu-partition-spec`` or
   a node whose policy is ``Honor`` must use a partition; otherwise a failure falls through.
2. Topology scopes Node → NUMA (by id) → PCIe (by id): the deepest scope that fits wins, then the one with more
   scopes already in use on its path (binpack by topology), then (shared GPUs) the better device score, then the
   first found. Whole GPUs take the lowest free minors of the scope. ``requiredTopologyScope`` forbids shallower
   scopes (``Device`` is satisfiable by a single GPU only).
3. The default allocator when GPUs lack topology or a shared request spans several GPUs (unless a scope is required).

Default allocator: devices ordered by (score desc, minor asc); with preferred PCIe switches (joint allocation) the
order is round-robin over the preferred switches first. A ``vfSelector`` takes the first free VF by busID from a
matching VF group. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import Device, Inventory, Partition
from allot_contracts.objects.selectors import LabelSelector, match_label_selector
from allot_placement import reasons as rs
from allot_placement.device_view import Scorer, TypeView, complete_gpu, fits
from allot_placement.reasons import Reason
from allot_placement.state import VF

__all__ = ["Alloc", "ScopeCache", "allocate_gpu", "default_allocate", "partition_table"]

Alloc = tuple[int, dict[str, int], tuple[VF, ...]]
Outcome = tuple[list[Alloc] | None, Reason | None]

_HOPPER: dict[int, tuple[Partition, ...]] = {
    1: tuple(Partition(minors=(i,), score=1) for i in range(8)),
    2: tuple(Partition(minors=(i, i + 1), score=1) for i in range(0, 8, 2)),
    4: (Partition(minors=(0, 1, 2, 3), score=1), Partition(minors=(4, 5, 6, 7), score=1)),
    8: (Partition(minors=tuple(range(8)), score=1),),
}
_BINPACK_WEIGHTS = ((8, 10000), (4, 100), (2, 1))


def _resources(view: TypeView, minor: int, per: Mapping[str, int]) -> dict[str, int]:
    return complete_gpu(per, view.total[minor]) if view.dtype == n.GPU else dict(sorted(per.items()))


def _pick_vf(dev: Device, selector: LabelSelector, used: frozenset[str]) -> VF | None:
    vfs = sorted(
        (bus, minor)
        for labels, group in dev.vf_groups
        if match_label_selector(selector, labels)
        for minor, bus in group
    )
    for bus, minor in vfs:
        if bus not in used:
            return VF(bus_id=bus, minor=minor)
    return None


def default_allocate(
    view: TypeView,
    per: Mapping[str, int],
    count: int,
    max_desired: int,
    preferred_pcie: frozenset[str] | None,
    vf_selector: LabelSelector | None,
    scorer: Scorer,
) -> list[Alloc] | None:
    scored = sorted(
        (-scorer.score(_resources(view, m, per), view.total[m], view.free[m]), m) for m in view.minors
    )
    order = [m for _, m in scored]
    if preferred_pcie:
        rank = {m: i for i, m in enumerate(order)}
        groups: dict[str, list[int]] = {}
        rest: list[int] = []
        for m in order:
            pcie = view.devices[m].pcie
            if pcie in preferred_pcie:
                groups.setdefault(pcie, []).append(m)
            else:
                rest.append(m)
        rr: list[int] = []
        depth = 0
        while True:
            layer = [g[depth] for _, g in sorted(groups.items()) if len(g) > depth]
            if not layer:
                break
            rr.extend(sorted(layer, key=rank.__getitem__))
            depth += 1
        order = rr + rest
    out: list[Alloc] = []
    for m in order:
        if not fits(per, view.free[m]):
            continue
        vfs: tuple[VF, ...] = ()
        if vf_selector is not None:
            vf = _pick_vf(view.devices[m], vf_selector, view.vf_used.get(m, frozenset()))
            if vf is None:
                continue
            vfs = (vf,)
        out.append((m, _resources(view, m, per), vfs))
        if len(out) >= max(max_desired, 1):
            break
    return out if len(out) >= count else None


def partition_table(
    inv: Inventory, node_labels: Mapping[str, str]
) -> tuple[dict[int, tuple[Partition, ...]] | None, bool]:
    """The GPU partition table of a node and whether the node honors it."""
    if inv.partitions is not None:
        return inv.partitions, inv.labels.get(n.LABEL_GPU_PARTITION_POLICY) == "Honor"
    vendor = node_labels.get(n.LABEL_GPU_VENDOR, inv.labels.get(n.LABEL_GPU_VENDOR, ""))
    model = node_labels.get(n.LABEL_GPU_MODEL, inv.labels.get(n.LABEL_GPU_MODEL, ""))
    if vendor in ("", "nvidia") and model in n.HOPPER_MODELS:
        return _HOPPER, node_labels.get(n.LABEL_GPU_PARTITION_POLICY) == "Honor"
    return None, False


def _by_partition(
    view: TypeView,
    table: dict[int, tuple[Partition, ...]],
    per: Mapping[str, int],
    count: int,
    restricted: bool,
    bandwidth: int | None,
) -> list[Alloc] | None:
    entries = table.get(count, ())
    scores = sorted({p.score for p in entries}, reverse=True)
    used = view.used_minors
    feasible: list[Partition] = []
    for s in scores:
        for p in entries:
            if p.score != s or any(m in used for m in p.minors) or any(m not in view.free for m in p.minors):
                continue
            if bandwidth is not None and (p.ring_bus_bandwidth is None or bandwidth > p.ring_bus_bandwidth):
                continue
            if not all(fits(per, view.free[m]) for m in p.minors):
                continue
            feasible.append(p)
        if feasible or restricted:
            break
    if not feasible:
        return None
    best, best_score = feasible[0], -1
    if len(feasible) > 1:
        for c in feasible:
            allocated = used | set(c.minors)
            score = 0
            for size, weight in _BINPACK_WEIGHTS:
                group = table.get(size, ())
                top = max((p.score for p in group), default=0)
                if size >= count:
                    score += sum(
                        weight * p.score
                        for p in group
                        if p.score == top and not any(m in allocated for m in p.minors)
                    )
            if score > best_score:
                best, best_score = c, score
    return [(m, _resources(view, m, per), ()) for m in best.minors]


Scopes = tuple[list[int], list[tuple[int, list[int], list[Any]]]]
ScopeCache = dict[bytes, Scopes]  # inventory content key -> its GPU scopes (the engine's memo)
_SCOPES_LIMIT = 8192


def _gpu_scopes(inv: Inventory, cache: ScopeCache | None) -> Scopes:
    """The node's GPUs as scopes (node → NUMA node → PCIe switch, minors sorted). ``cache`` (keyed by the
    inventory's content key, which covers the minors, NUMA nodes and PCIe switches read here) keeps them per
    inventory content; callers only read the lists."""
    got = cache.get(inv.content_key) if cache is not None else None
    if got is not None:
        return got
    gpus = inv.devices.get(n.GPU, ())
    tree: dict[int, dict[str, list[int]]] = {}
    for d in gpus:
        tree.setdefault(d.numa, {}).setdefault(d.pcie, []).append(d.minor)
    numa_scopes: list[tuple[int, list[int], list[Any]]] = []
    for numa in sorted(tree):
        pcies: list[tuple[int, list[int], list[Any]]] = [
            (3, sorted(tree[numa][p]), []) for p in sorted(tree[numa])
        ]
        numa_scopes.append((2, sorted(m for p in pcies for m in p[1]), pcies))
    got = (sorted(d.minor for d in gpus), numa_scopes)
    if cache is not None:
        if len(cache) >= _SCOPES_LIMIT:
            cache.clear()
        cache[inv.content_key] = got
    return got


def _by_topology(
    view: TypeView,
    inv: Inventory,
    per: Mapping[str, int],
    count: int,
    shared: bool,
    required: str,
    scorer: Scorer,
    scopes: ScopeCache | None,
) -> tuple[list[Alloc] | None, Reason | None, bool]:
    """Returns (allocations, failure, fall back to the default allocator)."""
    gpus = inv.devices.get(n.GPU, ())
    if not gpus or any(d.numa < 0 or not d.pcie for d in gpus):
        return (None, rs.GPU_TOPOLOGY_UNKNOWN, False) if required else (None, None, True)
    if shared and count > 1:
        return (None, rs.MULTI_SHARED, False) if required else (None, None, True)
    need = n.TOPOLOGY_SCOPES.get(required, 0)
    if need == 4:
        if count > 1:
            return None, rs.TOPOLOGY_SCOPED, False
        need = 3
    used = view.used_minors

    def leaf(minors: list[int], depth: int, cne: int) -> tuple[int, int, int, list[int]] | None:
        cands = [m for m in minors if m in view.free and fits(per, view.free[m])]
        if not shared:
            return (depth, cne, 0, cands[:count]) if len(cands) >= count else None
        best: tuple[int, int] | None = None
        for m in cands:
            s = scorer.score(_resources(view, m, per), view.total[m], view.free[m])
            if best is None or s > best[0]:
                best = (s, m)
        return (depth, cne, best[0], [best[1]]) if best is not None else None

    def better(r: tuple[int, int, int, list[int]], b: tuple[int, int, int, list[int]] | None) -> bool:
        if b is None or r[0] != b[0]:
            return b is None or r[0] > b[0]
        if r[1] != b[1]:
            return r[1] > b[1]
        return shared and r[2] > b[2]

    def scope(
        level: int, minors: list[int], children: list[tuple[int, list[int], list[Any]]], depth: int, cne: int
    ) -> tuple[int, int, int, list[int]] | None:
        if len(minors) < count:
            return None
        depth += 1
        if any(m in used for m in minors):
            cne += 1
        best = None
        for c_level, c_minors, c_children in children:
            r = scope(c_level, c_minors, c_children, depth, cne)
            if r is not None and better(r, best):
                best = r
        if best is not None:
            return best
        if need > level:
            return None
        return leaf(minors, depth, cne)

    all_minors, numa_scopes = _gpu_scopes(inv, scopes)
    result = scope(1, all_minors, numa_scopes, 0, 0)
    if result is None:
        return None, rs.TOPOLOGY_SCOPED if required else rs.TOPOLOGY_GPUS, False
    return [(m, _resources(view, m, per), ()) for m in sorted(result[3])], None, False


def allocate_gpu(
    view: TypeView,
    inv: Inventory,
    node_labels: Mapping[str, str],
    per: Mapping[str, int],
    count: int,
    shared: bool,
    required_scope: str,
    partition_policy: str | None,
    bandwidth: int | None,
    scorer: Scorer,
    scopes: ScopeCache | None = None,
) -> Outcome:
    """Allocate ``count`` GPUs; ``partition_policy`` is the pod's gpu-partition-spec policy (None = no spec);
    ``scopes``: the memo of GPU scopes per inventory content (None: computed here)."""
    if not shared:
        table, node_honors = partition_table(inv, node_labels)
        honor = partition_policy is not None or node_honors
        if table is None:
            if honor:
                return None, rs.MISSING_PARTITION_TABLE
        elif count not in table:
            if honor:
                return None, rs.UNSUPPORTED_GPU_COUNT
        else:
            got = _by_partition(view, table, per, count, partition_policy == "Restricted", bandwidth)
            if got is not None:
                return got, None
            if honor:
                return None, rs.INSUFFICIENT_PARTITIONED
    allocs, failure, fallback = _by_topology(view, inv, per, count, shared, required_scope, scorer, scopes)
    if not fallback:
        return allocs, failure
    got = default_allocate(view, per, count, count, None, None, scorer)
    return (got, None) if got is not None else (None, rs.insufficient_devices(n.GPU))
