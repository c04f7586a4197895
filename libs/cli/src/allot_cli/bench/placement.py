"""``allot bench placement``: its arguments and the printing of what :mod:`allot_sim.bench.placement` returns."""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import (
    benchmark_parser,
    checked_policy,
    node_count_argument,
    policy_argument,
    report,
    trace_arguments,
)
from allot_runtime.flags import processes, size, whole_number
from allot_sim.bench import placement as benchmark
from allot_sim.bench.placement import DEFAULT_NODES, DEFAULT_PODS, GUARD_TOLERANCE, trace_csv


def register(subparsers: Any) -> None:
    p = benchmark_parser(
        subparsers, benchmark, help="placement throughput on the openb trace and engine memory at 10k nodes"
    )
    trace_arguments(p, nodes=DEFAULT_NODES, pods=DEFAULT_PODS)
    p.add_argument("--limit", type=whole_number, default=0, help="schedule only the first N pods (0 = all)")
    node_count_argument(p, also=" and the pod list by the same factor")
    p.add_argument(
        "--repeat", type=size, default=5, help="throughput runs; the median is reported (default 5)"
    )
    p.add_argument("--rss-nodes", type=size, default=10_000, help="nodes in the memory run (default 10000)")
    p.add_argument(
        "--rss-pods", type=size, default=1_000, help="pods scheduled in the memory run (default 1000)"
    )
    p.add_argument(
        "--no-free-index",
        action="store_true",
        help="evaluate every node for a new pod shape (the engine without its free-resource index; same decisions)",
    )
    p.add_argument(
        "--shards",
        type=processes,
        default=1,
        help="prototype: split the nodes over N engines in N processes, pods routed by hash (ADR 0013; default 1)",
    )
    policy_argument(p, default="binpack", what="of the throughput runs (--check and --shards: binpack only)")
    p.add_argument("--skip-rss", action="store_true", help="skip the memory run")
    p.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 when the machine-normalised rate is more than {round(GUARD_TOLERANCE * 100)}%% below the recorded "
        f"baseline (the regression guard)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_intake.errors import UsageError
    from allot_sim.bench import placement

    policy = checked_policy(args.policy)
    for flag, given in (("--check", args.check), ("--shards", args.shards > 1)):
        if given and policy != "binpack":
            raise UsageError(
                f"{flag}: binpack only (its baseline and prototype are binpack's), not --policy {policy}"
            )
    workload = placement.Workload(
        trace_csv(args.nodes, "nodes CSV"),
        trace_csv(args.pods, "pods CSV"),
        node_count=args.node_count,
        limit=args.limit,
        repeat=args.repeat,
        policy=policy,
    )
    if args.shards > 1:
        report(placement.sharded(workload, shards=args.shards), as_json=args.json, sort_keys=True)
        return 0
    out = placement.measure(
        workload,
        free_index=not args.no_free_index,
        rss=None if args.skip_rss else (args.rss_nodes, args.rss_pods),
    )
    report(out, as_json=args.json, sort_keys=True)
    return 1 if args.check and out["guard"] != "ok" else 0
