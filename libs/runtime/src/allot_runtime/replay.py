"""Rebuilding projections from the log, and re-deriving every decision (``allot replay --verify``).

``rebuild`` folds the log into a processor exactly as the live service did: inputs in position order, each followed
by the outputs recorded for it. ``verify_decisions`` additionally re-runs ``decide`` at every trigger and compares
the result with what was recorded, field by field: stream, type and payload, and the event id, causation and
correlation each output derives from its trigger. A recorded output whose causation points at no trigger it is
re-derived for is a mismatch too (:class:`Unclaimed`). It keeps going with the recorded outputs so one divergence
does not cascade into noise, and reports every mismatch (the CLI prints the first).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec

from allot_contracts.envelope import NewEvent, RecordedEvent, canonical
from allot_contracts.events import Event
from allot_eventstore.protocol import EventStore
from allot_runtime.processor import Host, dead_lettered


class Mismatch(msgspec.Struct, frozen=True, kw_only=True):
    processor: str
    trigger_position: int
    trigger_type: str
    trigger_event_id: str
    path: str
    recorded: Any
    recomputed: Any

    def describe(self) -> str:
        return (
            f"{self.processor}: decision for {self.trigger_type} at position {self.trigger_position} "
            f"does not reproduce: {self.path}: recorded {_short(self.recorded)}, recomputed {_short(self.recomputed)}"
        )


class Unclaimed(Mismatch, frozen=True, kw_only=True):
    """A decision the processor recorded that no re-derived trigger accounts for: its causation names no event in the
    log (``trigger_position`` 0; or it has none), or points at an event (at ``trigger_position``) that is not one of
    the processor's triggers, or at one whose decisions were recorded before it (out of order). ``recorded`` is its
    causation id."""

    decision_position: int
    decision_type: str

    def describe(self) -> str:
        where = (
            f"points at position {self.trigger_position}, not a trigger this decision was made for"
            if self.trigger_position
            else "names no event in the log"
        )
        return (
            f"{self.processor}: decision {self.decision_type} at position {self.decision_position} "
            f"does not reproduce: causation: {_short(self.recorded)} {where}"
        )


def _short(value: Any, limit: int = 300) -> str:
    text = canonical(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_difference(recorded: Any, recomputed: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first path (in sorted-key order) where two JSON values differ, or None."""
    if isinstance(recorded, dict) and isinstance(recomputed, dict):
        for key in sorted(set(recorded) | set(recomputed)):
            if key not in recorded or key not in recomputed:
                return f"{path}.{key}", recorded.get(key, "<absent>"), recomputed.get(key, "<absent>")
            found = first_difference(recorded[key], recomputed[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(recomputed, list):
        for index, (a, b) in enumerate(zip(recorded, recomputed, strict=False)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        if len(recorded) != len(recomputed):
            return f"{path}.length", len(recorded), len(recomputed)
        return None
    return None if recorded == recomputed else (path or "$", recorded, recomputed)


async def inputs(
    host: Host, store: EventStore, until: int | None, after: int = 0
) -> AsyncIterator[RecordedEvent]:
    async for record in store.iterate(types=host.interests, after=after, until=until):
        if record.producer != host.name:
            yield record


# Events a verify pass reads from PostgreSQL at a time, from the log and from the outputs of each processor it verifies:
# rows and records of a page are both held while it is converted, for every stream at once. Fewer than a plain read's
# 5000 keeps a pass of many processors within tens of MiB for a few more round trips.
VERIFY_PAGE = 2000
_PAST_EVERY = 1 << 63  # after every position of the log (positions are PostgreSQL bigints)


class Outputs:
    """The outputs ``producer`` recorded, handed out trigger by trigger while both streams are walked once.

    A trigger's outputs are appended after it, with the consumer's checkpoint, and a checkpoint only moves forward
    (``allot_eventstore.protocol``): so the outputs come in the order of their triggers' positions, and asking for the
    outputs of increasing positions reads each output once and holds none longer than its trigger. Outputs whose
    cause is not asked for (not a trigger of this replay, or not in the log: position 0) are passed over; with
    ``strays`` (verifying) those whose cause is after ``after`` or not in the log are kept in :attr:`strays` until
    taken: no re-derived decision accounts for them."""

    def __init__(
        self, store: EventStore, producer: str, after: int = 0, *, strays: bool = False, page: int = 5000
    ) -> None:
        self._stream = store.outputs(producer, after=after, page=page)
        self._next: tuple[int, RecordedEvent] | None = None
        self._started = False
        # the position of the next output's trigger (0: none read yet; past every position once all are read): asking
        # :meth:`of` for an earlier position finds and passes over nothing, so a caller skips it without awaiting
        # (most triggers record nothing)
        self.due = 0
        self._done = False
        self._after = after
        self._keep = strays
        # with ``strays``: the outputs passed over whose cause is after ``after`` or not in the log (0): no trigger
        # asked for them, so no re-derived decision accounts for them
        self.strays: list[tuple[int, RecordedEvent]] = []

    async def _advance(self) -> None:
        try:
            self._next = await anext(self._stream)
            self.due = self._next[0]
        except StopAsyncIteration:
            self._next = None
            self._done = True
            self.due = _PAST_EVERY

    async def of(self, position: int) -> list[RecordedEvent]:
        """The outputs caused by the event at ``position`` (positions asked for must increase)."""
        if not self._started:
            self._started = True
            await self._advance()
        elif self._next is None or self._next[0] > position:
            return []  # most triggers: nothing recorded for them, nothing passed over
        found: list[RecordedEvent] = []
        while self._next is not None and self._next[0] <= position:
            if self._next[0] == position:
                found.append(self._next[1])
            else:
                self._passed(self._next)
            await self._advance()
        return found

    def _passed(self, output: tuple[int, RecordedEvent]) -> None:
        if self._keep and (output[0] > self._after or output[0] == 0):
            self.strays.append(output)

    async def rest(self, until: int | None) -> None:
        """Pass over the outputs recorded up to ``until`` that no trigger asked for (each is a stray)."""
        if not self._started:
            self._started = True
            await self._advance()
        while self._next is not None and (until is None or self._next[1].position <= until):
            self._passed(self._next)
            await self._advance()

    async def close(self) -> None:
        if not self._done:
            await self._stream.aclose()  # type: ignore[attr-defined]


async def rebuild(host: Host, store: EventStore, *, until: int, after: int = 0) -> int:
    """Fold the log into ``host`` from ``after`` (0, or the position of the snapshot it was restored from) up to
    ``until``. An output recorded after ``after`` whose trigger is at or before it is passed over."""
    outputs = Outputs(store, host.name, after)
    try:
        async for record in inputs(host, store, until, after):
            host.apply_recorded(record, await outputs.of(record.position))
    finally:
        await outputs.close()
    host.position = until
    return until


def _same(recorded: list[RecordedEvent], news: list[NewEvent]) -> bool:
    """Whether the new events are the recorded ones, compared on their bytes (stored payloads are canonical JSON, as
    every writer stores them): the common case costs no decoding. Any difference is then located field by field."""
    if len(recorded) != len(news):
        return False
    for old, new in zip(recorded, news, strict=True):
        if old.stream_id != new.stream_id or old.tag != new.tag or old.payload != canonical(new.event):
            return False
        if (old.event_id, old.causation_id, old.correlation_id) != (
            new.event_id,
            new.causation_id,
            new.correlation_id,
        ):
            return False
    return True


def _view(stream: str, tag: str, ids: tuple[str, str | None, str | None], payload: Any) -> dict[str, object]:
    """What is compared of a decision: where it went, what it is and says, and the ids derived from its trigger."""
    return {
        "stream": stream,
        "tag": tag,
        "payload": payload,
        "event_id": ids[0],
        "causation": ids[1],
        "correlation": ids[2],
    }


def rederive(host: Host, trigger: RecordedEvent, kept: list[RecordedEvent]) -> list[NewEvent] | None:
    """Apply ``trigger`` and decide on it again: the events ``host`` emits for it now, or None when it is skipped
    (its recorded outputs ``kept`` say the service dead-lettered it). The host is left before its outputs: follow
    with :func:`follow_recorded`."""
    event = host.accept(trigger, kept)
    if event is None and dead_lettered(
        kept
    ):  # the service gave up on it and rebuilt without it; so does replay
        host.position = trigger.position
        return None
    if event is None:
        return []
    host.processor.evolve(event, at=trigger.recorded_at, own=False)
    emits = host.processor.decide(event, at=trigger.recorded_at)
    return host.to_new_events(trigger, emits, trigger=event) if emits else []


def follow_recorded(host: Host, trigger: RecordedEvent, kept: list[RecordedEvent]) -> None:
    """Go on with the outputs recorded for ``trigger`` (whatever was decided again), so that one divergence does
    not cascade."""
    for output in kept:
        host.evolve_own(output.decode(), at=trigger.recorded_at)
    host.position = trigger.position


def _compare(host: Host, trigger: RecordedEvent, kept: list[RecordedEvent]) -> Mismatch | None:
    news = rederive(host, trigger, kept)
    if news is None:
        return None
    if not news and not kept:  # most triggers: nothing decided, nothing recorded
        host.position = trigger.position
        return None
    mismatch: Mismatch | None = None
    if _same(kept, news):
        # The recomputed events are the recorded ones byte for byte: the processor evolves them as the live service
        # evolved its own decisions (``Host.step``), without decoding what it just compared.
        for new in news:
            host.evolve_own(new.event, at=trigger.recorded_at)
        host.position = trigger.position
        return None
    rec_view = [
        _view(r.stream_id, r.tag, (r.event_id, r.causation_id, r.correlation_id), r.payload_dict())
        for r in kept
    ]
    new_view = [
        _view(
            n.stream_id,
            n.tag,
            (n.event_id, n.causation_id, n.correlation_id),
            msgspec.json.decode(canonical(n.event)),
        )
        for n in news
    ]
    diff = first_difference(rec_view, new_view, "outputs")
    if diff is not None:
        mismatch = Mismatch(
            processor=host.name,
            trigger_position=trigger.position,
            trigger_type=trigger.type,
            trigger_event_id=trigger.event_id,
            path=diff[0],
            recorded=diff[1],
            recomputed=diff[2],
        )
    follow_recorded(host, trigger, kept)
    return mismatch


async def verify_decisions(
    host: Host, store: EventStore, *, until: int | None = None
) -> tuple[int, list[Mismatch]]:
    """Re-derive every decision of ``host``'s processor. Returns (triggers checked, mismatches)."""
    result = (await verify_many([host], store, until=until))[host.name]
    return result.checked, result.mismatches


class Governed(msgspec.Struct, frozen=True, kw_only=True):
    """The triggers of one processor re-derived under one configuration: those after ``after`` (until the next
    configuration's), ``checked`` of them, the first and last at positions ``first`` and ``last`` (0 when none)."""

    after: int = 0
    checked: int = 0
    first: int = 0
    last: int = 0


class Verified(msgspec.Struct, frozen=True, kw_only=True):
    """What verifying one processor found: triggers re-derived, the mismatches among them, and the triggers after its
    checkpoint that it has not decided yet (``behind``: lag, not compared). ``governed`` splits the triggers
    re-derived by the configuration they were decided under (one entry per configuration, in order)."""

    checked: int = 0
    mismatches: list[Mismatch] = []
    behind: int = 0
    governed: list[Governed] = []
    start: int = 0  # re-derived from the trigger after this position (a checked snapshot's; 0: the whole log)
    since: Any = None  # with ``verify --since``: where it started and how the snapshot was checked


class Switch(msgspec.Struct, frozen=True):
    """From the first trigger after ``after`` on, a processor decided under another configuration: ``build`` makes
    the host of that configuration, which is rebuilt from the log up to ``after`` (as the restarted service was)."""

    after: int
    build: Callable[[], Host]


class _Verifying:
    """One processor being verified: its current host, the configuration switches still ahead, and the counts of
    the configuration in force (plain counters: this runs once per trigger)."""

    def __init__(
        self,
        host: Host,
        switches: Sequence[Switch],
        outputs: Outputs,
        *,
        start: int = 0,
        limit: int = _PAST_EVERY,
    ) -> None:
        self.host = host
        self.name = host.name
        self.outputs = outputs  # what it recorded
        self.start = start  # ``host`` holds the projection at ``start`` (restored from a snapshot there)
        self.limit = limit  # the last position it decided (its checkpoint): later triggers are lag
        ordered = sorted(switches, key=lambda switch: switch.after)
        passed = [switch for switch in ordered if switch.after <= start] if start else []  # in force at start
        self.pending = ordered[len(passed) :]
        self.done: list[Governed] = [Governed(after=0)] if passed else []
        self.done += [Governed(after=switch.after) for switch in passed[:-1]]
        self.after = passed[-1].after if passed else 0
        self.checked = self.first = self.last = 0
        self.mismatches: list[Mismatch] = []
        self.behind = 0

    def due(self, position: int) -> bool:
        """Whether a trigger at ``position`` is decided under a later configuration than the current host's."""
        return bool(self.pending) and self.pending[0].after < position

    async def switch(self, position: int, store: EventStore) -> None:
        """Go on under the configuration in force for a trigger at ``position``."""
        while self.due(position):
            switch = self.pending.pop(0)
            host = switch.build()
            await rebuild(host, store, until=switch.after)
            self.done.append(self.current())
            self.host, self.after, self.checked, self.first, self.last = host, switch.after, 0, 0, 0

    def compared(self, position: int, found: Mismatch | None) -> None:
        self.checked += 1
        self.first = self.first or position
        self.last = position
        if found is not None:
            self.mismatches.append(found)

    def current(self) -> Governed:
        return Governed(after=self.after, checked=self.checked, first=self.first, last=self.last)

    def result(self) -> Verified:
        governed = [*self.done, self.current(), *(Governed(after=s.after) for s in self.pending)]
        return Verified(
            checked=sum(g.checked for g in governed),
            mismatches=self.mismatches,
            behind=self.behind,
            governed=governed,
            start=self.start,
        )


async def verify_many(
    hosts: list[Host],
    store: EventStore,
    *,
    until: int | None = None,
    through: dict[str, int] | None = None,
    switches: Mapping[str, Sequence[Switch]] | None = None,
    starts: Mapping[str, int] | None = None,
    tap: Callable[[list[RecordedEvent]], Awaitable[object]] | None = None,
) -> dict[str, Verified]:
    """``verify_decisions`` for many processors in one pass over the log: each event is fed to every processor that
    consumes it, in log order, together with the outputs that processor recorded for it (read alongside, from the
    processor's own stream of outputs, :class:`Outputs`). Memory is the projections and a page of each stream,
    whatever the length of the log. ``through`` gives, per processor, the last position it has decided (its checkpoint):
    triggers after it are counted as ``behind`` instead of being compared, since a service that is merely behind has
    recorded nothing for them yet. ``switches`` gives, per processor, where it went on under another configuration
    (``config.applied``: :mod:`allot_runtime.recorded_config`); each trigger is re-derived under its own. ``starts``
    gives, per processor, the position its host already holds (restored from a checked snapshot there,
    ``verify --since``): only the triggers after it are re-derived. With ``tap``, the pass reads every event of the log
    up to ``until`` (not only those the processors consume) and hands each page to ``tap`` before using it: a check of
    the whole log (its hash chain) made in the same read."""
    limits = through or {}
    begin = {host.name: (starts or {}).get(host.name, 0) for host in hosts}
    runs = {
        host.name: _Verifying(
            host,
            (switches or {}).get(host.name, ()),
            Outputs(store, host.name, after=begin[host.name], strays=True, page=VERIFY_PAGE),
            start=begin[host.name],
            limit=limits.get(host.name, _PAST_EVERY),
        )
        for host in hosts
    }
    by_type: dict[str, list[_Verifying]] = {}
    for host in hosts:
        for event_type in host.interests:
            by_type.setdefault(event_type, []).append(runs[host.name])
    try:
        after, types = (0, None) if tap is not None else (min(begin.values(), default=0), by_type.keys())
        async for batch in store.pages(after=after, until=until, types=types, page=VERIFY_PAGE):
            if tap is not None:
                await tap(batch)
            for record in batch:
                consumers = by_type.get(record.type)
                if consumers is None:
                    continue  # read for ``tap`` only
                if len(consumers) > 1:
                    record = _decoded_once(record)
                position, producer = record.position, record.producer
                for run in consumers:
                    if producer == run.name or position <= run.start:
                        continue
                    if position > run.limit:
                        run.behind += 1
                        continue
                    if run.pending and run.due(position):
                        await run.switch(position, store)
                    stream = run.outputs
                    kept = await stream.of(position) if stream.due <= position else []
                    if stream.strays:  # outputs passed over on the way: rare, and a mismatch each
                        run.mismatches += _unclaimed(run.name, stream)
                    run.compared(position, _compare(run.host, record, kept))
        for run in runs.values():
            await run.outputs.rest(until)
            run.mismatches += _unclaimed(run.name, run.outputs)
    finally:
        for run in runs.values():
            await run.outputs.close()
    return {name: run.result() for name, run in runs.items()}


class _Decoded(RecordedEvent, frozen=True, kw_only=True):
    """A recorded event with its payload decoded already: what it decodes to is the same for every processor that
    consumes it (events are immutable), so it is decoded once for all of them."""

    decoded: Event

    def decode(self) -> Event:
        return self.decoded


def _decoded_once(record: RecordedEvent) -> RecordedEvent:
    """``record`` decoded once for the processors that consume it; as it is when it does not decode (each of them
    then refuses it as it would)."""
    try:
        event = record.decode()
    except ValueError:  # msgspec.DecodeError and ValidationError are ValueErrors
        return record
    return _Decoded(  # field by field: several times cheaper than through a dict of them
        position=record.position,
        event_id=record.event_id,
        stream_id=record.stream_id,
        stream_version=record.stream_version,
        type=record.type,
        schema_version=record.schema_version,
        causation_id=record.causation_id,
        correlation_id=record.correlation_id,
        producer=record.producer,
        recorded_at=record.recorded_at,
        payload=record.payload,
        hash=record.hash,
        metadata=record.metadata,
        decoded=event,
    )


def _unclaimed(name: str, outputs: Outputs) -> list[Mismatch]:
    """The outputs ``outputs`` passed over since last asked, each a mismatch (no trigger accounts for it)."""
    found: list[Mismatch] = [
        Unclaimed(
            processor=name,
            trigger_position=cause,
            trigger_type="",
            trigger_event_id=output.causation_id or "",
            path="causation",
            recorded=output.causation_id,
            recomputed=None,
            decision_position=output.position,
            decision_type=output.type,
        )
        for cause, output in outputs.strays
    ]
    outputs.strays.clear()
    return found
