"""quota-manager's decisions: admission, charges returned, evictions, quota objects and their status."""

from __future__ import annotations

from typing import Any

from allot_contracts.decisions.quota import AdmitDecision, Eviction, ReturnedCharge, VictimsDecision
from allot_contracts.events._base import Event, FieldIssue, ObjectRef, PodAttempt, PodEvent

__all__ = [
    "QuotaAdmitted",
    "QuotaEvicted",
    "QuotaProfileRegistered",
    "QuotaProfileRejected",
    "QuotaProfileRemoved",
    "QuotaRegistered",
    "QuotaReclaimBlocked",
    "QuotaRejected",
    "QuotaReleased",
    "QuotaRemoved",
    "QuotaStatusPublished",
    "QuotaStatusSynced",
    "QuotaWaiting",
]


class QuotaAdmitted(PodAttempt, frozen=True, kw_only=True, tag="quota.admitted.v2"):
    """quota-manager admitted a pod: its request fits the quota's limit. ``used`` is after admission."""

    quota: str
    request: dict[str, str]
    used: dict[str, str]
    limit: dict[str, str]
    detail: AdmitDecision | None = None


class QuotaWaiting(PodAttempt, frozen=True, kw_only=True, tag="quota.waiting.v2"):
    """The pod's quota is full: it waits (it is not failed) until quota frees."""

    quota: str
    message: str
    detail: AdmitDecision | None = None


class QuotaReleased(PodEvent, frozen=True, kw_only=True, tag="quota.released.v2"):
    """A pod's charge was returned to its quota (deleted, unschedulable, or rejected downstream). ``detail.returned``
    lists what went back to whom (the reverse of the borrow facts recorded at admission)."""

    quota: str
    request: dict[str, str]
    used: dict[str, str]
    reason: str
    detail: ReturnedCharge | None = None


class QuotaRegistered(Event, frozen=True, kw_only=True, tag="quota.registered.v1"):
    """quota-manager accepted an ElasticQuota (``manifest`` is what it applied; ``runtime`` right after)."""

    quota: ObjectRef
    max: dict[str, str]
    min: dict[str, str] = {}
    manifest: dict[str, Any] = {}
    runtime: dict[str, str] = {}


class QuotaEvicted(PodEvent, frozen=True, kw_only=True, tag="quota.evicted.v2"):
    """quota-manager evicted a running pod to give quota back: ``cause`` is ``Preempted`` (a more important pod of
    the same quota needs it) or ``OverUseRevoke`` (the quota stayed above its runtime longer than the delay).
    The pod is terminated; its devices and charge are freed. ``detail`` holds the numbers that justified it."""

    quota: str
    cause: str
    message: str
    detail: VictimsDecision | Eviction | None = None


class QuotaReclaimBlocked(PodEvent, frozen=True, kw_only=True, tag="quota.reclaim_blocked.v1"):
    """quota-manager's answer to the Kubernetes API server refusing a ``quota.evicted`` for good
    (``quota.eviction_enactment_failed``: a PodDisruptionBudget that allows no disruption, two budgets, …): the pod
    keeps running, so it is charged to ``quota`` again (``used``: the quota's use after that) and is not chosen again
    in this life (neither by preemption nor by over-use revoke: other pods are). ``decision`` is the refused ``quota.evicted``'s event id; ``reason`` and
    ``message`` say why, with the API server's words."""

    quota: str
    cause: str  # the refused eviction's: Preempted or OverUseRevoke
    decision: str
    reason: str
    message: str
    used: dict[str, str] = {}  # quantity text, as `allot quota` shows it


class QuotaRejected(Event, frozen=True, kw_only=True, tag="quota.rejected.v1"):
    quota: ObjectRef
    errors: list[FieldIssue]


class QuotaRemoved(Event, frozen=True, kw_only=True, tag="quota.removed.v1"):
    quota: ObjectRef


class QuotaStatusSynced(Event, frozen=True, kw_only=True, tag="quota.status_synced.v1"):
    """quota-manager: the status upstream writes on ElasticQuota objects changed. ``patches`` maps
    ``namespace/name`` to a Kubernetes merge patch: the ``quota.scheduling.koordinator.sh/{runtime,request,
    child-request,non-preemptible-*}`` annotations and ``status.used``. Batched: one event per sync."""

    patches: dict[str, dict[str, Any]]


class QuotaStatusPublished(Event, frozen=True, kw_only=True, tag="quota.status_published.v1"):
    """binder: the status patch written to one ElasticQuota (Kubernetes mode patches the object; standalone
    records it)."""

    quota: ObjectRef
    patch: dict[str, Any]
    mode: str = "standalone"


class QuotaProfileRegistered(Event, frozen=True, kw_only=True, tag="quotaprofile.registered.v1"):
    """quota-manager accepted a profile; ``quota`` is its tree's root quota, ``runtime`` the root's total."""

    profile: ObjectRef
    quota: str
    runtime: dict[str, str] = {}


class QuotaProfileRejected(Event, frozen=True, kw_only=True, tag="quotaprofile.rejected.v1"):
    profile: ObjectRef
    errors: list[FieldIssue]


class QuotaProfileRemoved(Event, frozen=True, kw_only=True, tag="quotaprofile.removed.v1"):
    profile: ObjectRef
