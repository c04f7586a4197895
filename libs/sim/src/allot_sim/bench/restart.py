"""``allot bench restart``: how long the services take to be ready again after a restart, on a long log.

A service that starts rebuilds its projection from the log up to its checkpoint before it takes any event
(``ProcessorRuntime.rebuild_projection``: ``allot_runtime.replay.rebuild``); only then does it attach to the bus and
report ready. This benchmark restarts that part of every service at once, as a restart of the stack does: one new
process per service instance (:mod:`allot_sim.bench.service_start`: interpreter start and what the service's process
imports, its entry module with ``allot_runtime.service`` and its own processor), each rebuilding its projection
from PostgreSQL up to its checkpoint. ``ready_s`` is the wall time from the start until the last one is done (the
bus attach and catch-up that follow take milliseconds on a log that is not moving and are not included);
``cpu_s`` the CPU seconds (user + system) the processes had used by then; each then computes its projection's digest
for the check below (a service logs it once ready), which ``cpu_total_s``, the processes' CPU seconds until they
exit, includes; ``slowest_rebuild_s`` is the longest rebuild alone
(without the process start and imports: ``slowest_import_s``), each service's own times and projection digest are
listed too (every run must rebuild the same digests), and ``peak_rss_mib`` is the largest sum of the processes'
resident memory. The log is built or reused as by ``allot bench replay`` (same server, same databases). The
benchmark's reads and writes of the log are bounded as the services' and the commands' are (``ALLOT_DB_READ_TIMEOUT``,
:func:`allot_stack.connect.bounded_store`), so what is timed is what a service pays, and a database that stops
answering ends the run saying so.

With snapshots (the default; ``--no-snapshots`` measures the fold from position 0): before the timed runs, each
service's projection is folded once up to ``--snapshot-lag`` events before its checkpoint (20,000 by default, the
services' ``ALLOT_SNAPSHOT_EVERY``: the longest tail a restart refolds after a crash while the log is quiet),
snapshot there and written to the ``snapshots`` table (snapshots of it nearer the checkpoint are deleted first), and
the fold goes on to the checkpoint for the reference digest. A timed start then restores the newest usable snapshot,
checks it and folds the tail, exactly as ``rebuild_projection`` does; each must reach the reference digest. Then the
snapshot at the checkpoint, what a graceful stop writes, is added and the runs are repeated:
``after_graceful_stop`` (no tail to fold). Afterwards the snapshots at the checkpoints are deleted again (the log is
left as prepared), and a ``snapshots`` table the benchmark had to create is dropped.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import statistics
import time
from typing import TYPE_CHECKING, Any

from allot_intake.errors import UsageError
from allot_runtime.memory import tree_rss
from allot_sim.bench.replay import Logs, LogsReport, MiB, on_logs, write_bytecode

if TYPE_CHECKING:  # `allot bench restart --help` loads no driver
    from allot_eventstore.protocol import Snapshot

GOALS: dict[str, float] = {"ready_s": 5.0}


@functools.cache
def _config_hash() -> str:
    """The benchmark's services run under the default configuration."""
    from allot_runtime.recorded_config import config_hash

    return config_hash({})


async def _prepare(
    url: str, service: str, name: str, lag: int
) -> tuple[str, int, int, float, Snapshot | None]:
    import asyncpg

    from allot_eventstore.urls import plain_url
    from allot_runtime.processor import Host
    from allot_runtime.replay import rebuild
    from allot_runtime.snapshots import take
    from allot_stack.connect import bounded_store
    from allot_stack.pipeline import build_instance

    store = bounded_store(url, pool_size=2)
    try:
        checkpoint = await store.get_checkpoint(name)
        at = max(checkpoint - lag, 0)
        conn = await asyncpg.connect(plain_url(url), timeout=10)
        try:  # a snapshot nearer the checkpoint (an earlier run's) would shorten the tail measured
            await conn.execute("DELETE FROM snapshots WHERE consumer = $1 AND position > $2", name, at)
        finally:
            await conn.close()
        host = Host(build_instance(service, name), name=name)
        await rebuild(host, store, until=at)
        snapshot, pause = take(host, _config_hash())
        await store.write_snapshot(snapshot, keep=2)
        await rebuild(host, store, until=checkpoint, after=at)
        at_checkpoint = take(host, _config_hash())[0] if at < checkpoint else None
        return host.digest(), at, len(snapshot.state), pause, at_checkpoint
    finally:
        await store.close()


