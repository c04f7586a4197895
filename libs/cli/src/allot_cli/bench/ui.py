"""``allot bench ui``: how long each page of the web audit view takes to load for the openb cluster.

Builds a log with the simulator (the seven services' decision code, no servers): the openb GPU cluster (1,213 Nodes
and their Devices) and ``--pods`` openb pods. Then serves the audit view over that log on loopback and loads every
page ``--repeat`` times through HTTP, as a browser would fetch it; prints the median and the worst load time per page
(milliseconds), with the time to fold the log and rebuild the projections when the view starts. Goal: every page in
under 300 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from allot_cli.bench import report

PAGES = ("/", "/gpus", "/pods", "/quotas", "/gangs", "/reservations", "/events", "/verify", "/api/summary")
GOAL_MS = 300


async def _measure(store: Any, repeat: int) -> dict[str, Any]:
    from aiohttp.test_utils import TestClient, TestServer

    from allot_ui.model import UiModel
    from allot_ui.server import make_app

    model = UiModel(store)
    started = time.perf_counter()
    await model.refresh()
    folded = time.perf_counter() - started
    started = time.perf_counter()
    await model.refresh_projections(force=True)
    projected = time.perf_counter() - started
    some_pod = next(iter(sorted(model.view.pods)), "")
    pages = [*PAGES, f"/pods/{some_pod}"] if some_pod else list(PAGES)
    times: dict[str, list[float]] = {p: [] for p in pages}
    async with TestClient(TestServer(make_app(model, poll=3600))) as client:
        for _ in range(repeat):
            for page in pages:
                t0 = time.perf_counter()
                response = await client.get(page)
                await response.read()
                times[page].append((time.perf_counter() - t0) * 1000)
                if response.status != 200:
                    raise RuntimeError(f"{page}: HTTP {response.status}")
    return {
        "events": model.position,
        "nodes": len(model.view.nodes),
        "pods": len(model.view.pods),
        "fold_s": round(folded, 2),
        "projections_s": round(projected, 2),
        "page_ms_median": {
            p.split("/pods/")[0] or p: round(statistics.median(v), 1) for p, v in times.items()
        },
        "page_ms_max": {p: round(max(v), 1) for p, v in times.items()},
        "goal_ms": GOAL_MS,
        "worst_median_ms": round(max(statistics.median(v) for v in times.values()), 1),
    }


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.e2e import _cluster_docs, _pod_docs, _write
    from allot_sim.scenario import run as simulate

    with tempfile.TemporaryDirectory() as tmp:
        print(f"allot bench ui: simulating the openb cluster and {args.pods} pods ...", file=sys.stderr)
        scenario = _write(
            Path(tmp) / "openb.yaml", [*_cluster_docs(args.nodes), *_pod_docs(args.pods_csv, args.pods)]
        )
        started = time.perf_counter()
        sim, _, _ = simulate(str(scenario), config={})
        simulated = time.perf_counter() - started
    result = {
        "benchmark": "ui",
        "simulate_s": round(simulated, 1),
        **asyncio.run(_measure(sim.store, args.repeat)),
    }
    report(result, as_json=args.json)
    return 0


def register(subparsers: Any) -> None:
    from allot_sim.bench.placement import DEFAULT_NODES, DEFAULT_PODS

    p = subparsers.add_parser("ui", help="page load times of the web audit view for the openb cluster")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--pods", type=int, default=2000, help="openb pods in the log (default 2000)")
    p.add_argument("--repeat", type=int, default=5, help="loads of each page (default 5)")
    p.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="openb node list CSV")
    p.add_argument("--pods-csv", type=Path, default=DEFAULT_PODS, help="openb pod list CSV")
    p.set_defaults(func=run)
