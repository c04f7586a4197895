"""``allot bench replay``: its arguments and the printing of what :mod:`allot_sim.bench.replay` returns."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any

from allot_cli.bench import benchmark_parser, report
from allot_runtime.flags import size, sizes
from allot_sim.bench import replay as benchmark
from allot_sim.bench.placement import DEFAULT_NODES, DEFAULT_PODS
from allot_sim.bench.replay import Logs


def register(subparsers: Any) -> None:
    p = history_parser(
        subparsers, benchmark, help="events/s and peak memory of `allot replay --verify` on a long log"
    )
    p.set_defaults(func=run)


def history_parser(subparsers: Any, module: ModuleType, *, help: str) -> argparse.ArgumentParser:
    """The subcommand of the benchmark ``module`` that runs on built logs (this one and ``allot bench restart``),
    with the options they share (``--no-compile``: ``compiled`` False)."""
    p = benchmark_parser(subparsers, module, help=help, with_json=False)
    p.add_argument(
        "--events", type=sizes, default="300000", help="log sizes, comma-separated (default 300000)"
    )
    p.add_argument(
        "--runs", type=size, default=3, help="timed runs per size; the median is reported (default 3)"
    )
    p.add_argument("--fresh", action="store_true", help="rebuild a kept log instead of reusing it")
    p.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="openb node list CSV")
    p.add_argument("--pods-csv", type=Path, default=DEFAULT_PODS, help="openb pod list CSV")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--no-compile",
        dest="compiled",
        action="store_false",
        help="time the processes with the bytecode the environment has, instead of compiling it first "
        "(with PYTHONDONTWRITEBYTECODE set, every timed process then compiles its sources)",
    )
    return p


def logs_from(args: argparse.Namespace) -> Logs:
    """The logs ``--events``, ``--runs``, ``--fresh``, ``--nodes`` and ``--pods-csv`` ask for."""
    return Logs(
        events=args.events, runs=args.runs, fresh=args.fresh, nodes=args.nodes, pods_csv=args.pods_csv
    )


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.replay import verify_on_logs

    report(verify_on_logs(logs_from(args), compiled=args.compiled), as_json=args.json)
    return 0
