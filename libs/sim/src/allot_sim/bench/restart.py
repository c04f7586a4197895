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

With snapshots (the default; ``--no-snapshots`` measures the fold from position 0): before the timed runs, each
service's projection is folded once up to ``--snapshot-lag`` events before its checkpoint (20,000 by default, the
services' ``ALLOT_SNAPSHOT_EVERY``: the longest tail a restart refolds while the log is quiet), snapshot there and
written to the ``snapshots`` table, and the fold goes on to the checkpoint for the reference digest. A timed start
then restores the newest usable snapshot, checks it and folds the tail, exactly as ``rebuild_projection`` does; each
must reach the reference digest. A ``snapshots`` table the benchmark had to create is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import time
from typing import TypedDict

from allot_intake.errors import UsageError
from allot_runtime.memory import tree_rss
from allot_sim.bench.replay import Logs, LogsReport, MiB, on_logs

GOALS: dict[str, float] = {"ready_s": 5.0}

ServiceRestart = TypedDict("ServiceRestart", {"rebuild_s": float, "digest": str, "from": int})
"""One service's rebuild: its seconds, its projection's digest and the position its snapshot restored (0: none)."""


class RestartRun(TypedDict):
    """Every service rebuilt at once: until the last was ready, the slowest, the peak memory, each service."""

    ready_s: float
    slowest_rebuild_s: float
    peak_rss_mib: float
    services: dict[str, ServiceRestart]


class Snapshot(TypedDict):
    """One service's snapshot made before the restarts: the reference digest, where it is, its size, the pause."""

    digest: str
    snapshot_at: int
    snapshot_bytes: int
    export_s: float


class Restarts(TypedDict):
    """The restarts on one log: the median run, the largest peak, every run (and the snapshots they started from)."""

    snapshots: dict[str, Snapshot] | str
    ready_s: float
    slowest_rebuild_s: float
    peak_rss_mib: float
    runs: list[RestartRun]


@functools.cache
def _config_hash() -> str:
    """The benchmark's services run under the default configuration."""
    from allot_runtime.recorded_config import config_hash

    return config_hash({})


async def _rebuild(url: str, service: str, name: str, snapshots: bool) -> tuple[float, str, int]:
    from allot_eventstore.postgres import PostgresEventStore
    from allot_runtime.processor import Host
    from allot_runtime.replay import rebuild
    from allot_runtime.snapshots import restore_newest
    from allot_stack.pipeline import build_instance

    started = time.perf_counter()
    store = PostgresEventStore.connect(url, pool_size=2)
    try:
        checkpoint = await store.get_checkpoint(name)
        host, start = Host(build_instance(service, name), name=name), 0
        if snapshots:
            host, start = await restore_newest(
                lambda: Host(build_instance(service, name), name=name),
                store,
                config_hash=_config_hash(),
                until=checkpoint,
            )
        await rebuild(host, store, until=checkpoint, after=start)
        return time.perf_counter() - started, host.digest(), start
    finally:
        await store.close()


def rebuild_task(url: str, service: str, name: str, snapshots: bool = False) -> tuple[float, str, int]:
    """One service's start: restore its newest snapshot (with ``snapshots``) and fold the log up to its checkpoint
    (seconds, digest, position restored from)."""
    return asyncio.run(_rebuild(url, service, name, snapshots))


async def _prepare(url: str, service: str, name: str, lag: int) -> tuple[str, int, int, float]:
    from allot_eventstore.postgres import PostgresEventStore
    from allot_runtime.processor import Host
    from allot_runtime.replay import rebuild
    from allot_runtime.snapshots import take
    from allot_stack.pipeline import build_instance

    store = PostgresEventStore.connect(url, pool_size=2)
    try:
        checkpoint = await store.get_checkpoint(name)
        at = max(checkpoint - lag, 0)
        host = Host(build_instance(service, name), name=name)
        await rebuild(host, store, until=at)
        snapshot, pause = take(host, _config_hash())
        await store.write_snapshot(snapshot, keep=2)
        await rebuild(host, store, until=checkpoint, after=at)
        return host.digest(), at, len(snapshot.state), pause
    finally:
        await store.close()


