"""Rebuilding projections from the log, and re-deriving every decision (``allot replay --verify``).

``rebuild`` folds the log into a processor exactly as the live service did: inputs in position order, each followed
by the outputs recorded for it. ``verify_decisions`` additionally re-runs ``decide`` at every trigger and compares
the result with what was recorded, field by field; it keeps going with the recorded outputs so one divergence does
not cascade into noise, and reports every mismatch (the CLI prints the first).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
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


class Verified(msgspec.Struct, frozen=True, kw_only=True):
    """What verifying one processor found: triggers re-derived, the mismatches among them, and the triggers after its
    checkpoint that it has not decided yet (``behind``: lag, not compared)."""

    checked: int = 0
    mismatches: list[Mismatch] = []
    behind: int = 0


async def verify_many(
    hosts: list[Host], store: EventStore, *, until: int | None = None, through: dict[str, int] | None = None
) -> dict[str, Verified]:
    """``verify_decisions`` for many processors in two passes over the log instead of two per processor: the first
    indexes every processor's recorded outputs by trigger, the second feeds each event to every processor that
    consumes it, in log order. ``through`` gives, per processor, the last position it has decided (its checkpoint):
    triggers after it are counted as ``behind`` instead of being compared, since a service that is merely behind has
    recorded nothing for them yet."""
    names = {host.name for host in hosts}
    limits = through or {}
    outputs: dict[str, dict[str, list[RecordedEvent]]] = {name: {} for name in names}
    async for record in store.iterate():
        if record.producer in names and record.causation_id is not None:
            outputs[record.producer].setdefault(record.causation_id, []).append(record)
    checked = dict.fromkeys(names, 0)
    behind = dict.fromkeys(names, 0)
    mismatches: dict[str, list[Mismatch]] = {name: [] for name in names}
    by_type: dict[str, list[Host]] = {}
    for host in hosts:
        for event_type in host.interests:
            by_type.setdefault(event_type, []).append(host)
    async for record in store.iterate(until=until):
        for host in by_type.get(record.type, ()):
            if record.producer == host.name:
                continue
            if record.position > limits.get(host.name, record.position):
                behind[host.name] += 1
                continue
            found = _compare(host, record, outputs[host.name].get(record.event_id, []))
            checked[host.name] += 1
            if found is not None:
                mismatches[host.name].append(found)
    return {
        name: Verified(checked=checked[name], mismatches=mismatches[name], behind=behind[name])
        for name in names
    }
