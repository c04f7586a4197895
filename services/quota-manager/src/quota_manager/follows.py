"""Which events change what the quota-manager holds: those that leave the quota tree as it was, and those about the
engine's configuration (ElasticQuotas, quota profiles, nodes), so a fold can pass over the rest at once."""

from __future__ import annotations

from allot_contracts import events as ev

__all__ = ["OBJECT_EVENTS", "TREE_UNCHANGED"]


# Events whose fold leaves the quota tree as it was (what they change is the manager's own bookkeeping): the
# "over since" clocks, moved after every event that changes the tree, already stand after them, whatever the time.
TREE_UNCHANGED: frozenset[type] = frozenset(
    {
        ev.PodPlaced,
        ev.GangGroupPlaced,
        ev.PodReleased,
        ev.PodEnqueued,
        ev.PodRequeued,
        ev.GangGroupReady,
        ev.QuotaWaiting,
        ev.QuotaGroupWaiting,
        ev.QuotaReleased,
        ev.QuotaEvictionEnacted,
        ev.QuotaReclaimBlocked,
    }
)


# The events about the engine's configuration (ElasticQuotas, quota profiles, nodes) and their outcomes (a set of
# final classes: looked up by an event's type).
OBJECT_EVENTS: frozenset[type] = frozenset(
    {
        ev.QuotaApplied,
        ev.QuotaDeleted,
        ev.QuotaRegistered,
        ev.QuotaRejected,
        ev.QuotaRemoved,
        ev.QuotaProfileApplied,
        ev.QuotaProfileDeleted,
        ev.QuotaProfileRegistered,
        ev.QuotaProfileRejected,
        ev.QuotaProfileRemoved,
        ev.NodeRegistered,
        ev.NodeRemoved,
    }
)
