"""``allot bench ui``: how long each page of the web audit view takes to load for the openb cluster.

Builds a log with the simulator (the seven services' decision code, no servers): the openb GPU cluster (1,213 Nodes
and their Devices) and ``--pods`` openb pods. Then serves the audit view over that log on loopback and loads every
page ``--repeat`` times through HTTP, as a browser would fetch it; prints the median and the worst load time per page
(milliseconds), with the time to fold the log and rebuild the projections when the view starts. Goal: every page in
under 300 ms.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

PAGES = ("/", "/gpus", "/pods", "/quotas", "/gangs", "/reservations", "/events", "/verify", "/api/summary")
GOAL_MS = 300


class Folded(TypedDict):
    """The log the view folded: its size, the time to fold it and to rebuild the projections."""

    events: int
    nodes: int
    pods: int
    fold_s: float
    projections_s: float


class Pages(Folded):
    """The view over one log, and each page's load times (ms)."""

    page_ms_median: dict[str, float]
    page_ms_max: dict[str, float]
    goal_ms: int
    worst_median_ms: float


class Report(Pages):
    """What ``allot bench ui`` prints (``benchmark`` and ``simulate_s`` first)."""

    benchmark: str
    simulate_s: float


async def load_pages(store: Any, repeat: int) -> Pages:
    """Serve the view over ``store`` on loopback and load every page (and one pod's) ``repeat`` times: the time to
    fold the log and rebuild the projections, and each page's median and worst load time (ms)."""
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


def measure(nodes_csv: Path, pods_csv: Path, *, pods: int, repeat: int) -> Report:
    """Simulate the openb cluster of ``nodes_csv`` and the first ``pods`` pods of ``pods_csv``, then load every page
    of the view over that log ``repeat`` times: the figures ``allot bench ui`` prints."""
    from allot_sim.bench.openb_docs import cluster_docs, pod_docs, write_yaml
    from allot_sim.scenario import run as simulate

    with tempfile.TemporaryDirectory() as tmp:
        scenario = write_yaml(Path(tmp) / "openb.yaml", [*cluster_docs(nodes_csv), *pod_docs(pods_csv, pods)])
        started = time.perf_counter()
        sim, _, _ = simulate(str(scenario), config={})
        simulated = time.perf_counter() - started
    return {
        "benchmark": "ui",
        "simulate_s": round(simulated, 1),
        **asyncio.run(load_pages(sim.store, repeat)),
    }
