"""What ``allot get -w`` prints as the log grows: the rows of a kind, then each row that appears or changes.

:func:`changes` polls the log head; when it moves, the kind's rows are loaded again (:func:`allot_stack.listing.loader`)
and compared with the last ones, without the columns that only count time (``5s ago``). A row that went is reported
as kubectl's watch reports a DELETED object (:func:`deleted`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from allot_eventstore.clock import iso
from allot_eventstore.protocol import EventStore
from allot_stack.listing import loader
from allot_views.kinds import Kind

Rows = list[dict[str, Any]]


def _identity(row: Mapping[str, object]) -> str:
    return f"{row.get('namespace', '')}/{row['name']}"


def _comparable(kind: Kind, row: Mapping[str, object]) -> dict[str, object]:
    """A row without the columns that only count time (``5s ago``): a watch prints rows whose state changed."""
    return {k: v for k, v in row.items() if k not in kind.ages}


async def changes(
    store: EventStore,
    kind: Kind,
    pick: Callable[[Rows], Rows],
    *,
    now: Callable[[], int],
    interval: float = 1.0,
    rounds: int | None = None,
) -> AsyncIterator[Rows]:
    """The rows ``pick`` keeps, then, each time the log head moves, those that appeared or changed and the last state
    of those that went. ``rounds`` bounds the polls (tests); otherwise it runs until the caller stops."""
    load = loader(kind)
    head = (await store.head())[0]  # before reading: what lands while it reads is yielded after the next poll
    rows = pick(await load(store, now()))
    yield rows
    last = {_identity(r): r for r in rows}
    polled = 0
    while rounds is None or polled < rounds:
        polled += 1
        await asyncio.sleep(interval)
        moved = (await store.head())[0]
        if moved == head:
            continue
        head = moved
        current = {_identity(r): r for r in pick(await load(store, now()))}
        changed = [
            r
            for key, r in current.items()
            if key not in last or _comparable(kind, last[key]) != _comparable(kind, r)
        ]
        changed += [deleted(kind, r, now()) for key, r in last.items() if key not in current]
        last = current
        if changed:
            yield changed


def deleted(kind: Kind, row: dict[str, Any], now: int) -> dict[str, Any]:
    """What a watch prints for a row that went, as kubectl's watch reports a DELETED object: its name and
    ``Deleted`` in its first column after the name (the phase, for pods), nothing it held (no node, no GPUs: another
    row may hold them now); as an object, ``metadata.deletionTimestamp`` and ``status.phase: Deleted``."""
    state = next(c for c in kind.columns if c not in ("name", "namespace"))
    gone = {k: row[k] for k in ("name", "namespace", "labels") if k in row}
    return gone | {state: "Deleted", "phase": "Deleted", "deletionTimestamp": iso(now)}
