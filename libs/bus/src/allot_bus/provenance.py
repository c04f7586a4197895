"""Only logged events act: a delivered message is checked against the log before anything is decided on it.

Responsibility: tell, for each message a consumer was delivered, whether it is an event the log holds at the position
and with the hash it claims, and if not, why (docs/adr/0010-only-logged-events-act.md).

NATS is transport, not truth: anybody who can publish on the bus can put a well-formed message on a subject. The
log's hash chain makes the check cheap: the hash of the event at position *p* covers the previous hash, every
envelope field (position, id, stream, type, producer, time, …) and the payload, so a message is the logged event iff
``chain_hash(hash(p-1), header(message), payload(message)) == hash(p)``. One query per delivered batch reads the
hashes of the claimed positions and of the positions before them (primary-key lookups); the rest is one SHA-256 per
message. Trace context (``metadata``) is not hashed and not a decision input.

A message that passes is the logged event, but it may still not be a fresh delivery: JetStream redelivers (at least
once, after a restart, a nak), and a consumer's catch-up from PostgreSQL overlaps what JetStream then delivers. Those
are in the stream's order (the relay publishes positions in order, each publish expecting the stream's tail) and the
consumer skips what it has already folded, as before. A logged event published *again* lands later in the stream
than events after it: a stream sequence above one already seen with a position at or below that message's. That is
a replay (:class:`StreamOrder`), refused and recorded too, unless the stream itself was rewritten in between (the
relay refills a lost or purged stream from the oldest checkpoint): then the messages it has kept all start after the
highest sequence seen, and the order starts again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from allot_contracts.envelope import (
    GENESIS_HASH,
    NewEvent,
    RecordedEvent,
    derived_event_id,
    stream_id,
)
from allot_contracts.events import SecurityMessageRefused
from allot_eventstore.protocol import EventStore


class Delivered(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded message and where JetStream had it: ``sequence`` in the stream, ``delivered`` times so far;
    ``handle`` is the transport's message (to acknowledge it)."""

    record: RecordedEvent
    subject: str
    sequence: int
    delivered: int
    handle: Any = None


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """A message not acted on. ``logged_hash`` is what the log holds at the claimed position (None when nothing);
    ``logged_position`` where it holds the claimed event id (0 when nowhere)."""

    reason: str
    message: Delivered
    logged_hash: bytes | None = None
    logged_position: int = 0
    detail: str = ""


def hashes_to_read(records: Sequence[RecordedEvent]) -> set[int]:
    """The positions whose hashes prove or disprove the records: each claimed position and the one before it."""
    wanted: set[int] = set()
    for record in records:
        if record.position > 0:
            wanted.add(record.position)
            if record.position > 1:
                wanted.add(record.position - 1)
    return wanted


def judge(record: RecordedEvent, hashes: dict[int, bytes]) -> tuple[str, bytes | None] | None:
    """None when the record is the event the log holds at its position; else (reason, hash the log holds there)."""
    logged = hashes.get(record.position) if record.position > 0 else None
    if logged is None:
        return "not_in_log", None
    if logged != record.hash:
        return "wrong_hash", logged
    previous = GENESIS_HASH if record.position == 1 else hashes.get(record.position - 1)
    if previous is None or not record.hash_follows(previous):
        return "altered", logged
    return None


class StreamOrder:
    """The highest stream sequence seen with a logged event, and that event's position. The relay publishes
    positions in order, so a logged event delivered for the first time above that sequence with a position not
    above that position was published again by something else."""

    def __init__(self) -> None:
        self.sequence = 0
        self.position = 0

    def replayed(self, message: Delivered) -> bool:
        return message.sequence > self.sequence and message.record.position <= self.position

    def see(self, message: Delivered) -> None:
        if message.sequence > self.sequence or (message.delivered == 1 and message.sequence < self.sequence):
            # above: the stream moves on; below, delivered for the first time: a new stream numbers from 1 again
            self.sequence, self.position = message.sequence, message.record.position

    def restart(self, message: Delivered) -> None:
        self.sequence, self.position = message.sequence, message.record.position


