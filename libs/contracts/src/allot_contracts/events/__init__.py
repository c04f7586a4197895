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

from allot_contracts.events._base import Event, FieldIssue, ObjectRef
from allot_contracts.events.cluster import (
    DevicesRejected,
    DevicesRemoved,
    DevicesReported,
    NodeRegistered,
    NodeRejected,
    NodeRemoved,
    TopologyRejected,
    TopologyRemoved,
    TopologyReported,
)
from allot_contracts.events.descheduling import DeschedulerCandidate, DeschedulerNode, DeschedulerRound
from allot_contracts.events.enactment import (
    NodeStatusEnacted,
    NodeStatusEnactmentFailed,
    QuotaEvictionEnacted,
    QuotaEvictionEnactmentFailed,
    QuotaStatusEnacted,
    QuotaStatusEnactmentFailed,
)
from allot_contracts.events.gangs import (
    GangGroupAdmitted,
    GangGroupPlaced,
    GangGroupReady,
    GangGroupUnschedulable,
    GangHoldsReleased,
    GangMemberWaiting,
    GangRetryRequested,
    GangRetryScheduled,
    GangTimedOut,
    PodGroupRejected,
    QuotaGroupAdmitted,
    QuotaGroupWaiting,
    ReservationGroupResolved,
)
from allot_contracts.events.infra import ConfigApplied, ConsumerDeadLettered, TimerFired
from allot_contracts.events.inputs import (
    DeviceApplied,
    DeviceDeleted,
    NodeApplied,
    NodeDeleted,
    ObjectIgnored,
    PodDeleted,
    PodGroupApplied,
    PodGroupDeleted,
    PodObserved,
    PodPhaseObserved,
    PodSubmitted,
    PriorityClassApplied,
    PriorityClassDeleted,
    QuotaApplied,
    QuotaDeleted,
    QuotaProfileApplied,
    QuotaProfileDeleted,
    TopologyApplied,
    TopologyDeleted,
    WorkloadExpanded,
)
from allot_contracts.events.leases import LeaderElected, LeaderWriteRefused
from allot_contracts.events.nodeside import (
    ColocationConfigApplied,
    ColocationConfigDeleted,
    ColocationConfigRejected,
    ColocationProfileApplied,
    ColocationProfileDeleted,
    NodeAllocatableUpdated,
    NodeHeartbeat,
    NodeHeartbeatLost,
    NodeHeartbeatResumed,
    NodeMetricApplied,
    NodeMetricDeleted,
    NodeMetricRejected,
    NodeMetricRemoved,
    NodeMetricReported,
)
from allot_contracts.events.pods import (
    PodBindFailed,
    PodBindRequested,
    PodBound,
    PodEnqueued,
    PodPlaced,
    PodRejected,
    PodReleased,
    PodRequeued,
    PodUnschedulable,
    QosRecorded,
    ReservationResolved,
)
from allot_contracts.events.preemption import PreemptionDecided, PreemptionVictim
from allot_contracts.events.qos import (
    PodEvicted,
    PodEvictionEnacted,
    QosApplied,
    QosDriftCorrected,
    QosNodePlanRecorded,
    QosPlanRecorded,
    QosPlanRemoved,
    QosReconciled,
    QosUsageSampled,
)
from allot_contracts.events.quota import (
    QuotaAdmitted,
    QuotaEvicted,
    QuotaProfileRegistered,
    QuotaProfileRejected,
    QuotaProfileRemoved,
    QuotaRegistered,
    QuotaRejected,
    QuotaReleased,
    QuotaRemoved,
    QuotaStatusPublished,
    QuotaStatusSynced,
    QuotaWaiting,
)
from allot_contracts.events.reservations import (
    MigrationAborted,
    MigrationApplied,
    MigrationCondition,
    MigrationDeleted,
    MigrationEvicted,
    MigrationEvictionFailed,
    MigrationEvictionRequested,
    MigrationFailed,
    MigrationPending,
    MigrationRejected,
    MigrationRemoved,
    MigrationRunning,
    MigrationSucceeded,
    ReservationAccepted,
    ReservationApplied,
    ReservationCandidate,
    ReservationDeleted,
    ReservationFailed,
    ReservationMatch,
    ReservationPlaced,
    ReservationRejected,
    ReservationReleased,
    ReservationRemoved,
    ReservationSucceeded,
    ReservationUnschedulable,
)
from allot_contracts.events.security import SecurityMessageRefused

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
    | PodPhaseObserved
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
    | PriorityClassApplied
    | PriorityClassDeleted
    | WorkloadExpanded
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
    | QosPlanRecorded
    | QosPlanRemoved
    | QosNodePlanRecorded
    | QosUsageSampled
    | QosApplied
    | QosDriftCorrected
    | QosReconciled
    | PodEvicted
    | PodEvictionEnacted
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
    | PodGroupRejected
    | GangRetryRequested
    | PreemptionDecided
    | MigrationAborted
    | MigrationApplied
    | MigrationCondition
    | MigrationDeleted
    | MigrationEvicted
    | MigrationEvictionFailed
    | MigrationEvictionRequested
    | MigrationFailed
    | MigrationPending
    | MigrationRejected
    | MigrationRemoved
    | MigrationRunning
    | MigrationSucceeded
    | ReservationAccepted
    | ReservationApplied
    | ReservationDeleted
    | ReservationFailed
    | ReservationPlaced
    | ReservationRejected
    | ReservationReleased
    | ReservationRemoved
    | ReservationSucceeded
    | ReservationUnschedulable
    | TimerFired
    | ConsumerDeadLettered
    | ConfigApplied
    | ColocationConfigApplied
    | ColocationConfigDeleted
    | ColocationConfigRejected
    | ColocationProfileApplied
    | ColocationProfileDeleted
    | NodeAllocatableUpdated
    | NodeHeartbeat
    | NodeHeartbeatLost
    | NodeHeartbeatResumed
    | NodeMetricApplied
    | NodeMetricDeleted
    | NodeMetricRejected
    | NodeMetricRemoved
    | NodeMetricReported
    | DeschedulerRound
    | LeaderElected
    | LeaderWriteRefused
    | SecurityMessageRefused
    | QuotaStatusEnacted
    | QuotaStatusEnactmentFailed
    | QuotaEvictionEnacted
    | QuotaEvictionEnactmentFailed
    | NodeStatusEnacted
    | NodeStatusEnactmentFailed
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


