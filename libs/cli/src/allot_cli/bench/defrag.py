"""``allot bench defrag``: its arguments and the printing of what :mod:`allot_sim.bench.defrag` returns."""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import report
from allot_cli.files import file_name
from allot_runtime.flags import factor, size


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "defrag", help="the openb trace with and without the GPU defragmentation descheduler"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--trace", default="default", help="openb pod list name (openb_pod_list_<trace>.csv)")
    p.add_argument("--pods", type=file_name, help="openb pod list CSV (overrides --trace)")
    p.add_argument("--nodes", type=file_name, help="openb node list CSV")
    p.add_argument("--seeds", default="42,43,44", help="comma-separated seeds (the median is printed)")
    p.add_argument("--tune", type=factor, default=1.3, help="arrived GPU request as a multiple of capacity")
    p.add_argument(
        "--max-per-plan", type=size, default=1, help="GPUDefrag maxMigrationsPerPlan (2 and more: slow)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.defrag import DefragRun, measure

    def show(r: DefragRun) -> None:
        print(" ".join(f"{k}={v}" for k, v in r.items()))

    result = measure(
        nodes=args.nodes,
        pods=args.pods,
        trace=args.trace,
        seeds=[int(s) for s in args.seeds.split(",") if s],
        tune=args.tune,
        max_per_plan=args.max_per_plan,
        on_run=None if args.json else show,
    )
    report(result, as_json=args.json)
    return 0
