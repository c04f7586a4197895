"""``allot bench append``: throughput of the event log's batched append against two reference points.

One process, one PostgreSQL server, a fresh database per contender, the same decisions in the same batches:

- ``eventsourcing``: the ``eventsourcing`` library's application (``PERSISTENCE_MODULE=eventsourcing.postgres``,
  its Postgres application recorder, default settings) saving a batch of new aggregates in one call
  (``app.save(*aggregates)``); each aggregate has one created event whose attribute is the decision (the same
  fields as our payload, as JSON builtins).
- ``copy``: raw asyncpg ``copy_records_to_table`` of the finished rows (built beforehand, hashes included) into an
  ``events`` table created by our migrations (same columns, indexes and constraints), one COPY (one transaction)
  per batch. The database's fastest write path: no lock, no duplicate check, no version check, no hashing.
- ``ours``: ``PostgresEventStore.append`` of a batch of decision events (one new pod stream each, ids derived from
  the trigger as the services derive them) with the consumer checkpoint in the same transaction, as a service
  records its decisions.

The decision is ``pod.placed`` (the device-allocator's record of a 2-GPU, NUMA-aligned placement, ~1.8 kB of JSON)
or, with ``--event pod.enqueued``, a ~90-byte one. Each contender warms up, then appends ``--events`` events in
batches of ``--batch`` per run; the rate of a run is events / wall time of the appends (inputs are built before the
clock starts). The median of ``--runs`` runs is reported; contenders take turns within a run and the order rotates
between runs. A ``CHECKPOINT`` before every timed section (when the role may issue one) keeps the background flush
of one contender out of another's figure.

Server: ``ALLOT_DATABASE_URL`` when set (scratch databases are created on it and dropped afterwards); otherwise an
embedded PostgreSQL under a temporary directory with default durability (fsync and synchronous_commit on), stopped
afterwards. Progress goes to stderr; the result to stdout. Exit status 1 when the goal (ours at least 10x
eventsourcing and 0.5x COPY) is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import platform
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict
from urllib.parse import unquote, urlsplit

from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_intake.errors import UsageError
from allot_sim.bench._postgres import (
    ServerFacts,
    _admin,
    _progress,
    checkpoint,
    create_database,
    drop_database,
    server_facts,
)

if TYPE_CHECKING:  # the contracts, the store and the driver are imported by the functions that use them
    import asyncpg

    from allot_contracts.envelope import NewEvent
    from allot_contracts.events import Event, PodEnqueued, PodPlaced
    from allot_eventstore.postgres import PostgresEventStore

NAMESPACE = "bench"


class Goal(TypedDict):
    ours_vs_eventsourcing: float
    ours_vs_copy: float


class Machine(TypedDict):
    platform: str
    cpus: int | None
    load_average: list[float]  # the 1-minute load average at the start and at the end


class Report(ServerFacts):
    """What ``allot bench append`` prints (the server's facts after ``server``)."""

    benchmark: str
    ours_events_per_s: int
    eventsourcing_events_per_s: int
    copy_rows_per_s: int
    ours_vs_eventsourcing: float | None
    ours_vs_copy: float | None
    goal: Goal
    goal_met: bool
    samples_per_s: dict[str, list[int]]
    events: int
    batch: int
    runs: int
    warmup_events: int
    payload_bytes: int
    eventsourcing_state_bytes: int
    event_type: str
    producer: str
    checkpoint_before_each_run: bool
    server: str
    python_version: str
    versions: dict[str, str | None]
    machine: Machine


GOAL_VS_EVENTSOURCING = 10.0
GOAL_VS_COPY = 0.5


# ----------------------------------------------------------------------------------------------------------------
# The workload: pod.placed decisions shaped like the device-allocator's (a 2-GPU, NUMA-aligned placement).
# ----------------------------------------------------------------------------------------------------------------


def placed_event(i: int) -> PodPlaced:
    """The ``pod.placed`` decision for the ``i``-th pod: node, GPU minors, cpuset and scores vary with ``i``."""
    from allot_contracts.decisions.placement import Decision
    from allot_contracts.events import ObjectRef, PodPlaced

    node = f"gpu-node-{i % 64:03d}"
    numa = (i // 64) % 2
    first = numa * 4 + (i % 2) * 2
    minors = [first, first + 1]
    core = numa * 16 + (i % 4) * 4
    cpus: list[JsonValue] = [core, core + 1, core + 2, core + 3, core + 32, core + 33, core + 34, core + 35]
    cpuset = f"{core}-{core + 3},{core + 32}-{core + 35}"
    name = f"infer-{i}"
    gpu_core, gpu_mem = "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory"
    ratio = "koordinator.sh/gpu-memory-ratio"
    decision: JsonObject = {
        "allocation": {
            "cpu_exclusive": "",
            "cpuset": cpus,
            "devices": {
                "gpu": [
                    {"minor": m, "resources": {gpu_core: 100, gpu_mem: 85_899_345_920, ratio: 100}, "vfs": []}
                    for m in minors
                ]
            },
            "node": node,
            "numa": [{"node": numa, "resources": {"cpu": 8000, "memory": 68_719_476_736}}],
            "requests": {"cpu": 8000, "memory": 68_719_476_736, "nvidia.com/gpu": 2},
        },
        "annotations": {
            "scheduling.koordinator.sh/device-allocated": {
                "gpu": [
                    {
                        "id": f"GPU-{node}-{m}",
                        "minor": m,
                        "resources": {gpu_core: "100", gpu_mem: "80Gi", ratio: "100"},
                    }
                    for m in minors
                ]
            },
            "scheduling.koordinator.sh/resource-spec": {"preferredCPUBindPolicy": "FullPCPUs"},
            "scheduling.koordinator.sh/resource-status": {
                "cpuset": cpuset,
                "numaNodeResources": [{"node": numa, "resources": {"cpu": "8", "memory": "64Gi"}}],
            },
        },
        "codes": [],
        "config_version": "allot-placement/1+e592cf41a9df",
        "message": "",
        "node": node,
        "node_reasons": {},
        "nodes_total": 64,
        "outcome": "Scheduled",
        "pod": f"{NAMESPACE}/{name}",
        "policy": "koordinator",
        "scores": [
            {
                "components": {
                    "DeviceShare": 50 + (i + k) % 7,
                    "NodeNUMAResource": 62,
                    "NodeResourcesFit": 68 - k,
                },
                "node": f"gpu-node-{(i + k) % 64:03d}",
                "score": 180 - k,
            }
            for k in range(3)
        ],
    }
    return PodPlaced(
        pod=ObjectRef(namespace=NAMESPACE, name=name),
        attempt=1,
        node=node,
        decision=Decision.from_dict(decision),
    )


def enqueued_event(i: int) -> PodEnqueued:
    """A small decision (the gang-coordinator letting a pod into the queue), to show the effect of payload size."""
    from allot_contracts.events import ObjectRef, PodEnqueued

    return PodEnqueued(pod=ObjectRef(namespace=NAMESPACE, name=f"infer-{i}"), attempt=1)


class Workload(NamedTuple):
    event_type: str
    producer: str  # the service that records it; also its consumer name (checkpoint)
    trigger_type: str
    make: Callable[[int], Event]


WORKLOADS = {
    "pod.placed": Workload("pod.placed", "device-allocator", "reservation.resolved", placed_event),
    "pod.enqueued": Workload("pod.enqueued", "gang-coordinator", "pod.submitted", enqueued_event),
}


def decision_events(start: int, count: int, workload: Workload = WORKLOADS["pod.placed"]) -> list[NewEvent]:
    """``count`` new events from pod number ``start``: one per pod stream, ids derived from a trigger id the way
    the services derive them (so they are deterministic and unique per pod)."""
    from allot_contracts.envelope import NewEvent, derived_event_id, stream_id

    out = []
    for i in range(start, start + count):
        trigger = str(uuid.uuid5(uuid.NAMESPACE_URL, f"allot-bench/{workload.trigger_type}/{i}"))
        out.append(
            NewEvent(
                stream_id=stream_id("pod", f"{NAMESPACE}/infer-{i}"),
                event=workload.make(i),
                event_id=derived_event_id(workload.producer, trigger, 0),
                causation_id=trigger,
                correlation_id=trigger,
            )
        )
    return out


def batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[k : k + size] for k in range(0, len(items), size)]


# ----------------------------------------------------------------------------------------------------------------
# Contenders. Each has ``setup(url)``, ``prepare_run(start, count)`` (untimed: builds its inputs), ``run(inputs)``
# (timed: appends them batch by batch, each batch committed) and ``close()``.
# ----------------------------------------------------------------------------------------------------------------


class Ours:
    name = "ours"

    def __init__(self, batch: int, workload: Workload) -> None:
        self.batch = batch
        self.workload = workload
        self.store: PostgresEventStore | None = None
        self.trigger_position = 0

    async def setup(self, url: str) -> None:
        from allot_eventstore.migrate import migrate
        from allot_stack.connect import bounded_store

        await migrate(url)
        # each append bounded as a service's: what the services pay is measured
        self.store = bounded_store(url)

    def prepare_run(self, start: int, count: int) -> Any:
        return batches(decision_events(start, count, self.workload), self.batch)

    async def run(self, inputs: Any) -> None:
        from allot_eventstore import Checkpoint

        assert self.store is not None
        service = self.workload.producer
        for chunk in inputs:
            self.trigger_position += 1
            result = await self.store.append(
                chunk, producer=service, checkpoint=Checkpoint(service, self.trigger_position)
            )
            if len(result.positions) != len(chunk):
                raise RuntimeError(f"ours: appended {len(result.positions)} of {len(chunk)} events")

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()


class Copy:
    name = "copy"

    def __init__(self, batch: int, workload: Workload) -> None:
        from allot_contracts.envelope import GENESIS_HASH

        self.batch = batch
        self.workload = workload
        self.conn: asyncpg.Connection | None = None
        self.position = 0
        self.prev = GENESIS_HASH

    async def setup(self, url: str) -> None:
        from allot_eventstore.migrate import migrate

        await migrate(url)  # the very same events table, indexes and constraints as ours
        self.conn = await _admin(url)

    def prepare_run(self, start: int, count: int) -> Any:
        """The rows our store writes for these events (canonical payload, chain hash), finished in advance."""
        from allot_contracts.envelope import prepare
        from allot_eventstore.clock import system_clock
        from allot_sim.bench._history import copy_row

        now = system_clock()
        rows = []
        for new in decision_events(start, count, self.workload):
            self.position += 1
            record = prepare(
                new,
                position=self.position,
                stream_version=1,
                producer=self.workload.producer,
                recorded_at=now,
                prev_hash=self.prev,
            )
            self.prev = record.hash
            rows.append(copy_row(record))
        return batches(rows, self.batch)

    async def run(self, inputs: Any) -> None:
        from allot_eventstore.postgres import EVENT_COLUMNS

        assert self.conn is not None
        for chunk in inputs:
            await self.conn.copy_records_to_table("events", records=chunk, columns=EVENT_COLUMNS)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


def _eventsourcing_application(url: str) -> tuple[Any, Any]:
    """An ``eventsourcing`` application on its Postgres recorder, configured through its documented settings, and
    an aggregate class whose created event carries a decision's fields."""
    from allot_eventstore.urls import plain_url

    try:
        from eventsourcing.application import Application
        from eventsourcing.domain import Aggregate, event
    except ImportError as exc:  # a dev dependency, not a runtime one
        raise UsageError(
            f"the eventsourcing library is not installed ({exc}); install the dev dependencies "
            "(`uv sync` or `pip install 'eventsourcing[postgres]'`)"
        ) from exc

    class PodDecision(Aggregate):  # type: ignore[misc]
        @event("Decided")  # type: ignore[misc]
        def __init__(self, decision: JsonObject) -> None:
            self.decision = decision

    class Decisions(Application[uuid.UUID]):
        pass

    parts = urlsplit(plain_url(url))
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": parts.path.lstrip("/"),
        "POSTGRES_HOST": parts.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(parts.port or 5432),
        "POSTGRES_USER": unquote(parts.username or "postgres"),
        "POSTGRES_PASSWORD": unquote(parts.password or os.environ.get("PGPASSWORD", "")),
    }
    return Decisions(env=env), PodDecision


