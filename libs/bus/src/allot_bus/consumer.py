"""A durable consumer that delivers events of given types to a handler in position order, exactly once in effect.

Responsibility: turn "JetStream delivers at least once, maybe with gaps" into "the handler sees every event of
interest once, in log order", using the log's positions and the consumer's checkpoint in PostgreSQL.

Protocol (docs/adr/0002-bus.md):
1. ``start``: the owner rebuilds its state from the log up to the stored checkpoint (``rebuild`` hook), the durable
   pull consumer is created if missing (new messages only), then everything of interest after the checkpoint is read
   from PostgreSQL (catch-up). Anything published before the consumer existed is therefore covered by the catch-up;
   anything after it arrives on JetStream.
2. Live: pull requests stay outstanding (:class:`allot_bus.adapters.pull.Puller`), so each message arrives as soon as
   the relay publishes it; whatever has arrived (at most ``batch``) is handled as one unit: the handler folds the
   events in order and appends every resulting decision with the checkpoint in one transaction, and the batch is
   acknowledged after that commit (the consumer acks "all", so one ack covers the batch). Before that, the batch is
   checked against the log (:mod:`allot_bus.provenance`, one query): a message that is not the event the log holds
   at the position and with the hash it claims, or a logged event published again out of the stream's order, is
   recorded as ``security.message_refused`` and terminated, never decided on (docs/adr/0010). A logged event at or
   below the position is a duplicate (redelivery, a catch-up overlap, a refill) and is skipped: positions and event
   ids are one-to-one, so this is dedupe by event id.
3. A handler that fails on one event of a batch first commits the decisions of the events before it and raises
   :class:`BatchFailed` naming it. A permanent error (undecodable, ``PermanentError``) → a ``consumer.dead_lettered``
   event is recorded with the checkpoint moved past it, the message is terminated, then a rebuild (which skips
   dead-lettered events, as replay does). A transient or unknown error → ``nak`` with backoff for it and the rest of
   the batch, then rebuild and catch up from PostgreSQL before pulling again, so order is never broken by a
   redelivery. An unknown error on the same event ``poison_after`` times in a row makes it a poison message:
   dead-lettered.
4. Gaps: when the stream or consumer disappeared (server lost its store) the consumer is re-created and caught up
   from PostgreSQL. When idle, the consumer also asks PostgreSQL whether an event of interest beyond its checkpoint
   exists; seen on two consecutive idle checks, that is a gap (lost messages, or a stalled relay) and it catches up.

An event log that cannot be reached (``Unavailable``, a driver error) is an outage, never a reason to dead-letter an
event or to move the checkpoint: the step is retried with backoff, then the consumer rebuilds and catches up. The
first failure of an outage is logged as a warning, the next ones at debug level, and its end once
(:class:`allot_bus.outage.Outage`).

The handler owns the checkpoint write when it appends events (same transaction) and returns the position it
committed; for batches that produce nothing, this consumer advances the checkpoint lazily (end of batch, idle) —
re-handling such an event after a crash is harmless because the handler is deterministic and emits nothing for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import msgspec
import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import errors as jserrors

from allot_bus import wire
from allot_bus.adapters.nats import ensure_durable, ensure_stream, is_missing, supports_multi_filter
from allot_bus.adapters.pull import ConsumerGone, Puller
from allot_bus.names import HEADER_MSG_ID, BusNames
from allot_bus.outage import Outage
from allot_bus.provenance import Delivered, Refusal, StreamOrder, describe, refused_message, vouch, warning
from allot_contracts.envelope import NewEvent, RecordedEvent, derived_event_id, stream_id
from allot_contracts.errors import (
    AlreadyProcessed,
    DecisionFailed,
    PermanentError,
    Unavailable,
)
from allot_contracts.events import ConsumerDeadLettered, SecurityMessageRefused
from allot_eventstore.pg_errors import DRIVER_ERRORS
from allot_eventstore.protocol import Checkpoint, EventStore

log = logging.getLogger("allot.consumer")
# what an outage of the log or the bus raises (translated by the store, or a driver's own error): retried quietly
OUTAGES: tuple[type[BaseException], ...] = (Unavailable, nats.errors.Error, jserrors.Error, *DRIVER_ERRORS)

Handler = Callable[[Sequence[RecordedEvent]], Awaitable[int | None]]
Rebuild = Callable[[], Awaitable[int]]

DEFAULT_BACKOFF: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 5.0)
DEFAULT_BATCH = 500
CATCH_UP_PAGE = 1000


class BatchFailed(Exception):
    """Raised by a handler: ``records[:index]`` were handled and their decisions committed; ``records[index]``
    failed with ``cause`` (also the ``__cause__``); nothing after it was looked at."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(f"event {index} of the batch failed: {type(cause).__name__}: {cause}")
        self.index = index
        self.cause = cause