__all__ = [
    "ALL_EVENT_TYPES",
    "AnyEvent",
    "ColocationConfigApplied",
    "ColocationConfigDeleted",
    "ColocationConfigRejected",
    "ColocationProfileApplied",
    "ColocationProfileDeleted",
    "ConfigApplied",
    "ConsumerDeadLettered",
    "DeviceApplied",
    "DeviceDeleted",
    "DevicesRejected",
    "DevicesRemoved",
    "DevicesReported",
    "Event",
    "FieldIssue",
    "GangGroupAdmitted",
    "GangGroupPlaced",
    "GangGroupReady",
    "GangGroupUnschedulable",
    "GangHoldsReleased",
    "GangMemberWaiting",
    "GangRetryRequested",
    "GangRetryScheduled",
    "GangTimedOut",
    "LeaderElected",
    "LeaderWriteRefused",
    "MigrationAborted",
    "MigrationApplied",
    "MigrationCondition",
    "MigrationDeleted",
    "MigrationEvicted",
    "MigrationEvictionFailed",
    "MigrationEvictionRequested",
    "MigrationFailed",
    "MigrationPending",
    "MigrationRejected",
    "MigrationRemoved",
    "MigrationRunning",
    "MigrationSucceeded",
    "NodeAllocatableUpdated",
    "NodeApplied",
    "NodeDeleted",
    "NodeHeartbeat",
    "NodeHeartbeatLost",
    "NodeHeartbeatResumed",
    "NodeMetricApplied",
    "NodeMetricDeleted",
    "NodeMetricRejected",
    "NodeMetricRemoved",
    "NodeMetricReported",
    "DeschedulerCandidate",
    "DeschedulerNode",
    "DeschedulerRound",
    "NodeRegistered",
    "NodeRejected",
    "NodeRemoved",
    "ObjectIgnored",
    "ObjectRef",
    "PodBindFailed",
    "PodBindRequested",
    "PodBound",
    "PodDeleted",
    "PodEnqueued",
    "PodEvicted",
    "PodEvictionEnacted",
    "PodGroupApplied",
    "PodGroupDeleted",
    "PodGroupRejected",
    "PodObserved",
    "PodPhaseObserved",
    "PodPlaced",
    "PodRejected",
    "PodReleased",
    "PodRequeued",
    "PodSubmitted",
    "PriorityClassApplied",
    "PriorityClassDeleted",
    "PodUnschedulable",
    "PreemptionDecided",
    "PreemptionVictim",
    "SecurityMessageRefused",
    "QosApplied",
    "QosDriftCorrected",
    "QosNodePlanRecorded",
    "QosPlanRecorded",
    "QosPlanRemoved",
    "QosReconciled",
    "QosRecorded",
    "QosUsageSampled",
    "QuotaAdmitted",
    "QuotaApplied",
    "QuotaDeleted",
    "QuotaEvicted",
    "QuotaGroupAdmitted",
    "QuotaGroupWaiting",
    "QuotaProfileApplied",
    "QuotaProfileDeleted",
    "QuotaProfileRegistered",
    "QuotaProfileRejected",
    "QuotaProfileRemoved",
    "QuotaRegistered",
    "QuotaRejected",
    "QuotaReleased",
    "QuotaRemoved",
    "QuotaStatusPublished",
    "QuotaStatusSynced",
    "QuotaWaiting",
    "ReservationAccepted",
    "ReservationApplied",
    "ReservationCandidate",
    "ReservationDeleted",
    "ReservationFailed",
    "ReservationGroupResolved",
    "ReservationMatch",
    "ReservationPlaced",
    "ReservationRejected",
    "ReservationReleased",
    "ReservationRemoved",
    "ReservationResolved",
    "ReservationSucceeded",
    "ReservationUnschedulable",
    "TimerFired",
    "TopologyApplied",
    "TopologyDeleted",
    "TopologyRejected",
    "TopologyRemoved",
    "TopologyReported",
    "WorkloadExpanded",
    "event_class",
    "split_tag",
    "tag_of",
    "type_of",
]
