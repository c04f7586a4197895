"""``allot events tail``: events as JSON lines, from the log, then live with ``--follow`` (the subscribe client:
catch-up from PostgreSQL, NATS for what comes next, every event once and in order)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from typing import TYPE_CHECKING, Any

from allot_cli._groups import subcommands
from allot_intake.errors import UsageError
from allot_runtime.flags import after_position, event_count

NATS_WAIT_S = (
    10.0  # seconds --follow waits for NATS to answer at the start (a stack still starting is waited for)
)

if TYPE_CHECKING:
    from allot_contracts.envelope import RecordedEvent
    from allot_eventstore.protocol import EventStore


async def tail(args: argparse.Namespace) -> None:
    from allot_stack.connect import endpoints, on_log
    from allot_stack.logtools import event_json, recent

    ep = endpoints(need_nats=args.follow)
    if args.follow:  # settings that cannot work are refused before anything is printed
        _check_nats(ep.nats_url, ep.nats_from)

    async def newest(store: EventStore) -> tuple[list[RecordedEvent], int]:
        await _check_types(store, args.type or [])
        return await recent(store, args.type, last=args.last, after=args.from_position)

    records, last = await on_log(newest, ep.database_url)
    for record in records:
        print(json.dumps(event_json(record)), flush=True)
    if args.follow:
        await follow(ep, args, after=last)


def _check_nats(url: str | None, origin: str) -> None:
    """A NATS URL that cannot work is refused naming where it came from (``origin``: ALLOT_NATS_URL, or the dev
    stack's ``stack.json``)."""
    from allot_bus.adapters import natsauth

    if not url:
        raise UsageError("--follow needs NATS (ALLOT_NATS_URL or a running dev stack)")
    if problems := natsauth.problems(natsauth.from_env(), url, url_from=origin):
        raise UsageError("; ".join(f"{setting}: {reason}" for setting, reason in problems))


async def _check_types(store: EventStore, patterns: list[str]) -> None:
    """``--type`` names an event type (``pod.placed``), a tag (``pod.placed.v2``) or a kind (``pod.*``) that Allot
    records or that the log holds: a typo would otherwise print nothing and follow nothing, silently. Patterns are
    read as the subscription filter reads them (``type_pattern``), without importing the client and its NATS
    driver, which a read of the log does not need."""
    from difflib import get_close_matches

    from allot_contracts.clipping import clipped
    from allot_contracts.events import ALL_EVENT_TYPES, newest_version, split_tag, type_pattern

    kinds = {name.split(".")[0] for name in ALL_EVENT_TYPES}
    for pattern in patterns:
        form = type_pattern(pattern)
        if form is None:
            raise UsageError(
                f"--type: {clipped(pattern)} is not an event type (pod.placed), tag (pod.placed.v2) or kind (pod.*)"
            )
        if form[0] == "kind":
            if form[1] not in kinds:
                known = ", ".join(sorted(kinds))
                raise UsageError(f"--type: no event type is of kind {clipped(form[1])} (kinds: {known})")
            continue
        name, version = split_tag(pattern) if form[0] == "tag" else (pattern, None)
        newest = newest_version(name)
        if version is not None and newest is not None and version > newest:
            raise UsageError(
                f"--type: {clipped(pattern)}: {name} is recorded as v1 to v{newest}, so no event is tagged {pattern}"
            )
        if name not in ALL_EVENT_TYPES and not await store.holds_any([name]):
            near = get_close_matches(name, ALL_EVENT_TYPES, n=3)
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise UsageError(
                f"--type: {clipped(name)} is not an event type Allot records, nor one the log holds{hint}"
            )


async def follow(ep: Any, args: argparse.Namespace, *, after: int) -> None:
    """New events as they are recorded, each once and in order, through NATS restarts (the subscribe client). NATS
    is waited for :data:`NATS_WAIT_S` seconds at the start: a server that does not answer by then (a wrong
    ALLOT_NATS_URL, a stack that is down) ends the command saying what failed, not a wait without end."""
    from allot_bus.adapters.nats import connect
    from allot_client import AllotClient, Filter, FilterError
    from allot_eventstore.bounds import DB_READ_TIMEOUT_VARIABLE
    from allot_runtime.signals import stop_on_signals
    from allot_stack.connect import db_bounds
    from allot_stack.logtools import event_json

    read_timeout = db_bounds()[0]  # as the commands that read the log (ALLOT_DB_READ_TIMEOUT)
    try:
        flt = Filter(types=args.type)
    except FilterError as exc:
        raise UsageError(f"--type: {exc}") from exc
    stop = stop_on_signals()

    async def printing() -> None:
        nc = await connect(
            ep.nats_url, name="allot-events-tail", give_up_after=NATS_WAIT_S, url_from=ep.nats_from
        )
        client = AllotClient(
            database_url=ep.database_url,
            prefix=ep.names.prefix,
            stream=ep.names.stream,
            name="allot-events-tail",
            nc=nc,
            read_timeout=read_timeout,
            timeouts_from=DB_READ_TIMEOUT_VARIABLE,
        )
        try:
            async with client:
                subscription = client.follow(after=after, types=sorted(flt.types))
                print(
                    f"# following {ep.names.all_events} after position {after} (Ctrl-C to stop)",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    async for delivery in subscription:
                        print(json.dumps(event_json(delivery.record)), flush=True)
                finally:
                    await subscription.close()
        finally:
            await nc.close()

    # Ctrl-C or SIGTERM ends the command at any point: while it waits for NATS as well as while it follows
    task = asyncio.create_task(printing())
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, waiter):
            pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    failure = task.exception() if task.done() and not task.cancelled() else None
    if failure is not None:
        raise failure


def cmd_events(args: argparse.Namespace) -> int:
    asyncio.run(tail(args))
    return 0


def register(subparsers: Any) -> None:
    sub = subcommands(subparsers, "events", help_text="read or subscribe to the event log")
    t = sub.add_parser("tail", help="print events as JSON lines; --follow subscribes to new ones")
    t.add_argument(
        "--type",
        action="append",
        default=[],
        help="event type to show, e.g. pod.placed or pod.* (repeatable)",
    )
    t.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new events as they are published"
    )
    t.add_argument(
        "--last",
        type=event_count,
        default=20,
        help="how many of the newest matching events (after --type) to start with (default 20)",
    )
    t.add_argument("--from-position", type=after_position, help="start after this log position instead")
    t.set_defaults(func=cmd_events)