class ConsumerStats(msgspec.Struct, kw_only=True):
    handled: int = 0
    batches: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    transient_failures: int = 0
    catch_ups: int = 0
    caught_up_events: int = 0
    gaps_detected: int = 0
    undecodable: int = 0
    refused: dict[str, int] = {}  # messages not acted on, by reason (allot_bus.provenance)


_Pair = tuple[RecordedEvent, Any]  # a record and its message (None when read from PostgreSQL)


def _delivery(msg: Any) -> tuple[int, int]:
    """The message's sequence number in the stream and how many times it was delivered; (0, 1) when it carries no
    JetStream metadata. Read off the reply subject when it has the form nats-server gives a stream without a domain
    (``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>``): a split, where
    nats-py's ``metadata`` builds a dataclass and a datetime for every message."""
    reply = getattr(msg, "reply", None)
    if isinstance(reply, str):
        tokens = reply.split(".")
        if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
            return int(tokens[5]), int(tokens[4])
    metadata = msg.metadata
    return (metadata.sequence.stream, metadata.num_delivered) if metadata else (0, 1)


class DurableConsumer:
    def __init__(
        self,
        *,
        name: str,
        types: Collection[str],
        store: EventStore,
        nc: Client,
        names: BusNames,
        handler: Handler,
        rebuild: Rebuild,
        batch: int = DEFAULT_BATCH,
        fetch_timeout: float = 1.0,
        backoff: tuple[float, ...] = DEFAULT_BACKOFF,
        ack_wait: float = 30.0,
        poison_after: int = 5,
    ) -> None:
        self.name = name
        self.types = frozenset(types)
        self.store = store
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.names = names
        self.handler = handler
        self.rebuild = rebuild
        self.batch = batch
        self.fetch_timeout = fetch_timeout
        self.backoff = backoff
        self.ack_wait = ack_wait
        self.poison_after = poison_after
        self._poison: tuple[int, int] = (0, 0)  # (position, consecutive failures) of the event failing now
        self.position = 0
        self._persisted = 0
        self._puller: Puller | None = None
        self._suspect_gap: int | None = None
        self._failures = 0
        self._needs_resync = False
        self.stats = ConsumerStats()
        self._order = StreamOrder()
        self._outage = Outage(name, log)
        self.ready = asyncio.Event()

    @property
    def durable(self) -> str:
        return self.names.durable(self.name)

    def subjects(self) -> list[str]:
        return sorted(self.names.subject(t) for t in self.types)

    # -- lifecycle -----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.resync()

    async def _attach(self) -> None:
        await ensure_stream(self.js, self.names)
        await ensure_durable(
            self.js,
            self.names,
            durable=self.durable,
            subjects=self.subjects(),
            multi_filter=supports_multi_filter(self.nc),
            ack_wait=self.ack_wait,
            max_ack_pending=4 * self.batch,
        )
        if self._puller is None:
            self._puller = Puller(self.nc, stream=self.names.stream, durable=self.durable, batch=self.batch)
            await self._puller.start()
        else:
            self._puller.reset()

    async def catch_up(self) -> int:
        """Handle every event of interest after the checkpoint, straight from PostgreSQL, a page per batch."""
        count = 0
        while True:
            page = await self.store.read(after=self.position, types=self.types, limit=CATCH_UP_PAGE)
            if not page:
                break
            await self._process([(record, None) for record in page])
            count += len(page)
            if self._needs_resync or len(page) < CATCH_UP_PAGE:  # dead-lettered: rebuild before deciding more
                break
        await self.flush()
        self.stats.catch_ups += 1
        self.stats.caught_up_events += count
        if count:
            log.info(
                "%s caught up %d event(s) from the log, now at position %d", self.name, count, self.position
            )
        return count

    async def flush(self) -> None:
        if self.position > self._persisted:
            await self.store.advance_checkpoint(self.name, self.position)
            self._persisted = self.position

    async def resync(self) -> None:
        """Rebuild from the log, re-attach to JetStream and catch up: the answer to any doubt about our state."""
        self.ready.clear()
        self.position = await self.rebuild()
        self._persisted = self.position
        await self._attach()
        await self.catch_up()
        self.ready.set()

    # -- handling ------------------------------------------------------------------------------------------------

    async def _process(self, pairs: Sequence[_Pair]) -> None:
        """Handle one batch in order. Returns when every event was handled or one was given up on (then a resync is
        due); raises the cause of a transient failure after nak-ing the messages from the failed one on."""
        work: list[RecordedEvent] = []
        before: list[int] = []  # position reached before each work item
        last_msg: list[Any] = []  # the last message up to and including each work item
        position, newest = self.position, None
        for record, msg in pairs:
            newest = msg if msg is not None else newest
            if record.position <= position:
                self.stats.duplicates += 1
                continue
            if record.type in self.types:
                work.append(record)
                before.append(position)
                last_msg.append(newest)
            position = record.position
        self.stats.batches += 1
        if not work:
            self.position = max(self.position, position)
            await self._ack(newest)
            return
        try:
            committed = await self.handler(work)
        except BatchFailed as failed:
            index, cause = failed.index, failed.cause
            self.stats.handled += index
            self.position = before[index]
            if index:
                self._persisted = max(self._persisted, work[index - 1].position)
                await self._ack(last_msg[index - 1])
            rest = [
                msg for record, msg in pairs if msg is not None and record.position >= work[index].position
            ]
            await self._failed(work[index], cause, rest)
            return
        self.stats.handled += len(work)
        self._failures = 0
        self.position = position
        if committed is not None:
            self._persisted = max(self._persisted, committed)
        await self._ack(newest)

    async def _failed(self, record: RecordedEvent, cause: BaseException, msgs: list[Any]) -> None:
        """The handler failed on ``record``; ``msgs`` are its message and those after it (live delivery)."""
        if isinstance(
            cause, PermanentError | msgspec.ValidationError | msgspec.DecodeError
        ) and not isinstance(cause, AlreadyProcessed):
            await self._give_up(record, msgs, str(cause))
            return
        if isinstance(cause, DecisionFailed):
            # The processor itself failed on this event. Retried (the projection is rebuilt in between), but not
            # for ever: failing ``poison_after`` times in a row makes it a poison message, and blocking every later
            # event behind it would stop the service for good. Infrastructure errors are retried without limit.
            if self._poison[0] != record.position:
                self._poison = (record.position, 0)
            self._poison = (record.position, self._poison[1] + 1)
            if self._poison[1] >= self.poison_after:
                log.error(
                    "%s: event at position %d failed %d times; giving up on it",
                    self.name,
                    record.position,
                    self._poison[1],
                    exc_info=cause,
                )
                await self._give_up(record, msgs, f"handler failed {self._poison[1]} times: {cause}")
                return
        self.stats.transient_failures += 1
        self._failures += 1
        delay = self._backoff(self._failures - 1, cause)
        if isinstance(cause, OUTAGES):  # the log or the bus (not this event) is the problem: an outage
            self._outage.failed(
                f"cannot handle position {record.position} (the event log cannot be used)",
                cause,
                retry_in=delay,
            )
        else:
            log.warning(
                "%s failed on position %d (%s), attempt %d: %s; retrying in %.1fs",
                self.name,
                record.position,
                record.tag,
                self._failures,
                cause,
                delay,
            )
        for msg in msgs:
            with contextlib.suppress(nats.errors.Error, jserrors.Error):
                await msg.nak(delay=delay)
        raise cause

    def _backoff(self, attempt: int, cause: BaseException | None = None) -> float:
        """The wait before retry ``attempt`` (from 0; the last step of ``backoff`` repeats), unless ``cause`` asks
        for its own (``TransientError.delay``)."""
        asked: float | None = getattr(cause, "delay", None)
        return asked or self.backoff[min(attempt, len(self.backoff) - 1)]

    def _count_refused(self, reason: str) -> None:
        self.stats.refused[reason] = self.stats.refused.get(reason, 0) + 1

    async def _ack(self, msg: Any) -> None:
        if msg is not None:
            with contextlib.suppress(nats.errors.Error, jserrors.Error):
                await msg.ack()  # the consumer acks "all": this covers every earlier message of the batch

    async def _give_up(self, record: RecordedEvent, msgs: list[Any], reason: str) -> None:
        """Record the event as dead-lettered with the checkpoint past it, and rebuild: the failed handler may have
        changed the projection half-way, and a rebuild skips dead-lettered events, as replay does."""
        await self._dead_letter(record.position, record.event_id, record.tag, reason)
        for index, msg in enumerate(msgs):
            with contextlib.suppress(nats.errors.Error, jserrors.Error):
                await (msg.term() if index == 0 else msg.nak())
        self.position = record.position
        self._persisted = max(self._persisted, record.position)
        self._needs_resync = True

    async def _dead_letter(self, position: int, event_id: str, event_type: str, reason: str) -> None:
        self.stats.dead_lettered += 1
        log.error(
            "%s dead-lettered event %s at position %d (%s): %s",
            self.name,
            event_id,
            position,
            event_type,
            reason,
        )
        event = ConsumerDeadLettered(
            consumer=self.name,
            position=position,
            event_id=event_id,
            event_type=event_type,
            reason=reason[:2000],
        )
        new = NewEvent(
            stream_id=stream_id("consumer", self.name),
            event=event,
            event_id=derived_event_id(f"{self.name}.dead-letter", event_id, 0),
            causation_id=event_id,
        )
        with contextlib.suppress(AlreadyProcessed):
            await self.store.append([new], producer=self.name, checkpoint=Checkpoint(self.name, position))

    async def _handle_messages(self, msgs: list[Any]) -> None:
        pairs: list[_Pair] = []
        for msg in msgs:
            try:
                pairs.append((wire.decode(msg.data), msg))
                continue
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
                # Not something this log wrote (or damaged on the way): drop the message and read whatever it may
                # have carried from PostgreSQL, which never goes through the wire format.
                sequence = _delivery(msg)[0]
                log.error(
                    "%s: message %d on %s cannot be decoded (%s); catching up from the log instead",
                    self.name,
                    sequence,
                    getattr(msg, "subject", "?"),
                    exc,
                )
                self.stats.undecodable += 1
                await self._record_undecodable(msg, sequence, str(exc))
            if not await self._try(pairs):
                return
            pairs = []
            with contextlib.suppress(nats.errors.Error, jserrors.Error):
                await msg.term()
            await self.catch_up()
            if self._needs_resync:
                return
        if await self._try(pairs):
            await self.flush()

    async def _try(self, pairs: list[_Pair]) -> bool:
        """Process live pairs that the log vouches for; False when the rest of the delivery must wait for a
        resync."""
        pairs = await self._vouched(pairs)
        if not pairs:
            return True
        try:
            await self._process(pairs)
        except Exception as exc:  # transient or unknown: already nak-ed; back off, then rebuild and catch up
            await asyncio.sleep(self._backoff(max(self._failures - 1, 0), exc))
            self._needs_resync = True
            return False
        return not self._needs_resync  # dead-lettered: nothing after it is decided before the rebuild

    async def _vouched(self, pairs: list[_Pair]) -> list[_Pair]:
        """The pairs whose message is the event the log holds at the position and with the hash it claims; every
        other one is recorded as a security warning and terminated, never decided on (docs/adr/0010)."""
        if not pairs:
            return pairs
        delivered = [
            Delivered(
                record=record,
                subject=getattr(msg, "subject", ""),
                sequence=sequence,
                delivered=times,
                handle=msg,
            )
            for record, msg in pairs
            for sequence, times in (_delivery(msg),)
        ]
        accepted, refused = await vouch(self.store, delivered, self._order, self._first_sequence)
        if refused:
            await self._refuse(refused)
        return [(message.record, message.handle) for message in accepted]

    async def _first_sequence(self) -> int:
        info = await self.js.stream_info(self.names.stream)
        return int(info.state.first_seq or 0)

    async def _refuse(self, refused: list[Refusal]) -> None:
        for refusal in refused:
            self._count_refused(refusal.reason)
            log.warning("%s %s", self.name, describe(refusal))
        await self.store.append([warning(self.name, r) for r in refused], producer=self.name)
        # recorded first: a failure above leaves them to be delivered and judged again
        for refusal in refused:
            with contextlib.suppress(nats.errors.Error, jserrors.Error):
                await refusal.message.handle.term()

    async def _record_undecodable(self, msg: Any, sequence: int, reason: str) -> None:
        self._count_refused("undecodable")
        subject = getattr(msg, "subject", "")
        event = SecurityMessageRefused(
            consumer=self.name,
            reason="undecodable",
            subject=subject,
            stream_sequence=sequence,
            detail=reason[:2000],
        )
        key = msg.header.get(HEADER_MSG_ID, "") if getattr(msg, "header", None) else ""
        await self.store.append([refused_message(self.name, event, key=key)], producer=self.name)

    async def _idle_gap_check(self) -> None:
        pending = await self.store.read(after=self.position, types=self.types, limit=1)
        if not pending:
            self._suspect_gap = None
            head = (await self.store.head())[0]
            if head < self.position:  # the log was restored to an earlier point: our state is from the future
                log.warning(
                    "%s: the log ends at position %d, before this consumer's position %d (restored from a "
                    "backup?); rebuilding",
                    self.name,
                    head,
                    self.position,
                )
                self._needs_resync = True
            return
        first = pending[0].position
        if self._suspect_gap == first:
            self.stats.gaps_detected += 1
            log.warning(
                "%s: event %d is in the log but was not delivered; catching up from the log", self.name, first
            )
            self._suspect_gap = None
            await self.catch_up()
        else:
            self._suspect_gap = first

    async def run(self, stop: asyncio.Event) -> None:
        if not self.ready.is_set():
            self._needs_resync = True
        while not stop.is_set():
            if self._needs_resync:
                self._needs_resync = False  # a dead letter during the catch-up asks for one more rebuild
                await self._retry(self.resync, stop)
                continue
            assert self._puller is not None
            try:
                msgs = await self._puller.next_batch(self.fetch_timeout)
            except TimeoutError:
                await self._guarded(self._idle, stop, resync=False)
                continue
            except (ConsumerGone, nats.errors.Error, jserrors.Error, OSError) as exc:
                if stop.is_set():
                    return
                log.warning("%s: pulling failed (%s); re-attaching", self.name, exc)
                gone = isinstance(exc, ConsumerGone) or is_missing(exc)
                await asyncio.sleep(self.backoff[0] if gone else self.backoff[1])
                self._needs_resync = True
                continue
            await self._guarded(functools.partial(self._handle_messages, msgs), stop, resync=True)

    async def _idle(self) -> None:
        await self.flush()
        await self._idle_gap_check()

    async def _guarded(
        self, action: Callable[[], Awaitable[None]], stop: asyncio.Event, *, resync: bool
    ) -> None:
        """Run a step whose database work may fail while PostgreSQL is away; log, back off and carry on (the next
        pull or idle check tries again) rather than stop the service. A failure while handling events may have
        left the projection ahead of the log (``resync``): it is rebuilt before anything else is decided."""
        try:
            await action()
        except asyncio.CancelledError:
            raise
        except (
            Exception
        ) as exc:  # driver errors arrive translated (TransientError) or not, depending on the call
            self.stats.transient_failures += 1
            self._needs_resync = self._needs_resync or resync
            self._step_failed("the event log is unreachable", exc, None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._backoff(2))
            return
        if not self._needs_resync:  # a failure handled inside the step is followed by a resync
            self._outage.over()

    def _step_failed(self, what: str, exc: Exception, delay: float | None) -> None:
        """A step that failed: an outage of the log or the bus (said once, :class:`~allot_bus.outage.Outage`), or
        anything else (a bug, a refusal), which is said each time with its traceback, never folded into an outage."""
        if isinstance(exc, OUTAGES):
            self._outage.failed(what, exc, retry_in=delay)
        else:
            then = f"; retrying in {delay:.1f}s" if delay is not None else "; retrying"
            log.warning("%s: %s: %s%s", self.name, what, exc, then, exc_info=exc)

    async def _retry(self, action: Callable[[], Awaitable[None]], stop: asyncio.Event) -> None:
        attempt = 0
        while not stop.is_set():
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except PermanentError:
                raise
            except Exception as exc:  # transient or unknown: back off and rebuild again
                self.stats.transient_failures += 1
                delay = self._backoff(attempt, exc)
                attempt += 1
                self._step_failed("catching up failed", exc, delay)
                await asyncio.sleep(delay)
                continue
            if not self._needs_resync:
                self._outage.over()
            return
