"""The event catalogue: every fact Allot records, as msgspec tagged-union Structs.

Responsibility: define the payload of every event type, its stable tag (``<kind>.<action>.v<N>``), the union used to
decode payloads, and the mapping from tag to type name and schema version.

Invariants (schema evolution, see docs/adr/0004-event-contracts.md):
- Tags are explicit, never class names or import paths, and match ``^[a-z_]+\\.[a-z_]+\\.v\\d+$``.
- Fields are only ever added, with defaults; a field's type or meaning never changes. A breaking change gets a new
  tag (``….v2``) and an upcaster in :mod:`allot_contracts.upcasters`.
- No ``array_like`` and no ``forbid_unknown_fields`` on events, so that old readers skip new fields.
- Payloads carry JSON builtins only (no floats in decision data) so they hash and compare byte for byte.

The first token of a tag is the *stream kind*; it names the NATS subject ``<prefix>.events.<kind>.<action>``.
Input events (what users or a Kubernetes watch applied) are produced by ``api``; every other event is produced by
the service that decided it. Which service consumes what is drawn in docs/architecture.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

__all__ = [
    "ALL_EVENT_TYPES",
    "AnyEvent",
    "Event",
    "event_class",
    "split_tag",
]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event payload. Subclasses set ``tag``; ``stream_kind`` is the tag's first token."""

    STREAM_KIND: ClassVar[str] = ""


# ---------------------------------------------------------------------------------------------------------------
# Inputs: objects applied or deleted by a user (`allot apply`) or observed from a Kubernetes API server.
# ---------------------------------------------------------------------------------------------------------------


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """A namespaced or cluster-scoped object reference; ``namespace`` is "" for cluster-scoped objects."""

    namespace: str = ""
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class NodeApplied(Event, frozen=True, kw_only=True, tag="node.applied.v1"):
    """A v1 Node manifest was applied (created or updated)."""

    name: str
    manifest: dict[str, Any]


class NodeDeleted(Event, frozen=True, kw_only=True, tag="node.deleted.v1"):
    name: str


class DeviceApplied(Event, frozen=True, kw_only=True, tag="device.applied.v1"):
    """A Koordinator ``Device`` object (cluster-scoped, named after its node) was applied."""

    name: str
    manifest: dict[str, Any]


class DeviceDeleted(Event, frozen=True, kw_only=True, tag="device.deleted.v1"):
    name: str


class TopologyApplied(Event, frozen=True, kw_only=True, tag="topology.applied.v1"):
    """A ``NodeResourceTopology`` object (named after its node) was applied."""

    name: str
    manifest: dict[str, Any]


class TopologyDeleted(Event, frozen=True, kw_only=True, tag="topology.deleted.v1"):
    name: str


class PodSubmitted(Event, frozen=True, kw_only=True, tag="pod.submitted.v1"):
    """A pod was submitted for scheduling (no ``spec.nodeName``)."""

    pod: ObjectRef
    uid: str
    manifest: dict[str, Any]


class PodObserved(Event, frozen=True, kw_only=True, tag="pod.observed.v1"):
    """An already-bound pod (``spec.nodeName`` and allocation annotations) was applied or observed."""

    pod: ObjectRef
    uid: str
    manifest: dict[str, Any]


class PodDeleted(Event, frozen=True, kw_only=True, tag="pod.deleted.v1"):
    pod: ObjectRef
    uid: str = ""


class QuotaApplied(Event, frozen=True, kw_only=True, tag="quota.applied.v1"):
    """An ``ElasticQuota`` object was applied."""

    quota: ObjectRef
    manifest: dict[str, Any]


class QuotaDeleted(Event, frozen=True, kw_only=True, tag="quota.deleted.v1"):
    quota: ObjectRef


class QuotaProfileApplied(Event, frozen=True, kw_only=True, tag="quotaprofile.applied.v1"):
    """An ``ElasticQuotaProfile`` (quota.koordinator.sh/v1alpha1) was applied: a separate quota tree whose total is
    the selected nodes' allocatable × ratio."""

    profile: ObjectRef
    manifest: dict[str, Any]


class QuotaProfileDeleted(Event, frozen=True, kw_only=True, tag="quotaprofile.deleted.v1"):
    profile: ObjectRef


class ObjectIgnored(Event, frozen=True, kw_only=True, tag="object.ignored.v1"):
    """An object of a kind this version accepts but does not act on yet (recorded, so nothing is silently lost)."""

    api_version: str
    kind: str
    ref: ObjectRef
    manifest: dict[str, Any]


# ---------------------------------------------------------------------------------------------------------------
# node-reporter
# ---------------------------------------------------------------------------------------------------------------


class FieldIssue(msgspec.Struct, frozen=True, kw_only=True):
    """One validation error: where (a field path) and why."""

    path: str
    message: str


