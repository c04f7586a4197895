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

from allot_intake.errors import InputError, UsageError


def _from_trace(path: Path) -> list[tuple[int, int, int, tuple[str, ...]]]:
    from allot_placement.openb import read_pods

    if not path.exists():
        raise InputError(f"pod list not found: {path}")
    return [(p.cpu_milli, p.num_gpu, p.gpu_milli if p.num_gpu else 0, p.gpu_spec) for p in read_pods(path)]


async def _from_log() -> list[tuple[int, int, int, tuple[str, ...]]]:
    from allot_eventstore.postgres import PostgresEventStore
    from allot_placement.fragmentation import pod_shape
    from allot_stack.connect import endpoints

    store = PostgresEventStore.connect(endpoints().database_url)
    try:
        shapes = []
        async for record in store.iterate(types=["pod.submitted"]):
            shape = pod_shape(record.payload_dict()["manifest"])
            if shape is not None:
                shapes.append(shape)
        return shapes
    finally:
        await store.close()


def config_section(shapes: list[tuple[int, int, int, tuple[str, ...]]], threshold: int) -> dict[str, Any]:
    from allot_placement.fragmentation import typical_pods

    if not shapes:
        raise InputError("no pods to learn from")
    return {
        "fragmentation": {
            "typicalPods": [
                {
                    "cpuMilli": t.cpu_milli,
                    "gpuCount": t.gpu_count,
                    "gpuMilli": t.gpu_milli,
                    "gpuModels": list(t.gpu_models),
                    "weight": t.weight,
                }
                for t in typical_pods(shapes, threshold)
            ]
        }
    }


def run(args: argparse.Namespace) -> int:
    import yaml

    if bool(args.pods) == bool(args.from_log):
        raise UsageError("give exactly one of --pods CSV or --from-log")
    shapes = _from_trace(Path(args.pods)) if args.pods else asyncio.run(_from_log())
    section = config_section(shapes, args.threshold)
    if args.policy:
        section = {"policy": "fgd", **section}
    print(yaml.safe_dump(section, sort_keys=False), end="")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("typical-pods", help="learn FGD's typical-pod distribution from a workload")
    p.add_argument("--pods", help="an openb pod list CSV")
    p.add_argument("--from-log", action="store_true", help="the pods recorded in the live log")
    p.add_argument("--threshold", type=int, default=95, help="cover this %% of pods (default 95)")
    p.add_argument("--policy", action="store_true", help="also print `policy: fgd` (a complete config)")
    p.set_defaults(func=run)
