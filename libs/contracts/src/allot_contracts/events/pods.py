"""One pod's path: gang-coordinator → quota-manager → reservation-manager → device-allocator → binder →
qos-enforcer (the quota-manager's events are in :mod:`allot_contracts.events.quota`).

Every event about one pod carries ``uid``: the life of the pod it is about (``metadata.uid`` of the object submitted or
observed). A pod deleted and created again under the same name is a new life; an event about an earlier life that
arrives late is ignored by every service (:class:`allot_runtime.processor.Host`). ``""`` means "the current life"
(logs written before lives were tracked)."""

from __future__ import annotations

from allot_contracts.decisions.placement import Decision, Freed
from allot_contracts.events._base import Event, FieldIssue, ObjectRef
from allot_contracts.events.qos import QosPlan
from allot_contracts.events.reservations import ReservationMatch

__all__ = [
    "PodBindFailed",
    "PodBindRequested",
    "PodBound",
    "PodEnqueued",
    "PodPlaced",
    "PodRejected",
    "PodReleased",
    "PodRequeued",
    "PodUnschedulable",
    "QosRecorded",
    "ReservationResolved",
]


class PodEnqueued(Event, frozen=True, kw_only=True, tag="pod.enqueued.v1"):
    """gang-coordinator let a pod into the scheduling queue (a plain pod, or a gang member that goes on alone)."""

    pod: ObjectRef
    uid: str = ""
    attempt: int = 1


class PodRejected(Event, frozen=True, kw_only=True, tag="pod.rejected.v1"):
    """A pod whose input can never be scheduled (malformed or invalid request). Never retried."""

    pod: ObjectRef
    uid: str = ""
    stage: str
    errors: list[FieldIssue]
    message: str
    codes: list[str] = []


class ReservationResolved(Event, frozen=True, kw_only=True, tag="reservation.resolved.v1"):
    """reservation-manager decided which Reservations the pod may (or must) use: ``match`` lists them (``None`` =
    none applies and the pod has no reservation affinity); ``reservation`` is the one its affinity names, if any."""

    pod: ObjectRef
    uid: str = ""
    attempt: int
    reservation: str | None = None
    reason: str = ""
    match: ReservationMatch | None = None


class PodPlaced(Event, frozen=True, kw_only=True, tag="pod.placed.v2"):
    """device-allocator placed a pod. ``decision`` is the placement engine's decision record (node, devices, cpuset,
    output annotations, scores, config version), replayed field by field by ``allot replay --verify``."""

    pod: ObjectRef
    uid: str = ""
    attempt: int
    node: str
    decision: Decision


class PodUnschedulable(Event, frozen=True, kw_only=True, tag="pod.unschedulable.v2"):
    """No node fits now. The pod is retried when capacity changes (``pod.requeued``)."""

    pod: ObjectRef
    uid: str = ""
    attempt: int
    message: str
    codes: list[str]
    decision: Decision


class PodRequeued(Event, frozen=True, kw_only=True, tag="pod.requeued.v1"):
    """device-allocator sends an unschedulable pod back through admission after capacity changed."""

    pod: ObjectRef
    uid: str = ""
    attempt: int
    reason: str


class PodReleased(Event, frozen=True, kw_only=True, tag="pod.released.v2"):
    """A placed pod's devices, CPUs and node resources were freed (``freed``: what it held)."""

    pod: ObjectRef
    uid: str = ""
    node: str
    freed: Freed | None = None
    reason: str = "deleted"


class PodBound(Event, frozen=True, kw_only=True, tag="pod.bound.v1"):
    """binder bound the pod to its node (standalone: recorded; Kubernetes: Binding with the annotations)."""

    pod: ObjectRef
    uid: str = ""
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
    uid: str = ""
    attempt: int
    node: str
    message: str


class QosRecorded(Event, frozen=True, kw_only=True, tag="qos.recorded.v1"):
    """qos-enforcer recorded the bound pod's QoS: Kubernetes class, Koordinator QoS and priority class, and its
    enforcement plan on the node (``plan``; later revisions are ``qos.plan_recorded``)."""

    pod: ObjectRef
    uid: str = ""
    node: str
    kube_qos: str
    koord_qos: str
    priority_class: str
    plan: QosPlan | None = None
