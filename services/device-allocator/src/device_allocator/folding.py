"""A fold's quick test of whether an event is one it folds, before its ``match``.

A ``match`` statement tries its class patterns one after another, so an event none of them matches pays a failed
test per pattern, and most events a fold sees are not its own. ``folds_any`` answers that question once per event
type (the answer of ``isinstance``, remembered by exact type), so every event after the first of its type costs one
dictionary lookup.
"""

from __future__ import annotations

from collections.abc import Callable

from allot_contracts.events import (
    DevicesReported,
    GangGroupPlaced,
    GangGroupUnschedulable,
    GangHoldsReleased,
    NodeMetricRemoved,
    NodeMetricReported,
    NodeRegistered,
    PodBindFailed,
    PodDeleted,
    PodEvictionEnacted,
    PodObserved,
    PodPlaced,
    PodRejected,
    PodReleased,
    PodRequeued,
    PodSubmitted,
    PodUnschedulable,
    QuotaEvicted,
    QuotaGroupWaiting,
    QuotaWaiting,
    ReservationAccepted,
    ReservationDeleted,
    ReservationFailed,
    ReservationGroupResolved,
    ReservationRemoved,
    ReservationResolved,
    ReservationSucceeded,
    TopologyReported,
)

__all__ = ["DECIDES", "GROUP_FOLDS", "OUTCOME_FOLDS", "POD_FOLDS", "folds_any"]


def folds_any(*classes: type) -> Callable[[object], bool]:
    """``event -> isinstance(event, classes)``, remembered per exact type of ``event``."""
    known: dict[type, bool] = {}

    def test(event: object) -> bool:
        kind = type(event)
        got = known.get(kind)
        if got is None:
            got = known[kind] = isinstance(event, classes)
        return got

    return test


# the event types each fold of ``DeviceAllocator.evolve`` matches (its patterns' classes)
POD_FOLDS = folds_any(PodSubmitted, PodObserved, PodDeleted, PodBindFailed, QuotaEvicted)
GROUP_FOLDS = folds_any(GangHoldsReleased, GangGroupPlaced, GangGroupUnschedulable)
OUTCOME_FOLDS = folds_any(PodPlaced, PodUnschedulable, PodRequeued, PodReleased, PodRejected)
# the event types ``DeviceAllocator.decide`` decides on (its patterns' classes)
DECIDES = folds_any(
    ReservationResolved,
    PodBindFailed,
    PodDeleted,
    QuotaEvicted,
    GangHoldsReleased,
    PodEvictionEnacted,
    QuotaWaiting,
    QuotaGroupWaiting,
    ReservationGroupResolved,
    ReservationAccepted,
    ReservationDeleted,
    ReservationFailed,
    ReservationRemoved,
    ReservationSucceeded,
    NodeRegistered,
    DevicesReported,
    TopologyReported,
    PodObserved,
    NodeMetricReported,
    NodeMetricRemoved,
)
