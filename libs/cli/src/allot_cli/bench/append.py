"""``allot bench append``: throughput of the event log's batched append against two reference points.

One process, one PostgreSQL server, a fresh database per contender, the same decisions in the same batches:

- ``eventsourcing``: the ``eventsourcing`` library's application (``PERSISTENCE_MODULE=eventsourcing.postgres``,
  its Postgres application recorder, default settings) saving a batch of new aggregates in one call
  (``app.save(*aggregates)``); each aggregate has one created event whose attribute is the decision (the same
  fields as our payload, as JSON builtins).
- ``copy``: raw asyncpg ``copy_records_to_table`` of the finished rows (built beforehand, hashes included) into an
  ``events`` table created by our migrations (same columns, indexes and constraints), one COPY (one transaction)
  per batch. The database's fastest write path: no lock, no duplicate check, no version check, no hashing.
- ``ours``: ``PostgresEventStore.append`` of a batch of decision events (one new pod stream each, ids derived from
  the trigger as the services derive them) with the consumer checkpoint in the same transaction, as a service
  records its decisions.

The decision is ``pod.placed`` (the device-allocator's record of a 2-GPU, NUMA-aligned placement, ~1.8 kB of JSON)
or, with ``--event pod.enqueued``, a ~90-byte one. Each contender warms up, then appends ``--events`` events in
batches of ``--batch`` per run; the rate of a run is events / wall time of the appends (inputs are built before the
clock starts). The median of ``--runs`` runs is reported; contenders take turns within a run and the order rotates
between runs. A ``CHECKPOINT`` before every timed section (when the role may issue one) keeps the background flush
of one contender out of another's figure.

Server: ``ALLOT_DATABASE_URL`` when set (scratch databases are created on it and dropped afterwards); otherwise an
embedded PostgreSQL under a temporary directory with default durability (fsync and synchronous_commit on), stopped
afterwards. Progress goes to stderr; the result to stdout. Exit status 1 when the goal (ours at least 10x
eventsourcing and 0.5x COPY) is missed.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from allot_cli.bench import report
from allot_sim.bench._postgres import postgres_server
from allot_sim.bench.append import WORKLOADS, run_benchmark


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "append",
        help="event log: our batched append vs eventsourcing's Postgres recorder vs raw COPY",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--events", type=int, default=20_000, help="events per contender per run (default 20000)"
    )
    parser.add_argument(
        "--batch", type=int, default=1000, help="events per append / save / COPY (default 1000)"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs; the median is reported (default 5)")
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
