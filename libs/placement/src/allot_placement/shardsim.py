"""A throughput model of N device-allocator shards over node partitions (docs/adr/0013-sharded-deciders.md).

Model: the cluster's nodes are split into ``shards`` equal partitions, one device-allocator per partition on its own
core. Every pod goes through one router (its routing decision is an event), is placed by one shard, and its
decision is appended to the one log. The sustained rate is the smallest of:

- engines: ``shards × 10⁶ / (cost(nodes / shards) × (1 + cross))`` — ``cost(p)`` is the engine's measured CPU µs per
  pod at ``p`` nodes, interpolated between measured points on a log-log scale and extrapolated past the last one with
  the last segment's slope (``cost``); a pod of a gang spanning partitions is placed tentatively by a second shard too
  (``cross`` is that share of pods);
- router: ``10⁶ / router_us``;
- log: ``append_per_s / (events_per_pod + 2 × cross)`` — a spanning gang adds a hold and a release-or-confirm per
  member.

``cores`` caps the shards that run at once (on this machine: 2). Pure arithmetic over its inputs; run it with
``python -m allot_placement.shardsim`` (``--help`` lists the inputs; the default costs are the CPU µs per pod
measured with the free-resource index at 1k, 6k and 12k nodes in docs/benchmarks/placement.md, the append rate is
docs/benchmarks/append.md's, the router's cost and the share of spanning gangs are assumptions).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

__all__ = ["Inputs", "cost", "model", "table"]


class Inputs:
    """The model's inputs (see the module docstring)."""

    __slots__ = ("append_per_s", "cores", "costs", "cross", "events_per_pod", "router_us")

    def __init__(
        self,
        costs: Sequence[tuple[int, float]],
        *,
        router_us: float = 40.0,
        append_per_s: float = 25_842.0,
        events_per_pod: float = 2.0,
        cross: float = 0.05,
        cores: int = 0,
    ) -> None:
        if not costs or any(n <= 0 or c <= 0 for n, c in costs):
            raise ValueError("costs: at least one (nodes, µs per pod) pair, both positive")
        self.costs = sorted(costs)
        self.router_us, self.append_per_s, self.events_per_pod = router_us, append_per_s, events_per_pod
        self.cross, self.cores = cross, cores


def cost(costs: Sequence[tuple[int, float]], nodes: float) -> float:
    """Engine µs per pod at ``nodes``: log-log interpolation between the measured points, the nearest segment's
    slope outside them (a single point: flat)."""
    pts = sorted(costs)
    if len(pts) == 1:
        return pts[0][1]
    i = 1
    while i < len(pts) - 1 and nodes > pts[i][0]:
        i += 1
    (n0, c0), (n1, c1) = pts[i - 1], pts[i]
    slope = math.log(c1 / c0) / math.log(n1 / n0)
    return c0 * math.exp(slope * math.log(nodes / n0))


def model(inp: Inputs, nodes: int, shards: int) -> dict[str, float | str]:
    """Pods per second sustained by ``shards`` shards over ``nodes`` nodes, each bound, and which one binds."""
    running = min(shards, inp.cores) if inp.cores else shards
    per_pod = cost(inp.costs, nodes / shards) * (1 + (inp.cross if shards > 1 else 0.0))
    bounds = {
        "engines": running * 1e6 / per_pod,
        "router": 1e6 / inp.router_us if shards > 1 else math.inf,
        "log": inp.append_per_s / (inp.events_per_pod + (2 * inp.cross if shards > 1 else 0.0)),
    }
    limit = min(bounds, key=lambda k: bounds[k])
    return {"pods_per_s": bounds[limit], "bound_by": limit, "us_per_pod": per_pod, **bounds}


def table(inp: Inputs, node_counts: Sequence[int], shard_counts: Sequence[int]) -> str:
    """A Markdown table: pods/s (and what bounds it) per cluster size and shard count."""
    head = "| nodes | " + " | ".join(f"{s} shard{'s' if s > 1 else ''}" for s in shard_counts) + " |"
    lines = [head, "|" + "---|" * (len(shard_counts) + 1)]
    for nodes in node_counts:
        cells = []
        for s in shard_counts:
            m = model(inp, nodes, s)
            cells.append(f"{m['pods_per_s']:,.0f} ({m['bound_by']}, {m['us_per_pod']:,.0f} µs)")
        lines.append(f"| {nodes:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pair(text: str) -> tuple[int, float]:
    nodes, _, us = text.partition(":")
    try:
        return int(nodes), float(us)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cost: expected NODES:US (e.g. 6000:700), got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m allot_placement.shardsim", description=__doc__)
    p.add_argument("--cost", type=_pair, action="append", help="measured NODES:US engine CPU µs per pod")
    p.add_argument("--router-us", type=float, default=40.0, help="router CPU µs per pod (default 40)")
    p.add_argument(
        "--append-per-s", type=float, default=25_842.0, help="log appends per second (default 25842)"
    )
    p.add_argument("--events-per-pod", type=float, default=2.0, help="events appended per pod (default 2)")
    p.add_argument("--cross", type=float, default=0.05, help="share of pods in spanning gangs (default 0.05)")
    p.add_argument("--cores", type=int, default=0, help="cores for shards (default 0: one per shard)")
    p.add_argument("--nodes", type=int, nargs="+", default=[10_000, 25_000, 50_000, 100_000])
    p.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = p.parse_args(argv)
    costs = args.cost or [(1000, 300.1), (6000, 572.9), (12000, 1550.3)]
    inp = Inputs(
        costs,
        router_us=args.router_us,
        append_per_s=args.append_per_s,
        events_per_pod=args.events_per_pod,
        cross=args.cross,
        cores=args.cores,
    )
    print(table(inp, args.nodes, args.shards))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
