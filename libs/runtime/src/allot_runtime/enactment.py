"""Recording what the Kubernetes API server answered to a decision (docs/kubernetes.md, "The enactment ledger")."""

from __future__ import annotations

import contextlib
from typing import Any

from allot_contracts.envelope import NewEvent, RecordedEvent, derived_event_id
from allot_contracts.errors import AlreadyProcessed
from allot_contracts.events import Event


async def record_outcome(
    store: Any, *, producer: str, decision: RecordedEvent, stream: str, event: Event
) -> None:
    """Append ``event`` as the one outcome of ``decision``, recorded by ``producer`` (the component that called the
    API server). Its id is derived from the decision's and its causation is the decision, so a call repeated after a
    crash or a lost answer records nothing twice."""
    with contextlib.suppress(AlreadyProcessed):
        await store.append([outcome_event(producer, decision, stream, event)], producer=producer)


def outcome_event(producer: str, decision: RecordedEvent, stream: str, event: Event) -> NewEvent:
    """``event`` as the one outcome of ``decision`` by ``producer``: its id derived from the decision's, the decision
    its causation, and the decision's correlation (or the decision itself) its correlation."""
    return NewEvent(
        stream_id=stream,
        event=event,
        event_id=derived_event_id(producer, decision.event_id, 0),
        causation_id=decision.event_id,
        correlation_id=decision.correlation_id or decision.event_id,
    )
