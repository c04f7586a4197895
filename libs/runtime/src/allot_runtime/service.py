"""The service shell: everything around a pure processor that touches the outside world.

``run_service`` wires one processor to the log and the bus: it waits for the schema, takes ownership of its consumer
name (a second instance under the same name stands by: :mod:`allot_eventstore.ownership`), rebuilds the projection from
the log, consumes its event types from JetStream (:class:`allot_bus.consumer.DurableConsumer`), appends each
decision with the consumer checkpoint in the same transaction, and serves ``/healthz``, ``/readyz``, ``/metrics`` and
``/state`` over HTTP plus ``<prefix>.admin.<service>.state`` over NATS (used by ``allot replay --verify`` to compare
the live projection with one rebuilt from the log).

Lifecycle: SIGTERM/SIGINT set a stop event; the consumer finishes its current batch, the checkpoint is flushed, the
projection is snapshot at it when it moved since the last snapshot (snapshots enabled, projection consistent: the
next start then folds no tail), connections are drained, each within ``shutdown_timeout_s``. Every task runs
inside one TaskGroup; a crash of any task stops the process with a non-zero code and the supervisor (``allot up``, compose, Kubernetes) restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from allot_bus.adapters.nats import connect
from allot_bus.consumer import DEFAULT_BATCH, BatchFailed, DurableConsumer
from allot_bus.names import BusNames
from allot_contracts.envelope import NewEvent, RecordedEvent
from allot_contracts.errors import (
    AlreadyProcessed,
    DecisionFailed,
    Fenced,
    PermanentError,
    SchemaMismatch,
    TransientError,
    Unavailable,
)
from allot_eventstore.bounds import DB_READ_TIMEOUT_VARIABLE
from allot_eventstore.migrate import ensure_current
from allot_eventstore.ownership import Ownership
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.protocol import Checkpoint, EventStore, Snapshot
from allot_runtime import logs, memory, telemetry
from allot_runtime.failpoints import Failpoints
from allot_runtime.metrics import CollectorFactory, Metrics
from allot_runtime.processor import Host, Processor, instance_name
from allot_runtime.recorded_config import AppliedConfig, config_hash, record_config
from allot_runtime.replay import rebuild
from allot_runtime.service_http import Liveness, serve_http, state_of
from allot_runtime.settings import ServiceSettings
from allot_runtime.signals import stop_on_signals, unless_stopped
from allot_runtime.snapshots import Snapshots, restore

if TYPE_CHECKING:  # lease mode only: the Kubernetes client is imported when a service runs under a Lease
    from allot_runtime.kube.lease import Leadership

log = logging.getLogger("allot.service")

Observer = Callable[["ServiceContext", "list[Handled]"], None]
Extra = Callable[["ServiceContext", asyncio.Event], Coroutine[Any, Any, None]]


@dataclass
class ServiceContext:
    settings: ServiceSettings
    store: PostgresEventStore
    nc: Any
    metrics: Metrics
    runtime: ProcessorRuntime
    leadership: Leadership | None = None  # lease mode: the term every write is made under
    started_at: float = field(default_factory=time.monotonic)

    @property
    def host(self) -> Host:
        return self.runtime.host

    @property
    def consumer(self) -> DurableConsumer:
        return self.runtime.consumer


class Handled(msgspec.Struct, frozen=True):
    """One event a runtime handled: the trigger, the decisions it led to, and the seconds from the start of its
    evaluation to the commit of its batch (what kube-scheduler's attempt duration covers)."""

    record: RecordedEvent
    news: list[NewEvent]
    seconds: float


class ProcessorRuntime:
    """One processor wired to the log and the bus: rebuild, handle batches (decide + append with checkpoint),
    consume.

    A batch is folded event by event through the host exactly as single events are (each decision sees the
    projection after every earlier event of the batch and its decisions), then all the decisions are appended with
    the checkpoint in one transaction. The outputs are the same as one event per transaction (a test checks it);
    only the number of commits changes.
    """

    def __init__(
        self,
        *,
        name: str,
        factory: Callable[[], Processor],
        store: EventStore,
        nc: Any,
        names: BusNames,
        tracer: Any = None,
        on_handled: Callable[[list[Handled]], None] | None = None,
        fetch_timeout: float = 1.0,
        batch: int = DEFAULT_BATCH,
        settle_memory: bool = False,
        on_fenced: Callable[[Fenced, str], Awaitable[None]] | None = None,
        config: AppliedConfig | None = None,
        snapshot_every: int = 0,
        snapshot_keep: int = 2,
    ) -> None:
        self.name = name
        self.config = (
            config  # recorded (when it changed) before each rebuild: the config decisions are made under
        )
        self.on_fenced = on_fenced  # lease mode: an append was refused (a newer leader): record it, step down
        self.settle_memory = (
            settle_memory  # freeze the rebuilt projection out of the collector's way (a process)
        )
        self.factory = factory
        self.store = store
        self.names = names
        self.tracer = tracer
        self.on_handled = on_handled
        self.host = Host(factory(), name=name)
        # after a rebuild, once ready: the projection's digest logged, the collector settled
        self.settling: asyncio.Task[None] | None = None
        self.failpoints = Failpoints.from_env(name)
        self.lock = asyncio.Lock()  # a state report never sees a batch half-way (evolved but not committed)
        self.consistent = True  # False between a failed decision and the rebuild that follows it
        self.snapshots = Snapshots(
            store,
            every=snapshot_every,
            keep=snapshot_keep,
            config_hash=config_hash(config.config) if config is not None else None,
        )
        self.last_handled = 0.0  # time.monotonic() of the last batch handled (a snapshot waits for idleness)
        self.consumer = DurableConsumer(
            name=name,
            types=self.host.interests,
            store=store,
            nc=nc,
            names=names,
            handler=self.handle,
            rebuild=self.rebuild_projection,
            fetch_timeout=fetch_timeout,
            batch=batch,
        )

    async def rebuild_projection(self) -> int:
        """Rebuild the projection up to the checkpoint (from the newest usable snapshot, when snapshots are on) and
        put it in place; the consumer reports ready once it returns. The projection's digest, when the snapshot's
        checked one is not it (a tail was folded), and settling the collector (a process) come just after, so that
        neither delays readiness."""
        checkpoint = await self.store.get_checkpoint(self.name)
        if self.config is not None:
            await record_config(self.store, self.name, self.config, after=checkpoint)
        if self.snapshots.every:
            host, start, digest = await restore(
                self.build, self.store, config_hash=self.snapshots.config_hash, until=checkpoint
            )
        else:
            host, start, digest = self.build(), 0, None
        await rebuild(host, self.store, until=checkpoint, after=start)
        if host.position != start:
            digest = None  # a tail was folded: the snapshot's digest is no longer the projection's
        self.snapshots.since = start
        async with self.lock:
            if self.settle_memory:
                memory.unsettle()  # the projection being replaced can be collected
            self.host = host
            self.consistent = True
        if digest is not None:
            log.info(
                "%s: projection rebuilt up to position %d (digest %s)", self.name, checkpoint, digest[:12]
            )
        else:
            log.info("%s: projection rebuilt up to position %d", self.name, checkpoint)
        if digest is None or self.settle_memory:
            self.settling = asyncio.create_task(
                self._settle(host, digest is None), name=f"{self.name}-settle"
            )
        return checkpoint

    def build(self) -> Host:
        return Host(self.factory(), name=self.name)

    async def _settle(self, host: Host, log_digest: bool) -> None:
        """Once the consumer is ready (or a few seconds later): log the rebuilt projection's digest, then settle
        the collector (:func:`allot_runtime.memory.settle`), unless another rebuild replaced the projection."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.consumer.ready.wait(), timeout=5.0)
        async with self.lock:
            if self.host is not host:
                return
            if log_digest:
                log.info(
                    "%s: projection at position %d (digest %s)", self.name, host.position, host.digest()[:12]
                )
        if self.settle_memory:
            memory.settle()

    async def snapshot_on_stop(self, timeout: float) -> Snapshot | None:
        """On a graceful stop, once the consumer has stopped and flushed its checkpoint: a snapshot at the
        projection's position when it moved since the last one (consistent only), written within ``timeout``
        seconds, so that the next start restores it and folds no tail."""
        async with self.lock:
            return await self.snapshots.on_stop(self.host, self.consistent, timeout=timeout)

    def snapshot_view(self) -> tuple[Host, bool, float]:
        """What the snapshot loop looks at: the host, whether it is consistent, when a batch was last handled."""
        return self.host, self.consistent, self.last_handled

    def _step(self, record: RecordedEvent) -> list[NewEvent]:
        """Evolve, decide and evolve the outputs for one trigger; processor failures become ``DecisionFailed``."""
        span = (
            telemetry.consuming(
                self.tracer,
                carrier=dict(record.metadata),
                subject=self.names.subject(record.type),
                message_id=record.event_id,
                consumer=self.name,
            )
            if self.tracer is not None
            else contextlib.nullcontext()
        )
        with span:
            try:
                news = self.host.step(record)
            except (TransientError, PermanentError, msgspec.ValidationError, msgspec.DecodeError):
                raise
            except Exception as exc:
                raise DecisionFailed(f"{type(exc).__name__}: {exc}") from exc
            if news and self.tracer is not None:
                carrier = telemetry.inject()
                if carrier:
                    news = [msgspec.structs.replace(n, metadata=carrier) for n in news]
        return news

    async def handle(self, records: Sequence[RecordedEvent]) -> int | None:
        """Handle a batch: fold every trigger in order, then append all decisions with the checkpoint in one
        transaction. Returns the checkpoint committed (None when nothing was appended). If trigger *k* fails, the
        decisions of the triggers before it are committed first and :class:`BatchFailed` ``(k, cause)`` is raised;
        the projection is then inconsistent until the consumer rebuilds it."""
        started = time.perf_counter()
        done: list[tuple[RecordedEvent, list[NewEvent], float]] = []
        async with self.lock:
            for index, record in enumerate(records):
                try:
                    news = self._step(record)
                except BaseException as exc:
                    self.consistent = False
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    try:
                        await self._commit(done)
                    except Exception as commit_error:
                        raise BatchFailed(0, commit_error) from commit_error
                    self._observe(done, started)
                    raise BatchFailed(index, exc) from exc
                done.append((record, news, time.perf_counter()))
            try:
                committed = await self._commit(done)
            except AlreadyProcessed as exc:
                self.consistent = False
                cause = TransientError(f"{exc}; another instance decided these events, rebuilding", delay=0.0)
                raise BatchFailed(0, cause) from exc
            except Fenced as exc:
                self.consistent = False
                if self.on_fenced is not None:
                    await self.on_fenced(exc, f"{len(records)} event(s) from position {records[0].position}")
                raise BatchFailed(0, exc) from exc
            except BaseException as exc:
                self.consistent = False
                if isinstance(exc, Exception):
                    raise BatchFailed(0, exc) from exc
                raise
            self.snapshots.after_batch(self.host, self.consistent)
        self.last_handled = time.monotonic()
        self._observe(done, started)
        return committed

    async def _commit(self, done: list[tuple[RecordedEvent, list[NewEvent], float]]) -> int | None:
        news = [new for _, outputs, _ in done for new in outputs]
        if not news:
            return None
        decisions = [[n.tag.rsplit(".", 1)[0] for n in outputs] for _, outputs, _ in done if outputs]
        if self.failpoints is not None:
            self.failpoints.hit("before-append", decisions)
        position = done[-1][0].position
        await self.store.append(news, producer=self.name, checkpoint=Checkpoint(self.name, position))
        if self.failpoints is not None:
            self.failpoints.hit("after-append", decisions)
        return position

    def _observe(self, done: list[tuple[RecordedEvent, list[NewEvent], float]], started: float) -> None:
        if self.on_handled is None or not done:
            return
        end = time.perf_counter()
        handled, previous = [], started
        for record, news, finished in done:
            handled.append(Handled(record, news, end - previous))
            previous = finished
        self.on_handled(handled)


async def _wait_for_schema(settings: ServiceSettings, stop: asyncio.Event) -> None:
    delay = 0.5
    while not stop.is_set():
        try:
            await ensure_current(
                settings.database_url,
                read_timeout=settings.read_timeout,
                timeouts_from=DB_READ_TIMEOUT_VARIABLE,
            )
            return
        except (SchemaMismatch, OSError, Unavailable) as exc:
            log.warning("waiting for the database schema: %s", exc)
        except Exception as exc:  # a database that is still starting raises driver errors
            log.warning("waiting for the database: %s", exc)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        delay = min(delay * 2, 5.0)


async def timer_loop(ctx: ServiceContext, stop: asyncio.Event) -> None:
    """Record ``timer.fired`` when the processor's deadline passes (wall clock read here, in the shell only).

    The event id is derived from (service, deadline, timer events consumed so far), so a tick before the event was
    consumed, a restart or a second instance cannot record it twice (docs/adr/0006)."""
    from allot_eventstore.clock import system_clock
    from allot_runtime.processor import timer_fired, timer_producer

    name = ctx.runtime.name
    producer = timer_producer(name)
    fired: tuple[int, int] | None = None
    while not stop.is_set():
        delay = 1.0
        if ctx.consumer.ready.is_set():
            async with ctx.runtime.lock:
                deadline, consumed = ctx.host.deadline(), ctx.host.timers
            now = system_clock()
            if deadline is not None and (deadline, consumed) != fired:
                if now >= deadline:
                    new = timer_fired(name, deadline, consumed, service=ctx.settings.service)
                    try:
                        await ctx.store.append([new], producer=producer)
                        fired = (deadline, consumed)
                    except AlreadyProcessed:
                        fired = (deadline, consumed)
                    except Exception as exc:  # the database may be away; try again on the next tick
                        log.warning("could not record a timer event: %s", exc)
                    delay = 0.2
                else:
                    delay = min(1.0, (deadline - now) / 1_000_000)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(delay, 0.01))


def default_observer(ctx: ServiceContext, handled: list[Handled]) -> None:
    service, metrics = ctx.settings.service, ctx.metrics
    consumed: Counter[str] = Counter()
    emitted: Counter[str] = Counter()
    processing = metrics.processing.labels(service)
    for item in handled:
        consumed[item.record.type] += 1
        processing.observe(item.seconds)
        for new in item.news:
            emitted[new.tag.rsplit(".", 1)[0]] += 1
    for event_type, count in consumed.items():
        metrics.consumed.labels(service, event_type).inc(count)
    for event_type, count in emitted.items():
        metrics.emitted.labels(service, event_type).inc(count)
    metrics.position.labels(service).set(handled[-1].record.position)


async def run_service(
    settings: ServiceSettings,
    factory: Callable[[], Processor],
    *,
    observers: Sequence[Observer] = (),
    extras: Sequence[Extra] = (),
    collectors: Sequence[CollectorFactory] = (),
    scheduler: bool = False,
    config: AppliedConfig | None = None,
) -> None:
    """``collectors`` compute domain metrics from the projection at scrape time; ``scheduler`` registers
    kube-scheduler's families (only for the service that schedules); ``config`` is the effective configuration
    ``factory`` builds under, recorded in the log as ``config.applied`` when it changed."""
    logs.setup(settings.service, level=settings.log_level, fmt=settings.log_format)
    memory.configure()
    tracer = telemetry.setup(settings.service, settings.otel_exporter)
    stop = stop_on_signals()

    metrics = Metrics(settings.service, scheduler=scheduler)
    live = Liveness(service=settings.service, metrics=metrics, phase="waiting for the database schema")

    def processor() -> Any:
        return live.ctx.host.processor if live.ctx is not None else None

    for make in collectors:
        metrics.add(make, processor)
    runner = await serve_http(live, settings.http_host, settings.http_port)
    ownership: Ownership | None = None  # released last: a standby takes over once everything is recorded
    leadership: Leadership | None = None  # likewise
    try:
        await _wait_for_schema(settings, stop)
        if stop.is_set():
            return
        live.phase = "standing by: waiting to own the consumer"
        name = instance_name(settings.service, settings.instance)
        if settings.leader_election == "lease":
            leadership = await _lease_leadership(settings, name, stop)
            if leadership is None:
                return
            store = PostgresEventStore.connect(
                settings.database_url,
                fence=leadership.fence,
                read_timeout=settings.read_timeout,
                write_timeout=settings.write_timeout,
                timeouts_from=DB_READ_TIMEOUT_VARIABLE,
            )
            watch = leadership_watch(leadership)
        else:
            ownership = Ownership(settings.database_url, name)
            if not await ownership.acquire(stop):
                return
            store = PostgresEventStore.connect(
                settings.database_url,
                read_timeout=settings.read_timeout,
                write_timeout=settings.write_timeout,
                timeouts_from=DB_READ_TIMEOUT_VARIABLE,
            )
            watch = ownership_watch(ownership)
        live.phase = "connecting to NATS"
        nc = await unless_stopped(
            connect(settings.nats_url, name=f"allot-{settings.service}", auth=settings.nats_auth), stop
        )
        if nc is None:
            return
        live.phase = "catching up with the log"
        await _run(
            settings,
            factory,
            store=store,
            nc=nc,
            metrics=metrics,
            tracer=tracer,
            stop=stop,
            live=live,
            observers=observers,
            extras=[watch, *extras],
            leadership=leadership,
            config=config,
        )
    finally:
        if ownership is not None:
            await ownership.release()
        if leadership is not None:
            await leadership.release()
            await leadership.client.close()
            await leadership.store.close()
        await runner.cleanup()


async def _lease_leadership(settings: ServiceSettings, name: str, stop: asyncio.Event) -> Leadership | None:
    """Kubernetes mode with ``ALLOT_LEADER_ELECTION=lease``: wait for this decider's Lease; None when stopped."""
    import os
    import socket
    import uuid

    from allot_runtime.kube.client import api_client
    from allot_runtime.kube.lease import Leadership, LeaseConfig

    config = LeaseConfig(
        namespace=settings.lease_namespace,
        name=settings.lease_name or f"allot-{name.replace('@', '-')}",
        identity=f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{uuid.uuid4()}",
        lease_duration=settings.lease_duration_s,
        renew_deadline=settings.lease_renew_deadline_s,
        retry_period=settings.lease_retry_period_s,
    )
    client = await api_client()
    client.user_agent = f"allot-{settings.service}/{config.identity}"
    store = PostgresEventStore.connect(  # the term and its record: bounded as every append
        settings.database_url,
        read_timeout=settings.read_timeout,
        write_timeout=settings.write_timeout,
        timeouts_from=DB_READ_TIMEOUT_VARIABLE,
    )
    leadership = Leadership(client=client, store=store, config=config, decider=name)
    if await leadership.acquire(stop):
        return leadership
    await client.close()
    return None


def leadership_watch(leadership: Leadership) -> Extra:
    async def leadership_held(_: ServiceContext, stop: asyncio.Event) -> None:
        await leadership.hold(stop)  # released by run_service, after the last writes

    return leadership_held


def ownership_watch(ownership: Ownership) -> Extra:
    async def ownership_held(_: ServiceContext, stop: asyncio.Event) -> None:
        await ownership.hold(stop)

    return ownership_held


async def _run(
    settings: ServiceSettings,
    factory: Callable[[], Processor],
    *,
    store: PostgresEventStore,
    nc: Any,
    metrics: Metrics,
    tracer: Any,
    stop: asyncio.Event,
    live: Liveness,
    observers: Sequence[Observer],
    extras: Sequence[Extra],
    leadership: Leadership | None = None,
    config: AppliedConfig | None = None,
) -> None:
    all_observers = [default_observer, *observers]
    ctx_ref: list[ServiceContext] = []

    def on_handled(handled: list[Handled]) -> None:
        for observe in all_observers:
            observe(ctx_ref[0], handled)

    runtime = ProcessorRuntime(
        name=instance_name(settings.service, settings.instance),
        factory=factory,
        store=store,
        nc=nc,
        names=settings.names,
        tracer=tracer,
        on_handled=on_handled,
        settle_memory=True,
        on_fenced=leadership.refused if leadership is not None else None,
        config=config,
        snapshot_every=settings.snapshot_every,
        snapshot_keep=settings.snapshot_keep,
    )
    ctx = ServiceContext(
        settings=settings, store=store, nc=nc, metrics=metrics, runtime=runtime, leadership=leadership
    )
    ctx_ref.append(ctx)
    live.ctx = ctx
    live.phase = "running"
    name = runtime.name
    consumer = runtime.consumer

    async def state_reply(msg: Any) -> None:
        await msg.respond(msgspec.json.encode(await state_of(ctx)))

    admin = await nc.subscribe(settings.names.admin(name, "state"), cb=state_reply)
    log.info("%s started (http %s:%s)", name, settings.http_host, settings.http_port)
    graceful = False  # stopped when told, every task ended without an error
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(consumer.run(stop), name=f"{name}-consumer")
            if runtime.snapshots.every:
                tg.create_task(
                    runtime.snapshots.loop(runtime.lock, runtime.snapshot_view, stop),
                    name=f"{name}-snapshots",
                )
            if hasattr(runtime.host.processor, "next_deadline"):
                tg.create_task(timer_loop(ctx, stop), name=f"{name}-timer")
            for extra in extras:
                tg.create_task(extra(ctx, stop), name=f"{name}-{getattr(extra, '__name__', 'extra')}")
        graceful = stop.is_set()
    finally:
        stopping = time.monotonic()
        if runtime.settling is not None:  # the digest line and the collector's settling are not waited for
            runtime.settling.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.flush(), timeout=settings.shutdown_timeout_s)
            if graceful:  # the checkpoint is flushed: the next start restores this snapshot, folds no tail
                left = settings.shutdown_timeout_s - (time.monotonic() - stopping)
                await runtime.snapshot_on_stop(timeout=left)
        with contextlib.suppress(Exception):
            await admin.unsubscribe()
            await asyncio.wait_for(nc.drain(), timeout=settings.shutdown_timeout_s)
        await store.close()
        log.info("%s stopped", name)
