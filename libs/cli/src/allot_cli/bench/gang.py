"""``allot bench gang``: place or reject many gangs of whole-node GPU pods on the openb cluster.

Default: 200 gangs of 8 pods × 8 GPUs (`nvidia.com/gpu: 8`, min-available 8) on the 1,213 GPU nodes of the openb
trace (`../shared/traces/openb/openb_node_list_gpu_node.csv`; 617 of them have 8 GPUs, so 77 gangs fit and the rest
must be rejected whole). Every pod goes through the seven services' decision code, chained over an in-memory log
(the simulator): gang gate, group quota admission, group placement (all or nothing), binding. Prints one JSON object:
wall time to place or reject them all, per-gang decision latency (p50/p99, the time from the last member's arrival
to the group's placement or rejection), gangs placed/rejected and pods bound. A check at the end asserts that no
gang is partially placed.
"""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import report


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("gang", help="place or reject 200 gangs of 8 × 8-GPU pods on the openb nodes")
    p.add_argument("--json", action="store_true")
    p.add_argument("--nodes", help="openb node list CSV")
    p.add_argument("--gangs", type=int, default=200)
    p.add_argument("--size", type=int, default=8, help="members per gang (min-available)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per member")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.gang import measure

    report(measure(args.nodes, gangs=args.gangs, size=args.size, gpus=args.gpus), as_json=args.json)
    return 0