class EventSourcing:
    name = "eventsourcing"

    def __init__(self, batch: int, workload: Workload) -> None:
        self.batch = batch
        self.workload = workload
        self.app: Any = None
        self.aggregate: Any = None

    async def setup(self, url: str) -> None:
        self.app, self.aggregate = await asyncio.to_thread(_eventsourcing_application, url)

    def new_aggregates(self, start: int, count: int) -> list[Any]:
        """One new aggregate per pod; its created event holds the same decision (the event's JSON builtins)."""
        import msgspec

        make = self.workload.make
        return [self.aggregate(decision=msgspec.to_builtins(make(i))) for i in range(start, start + count)]

    def state_bytes(self) -> int:
        """Size of the stored state of one event (the library's JSON of the event's attributes)."""
        (created,) = self.new_aggregates(0, 1)[0].collect_events()
        return len(self.app.mapper.to_stored_event(created).state)

    def prepare_run(self, start: int, count: int) -> Any:
        return batches(self.new_aggregates(start, count), self.batch)

    def _save_all(self, inputs: Any) -> None:
        for chunk in inputs:
            self.app.save(*chunk)

    async def run(self, inputs: Any) -> None:
        await asyncio.to_thread(self._save_all, inputs)  # the library is synchronous (psycopg 3)

    async def close(self) -> None:
        if self.app is not None:
            await asyncio.to_thread(self.app.close)


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _psycopg_impl() -> str | None:
    """``python`` (pure Python, what ``eventsourcing[postgres]`` installs), ``binary`` or ``c``."""
    try:
        import psycopg
    except ImportError:
        return None
    return str(psycopg.pq.__impl__)


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