def prepare_task(url: str, service: str, name: str, lag: int) -> tuple[str, int, int, float]:
    """Fold once to ``lag`` events before the checkpoint, write a snapshot there, fold on to the checkpoint: the
    reference digest, the snapshot's position and size, and the export's seconds."""
    return asyncio.run(_prepare(url, service, name, lag))


async def _snapshot_table(url: str, *, drop: bool = False) -> bool:
    """Create the ``snapshots`` table when the log's schema predates it (True: created); ``drop``: drop it."""
    import asyncpg

    from allot_eventstore.urls import plain_url

    conn = await asyncpg.connect(plain_url(url), timeout=10)
    try:
        if drop:
            await conn.execute("DROP TABLE IF EXISTS snapshots")
            return False
        exists = await conn.fetchval("SELECT to_regclass('snapshots') IS NOT NULL")
        if not exists:
            await conn.execute(_TABLE)
        return not exists
    finally:
        await conn.close()


_TABLE = (
    "CREATE TABLE snapshots (consumer text NOT NULL, position bigint NOT NULL, format integer NOT NULL, "
    "config_hash text NOT NULL, digest text NOT NULL, state bytea NOT NULL, state_hash bytea NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, position))"
)


async def _instances(url: str) -> list[tuple[str, str]]:
    from allot_eventstore.postgres import PostgresEventStore
    from allot_stack.pipeline import PROCESSORS, instances

    store = PostgresEventStore.connect(url, pool_size=1)
    try:
        producers = await store.producers()
    finally:
        await store.close()
    return [(service, name) for service, _ in PROCESSORS for name in instances(service, producers)]


def restart(url: str, services: list[tuple[str, str]], snapshots: bool = False) -> RestartRun:
    """Start every service's rebuild at once in its own process; figures of the restart."""
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

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
        futures = {
            name: pool.submit(rebuild_task, url, service, name, snapshots) for service, name in services
        }
        results = {name: future.result() for name, future in futures.items()}
    ready = time.perf_counter() - started
    done.set()
    sampler.join()
    return {
        "ready_s": round(ready, 2),
        "slowest_rebuild_s": round(max(s for s, _, _ in results.values()), 2),
        "peak_rss_mib": round(peak / MiB, 1),
        "services": {
            name: {"rebuild_s": round(s, 2), "digest": d[:16], "from": start}
            for name, (s, d, start) in results.items()
        },
    }


def prepare(url: str, services: list[tuple[str, str]], lag: int) -> dict[str, Snapshot]:
    """Every service's snapshot, made in parallel (one process each); per service its reference digest, where
    the snapshot is, its size and the export's pause."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(services), mp_context=context) as pool:
        futures = {name: pool.submit(prepare_task, url, service, name, lag) for service, name in services}
        results = {name: future.result() for name, future in futures.items()}
    return {
        name: {"digest": d[:16], "snapshot_at": at, "snapshot_bytes": size, "export_s": round(pause, 3)}
        for name, (d, at, size, pause) in results.items()
    }


def measure(logs: Logs, *, snapshots: bool, snapshot_lag: int) -> LogsReport:
    """The services' restart on each log, with snapshots ``snapshot_lag`` events behind or without."""

    def restarts(url: str, events: int) -> Restarts:
        services = asyncio.run(_instances(url))
        made: dict[str, Snapshot] = {}
        created = False
        if snapshots:
            created = asyncio.run(_snapshot_table(url))
            made = prepare(url, services, snapshot_lag)
        try:
            runs = [restart(url, services, snapshots) for _ in range(logs.runs)]
        finally:
            if created:
                asyncio.run(_snapshot_table(url, drop=True))
        digests = {name: {r["services"][name]["digest"] for r in runs} for name, _ in services}
        for name, found in made.items():
            digests[name].add(found["digest"])
        if any(len(found) != 1 for found in digests.values()):
            raise UsageError(f"restarts rebuilt different projections: {digests}")
        return {
            "snapshots": made or "none",
            "ready_s": statistics.median(r["ready_s"] for r in runs),
            "slowest_rebuild_s": statistics.median(r["slowest_rebuild_s"] for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "runs": runs,
        }

    return on_logs(logs, GOALS, restarts)
