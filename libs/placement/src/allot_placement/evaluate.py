"""Filter and score one pod against one node: the per-node pipeline.

Responsibility: ``static_filter`` (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity — reads only labels,
taints and the name) and ``evaluate`` (NodeResourcesFit, NodeNUMAResource, DeviceShare, then scores) produce a
``NodeResult``: feasible or not, the reasons of the first failing stage (kube-scheduler reports one plugin's reasons
per node; NodeResourcesFit lists every insufficient resource), the score with its components, and the plan (devices,
NUMA, cpuset) that ``assume`` will apply.

Scores are absolute per node (0–100 per component, weighted sum), never normalised across nodes, so a node's score
depends only on that node and the pod. This is what lets the engine cache results per node state; the price is a
documented difference from kube-scheduler's NormalizeScore.

Components:
- ``NodeResourcesFit``: Least/MostAllocated over node allocatable (resources the node lacks are skipped; extended
  resources the pod does not request are skipped).
- ``NodeNUMAResource``: for NUMA-bound placements, the same formula over the NUMA nodes used; otherwise it equals
  the NodeResourcesFit value (so it never distorts non-NUMA placements).
- ``DeviceShare``: the device scorer over each requested type's summed capacity, averaged over types; replaced by the
  GPU policy's score when a cluster-level GPU policy (FGD and baselines) is configured.
- ``NodeResourcesFitPlus`` and ``ScarceResourceAvoidance``: when configured.
- With CPU amplification on the node, the amplified-CPU filter runs after NodeNUMAResource and the node-level
  scores count cpuset-bound pods (the incoming one included) at their amplified cpu (``allot_placement.nodeside``).
- ``LoadAwareScheduling``: for a node with a NodeMetric (``allot_placement.loadaware``), after its filter passed.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import msgspec

from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import NodeInfo
from allot_contracts.objects.selectors import first_untolerated_taint, match_node_selector_terms
from allot_placement import loadaware, nodeside
from allot_placement import reasons as rs
from allot_placement.config import PlacementConfig
from allot_placement.devices import (
    HAMI_POLICIES,
    DeviceMemo,
    DeviceResult,
    GpuChooser,
    allocate_devices,
    device_score,
)
from allot_placement.numa import NumaPlan, numa_plan
from allot_placement.pod import PodSpec
from allot_placement.reasons import Reason
from allot_placement.state import DeviceAlloc, NodeState, amplify

__all__ = ["GpuPolicy", "NodeResult", "evaluate", "fit_score", "static_filter"]

_UNSCHEDULABLE_TAINT = ("node.kubernetes.io/unschedulable", "", "NoSchedule")


class GpuPolicy(Protocol):
    """A cluster-level GPU policy: chooses the GPU of shared requests and scores nodes (see ``policies``).
    ``reads_node_name`` and ``state_key`` tell the engine's caches what of the node its choice and score read beyond
    the node's content."""

    name: str

    def reads_node_name(self, pod: PodSpec) -> bool: ...

    def state_key(self, state: NodeState) -> object: ...

    def chooser(self, state: NodeState, pod: PodSpec) -> GpuChooser | None: ...

    def score(self, state: NodeState, pod: PodSpec, devices: DeviceResult) -> int | None: ...


class NodeResult(msgspec.Struct, frozen=True, kw_only=True):
    feasible: bool
    reasons: tuple[Reason, ...] = ()
    score: int = 0
    components: tuple[tuple[str, int], ...] = ()
    devices: dict[str, tuple[DeviceAlloc, ...]] = msgspec.field(default_factory=dict)
    plan: NumaPlan | None = None


# Infeasible results by their reasons: a result is immutable and a node that cannot take a pod is told by one of a few
# reason lists (on the openb trace at 6,000 nodes, 8 distinct ones among 324,000 memoised results), so each distinct
# one is one object that every memo entry shares instead of a result, a tuple and an empty device map of its own.
# Emptied when it reaches ``_INFEASIBLE_KEPT`` (reasons that name taints or devices can vary with the cluster).
_INFEASIBLE: dict[tuple[Reason, ...], NodeResult] = {}
_INFEASIBLE_KEPT = 4096


