"""``allot bench restart``: its arguments and the printing of what :mod:`allot_sim.bench.restart` returns."""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import report
from allot_cli.bench.replay import history_parser, logs_from
from allot_runtime.flags import event_count
from allot_sim.bench import restart as benchmark


def register(subparsers: Any) -> None:
    p = history_parser(
        subparsers,
        benchmark,
        help="seconds until every service has rebuilt its projection after a restart, on a long log",
    )
    p.add_argument(
        "--no-snapshots", dest="snapshots", action="store_false", help="fold every projection from position 0"
    )
    p.add_argument(
        "--snapshot-lag",
        type=event_count,
        default=20_000,
        help="events between the snapshot and the checkpoint (default: 20000)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.restart import measure

    report(
        measure(
            logs_from(args), snapshots=args.snapshots, snapshot_lag=args.snapshot_lag, compiled=args.compiled
        ),
        as_json=args.json,
    )
    return 0
