"""``allot bench e2e``: its arguments and the printing of what :mod:`allot_sim.bench.e2e` returns."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from allot_cli.bench import (
    benchmark_parser,
    checked_policy,
    node_count_argument,
    policy_argument,
    report,
    trace_arguments,
)
from allot_runtime.flags import seconds, size
from allot_sim.bench import e2e as benchmark
from allot_sim.bench.placement import DEFAULT_NODES, DEFAULT_PODS


def register(subparsers: Any) -> None:
    p = benchmark_parser(
        subparsers, benchmark, help="pods/s and latency through the running stack (starts its own)"
    )
    p.add_argument("--pods", type=size, default=5000, help="pods in the burst (default 5000)")
    p.add_argument(
        "--rates", default="100,300,1000", help="open-loop offered rates, pods/s (default 100,300,1000)"
    )
    p.add_argument(
        "--duration", type=seconds, default=5.0, help="seconds each open-loop rate is offered (default 5)"
    )
    trace_arguments(p, nodes=DEFAULT_NODES, pods=DEFAULT_PODS, pods_flag="--pods-csv")
    p.add_argument(
        "--state-dir", type=Path, help="keep the stack's data and logs here (default: a temporary dir)"
    )
    p.add_argument("--timeout", type=seconds, default=600.0, help="seconds any phase may take (default 600)")
    node_count_argument(p, also="; 6065 is the five-fold openb cluster")
    policy_argument(
        p, default="koordinator", what="of the stack's device-allocator (its default) and of the engine alone"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_cli.commands.stack import Progress
    from allot_sim.bench.e2e import Options, measure

    policy = checked_policy(args.policy)  # before anything starts

    options = Options(
        pods=args.pods,
        rates=args.rates,
        duration=args.duration,
        nodes=args.nodes,
        pods_csv=args.pods_csv,
        state_dir=args.state_dir,
        timeout=args.timeout,
        node_count=args.node_count,
        policy=policy,
    )
    out = measure(options, reporter=Progress())
    report(out, as_json=args.json)
    return 0
