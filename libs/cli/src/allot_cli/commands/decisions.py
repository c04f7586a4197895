"""``allot decisions [-o FILE]``: the scheduling decisions of a live log, in the simulator's JSON-lines format.

``allot sim run SCENARIO -o sim.jsonl`` and, after ``allot apply --wait-each -f SCENARIO`` on a fresh stack,
``allot decisions -o live.jsonl`` give identical files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from allot_cli.files import file_name, prepare_output, write_lines

if TYPE_CHECKING:  # imported where used: ``allot decisions --help`` loads no view code
    from allot_views.decisions import Decision


async def live_decisions(url: str) -> list[Decision]:
    from allot_stack.connect import bounded_store
    from allot_views.decisions import decisions

    store = bounded_store(url)
    try:
        return decisions([r async for r in store.iterate()])
    finally:
        await store.close()


def cmd_decisions(args: argparse.Namespace) -> int:
    from allot_stack.connect import endpoints

    if args.output:  # before the log is read
        prepare_output(Path(args.output), flag="-o/--output")
    lines = asyncio.run(live_decisions(endpoints().database_url))
    rows = (json.dumps(line, sort_keys=True) + "\n" for line in lines)
    if args.output:
        write_lines(args.output, rows, flag="-o/--output")
    else:
        sys.stdout.writelines(rows)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("decisions", help="export the scheduling decisions of the log as JSON lines")
    p.add_argument("-o", "--output", type=file_name, help="file to write (default: stdout)")
    p.set_defaults(func=cmd_decisions)
