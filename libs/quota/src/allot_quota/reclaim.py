"""Reclaim: intra-quota preemption on one node, and the over-use revoke.

Design
------
*Preemption* (PostFilter). A pod may preempt only pods of its own quota, of strictly lower priority, that are
preemptible, and — with ``disableDefaultQuotaPreemption`` (default) — never pods of the default quota. A pod
with ``preemptionPolicy: Never`` is not eligible, nor is one whose node already has a terminating lower-priority
pod of the same quota (that pod's exit is awaited instead). All candidates are removed; the preemptor must then
fit the node (``fits``, supplied by the caller) and the quota (``mask(used + req, keys(req)) ≤ limit``).
Candidates are then reprieved from the most important down (priority desc, earlier start, pod key): a candidate
stays when the node still fits and the quota check still passes with it back. The rest are victims, each listed
once.

*Over-use revoke* (only with ``monitorAllQuotas`` and ``enableRuntimeQuota``, as upstream). A quota whose used
exceeds its runtime in some dimension starts an "over since" clock at the first ``now`` that sees it; when it is
still over more than ``delayEvictTime`` later, its assigned pods are taken from least important up, skipping
non-preemptible ones, until used fits the runtime; those removed are then offered back most important first and
kept if they still fit. The rest are evicted, and the clock restarts. Time is the caller's ``now`` (seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from allot_contracts.objects.pod import Pod
from allot_contracts.resources import (
    ResourceList,
    add,
    add_into,
    describe,
    exceeded_dimensions,
    format_resource_list,
    mask,
)
from allot_quota.config import QuotaConfig
from allot_quota.decisions import Eviction, VictimsDecision
from allot_quota.model import DEFAULT_QUOTA, PodInfo, importance_key
from allot_quota.tree import Hierarchy, PodEntry

__all__ = ["NodePod", "revoke_overuse", "select_victims"]


@dataclass(frozen=True, slots=True)
class NodePod:
    info: PodInfo
    quota: str
    masked: ResourceList
    pod: Pod


def _importance(p: PodInfo) -> tuple[int, int, str, str]:
    return importance_key(p.priority, p.start_time, p.key)


class _Considered(TypedDict):
    """What every victims decision of a preemptor states: the candidates considered, the quota's limit, the request."""

    candidates: list[str]
    used_limit: dict[str, str]
    request: dict[str, str]


def _decision(preemptor: PodInfo, quota: str, **kw: Any) -> VictimsDecision:
    return VictimsDecision(preemptor=preemptor.key, quota=quota, **kw)


def select_victims(
    h: Hierarchy,
    config: QuotaConfig,
    *,
    preemptor: PodInfo,
    quota: str,
    request: ResourceList,
    node_pods: Sequence[NodePod],
    fits: Callable[[list[Pod]], bool],
) -> VictimsDecision:
    lower_same = [p for p in node_pods if p.quota == quota and p.info.priority < preemptor.priority]
    refused = _ineligible(preemptor, quota, lower_same)
    if refused is not None:
        return refused
    protect_default = config.disable_default_quota_preemption and quota == DEFAULT_QUOTA
    candidates = sorted(
        (p for p in lower_same if p.info.preemptible and not protect_default),
        key=lambda p: _importance(p.info),
    )
    limit = h.runtime(quota) if config.enable_runtime_quota else dict(h.nodes[quota].spec.max)
    used = dict(h.nodes[quota].used)
    common: _Considered = {
        "candidates": [p.info.key for p in candidates],
        "used_limit": format_resource_list(limit),
        "request": format_resource_list(request),
    }

    def unhelpful(reason: str, msg: str) -> VictimsDecision:
        return _decision(
            preemptor,
            quota,
            eligible=True,
            helpful=False,
            reason=reason,
            message=msg,
            used=format_resource_list(used),
            **common,
        )

    if not candidates:
        return unhelpful("NoCandidates", f"no lower-priority preemptible pod of quota {quota} on this node")
    chosen = {p.info.key for p in candidates}
    remaining = [p.pod for p in node_pods if p.info.key not in chosen]
    for p in candidates:
        add_into(used, p.masked, -1)
    keys = request.keys()
    if not fits(list(remaining)):
        msg = "preemption is not helpful: the pod does not fit the node even without the lower-priority pods"
        return unhelpful("NodeFitFails", msg)
    exceed = exceeded_dimensions(mask(add(used, request), keys), limit)
    if exceed:
        msg = (
            f"preemption is not helpful: quota {quota} stays insufficient, used limit: {describe(limit)}, "
            f"used without candidates: {describe(used)}, pod's request: {describe(request)}, "
            f"exceedDimensions: [{' '.join(exceed)}]"
        )
        return unhelpful("QuotaStillInsufficient", msg)
    victims, reprieved, used = _reprieve(candidates, remaining, used, request, limit, fits)
    names = [p.info.key for p in victims]
    msg = (
        f"preempt {len(names)} pod(s) of quota {quota}: {', '.join(names)}"
        if names
        else "fits without victims"
    )
    return _decision(
        preemptor,
        quota,
        eligible=True,
        helpful=True,
        reason="Victims",
        message=msg,
        victims=names,
        reprieved=reprieved,
        used=format_resource_list(used),
        **common,
    )