async def _timed(action: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await action()
    return time.perf_counter() - started


async def _race(
    contenders: list[Ours | Copy | EventSourcing],
    server_url: str,
    samples: dict[str, list[float]],
    *,
    events: int,
    runs: int,
    warmup: int,
) -> bool:
    """Warm every contender up, then time ``runs`` runs of ``events`` events each, the contenders taking turns in
    an order that rotates between runs; each rate goes to ``samples``. True when every timed section started
    after a ``CHECKPOINT``."""
    checkpointed = True
    next_pod = 0
    for contender in contenders:
        _progress(f"{contender.name}: warm-up, {warmup} events")
        inputs = contender.prepare_run(next_pod, warmup)
        await contender.run(inputs)
    next_pod += warmup
    for r in range(runs):
        order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
        for contender in order:
            inputs = contender.prepare_run(next_pod, events)
            checkpointed = await checkpoint(server_url) and checkpointed
            seconds = await _timed(lambda c=contender, i=inputs: c.run(i))  # type: ignore[misc]
            rate = events / seconds
            samples[contender.name].append(rate)
            _progress(
                f"run {r + 1}/{runs} {contender.name}: {events} events in {seconds:.3f} s = {rate:,.0f}/s"
            )
        next_pod += events
    return checkpointed


def _versions() -> dict[str, str | None]:
    return {
        "asyncpg": _version("asyncpg"),
        "sqlalchemy": _version("sqlalchemy"),
        "eventsourcing": _version("eventsourcing"),
        "psycopg": _version("psycopg"),
        "psycopg_impl": _psycopg_impl(),
        "msgspec": _version("msgspec"),
    }


async def run_benchmark(
    server_url: str,
    *,
    events: int,
    batch: int,
    runs: int,
    event_type: str = "pod.placed",
    warmup: int | None = None,
    source: str = "",
) -> Report:
    from allot_contracts.envelope import canonical
    from allot_eventstore.urls import redact

    if events < 1 or batch < 1 or runs < 1:
        raise UsageError("--events, --batch and --runs must be positive")
    workload = WORKLOADS[event_type]
    load_before = os.getloadavg()[0]
    warmup = max(batch, min(events // 5, 2000)) if warmup is None else warmup
    facts = await server_facts(server_url)
    _progress(
        f"PostgreSQL {facts['postgres_version']} ({source or 'given'}, {redact(server_url)}); "
        f"fsync={facts['durability']['fsync']} synchronous_commit={facts['durability']['synchronous_commit']}"
    )
    contenders: list[Ours | Copy | EventSourcing] = [
        EventSourcing(batch, workload),
        Copy(batch, workload),
        Ours(batch, workload),
    ]
    names = {c.name: f"allot_bench_{c.name}_{uuid.uuid4().hex[:8]}" for c in contenders}
    samples: dict[str, list[float]] = {c.name: [] for c in contenders}
    es = contenders[0]
    assert isinstance(es, EventSourcing)
    try:
        for contender in contenders:
            url = await create_database(server_url, names[contender.name])
            await contender.setup(url)
        payload_bytes = len(canonical(workload.make(0)))
        es_state_bytes = await asyncio.to_thread(es.state_bytes)
        checkpointed = await _race(contenders, server_url, samples, events=events, runs=runs, warmup=warmup)
    finally:
        for contender in contenders:
            with contextlib.suppress(Exception):
                await contender.close()
        for name in names.values():
            with contextlib.suppress(Exception):
                await drop_database(server_url, name)

    ours = statistics.median(samples["ours"])
    eventsourcing = statistics.median(samples["eventsourcing"])
    copy = statistics.median(samples["copy"])
    vs_es, vs_copy = _ratio(ours, eventsourcing), _ratio(ours, copy)
    return {
        "benchmark": "append",
        "ours_events_per_s": round(ours),
        "eventsourcing_events_per_s": round(eventsourcing),
        "copy_rows_per_s": round(copy),
        "ours_vs_eventsourcing": vs_es,
        "ours_vs_copy": vs_copy,
        "goal": {"ours_vs_eventsourcing": GOAL_VS_EVENTSOURCING, "ours_vs_copy": GOAL_VS_COPY},
        "goal_met": bool(vs_es and vs_copy and vs_es >= GOAL_VS_EVENTSOURCING and vs_copy >= GOAL_VS_COPY),
        "samples_per_s": {name: [round(s) for s in values] for name, values in samples.items()},
        "events": events,
        "batch": batch,
        "runs": runs,
        "warmup_events": warmup,
        "payload_bytes": payload_bytes,
        "eventsourcing_state_bytes": es_state_bytes,
        "event_type": workload.event_type,
        "producer": workload.producer,
        "checkpoint_before_each_run": checkpointed,
        "server": source or "given",
        **facts,
        "python_version": platform.python_version(),
        "versions": _versions(),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            # other work on the machine skews every contender: 1-minute load average at start and end
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        },
    }
