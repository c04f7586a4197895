"""``allot replay --verify`` on several cores: the hash chain in segments and each service's decisions, in parallel.

The work splits into independent tasks, each reading the log from PostgreSQL on its own, in position order, with
memory bounded by a page and the projections it holds:

- the chain in ``jobs`` segments of consecutive positions (``allot_eventstore.verify``: segments meeting at their
  stored boundary hashes check exactly what one pass does);
- the decisions of one service (all its instances) per task (``allot_runtime.replay.verify_many``).

Tasks run in a pool of ``jobs`` processes (``spawn``: nothing of the parent's event loop or connections is inherited),
the most expensive services first. Every result depends only on the log and the configs, never on which process ran
it or when, and results are reported in a fixed order: the report is the same for any ``jobs``. With ``jobs=1``
everything runs in the calling process.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from allot_cli.pipeline import build_instance
from allot_contracts.envelope import GENESIS_HASH
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.verify import ChainReport, verify_chain
from allot_runtime.processor import Host
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
    """One service's instances to verify, with the decision config they ran under."""

    service: str
    instances: tuple[str, ...]
    config: dict[str, Any] = field(default_factory=dict)


async def _decisions(
    url: str, group: Service, until: int | None, through: dict[str, int]
) -> dict[str, Verified]:
    store = PostgresEventStore.connect(url, pool_size=2)
    try:
        hosts = [
            Host(build_instance(group.service, name, group.config), name=name) for name in group.instances
        ]
        return await verify_many(hosts, store, until=until, through=through)
    finally:
        await store.close()


async def _stored_hash(store: PostgresEventStore, position: int) -> bytes:
    if position == 0:
        return GENESIS_HASH
    found = await store.read(after=position - 1, until=position, limit=1)
    return found[0].hash if found else b""  # missing: the segment then reports where the chain breaks


async def _segment(
    url: str, after: int, upto: int, head: bytes | None, expected_head: str | None
) -> ChainReport:
    """The chain over positions ``after+1 … upto``, from the stored hash at ``after`` to the one at ``upto`` (the
    log head's, ``head``, for the last segment)."""
    store = PostgresEventStore.connect(url, pool_size=2)
    try:
        prev = await _stored_hash(store, after)
        end = head if head is not None else await _stored_hash(store, upto)
        return await verify_chain(
            store.iterate(after=after, until=upto),
            head=(upto, end),
            expected_head=expected_head,
            after=after,
            prev=prev,
            at_head=head is not None,
        )
    finally:
        await store.close()


def decisions_task(
    url: str, group: Service, until: int | None, through: dict[str, int]
) -> dict[str, Verified]:
    return asyncio.run(_decisions(url, group, until, through))


def segment_task(
    url: str, after: int, upto: int, head: bytes | None, expected_head: str | None
) -> ChainReport:
    return asyncio.run(_segment(url, after, upto, head, expected_head))


def combine(head: tuple[int, bytes], parts: list[ChainReport]) -> ChainReport:
    """One report for the whole chain from its segments' (in position order): the first failure, else the total."""
    events = 0
    for part in parts:
        if not part.ok:
            return ChainReport(
                ok=False,
                events=events + part.events,
                head_position=head[0],
                head_hash=head[1].hex(),
                problem=part.problem,
                position=part.position,
            )
        events += part.events
    return ChainReport(ok=True, events=events, head_position=head[0], head_hash=parts[-1].head_hash)


def segments(head: int, count: int) -> list[tuple[int, int]]:
    """``count`` ranges ``(after, upto]`` of about equal length covering positions 1 … head."""
    count = max(1, min(count, head))
    cuts = [head * i // count for i in range(count + 1)]
    return [(cuts[i], cuts[i + 1]) for i in range(count)]


def _last(upto: int, head: tuple[int, bytes], expected_head: str | None) -> tuple[bytes | None, str | None]:
    """The last segment ends at the log head's hash and carries the expected anchor; the others end at a stored one."""
    return (head[1], expected_head) if upto == head[0] else (None, None)


async def verify_all(
    url: str,
    groups: list[Service],
    *,
    head: tuple[int, bytes],
    until: int | None,
    through: dict[str, int],
    expected_head: str | None,
    jobs: int,
) -> tuple[ChainReport, dict[str, Verified]]:
    """The chain report and every instance's decisions, ``jobs`` processes at a time."""
    ordered = sorted(
        groups, key=lambda g: COST_ORDER.index(g.service) if g.service in COST_ORDER else len(COST_ORDER)
    )
    if jobs <= 1:
        parts = [await _segment(url, 0, head[0], head[1], expected_head)]
        verified: dict[str, Verified] = {}
        for group in ordered:
            verified.update(await _decisions(url, group, until, through))
        return combine(head, parts), verified
    loop = asyncio.get_running_loop()
    ranges = segments(head[0], jobs)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        decided = [loop.run_in_executor(pool, decisions_task, url, g, until, through) for g in ordered]
        checked = [
            loop.run_in_executor(pool, segment_task, url, after, upto, *_last(upto, head, expected_head))
            for after, upto in ranges
        ]
        chain_parts = list(await asyncio.gather(*checked))
        results = await asyncio.gather(*decided)
    verified = {}
    for result in results:
        verified.update(result)
    return combine(head, chain_parts), verified
