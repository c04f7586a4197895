"""``allot bench e2e``: pods per second through the running stack, against the placement engine alone.

Starts the real stack exactly as ``allot up`` does (embedded PostgreSQL and nats-server, migrations, the relay and
the seven services as separate supervised processes) in a temporary state directory, then:

1. **cluster**: ``allot apply -f`` of the openb GPU cluster (1,213 ``v1 Node`` + 1,213 Koordinator ``Device``), as a
   user runs it: the command's wall time, until the services have handled every object, gives
   ``cluster_objects_per_s``.
2. **burst**: ``allot apply --no-wait`` of the first ``--pods`` pods of the openb pod list (5,000 by default) in one
   file; ``e2e_pods_per_s`` = pods / seconds from the first ``pod.submitted`` to the last terminal decision
   (``pod.bound``, ``pod.unschedulable`` or ``pod.rejected``), all read from the log's recorded times.
3. **open loop**: for each ``--rates`` value, pods offered at that rate for ``--duration`` seconds (appended by a
   paced submitter, as an API would); ``p50_ms`` / ``p99_ms`` of submit→bound at each rate. Latency is only
   meaningful below saturation; the figure at a rate above it shows the queue growing.
4. **in process**: the same burst pods through the placement engine alone (``allot bench placement``'s loop),
   before the stack starts: ``distribution_penalty`` = in-process pods/s ÷ ``e2e_pods_per_s``.

Between phases every pod is deleted (and its allocation released) so each phase starts from an empty cluster.
Per-hop p50/p99 come from the recorded time of each event of a pod's path; ``cpu_s_per_1000_pods`` is the CPU
time each process of the stack used during the burst (PostgreSQL: the postmaster and its backends), which is where
the time goes. Prints one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from allot_cli.bench import report
from allot_sim.bench.placement import DEFAULT_NODES, DEFAULT_PODS


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "e2e",
        help="pods/s and latency through the running stack (starts its own)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--pods", type=int, default=5000, help="pods in the burst (default 5000)")
    p.add_argument(
        "--rates", default="100,300,1000", help="open-loop offered rates, pods/s (default 100,300,1000)"
    )
    p.add_argument(
        "--duration", type=float, default=5.0, help="seconds each open-loop rate is offered (default 5)"
    )
    p.add_argument(
        "--nodes",
        type=Path,
        default=DEFAULT_NODES,
        help=f"openb node list CSV (default: ../shared/traces/openb/{DEFAULT_NODES.name} beside the checkout)",
    )
    p.add_argument(
        "--pods-csv",
        type=Path,
        default=DEFAULT_PODS,
        help=f"openb pod list CSV (default: ../shared/traces/openb/{DEFAULT_PODS.name} beside the checkout)",
    )
    p.add_argument(
        "--state-dir", type=Path, help="keep the stack's data and logs here (default: a temporary dir)"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds any phase may take (default 600)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_cli.commands.stack import Progress
    from allot_cli.logtools import pending_work, wait_idle
    from allot_sim.bench.e2e import Options, Waits, measure

    options = Options(
        pods=args.pods,
        rates=args.rates,
        duration=args.duration,
        nodes=args.nodes,
        pods_csv=args.pods_csv,
        state_dir=args.state_dir,
        timeout=args.timeout,
    )
    out = measure(options, waits=Waits(pending_work, wait_idle), reporter=Progress())
    report(out, as_json=args.json)
    return 0
