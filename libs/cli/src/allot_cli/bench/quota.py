"""``allot bench quota``: cost of one pod request change in a 1,000-quota, 4-level elastic-quota tree.

What is measured (wall time, ``time.perf_counter_ns``, one process, after a warm-up):

- ``incremental``: one pod request change through the engine API (``add_pending`` of a new pod, or
  ``remove_pod`` of an earlier one, in a random leaf). Each call parses the pod, propagates the request delta up
  the tree, brings the leaf's runtime up to date (the calculators on the path root → leaf, recomputed only if
  stale) and returns its record. This is what the quota-manager pays per pod event.
- ``propagate`` / ``recompute_path``: the same change on the core alone, split into the request propagation and
  the path recompute (``calculators_recomputed_per_change`` counts the calculators that actually ran).
- ``incremental_all``: an API change plus bringing *every* runtime up to date (only stale calculators recompute).
- ``full_recompute``: every calculator recomputed from scratch (the baseline for the ratio).

The tree: 4 top-level quotas, 6 children each, 6 grandchildren each, and the remaining quotas as leaves spread
evenly under the third level (1,000 quotas in all), three dimensions (cpu, memory, nvidia.com/gpu), two pending
pods per leaf so requests exceed the cluster and calculators must share surplus. Seeded, so runs are comparable.
"""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import report


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "quota",
        help="elastic quota: one pod request change in a 1,000-quota tree (goal p99 ≤ 5 ms)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quotas", type=int, default=1000, help="quotas in the tree (default 1000)")
    parser.add_argument(
        "--changes", type=int, default=2000, help="pod request changes to time (default 2000)"
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from allot_sim.bench.quota import run

    result = run(args.quotas, args.changes, args.seed)
    report(result, as_json=args.json)
    return 0 if result["goal_met"] else 1
