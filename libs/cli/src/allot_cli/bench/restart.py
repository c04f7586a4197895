"""``allot bench restart``: how long the services take to be ready again after a restart, on a long log.

A service that starts rebuilds its projection from the log up to its checkpoint before it takes any event
(``ServiceRunner.rebuild_projection``: ``allot_runtime.replay.rebuild``); only then does it attach to the bus and
report ready. This benchmark restarts that part of every service at once, as a restart of the stack does: one new
process per service instance (``spawn``: interpreter start and imports included), each rebuilding its projection
from PostgreSQL up to its checkpoint. ``ready_s`` is the wall time from the start until the last one is done (the
bus attach and catch-up that follow take milliseconds on a log that is not moving and are not included);
``slowest_rebuild_s`` is the longest rebuild alone (without the process start), each service's own rebuild time and
projection digest are listed too (every run must rebuild the same digests), and ``peak_rss_mib`` is the largest sum of the
processes' resident memory. The log is built or reused as by ``allot bench replay`` (same server, same databases).

With snapshots (the default; ``--no-snapshots`` measures the fold from position 0): before the timed runs, each
service's projection is folded once up to ``--snapshot-lag`` events before its checkpoint (20,000 by default, the
services' ``ALLOT_SNAPSHOT_EVERY``: the longest tail a restart refolds while the log is quiet), snapshot there and
written to the ``snapshots`` table, and the fold goes on to the checkpoint for the reference digest. A timed start
then restores the newest usable snapshot, checks it and folds the tail, exactly as ``rebuild_projection`` does; each
must reach the reference digest. A ``snapshots`` table the benchmark had to create is dropped afterwards.
"""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import report
from allot_cli.bench.replay import history_arguments, logs_from


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "restart",
        help="seconds until every service has rebuilt its projection after a restart, on a long log",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    history_arguments(p)
    p.add_argument(
        "--no-snapshots", dest="snapshots", action="store_false", help="fold every projection from position 0"
    )
    p.add_argument(
        "--snapshot-lag",
        type=int,
        default=20_000,
        help="events between the snapshot and the checkpoint (default: 20000)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.restart import measure

    report(
        measure(logs_from(args), snapshots=args.snapshots, snapshot_lag=args.snapshot_lag), as_json=args.json
    )
    return 0
