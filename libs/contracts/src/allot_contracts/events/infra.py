"""Infrastructure: timers, dead letters and the configuration each decider runs under."""

from __future__ import annotations

from allot_contracts.events._base import Event

__all__ = [
    "ConfigApplied",
    "ConsumerDeadLettered",
    "TimerFired",
]


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


class ConfigApplied(Event, frozen=True, kw_only=True, tag="config.applied.v1"):
    """A decider (``service`` or ``service@instance``) loaded a configuration different from the last one it
    recorded, and decides under it every trigger after position ``after`` (its checkpoint when it loaded it) until
    its next ``config.applied``. ``config`` is the effective decision configuration as canonical JSON (sorted keys,
    no whitespace), ``hash`` its SHA-256 (hex); ``source`` names where it was read from ("" for the defaults).
    Recorded by the decider's shell before it rebuilds its projection; no service consumes it, replay
    re-derives each decision under the configuration recorded for it."""

    decider: str
    config: str
    hash: str
    after: int
    source: str = ""
