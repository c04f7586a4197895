"""``allot bench gang``: its arguments and the printing of what :mod:`allot_sim.bench.gang` returns."""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import report
from allot_cli.files import file_name
from allot_runtime.flags import size


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("gang", help="place or reject 200 gangs of 8 × 8-GPU pods on the openb nodes")
    p.add_argument("--json", action="store_true")
    p.add_argument("--nodes", type=file_name, help="openb node list CSV")
    p.add_argument("--gangs", type=size, default=200)
    p.add_argument("--size", type=size, default=8, help="members per gang (min-available)")
    p.add_argument("--gpus", type=size, default=8, help="GPUs per member")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.gang import measure

    report(measure(args.nodes, gangs=args.gangs, size=args.size, gpus=args.gpus), as_json=args.json)
    return 0
