"""A long event log for the trust benchmarks (``allot bench replay`` / ``allot bench restart``), written fast.

The log is what the live stack records, made without the stack: the seven processors run in one process (the
simulator, the same decision code as the services) over the openb GPU cluster, then pods of the openb trace arrive in
rounds of ``window`` and the previous round is deleted, so the cluster never fills and the projections stay the
size of a busy cluster while the log grows (about 12 events per pod). Every record is copied into PostgreSQL as
recorded (same positions, hashes and times) with ``COPY``, together with the stream versions, the log head and every
service's checkpoint, so ``allot replay --verify`` and the services read it exactly as a log the stack wrote.

Records already copied are dropped from the simulator's in-memory log as it goes, so building a million events
needs the memory of one round, not of the log.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the driver, the simulator and the store are imported by the functions that use them
    import asyncpg

    from allot_contracts.envelope import RecordedEvent
    from allot_contracts.jsonvalue import JsonObject
    from allot_sim.simulator import Simulation

WINDOW = 2000  # pods per round: submitted, decided, then deleted in the next round


@dataclass(frozen=True)
class History:
    events: int
    pods: int
    head: str
    build_seconds: float


def _progress(text: str) -> None:
    print(f"bench history: {text}", file=sys.stderr, flush=True)


def copy_row(record: RecordedEvent) -> tuple[Any, ...]:
    """An already-recorded event as a row of the events table, in ``EVENT_COLUMNS`` order (for COPY): the
    benchmarks write logs straight into the table."""
    from allot_eventstore.append_plan import event_row
    from allot_eventstore.clock import to_datetime

    metadata = json.dumps(record.metadata) if record.metadata else "{}"
    return event_row(record, recorded_at=to_datetime(record.recorded_at), metadata=metadata)


class _Writer:
    """Copies the simulator's new records into PostgreSQL and forgets them."""

    def __init__(self, conn: asyncpg.Connection, sim: Simulation) -> None:
        self.conn = conn
        self.sim = sim
        self.written = 0
        self.versions: dict[str, int] = {}

    async def flush(self) -> None:
        from allot_eventstore.postgres import EVENT_COLUMNS

        events = self.sim.store.events
        fresh = events[self.written :]
        if not fresh:
            return
        for record in fresh:
            self.versions[record.stream_id] = record.stream_version
        await self.conn.copy_records_to_table("events", records=map(copy_row, fresh), columns=EVENT_COLUMNS)
        # The simulator reads only records after its cursor and the store only the last one (the chain's previous
        # hash), so what is written can be replaced by one shared placeholder.
        if self.sim.cursor == len(events):
            placeholder = events[-1]
            events[: len(events) - 1] = [placeholder] * (len(events) - 1)
        self.written = len(events)

    async def finish(self) -> None:
        await self.flush()
        last = self.sim.store.events[-1]
        await self.conn.copy_records_to_table(
            "streams", records=sorted(self.versions.items()), columns=("stream_id", "version")
        )
        await self.conn.execute(
            "UPDATE log_head SET position = $1, hash = $2 WHERE id = 1", last.position, last.hash
        )
        # The simulator ran until nothing was left to decide: every service has handled the whole log.
        await self.conn.executemany(
            "INSERT INTO checkpoints (consumer, position) VALUES ($1, $2)",
            sorted((host.name, last.position) for host in self.sim.hosts),
        )
        await self.conn.execute("ANALYZE events")


def _rounds(pods_csv: Path, window: int) -> Iterator[list[JsonObject]]:
    from allot_sim.bench.openb_docs import name_of, pod_docs, renamed

    trace = pod_docs(pods_csv, window)
    number = 0
    while True:
        yield [renamed(pod, f"r{number}-{name_of(pod)}") for pod in trace]
        number += 1


async def build_history(
    url: str, events: int, *, nodes_csv: Path, pods_csv: Path, window: int = WINDOW
) -> History:
    """Write a log of at least ``events`` events (it ends after a whole round) into the empty database ``url``."""
    import asyncpg

    from allot_eventstore.migrate import migrate
    from allot_eventstore.urls import plain_url
    from allot_intake.documents import Document
    from allot_intake.manifests import Door, to_input
    from allot_sim.bench.openb_docs import cluster_docs, deletion
    from allot_sim.simulator import Simulation

    started = time.perf_counter()
    await migrate(url)
    conn = await asyncpg.connect(plain_url(url), timeout=10)
    try:
        sim = Simulation()
        door = Door()
        writer = _Writer(conn, sim)

        def apply(bodies: list[JsonObject]) -> None:
            for index, body in enumerate(bodies):
                sim.apply(to_input(Document(source="bench", index=index, body=body), door=door))

        apply(cluster_docs(nodes_csv))
        previous: list[JsonObject] = []
        pods = 0
        rounds = _rounds(pods_csv, window)
        while len(sim.store.events) < events:
            current = next(rounds)
            apply([deletion(pod) for pod in previous])
            apply(current)
            pods += len(current)
            previous = current
            await writer.flush()
            _progress(
                f"{len(sim.store.events):,} events ({pods:,} pods) in {time.perf_counter() - started:.0f}s"
            )
        await writer.finish()
        last = sim.store.events[-1]
        return History(
            events=last.position,
            pods=pods,
            head=last.hash.hex(),
            build_seconds=round(time.perf_counter() - started, 1),
        )
    finally:
        await conn.close()
