"""What ``kubectl describe`` shows, rendered from recorded decisions (pure; no IO, no clock).

The binder's Kubernetes worker tails the log and writes, for each recorded decision, what kube-scheduler and the
Koordinator/scheduler-plugins controllers would have written at that point. Nothing is decided here: every notice is
a function of one recorded event (and, for PodGroup status and node capacity, of the recorded events before it), so
the same log always renders the same notices.

================================ ==================================================================================
Recorded                         Rendered (on the pod unless said otherwise)
================================ ==================================================================================
``pod.unschedulable``            Warning ``FailedScheduling`` (the "0/N nodes are available: …" message);
                                 ``PodScheduled=False``, reason ``Unschedulable``
``pod.rejected``                 the same, with the field path and reason that make the pod unschedulable for good
``quota.waiting``                the same, with the quota's message
``gang.member_waiting``          the same: ``gang "ns/g" has 2/4 members, waiting for more (…)``
``gang.group_unschedulable``     the same on every member: ``Gang "…" gets rejected due to member Pod "…" is
                                 unschedulable with reason "…"``
``gang.timed_out``               the same on every released member
``pod.bind_failed``              Warning ``FailedScheduling`` ``Binding rejected: …``; ``PodScheduled=False``,
                                 reason ``SchedulerError`` (as kube-scheduler after a failed bind)
``pod.bound`` (kubernetes)       Normal ``Scheduled`` ``Successfully assigned ns/pod to node`` (the API server set
                                 ``PodScheduled=True`` with the Binding)
``quota.evicted``                Normal ``Preempted`` (cause ``Preempted``) or Warning ``Evicted`` (over-use revoke)
``quota.rejected``               Warning ``Rejected`` on the ElasticQuota, with every field path and reason
``podgroup.rejected``            Warning ``Rejected`` on the PodGroup
``reservation.unschedulable``    Warning ``FailedScheduling`` on the Reservation, with the "0/N nodes …" message
``reservation.placed``           Normal ``Scheduled`` ``Successfully assigned <name> to <node>`` on the Reservation
``reservation.rejected``         Warning ``Rejected`` on the Reservation, with every field path and reason
                                 (none of these for a PodMigrationJob's own reservations: they live in the log only;
                                 Reservation status and conditions are reservation-manager's to write)
PodGroup members, bindings and  PodGroup ``status``: ``phase`` (Pending, PreScheduling, Scheduling, Scheduled,
``pod.phase_observed``           Running, Finished, Failed) and the ``scheduled``, ``running``, ``succeeded``,
                                 ``failed`` counts, as the coscheduling controller (``binder.podgroups``)
``device.reported``/``removed``  the Node's ``status.capacity``/``allocatable`` of every ``koordinator.sh/``
                                 device resource, summed over the node's healthy devices (as koord-manager does)
``node.allocatable_updated``     the Node's ``status.capacity``/``allocatable`` of ``kubernetes.io/batch-cpu``,
                                 ``batch-memory``, ``mid-cpu``, ``mid-memory`` as computed (as slo-controller does;
                                 ``0`` while degraded; removed when no colocation strategy applies any more);
                                 the Node's annotations ``node.koordinator.sh/cpu-normalization-ratio`` (the
                                 recorded ratio) and, while cpu or memory is amplified, ``raw-allocatable`` (as
                                 koord-manager writes them; ``node_annotations``)
================================ ==================================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import ClassVar

import msgspec

from allot_contracts.events import (
    DevicesRemoved,
    DevicesReported,
    Event,
    GangGroupReady,
    GangGroupUnschedulable,
    GangMemberWaiting,
    GangTimedOut,
    NodeAllocatableUpdated,
    ObjectRef,
    PodBindFailed,
    PodBound,
    PodDeleted,
    PodGroupApplied,
    PodGroupDeleted,
    PodGroupRejected,
    PodPhaseObserved,
    PodRejected,
    PodSubmitted,
    PodUnschedulable,
    QuotaEvicted,
    QuotaRejected,
    QuotaWaiting,
    ReservationAccepted,
    ReservationPlaced,
    ReservationRejected,
    ReservationUnschedulable,
)
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonValue
from allot_contracts.objects import names
from allot_contracts.quantity import QuantityError, format_quantity, to_canonical
from binder.podgroups import COUNTED, PodGroupState, PodGroupStatus

NOTE_LIMIT = 1024  # events.k8s.io/v1 ``note`` is at most 1 kB: 1024 bytes of UTF-8, not characters
NAME_LIMIT = 253  # an Event's name is a DNS subdomain

POD = ("v1", "Pod")
ELASTIC_QUOTA = ("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota")
POD_GROUP = ("scheduling.sigs.k8s.io/v1alpha1", "PodGroup")
RESERVATION = ("scheduling.koordinator.sh/v1alpha1", "Reservation")
DEVICE_PREFIX = "koordinator.sh/"
# What slo-controller writes on the Node from the computed allocatable (the amplified cpu and the ratios are not
# Node resources: the scheduler reads them from the log, docs/kubernetes.md).
RECLAIMED = (names.BATCH_CPU, names.BATCH_MEMORY, names.MID_CPU, names.MID_MEMORY)
# What koord-manager writes on the Node for CPU normalization and resource amplification.
ANN_CPU_NORMALIZATION_RATIO = "node.koordinator.sh/cpu-normalization-ratio"
ANN_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"
AMPLIFIABLE = (names.CPU, names.MEMORY)  # the resources Koordinator amplifies (and keeps raw)


class Regarding(msgspec.Struct, frozen=True, kw_only=True):
    """The object an Event is about (``regarding`` of an ``events.k8s.io/v1`` Event)."""

    api_version: str
    kind: str
    namespace: str = ""
    name: str
    uid: str = ""

    def ref(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


class Notice(msgspec.Struct, frozen=True, kw_only=True):
    """One Kubernetes Event to write: ``type`` Normal/Warning, ``reason``, ``action`` and ``note`` as
    kube-scheduler writes them."""

    regarding: Regarding
    type: str
    reason: str
    action: str
    note: str


class Condition(msgspec.Struct, frozen=True, kw_only=True):
    """``PodScheduled`` of a pod (False while Allot holds it back)."""

    pod: ObjectRef
    uid: str
    status: str
    reason: str
    message: str


class Rendered(msgspec.Struct, frozen=True, kw_only=True):
    notices: list[Notice] = []
    conditions: list[Condition] = []
    pod_groups: list[str] = []  # PodGroups whose status changed ("ns/name")
    nodes: list[str] = []  # Nodes whose device capacity, batch/mid resources or annotations changed


def fit_note(text: str) -> str:
    """``text`` cut to the API server's limit on an Event's note (1024 bytes of UTF-8), never inside a character,
    ending with ``...`` when cut."""
    data = text.encode()
    if len(data) <= NOTE_LIMIT:
        return text
    return data[: NOTE_LIMIT - 3].decode("utf-8", "ignore") + "..."


def _ref(key: str) -> ObjectRef:
    namespace, _, name = key.rpartition("/")
    return ObjectRef(namespace=namespace, name=name)


class Renderer:
    """Folds recorded events (in log order) and renders each one. Holds what later notices depend on: pod uids,
    PodGroup membership and bindings, node device capacity."""

    interests: ClassVar[frozenset[str]] = frozenset(
        {
            "pod.submitted",
            "pod.deleted",
            "pod.phase_observed",
            "pod.unschedulable",
            "pod.rejected",
            "quota.waiting",
            "gang.member_waiting",
            "gang.group_ready",
            "gang.group_unschedulable",
            "gang.timed_out",
            "pod.bind_failed",
            "pod.bound",
            "quota.evicted",
            "quota.rejected",
            "podgroup.applied",
            "podgroup.deleted",
            "podgroup.rejected",
            "device.reported",
            "device.removed",
            "node.allocatable_updated",
            "reservation.accepted",
            "reservation.unschedulable",
            "reservation.placed",
            "reservation.rejected",
        }
    )

    def __init__(self, scheduler: str = "allot-scheduler") -> None:
        self.scheduler = scheduler
        self.uids: dict[str, str] = {}  # pod -> uid of its current life
        self.groups: dict[str, PodGroupState] = {}  # "ns/name" -> state
        self.member_of: dict[str, str] = {}  # pod -> PodGroup
        self.capacity: dict[str, dict[str, str]] = {}  # node -> device resources
        self.reclaimed: dict[str, dict[str, str]] = {}  # node -> batch/mid resources
        self.annotations: dict[str, dict[str, str]] = {}  # node -> koord-manager's annotations
        self.job_reservations: set[str] = set()  # reservations of PodMigrationJobs (not cluster objects)

    # -- what is written -----------------------------------------------------------------------------------------

    def group_status(self, key: str) -> PodGroupStatus | None:
        """The PodGroup's ``status`` as the coscheduling controller sets it (``binder.podgroups``), or None when
        no PodGroup object is recorded (a gang declared by annotations only)."""
        state = self.groups.get(key)
        if state is None or not state.exists:
            return None
        return state.status()

    def node_capacity(self, node: str) -> dict[str, str]:
        """The node's device resources and batch/mid resources (empty when it has neither)."""
        return dict(sorted({**self.capacity.get(node, {}), **self.reclaimed.get(node, {})}.items()))

    def node_annotations(self, node: str) -> dict[str, str]:
        """koord-manager's annotations of the node from its latest ``node.allocatable_updated`` (empty if none)."""
        return dict(self.annotations.get(node, {}))

    # -- folding -------------------------------------------------------------------------------------------------

    def _pod(self, pod: ObjectRef) -> Regarding:
        return Regarding(
            api_version=POD[0],
            kind=POD[1],
            namespace=pod.namespace,
            name=pod.name,
            uid=self.uids.get(pod.key, ""),
        )

    def _pending(
        self, pod: ObjectRef, note: str, *, reason: str = "Unschedulable"
    ) -> tuple[Notice, Condition]:
        note = fit_note(note)
        return (
            Notice(
                regarding=self._pod(pod),
                type="Warning",
                reason="FailedScheduling",
                action="Scheduling",
                note=note,
            ),
            Condition(pod=pod, uid=self.uids.get(pod.key, ""), status="False", reason=reason, message=note),
        )

    def _members_pending(self, members: list[str], note: str) -> Rendered:
        pairs = [self._pending(_ref(member), note) for member in sorted(members)]
        return Rendered(notices=[n for n, _ in pairs], conditions=[c for _, c in pairs])

    def render(self, event: Event) -> Rendered:
        """Fold one recorded event and return what it renders. Every PodGroup it touched has its phase derived
        again, in log order (``binder.podgroups``)."""
        rendered = self._render(event)
        for key in rendered.pod_groups:
            if key in self.groups:
                self.groups[key].settle()
        return rendered

    def _render(self, event: Event) -> Rendered:
        if isinstance(event, (PodSubmitted, PodDeleted, PodPhaseObserved, PodBound)):
            return self._render_pod_life(event)
        if isinstance(
            event,
            (
                PodUnschedulable,
                QuotaWaiting,
                GangMemberWaiting,
                GangGroupReady,
                GangGroupUnschedulable,
                GangTimedOut,
                PodBindFailed,
                QuotaEvicted,
                PodRejected,
            ),
        ):
            return self._render_waiting(event)
        if isinstance(event, (QuotaRejected, PodGroupRejected, PodGroupApplied, PodGroupDeleted)):
            return self._render_admission(event)
        if isinstance(event, (DevicesReported, DevicesRemoved, NodeAllocatableUpdated)):
            return self._render_node(event)
        if isinstance(
            event, (ReservationAccepted, ReservationUnschedulable, ReservationPlaced, ReservationRejected)
        ):
            return self._render_reservation(event)
        return Rendered()

    def _render_pod_life(self, event: PodSubmitted | PodDeleted | PodPhaseObserved | PodBound) -> Rendered:
        """A pod's life: submitted, deleted, its phase, bound; PodGroup members follow it."""
        match event:
            case PodSubmitted(pod=pod, uid=uid):
                self.uids[pod.key] = uid
                group = self.member_of.pop(pod.key, None)  # a finished earlier life still counted: it is over
                if group is not None and group in self.groups:
                    self.groups[group].leave(pod.key)
                    return Rendered(pod_groups=[group])
                return Rendered()
            case PodDeleted(pod=pod):
                self.uids.pop(pod.key, None)
                group = self.member_of.get(pod.key)
                if group is not None and group in self.groups:
                    state = self.groups[group]
                    state.deleted(pod.key)
                    if pod.key not in state.members:
                        self.member_of.pop(pod.key, None)
                    return Rendered(pod_groups=[group])
                self.member_of.pop(pod.key, None)
                return Rendered()
            case PodPhaseObserved(pod=pod, uid=uid, phase=phase) if phase in COUNTED:
                if uid and self.uids.get(pod.key, uid) != uid:
                    return Rendered()  # about an earlier life of the pod
                group = self.member_of.get(pod.key)
                if group is None or group not in self.groups:
                    return Rendered()  # not a PodGroup member: nothing shows it
                state = self.groups[group]
                if pod.key not in state.members or state.phases.get(pod.key) == phase:
                    return Rendered()
                state.phases[pod.key] = phase
                return Rendered(pod_groups=[group])
            case PodBound(pod=pod, node=node, mode="kubernetes"):
                notice = Notice(
                    regarding=self._pod(pod),
                    type="Normal",
                    reason="Scheduled",
                    action="Binding",
                    note=f"Successfully assigned {pod.key} to {node}",
                )
                group = self.member_of.get(pod.key)
                if group is not None and group in self.groups:
                    self.groups[group].bound.add(pod.key)
                    return Rendered(notices=[notice], pod_groups=[group])
                return Rendered(notices=[notice])
            case _:
                return Rendered()

    def _render_waiting(
        self,
        event: PodUnschedulable
        | QuotaWaiting
        | GangMemberWaiting
        | GangGroupReady
        | GangGroupUnschedulable
        | GangTimedOut
        | PodBindFailed
        | QuotaEvicted
        | PodRejected,
    ) -> Rendered:
        """Why a pod waits or went: unschedulable, rejected, waiting for quota or its gang, evicted."""
        match event:
            case PodUnschedulable(pod=pod, message=message) | PodRejected(pod=pod, message=message):
                notice, condition = self._pending(pod, message)
                return Rendered(notices=[notice], conditions=[condition])
            case QuotaWaiting(pod=pod, message=message):
                notice, condition = self._pending(pod, message)
                return Rendered(notices=[notice], conditions=[condition])
            case GangMemberWaiting(pod=pod, gang=gang, present=present, min_available=minimum, reason=reason):
                changed = self._join(gang, pod.key, minimum)
                notice, condition = self._pending(
                    pod, f'gang "{gang}" has {present}/{minimum} members, waiting for more ({reason})'
                )
                return Rendered(notices=[notice], conditions=[condition], pod_groups=changed)
            case GangGroupReady(gangs=gangs, members=members) if len(gangs) == 1:
                joined = [g for member in members for g in self._join(gangs[0], member, 0)]
                return Rendered(pod_groups=sorted(set(joined)))
            case GangGroupUnschedulable(group=group, members=members, failed_pod=failed, message=message):
                note = f'Gang "{group}" gets rejected due to member Pod "{failed or "?"}" is unschedulable with reason "{message}"'
                return self._members_pending(members, note)
            case GangTimedOut(gang=gang, released_members=released):
                return self._members_pending(
                    released, f'Gang "{gang}" gets rejected: it timed out waiting for its members'
                )
            case PodBindFailed(pod=pod, message=message):
                notice, condition = self._pending(
                    pod, f"Binding rejected: {message}", reason="SchedulerError"
                )
                return Rendered(notices=[notice], conditions=[condition])
            case QuotaEvicted(pod=pod, cause=cause, message=message):
                kind, reason = ("Normal", "Preempted") if cause == "Preempted" else ("Warning", "Evicted")
                notice = Notice(
                    regarding=self._pod(pod),
                    type=kind,
                    reason=reason,
                    action="Preempting",
                    note=fit_note(message),
                )
                return Rendered(notices=[notice])
            case _:
                return Rendered()

    def _render_admission(
        self, event: QuotaRejected | PodGroupRejected | PodGroupApplied | PodGroupDeleted
    ) -> Rendered:
        """ElasticQuota and PodGroup objects: rejected ones get a notice, applied groups a state."""
        match event:
            case QuotaRejected(quota=quota, errors=errors):
                return _rejected(ELASTIC_QUOTA, quota, error_note(errors) or "rejected")
            case PodGroupRejected(group=group, message=message):
                return _rejected(POD_GROUP, group, message)
            case PodGroupApplied(group=group, manifest=manifest):
                state = self.groups.setdefault(group.key, PodGroupState())
                state.exists = True
                spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
                declared = spec.get("minMember") if isinstance(spec, dict) else None
                if isinstance(declared, int) and not isinstance(declared, bool):
                    state.min_member = declared
                return Rendered(pod_groups=[group.key])
            case PodGroupDeleted(group=group):
                self.groups.pop(group.key, None)
                return Rendered()
            case _:
                return Rendered()

    def _render_node(self, event: DevicesReported | DevicesRemoved | NodeAllocatableUpdated) -> Rendered:
        """Node capacity and annotations: a node is re-rendered when what it shows changed."""
        match event:
            case DevicesReported(name=node, manifest=manifest):
                before = self.capacity.get(node, {})
                now = device_capacity(manifest)
                self.capacity[node] = now
                return Rendered(nodes=[node] if now != before or not before else [])
            case DevicesRemoved(name=node):
                had = self.capacity.pop(node, None)
                return Rendered(nodes=[node] if had else [])
            case NodeAllocatableUpdated(name=node, allocatable=allocatable):
                previous = (self.reclaimed.get(node, {}), self.annotations.get(node, {}))
                reclaimed = {k: allocatable[k] for k in RECLAIMED if allocatable.get(k)}
                annotations = node_annotations(event)
                if reclaimed:
                    self.reclaimed[node] = reclaimed
                else:
                    self.reclaimed.pop(node, None)
                self.annotations[node] = annotations
                return Rendered(nodes=[node] if (reclaimed, annotations) != previous else [])
            case _:
                return Rendered()

    def _render_reservation(
        self, event: ReservationAccepted | ReservationUnschedulable | ReservationPlaced | ReservationRejected
    ) -> Rendered:
        """Reservations: job ones are remembered, placement outcomes become notices."""
        match event:
            case ReservationAccepted(reservation=ref, job=job):
                if job:
                    self.job_reservations.add(ref.key)
                else:
                    self.job_reservations.discard(ref.key)
                return Rendered()
            case ReservationUnschedulable(reservation=ref, uid=uid, message=message):
                return self._on_reservation(ref, uid, "Warning", "FailedScheduling", "Scheduling", message)
            case ReservationPlaced(reservation=ref, uid=uid, node=node):
                note = f"Successfully assigned {ref.name} to {node}"
                return self._on_reservation(ref, uid, "Normal", "Scheduled", "Binding", note)
            case ReservationRejected(reservation=ref, uid=uid, errors=errors, message=message):
                return self._on_reservation(
                    ref, uid, "Warning", "Rejected", "Admitting", error_note(errors) or message
                )
            case _:
                return Rendered()

    def _on_reservation(
        self, ref: ObjectRef, uid: str, kind: str, reason: str, action: str, note: str
    ) -> Rendered:
        if ref.key in self.job_reservations:
            return Rendered()
        regarding = Regarding(
            api_version=RESERVATION[0], kind=RESERVATION[1], namespace=ref.namespace, name=ref.name, uid=uid
        )
        notice = Notice(regarding=regarding, type=kind, reason=reason, action=action, note=fit_note(note))
        return Rendered(notices=[notice])

    def _join(self, gang: str, pod: str, minimum: int) -> list[str]:
        """Count ``pod`` as a member of the PodGroup named like its gang (a PodGroup's gang is ``ns/name``)."""
        state = self.groups.setdefault(gang, PodGroupState())
        if minimum and not state.min_member:
            state.min_member = minimum
        self.member_of[pod] = gang
        if pod in state.members:
            return []
        state.members.add(pod)
        return [gang]


