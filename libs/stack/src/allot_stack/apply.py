"""What ``allot apply`` does with admitted documents: record them in the log, and the door that admits them.

:func:`door_for` builds the door (:class:`allot_intake.manifests.Door`) from the PriorityClasses, elastic quotas,
quota profiles, ClusterColocationProfiles and Namespaces already recorded (:mod:`allot_intake.recorded`); ``allot
whatif`` admits its documents through the same door. :func:`record` appends the documents' events in large batches
(one transaction per ``CHUNK_EVENTS`` events), their event ids fixed before the first attempt, so a batch retried
after a lost connection is recorded once; a pod that already exists is refused first (:func:`existing_pods`).
Transient database failures (a lost connection, a restarting server, a connection the driver left in a broken state)
are retried with backoff, while recording and while waiting; after a retry it ends by saying what was recorded, and
if the database stays away it says exactly which documents were recorded and which were not. It prints one line per
recorded object, then waits until the services have handled what it recorded (``wait``), or after every document
(``wait_each``: a running stack then decides in exactly the order ``allot sim run`` does).
"""

from __future__ import annotations

import functools
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from allot_intake.errors import InputError, UsageError
from allot_stack.connect import bounded_store, retrying

if TYPE_CHECKING:  # the engines, drivers and contracts are imported by the functions that run the command
    from allot_contracts.envelope import NewEvent
    from allot_contracts.events import Event
    from allot_eventstore.protocol import EventStore
    from allot_intake.documents import Document
    from allot_intake.manifests import Door, Input

VERBS = {
    "pod.submitted": "submitted",
    "pod.observed": "recorded (bound)",
    "object.ignored": "accepted (not acted on)",
    "workload.expanded": "expanded",
}
ENDS_A_POD = frozenset({"pod.deleted", "quota.evicted"})
CHUNK_EVENTS = 2000


@dataclass
class Planned:
    """One document's events, with their ids fixed before the first attempt to record them."""

    item: Input
    news: list[NewEvent]


async def existing_pods(store: EventStore, inputs: list[Input]) -> list[str]:
    """Pods the documents would submit although they already exist (recorded and not deleted since): a pod is
    created once; to change one, delete it and apply it again."""
    from allot_contracts.events import type_of

    streams = {stream for item in inputs for stream, _ in item.events if stream.startswith("pod:")}
    latest = (
        await store.latest_types(streams, ENDS_A_POD | {"pod.submitted", "pod.observed"}) if streams else {}
    )
    live = {stream: kind not in ENDS_A_POD for stream, kind in latest.items()}
    clashes: list[str] = []
    for item in inputs:
        for stream, event in item.events:
            if not stream.startswith("pod:"):
                continue
            kind = type_of(event)
            if kind in ("pod.submitted", "pod.observed"):
                if live.get(stream):
                    key = stream.split(":", 1)[1]
                    clashes.append(
                        f"{item.document.label()}: pod {key} already exists (delete it first to replace it)"
                    )
                live[stream] = True
            elif kind == "pod.deleted":
                live[stream] = False
    return clashes


def _chunks(plan: list[Planned], limit: int) -> Iterator[list[Planned]]:
    chunk: list[Planned] = []
    size = 0
    for planned in plan:
        if chunk and size + len(planned.news) > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(planned)
        size += len(planned.news)
    if chunk:
        yield chunk


