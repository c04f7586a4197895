"""Domain metrics: what the projections know about the cluster, as Prometheus families computed at scrape time.

Each function here reads an engine (never changes it) and returns metric families; the services register them
through :class:`allot_runtime.metrics.ProjectionCollector` with a small adapter naming the engine inside their
processor. The catalogue (names, labels, units) is docs/observability.md; a test asserts every name.

- GPUs per node (device-allocator's placement engine): whole GPUs, GPU cores (``koordinator.sh/gpu-core``, in GPUs:
  1 = one GPU's cores) and GPU memory, allocatable and allocated, labelled ``node``, ``model`` and ``pool`` (the
  node's ``allot.dev/pool`` label, empty when unset); and per GPU (``node``, ``index``, ``model``, ``uuid``): the share
  of its cores allocated (0–1), its memory allocated and in all, its health.
- Fragmentation (the FGD measure, Weng et al. ATC '23, ``allot_placement.fragmentation``) per GPU model and for the
  cluster, against the configured typical pods, or, when none are configured, against the distribution of the pods
  the service knows (the paper's construction).
- Quotas (quota-manager's hierarchy): min (0 when unset), max, runtime, used, request and borrowed per quota and
  resource, labelled with the unit of the value (:func:`unit_of`: cores for cpu, bytes, percent, counts). Runtime is computed on a shallow copy of the hierarchy, so a scrape never
  refreshes the engine's own calculators.
- Pending pods by reason code, from whichever service holds them back.
"""

from __future__ import annotations

import copy
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from allot_contracts.objects import names as n
from allot_contracts.objects.pod import Pod
from allot_contracts.quantity import is_milli_resource
from allot_placement import PlacementEngine
from allot_placement.config import TypicalPod
from allot_placement.fragmentation import MILLI, FragModel, pod_shape, typical_pods
from allot_placement.policies import node_gpu_state
from allot_quota.tree import Hierarchy

__all__ = [
    "FRAGMENTATION_FAMILIES",
    "GPU_FAMILIES",
    "PER_GPU_FAMILIES",
    "PENDING_FAMILIES",
    "POOL_LABEL",
    "QUOTA_FAMILIES",
    "fragmentation_families",
    "gpu_families",
    "pending_families",
    "quota_families",
]

POOL_LABEL = "allot.dev/pool"

GPU_FAMILIES = (
    ("allot_node_gpus_allocatable", "Healthy GPUs of the node"),
    ("allot_node_gpus_allocated", "GPUs of the node holding at least one allocation (whole or shared)"),
    ("allot_node_gpus_shared", "GPUs of the node partly allocated (shared by pods, some share left)"),
    (
        "allot_node_gpu_cores_allocatable_gpus",
        "GPU cores of the node (koordinator.sh/gpu-core), in GPUs: 1 = one GPU's cores",
    ),
    (
        "allot_node_gpu_cores_allocated_gpus",
        "GPU cores allocated on the node (koordinator.sh/gpu-core), in GPUs: 0.5 = half a GPU's cores",
    ),
    ("allot_node_gpu_memory_allocatable_bytes", "GPU memory of the node"),
    ("allot_node_gpu_memory_allocated_bytes", "GPU memory allocated on the node"),
)
# One series per GPU, labelled node, index (the device minor), model and uuid (the Device's id).
PER_GPU_FAMILIES = (
    (
        "allot_gpu_core_allocated_ratio",
        "Share of the GPU's cores (koordinator.sh/gpu-core) allocated, 0 to 1",
    ),
    ("allot_gpu_memory_allocated_bytes", "GPU memory allocated on the GPU"),
    ("allot_gpu_memory_capacity_bytes", "GPU memory of the GPU"),
    ("allot_gpu_healthy", "1 when the GPU is reported healthy, else 0 (an unhealthy GPU is not allocated)"),
)
FRAGMENTATION_FAMILIES = (
    ("allot_gpu_idle_gpus", "Idle GPU capacity by GPU model, in GPUs"),
    ("allot_gpu_fragmented_gpus", "Idle GPU capacity the typical pods cannot use (FGD measure), in GPUs"),
    ("allot_gpu_fragmentation_ratio", "Fragmented / idle GPU capacity by GPU model (0 when none idle)"),
    ("allot_cluster_gpu_fragmentation_ratio", "Fragmented / idle GPU capacity of the cluster"),
    ("allot_gpu_typical_pods", "Typical pod shapes the fragmentation is measured against"),
)
_IN_UNIT = "by resource, in the unit label's unit"  # the quota families' values: see unit_of
QUOTA_FAMILIES = (
    ("allot_quota_min", f"Quota min (guaranteed) {_IN_UNIT} (0 when unset)"),
    ("allot_quota_max", f"Quota max {_IN_UNIT} (no sample when unlimited)"),
    ("allot_quota_runtime", f"Quota runtime (what the quota may use now) {_IN_UNIT}"),
    ("allot_quota_used", f"Quota used (admitted pods, children included) {_IN_UNIT}"),
    ("allot_quota_request", f"Quota request (pending and admitted pods) {_IN_UNIT}"),
    (
        "allot_quota_borrowed",
        f"Quota used above its min (lent by others) {_IN_UNIT}; leaf and inner quotas of a tree only",
    ),
    ("allot_quota_pods", "Pods charged to or waiting in the quota"),
)
PENDING_FAMILIES = (
    ("allot_pending_pods", "Pods held back by this service, by reason code (a pod counts under each)"),
    ("allot_held_pods", "Pods held back by this service (each counted once)"),
)


