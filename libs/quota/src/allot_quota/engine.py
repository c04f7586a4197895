"""``QuotaEngine``: the elastic-quota state machine the quota-manager, the simulator and replay drive.

Design
------
The engine is a pure, in-memory state fed by commands that mirror the events of the log, in log order:

    apply_quota / delete_quota, apply_profile / delete_profile      objects (validated; invalid ones change nothing)
    set_nodes / upsert_node / delete_node                            capacity (tree totals)
    add_pending / remove_pending, assign / unassign / remove_pod     pod accounting (request / used)
    overuse_revoke(now)                                              a timer tick; ``now`` is data (seconds)

and answers questions whose results are decisions made of JSON builtins: ``admit``, ``waiting_admissions``,
``preemption_victims``, ``overuse_revoke``, plus views (``runtime``, ``tree_view``, ``snapshot``,
``status_annotations``). No IO, no clock, no randomness; every order is a documented total order (quota
name; pod priority, then arrival, then key). Feeding the same commands to a fresh engine re-derives every
decision, and ``digest()`` hashes the inputs-derived state (not caches) to check it.

Pods are identified by ``"<namespace>/<name>"``. A pod enters the accounting as *pending* (it counts in its
quota's request, which drives runtime) and becomes *assigned* at Reserve (it counts in used). Calls are
idempotent: assigning an assigned pod, unassigning an unknown pod, removing a removed pod are no-ops.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from allot_quota import views
from allot_quota._resources import mask, quantities
from allot_quota.admission import check_admission
from allot_quota.borrow import usage_facts
from allot_quota.config import QuotaConfig
from allot_quota.decisions import AdmitDecision, Eviction, UsageChange, VictimsDecision
from allot_quota.errors import FieldError, PodError
from allot_quota.model import (
    DEFAULT_QUOTA,
    ROOT_QUOTA,
    SYSTEM_QUOTA,
    PodInfo,
    QuotaSpec,
    pod_info,
)
from allot_quota.profiles import NodeInfo, ProfileSpec, node_info, parse_profile, profile_root, profile_totals
from allot_quota.reclaim import NodePod, revoke_overuse, select_victims
from allot_quota.tree import Hierarchy, PodEntry
from allot_quota.validation import check_delete, check_removable, check_topology, parse_quota

__all__ = ["ENGINE_VERSION", "QuotaEngine"]

ENGINE_VERSION = "allot-quota/1"

PodRef = Mapping[str, Any] | str


class QuotaEngine:
    def __init__(self, config: QuotaConfig | None = None) -> None:
        self.config = config or QuotaConfig()
        self._h = Hierarchy(self.config)
        ns = self.config.quota_group_namespace
        self._h.add(
            QuotaSpec(name=ROOT_QUOTA, namespace=ns, is_parent=True, allow_lent=False, unlimited=True)
        )
        self._h.add(QuotaSpec(name=SYSTEM_QUOTA, namespace=ns, max=dict(self.config.system_quota_max)))
        self._h.add(QuotaSpec(name=DEFAULT_QUOTA, namespace=ns, max=dict(self.config.default_quota_max)))
        self._pods: dict[str, PodEntry] = {}
        self._seq = 0
        self._nodes: dict[str, NodeInfo] = {}
        self._profiles: dict[str, ProfileSpec] = {}
        self._ns_index: dict[str, str] = {}
        self._over_since: dict[str, int] = {}

    @property
    def hierarchy(self) -> Hierarchy:
        """The underlying forest (read-mostly; for views, benchmarks and tests)."""
        return self._h

    # ------------------------------------------------------------------ quotas
    def apply_quota(self, manifest: Mapping[str, Any]) -> list[FieldError]:
        """Create or update an ElasticQuota; returns the validation errors (none: applied)."""
        spec, errors = parse_quota(dict(manifest))
        if spec is None:
            return errors
        errors = check_topology(self._h, spec, self.config)
        if errors:
            return errors
        self._put(spec)
        return []

    def delete_quota(self, namespace: str, name: str) -> list[FieldError]:
        errors = check_delete(self._h, namespace, name)
        if not errors:
            self._h.remove(name)
            self._over_since.pop(name, None)
            self._reindex()
        return errors

    def _put(self, spec: QuotaSpec) -> None:
        node = self._h.nodes.get(spec.name)
        if node is None:
            self._h.add(spec)
        elif node.spec != spec:
            self._h.replace(spec)
        self._reindex()

    def _reindex(self) -> None:
        self._ns_index = {
            ns: n for n in sorted(self._h.nodes, reverse=True) for ns in self._h.nodes[n].spec.namespaces
        }

    # ------------------------------------------------------------------ profiles and nodes
    def apply_profile(self, manifest: Mapping[str, Any]) -> list[FieldError]:
        """Create or update an ElasticQuotaProfile and the root quota of its tree."""
        profile, errors = parse_profile(dict(manifest))
        if profile is None:
            return errors
        existing = self._h.nodes.get(profile.quota_name)
        if existing is not None and existing.spec.profile != profile.key:
            msg = f"quota {profile.quota_name} already exists and is not managed by profile {profile.key}"
            return [
                FieldError(field="spec.quotaName", type="Duplicate", value=profile.quota_name, message=msg)
            ]
        old = self._profiles.get(profile.key)
        if old is not None and old.quota_name != profile.quota_name:
            node = self._h.nodes[old.quota_name]
            errors = check_removable(old.quota_name, len(node.children), len(node.pods))
            if errors:
                return errors
        spec = profile_root(profile, profile_totals(profile, self._nodes)[0])
        errors = check_topology(self._h, spec, self.config)
        if errors:
            return errors
        if old is not None and old.quota_name != profile.quota_name:
            self._h.remove(old.quota_name)
        self._profiles[profile.key] = profile
        self._put(spec)
        return []

    def delete_profile(self, namespace: str, name: str) -> list[FieldError]:
        key = f"{namespace}/{name}"
        profile = self._profiles.get(key)
        if profile is None:
            msg = f"elastic quota profile {key} not found"
            return [FieldError(field="metadata.name", type="NotFound", value=name, message=msg)]
        node = self._h.nodes[profile.quota_name]
        errors = check_removable(profile.quota_name, len(node.children), len(node.pods))
        if errors:
            return errors
        self._h.remove(profile.quota_name)
        del self._profiles[key]
        self._reindex()
        return []

    def set_nodes(self, nodes: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]) -> None:
        """Replace the whole node set (Node manifests, as a list or a name → manifest map)."""
        items = nodes.values() if isinstance(nodes, Mapping) else nodes
        self._nodes = {}
        for m in items:
            info = node_info(dict(m))
            self._nodes[info.name] = info
        self._sync_capacity()

    def upsert_node(self, manifest: Mapping[str, Any]) -> None:
        info = node_info(dict(manifest))
        self._nodes[info.name] = info
        self._sync_capacity()

    def delete_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is not None:
            self._sync_capacity()

    def _sync_capacity(self) -> None:
        total: dict[str, int] = {}
        for name in sorted(self._nodes):
            for k, v in self._nodes[name].allocatable.items():
                total[k] = total.get(k, 0) + v
        self._h.cluster_total = total
        for key in sorted(self._profiles):
            profile = self._profiles[key]
            self._put(profile_root(profile, profile_totals(profile, self._nodes)[0]))

    # ------------------------------------------------------------------ pods
    def _info(self, pod: PodRef) -> PodInfo:
        if isinstance(pod, str):
            entry = self._pods.get(pod)
            if entry is None:
                raise KeyError(f"pod {pod} is not known to the quota engine; pass its manifest")
            return entry.info
        return pod_info(dict(pod))

    def _key(self, pod: PodRef) -> str:
        if isinstance(pod, str):
            return pod
        meta = pod.get("metadata") or {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"

    def _resolve(self, info: PodInfo) -> str:
        nodes = self._h.nodes
        if info.quota_label and info.quota_label in nodes:
            return info.quota_label
        if info.namespace in nodes:
            return info.namespace
        if info.namespace in self._ns_index:
            return self._ns_index[info.namespace]
        return "" if self.config.disable_default_quota else DEFAULT_QUOTA

    def resolve(self, pod: PodRef) -> str:
        """The quota of a pod: its quota label, else the quota named after its namespace, else the quota whose
        namespaces annotation lists the namespace, else the default quota ("" when that is disabled). A pod
        already in the accounting keeps the quota it was registered with."""
        entry = self._pods.get(self._key(pod))
        if entry is not None and (isinstance(pod, str) or entry.info == pod_info(dict(pod))):
            return entry.quota
        return self._resolve(self._info(pod))

    def validate_pod(self, pod: Mapping[str, Any]) -> list[FieldError]:
        """What a pod admission webhook would refuse: unreadable quantities, an unknown or parent quota label."""
        try:
            info = pod_info(dict(pod))
        except PodError as exc:
            return exc.errors
        field = "metadata.labels[quota.scheduling.koordinator.sh/name]"
        label = info.quota_label
        if label and label not in self._h.nodes:
            return [
                FieldError(
                    field=field, type="NotFound", value=label, message=f"elastic quota {label} not found"
                )
            ]
        if label and (
            self._h.nodes[label].children or label == ROOT_QUOTA or self._h.nodes[label].spec.is_root
        ):
            msg = f"quota {label} is a parent quota; pods must use a leaf quota"
            return [FieldError(field=field, type="Forbidden", value=label, message=msg)]
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

    def _change(self, entry: PodEntry, action: str, changed: bool, **facts: Any) -> UsageChange:
        node = self._h.nodes[entry.quota]
        return UsageChange(
            pod=entry.info.key,
            quota=entry.quota,
            action=action,  # type: ignore[arg-type]
            changed=changed,
            request=quantities(entry.masked),
            used=quantities(node.used),
            runtime=quantities(self._h.runtime(entry.quota)),
            **facts,
        )

    def _noop(self, pod: PodRef, quota: str = "") -> UsageChange:
        return UsageChange(pod=self._key(pod), quota=quota, action="noop", changed=False)

    def add_pending(self, pod: PodRef) -> UsageChange:
        """The pod exists and asks for quota: it counts in its quota's request from now on."""
        before = self._pods.get(self._key(pod))
        entry = self._track(pod)
        if entry is None:
            return self._noop(pod)
        return self._change(entry, "pending", entry is not before)

    def remove_pending(self, pod: PodRef) -> UsageChange:
        """A pending pod leaves without being assigned (deleted, or given up); assigned pods are left alone."""
        entry = self._pods.get(self._key(pod))
        if entry is None or entry.assigned:
            return self._noop(pod, entry.quota if entry else "")
        return self.remove_pod(pod)

    def remove_pod(self, pod: PodRef) -> UsageChange:
        """The pod is gone (deleted, finished, evicted): it leaves request and, if assigned, used."""
        entry = self._pods.get(self._key(pod))
        if entry is None:
            return self._noop(pod)
        returned = usage_facts(self._h, entry.quota, entry.masked, -1) if entry.assigned else []
        self._h.remove_pod(entry)
        del self._pods[entry.info.key]
        return self._change(entry, "removed", True, returned=returned)

    def assign(self, pod: PodRef) -> UsageChange:
        """Reserve: the pod is placed; it counts in used. Idempotent."""
        entry = self._track(pod)
        if entry is None:
            return self._noop(pod)
        if entry.assigned:
            return self._change(entry, "noop", False)
        borrow = usage_facts(self._h, entry.quota, entry.masked, +1)
        self._h.set_assigned(entry, True)
        return self._change(entry, "assigned", True, borrow=borrow)

    def unassign(self, pod: PodRef) -> UsageChange:
        """Unreserve: the placement is undone; the pod is pending again. Idempotent, and a no-op when unknown."""
        entry = self._pods.get(self._key(pod))
        if entry is None or not entry.assigned:
            return self._noop(pod, entry.quota if entry else "")
        returned = usage_facts(self._h, entry.quota, entry.masked, -1)
        self._h.set_assigned(entry, False)
        return self._change(entry, "unassigned", True, returned=returned)

    # ------------------------------------------------------------------ decisions
    def admit(self, pod: PodRef) -> AdmitDecision:
        """Quota admission of a pod, without changing the state (a pod not yet pending is counted tentatively)."""
        try:
            info = self._info(pod)
        except PodError as exc:
            return AdmitDecision(
                pod=self._key(pod),
                quota="",
                admitted=False,
                status="UnschedulableAndUnresolvable",
                reason="InvalidPod",
                message=str(exc),
                waiting=False,
            )
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

    def waiting_admissions(self, limit: int | None = None) -> list[AdmitDecision]:
        """Pending pods that fit their quota now, highest priority first, then arrival order, then pod key.

        Each admitted pod is counted as assigned before the next is checked (they are not assigned for real),
        so the list never over-commits a quota. Pods that do not fit are skipped; a lower-priority pod that fits
        may be listed after a higher-priority one that does not (no head-of-line blocking)."""
        pending = sorted(
            (e for e in self._pods.values() if not e.assigned),
            key=lambda e: (-e.info.priority, e.seq, e.info.key),
        )
        out: list[AdmitDecision] = []
        tentative: list[PodEntry] = []
        try:
            for e in pending:
                if limit is not None and len(out) >= limit:
                    break
                d = check_admission(self._h, self.config, e.info, e.quota)
                if d.admitted:
                    out.append(d)
                    self._h.set_assigned(e, True)
                    tentative.append(e)
        finally:
            for e in tentative:
                self._h.set_assigned(e, False)
        return out

    def preemption_victims(
        self,
        preemptor: PodRef,
        node_pods: Sequence[Mapping[str, Any]],
        fits: Callable[[list[dict[str, Any]]], bool],
    ) -> VictimsDecision:
        """Intra-quota preemption on one node. ``fits(remaining_pod_manifests)`` tells whether the preemptor
        fits the node when only those pods remain on it (the caller's node-level check)."""
        info = self._info(preemptor)
        quota = self.resolve(preemptor)
        request = mask(info.requests, set(self._h.nodes[quota].spec.max)) if quota else {}
        pods: list[NodePod] = []
        for m in node_pods:
            p = pod_info(dict(m))
            known = self._pods.get(p.key)
            q = known.quota if known is not None else self._resolve(p)
            masked = (
                known.masked
                if known is not None
                else (mask(p.requests, set(self._h.nodes[q].spec.max)) if q else {})
            )
            pods.append(NodePod(info=p, quota=q, masked=masked, manifest=dict(m)))
        return select_victims(
            self._h, self.config, preemptor=info, quota=quota, request=request, node_pods=pods, fits=fits
        )

    def overuse_revoke(self, now: int | datetime) -> list[Eviction]:
        """Pods to give back because their quota stayed over its runtime longer than ``delayEvictTime``."""
        if isinstance(now, datetime):
            if now.tzinfo is None:
                raise ValueError("now must be timezone-aware (or an int of seconds)")
            now = int(now.timestamp())
        return revoke_overuse(self._h, self.config, now, self._over_since)

    # ------------------------------------------------------------------ views
    def runtime(self, name: str) -> dict[str, str]:
        return quantities(self._h.runtime(name))

    def tree_view(self) -> list[dict[str, Any]]:
        return views.tree_view(self._h)

    def snapshot(self) -> dict[str, Any]:
        return views.snapshot(self._h)

    def status_annotations(self, name: str) -> dict[str, str]:
        return views.status_annotations(self._h, name)

    def status_patch(self, name: str) -> dict[str, Any]:
        return views.status_patch(self._h, name)

    def quota_of_pod(self, key: str) -> str | None:
        entry = self._pods.get(key)
        return entry.quota if entry else None

    def state(self) -> dict[str, Any]:
        """The engine's state as JSON builtins (inputs only; derived numbers are recomputed from it)."""
        return {
            "engine": ENGINE_VERSION,
            "config": self.config.to_dict(),
            "quotas": [self._h.nodes[n].spec.to_state() for n in sorted(self._h.nodes)],
            "profiles": [self._profiles[k].to_state() for k in sorted(self._profiles)],
            "nodes": [self._nodes[n].to_state() for n in sorted(self._nodes)],
            "pods": [
                {**e.info.to_state(), "quota": e.quota, "assigned": e.assigned, "seq": e.seq}
                for _, e in sorted(self._pods.items())
            ],
            "seq": self._seq,
            "over_since": dict(sorted(self._over_since.items())),
        }

    def digest(self) -> str:
        blob = json.dumps(self.state(), sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()