def device_capacity(manifest: Mapping[str, JsonValue]) -> dict[str, str]:
    """Every ``koordinator.sh/`` resource of a ``Device`` summed over its healthy devices (an unhealthy device counts
    for nothing, as in the scheduler's device cache). Quantities are written in their canonical form."""
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    devices = spec.get("devices") if isinstance(spec, dict) else None
    totals: dict[str, int] = {}
    for device in devices if isinstance(devices, list) else []:
        if not isinstance(device, dict) or device.get("health") is not True:
            continue
        resources = device.get("resources")
        for name, value in (resources if isinstance(resources, dict) else {}).items():
            if not str(name).startswith(DEVICE_PREFIX):
                continue
            try:
                amount = to_canonical(str(name), str(value))
            except (QuantityError, ValueError):
                continue  # node-reporter rejected such a Device already; nothing to add up
            totals[str(name)] = totals.get(str(name), 0) + amount
    return {name: format_quantity(name, total) for name, total in sorted(totals.items())}


def node_annotations(event: NodeAllocatableUpdated) -> dict[str, str]:
    """The annotations koord-manager keeps on a Node for what this decision recorded:

    - ``node.koordinator.sh/cpu-normalization-ratio``: the ratio as recorded (two decimals; ``1.00`` when
      normalization is disabled, as koord-manager writes it then);
    - ``node.koordinator.sh/raw-allocatable``: while cpu or memory is amplified (a ratio above 1 in
      ``amplification``), the node's un-amplified cpu and memory allocatable, as the JSON resource list
      Koordinator's node webhook keeps (``{"cpu":"28","memory":"32Gi"}``), read from the decision's ``inputs``
      (the allocatable the calculation started from). Absent otherwise: Koordinator removes it when amplification
      is turned off.
    """
    out: dict[str, str] = {}
    if event.cpu_normalization_ratio:
        out[ANN_CPU_NORMALIZATION_RATIO] = event.cpu_normalization_ratio
    amplified = False
    for resource in AMPLIFIABLE:
        try:
            amplified = amplified or Decimal(event.amplification.get(resource, "1")) > 1
        except InvalidOperation:
            continue  # not a number: nothing was amplified by it
    raw = event.inputs.get("allocatable") if amplified else None
    if isinstance(raw, dict):
        values = {
            resource: format_quantity(resource, amount)
            for resource in AMPLIFIABLE
            if isinstance(amount := raw.get(resource), int) and not isinstance(amount, bool) and amount > 0
        }
        if values:
            out[ANN_RAW_ALLOCATABLE] = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return out


def error_note(errors: Sequence[FieldIssue]) -> str:
    """Field errors as one note: `path: message` each (the message alone where there is no path), `; `-joined."""
    return "; ".join(f"{e.path}: {e.message}" if e.path else e.message for e in errors)


def _rejected(kind: tuple[str, str], ref: ObjectRef, note: str) -> Rendered:
    """The Warning notice on an object (ElasticQuota, PodGroup) refused at admission."""
    regarding = Regarding(api_version=kind[0], kind=kind[1], namespace=ref.namespace, name=ref.name)
    return Rendered(
        notices=[
            Notice(
                regarding=regarding,
                type="Warning",
                reason="Rejected",
                action="Admitting",
                note=fit_note(note),
            )
        ]
    )
