"""Helpers over a live event log used by several commands: pipeline idleness, reading views, printing events."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from allot_contracts.envelope import RecordedEvent
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


def event_json(record: RecordedEvent) -> dict[str, Any]:
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


async def projection(store: EventStore, name: str, config: dict[str, Any] | None = None) -> Any:
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