def _ineligible(preemptor: PodInfo, quota: str, lower_same: list[NodePod]) -> VictimsDecision | None:
    """The refusal when the preemptor may not preempt at all: policy Never, no quota, or a lower-priority pod of its
    quota already terminating on the node; None when it may."""
    if preemptor.preemption_never:
        msg = "pod has preemptionPolicy Never"
        return _decision(
            preemptor, quota, eligible=False, helpful=False, reason="PreemptionPolicyNever", message=msg
        )
    if not quota:
        msg = "pod belongs to no quota"
        return _decision(preemptor, quota, eligible=False, helpful=False, reason="NoQuota", message=msg)
    terminating = sorted(p.info.key for p in lower_same if p.info.terminating)
    if terminating:
        msg = f"a lower-priority pod of quota {quota} is already terminating on this node: {terminating[0]}"
        return _decision(
            preemptor, quota, eligible=False, helpful=False, reason="VictimTerminating", message=msg
        )
    return None


def _reprieve(
    candidates: list[NodePod],
    remaining: list[Pod],
    used: ResourceList,
    request: ResourceList,
    limit: ResourceList,
    fits: Callable[[list[Pod]], bool],
) -> tuple[list[NodePod], list[str], ResourceList]:
    """Give candidates back, most important first, while the preemptor still fits the node and the quota: the
    victims (most important first), the reprieved keys, and the quota's use with the reprieved pods counted."""
    keys = request.keys()
    reprieved: list[str] = []
    victims: list[NodePod] = []
    seen: set[str] = set()
    for p in candidates:
        if p.info.key in seen:
            continue
        seen.add(p.info.key)
        trial_used = add(used, p.masked)
        if fits([*remaining, p.pod]) and not exceeded_dimensions(mask(add(trial_used, request), keys), limit):
            remaining.append(p.pod)
            used = trial_used
            reprieved.append(p.info.key)
        else:
            victims.append(p)
    victims.sort(key=lambda p: _importance(p.info), reverse=True)
    return victims, reprieved, used


def _pick(entries: list[PodEntry], used: ResourceList, runtime: ResourceList) -> list[PodEntry]:
    order = sorted(entries, key=lambda e: _importance(e.info), reverse=True)  # least important first
    used = dict(used)
    removed: list[PodEntry] = []
    for e in order:
        if not exceeded_dimensions(used, runtime):
            break
        if not e.info.preemptible:
            continue
        add_into(used, e.masked, -1)
        removed.append(e)
    evict: list[PodEntry] = []
    for e in reversed(removed):  # most important first
        if exceeded_dimensions(add(used, e.masked), runtime):
            evict.append(e)
        else:
            add_into(used, e.masked)
    return sorted(evict, key=lambda e: _importance(e.info), reverse=True)


def track_overuse(h: Hierarchy, config: QuotaConfig, now: int, over_since: dict[str, int]) -> None:
    """Only move the clocks: start one for each quota newly over its runtime, drop those no longer over."""
    if not (config.monitor_all_quotas and config.enable_runtime_quota):
        over_since.clear()
        return
    nodes = h.nodes
    for name in h.names():
        node = nodes[name]
        if node.assigned_pods and exceeded_dimensions(node.used, h.runtime(name)):
            over_since.setdefault(name, now)
        else:
            over_since.pop(name, None)


def revoke_overuse(
    h: Hierarchy,
    config: QuotaConfig,
    now: int,
    over_since: dict[str, int],
    spare: frozenset[str] = frozenset(),
) -> list[Eviction]:
    """Evictions due at ``now``; updates ``over_since`` (quota name → first ``now`` seen over runtime). Pods in
    ``spare`` (whose eviction Kubernetes refused) are never chosen: they still count in used, so others are."""
    if not (config.monitor_all_quotas and config.enable_runtime_quota):
        over_since.clear()
        return []
    out: list[Eviction] = []
    for name in sorted(h.nodes):
        node = h.nodes[name]
        assigned = [e for e in node.pods.values() if e.assigned]
        runtime = h.runtime(name) if assigned else {}
        exceed = exceeded_dimensions(node.used, runtime) if assigned else []
        if not exceed:
            over_since.pop(name, None)
            continue
        since = over_since.setdefault(name, now)
        if now - since <= config.delay_evict_seconds:
            continue
        for e in _pick([e for e in assigned if e.info.key not in spare], node.used, runtime):
            msg = (
                f"quota {name} used {describe(node.used)} exceeds its runtime {describe(runtime)} "
                f"(exceedDimensions: [{' '.join(exceed)}]) since {since}, longer than delayEvictTime "
                f"{config.delay_evict_seconds}s; giving back pod {e.info.key}"
            )
            out.append(
                Eviction(
                    pod=e.info.key,
                    quota=name,
                    cause="OverUseRevoke",
                    message=msg,
                    priority=e.info.priority,
                    runtime=format_resource_list(runtime),
                    used=format_resource_list(node.used),
                    request=format_resource_list(e.masked),
                    over_since=since,
                    now=now,
                    delay_seconds=config.delay_evict_seconds,
                )
            )
        over_since.pop(name, None)
    return out
