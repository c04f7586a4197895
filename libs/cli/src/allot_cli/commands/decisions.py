"""``allot decisions [-o FILE]``: the scheduling decisions of a live log, in the simulator's JSON-lines format.

``allot sim run SCENARIO -o sim.jsonl`` and, after ``allot apply --wait-each -f SCENARIO`` on a fresh stack,
``allot decisions -o live.jsonl`` give identical files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: ``allot decisions --help`` loads no view code
    from allot_views.decisions import Decision


async def live_decisions(url: str) -> list[Decision]:
    from allot_eventstore.postgres import PostgresEventStore
    from allot_views.decisions import decisions

    store = PostgresEventStore.connect(url)
    try:
        return decisions([r async for r in store.iterate()])
    finally:
        await store.close()


def cmd_decisions(args: argparse.Namespace) -> int:
    from allot_stack.connect import endpoints

    lines = asyncio.run(live_decisions(endpoints().database_url))
    out = open(args.output, "w") if args.output else sys.stdout  # noqa: SIM115
    try:
        for line in lines:
            out.write(json.dumps(line, sort_keys=True) + "\n")
    finally:
        if args.output:
            out.close()
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("decisions", help="export the scheduling decisions of the log as JSON lines")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p.set_defaults(func=cmd_decisions)
