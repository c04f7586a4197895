"""``allot ui``: the web audit view, read-only, served from the log (see ``allot_cli.ui.server`` for the pages)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any


async def _run(args: argparse.Namespace) -> None:
    from allot_cli.ui.model import UiModel
    from allot_cli.ui.server import serve
    from allot_eventstore.postgres import PostgresEventStore
    from allot_stack.connect import endpoints

    store = PostgresEventStore.connect(endpoints().database_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        runner = await serve(UiModel(store), args.host, args.port, poll=args.poll)
    except BaseException:
        await store.close()
        raise
    try:
        print(f"allot ui: serving the audit view on http://{args.host}:{args.port}/", file=sys.stderr)
        await stop.wait()
    finally:
        await runner.cleanup()
        await store.close()


def cmd_ui(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_run(args))
    except OSError as exc:
        print(f"allot ui: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ui", help="serve the web audit view (read-only) of the event log")
    p.add_argument(
        "--host", default=os.environ.get("ALLOT_UI_HOST", "127.0.0.1"), help="address to listen on"
    )
    p.add_argument(
        "--port", type=int, default=int(os.environ.get("ALLOT_UI_PORT", "8088")), help="port (default 8088)"
    )
    p.add_argument("--poll", type=float, default=0.5, help="seconds between reads of the log (default 0.5)")
    p.set_defaults(func=cmd_ui)
