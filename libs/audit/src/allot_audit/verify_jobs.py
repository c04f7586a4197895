"""``allot replay --verify`` on several cores: the hash chain and each service's decisions, in parallel.

The work splits into independent parts, each reading the log from PostgreSQL on its own, in position order, with
memory bounded by a page and the projections it holds:

- the chain (and its signed checkpoints), one pass in the calling process;
- the decisions of one service (all its instances, each under the configurations it recorded) per task
  (``allot_runtime.replay.verify_many``), taken in turn, the most expensive services first, by the calling process
  (between pages of the chain) and by ``jobs - 1`` worker processes (``spawn``: nothing of the parent's event loop
  or connections is inherited). The calling process working too saves one interpreter's memory.

Every result depends only on the log and the configs, never on which process ran it or when, and results are
reported in a fixed order: the report is the same for any ``jobs``. With ``jobs=1`` everything runs in the calling
process, one part after the other.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
from collections import deque
from collections.abc import Awaitable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import msgspec

from allot_audit.replay_configs import FileConfig, plan
from allot_audit.verify_since import Start, start_from
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.verify import ChainReport
from allot_runtime.recorded_config import recorded_configs
from allot_runtime.replay import Verified, verify_many

# Services by the cost of re-deriving their decisions on a typical log (the placement engine first): the order tasks
# are handed to the pool, so the longest starts first.
COST_ORDER = (
    "device-allocator",
    "quota-manager",
    "qos-enforcer",
    "reservation-manager",
    "binder",
    "gang-coordinator",
    "node-reporter",
)


# Verifying allocates many short-lived objects (a decoded event, its recomputed decisions) beside projections that live
# for the whole run: with the default thresholds the collector walks those projections again and again. It runs
# 70 times less often here (still every 50,000 net allocations for the young objects); memory stays bounded by the
# projections and a page of each stream (docs/benchmarks/replay.md).
COLLECT_EVERY = (50_000, 20, 100)


@contextmanager
def seldom_collected() -> Iterator[None]:
    """Run the block with the cyclic garbage collector at ``COLLECT_EVERY``, what was imported before it frozen out of
    its walks (:func:`gc.freeze`); both are restored after."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*COLLECT_EVERY)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@dataclass(frozen=True)
class Service:
    """One service's instances to verify."""

    service: str
    instances: tuple[str, ...]


@dataclass(frozen=True)
class Since:
    """``verify --since``: start each service's decision checks at its newest snapshot at or before ``position``;
    ``head_hash`` chooses the sampled interval."""

    position: int
    head_hash: bytes


@dataclass(frozen=True)
class Job:
    """What every service's task shares: the log, the files on disk, how far and from where to verify."""

    url: str
    files: dict[str, FileConfig]
    until: int | None
    through: dict[str, int]
    since: Since | None = None


async def _decisions(job: Job, group: Service) -> dict[str, Verified]:
    store = PostgresEventStore.connect(job.url, pool_size=2)
    try:
        deciders = plan(group.instances, await recorded_configs(store), job.files)
        hosts = {name: decider.first() for name, decider in deciders.items()}
        starts: dict[str, Start] = {}
        if job.since is not None:
            for name, decider in deciders.items():
                hosts[name], starts[name] = await start_from(
                    decider, store, since=job.since.position, head_hash=job.since.head_hash
                )
        failed = {name: Verified(since=start) for name, start in starts.items() if start.problem}
        kept = [host for name, host in hosts.items() if name not in failed]
        verified = (
            await verify_many(
                kept,
                store,
                until=job.until,
                through=job.through,
                switches={name: decider.switches() for name, decider in deciders.items()},
                starts={name: start.position for name, start in starts.items()},
            )
            if kept
            else {}
        )
        return failed | {
            name: msgspec.structs.replace(result, since=starts.get(name)) for name, result in verified.items()
        }
    finally:
        await store.close()


def decisions_task(job: Job, group: Service) -> dict[str, Verified]:
    with seldom_collected():
        return asyncio.run(_decisions(job, group))


async def verify_all(
    url: str,
    chain: Awaitable[ChainReport],
    groups: list[Service],
    *,
    files: dict[str, FileConfig],
    until: int | None,
    through: dict[str, int],
    jobs: int,
    since: Since | None = None,
) -> tuple[ChainReport, dict[str, Verified]]:
    """The chain report (``chain``, awaited here) and every instance's decisions, ``jobs`` processes at a time
    (with ``since``: each from its newest checked snapshot at or before that position, ``allot_audit.verify_since``)."""
    ordered = sorted(
        (g for g in groups if g.instances),
        key=lambda g: COST_ORDER.index(g.service) if g.service in COST_ORDER else len(COST_ORDER),
    )
    job = Job(url, files, until, through, since)
    with seldom_collected():
        return await _verify_all(chain, ordered, job, jobs)


async def _verify_all(
    chain: Awaitable[ChainReport], ordered: list[Service], job: Job, jobs: int
) -> tuple[ChainReport, dict[str, Verified]]:
    pending = deque(ordered)
    verified: dict[str, Verified] = {}

    async def here() -> None:  # this process takes the next service whenever it is free
        while pending:
            verified.update(await _decisions(job, pending.popleft()))

    if jobs <= 1:
        alone = await chain
        await here()
        return alone, verified
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(max_workers=jobs - 1, mp_context=multiprocessing.get_context("spawn")) as pool:

        async def there() -> None:  # a worker process takes the next service whenever it is free
            while pending:
                group = pending.popleft()
                verified.update(await loop.run_in_executor(pool, decisions_task, job, group))

        # the workers take the first (most expensive) services; this process also checks the chain
        report, _ = await asyncio.gather(chain, asyncio.gather(*(there() for _ in range(jobs - 1)), here()))
    return report, verified
