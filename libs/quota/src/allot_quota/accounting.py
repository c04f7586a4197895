"""Pod accounting and the per-pod decisions of :class:`allot_quota.QuotaEngine` (split out of ``engine.py``).

Design
------
A pod is identified by ``"<namespace>/<name>"`` and lives in exactly one quota, resolved when it is first seen
(quota label → quota named after the namespace, in it → quota whose ``namespaces`` annotation lists it → default
quota) and kept until its manifest changes. It enters as *pending* (counted in its quota's request, which drives
runtime) and becomes *assigned* at Reserve (counted in used). Every call is idempotent and returns a
:class:`UsageChange` record with the numbers after the change and the borrow/return facts it caused.
Arrival order (``seq``) is the order in which pods were first seen; it breaks priority ties when waiting pods
are offered again, so it is part of the state and replays identically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.pod import Pod
from allot_contracts.resources import format_resource_list, mask
from allot_quota.admission import check_admission, is_parent_quota
from allot_quota.borrow import usage_facts
from allot_quota.config import QuotaConfig
from allot_quota.decisions import AdmitDecision, UsageChange, VictimsDecision
from allot_quota.model import DEFAULT_QUOTA, PodInfo, parent_quota_message, pod_info
from allot_quota.reclaim import NodePod, select_victims
from allot_quota.tree import Hierarchy, PodEntry

__all__ = ["PodAccounting", "PodRef"]

PodRef = Pod | str


class PodAccounting:
    """Base of the engine: pods, their quota, and the decisions about them."""

    config: QuotaConfig
    _h: Hierarchy
    _pods: dict[str, PodEntry]
    _seq: int
    _ns_index: dict[str, str]

    def _info(self, pod: PodRef) -> PodInfo:
        if isinstance(pod, str):
            entry = self._pods.get(pod)
            if entry is None:
                raise KeyError(f"pod {pod} is not known to the quota engine; pass the pod")
            return entry.info
        return pod_info(pod)

    def _key(self, pod: PodRef) -> str:
        return pod if isinstance(pod, str) else pod.key

    def _resolve(self, info: PodInfo) -> str:
        nodes = self._h.nodes
        if info.quota_label and info.quota_label in nodes:
            return info.quota_label
        named = nodes.get(info.namespace)  # looked up as <namespace>/<namespace>, as upstream does
        if named is not None and named.spec.namespace == info.namespace:
            return info.namespace
        if info.namespace in self._ns_index:
            return self._ns_index[info.namespace]
        return "" if self.config.disable_default_quota else DEFAULT_QUOTA

    def resolve(self, pod: PodRef) -> str:
        """The quota of a pod: its quota label, else the quota named after its namespace (and living in it), else the
        quota whose namespaces annotation lists the namespace, else the default quota ("" when that is disabled). A
        pod already in the accounting keeps the quota it was registered with."""
        entry = self._pods.get(self._key(pod))
        if entry is not None and (isinstance(pod, str) or entry.info == pod_info(pod)):
            return entry.quota
        return self._resolve(self._info(pod))

    def validate_pod(self, pod: Pod) -> list[FieldIssue]:
        """What a pod admission webhook would refuse given the quotas that exist: an unknown or parent quota."""
        info = pod_info(pod)
        field = "metadata.labels[quota.scheduling.koordinator.sh/name]"
        label = info.quota_label
        if label and label not in self._h.nodes:
            return [
                FieldIssue(
                    path=field, code="NotFound", value=label, message=f"elastic quota {label} not found"
                )
            ]
        if label and is_parent_quota(self._h.nodes[label].spec, bool(self._h.nodes[label].children)):
            msg = parent_quota_message(label, info.name)
            return [FieldIssue(path=field, code="Forbidden", value=label, message=msg)]
        return []

    def _register(self, info: PodInfo, assigned: bool, seq: int | None = None) -> PodEntry | None:
        quota = self._resolve(info)
        if not quota:
            return None
        if seq is None:
            self._seq += 1
            seq = self._seq
        entry = PodEntry(info=info, quota=quota, masked={}, assigned=assigned, seq=seq)
        self._h.add_pod(entry)
        self._pods[info.key] = entry
        return entry

    def _track(self, pod: PodRef) -> PodEntry | None:
        """The pod's entry, registering it (pending) or re-registering it when its manifest changed."""
        info = self._info(pod)
        entry = self._pods.get(info.key)
        if entry is not None and entry.info == info:
            return entry
        if entry is not None:
            self._h.remove_pod(entry)
            del self._pods[info.key]
            return self._register(info, entry.assigned, entry.seq)
        return self._register(info, False)

    def _change(
        self, entry: PodEntry, action: str, changed: bool, numbers: bool, **facts: Any
    ) -> UsageChange:
        runtime = self._h.runtime(entry.quota)  # brought up to date whether or not it is reported
        if not numbers:
            return UsageChange(pod=entry.info.key, quota=entry.quota, action=action, changed=changed, **facts)  # type: ignore[arg-type]
        return UsageChange(
            pod=entry.info.key,
            quota=entry.quota,
            action=action,  # type: ignore[arg-type]
            changed=changed,
            request=format_resource_list(entry.masked),
            used=format_resource_list(self._h.nodes[entry.quota].used),
            runtime=format_resource_list(runtime),
            **facts,
        )

    def _noop(self, pod: PodRef, quota: str = "") -> UsageChange:
        return UsageChange(pod=self._key(pod), quota=quota, action="noop", changed=False)

    def add_pending(self, pod: PodRef, *, numbers: bool = True) -> UsageChange:
        """The pod exists and asks for quota: it counts in its quota's request from now on.

        Here and in the other changes below, ``numbers=False`` leaves the record's request, used and runtime empty:
        formatting them is most of the cost of a change, and a caller that does not read them need not pay it."""
        before = self._pods.get(self._key(pod))
        entry = self._track(pod)
        if entry is None:
            return self._noop(pod)
        if entry is before:
            return self._change(entry, "noop", False, numbers)
        return self._change(entry, "updated" if before is not None else "pending", True, numbers)

    def remove_pending(self, pod: PodRef, *, numbers: bool = True) -> UsageChange:
        """A pending pod leaves without being assigned (deleted, or given up); assigned pods are left alone."""
        entry = self._pods.get(self._key(pod))
        if entry is None or entry.assigned:
            return self._noop(pod, entry.quota if entry else "")
        return self.remove_pod(pod, numbers=numbers)

    def remove_pod(self, pod: PodRef, *, numbers: bool = True) -> UsageChange:
        """The pod is gone (deleted, finished, evicted): it leaves request and, if assigned, used."""
        entry = self._pods.get(self._key(pod))
        if entry is None:
            return self._noop(pod)
        returned = usage_facts(self._h, entry.quota, entry.masked, -1) if entry.assigned else []
        self._h.remove_pod(entry)
        del self._pods[entry.info.key]
        return self._change(entry, "removed", True, numbers, returned=returned)

    def assign(self, pod: PodRef, *, numbers: bool = True) -> UsageChange:
        """Reserve: the pod is placed; it counts in used. Idempotent."""
        entry = self._track(pod)
        if entry is None:
            return self._noop(pod)
        if entry.assigned:
            return self._change(entry, "noop", False, numbers)
        borrow = usage_facts(self._h, entry.quota, entry.masked, +1)
        self._h.set_assigned(entry, True)
        return self._change(entry, "assigned", True, numbers, borrow=borrow)

    def unassign(self, pod: PodRef, *, numbers: bool = True) -> UsageChange:
        """Unreserve: the placement is undone; the pod is pending again. Idempotent, and a no-op when unknown."""
        entry = self._pods.get(self._key(pod))
        if entry is None or not entry.assigned:
            return self._noop(pod, entry.quota if entry else "")
        returned = usage_facts(self._h, entry.quota, entry.masked, -1)
        self._h.set_assigned(entry, False)
        return self._change(entry, "unassigned", True, numbers, returned=returned)

    # ------------------------------------------------------------------ decisions
    def admit(self, pod: PodRef) -> AdmitDecision:
        """Quota admission of a pod, without changing the state (a pod not yet pending is counted tentatively)."""
        info = self._info(pod)
        entry = self._pods.get(info.key)
        if entry is not None and entry.info == info:
            if entry.assigned:
                msg = f"pod is already assigned in quota {entry.quota}"
                return AdmitDecision(
                    pod=info.key,
                    quota=entry.quota,
                    admitted=True,
                    status="Success",
                    reason="AlreadyAssigned",
                    message=msg,
                    waiting=False,
                    priority=info.priority,
                )
            return check_admission(self._h, self.config, info, entry.quota)
        if not self._resolve(info):
            return check_admission(self._h, self.config, info, "")
        return self._tentative(info)

    def _tentative(self, info: PodInfo) -> AdmitDecision:
        saved_seq = self._seq
        old = self._pods.get(info.key)
        if old is not None:
            self._h.remove_pod(old)
            del self._pods[info.key]
        entry = self._register(info, False)
        assert entry is not None
        try:
            return check_admission(self._h, self.config, info, entry.quota)
        finally:
            self._h.remove_pod(entry)
            del self._pods[info.key]
            if old is not None:
                self._h.add_pod(old)
                self._pods[info.key] = old
            self._seq = saved_seq

    def waiting_admissions(
        self,
        limit: int | None = None,
        quotas: Iterable[str] | None = None,
        pods: Iterable[str] | None = None,
        released: Iterable[PodRef] = (),
    ) -> list[AdmitDecision]:
        """Pending pods that fit their quota now, highest priority first, then arrival order, then pod key.

        Each admitted pod is counted as assigned before the next is checked (they are not assigned for real),
        so the list never over-commits a quota. Pods that do not fit are skipped; a lower-priority pod that fits
        may be listed after a higher-priority one that does not (no head-of-line blocking). ``quotas`` / ``pods``
        limit the scan to pods of those quotas / with those keys; ``limit`` stops after that many admissions;
        ``released`` pods are counted as unassigned (for deciding on a release before it is applied). The state
        is unchanged afterwards."""
        return self.offer_waiting(limit=limit, quotas=quotas, pods=pods, released=released)[0]

    def offer_waiting(
        self,
        limit: int | None = None,
        quotas: Iterable[str] | None = None,
        pods: Iterable[str] | None = None,
        released: Iterable[PodRef] = (),
    ) -> tuple[list[AdmitDecision], list[AdmitDecision]]:
        """``waiting_admissions`` and, second, the decisions of the pods it offered that still do not fit: each
        with the numbers it was checked against (the pods admitted before it counted), what upstream's scheduler
        reports when it retries a pending pod."""
        only_q = None if quotas is None else set(quotas)
        only_p = None if pods is None else set(pods)
        undo: list[PodEntry] = []
        for ref in released:
            entry = self._pods.get(self._key(ref))
            if entry is not None and entry.assigned:
                self._h.set_assigned(entry, False)
                undo.append(entry)
        out: list[AdmitDecision] = []
        refused: list[AdmitDecision] = []
        tentative: list[PodEntry] = []
        try:
            pending = sorted(
                (
                    e
                    for e in self._pods.values()
                    if not e.assigned
                    and e not in undo
                    and (only_q is None or e.quota in only_q)
                    and (only_p is None or e.info.key in only_p)
                ),
                key=lambda e: (-e.info.priority, e.seq, e.info.key),
            )
            for e in pending:
                if limit is not None and len(out) >= limit:
                    break
                d = check_admission(self._h, self.config, e.info, e.quota)
                if d.admitted:
                    out.append(d)
                    self._h.set_assigned(e, True)
                    tentative.append(e)
                else:
                    refused.append(d)
        finally:
            for e in tentative:
                self._h.set_assigned(e, False)
            for e in undo:
                self._h.set_assigned(e, True)
        return out, refused

    def preemption_victims(
        self,
        preemptor: PodRef,
        node_pods: Sequence[Pod],
        fits: Callable[[list[Pod]], bool],
    ) -> VictimsDecision:
        """Intra-quota preemption on one node. ``fits(remaining_pods)`` tells whether the preemptor
        fits the node when only those pods remain on it (the caller's node-level check)."""
        info = self._info(preemptor)
        quota = self.resolve(preemptor)
        request = mask(info.requests, set(self._h.nodes[quota].spec.max)) if quota else {}
        pods: list[NodePod] = []
        for m in node_pods:
            p = pod_info(m)
            known = self._pods.get(p.key)
            q = known.quota if known is not None else self._resolve(p)
            masked = (
                known.masked
                if known is not None
                else (mask(p.requests, set(self._h.nodes[q].spec.max)) if q else {})
            )
            pods.append(NodePod(info=p, quota=q, masked=masked, pod=m))
        return select_victims(
            self._h, self.config, preemptor=info, quota=quota, request=request, node_pods=pods, fits=fits
        )

    def quota_of_pod(self, key: str) -> str | None:
        entry = self._pods.get(key)
        return entry.quota if entry else None
