"""Quota admission of one pod (the PreFilter check), as a pure decision.

Design
------
For a pod resolved to quota ``q`` with request ``req`` (its requests masked to ``q``'s max keys):

1. ``used(q) + req ≤ limit(q)`` where ``limit`` is the runtime (``enableRuntimeQuota``, default) or the max.
   Comparison is ``LessThanOrEqual``: only dimensions present in the limit are checked, so a resource that
   ``max`` does not list is not governed by the quota.
2. A non-preemptible pod (label ``quota.scheduling.koordinator.sh/preemptible: "false"``) must also fit
   ``nonPreemptibleUsed(q) + req ≤ min(q)``: such pods never borrow.
3. With ``enableCheckParentQuota``, every ancestor below the tree root must fit
   ``mask(used(A) + req, keys(req)) ≤ limit(A)``.

The runtime is computed as if the pod were already counted in the quota's request, as upstream does (a pod is
in its quota's request from the moment it exists), so callers need not ``add_pending`` first. A failing pod is
``Unschedulable`` with ``waiting=True``: it stays pending and :meth:`QuotaEngine.waiting_admissions` offers it
again when quota frees. Messages keep the upstream wording (``Insufficient quotas, quotaName: …``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from allot_contracts.resources import (
    ResourceList,
    add,
    describe,
    exceeded_dimensions,
    format_resource_list,
    mask,
)
from allot_quota.borrow import usage_facts
from allot_quota.config import QuotaConfig
from allot_quota.decisions import AdmitDecision
from allot_quota.model import PodInfo, QuotaSpec, parent_quota_message
from allot_quota.tree import Hierarchy

__all__ = ["check_admission", "is_parent_quota"]

# Formatted quantities by amounts: every admission record carries six lists, and a cluster asks with few shapes, so
# most are formatted once (a copy is handed out: records own their lists). Cleared when it grows past the bound.
_FORMATTED: dict[tuple[tuple[str, int], ...], dict[str, str]] = {}
_FORMATTED_BOUND = 4096


def _formatted(amounts: ResourceList) -> dict[str, str]:
    key = tuple(amounts.items())
    got = _FORMATTED.get(key)
    if got is None:
        if len(_FORMATTED) >= _FORMATTED_BOUND:
            _FORMATTED.clear()
        got = _FORMATTED[key] = format_resource_list(amounts)
    return dict(got)


def is_parent_quota(spec: QuotaSpec, has_children: bool) -> bool:
    """A quota pods may not use: labelled is-parent (with or without children yet), a tree root, or the root."""
    return spec.is_parent or has_children or spec.unlimited or spec.is_root


def _limit(h: Hierarchy, config: QuotaConfig, name: str) -> ResourceList:
    node = h.nodes[name]
    runtime = h.runtime(name)
    return runtime if config.enable_runtime_quota else dict(node.spec.max)


def check_admission(h: Hierarchy, config: QuotaConfig, pod: PodInfo, quota: str) -> AdmitDecision:
    """Admission of ``pod`` into ``quota`` against the current state (the pod must be counted as pending)."""
    if not quota:
        return AdmitDecision(
            pod=pod.key,
            quota="",
            admitted=True,
            status="Success",
            reason="NoQuota",
            message="pod belongs to no quota (the default quota is disabled)",
            waiting=False,
            priority=pod.priority,
        )
    node = h.nodes[quota]
    root = h.tree_root_of(quota)
    tree = root.name if root is not None else ""
    req = node.pods[pod.key].masked if pod.key in node.pods else mask(pod.requests, set(node.spec.max))
    decided = functools.partial(  # what every decision says of the pod and its quota
        AdmitDecision,
        pod=pod.key,
        quota=quota,
        tree=tree,
        request=_formatted(req),
        min=_formatted(node.spec.min),
        max=_formatted(node.spec.max),
        non_preemptible=not pod.preemptible,
        priority=pod.priority,
    )
    if is_parent_quota(node.spec, bool(node.children)):
        return decided(
            admitted=False,
            status="UnschedulableAndUnresolvable",
            reason="ParentQuota",
            message=parent_quota_message(quota, pod.name),
            waiting=False,
        )
    limit = _limit(h, config, quota)
    runtime = dict(node.runtime)
    counted = functools.partial(  # and the amounts the check compared
        decided,
        used=_formatted(node.used),
        runtime=_formatted(runtime),
        limit=_formatted(limit),
    )
    exceed = exceeded_dimensions(add(node.used, req), limit)
    if exceed:
        msg = (
            f"Insufficient quotas, quotaName: {quota}, runtime: {describe(limit)}, used: {describe(node.used)}, "
            f"pod's request: {describe(req)}, exceedDimensions: [{' '.join(exceed)}]"
        )
        return _waiting(counted, "InsufficientQuota", msg, exceed)
    if not pod.preemptible:
        exceed = exceeded_dimensions(add(node.np_used, req), node.spec.min)
        if exceed:
            msg = (
                f"Insufficient non-preemptible quotas, quotaName: {quota}, min: {describe(node.spec.min)}, "
                f"nonPreemptibleUsed: {describe(node.np_used)}, pod's request: {describe(req)}, "
                f"exceedDimensions: [{' '.join(exceed)}]"
            )
            return _waiting(counted, "InsufficientNonPreemptibleQuota", msg, exceed)
    if config.enable_check_parent_quota and root is not None:
        short = _ancestor_shortfall(h, config, quota, req)
        if short is not None:
            msg, exceed, topo = short
            return _waiting(functools.partial(counted, topology=topo), "InsufficientParentQuota", msg, exceed)
    return counted(
        admitted=True,
        status="Success",
        reason="Admitted",
        message=f"quota {quota} admits the pod: used + request fits {'runtime' if config.enable_runtime_quota else 'max'}",
        waiting=False,
        borrow=usage_facts(h, quota, req, +1),
    )


def _waiting(
    decided: Callable[..., AdmitDecision], reason: str, msg: str, exceed: list[str]
) -> AdmitDecision:
    """Not admitted for want of quota: the pod waits (Unschedulable) with the dimensions it exceeds."""
    return decided(
        admitted=False,
        status="Unschedulable",
        reason=reason,
        message=msg,
        waiting=True,
        exceed_dimensions=exceed,
    )


def _ancestor_shortfall(
    h: Hierarchy, config: QuotaConfig, quota: str, req: ResourceList
) -> tuple[str, list[str], list[str]] | None:
    """The nearest ancestor below the tree root that the request would overrun: (message, exceeded dimensions,
    the quota names from that ancestor down to ``quota``); None when every ancestor has room."""
    path = h.path(quota)
    for i in range(len(path) - 2, 0, -1):  # ancestors below the tree root, nearest first
        anc = h.nodes[path[i]]
        anc_limit = _limit(h, config, anc.name)
        exceed = exceeded_dimensions(mask(add(anc.used, req), req.keys()), anc_limit)
        if exceed:
            topo = path[i:]
            msg = (
                f"Insufficient quotas, quotaNameTopo: [{' '.join(topo)}], runtime: {describe(anc_limit)}, "
                f"used: {describe(anc.used)}, pod's request: {describe(req)}, "
                f"exceedDimensions: [{' '.join(exceed)}]"
            )
            return msg, exceed, topo
    return None
