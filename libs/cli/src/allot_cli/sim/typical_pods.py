"""``allot sim typical-pods``: the typical-pod distribution FGD measures fragmentation against, learned from a
workload — an openb pod list (``--pods CSV``) or the pods recorded in the live log (``--from-log``) — printed as the
``fragmentation`` section of a device-allocator config (the paper's way: the most popular shapes covering
``--threshold`` % of pods, weighted by count).

FGD decisions stay pure: the distribution is configuration (recorded in every decision's ``config_version``), so
re-learning it is a deliberate config change, not something that drifts inside a decision.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from allot_cli.files import file_name
from allot_intake.errors import UsageError
from allot_runtime.flags import percent


def run(args: argparse.Namespace) -> int:
    import yaml

    from allot_sim.typical_pods import ConfigSection, config_section, from_log, from_trace

    if bool(args.pods) == bool(args.from_log):
        raise UsageError("give exactly one of --pods CSV or --from-log")
    shapes = from_trace(Path(args.pods)) if args.pods else asyncio.run(from_log())
    section: ConfigSection = config_section(shapes, args.threshold)
    if args.policy:
        section = {"policy": "fgd", **section}
    print(yaml.safe_dump(section, sort_keys=False), end="")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("typical-pods", help="learn FGD's typical-pod distribution from a workload")
    p.add_argument("--pods", type=file_name, help="an openb pod list CSV")
    p.add_argument("--from-log", action="store_true", help="the pods recorded in the live log")
    p.add_argument("--threshold", type=percent, default=95, help="cover this %% of pods (default 95)")
    p.add_argument("--policy", action="store_true", help="also print `policy: fgd` (a complete config)")
    p.set_defaults(func=run)
