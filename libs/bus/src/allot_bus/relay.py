"""The relay: publishes every committed event of the log to JetStream, in position order.

Responsibility: keep the stream a faithful, ordered copy of the log's recent past. PostgreSQL stays the source of
truth; JetStream is transport and a replay buffer (docs/adr/0002-bus.md).

How it stays in order without a cursor of its own: the stream's last event carries ``Allot-Position`` and the event
id, so the relay resumes from there after any restart. Each publish carries ``Nats-Msg-Id`` (the event id;
JetStream drops duplicates within its window) and an expectation of the stream's tail, so the server rejects any
publish that would reorder or skip. After reading the tail, the first publish expects the stream's last *sequence*
(``Nats-Expected-Last-Sequence``): that also holds for an empty or purged stream and for one whose last messages are
not events (published by something else). Once an event has landed, each publish expects the previous event's id
(``Nats-Expected-Last-Msg-Id``), which lets a window of publishes be in flight at once. On a rejection the relay
backs off, re-reads the stream tail and continues from it.

Each message also carries the event's CloudEvents attributes as ``ce-*`` headers (binary content mode,
:func:`allot_bus.wire.cloudevent_headers`), built from the record alone: a few string operations per event.

If the stream was lost (deleted, or the server restarted without its store) it is created again and filled from the
lowest consumer checkpoint, so consumers that lag find what they need; consumers also catch up from PostgreSQL by
position, so nothing depends on JetStream keeping everything. The tail is the newest message that the log holds
(that event id at that position): a message claiming an event the log does not have (forged by anyone who can
publish on the bus, or kept from before a database restore) is logged and looked past, never a reason to purge the
stream. Purging on such a claim would let any publisher wipe the consumers' replay buffer; consumers refuse those
messages anyway (:mod:`allot_bus.provenance`). To drop stale messages after a restore, purge the stream by hand.

An event the server refuses (larger than ``max_payload``, the stream full) is never skipped: the relay logs an error
naming it and retries with backoff, and consumers read the log from PostgreSQL meanwhile.

After each round the relay passes the position it has published through to ``on_published`` (if given): the hook
where :class:`allot_eventstore.anchor_log.Sealer` signs checkpoints of the log (docs/security.md).

Concurrency: one relay per installation (a singleton Deployment / one supervised process). Two relays would not
corrupt anything (ids and expectations keep the stream consistent), only waste work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats
from nats.js import JetStreamContext
from nats.js import api as jsapi
from nats.js import errors as jserrors

from allot_bus import wire
from allot_bus.adapters.nats import (
    client_of,
    ensure_stream,
    is_missing,
    is_refused,
    is_wrong_last,
    max_payload,
    message_size,
    stream_limits,
)
from allot_bus.adapters.publish import AsyncPublisher
from allot_bus.names import (
    HEADER_EXPECTED_LAST_MSG_ID,
    HEADER_MSG_ID,
    HEADER_POSITION,
    HEADER_STREAM,
    HEADER_TYPE,
    BusNames,
)
from allot_bus.outage import Outage
from allot_contracts.envelope import RecordedEvent
from allot_contracts.errors import TransientError, Unavailable
from allot_eventstore.protocol import EventStore

log = logging.getLogger("allot.relay")

HEADER_EXPECTED_LAST_SEQUENCE = "Nats-Expected-Last-Sequence"
TAIL_SCAN = (
    64  # messages without Allot-Position looked past at the stream's tail before giving up on finding ours
)
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0
REFUSED_BACKOFF_MAX_S = 30.0
PUBLISH_TIMEOUT_S = 10.0
HEADER_ALLOWANCE = (
    4096  # headers are far smaller: a message within max_payload by this much needs no exact size
)


class Refused(Unavailable):
    """The server refuses an event as things stand (too large, stream full): the relay waits at it, loudly."""


@dataclass(frozen=True)
class _Tail:
    """Where publishing resumes: after log ``position``. The next publish expects the stream's last message id to be
    ``last_id`` or, when that is not known (just after reading the stream), its last sequence to be ``last_seq``."""

    position: int
    last_id: str | None = None
    last_seq: int = 0

    def expectation(self) -> dict[str, str]:
        if self.last_id is not None:
            return {HEADER_EXPECTED_LAST_MSG_ID: self.last_id}
        return {HEADER_EXPECTED_LAST_SEQUENCE: str(self.last_seq)}


@dataclass(frozen=True)
class _Message:
    record: RecordedEvent
    payload: bytes
    headers: dict[str, str]

    @property
    def size(self) -> int:
        return message_size(self.payload, self.headers)


@dataclass(eq=False)
class Relay:
    store: EventStore
    js: JetStreamContext
    names: BusNames
    batch: int = field(default=1000, kw_only=True)
    window: int = field(default=512, kw_only=True)
    poll_interval: float = field(default=1.0, kw_only=True)
    on_published: Callable[[int], Awaitable[None]] | None = field(default=None, kw_only=True)
    published_position: int = field(default=0, init=False)
    published_total: int = field(default=0, init=False)
    # publish requests sent, including ones the server refused or did not answer
    sent: int = field(default=0, init=False)
    _tail: _Tail | None = field(default=None, init=False)
    _publisher: AsyncPublisher | None = field(default=None, init=False)

    async def _last_event_in_stream(self, state: jsapi.StreamState) -> tuple[int, str] | None:
        """Position and id of the stream's last event that the log holds (that id at that position), looking past
        up to ``TAIL_SCAN`` messages that are not: others' messages, and claims the log does not back (a forged
        message, or one kept from a database that was restored to an older backup). Those are left in place and
        logged; consumers refuse them (docs/adr/0010-only-logged-events-act.md)."""
        if not state.messages or not state.last_seq:
            return None
        lowest = max(state.first_seq or 1, state.last_seq - TAIL_SCAN + 1, 1)
        for seq in range(state.last_seq, lowest - 1, -1):
            try:
                msg = await self.js.get_msg(self.names.stream, seq=seq)
            except jserrors.NotFoundError:
                continue
            headers = msg.headers or {}
            position, event_id = headers.get(HEADER_POSITION, ""), headers.get(HEADER_MSG_ID)
            if not (position.isdigit() and event_id):
                continue
            if (await self.store.positions_of([event_id])).get(event_id) == int(position):
                return int(position), event_id
            log.warning(
                "stream %s: message %d claims position %s (event id %s), which is not in the log; left in place "
                "and looked past (consumers refuse it): a forged message, or one kept from a restored database",
                self.names.stream,
                seq,
                position,
                event_id,
            )
        return None

    async def _start_position(self) -> int:
        """Where to start filling a stream with no event of ours: the lowest consumer checkpoint (0 if none)."""
        checkpoints = [p for name, p in (await self.store.checkpoints()).items() if not name.startswith("_")]
        return min(checkpoints) if checkpoints else 0

    async def _resolve_tail(self) -> _Tail:
        state = (await ensure_stream(self.js, self.names)).state
        last_seq = state.last_seq or 0
        last = await self._last_event_in_stream(state)
        if last is None:
            return _Tail(await self._start_position(), last_seq=last_seq)
        return _Tail(last[0], last_seq=last_seq)

    async def publish_pending(self) -> int:
        """Publish what the log has beyond the stream's tail, up to ``batch`` events. Returns how many."""
        if self._tail is None:
            self._tail = await self._resolve_tail()
        events = await self.store.read(after=self._tail.position, limit=self.batch)
        done = 0
        try:
            while done < len(events):
                # until one event has landed the tail is known by sequence only: publish one at a time
                size = self.window if self._tail.last_id is not None else 1
                messages = self._fitting(self._messages(events[done : done + size], self._tail))
                self._tail = await self._publish(messages, self._tail)
                self.published_position = self._tail.position
                done += len(messages)
        except BaseException:
            self._tail = None  # re-read the stream tail before trying again
            raise
        finally:
            self.published_total += done
        return done

    def _messages(self, chunk: list[RecordedEvent], tail: _Tail) -> list[_Message]:
        """The chunk as messages, each expecting the one before it (the first expects ``tail``)."""
        messages = []
        expectation = tail.expectation()
        prefix = self.names.prefix
        for record in chunk:
            headers = {
                HEADER_MSG_ID: record.event_id,
                HEADER_POSITION: str(record.position),
                HEADER_TYPE: record.tag,
                HEADER_STREAM: record.stream_id,
                **wire.cloudevent_headers(record, prefix),
                **expectation,
            }
            headers.update({k: v for k, v in record.metadata.items() if k in ("traceparent", "tracestate")})
            messages.append(_Message(record, wire.encode(record), headers))
            expectation = {HEADER_EXPECTED_LAST_MSG_ID: record.event_id}
        return messages

    def _fitting(self, messages: list[_Message]) -> list[_Message]:
        """The messages before the first one larger than the server's ``max_payload``; ``Refused`` if that is the
        first (sending it would make the server drop the connection)."""
        limit = max_payload(self.js)
        for index, message in enumerate(messages):
            if len(message.payload) + HEADER_ALLOWANCE > limit and message.size > limit:
                if index:
                    return messages[:index]
                record = message.record
                raise Refused(
                    f"event at position {record.position} ({record.type}, {message.size} bytes) is larger than the "
                    f"NATS server's max_payload ({limit} bytes); it stays in the log and the relay waits at it "
                    f"until max_payload is raised"
                )
        return messages

    async def _publish(self, messages: list[_Message], tail: _Tail) -> _Tail:
        """Publish the messages at once (asynchronous publishes, acks awaited together); returns the new tail."""
        if self._publisher is None:
            self._publisher = AsyncPublisher(client_of(self.js))
            await self._publisher.start()
        publisher = self._publisher
        futures: list[asyncio.Future[Any]] = []
        try:
            for m in messages:
                self.sent += 1
                futures.append(
                    await publisher.publish(self.names.subject(m.record.type), m.payload, headers=m.headers)
                )
            _, pending = await asyncio.wait(futures, timeout=PUBLISH_TIMEOUT_S)
        except BaseException:
            publisher.forget(futures)
            raise
        publisher.forget(list(pending))  # the tail is re-read before the next attempt
        failures = [(m, f.exception()) for m, f in zip(messages, futures, strict=True) if f not in pending]
        for message, future in zip(messages, futures, strict=True):
            if future in pending:
                raise Unavailable(
                    f"no acknowledgement for the event at position {message.record.position} within "
                    f"{PUBLISH_TIMEOUT_S:.0f}s"
                )
        for (
            message,
            exc,
        ) in failures:  # every outcome was read above, so none is reported as "never retrieved"
            if exc is not None:
                raise await self._publish_error(message, exc) from exc
        last, ack = messages[-1].record, futures[-1].result()
        if tail.last_id is None and ack.duplicate:
            return _Tail(last.position, last_seq=tail.last_seq)  # not stored again: the stream did not move
        return _Tail(last.position, last_id=last.event_id)

    async def _publish_error(self, message: _Message, exc: BaseException) -> Unavailable:
        if is_wrong_last(exc):
            return Unavailable(f"stream tail moved under the relay: {exc}")
        if is_missing(exc):
            return Unavailable(f"stream {self.names.stream} is missing: {exc}")
        if is_refused(exc):
            record = message.record
            limits = await stream_limits(self.js, self.names)
            return Refused(
                f"stream {self.names.stream} refuses the event at position {record.position} ({record.type}, "
                f"{message.size} bytes): {exc}; stream limits: {limits}; it stays in the log and the relay waits "
                f"at it until the limits are raised or space is freed"
            )
        return Unavailable(f"publish failed: {exc}")

    async def run(self, stop: asyncio.Event, wake: asyncio.Event | None = None) -> None:
        woken = wake if wake is not None else asyncio.Event()
        attempt = 0
        outage = Outage("relay", log)  # one warning per outage of the log or the bus, not one per retry
        while not stop.is_set():
            woken.clear()  # before reading: a notification from now on triggers another round
            try:
                published = await self.publish_pending()
                attempt = 0
                if self.on_published is not None and self.published_position:
                    await self.on_published(self.published_position)
            except Refused as exc:
                attempt += 1
                delay = _backoff(attempt, REFUSED_BACKOFF_MAX_S)
                log.error("relay: %s (retrying in %.1fs)", exc, delay)
                await _sleep_or_stop(stop, delay)
                continue
            except (TimeoutError, TransientError, nats.errors.Error, jserrors.Error, OSError) as exc:
                attempt += 1
                delay = max(getattr(exc, "delay", None) or 0.0, _backoff(attempt, BACKOFF_MAX_S))
                outage.failed("cannot relay the log to NATS", exc, retry_in=delay)
                await _sleep_or_stop(stop, delay)
                continue
            outage.over()
            if published >= self.batch:
                continue
            await _sleep_or_stop(stop, self.poll_interval, also=woken)


def _backoff(attempt: int, cap: float) -> float:
    return min(BACKOFF_FIRST_S * 2.0 ** (attempt - 1), cap)


async def _sleep_or_stop(stop: asyncio.Event, delay: float, *, also: asyncio.Event | None = None) -> None:
    waiters = [asyncio.ensure_future(stop.wait())]
    if also is not None:
        waiters.append(asyncio.ensure_future(also.wait()))
    try:
        await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
