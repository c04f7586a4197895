"""``allot bench restart``: how long the services take to be ready again after a restart, on a long log.

A service that starts rebuilds its projection from the log up to its checkpoint before it takes any event
(``ServiceRunner.rebuild_projection``: ``allot_runtime.replay.rebuild``); only then does it attach to the bus and
report ready. This benchmark restarts that part of every service at once, as a restart of the stack does: one new
process per service instance (``spawn``: interpreter start and imports included), each rebuilding its projection
from PostgreSQL up to its checkpoint. ``ready_s`` is the wall time from the start until the last one is done (the
bus attach and catch-up that follow take milliseconds on a log that is not moving and are not included);
``slowest_rebuild_s`` is the longest rebuild alone (without the process start), each service's own rebuild time and
projection digest are listed too (every run must rebuild the same digests), and ``peak_rss_mib`` is the largest sum of the
processes' resident memory. The log is built or reused as by ``allot bench replay`` (same server, same databases).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from allot_cli.bench.replay import MiB, history_arguments, on_logs
from allot_cli.errors import UsageError
from allot_cli.pipeline import PROCESSORS, build_instance, instances
from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.memory import tree_rss
from allot_runtime.processor import Host
from allot_runtime.replay import rebuild

GOALS: dict[str, float] = {"ready_s": 5.0}


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "restart",
        help="seconds until every service has rebuilt its projection after a restart, on a long log",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    history_arguments(p)
    p.set_defaults(func=run)


async def _rebuild(url: str, service: str, name: str) -> tuple[float, str]:
    started = time.perf_counter()
    store = PostgresEventStore.connect(url, pool_size=2)
    try:
        host = Host(build_instance(service, name), name=name)
        await rebuild(host, store, until=await store.get_checkpoint(name))
        return time.perf_counter() - started, host.digest()
    finally:
        await store.close()


def rebuild_task(url: str, service: str, name: str) -> tuple[float, str]:
    """One service's start: rebuild its projection up to its checkpoint (seconds, digest)."""
    return asyncio.run(_rebuild(url, service, name))


async def _instances(url: str) -> list[tuple[str, str]]:
    store = PostgresEventStore.connect(url, pool_size=1)
    try:
        producers = await store.producers()
    finally:
        await store.close()
    return [(service, name) for service, _ in PROCESSORS for name in instances(service, producers)]


def restart(url: str, services: list[tuple[str, str]]) -> dict[str, Any]:
    """Start every service's rebuild at once in its own process; figures of the restart."""
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(os.getpid()))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(services), mp_context=context) as pool:
        futures = {name: pool.submit(rebuild_task, url, service, name) for service, name in services}
        results = {name: future.result() for name, future in futures.items()}
    ready = time.perf_counter() - started
    done.set()
    sampler.join()
    return {
        "ready_s": round(ready, 2),
        "slowest_rebuild_s": round(max(s for s, _ in results.values()), 2),
        "peak_rss_mib": round(peak / MiB, 1),
        "services": {name: {"rebuild_s": round(s, 2), "digest": d[:16]} for name, (s, d) in results.items()},
    }


def run(args: argparse.Namespace) -> int:
    def restarts(url: str, events: int) -> dict[str, Any]:
        services = asyncio.run(_instances(url))
        runs = [restart(url, services) for _ in range(args.runs)]
        digests = {name: {r["services"][name]["digest"] for r in runs} for name, _ in services}
        if any(len(found) != 1 for found in digests.values()):
            raise UsageError(f"restarts rebuilt different projections: {digests}")
        return {
            "ready_s": statistics.median(r["ready_s"] for r in runs),
            "slowest_rebuild_s": statistics.median(r["slowest_rebuild_s"] for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "runs": runs,
        }

    return on_logs(args, GOALS, restarts)
