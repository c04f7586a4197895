"""``allot events tail``: events as JSON lines, from the log, then live from NATS with ``--follow``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from typing import Any

from allot_bus import wire
from allot_bus.adapters.nats import connect
from allot_cli.connect import endpoints
from allot_cli.errors import UsageError
from allot_cli.logtools import event_json
from allot_eventstore.postgres import PostgresEventStore


def _matches(event_type: str, patterns: list[str]) -> bool:
    if not patterns:
        return True
    for pattern in patterns:
        if pattern.endswith(".*") and event_type.startswith(pattern[:-1]):
            return True
        if event_type == pattern or f"{event_type}" == pattern.rsplit(".v", 1)[0]:
            return True
    return False


async def tail(args: argparse.Namespace) -> None:
    ep = endpoints(need_nats=args.follow)
    store = PostgresEventStore.connect(ep.database_url)
    last = 0
    try:
        head = (await store.head())[0]
        start = max(head - args.last, 0) if args.from_position is None else args.from_position
        async for record in store.iterate(after=start):
            if _matches(record.type, args.type):
                print(json.dumps(event_json(record)), flush=True)
            last = record.position
    finally:
        await store.close()
    if not args.follow:
        return
    if not ep.nats_url:
        raise UsageError("--follow needs NATS (ALLOT_NATS_URL or a running dev stack)")
    nc = await connect(ep.nats_url, name="allot-events-tail")
    js = nc.jetstream()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    subjects = [ep.names.subject(t.rsplit(".v", 1)[0]) for t in args.type if not t.endswith(".*")] or [
        ep.names.all_events
    ]
    if any(t.endswith(".*") for t in args.type):
        subjects = [ep.names.all_events]

    async def on_message(msg: Any) -> None:
        nonlocal last
        record = wire.decode(msg.data)
        if record.position > last and _matches(record.type, args.type):
            last = record.position
            print(json.dumps(event_json(record)), flush=True)

    from nats.js.api import DeliverPolicy

    subs = [
        await js.subscribe(
            s, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW, cb=on_message, stream=ep.names.stream
        )
        for s in subjects
    ]
    print(f"# following {', '.join(subjects)} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    await stop.wait()
    for sub in subs:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    await nc.close()


def cmd_events(args: argparse.Namespace) -> int:
    asyncio.run(tail(args))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("events", help="read or subscribe to the event log")
    sub = p.add_subparsers(dest="events_command", metavar="SUBCOMMAND")
    sub.required = True
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
    t.add_argument("--last", type=int, default=20, help="how many recent events to start with (default 20)")
    t.add_argument("--from-position", type=int, help="start after this log position instead")
    t.set_defaults(func=cmd_events)
