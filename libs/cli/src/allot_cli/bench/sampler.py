"""``allot bench sampler``: its arguments and the printing of what :mod:`allot_sim.bench.sampler` returns."""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import report
from allot_runtime.flags import seconds, size
from allot_sim.bench import sampler as benchmark


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "sampler",
        help="CPU cost of node-reporter's NodeMetric sampling (pods, interval)",
        description=benchmark.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pods", type=size, default=100, help="pod cgroups on the node (default 100)")
    p.add_argument("--interval", type=seconds, default=1.0, help="seconds between samples (default 1)")
    p.add_argument(
        "--report", type=seconds, default=60.0, help="seconds between NodeMetric reports (default 60)"
    )
    p.add_argument(
        "--seconds", type=seconds, default=125.0, help="length of the run (default 125: two reports)"
    )
    p.add_argument(
        "--cgroups",
        choices=["real", "v1", "v2"],
        default=None,
        help="real cgroups (root, cgroup v1) or a file tree",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.sampler import measure

    result = measure(
        pods=args.pods, interval=args.interval, report=args.report, seconds=args.seconds, cgroups=args.cgroups
    )
    report(result, as_json=args.json)
    return 0