def prepare_task(url: str, service: str, name: str, lag: int) -> tuple[str, int, int, float, Snapshot | None]:
    """Fold once to ``lag`` events before the checkpoint, write a snapshot there, fold on to the checkpoint: the
    reference digest, the snapshot's position and size, the export's seconds, and the snapshot at the checkpoint
    (what a graceful stop writes; None when that is where the first one is)."""
    return asyncio.run(_prepare(url, service, name, lag))


async def _write(url: str, snapshots: list[Snapshot]) -> None:
    from allot_stack.connect import bounded_store

    store = bounded_store(url, pool_size=1)
    try:
        for snapshot in snapshots:
            await store.write_snapshot(snapshot, keep=2)
    finally:
        await store.close()


async def _forget(url: str, made: dict[str, Any]) -> None:
    """Delete the snapshots written after each service's prepared one (the ones at the checkpoints): the log is left
    as prepared, its newest snapshots ``--snapshot-lag`` behind."""
    import asyncpg

    from allot_eventstore.urls import plain_url

    conn = await asyncpg.connect(plain_url(url), timeout=10)
    try:
        for name, found in made.items():
            await conn.execute(
                "DELETE FROM snapshots WHERE consumer = $1 AND position > $2", name, found["snapshot_at"]
            )
    finally:
        await conn.close()


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
    from allot_stack.connect import bounded_store
    from allot_stack.pipeline import PROCESSORS, instances

    store = bounded_store(url, pool_size=1)
    try:
        producers = await store.producers()
    finally:
        await store.close()
    return [(service, name) for service, _ in PROCESSORS for name in instances(service, producers)]


def compile_bytecode(url: str, services: list[tuple[str, str]], snapshots: bool) -> str:
    """A new directory holding the bytecode of what the services' processes import, for ``PYTHONPYCACHEPREFIX``:
    compiled once here (every service's entry module and processor, and one whole untimed start for the modules a
    start imports on the way), so that a timed start loads compiled modules as a service in an image does (its
    bytecode is compiled when the image is built) whatever ``PYTHONDONTWRITEBYTECODE`` says."""
    import sys

    packages = sorted({service.replace("-", "_") for service, _ in services})
    imports = ", ".join(["allot_sim.bench.service_start"] + [f"{p}.main, {p}.processor" for p in packages])
    service, name = services[0]
    return write_bytecode(
        [[sys.executable, "-c", f"import {imports}"], _start(url, service, name, snapshots)]
    )


def _start(url: str, service: str, name: str, snapshots: bool) -> list[str]:
    """The command of one service's timed start (:mod:`allot_sim.bench.service_start`)."""
    import sys

    return [
        sys.executable,
        "-m",
        "allot_sim.bench.service_start",
        url,
        service,
        name,
        "1" if snapshots else "0",
    ]


