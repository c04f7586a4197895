"""Helpers over a live event log used by several commands: pipeline idleness, reading views, printing events, the
newest events of some types (``allot events tail``), the quota tree (``allot quota tree``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypedDict

import msgspec

from allot_contracts.envelope import RecordedEvent
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_eventstore.clock import iso
from allot_eventstore.protocol import EventStore
from allot_intake.errors import UsageError
from allot_views.cluster import ClusterView


async def pending_work(store: EventStore) -> dict[str, int]:
    """For each service, the first position of an event it has not handled yet (empty dict = the pipeline is idle)."""
    from allot_stack.pipeline import (
        interests,  # the seven processors: imported only by the commands that wait
    )

    checkpoints = await store.checkpoints()
    pending: dict[str, int] = {}
    for service, types in interests().items():
        consumers = [c for c in checkpoints if c.startswith(f"{service}@")] or [service]
        for name in consumers:
            first = await store.read(after=checkpoints.get(name, 0), types=types, limit=1)
            if first:
                pending[name] = first[0].position
    return pending


async def wait_idle(store: EventStore, *, timeout: float = 60.0, settle: float = 0.3) -> None:
    """Wait until every service has handled every event of interest and the head stopped moving."""
    deadline = time.monotonic() + timeout
    last_head = -1
    quiet_since: float | None = None
    while True:
        head = (await store.head())[0]
        pending = await pending_work(store)
        now = time.monotonic()
        if not pending and head == last_head:
            quiet_since = quiet_since or now
            if now - quiet_since >= settle:
                return
        else:
            quiet_since = None
        last_head = head
        if now > deadline:
            detail = (
                ", ".join(f"{n} at {p}" for n, p in sorted(pending.items())) or "the log head keeps moving"
            )
            raise UsageError(
                f"the pipeline did not settle within {timeout:.0f}s ({detail}); is the stack running?"
                " (allot status)"
            )
        await asyncio.sleep(0.05)


async def cluster_view(store: EventStore) -> ClusterView:
    view = ClusterView()
    async for record in store.iterate():
        view.apply(record)
    return view


class EventJson(TypedDict):
    """One event as ``allot events tail`` prints it (a JSON line)."""

    position: int
    type: str
    stream: str
    version: int
    producer: str
    time: str
    id: str
    causation: str | None
    payload: JsonValue


def event_json(record: RecordedEvent) -> EventJson:
    return {
        "position": record.position,
        "type": record.tag,
        "stream": record.stream_id,
        "version": record.stream_version,
        "producer": record.producer,
        "time": iso(record.recorded_at),
        "id": record.event_id,
        "causation": record.causation_id,
        "payload": msgspec.json.decode(record.payload),
    }


async def projection(store: EventStore, name: str, config: JsonObject | None = None) -> Any:
    """A service's processor rebuilt from the whole log (for views such as the quota tree or gang statuses), under
    the configuration the service last recorded (``config.applied``) unless ``config`` is given."""
    from allot_runtime.processor import Host
    from allot_runtime.recorded_config import recorded_configs
    from allot_runtime.replay import rebuild
    from allot_stack.pipeline import build

    if config is None:
        recorded = (await recorded_configs(store)).get(name, [])
        config = recorded[-1].config if recorded else {}
    host = Host(build(name, config))
    await rebuild(host, store, until=(await store.head())[0])
    return host.processor


def _matches(record: RecordedEvent, patterns: list[str]) -> bool:
    """Whether ``record`` is of a type (``pod.placed``), a tag (``pod.placed.v2``: that version only) or a kind
    (``pod.*``) of ``patterns`` (every record when there are none), as the subscribe client's filter matches."""
    if not patterns:
        return True
    for pattern in patterns:
        if pattern.endswith(".*"):
            if record.type.startswith(pattern[:-1]):
                return True
        elif pattern in (record.type, record.tag):
            return True
    return False


# ``recent`` reads the log backwards from the head in windows of positions, each twice the last up to this many
# events: the newest few of a common type cost one small read whatever the log's length; a rare type may walk back
# through the whole log, a window at a time.
_FIRST_WINDOW = 512
_LARGEST_WINDOW = 16_384


async def recent(
    store: EventStore, patterns: list[str], *, last: int, after: int | None
) -> tuple[list[RecordedEvent], int]:
    """The events to print before following, and the position read up to. ``after``: every matching event after that
    position; otherwise the ``last`` newest events that match ``patterns`` (counted after the type filter, so
    ``--type X --last 5`` prints the 5 newest X wherever they are in the log): asked of the store by type when
    ``patterns`` are type names, else read backwards from the head (the log's positions are dense: a window of
    positions is a window of events)."""
    from allot_contracts.events import type_pattern

    head = (await store.head())[0]
    if after is not None:
        found = [
            record async for record in store.iterate(after=after, until=head) if _matches(record, patterns)
        ]
        return found, max(head, after)
    if patterns and all((form := type_pattern(p)) is not None and form[0] == "type" for p in patterns):
        # type names only: the store walks its index of each type back, however far back the newest ones are
        return await store.newest(patterns, limit=max(last, 0), until=head), head
    windows: list[list[RecordedEvent]] = []  # newest first
    wanted, until, size = max(last, 0), head, _FIRST_WINDOW
    while wanted and until > 0:
        start = max(until - size, 0)
        window = [
            r
            for r in await store.read(after=start, until=until, limit=until - start)
            if _matches(r, patterns)
        ]
        windows.append(window[-wanted:])
        wanted -= len(windows[-1])
        until, size = start, min(size * 2, _LARGEST_WINDOW)
    return [record for window in reversed(windows) for record in window], head


async def quota_tree(store: EventStore) -> list[dict[str, Any]]:
    """The elastic quota tree as quota-manager's own decision code folds it from the log (``allot quota tree``)."""
    processor = await projection(store, "quota-manager")
    return list(processor.engine.tree_view())
