"""``allot bench quota``: its arguments and the printing of what :mod:`allot_sim.bench.quota` returns."""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import benchmark_parser, report
from allot_runtime.flags import size, whole_number
from allot_sim.bench import quota as benchmark


def register(subparsers: Any) -> None:
    parser = benchmark_parser(
        subparsers,
        benchmark,
        help="elastic quota: one pod request change in a 1,000-quota tree (goal p99 ≤ 5 ms)",
    )
    parser.add_argument("--quotas", type=size, default=1000, help="quotas in the tree (default 1000)")
    parser.add_argument(
        "--changes", type=size, default=2000, help="pod request changes to time (default 2000)"
    )
    parser.add_argument("--seed", type=whole_number, default=1, help="random seed (default 1)")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from allot_sim.bench.quota import run

    result = run(args.quotas, args.changes, args.seed)
    report(result, as_json=args.json)
    return 0 if result["goal_met"] else 1
