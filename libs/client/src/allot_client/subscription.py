"""Following the log from a position: catch-up from PostgreSQL, then live from NATS, every event once, in order.

Responsibility: hand the caller every event after ``after`` that matches its :class:`~allot_client.filters.Filter`,
in log order, each exactly once, across NATS restarts, lost messages and reconnects. The caller persists
:attr:`Subscription.position` (or the position of the last delivery it handled) and resumes from it.

Protocol (the services' own, docs/adr/0002-bus.md, with a stricter gap check):
1. Attach: an ephemeral JetStream pull consumer on ``<prefix>.events.>`` that starts with *new* messages, then read
   everything after the position from PostgreSQL up to the log's head (catch-up). Whatever was published before the
   consumer existed is in PostgreSQL by then; whatever comes after arrives on NATS.
2. Live: each message carries ``Allot-Position``. At or below the position: a duplicate, skipped. Exactly one
   above: the next event. Further above: a gap (messages lost, a refilled stream): the events in between are read
   from PostgreSQL first. The consumer takes every subject so that positions are contiguous and a gap is always
   seen; messages of types the filter does not want are recognised by their ``Allot-Type`` header and skipped
   without decoding.
3. Idle (nothing for ``idle`` seconds): the log's head is compared with the position, and anything missed is read
   from PostgreSQL: the relay may be stalled, or NATS away. Without NATS, or while the consumer cannot be created
   (the relay has not created the stream yet), this is how the subscription follows: polling every ``idle``
   seconds, and trying to create the consumer again every second.
4. Trouble (the consumer is gone, NATS unreachable, PostgreSQL unreachable): log, back off, attach again and catch
   up. Nothing is delivered twice because every delivery moves the position first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import nats
from nats.aio.client import Client
from nats.js import api as jsapi
from nats.js import errors as jserrors

from allot_bus import wire
from allot_bus.adapters.pull import ConsumerGone, Puller
from allot_bus.names import HEADER_POSITION, HEADER_TYPE, BusNames
from allot_client.filters import Filter
from allot_contracts.envelope import RecordedEvent
from allot_contracts.events import Event
from allot_contracts.jsonvalue import JsonObject
from allot_eventstore.protocol import EventStore

__all__ = ["Delivery", "Subscription", "SubscriptionStats"]

log = logging.getLogger("allot.client")

CONSUMER_INACTIVE_S = 60.0  # the server deletes a consumer nobody pulls from for this long
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
ATTACH_RETRY_S = 1.0  # how soon a subscription that could not create its consumer (no stream yet) tries again


class Delivery:
    """One event of the log, as delivered: the recorded envelope plus its typed payload (decoded on first use)."""

    __slots__ = ("_event", "record")

    def __init__(self, record: RecordedEvent) -> None:
        self.record = record
        self._event: Event | None = None

    def __repr__(self) -> str:
        return f"Delivery(position={self.position}, tag={self.tag!r}, stream_id={self.stream_id!r})"

    @property
    def position(self) -> int:
        return self.record.position

    @property
    def event_id(self) -> str:
        return self.record.event_id

    @property
    def type(self) -> str:
        return self.record.type

    @property
    def schema_version(self) -> int:
        return self.record.schema_version

    @property
    def tag(self) -> str:
        return self.record.tag

    @property
    def stream_id(self) -> str:
        return self.record.stream_id

    @property
    def producer(self) -> str:
        return self.record.producer

    @property
    def recorded_at(self) -> int:
        """Microseconds since the Unix epoch (UTC)."""
        return self.record.recorded_at

    @property
    def event(self) -> Event:
        """The typed payload (an :mod:`allot_contracts.events` Struct; older versions upcast), for ``match``."""
        if self._event is None:
            self._event = self.record.decode()
        return self._event

    def payload(self) -> JsonObject:
        """The payload as JSON builtins, as recorded."""
        return self.record.payload_dict()


class SubscriptionStats(msgspec.Struct, kw_only=True):
    delivered: int = 0
    from_log: int = 0  # events read from PostgreSQL (catch-up, gaps, idle checks, polling)
    from_bus: int = 0  # messages taken from NATS with a new position
    duplicates: int = 0  # messages at or below the position (redelivery, refill, already read from the log)
    gaps: int = 0  # messages that arrived with events missing before them
    attaches: int = 0
    failures: int = 0


class Subscription:
    """Every event after ``after`` matching ``filter``, in order, once. Iterate it (``async for``); use it as an
    async context manager (or call :meth:`close`) to release the NATS consumer."""

    def __init__(
        self,
        store: EventStore,
        nc: Client | None,
        names: BusNames,
        filter: Filter,
        *,
        after: int = 0,
        idle: float = 1.0,
        page: int = 1000,
        batch: int = 256,
    ) -> None:
        if after < 0:
            raise ValueError(f"after: a log position is 0 or more, got {after}")
        self.store = store
        self.nc = nc
        self.names = names
        self.filter = filter
        self.position = after
        self.idle = idle
        self.page = page
        self.batch = batch
        self.stats = SubscriptionStats()
        self.consumer_name = f"allot-client-{secrets.token_hex(6)}"
        self._puller: Puller | None = None
        self._attach_due = nc is not None
        self._failures = 0
        self._iterator: AsyncIterator[Delivery] | None = None
        self._closed = False

    # -- public -------------------------------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Delivery]:
        if self._iterator is None:
            self._iterator = self._deliveries()
        return self._iterator

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._iterator is not None:
            aclose = getattr(self._iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        await self._detach(delete=True)

    # -- the loop -----------------------------------------------------------------------------------------------

    async def _deliveries(self) -> AsyncIterator[Delivery]:
        try:
            while not self._closed:
                try:
                    if self._attach_due:
                        await self._attach()
                        async for delivery in self._from_log():
                            yield delivery
                    if self._puller is None:  # no NATS (or not attachable now): follow the log by polling
                        await asyncio.sleep(self.idle if self.nc is None else min(self.idle, ATTACH_RETRY_S))
                        self._attach_due = self.nc is not None
                        async for delivery in self._from_log():
                            yield delivery
                        continue
                    try:
                        msgs = await self._puller.next_batch(self.idle)
                    except TimeoutError:
                        async for delivery in self._from_log():  # idle: anything the bus did not bring?
                            yield delivery
                        continue
                    for msg in msgs:
                        async for delivery in self._from_message(msg):
                            yield delivery
                    self._failures = 0
                except (ConsumerGone, nats.errors.Error, jserrors.Error, OSError, TimeoutError) as exc:
                    await self._trouble("NATS", exc)
                except Exception as exc:  # the event log (driver errors arrive translated or not)
                    await self._trouble("the event log", exc)
        finally:
            await self._detach(delete=True)

    async def _trouble(self, what: str, exc: BaseException) -> None:
        self.stats.failures += 1
        delay = BACKOFF_S[min(self._failures, len(BACKOFF_S) - 1)]
        self._failures += 1
        log.warning(
            "subscription at position %d: %s unavailable (%s: %s); retrying in %.1fs",
            self.position,
            what,
            type(exc).__name__,
            exc,
            delay,
        )
        await self._detach(delete=False)
        self._attach_due = self.nc is not None
        await asyncio.sleep(delay)

    async def _from_log(self, until: int | None = None) -> AsyncIterator[Delivery]:
        """Everything after the position up to ``until`` (default: the log's head now), from PostgreSQL."""
        target = (await self.store.head())[0] if until is None else until
        types = self.filter.store_types()
        while self.position < target:
            page = await self.store.read(after=self.position, until=target, types=types, limit=self.page)
            if not page:
                break
            for record in page:
                self.stats.from_log += 1
                if self.filter.matches(record):
                    self.position = record.position
                    self.stats.delivered += 1
                    yield Delivery(record)
                else:
                    self.position = record.position
            if len(page) < self.page:
                break
        if types is not None:  # the events after the last one read are of other types: passed over
            self.position = max(self.position, target)

    async def _from_message(self, msg: Any) -> AsyncIterator[Delivery]:
        headers = msg.headers or {}
        text = headers.get(HEADER_POSITION, "")
        record: RecordedEvent | None = None
        if text.isdigit():
            position = int(text)
        else:
            try:
                record = wire.decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
                log.warning("skipping a message on %s that is not an event of the log: %s", msg.subject, exc)
                return  # should it have carried an event, the next gap or idle check reads it from the log
            position = record.position
        if position <= self.position:
            self.stats.duplicates += 1
            return
        if position > self.position + 1:
            self.stats.gaps += 1
            async for delivery in self._from_log(until=position - 1):
                yield delivery
            if self.position != position - 1:
                return  # the log does not have them yet (cannot happen with one relay): leave it to the idle check
        self.stats.from_bus += 1
        tag = headers.get(HEADER_TYPE, "")
        name, _, version = tag.rpartition(".v")
        if record is None and name and version.isdigit() and not self.filter.matches_type(name, int(version)):
            self.position = position
            return
        if record is None:
            record = wire.decode(msg.data)
        self.position = position
        if self.filter.matches(record):
            self.stats.delivered += 1
            yield Delivery(record)

    # -- NATS ---------------------------------------------------------------------------------------------------

    async def _attach(self) -> None:
        """Create the consumer (new messages only) and start pulling; on failure follow by polling for now."""
        self._attach_due = False
        assert self.nc is not None
        await self._detach(delete=True)
        js = self.nc.jetstream()
        config = jsapi.ConsumerConfig(
            name=self.consumer_name,
            deliver_policy=jsapi.DeliverPolicy.NEW,
            ack_policy=jsapi.AckPolicy.NONE,
            filter_subject=self.names.all_events,
            inactive_threshold=CONSUMER_INACTIVE_S,
            mem_storage=True,
        )
        try:
            await js.add_consumer(self.names.stream, config)
        except (jserrors.Error, nats.errors.Error, TimeoutError, OSError) as exc:
            log.warning(
                "cannot create a consumer on stream %s (%s); following the log from PostgreSQL meanwhile",
                self.names.stream,
                exc,
            )
            return
        puller = Puller(self.nc, stream=self.names.stream, durable=self.consumer_name, batch=self.batch)
        await puller.start()
        self._puller = puller
        self.stats.attaches += 1

    async def _detach(self, *, delete: bool) -> None:
        puller, self._puller = self._puller, None
        if puller is not None:
            with contextlib.suppress(nats.errors.Error, OSError):
                await puller.close()
        if delete and self.nc is not None and not self.nc.is_closed and self.stats.attaches:
            with contextlib.suppress(jserrors.Error, nats.errors.Error, TimeoutError, OSError):
                await self.nc.jetstream().delete_consumer(self.names.stream, self.consumer_name)
