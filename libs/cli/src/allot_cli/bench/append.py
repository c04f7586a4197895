"""``allot bench append``: its arguments and the printing of what :mod:`allot_sim.bench.append` returns."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from allot_cli.bench import benchmark_parser, report
from allot_runtime.flags import size
from allot_sim.bench import append as benchmark
from allot_sim.bench._postgres import postgres_server
from allot_sim.bench.append import WORKLOADS, run_benchmark


def register(subparsers: Any) -> None:
    parser = benchmark_parser(
        subparsers,
        benchmark,
        help="event log: our batched append vs eventsourcing's Postgres recorder vs raw COPY",
    )
    parser.add_argument(
        "--events", type=size, default=20_000, help="events per contender per run (default 20000)"
    )
    parser.add_argument(
        "--batch", type=size, default=1000, help="events per append / save / COPY (default 1000)"
    )
    parser.add_argument("--runs", type=size, default=5, help="timed runs; the median is reported (default 5)")
    parser.add_argument(
        "--event",
        choices=sorted(WORKLOADS),
        default="pod.placed",
        help="decision to append: pod.placed (~1.8 kB, the default) or pod.enqueued (~90 B)",
    )
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    with postgres_server() as (url, source):
        result = asyncio.run(
            run_benchmark(
                url,
                events=args.events,
                batch=args.batch,
                runs=args.runs,
                event_type=args.event,
                source=source,
            )
        )
    report(result, as_json=args.json)
    return 0 if result["goal_met"] else 1
