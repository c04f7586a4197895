"""Which events change what the quota-manager holds: those that leave the quota tree as it was, and those about the
engine's configuration (ElasticQuotas, quota profiles, nodes), so a fold can pass over the rest at once."""

from __future__ import annotations

from allot_contracts.events import (
    GangGroupPlaced,
    GangGroupReady,
    NodeRegistered,
    NodeRemoved,
    PodEnqueued,
    PodPlaced,
    PodReleased,
    PodRequeued,
    QuotaApplied,
    QuotaDeleted,
    QuotaEvictionEnacted,
    QuotaGroupWaiting,
    QuotaProfileApplied,
    QuotaProfileDeleted,
    QuotaProfileRegistered,
    QuotaProfileRejected,
    QuotaProfileRemoved,
    QuotaReclaimBlocked,
    QuotaRegistered,
    QuotaRejected,
    QuotaReleased,
    QuotaRemoved,
    QuotaWaiting,
)

__all__ = ["OBJECT_EVENTS", "TREE_UNCHANGED"]


# Events whose fold leaves the quota tree as it was (what they change is the manager's own bookkeeping): the
# "over since" clocks, moved after every event that changes the tree, already stand after them, whatever the time.
TREE_UNCHANGED: frozenset[type] = frozenset(
    {
        PodPlaced,
        GangGroupPlaced,
        PodReleased,
        PodEnqueued,
        PodRequeued,
        GangGroupReady,
        QuotaWaiting,
        QuotaGroupWaiting,
        QuotaReleased,
        QuotaEvictionEnacted,
        QuotaReclaimBlocked,
    }
)


# The events about the engine's configuration (ElasticQuotas, quota profiles, nodes) and their outcomes.
OBJECT_EVENTS = (
    QuotaApplied,
    QuotaDeleted,
    QuotaRegistered,
    QuotaRejected,
    QuotaRemoved,
    QuotaProfileApplied,
    QuotaProfileDeleted,
    QuotaProfileRegistered,
    QuotaProfileRejected,
    QuotaProfileRemoved,
    NodeRegistered,
    NodeRemoved,
)
