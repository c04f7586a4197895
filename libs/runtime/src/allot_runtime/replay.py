"""Rebuilding projections from the log, and re-deriving every decision (``allot replay --verify``).

``rebuild`` folds the log into a processor exactly as the live service did: inputs in position order, each followed
by the outputs recorded for it. ``verify_decisions`` additionally re-runs ``decide`` at every trigger and compares
the result with what was recorded, field by field; it keeps going with the recorded outputs so one divergence does
not cascade into noise, and reports every mismatch (the CLI prints the first).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from allot_contracts.envelope import RecordedEvent, canonical
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


async def own_outputs(store: EventStore, producer: str) -> dict[str, list[RecordedEvent]]:
    by_cause: dict[str, list[RecordedEvent]] = {}
    async for record in store.iterate(producer=producer):
        if record.causation_id is not None:
            by_cause.setdefault(record.causation_id, []).append(record)
    return by_cause


async def inputs(host: Host, store: EventStore, until: int | None) -> AsyncIterator[RecordedEvent]:
    async for record in store.iterate(types=host.interests, until=until):
        if record.producer != host.name:
            yield record


async def rebuild(host: Host, store: EventStore, *, until: int) -> int:
    outputs = await own_outputs(store, host.name)
    async for record in inputs(host, store, until):
        host.apply_recorded(record, outputs.get(record.event_id, ()))
    host.position = until
    return until


def _compare(host: Host, trigger: RecordedEvent, recorded: Iterable[RecordedEvent]) -> Mismatch | None:
    kept = list(recorded)
    event = host.accept(trigger, kept)
    if event is None and dead_lettered(
        kept
    ):  # the service gave up on it and rebuilt without it; so does replay
        host.position = trigger.position
        return None
    emits: list[Any] = []
    if event is not None:
        host.processor.evolve(event, at=trigger.recorded_at, own=False)
        emits = host.processor.decide(event, at=trigger.recorded_at)
    news = host.to_new_events(trigger, emits, trigger=event)
    mismatch: Mismatch | None = None
    rec_view = [{"stream": r.stream_id, "tag": r.tag, "payload": r.payload_dict()} for r in kept]
    new_view = [
        {"stream": n.stream_id, "tag": n.tag, "payload": msgspec.json.decode(canonical(n.event))}
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
    for output in kept:
        host.evolve_own(output.decode(), at=trigger.recorded_at)
    host.position = trigger.position
    return mismatch


async def verify_decisions(
    host: Host, store: EventStore, *, until: int | None = None
) -> tuple[int, list[Mismatch]]:
    """Re-derive every decision of ``host``'s processor. Returns (triggers checked, mismatches)."""
    outputs = await own_outputs(store, host.name)
    checked = 0
    mismatches: list[Mismatch] = []
    async for record in inputs(host, store, until):
        found = _compare(host, record, outputs.get(record.event_id, ()))
        checked += 1
        if found is not None:
            mismatches.append(found)
    return checked, mismatches


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


class Switch(msgspec.Struct, frozen=True):
    """From the first trigger after ``after`` on, a processor decided under another configuration: ``build`` makes
    the host of that configuration, which is rebuilt from the log up to ``after`` (as the restarted service was)."""

    after: int
    build: Callable[[], Host]


class _Verifying:
    """One processor being verified: its current host, the configuration switches still ahead, and the counts of
    the configuration in force (plain counters: this runs once per trigger)."""

    def __init__(self, host: Host, switches: Sequence[Switch]) -> None:
        self.host = host
        self.pending = sorted(switches, key=lambda switch: switch.after)
        self.done: list[Governed] = []
        self.after = self.checked = self.first = self.last = 0
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
        )


async def verify_many(
    hosts: list[Host],
    store: EventStore,
    *,
    until: int | None = None,
    through: dict[str, int] | None = None,
    switches: Mapping[str, Sequence[Switch]] | None = None,
) -> dict[str, Verified]:
    """``verify_decisions`` for many processors in two passes over the log instead of two per processor: the first
    indexes every processor's recorded outputs by trigger, the second feeds each event to every processor that
    consumes it, in log order. ``through`` gives, per processor, the last position it has decided (its checkpoint):
    triggers after it are counted as ``behind`` instead of being compared, since a service that is merely behind has
    recorded nothing for them yet. ``switches`` gives, per processor, where it went on under another configuration
    (``config.applied``: :mod:`allot_runtime.recorded_config`); each trigger is re-derived under its own."""
    names = {host.name for host in hosts}
    limits = through or {}
    outputs: dict[str, dict[str, list[RecordedEvent]]] = {name: {} for name in names}
    async for record in store.iterate():
        if record.producer in names and record.causation_id is not None:
            outputs[record.producer].setdefault(record.causation_id, []).append(record)
    runs = {host.name: _Verifying(host, (switches or {}).get(host.name, ())) for host in hosts}
    by_type: dict[str, list[_Verifying]] = {}
    for host in hosts:
        for event_type in host.interests:
            by_type.setdefault(event_type, []).append(runs[host.name])
    async for record in store.iterate(until=until):
        for run in by_type.get(record.type, ()):
            name = run.host.name
            if record.producer == name:
                continue
            if record.position > limits.get(name, record.position):
                run.behind += 1
                continue
            if run.due(record.position):
                await run.switch(record.position, store)
            run.compared(record.position, _compare(run.host, record, outputs[name].get(record.event_id, [])))
    return {name: run.result() for name, run in runs.items()}