FirstSequence = Callable[[], Awaitable[int]]


async def vouch(
    store: EventStore, messages: Sequence[Delivered], order: StreamOrder, first_sequence: FirstSequence
) -> tuple[list[Delivered], list[Refusal]]:
    """Split a delivered batch into the logged events (in delivery order) and the refusals. One query reads the
    hashes; a second only when something is refused (where the log holds the claimed ids); the stream's first
    sequence (``first_sequence``) only when a logged event looks replayed."""
    hashes = await store.hashes(hashes_to_read([m.record for m in messages]))
    accepted: list[Delivered] = []
    refused: list[Refusal] = []
    for message in messages:
        verdict = judge(message.record, hashes)
        if verdict is not None:
            refused.append(Refusal(reason=verdict[0], message=message, logged_hash=verdict[1]))
            continue
        if order.replayed(message):
            if (
                await first_sequence() > order.sequence
            ):  # everything seen so far is gone: the stream was rewritten
                order.restart(message)
            else:
                refused.append(
                    Refusal(
                        reason="replayed",
                        message=message,
                        logged_hash=message.record.hash,
                        logged_position=message.record.position,
                        detail=f"stream sequence {message.sequence} after sequence {order.sequence}, which "
                        f"carried position {order.position}",
                    )
                )
                continue
        order.see(message)
        accepted.append(message)
    if refused:
        refused = await _located(store, refused)
    return accepted, refused


async def _located(store: EventStore, refused: list[Refusal]) -> list[Refusal]:
    """A refused message whose event id the log holds at another position claims the wrong position."""
    where = await store.positions_of([r.message.record.event_id for r in refused if r.reason != "replayed"])
    located = []
    for refusal in refused:
        at = where.get(refusal.message.record.event_id, 0)
        if refusal.reason == "replayed" or not at:
            located.append(refusal)
            continue
        reason = "wrong_position" if at != refusal.message.record.position else refusal.reason
        located.append(msgspec.structs.replace(refusal, reason=reason, logged_position=at))
    return located


def warning(consumer: str, refusal: Refusal) -> NewEvent:
    """The ``security.message_refused`` a consumer records for a refusal. Its id is derived from the message (stream
    sequence and claimed id), so a redelivery of the same message records nothing new."""
    message, record = refusal.message, refusal.message.record
    return refused_message(
        consumer,
        SecurityMessageRefused(
            consumer=consumer,
            reason=refusal.reason,
            subject=message.subject,
            stream_sequence=message.sequence,
            claimed_position=record.position,
            claimed_event_id=record.event_id,
            claimed_type=record.type,
            claimed_stream=record.stream_id,
            claimed_producer=record.producer,
            claimed_hash=record.hash.hex(),
            logged_hash=refusal.logged_hash.hex() if refusal.logged_hash is not None else "",
            logged_position=refusal.logged_position,
            detail=refusal.detail,
        ),
        key=record.event_id,
    )


def refused_message(consumer: str, event: SecurityMessageRefused, *, key: str) -> NewEvent:
    """A warning on the consumer's ``security`` stream, identified by the message (sequence, ``key``, reason)."""
    trigger = f"{event.stream_sequence}/{key}/{event.reason}"
    return NewEvent(
        stream_id=stream_id("security", consumer),
        event=event,
        event_id=derived_event_id(f"{consumer}.refused", trigger, 0),
    )


def describe(refusal: Refusal) -> str:
    """One line for the log."""
    record = refusal.message.record
    logged = refusal.logged_hash.hex()[:16] if refusal.logged_hash is not None else "nothing"
    where = (
        f", the log holds that event at position {refusal.logged_position}" if refusal.logged_position else ""
    )
    return (
        f"refused a message on {refusal.message.subject} (stream sequence {refusal.message.sequence}): "
        f"{refusal.reason}: it claims {record.type} {record.event_id} at position {record.position} with hash "
        f"{record.hash.hex()[:16]}, the log holds {logged} there{where}; nothing was decided on it"
    )