def _gauge(spec: tuple[str, str], labels: list[str]) -> GaugeMetricFamily:
    name, text = spec
    return GaugeMetricFamily(name, text, labels=labels)


# -- GPUs ---------------------------------------------------------------------------------------------------------


def _node_labels(state: Any) -> tuple[str, str]:
    info, inv = state.info, state.inventory
    labels = info.labels if info is not None else {}
    model = labels.get(n.LABEL_GPU_MODEL) or (
        inv.labels.get(n.LABEL_GPU_MODEL, "") if inv is not None else ""
    )
    return str(model), str(labels.get(POOL_LABEL, ""))


NodeCache = dict[str, tuple[int, Any]]  # node -> (state version, figures computed at that version)


def _cached(cache: NodeCache | None, name: str, version: int, compute: Any) -> Any:
    """A node's figures change only when its state does (every mutation gives it a new version)."""
    if cache is None:
        return compute()
    got = cache.get(name)
    if got is None or got[0] != version:
        got = cache[name] = (version, compute())
    return got[1]


def _node_figures(
    engine: PlacementEngine, cache: NodeCache | None, figures: Callable[[Any], Any]
) -> Iterator[tuple[str, Any]]:
    """Each node's name and ``figures(state)`` (through ``cache``), for the nodes where they are not None; when
    done, the cache forgets the nodes gone from the engine."""
    live = set()
    for name in engine.node_names():
        state = engine.node_state(name)
        if state is None:
            continue
        live.add(name)
        found = _cached(cache, name, state.version, lambda state=state: figures(state))
        if found is not None:
            yield name, found
    if cache is not None and len(cache) > len(live):
        for gone in set(cache) - live:
            del cache[gone]


GpuFigures = tuple[str, str, tuple[float, ...], tuple[tuple[tuple[str, ...], tuple[float, ...]], ...]]


def _per_gpu(d: Any, used: Mapping[str, int], model: str) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """One GPU's labels (index, model, uuid) and its figures (core ratio, memory allocated and of the GPU, health)."""
    core = d.resources.get(n.GPU_CORE, 0)
    ratio = used.get(n.GPU_CORE, 0) / core if core else 0.0
    labels = (str(d.minor), str(d.labels.get(n.LABEL_GPU_MODEL, model)), d.id)
    return labels, (ratio, used.get(n.GPU_MEMORY, 0), d.resources.get(n.GPU_MEMORY, 0), 1 if d.healthy else 0)


def _gpu_figures(state: Any) -> GpuFigures | None:
    gpus = state.inventory.devices.get(n.GPU, ()) if state.inventory is not None else ()
    if not gpus:
        return None
    model, pool = _node_labels(state)
    used = state.dev_used.get(n.GPU, {})
    healthy = allocated = shared = 0
    shares = shares_used = memory = memory_used = 0
    per_gpu = tuple(_per_gpu(d, used.get(d.minor, {}), model) for d in sorted(gpus, key=lambda d: d.minor))
    for d in gpus:
        if d.healthy and d.resources:
            healthy += 1
        u = used.get(d.minor, {})
        core, core_used = d.resources.get(n.GPU_CORE, 0), u.get(n.GPU_CORE, 0)
        if u:
            allocated += 1
            if 0 < core_used < core:
                shared += 1
        shares += core
        shares_used += core_used
        memory += d.resources.get(n.GPU_MEMORY, 0)
        memory_used += u.get(n.GPU_MEMORY, 0)
    cores = (shares / 100, shares_used / 100)  # gpu-core percent in GPUs
    return model, pool, (healthy, allocated, shared, *cores, memory, memory_used), per_gpu