def _ranges(docs: list[Document]) -> str:
    """``a.yaml documents 1-3, 7; b.yaml document 2``."""
    by_source: dict[str, list[int]] = {}
    for doc in docs:
        by_source.setdefault(doc.source, []).append(doc.index + 1)
    parts = []
    for source, numbers in by_source.items():
        spans: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            spans.append(f"{start}" if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        parts.append(f"{source} document{'s' if len(numbers) > 1 else ''} {', '.join(spans)}")
    return "; ".join(parts)


async def _report_partial(
    store: EventStore, done: list[Planned], rest: list[Planned], cause: Exception
) -> str:
    """What was recorded when the database went away for good: the documents appended before, plus those of the
    failed batch that did land (asked of the log if it answers again)."""
    recorded, unknown, missing = [p.item.document for p in done], [], []
    try:
        ids = await store.recorded_ids([n.event_id for p in rest for n in p.news])
    except Exception:
        ids = None
    for planned in rest:
        if ids is None:
            unknown.append(planned.item.document)
        elif all(n.event_id in ids for n in planned.news):
            recorded.append(planned.item.document)
        else:
            missing.append(planned.item.document)
    lines = [f"the event log is unavailable ({cause}); stopped"]
    lines.append(f"recorded: {_ranges(recorded)}" if recorded else "recorded: nothing")
    if missing:
        lines.append(f"not recorded: {_ranges(missing)}")
    if unknown:
        lines.append(
            f"unknown (the log could not be asked; re-applying them is safe only for objects other than "
            f"pods): {_ranges(unknown)}"
        )
    return "\n  ".join(lines)


def _describe(item: Input) -> Iterator[str]:
    from allot_contracts import kube
    from allot_contracts.events import type_of

    for stream, event in item.events:
        tag = type_of(event)
        kind = item.document.kind
        if kind == "Delete":
            kind = str(kube.spec_of(item.document.body).get("kind", kind))
        yield f"{kind.lower()}/{stream.split(':', 1)[1]} {VERBS.get(tag, tag.split('.')[-1])}"


async def record(
    url: str, inputs: list[Input], *, wait: bool, wait_each: bool, timeout: float, check_existing: bool = True
) -> None:
    from allot_contracts.envelope import NewEvent
    from allot_contracts.errors import TransientError

    store = bounded_store(url)
    try:
        if check_existing:
            clashes = await retrying(lambda: existing_pods(store, inputs), what="checking existing pods")
            if clashes:
                raise InputError("nothing was recorded:\n  " + "\n  ".join(clashes))
        plan: list[Planned] = []
        for item in inputs:
            if item.advance_seconds is not None:
                print(
                    f"{item.document.label()}: AdvanceClock only moves the simulator's clock; skipped "
                    "(a running stack keeps real time)",
                    file=sys.stderr,
                )
                continue
            plan.append(
                Planned(
                    item,
                    [
                        NewEvent(stream_id=stream, event=event, event_id=str(uuid.uuid4()))
                        for stream, event in item.events
                    ],
                )
            )
        done: list[Planned] = []
        retried: list[str] = []
        for chunk in _chunks(plan, 1 if wait_each else CHUNK_EVENTS):
            news = [new for planned in chunk for new in planned.news]
            try:
                await retrying(
                    functools.partial(store.append, news, producer="api"), what="recording", retried=retried
                )
            except TransientError as exc:
                raise UsageError(await _report_partial(store, done, plan[len(done) :], exc)) from exc
            done.extend(chunk)
            print("\n".join(line for planned in chunk for line in _describe(planned.item)), flush=True)
            if wait_each or (wait and len(done) == len(plan)):
                await _wait(store, timeout, done, plan[len(done) :], retried)
        if retried:  # the database went away and came back: say plainly that nothing was lost
            print(f"recorded: {_ranges([p.item.document for p in done]) or 'nothing'}", file=sys.stderr)
    finally:
        await store.close()


async def _wait(
    store: EventStore, timeout: float, done: list[Planned], rest: list[Planned], retried: list[str]
) -> None:
    """Wait for the services, retrying transient failures; when the database stays away, the error says what was
    recorded (all of ``done``) and what was not."""
    from allot_contracts.errors import TransientError
    from allot_stack.logtools import wait_idle

    what = "waiting for the services"
    try:
        await retrying(lambda: wait_idle(store, timeout=timeout), what=what, retried=retried)
    except TransientError as exc:
        lines = [f"{what} failed: the event log is unavailable ({exc}); stopped"]
        lines.append(f"recorded: {_ranges([p.item.document for p in done]) or 'nothing'}")
        if rest:
            lines.append(f"not recorded: {_ranges([p.item.document for p in rest])}")
        raise UsageError("\n  ".join(lines)) from exc


async def door_for(url: str, until: int | None = None) -> Door:
    """A door that knows the elastic quotas and quota profiles, PriorityClasses, ClusterColocationProfiles and
    Namespaces recorded so far (up to position ``until`` when given)."""
    from allot_intake.manifests import Door
    from allot_intake.recorded import DOOR_TYPES, learn

    store = bounded_store(url)
    door = Door(quotas=set())
    applied: dict[str, Event] = {}  # quota or profile stream -> its last applied object, until registered
    try:

        async def scan() -> None:
            async for record in store.iterate(types=DOOR_TYPES, until=until):
                learn(door, applied, record)

        await retrying(
            scan,
            what="reading recorded quotas, quota profiles, priority classes, colocation profiles and namespaces",
        )
    finally:
        await store.close()
    return door
