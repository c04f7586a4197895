"""Leadership: who decides under which term (Kubernetes mode, a ``coordination.k8s.io/v1`` Lease per decider).

A term is the Lease's ``leaseTransitions`` + 1 when its holder took it: it grows with every change of holder. It is
the fencing token of every write the leader makes (``metadata.fence`` of its events, the ``fences`` table checked in
the append transaction, the local validity checked before each API server write). These events are facts about the
deciders themselves; no service consumes them.
"""

from __future__ import annotations

from allot_contracts.events._base import Event

__all__ = [
    "LeaderElected",
    "LeaderWriteRefused",
]


class LeaderElected(Event, frozen=True, kw_only=True, tag="leader.elected.v1"):
    """``holder`` took the lease ``lease`` (namespace/name) of decider ``decider`` with term ``term``; ``previous``
    is the holder it took over from ("" for the first)."""

    decider: str
    lease: str
    holder: str
    term: int
    previous: str = ""


class LeaderWriteRefused(Event, frozen=True, kw_only=True, tag="leader.write_refused.v1"):
    """A write of ``decider`` under a stale term was refused: ``target`` is ``log`` (the append transaction found a
    newer term) or ``api`` (the leader's lease had lapsed before an API server write). Recorded once by the stale
    leader as it steps down; nothing of the refused write was written."""

    decider: str
    holder: str
    term: int
    current: int = 0
    target: str
    detail: str