def gpu_families(engine: PlacementEngine, cache: NodeCache | None = None) -> list[GaugeMetricFamily]:
    """Per node with GPUs: allocatable and allocated GPUs, cores and memory; then per GPU: its cores and memory
    allocated, its memory and its health."""
    labels = ["node", "model", "pool"]
    fams = [_gauge(spec, labels) for spec in GPU_FAMILIES]
    gpu_fams = [_gauge(spec, ["node", "index", "model", "uuid"]) for spec in PER_GPU_FAMILIES]
    for name, (model, pool, values, per_gpu) in _node_figures(engine, cache, _gpu_figures):
        for fam, value in zip(fams, values, strict=True):
            fam.add_metric([name, model, pool], value)
        for gpu_labels, gpu_values in per_gpu:
            for fam, value in zip(gpu_fams, gpu_values, strict=True):
                fam.add_metric([name, *gpu_labels], value)
    return [*fams, *gpu_fams]


# -- fragmentation --------------------------------------------------------------------------------------------------


class PlacementMeter:
    """GPU and fragmentation families of a placement engine, with each node's figures cached until its state
    changes, and the typical-pod model cached while the distribution is unchanged (a scrape of an idle cluster
    of 1,200 GPU nodes then costs little more than rendering it)."""

    def __init__(self) -> None:
        self._model: tuple[tuple[TypicalPod, ...], FragModel] | None = None
        self._gpus: NodeCache = {}
        self._frag: NodeCache = {}
        self._engine: weakref.ref[PlacementEngine] | None = None

    def model(self, typical: tuple[TypicalPod, ...]) -> FragModel:
        if self._model is None or self._model[0] != typical:
            self._model = (typical, FragModel(typical))
            self._frag.clear()
        return self._model[1]

    def families(self, engine: PlacementEngine, pods: Iterable[Pod]) -> list[GaugeMetricFamily]:
        if self._engine is None or self._engine() is not engine:  # a rebuilt projection: versions start over
            self._engine = weakref.ref(engine)
            self._gpus.clear()
            self._frag.clear()
        typical = tuple(engine.config.typical_pods or typical_pods(pod_shape(p) for p in pods))
        return [
            *gpu_families(engine, self._gpus),
            *fragmentation_families(engine, self.model(typical), typical, self._frag),
        ]


def _frag_figures(state: Any, model: FragModel) -> tuple[str, int, int] | None:
    if state.inventory is None or not state.inventory.devices.get(n.GPU):
        return None
    gpu_model, cpu_left, lefts, _ = node_gpu_state(state)
    return gpu_model, sum(lefts), model.frag(gpu_model, cpu_left, lefts) if model.total_weight else 0


def fragmentation_families(
    engine: PlacementEngine,
    model: FragModel,
    typical: Iterable[TypicalPod],
    cache: NodeCache | None = None,
) -> list[GaugeMetricFamily]:
    """Idle and fragmented GPU capacity by model and the ratios; no fragmentation without a typical pod.
    ``cache`` must be cleared when ``model`` changes."""
    idle: Counter[str] = Counter()
    frag: Counter[str] = Counter()
    for _, (gpu_model, node_idle, node_frag) in _node_figures(
        engine, cache, lambda state: _frag_figures(state, model)
    ):
        idle[gpu_model] += node_idle
        frag[gpu_model] += node_frag
    weight = model.total_weight
    idle_f, frag_f, ratio_f, cluster_f, typical_f = (
        _gauge(spec, labels)
        for spec, labels in zip(
            FRAGMENTATION_FAMILIES, (["model"], ["model"], ["model"], [], []), strict=True
        )
    )
    for gpu_model in sorted(idle):
        fragmented = frag[gpu_model] / weight / MILLI if weight else 0.0
        idle_f.add_metric([gpu_model], idle[gpu_model] / MILLI)
        if weight:
            frag_f.add_metric([gpu_model], fragmented)
            ratio_f.add_metric([gpu_model], fragmented * MILLI / idle[gpu_model] if idle[gpu_model] else 0.0)
    total_idle = sum(idle.values())
    if weight and idle:
        cluster_f.add_metric([], sum(frag.values()) / weight / total_idle if total_idle else 0.0)
    typical_f.add_metric([], len(tuple(typical)))
    return [idle_f, frag_f, ratio_f, cluster_f, typical_f]


# -- quotas -----------------------------------------------------------------------------------------------------------


