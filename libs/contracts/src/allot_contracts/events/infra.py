"""Infrastructure: timers and dead letters."""

from __future__ import annotations

from allot_contracts.events._base import Event


class TimerFired(Event, frozen=True, kw_only=True, tag="timer.fired.v1"):
    """A service's timer reached a deadline its processor asked for (gang timeouts, quota revoke delays). Time is
    data: decisions taken on a timer use the time recorded on this event, so replay reproduces them."""

    service: str
    due: int


class ConsumerDeadLettered(Event, frozen=True, kw_only=True, tag="consumer.dead_lettered.v1"):
    """A consumer gave up on an event permanently (undecodable or a permanent error). Its checkpoint moved on."""

    consumer: str
    position: int
    event_id: str
    event_type: str
    reason: str
