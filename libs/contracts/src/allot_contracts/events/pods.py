"""One pod's path: gang-coordinator → quota-manager → reservation-manager → device-allocator → binder →
qos-enforcer (the quota-manager's events are in :mod:`allot_contracts.events.quota`).

Every event about one pod carries ``uid``: the life of the pod it is about (``metadata.uid`` of the object submitted or
observed). A pod deleted and created again under the same name is a new life; an event about an earlier life that
arrives late is ignored by every service (:class:`allot_runtime.processor.Host`). ``""`` means "the current life"
(logs written before lives were tracked)."""

from __future__ import annotations

from allot_contracts.decisions.placement import Decision, Freed
from allot_contracts.events._base import Event, FieldIssue, ObjectRef, PodAttempt, PodEvent, PodOnNode
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


class PodEnqueued(PodEvent, frozen=True, kw_only=True, tag="pod.enqueued.v1"):
    """gang-coordinator let a pod into the scheduling queue (a plain pod, or a gang member that goes on alone)."""

    attempt: int = 1


class PodRejected(PodEvent, frozen=True, kw_only=True, tag="pod.rejected.v1"):
    """A pod whose input can never be scheduled (malformed or invalid request). Never retried."""

    stage: str
    errors: list[FieldIssue]
    message: str
    codes: list[str] = []


class ReservationResolved(PodAttempt, frozen=True, kw_only=True, tag="reservation.resolved.v1"):
    """reservation-manager decided which Reservations the pod may (or must) use: ``match`` lists them (``None`` =
    none applies and the pod has no reservation affinity); ``reservation`` is the one its affinity names, if any."""

    reservation: str | None = None
    reason: str = ""
    match: ReservationMatch | None = None


class PodPlaced(PodAttempt, frozen=True, kw_only=True, tag="pod.placed.v2"):
    """device-allocator placed a pod. ``decision`` is the placement engine's decision record (node, devices, cpuset,
    output annotations, scores, config version), replayed field by field by ``allot replay --verify``."""

    node: str
    decision: Decision


class PodUnschedulable(PodAttempt, frozen=True, kw_only=True, tag="pod.unschedulable.v2"):
    """No node fits now. The pod is retried when capacity changes (``pod.requeued``)."""

    message: str
    codes: list[str]
    decision: Decision


class PodRequeued(PodAttempt, frozen=True, kw_only=True, tag="pod.requeued.v1"):
    """device-allocator sends an unschedulable pod back through admission after capacity changed."""

    reason: str


class PodReleased(PodOnNode, frozen=True, kw_only=True, tag="pod.released.v2"):
    """A placed pod's devices, CPUs and node resources were freed (``freed``: what it held)."""

    freed: Freed | None = None
    reason: str = "deleted"


class PodBound(PodAttempt, frozen=True, kw_only=True, tag="pod.bound.v1"):
    """binder bound the pod to its node (standalone: recorded; Kubernetes: Binding with the annotations)."""

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


class PodBindFailed(PodAttempt, frozen=True, kw_only=True, tag="pod.bind_failed.v1"):
    node: str
    message: str


class QosRecorded(PodOnNode, frozen=True, kw_only=True, tag="qos.recorded.v1"):
    """qos-enforcer recorded the bound pod's QoS: Kubernetes class, Koordinator QoS and priority class, and its
    enforcement plan on the node (``plan``; later revisions are ``qos.plan_recorded``)."""

    kube_qos: str
    koord_qos: str
    priority_class: str
    plan: QosPlan | None = None
