"""Device placement on one node: every requested device type, joint GPU+RDMA, NUMA hints for devices.

Responsibility: ``allocate_devices`` runs the DeviceShare filter for one pod on one node — isolation-provider and
GPU-sharing checks, per-type candidate views (hint selector, exclusive policy, NUMA affinity), the joint allocation
(``SamePCIe``: secondaries on exactly the primary's PCIe switches) and the independent per-type allocations — and
returns the chosen devices or the reason the node cannot host the pod. ``device_score`` is the DeviceShare node score;
``device_hints`` feeds the topology manager.

Every requested type is allocated at placement time, secondaries included (decision 11: a placement is never
partial). A GPU-sharing pod whose ``koordinator.sh/gpu-isolation-provider`` label differs from the node's gets an
ordinary unschedulable reason (decision 6). Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import Final

from allot_contracts.objects import names as n
from allot_placement import reasons as rs
from allot_placement.allocators import Alloc, ScopeCache, allocate_gpu, default_allocate
from allot_placement.config import PlacementConfig
from allot_placement.device_view import Scorer, TypeView, complete_gpu, gpu_allowed, gpu_model, make_view
from allot_placement.pod import PodSpec
from allot_placement.reasons import Reason
from allot_placement.state import DeviceAlloc, NodeState

__all__ = [
    "DeviceMemo",
    "DeviceResult",
    "GpuChooser",
    "ViewCache",
    "allocate_devices",
    "device_hints",
    "device_score",
    "numa_subsets",
]

DeviceResult = dict[str, list[Alloc]]
# A policy's choice of GPU for a single shared-GPU request: (view, per-GPU request) -> minor or None (no choice).
GpuChooser = Callable[[TypeView, dict[str, int]], int | None]


def _alloc_type(
    cfg: PlacementConfig,
    state: NodeState,
    pod: PodSpec,
    view: TypeView,
    count: int,
    preferred: frozenset[str] | None,
    max_desired: int,
    scorer: Scorer,
    chooser: GpuChooser | None,
    scopes: ScopeCache | None,
) -> tuple[list[Alloc] | None, Reason | None]:
    req = pod.devices[view.dtype]
    hint = pod.hints.get(view.dtype)
    if view.dtype == n.GPU:
        assert state.inventory is not None and state.info is not None
        if chooser is not None and req.shared and count == 1 and not (hint and hint.required_scope):
            minor = chooser(view, req.per_instance)
            if minor is None:
                return None, rs.insufficient_devices(n.GPU)
            return [(minor, complete_gpu(req.per_instance, view.total[minor]), ())], None
        return allocate_gpu(
            view,
            state.inventory,
            state.info.labels,
            req.per_instance,
            count,
            req.shared,
            hint.required_scope if hint else "",
            pod.partition.allocate_policy if pod.partition else None,
            pod.partition.ring_bus_bandwidth if pod.partition else None,
            scorer,
            scopes,
        )
    got = default_allocate(
        view, req.per_instance, count, max_desired, preferred, hint.vf_selector if hint else None, scorer
    )
    return (got, None) if got is not None else (None, rs.insufficient_devices(view.dtype))


# HAMi's pod-level scheduler policies (``hami.io/node-scheduler-policy``, ``hami.io/gpu-scheduler-policy``) as
# the scoring strategies they mean.
HAMI_POLICIES: Final = {"binpack": "MostAllocated", "spread": "LeastAllocated"}
ViewCache = dict[tuple[int, str, object, frozenset[int] | None, object], TypeView]
# (device signature, pod's device key) -> (allocations, failure, DeviceShare score, raw result)
DeviceCache = dict[
    tuple[int, bytes], tuple[dict[str, tuple[DeviceAlloc, ...]] | None, Reason | None, int, DeviceResult]
]


class DeviceMemo:
    """The engine's device-side memo tables. ``results`` and ``views`` are keyed by a device signature that must
    identify everything the device filter reads on the node (inventory content and usage, the resource labels, and
    the device ids when the pod's filters read them); ``scopes`` by the inventory's content key. They never change
    a result."""

    __slots__ = ("results", "scopes", "views")

    def __init__(self) -> None:
        self.results: DeviceCache = {}
        self.views: ViewCache = {}
        self.scopes: ScopeCache = {}

    def clear(self) -> None:
        self.results.clear()
        self.views.clear()
        self.scopes.clear()


def _views(
    cfg: PlacementConfig,
    state: NodeState,
    pod: PodSpec,
    numa_mask: frozenset[int] | None,
    view_cache: ViewCache | None = None,
    dev_sig: int = 0,
) -> tuple[dict[str, TypeView], dict[str, int], Reason | None]:
    inv, info = state.inventory, state.info
    views: dict[str, TypeView] = {}
    counts: dict[str, int] = {}
    gpu = pod.devices.get(n.GPU)
    labels = info.labels if info is not None else {}
    if gpu is not None and gpu.shared:
        if (
            pod.isolation_provider
            and labels.get(n.LABEL_GPU_ISOLATION_PROVIDER, "") != pod.isolation_provider
        ):
            return views, counts, rs.isolation_provider(pod.isolation_provider)
        if inv is not None and cfg.gpu_share_unsupported_models:
            vendor = labels.get(n.LABEL_GPU_VENDOR, inv.labels.get(n.LABEL_GPU_VENDOR, ""))
            model = labels.get(n.LABEL_GPU_MODEL, inv.labels.get(n.LABEL_GPU_MODEL, ""))
            if (vendor, model) in cfg.gpu_share_unsupported_models or (
                "",
                model,
            ) in cfg.gpu_share_unsupported_models:
                return views, counts, rs.gpu_share_unsupported(vendor, model)
    for dtype in n.DEVICE_TYPES:
        req = pod.devices.get(dtype)
        if req is None:
            continue
        if inv is None or not inv.devices.get(dtype):
            return views, counts, rs.insufficient_devices(dtype)
        hint = pod.hints.get(dtype)
        if (
            hint is not None
            and hint.vf_selector is not None
            and not any(d.vf_groups for d in inv.devices[dtype])
        ):
            return views, counts, rs.insufficient_vfs(dtype)
        gpu_filter = pod.gpu_filter if dtype == n.GPU else None
        if gpu_filter is not None and not any(
            gpu_allowed(gpu_filter, d, gpu_model(d, inv, labels)) for d in inv.devices[dtype]
        ):
            return views, counts, rs.GPU_FILTER
        vkey = (dev_sig, dtype, hint, numa_mask, gpu_filter)
        view = view_cache.get(vkey) if view_cache is not None else None
        if view is None:
            view = make_view(
                inv,
                dtype,
                state.dev_used.get(dtype, {}),
                state.vf_used.get(dtype, {}),
                hint,
                numa_mask,
                gpu_filter,
                labels,
            )
            if view_cache is not None:
                view_cache[vkey] = view
        count = req.count or len(view.minors)
        if count == 0:
            return views, counts, rs.insufficient_devices(dtype)
        views[dtype], counts[dtype] = view, count
    return views, counts, None


def allocate_devices(
    cfg: PlacementConfig,
    state: NodeState,
    pod: PodSpec,
    numa_mask: frozenset[int] | None = None,
    chooser: GpuChooser | None = None,
    memo: DeviceMemo | None = None,
    dev_sig: int = 0,
) -> tuple[DeviceResult | None, Reason | None, dict[str, TypeView]]:
    """Choose devices for every requested type, or say why this node cannot host them.

    ``memo`` (its views keyed by ``dev_sig``, see ``DeviceMemo``) keeps candidate views and GPU scopes; it never
    changes the result.
    """
    if not pod.devices:
        return {}, None, {}
    views, counts, why = _views(cfg, state, pod, numa_mask, memo.views if memo is not None else None, dev_sig)
    scopes = memo.scopes if memo is not None else None
    if why is not None:
        return None, why, views
    scorer = Scorer(HAMI_POLICIES.get(pod.gpu_policy, cfg.device.strategy), cfg.device.resources)
    result: DeviceResult = {}
    joint = pod.joint
    if joint is not None:
        primary = joint.device_types[0]
        got, why = _alloc_type(
            cfg, state, pod, views[primary], counts[primary], None, counts[primary], scorer, chooser, scopes
        )
        if got is None:
            return None, why, views
        result[primary] = got
        pcies = frozenset(views[primary].devices[m].pcie for m, _, _ in got)
        for sec in joint.device_types[1:]:
            cnt = counts[sec]
            if joint.required_scope == "SamePCIe" and cnt < len(pcies):
                cnt = len(pcies)
            got2, why = _alloc_type(
                cfg, state, pod, views[sec], cnt, pcies, max(cnt, len(pcies)), scorer, chooser, scopes
            )
            if got2 is None:
                return None, why, views
            if joint.required_scope == "SamePCIe" and {views[sec].devices[m].pcie for m, _, _ in got2} != set(
                pcies
            ):
                return None, rs.JOINT_VIOLATION, views
            result[sec] = got2
    for dtype in n.DEVICE_TYPES:
        if dtype in views and dtype not in result:
            got, why = _alloc_type(
                cfg, state, pod, views[dtype], counts[dtype], None, counts[dtype], scorer, chooser, scopes
            )
            if got is None:
                return None, why, views
            result[dtype] = got
    return result, None, views


def device_score(
    cfg: PlacementConfig, views: dict[str, TypeView], result: DeviceResult, strategy: str = ""
) -> int:
    """DeviceShare node score: the device scorer over each type's summed capacity, averaged over types (0–100).
    ``strategy`` overrides the configured one (a pod's HAMi node scheduler policy)."""
    if not result:
        return 0
    scorer = Scorer(strategy or cfg.device.strategy, cfg.device.resources)
    total_score = 0
    for dtype, allocs in result.items():
        view = views[dtype]
        total: dict[str, int] = {}
        free: dict[str, int] = {}
        for m in view.minors:
            for k, v in view.total[m].items():
                total[k] = total.get(k, 0) + v
            for k, v in view.free[m].items():
                free[k] = free.get(k, 0) + v
        req: dict[str, int] = {}
        for _, res, _ in allocs:
            for k, v in res.items():
                req[k] = req.get(k, 0) + v
        total_score += scorer.score(req, total, free)
    return total_score // len(result)


def numa_subsets(numa_ids: tuple[int, ...]) -> list[frozenset[int]]:
    """Every non-empty subset of NUMA nodes, by size then lexicographically (the hint enumeration order)."""
    return [frozenset(c) for size in range(1, len(numa_ids) + 1) for c in combinations(numa_ids, size)]


def device_hints(
    cfg: PlacementConfig, state: NodeState, pod: PodSpec, numa_ids: tuple[int, ...]
) -> tuple[dict[str, list[tuple[frozenset[int], bool, int]]], Reason | None]:
    """Topology-manager hints per device type: ``[(mask, preferred, score)]`` for every feasible NUMA subset."""
    if not pod.devices:
        return {}, None
    unrestricted, why, _ = allocate_devices(cfg, state, pod, None)
    if unrestricted is None:
        return {}, why
    all_gpu = sorted(m for m, _, _ in unrestricted.get(n.GPU, []))
    feasible: list[tuple[frozenset[int], bool]] = []
    for mask in numa_subsets(numa_ids):
        got, _, _ = allocate_devices(cfg, state, pod, mask)
        if got is not None:
            feasible.append((mask, sorted(m for m, _, _ in got.get(n.GPU, [])) == all_gpu))
    if not feasible:
        return {}, why or rs.UNALIGNED_NUMA
    smallest = min(len(m) for m, _ in feasible)
    hints = [(m, len(m) == smallest, 500 if same else 0) for m, same in feasible]
    return {dtype: list(hints) for dtype in pod.devices}, None