def infeasible_result(reasons: tuple[Reason, ...]) -> NodeResult:
    """The result of a node that cannot take the pod, for ``reasons`` (one shared object per distinct reasons)."""
    res = _INFEASIBLE.get(reasons)
    if res is None:
        if len(_INFEASIBLE) >= _INFEASIBLE_KEPT:
            _INFEASIBLE.clear()
        res = _INFEASIBLE[reasons] = NodeResult(feasible=False, reasons=reasons)
    return res


def static_filter(info: NodeInfo, pod: PodSpec) -> tuple[Reason, ...]:
    if info.unschedulable and first_untolerated_taint((_UNSCHEDULABLE_TAINT,), pod.tolerations) is not None:
        return (rs.NODE_UNSCHEDULABLE,)
    if pod.node_name and pod.node_name != info.name:
        return (rs.NODE_NAME,)
    if pod.required_nodes is not None and info.name not in pod.required_nodes:
        return (rs.HINT_NODES,)
    taint = first_untolerated_taint(info.taints, pod.tolerations)
    if taint is not None:
        return (rs.taint(taint[0], taint[1]),)
    labels = info.labels
    if any(labels.get(k) != v for k, v in pod.node_selector):
        return (rs.AFFINITY,)
    if pod.affinity is not None and not match_node_selector_terms(pod.affinity, labels, info.name):
        return (rs.AFFINITY,)
    return ()


def insufficient(
    state: NodeState, info: NodeInfo, fit_order: tuple[tuple[str, int], ...]
) -> Iterator[Reason]:
    """NodeResourcesFit's reasons, lazily: the pod count, then every request that does not fit (the free-resource
    index, ``_free``, stops at the first)."""
    alloc = info.allocatable
    pods_cap = alloc.get(n.PODS)
    if pods_cap is not None and len(state.pods) + 1 > pods_cap:
        yield rs.TOO_MANY_PODS
    used = state.requested
    for r, v in fit_order:
        cap = alloc.get(r)
        if cap is None:
            if r in n.DEVICE_FAMILY_NAMES:
                continue
            cap = 0
        if v + used.get(r, 0) > cap:
            yield rs.insufficient(r)


def _resource_fit(state: NodeState, info: NodeInfo, pod: PodSpec) -> tuple[Reason, ...]:
    return tuple(insufficient(state, info, pod.fit_order))


def fit_score(
    most: bool,
    weights: tuple[tuple[str, int], ...],
    alloc: dict[str, int],
    used: dict[str, int],
    req: dict[str, int],
) -> int:
    num = den = 0
    for r, w in weights:
        cap = alloc.get(r, 0)
        if cap <= 0 or (r not in (n.CPU, n.MEMORY) and not req.get(r)):
            continue
        total = used.get(r, 0) + req.get(r, 0)
        s = min(total, cap) * 100 // cap if most else ((cap - total) * 100 // cap if total <= cap else 0)
        num, den = num + s * w, den + w
    return num // den if den else 0


def _fit_plus(cfg: PlacementConfig, info: NodeInfo, state: NodeState, req: dict[str, int]) -> int:
    num = den = 0
    for r, spec in cfg.fit_plus:
        if not req.get(r):
            continue
        num += (
            fit_score(spec.strategy == "MostAllocated", ((r, 1),), info.allocatable, state.requested, req)
            * spec.weight
        )
        den += spec.weight
    return num // den if den else 100


def _scarce(cfg: PlacementConfig, info: NodeInfo, req: dict[str, int]) -> int:
    diff = [r for r, v in info.allocatable.items() if v > 0 and not req.get(r)]
    scarce = [r for r in diff if r in cfg.scarce]
    if not scarce:
        return 100
    return (len(diff) - len(scarce)) * 100 // len(diff)


def _as_allocs(result: DeviceResult) -> dict[str, tuple[DeviceAlloc, ...]]:
    return {
        t: tuple(DeviceAlloc(minor=m, resources=res, vfs=tuple(vfs)) for m, res, vfs in sorted(allocs))
        for t, allocs in sorted(
            result.items(), key=lambda kv: n.DEVICE_TYPES.index(kv[0]) if kv[0] in n.DEVICE_TYPES else 99
        )
    }