def _refreshed(h: Hierarchy) -> Hierarchy:
    """A copy of the hierarchy with every runtime brought up to date. The calculators assign new values to the
    nodes' attributes (never change them in place), so shallow copies of the nodes keep the engine untouched."""
    twin = copy.copy(h)
    twin.nodes = {name: copy.copy(node) for name, node in h.nodes.items()}
    twin.refresh_all()
    return twin


_MAX_INT64 = 2**63 - 1
# The "no limit" amounts the quota engine writes (built-in system/default max, profile roots' max): no sample.
_NO_LIMIT = frozenset(
    {_MAX_INT64 // 5, _MAX_INT64 // 5 * 1000, _MAX_INT64 // 2000, _MAX_INT64 // 2000 * 1000}
)


def _limited(values: Mapping[str, int] | None) -> dict[str, int]:
    return {d: v for d, v in (values or {}).items() if v not in _NO_LIMIT}


def _base(resource: str, value: int) -> float:
    """Canonical integers in Prometheus base units: millicores become cores."""
    return value / 1000 if is_milli_resource(resource) else float(value)


_BYTES = ("memory", "storage", "hugepages")
_PERCENT = frozenset({n.GPU_CORE, n.GPU_MEMORY_RATIO})


def unit_of(resource: str) -> str:
    """The unit a quota family's value is in for ``resource`` (its ``unit`` label): ``cores`` for cpu, ``bytes`` for
    memory and storage, ``millicores`` for the batch/mid cpu resources, ``percent`` for GPU cores and memory ratio
    (100 = one GPU), ``count`` for the rest (devices, pods)."""
    if is_milli_resource(resource):
        return "cores"
    if resource in _PERCENT:
        return "percent"
    if resource.endswith("-cpu"):
        return "millicores"
    return "bytes" if any(hint in resource for hint in _BYTES) else "count"


def quota_families(h: Hierarchy) -> list[GaugeMetricFamily]:
    """Per quota and resource (labelled with the unit of the value). A resource the quota has no min for has a min
    of 0 (a sample), for every resource its max, runtime, used or request names."""
    labels = ["quota", "namespace", "tree", "resource", "unit"]
    fams = [_gauge(spec, labels) for spec in QUOTA_FAMILIES[:-1]]
    pods = _gauge(QUOTA_FAMILIES[-1], ["quota", "namespace", "tree"])
    twin = _refreshed(h)
    for name in sorted(twin.nodes):
        node = twin.nodes[name]
        spec = node.spec
        root = twin.tree_root_of(name)
        tree = root.name if root is not None else ""
        base = [name, spec.namespace, tree]
        floor = {
            d: max(spec.min.get(d, 0), node.guaranteed.get(d, 0))
            for d in set(spec.min) | set(node.guaranteed)
        }
        # a tree root lends and the system and default quotas stand outside the tree: neither borrows
        borrows = bool(tree) and not twin.is_tree_root(node)
        named = set(spec.min) | set(spec.max) | set(node.runtime) | set(node.used) | set(node.request)
        series: tuple[Mapping[str, int] | None, ...] = (
            {d: spec.min.get(d, 0) for d in named},
            None if spec.unlimited else _limited(spec.max),
            _limited(node.runtime),
            node.used,
            node.request,
            {d: u - floor.get(d, 0) for d, u in node.used.items() if u > floor.get(d, 0)}
            if borrows
            else None,
        )
        for fam, values in zip(fams, series, strict=True):
            for resource, value in sorted((values or {}).items()):
                fam.add_metric([*base, resource, unit_of(resource)], _base(resource, value))
        pods.add_metric(base, len(node.pods))
    return [*fams, pods]


# -- pending pods -----------------------------------------------------------------------------------------------------


def pending_families(service: str, reasons: Mapping[str, Iterable[str]]) -> list[GaugeMetricFamily]:
    """``reasons``: pod key -> its reason codes (a pod with none counts under ``Unknown``)."""
    by_reason: Counter[str] = Counter()
    for codes in reasons.values():
        for code in set(codes) or {"Unknown"}:
            by_reason[code] += 1
    pending = _gauge(PENDING_FAMILIES[0], ["service", "reason"])
    held = _gauge(PENDING_FAMILIES[1], ["service"])
    for code, count in sorted(by_reason.items()):
        pending.add_metric([service, code], count)
    held.add_metric([service], len(reasons))
    return [pending, held]


def family_names(*groups: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str, str]]:
    """The families of ``groups`` as :class:`allot_runtime.metrics.ProjectionCollector` names them (all gauges)."""
    for group in groups:
        for name, text in group:
            yield name, "gauge", text
