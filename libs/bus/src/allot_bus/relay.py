"""The relay: publishes every committed event of the log to JetStream, in position order.

Responsibility: keep the stream a faithful, ordered copy of the log's recent past. PostgreSQL stays the source of
truth; JetStream is transport and a replay buffer (docs/adr/0002-bus.md).

How it stays in order without a cursor of its own: the stream's last message carries ``Allot-Position`` and the
event id, so the relay resumes from there after any restart. Each publish carries ``Nats-Msg-Id`` (the event id;
JetStream drops duplicates within its window) and ``Nats-Expected-Last-Msg-Id`` (the previous event's id), so the
server rejects any publish that would reorder or skip. On such a rejection the relay re-reads the stream tail and
continues from it. If the stream was lost (server restarted without its store) it is created again and filled from
the lowest consumer checkpoint, so consumers that lag find what they need; consumers also catch up from
PostgreSQL by position, so nothing depends on JetStream keeping everything. If the stream is *ahead* of the log (a
restored database), it is purged and refilled: the log wins.

Concurrency: one relay per installation (a singleton Deployment / one supervised process). Two relays would not
corrupt anything (ids and expected-last-id keep the stream consistent), only waste work.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import nats
from nats.js import JetStreamContext
from nats.js import errors as jserrors

from allot_bus import wire
from allot_bus.adapters.nats import ensure_stream, is_missing, is_wrong_last
from allot_bus.names import (
    HEADER_EXPECTED_LAST_MSG_ID,
    HEADER_MSG_ID,
    HEADER_POSITION,
    HEADER_STREAM,
    HEADER_TYPE,
    BusNames,
)
from allot_contracts.envelope import RecordedEvent
from allot_contracts.errors import TransientError, Unavailable
from allot_eventstore.protocol import EventStore

log = logging.getLogger("allot.relay")


class Relay:
    def __init__(
        self,
        store: EventStore,
        js: JetStreamContext,
        names: BusNames,
        *,
        batch: int = 500,
        window: int = 128,
        poll_interval: float = 1.0,
    ) -> None:
        self.store = store
        self.js = js
        self.names = names
        self.batch = batch
        self.window = window
        self.poll_interval = poll_interval
        self.published_position = 0
        self.published_total = 0
        self._tail: tuple[int, str | None] | None = None

    async def _stream_tail(self) -> tuple[int, str | None]:
        info = await ensure_stream(self.js, self.names)
        if info.state.messages == 0 or not info.state.last_seq:
            return 0, None
        try:
            msg = await self.js.get_msg(self.names.stream, seq=info.state.last_seq)
        except jserrors.NotFoundError:
            return 0, None
        headers = msg.headers or {}
        return int(headers.get(HEADER_POSITION, "0")), headers.get(HEADER_MSG_ID)

    async def _start_position(self) -> int:
        """Where to start filling an empty stream: just after the lowest consumer checkpoint (0 if none)."""
        checkpoints = [p for name, p in (await self.store.checkpoints()).items() if not name.startswith("_")]
        return min(checkpoints) if checkpoints else 0

    async def _resolve_tail(self) -> tuple[int, str | None]:
        position, event_id = await self._stream_tail()
        head = (await self.store.head())[0]
        if position == 0:
            start = await self._start_position()
            if start == 0:
                return 0, None
            previous = await self.store.read(after=start - 1, limit=1)
            return start, previous[0].event_id if previous else None
        stored = await self.store.read(after=position - 1, limit=1)
        if position > head or not stored or stored[0].event_id != event_id:
            log.error(
                "stream %s does not match the event log (stream at position %d, log head %d); purging and refilling",
                self.names.stream, position, head,
            )
            await self.js.purge_stream(self.names.stream)
            return await self._resolve_tail()
        return position, event_id

    async def publish_pending(self) -> int:
        """Publish what the log has beyond the stream's tail, up to ``batch`` events. Returns how many."""
        if self._tail is None:
            self._tail = await self._resolve_tail()
        position, last_id = self._tail
        events = await self.store.read(after=position, limit=self.batch)
        done = 0
        for start in range(0, len(events), self.window):
            chunk = events[start : start + self.window]
            try:
                await self._publish_chunk(chunk, last_id)
            except BaseException:
                self._tail = None  # re-read the stream tail before trying again
                raise
            last_id = chunk[-1].event_id
            self._tail = (chunk[-1].position, last_id)
            self.published_position = chunk[-1].position
            done += len(chunk)
        self.published_total += done
        return done

    async def _publish_chunk(self, chunk: list[RecordedEvent], last_id: str | None) -> None:
        futures = []
        previous = last_id
        for record in chunk:
            headers = {
                HEADER_MSG_ID: record.event_id,
                HEADER_POSITION: str(record.position),
                HEADER_TYPE: record.tag,
                HEADER_STREAM: record.stream_id,
            }
            if previous is not None:
                headers[HEADER_EXPECTED_LAST_MSG_ID] = previous
            headers.update({k: v for k, v in record.metadata.items() if k in ("traceparent", "tracestate")})
            futures.append(
                self.js.publish(self.names.subject(record.type), wire.encode(record), headers=headers, timeout=10)
            )
            previous = record.event_id
        results: list[Any] = await asyncio.gather(*futures, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                if is_wrong_last(result):
                    raise Unavailable(f"stream tail moved under the relay: {result}", delay=0.0) from result
                if is_missing(result):
                    raise Unavailable(f"stream {self.names.stream} is missing: {result}", delay=0.0) from result
                raise Unavailable(f"publish failed: {result}") from result

    async def run(self, stop: asyncio.Event, wake: asyncio.Event | None = None) -> None:
        attempt = 0
        while not stop.is_set():
            try:
                published = await self.publish_pending()
                attempt = 0
            except (TimeoutError, TransientError, nats.errors.Error, jserrors.Error, OSError) as exc:
                attempt += 1
                delay = getattr(exc, "delay", None)
                delay = min(0.2 * 2**attempt, 5.0) if delay is None else delay
                log.warning("relay: %s (retrying in %.1fs)", exc, delay)
                await _sleep_or_stop(stop, delay)
                continue
            if published >= self.batch:
                continue
            waiter = wake if wake is not None else asyncio.Event()
            await _sleep_or_stop(stop, self.poll_interval, also=waiter)
            waiter.clear()


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