def _devices(
    cfg: PlacementConfig,
    state: NodeState,
    pod: PodSpec,
    plan: NumaPlan | None,
    policy: GpuPolicy | None,
    memo: DeviceMemo | None,
    dev_sig: int,
) -> tuple[dict[str, tuple[DeviceAlloc, ...]] | None, Reason | None, int, DeviceResult]:
    """Device allocation and DeviceShare score, cached per device state when nothing else can influence them
    (a policy whose GPU choice reads more than the devices, like FGD, opts out with ``device_cacheable = False``)."""
    key = None
    cache = memo.results if memo is not None else None
    cacheable = policy is None or getattr(policy, "device_cacheable", False)
    if cache is not None and cacheable and (plan is None or plan.mask is None):
        key = (dev_sig, pod.dev_key)
        hit = cache.get(key)
        if hit is not None:
            return hit
    chooser = policy.chooser(state, pod) if policy is not None and n.GPU in pod.devices else None
    raw, why, views = allocate_devices(cfg, state, pod, plan.mask if plan else None, chooser, memo, dev_sig)
    allocs = _as_allocs(raw) if raw is not None else None
    score = (
        device_score(cfg, views, raw, HAMI_POLICIES.get(pod.node_policy, "")) if raw and policy is None else 0
    )
    out = (allocs, why, score, raw or {})
    if key is not None and cache is not None:
        cache[key] = out
    return out


def evaluate(
    cfg: PlacementConfig,
    state: NodeState,
    pod: PodSpec,
    policy: GpuPolicy | None = None,
    memo: DeviceMemo | None = None,
    dev_sig: int = 0,
) -> NodeResult:
    """Resource-side filter and score of ``pod`` on ``state`` (static filters are checked separately). ``memo``
    with ``dev_sig`` (a signature of everything the device filter reads on this node, see ``DeviceMemo``) keeps
    device results; without it everything is computed here."""
    info = state.info
    assert info is not None
    reasons = _resource_fit(state, info, pod)
    if reasons:
        return infeasible_result(reasons)
    load_score = None  # heartbeat loss and load-aware scheduling (allot_placement.nodeside)
    if state.overrides is not None or state.load is not None:
        why, load_score = nodeside.check(cfg, state, pod)
        if why is not None:
            return infeasible_result((why,))
    plan, why = numa_plan(cfg, state, pod)
    if why is not None:
        return infeasible_result((why,))
    ratio = state.overrides.ratio if state.overrides is not None else None
    used = state.requested
    req = pod.requests
    if ratio is not None:  # CPU amplification: cpuset-bound pods count amplified (allot_placement.nodeside)
        cpuset = plan is not None and bool(plan.cpuset)
        extra = state.amplified_extra(ratio)[0]
        why = nodeside.check_amplified(state, info, req.get(n.CPU, 0), cpuset, extra)
        if why is not None:
            return infeasible_result((why,))
        used = dict(used)
        used[n.CPU] = used.get(n.CPU, 0) + extra
        if cpuset:
            req = dict(req)
            req[n.CPU] = amplify(req.get(n.CPU, 0), ratio)
    devices, why, dscore, raw = _devices(cfg, state, pod, plan, policy, memo, dev_sig)
    if devices is None:
        return infeasible_result((why or rs.insufficient_devices(n.GPU),))
    node = fit_score(
        HAMI_POLICIES.get(pod.node_policy, cfg.node_fit.strategy) == "MostAllocated",
        cfg.node_fit.resources,
        info.allocatable,
        used,
        req,
    )
    comps: list[tuple[str, int, int]] = [
        ("NodeResourcesFit", node, cfg.node_fit.weight),
        ("NodeNUMAResource", plan.score if plan is not None and plan.bound else node, cfg.numa.weight),
    ]
    if policy is not None:
        ps = policy.score(state, pod, raw)
        if ps is None:
            return infeasible_result((rs.POLICY_INFEASIBLE,))
        comps.append((policy.name, ps, cfg.device.weight))
    elif pod.devices:
        comps.append(("DeviceShare", dscore, cfg.device.weight))
    if cfg.fit_plus:
        comps.append(("NodeResourcesFitPlus", _fit_plus(cfg, info, state, pod.requests), cfg.fit_plus_weight))
    if cfg.scarce:
        comps.append(("ScarceResourceAvoidance", _scarce(cfg, info, pod.requests), cfg.scarce_weight))
    if load_score is not None:
        comps.append((loadaware.NAME, load_score, cfg.load_aware.weight))
    return NodeResult(
        feasible=True,
        score=sum(s * w for _, s, w in comps),
        components=tuple((c, s) for c, s, _ in comps),
        devices=devices,
        plan=plan,
    )
