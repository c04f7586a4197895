"""``allot bench ui``: its arguments and the printing of what :mod:`allot_sim.bench.ui` returns."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from allot_cli.bench import report
from allot_runtime.flags import size


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench import ui

    print(f"allot bench ui: simulating the openb cluster and {args.pods} pods ...", file=sys.stderr)
    report(ui.measure(args.nodes, args.pods_csv, pods=args.pods, repeat=args.repeat), as_json=args.json)
    return 0


def register(subparsers: Any) -> None:
    from allot_sim.bench.placement import DEFAULT_NODES, DEFAULT_PODS

    p = subparsers.add_parser("ui", help="page load times of the web audit view for the openb cluster")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--pods", type=size, default=2000, help="openb pods in the log (default 2000)")
    p.add_argument("--repeat", type=size, default=5, help="loads of each page (default 5)")
    p.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="openb node list CSV")
    p.add_argument("--pods-csv", type=Path, default=DEFAULT_PODS, help="openb pod list CSV")
    p.set_defaults(func=run)