def restart(
    url: str, services: list[tuple[str, str]], snapshots: bool = False, *, bytecode: str | None = None
) -> dict[str, Any]:
    """Start every service at once, each in its own process (:mod:`allot_sim.bench.service_start`: the service's
    imports, then its restore and fold); figures of the restart. ``bytecode``: the directory of the compiled
    modules (:func:`compile_bytecode`); None: as the environment has them."""
    import resource
    import subprocess
    import threading

    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(os.getpid()))
            time.sleep(0.02)

    env = os.environ | ({"PYTHONPYCACHEPREFIX": bytecode} if bytecode else {})
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()  # the clock the processes report when they were ready on
    processes = {
        name: subprocess.Popen(
            _start(url, service, name, snapshots),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for service, name in services
    }
    outputs = {name: process.communicate() for name, process in processes.items()}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    done.set()
    sampler.join()
    results: dict[str, dict[str, Any]] = {}
    for name, (out, err) in outputs.items():
        if processes[name].returncode != 0:
            raise UsageError(f"{name}'s start failed ({processes[name].returncode}):\n{err[-2000:]}")
        results[name] = json.loads(out)
    return {
        "ready_s": round(max(r["ready_at"] for r in results.values()) - started, 2),
        "slowest_rebuild_s": round(max(r["rebuild_s"] for r in results.values()), 2),
        "slowest_import_s": round(max(r["import_s"] for r in results.values()), 2),
        "cpu_s": round(sum(r["ready_cpu_s"] for r in results.values()), 2),
        "cpu_total_s": round(after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime, 2),
        "peak_rss_mib": round(peak / MiB, 1),
        "services": {
            name: {
                "rebuild_s": round(r["rebuild_s"], 2),
                "import_s": round(r["import_s"], 2),
                "digest": r["digest"][:16],
                "from": r["from"],
            }
            for name, r in results.items()
        },
    }


def prepare(url: str, services: list[tuple[str, str]], lag: int) -> tuple[dict[str, Any], list[Snapshot]]:
    """Every service's snapshot, made in parallel (one process each); per service its reference digest, where
    the snapshot is, its size and the export's pause; and the snapshots at the checkpoints (not written)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(services), mp_context=context) as pool:
        futures = {name: pool.submit(prepare_task, url, service, name, lag) for service, name in services}
        results = {name: future.result() for name, future in futures.items()}
    made = {
        name: {"digest": d[:16], "snapshot_at": at, "snapshot_bytes": size, "export_s": round(pause, 3)}
        for name, (d, at, size, pause, _) in results.items()
    }
    return made, [last for *_, last in results.values() if last is not None]


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "ready_s": statistics.median(r["ready_s"] for r in runs),
        "slowest_rebuild_s": statistics.median(r["slowest_rebuild_s"] for r in runs),
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "cpu_total_s": statistics.median(r["cpu_total_s"] for r in runs),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
    }


def measure(logs: Logs, *, snapshots: bool, snapshot_lag: int, compiled: bool = True) -> LogsReport:
    """The services' restart on each log, with snapshots ``snapshot_lag`` events behind (a crash: the tail since
    the last periodic snapshot) and then at the checkpoint (``after_graceful_stop``), or without snapshots.
    ``compiled``: the services load bytecode compiled before the runs (:func:`compile_bytecode`); else what the
    environment has (with ``PYTHONDONTWRITEBYTECODE`` set and no bytecode, every start compiles its sources)."""
    import shutil

    def restarts(url: str, events: int) -> dict[str, Any]:
        services = asyncio.run(_instances(url))
        made: dict[str, Any] = {}
        at_checkpoint: list[Snapshot] = []
        created = False
        graceful: list[dict[str, Any]] = []
        if snapshots:
            created = asyncio.run(_snapshot_table(url))
            made, at_checkpoint = prepare(url, services, snapshot_lag)
        bytecode = compile_bytecode(url, services, snapshots) if compiled else None
        try:
            runs = [restart(url, services, snapshots, bytecode=bytecode) for _ in range(logs.runs)]
            if at_checkpoint:
                asyncio.run(_write(url, at_checkpoint))
                graceful = [restart(url, services, snapshots, bytecode=bytecode) for _ in range(logs.runs)]
        finally:
            if bytecode:
                shutil.rmtree(bytecode, ignore_errors=True)
            if created:
                asyncio.run(_snapshot_table(url, drop=True))
            elif at_checkpoint:
                asyncio.run(_forget(url, made))
        digests = {name: {r["services"][name]["digest"] for r in runs + graceful} for name, _ in services}
        for name, found in made.items():
            digests[name].add(found["digest"])
        if any(len(found) != 1 for found in digests.values()):
            raise UsageError(f"restarts rebuilt different projections: {digests}")
        result: dict[str, Any] = {
            "snapshots": made or "none",
            "snapshot_lag": snapshot_lag if snapshots else None,
            "bytecode": "compiled before the runs" if compiled else "as found",
            **_summary(runs),
            "runs": runs,
        }
        if graceful:
            result["after_graceful_stop"] = {"snapshot_lag": 0, **_summary(graceful), "runs": graceful}
        return result

    return on_logs(logs, GOALS, restarts)
