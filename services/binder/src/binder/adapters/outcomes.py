"""The enactment ledger's writing side: find the committed decision a call carries out, and record the API server's
answer to it once (docs/kubernetes.md, "The enactment ledger").

An outcome's event id is derived from its decision's (producer ``binder.kube``, index 0), its causation is the
decision, so a call repeated after a crash or a lost answer records nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from allot_contracts.envelope import RecordedEvent
from allot_contracts.events import Event
from allot_runtime.enactment import record_outcome as recorded

PRODUCER = "binder.kube"


async def latest_decision(
    store: Any, stream: str, kind: str, producer: str, same: Callable[[RecordedEvent], bool]
) -> RecordedEvent | None:
    """The latest committed ``kind`` decision of ``producer`` on ``stream`` when ``same`` says it is the one in the
    projection; None when it is not committed yet or a newer decision supersedes it."""
    history: list[RecordedEvent] = await store.read_stream(stream)
    for record in reversed(history):
        if record.type == kind and record.producer == producer:
            return record if same(record) else None
    return None


async def record_outcome(store: Any, *, decision: RecordedEvent, stream: str, event: Event) -> None:
    """Append ``event`` as the one outcome of ``decision`` (already recorded before a restart: nothing)."""
    await recorded(store, producer=PRODUCER, decision=decision, stream=stream, event=event)
