"""Allot's event log: an append-only, hash-chained log of every decision, on PostgreSQL (or in memory)."""

from allot_eventstore.clock import Clock, ManualClock, system_clock
from allot_eventstore.memory import InMemoryEventStore
from allot_eventstore.protocol import AppendResult, Checkpoint, EventStore, Fence, Snapshot
from allot_eventstore.verify import ChainReport, verify_chain

__all__ = [
    "AppendResult",
    "ChainReport",
    "Checkpoint",
    "Clock",
    "EventStore",
    "Fence",
    "InMemoryEventStore",
    "ManualClock",
    "Snapshot",
    "system_clock",
    "verify_chain",
]