class NodeRegistered(Event, frozen=True, kw_only=True, tag="node.registered.v1"):
    """node-reporter accepted a Node: it is schedulable input from now on. ``capacity`` is a summary for humans."""

    name: str
    manifest: dict[str, Any]
    capacity: dict[str, str] = {}


class NodeRejected(Event, frozen=True, kw_only=True, tag="node.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class NodeRemoved(Event, frozen=True, kw_only=True, tag="node.removed.v1"):
    name: str


class DevicesReported(Event, frozen=True, kw_only=True, tag="device.reported.v1"):
    """node-reporter accepted a node's device inventory (Koordinator ``Device``)."""

    name: str
    manifest: dict[str, Any]
    devices: dict[str, int] = {}


class DevicesRejected(Event, frozen=True, kw_only=True, tag="device.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class DevicesRemoved(Event, frozen=True, kw_only=True, tag="device.removed.v1"):
    name: str


class TopologyReported(Event, frozen=True, kw_only=True, tag="topology.reported.v1"):
    name: str
    manifest: dict[str, Any]


class TopologyRejected(Event, frozen=True, kw_only=True, tag="topology.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class TopologyRemoved(Event, frozen=True, kw_only=True, tag="topology.removed.v1"):
    name: str


# ---------------------------------------------------------------------------------------------------------------
# The pod's path: gang-coordinator → quota-manager → reservation-manager → device-allocator → binder → qos-enforcer
# ---------------------------------------------------------------------------------------------------------------


class PodEnqueued(Event, frozen=True, kw_only=True, tag="pod.enqueued.v1"):
    """gang-coordinator let a pod into the scheduling queue (a plain pod, or a gang member that goes on alone)."""

    pod: ObjectRef
    attempt: int = 1


class PodRejected(Event, frozen=True, kw_only=True, tag="pod.rejected.v1"):
    """A pod whose input can never be scheduled (malformed or invalid request). Never retried."""

    pod: ObjectRef
    stage: str
    errors: list[FieldIssue]
    message: str
    codes: list[str] = []


class QuotaAdmitted(Event, frozen=True, kw_only=True, tag="quota.admitted.v1"):
    """quota-manager admitted a pod: its request fits the quota's limit. ``used`` is after admission."""

    pod: ObjectRef
    attempt: int
    quota: str
    request: dict[str, str]
    used: dict[str, str]
    limit: dict[str, str]
    detail: dict[str, Any] = {}


class QuotaWaiting(Event, frozen=True, kw_only=True, tag="quota.waiting.v1"):
    """The pod's quota is full: it waits (it is not failed) until quota frees."""

    pod: ObjectRef
    attempt: int
    quota: str
    message: str
    detail: dict[str, Any] = {}


class QuotaReleased(Event, frozen=True, kw_only=True, tag="quota.released.v1"):
    """A pod's charge was returned to its quota (deleted, unschedulable, or rejected downstream). ``detail.returned``
    lists what went back to whom (the reverse of the borrow facts recorded at admission)."""

    pod: ObjectRef
    quota: str
    request: dict[str, str]
    used: dict[str, str]
    reason: str
    detail: dict[str, Any] = {}


class QuotaRegistered(Event, frozen=True, kw_only=True, tag="quota.registered.v1"):
    """quota-manager accepted an ElasticQuota (``manifest`` is what it applied; ``runtime`` right after)."""

    quota: ObjectRef
    max: dict[str, str]
    min: dict[str, str] = {}
    manifest: dict[str, Any] = {}
    runtime: dict[str, str] = {}


class QuotaEvicted(Event, frozen=True, kw_only=True, tag="quota.evicted.v1"):
    """quota-manager evicted a running pod to give quota back: ``cause`` is ``Preempted`` (a more important pod of
    the same quota needs it) or ``OverUseRevoke`` (the quota stayed above its runtime longer than the delay).
    The pod is terminated; its devices and charge are freed. ``detail`` holds the numbers that justified it."""

    pod: ObjectRef
    quota: str
    cause: str
    message: str
    detail: dict[str, Any] = {}


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


class ReservationResolved(Event, frozen=True, kw_only=True, tag="reservation.resolved.v1"):
    """reservation-manager decided which Reservation (if any) the pod must use; ``None`` = none applies."""

    pod: ObjectRef
    attempt: int
    reservation: str | None = None
    reason: str = ""


class PodPlaced(Event, frozen=True, kw_only=True, tag="pod.placed.v1"):
    """device-allocator placed a pod. ``decision`` is the placement engine's decision record (node, devices, cpuset,
    output annotations, scores, config version), replayed field by field by ``allot replay --verify``."""

    pod: ObjectRef
    attempt: int
    node: str
    decision: dict[str, Any]


class PodUnschedulable(Event, frozen=True, kw_only=True, tag="pod.unschedulable.v1"):
    """No node fits now. The pod is retried when capacity changes (``pod.requeued``)."""

    pod: ObjectRef
    attempt: int
    message: str
    codes: list[str]
    decision: dict[str, Any]


class PodRequeued(Event, frozen=True, kw_only=True, tag="pod.requeued.v1"):
    """device-allocator sends an unschedulable pod back through admission after capacity changed."""

    pod: ObjectRef
    attempt: int
    reason: str


class PodReleased(Event, frozen=True, kw_only=True, tag="pod.released.v1"):
    """A placed pod's devices, CPUs and node resources were freed."""

    pod: ObjectRef
    node: str
    freed: dict[str, Any] = {}
    reason: str = "deleted"


class PodBound(Event, frozen=True, kw_only=True, tag="pod.bound.v1"):
    """binder bound the pod to its node (standalone: recorded; Kubernetes: Binding with the annotations)."""

    pod: ObjectRef
    attempt: int
    node: str
    annotations: dict[str, str] = {}
    mode: str = "standalone"


class PodBindRequested(Event, frozen=True, kw_only=True, tag="pod.bind_requested.v1"):
    """binder (Kubernetes mode): bind the pod (this ``uid``) to ``node`` with these annotations. The binder's IO
    worker POSTs the Binding to the API server and records the outcome: ``pod.bound`` or ``pod.bind_failed``."""

    pod: ObjectRef
    uid: str
    attempt: int
    node: str
    annotations: dict[str, str] = {}


class PodBindFailed(Event, frozen=True, kw_only=True, tag="pod.bind_failed.v1"):
    pod: ObjectRef
    attempt: int
    node: str
    message: str


class QosRecorded(Event, frozen=True, kw_only=True, tag="qos.recorded.v1"):
    """qos-enforcer recorded the bound pod's QoS: Kubernetes class, Koordinator QoS and priority class."""

    pod: ObjectRef
    node: str
    kube_qos: str
    koord_qos: str
    priority_class: str


# ---------------------------------------------------------------------------------------------------------------
# Infrastructure
# ---------------------------------------------------------------------------------------------------------------


class PodGroupApplied(Event, frozen=True, kw_only=True, tag="podgroup.applied.v1"):
    """A ``PodGroup`` (scheduling.sigs.k8s.io/v1alpha1) was applied."""

    group: ObjectRef
    manifest: dict[str, Any]


class PodGroupDeleted(Event, frozen=True, kw_only=True, tag="podgroup.deleted.v1"):
    group: ObjectRef


# ---------------------------------------------------------------------------------------------------------------
# Gangs: gang-coordinator → quota-manager → reservation-manager → device-allocator → gang-coordinator → binder.
# A gang group moves as one unit; every step is one event, so it is placed whole or not at all.
# ---------------------------------------------------------------------------------------------------------------


class GangMemberWaiting(Event, frozen=True, kw_only=True, tag="gang.member_waiting.v1"):
    """A gang member arrived but its gang group cannot be attempted yet (``reason``: gang-incomplete, …)."""

    pod: ObjectRef
    gang: str
    group: str
    present: int
    min_available: int
    reason: str


class GangGroupReady(Event, frozen=True, kw_only=True, tag="gang.group_ready.v1"):
    """gang-coordinator: attempt ``attempt`` of a gang group; ``members`` are admitted and placed as one unit."""

    group: str
    gangs: list[str]
    members: list[str]
    attempt: int


class QuotaGroupAdmitted(Event, frozen=True, kw_only=True, tag="quota.group_admitted.v1"):
    """quota-manager charged every member of the attempt (``detail.members``: per-member admission records)."""

    group: str
    attempt: int
    members: list[str]
    detail: dict[str, Any] = {}


class QuotaGroupWaiting(Event, frozen=True, kw_only=True, tag="quota.group_waiting.v1"):
    """Not every member fits its quota: nothing was charged; the gang-coordinator retries the group later."""

    group: str
    attempt: int
    message: str
    detail: dict[str, Any] = {}


class ReservationGroupResolved(Event, frozen=True, kw_only=True, tag="reservation.group_resolved.v1"):
    group: str
    attempt: int
    members: list[str]
    reservation: str | None = None
    reason: str = ""


class GangGroupPlaced(Event, frozen=True, kw_only=True, tag="gang.group_placed.v1"):
    """device-allocator placed every member of the attempt in one decision (``decisions``: member → decision)."""

    group: str
    attempt: int
    members: list[str]
    decisions: dict[str, dict[str, Any]]


class GangGroupUnschedulable(Event, frozen=True, kw_only=True, tag="gang.group_unschedulable.v1"):
    """No placement for the whole group: nothing was placed. ``message`` explains the first member that does not
    fit; ``decision`` is the engine's group decision."""

    group: str
    attempt: int
    message: str
    codes: list[str] = []
    failed_pod: str | None = None
    decision: dict[str, Any] = {}
    members: list[str] = []


class GangRetryRequested(Event, frozen=True, kw_only=True, tag="gang.retry_requested.v1"):
    """device-allocator: capacity changed and this waiting gang group would now fit; attempt it without waiting for
    its backoff to end."""

    group: str
    reason: str


class GangGroupAdmitted(Event, frozen=True, kw_only=True, tag="gang.group_admitted.v1"):
    """gang-coordinator: every gang of the group is satisfied; bind these members now."""

    group: str
    attempt: int
    members: list[str]


class GangHoldsReleased(Event, frozen=True, kw_only=True, tag="gang.holds_released.v1"):
    """Compensation: undo the quota charges and placements made for ``attempt`` of ``group`` for ``members``."""

    group: str
    attempt: int
    members: list[str]
    reason: str


class GangTimedOut(Event, frozen=True, kw_only=True, tag="gang.timed_out.v1"):
    group: str
    gang: str
    released_members: list[str]


class GangRetryScheduled(Event, frozen=True, kw_only=True, tag="gang.retry_scheduled.v1"):
    group: str
    at: int
    attempt: int
    reason: str


class TimerFired(Event, frozen=True, kw_only=True, tag="timer.fired.v1"):
    """A service's timer reached a deadline its processor asked for (gang timeouts, quota revoke delays). Time is
    data: decisions taken on a timer use the time recorded on this event, so replay reproduces them."""

    service: str
    due: int


class ConsumerDeadLettered(Event, frozen=True, kw_only=True, tag="consumer.dead_lettered.v1"):
    """A consumer gave up on an event permanently (undecodable or a permanent error). Its checkpoint moved on."""

    consumer: str
    position: int
    event_id: str
    event_type: str
    reason: str


AnyEvent = (
    NodeApplied
    | NodeDeleted
    | DeviceApplied
    | DeviceDeleted
    | TopologyApplied
    | TopologyDeleted
    | PodSubmitted
    | PodObserved
    | PodDeleted
    | QuotaApplied
    | QuotaDeleted
    | QuotaProfileApplied
    | QuotaProfileDeleted
    | QuotaProfileRegistered
    | QuotaStatusSynced
    | QuotaStatusPublished
    | QuotaProfileRejected
    | QuotaProfileRemoved
    | ObjectIgnored
    | NodeRegistered
    | NodeRejected
    | NodeRemoved
    | DevicesReported
    | DevicesRejected
    | DevicesRemoved
    | TopologyReported
    | TopologyRejected
    | TopologyRemoved
    | PodEnqueued
    | PodRejected
    | QuotaAdmitted
    | QuotaWaiting
    | QuotaReleased
    | QuotaRegistered
    | QuotaRejected
    | QuotaRemoved
    | QuotaEvicted
    | ReservationResolved
    | PodPlaced
    | PodUnschedulable
    | PodRequeued
    | PodReleased
    | PodBound
    | PodBindRequested
    | PodBindFailed
    | QosRecorded
    | PodGroupApplied
    | PodGroupDeleted
    | GangMemberWaiting
    | GangGroupReady
    | QuotaGroupAdmitted
    | QuotaGroupWaiting
    | ReservationGroupResolved
    | GangGroupPlaced
    | GangGroupUnschedulable
    | GangGroupAdmitted
    | GangHoldsReleased
    | GangTimedOut
    | GangRetryScheduled
    | GangRetryRequested
    | TimerFired
    | ConsumerDeadLettered
)


def split_tag(tag: str) -> tuple[str, int]:
    """``"pod.placed.v1"`` → ``("pod.placed", 1)``."""
    name, _, version = tag.rpartition(".")
    if not name or not version.startswith("v") or not version[1:].isdigit():
        raise ValueError(f"not an event tag: {tag!r}")
    return name, int(version[1:])


def _collect() -> dict[str, type[Event]]:
    out: dict[str, type[Event]] = {}
    for cls in AnyEvent.__args__:  # type: ignore[attr-defined]
        tag = cls.__struct_config__.tag
        if tag in out:
            raise RuntimeError(f"duplicate event tag {tag}")
        out[tag] = cls
    return out


_BY_TAG: dict[str, type[Event]] = _collect()
ALL_EVENT_TYPES: tuple[str, ...] = tuple(sorted(split_tag(t)[0] for t in _BY_TAG))


def event_class(tag: str) -> type[Event]:
    """The Struct class of a tag (``KeyError`` when unknown)."""
    return _BY_TAG[tag]


def tag_of(event: Event) -> str:
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def type_of(event: Event) -> str:
    """The event type name without version: ``"pod.placed"``."""
    return split_tag(tag_of(event))[0]
