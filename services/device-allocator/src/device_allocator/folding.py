"""A fold's quick test of whether an event is one it folds, before its ``match``.

A ``match`` statement tries its class patterns one after another, so an event none of them matches pays a failed
test per pattern, and most events a fold sees are not its own. ``folds_any`` answers that question once per event
type (the answer of ``isinstance``, remembered by exact type), so every event after the first of its type costs one
dictionary lookup.
"""

from __future__ import annotations

from collections.abc import Callable

from allot_contracts import events as ev

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
POD_FOLDS = folds_any(ev.PodSubmitted, ev.PodObserved, ev.PodDeleted, ev.PodBindFailed, ev.QuotaEvicted)
GROUP_FOLDS = folds_any(ev.GangHoldsReleased, ev.GangGroupPlaced, ev.GangGroupUnschedulable)
OUTCOME_FOLDS = folds_any(ev.PodPlaced, ev.PodUnschedulable, ev.PodRequeued, ev.PodReleased, ev.PodRejected)
# the event types ``DeviceAllocator.decide`` decides on (its patterns' classes)
DECIDES = folds_any(
    ev.ReservationResolved,
    ev.PodBindFailed,
    ev.PodDeleted,
    ev.QuotaEvicted,
    ev.GangHoldsReleased,
    ev.PodEvictionEnacted,
    ev.QuotaWaiting,
    ev.QuotaGroupWaiting,
    ev.ReservationGroupResolved,
    ev.ReservationAccepted,
    ev.ReservationDeleted,
    ev.ReservationFailed,
    ev.ReservationRemoved,
    ev.ReservationSucceeded,
    ev.NodeRegistered,
    ev.DevicesReported,
    ev.TopologyReported,
    ev.PodObserved,
    ev.NodeMetricReported,
    ev.NodeMetricRemoved,
)
