"""``allot replay --verify`` on several cores: the hash chain and each service's decisions, in parallel.

The work splits into independent parts, each reading the log from PostgreSQL on its own, in position order, with
memory bounded by a page and the projections it holds:

- the chain (and its signed checkpoints), one pass in the calling process;
- the decisions of one service (all its instances, each under the configurations it recorded) per task
  (``allot_runtime.replay.verify_many``), in a pool of ``jobs`` processes (``spawn``: nothing of the parent's event
  loop or connections is inherited), the most expensive services first.

Every result depends only on the log and the configs, never on which process ran it or when, and results are
reported in a fixed order: the report is the same for any ``jobs``. With ``jobs=1`` everything runs in the calling
process, one part after the other.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Awaitable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from allot_cli.replay_configs import FileConfig, plan
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


@dataclass(frozen=True)
class Service:
    """One service's instances to verify."""

    service: str
    instances: tuple[str, ...]


async def _decisions(
    url: str, group: Service, files: dict[str, FileConfig], until: int | None, through: dict[str, int]
) -> dict[str, Verified]:
    store = PostgresEventStore.connect(url, pool_size=2)
    try:
        deciders = plan(group.instances, await recorded_configs(store), files)
        return await verify_many(
            [decider.first() for decider in deciders.values()],
            store,
            until=until,
            through=through,
            switches={name: decider.switches() for name, decider in deciders.items()},
        )
    finally:
        await store.close()


def decisions_task(
    url: str, group: Service, files: dict[str, FileConfig], until: int | None, through: dict[str, int]
) -> dict[str, Verified]:
    return asyncio.run(_decisions(url, group, files, until, through))


async def verify_all(
    url: str,
    chain: Awaitable[ChainReport],
    groups: list[Service],
    *,
    files: dict[str, FileConfig],
    until: int | None,
    through: dict[str, int],
    jobs: int,
) -> tuple[ChainReport, dict[str, Verified]]:
    """The chain report (``chain``, awaited here) and every instance's decisions, ``jobs`` processes at a time."""
    ordered = sorted(
        (g for g in groups if g.instances),
        key=lambda g: COST_ORDER.index(g.service) if g.service in COST_ORDER else len(COST_ORDER),
    )
    verified: dict[str, Verified] = {}
    if jobs <= 1:
        report = await chain
        for group in ordered:
            verified.update(await _decisions(url, group, files, until, through))
        return report, verified
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        decided = [loop.run_in_executor(pool, decisions_task, url, g, files, until, through) for g in ordered]
        report, results = await asyncio.gather(chain, asyncio.gather(*decided))
    for result in results:
        verified.update(result)
    return report, verified
