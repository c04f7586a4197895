"""Prometheus metrics of a service, one registry per process.

Families (the catalogue with meanings and labels is docs/observability.md):

- every process (services, relay, web view): ``allot_build_info`` and the standard ``process_*`` / ``python_gc_*`` /
  ``python_info`` collectors (:func:`standard_collectors`); no ``*_created`` series (the client's creation-time
  samples are switched off: they double every counter's series and nothing here reads them);
- every service: events consumed and emitted, processing duration, consumer position, lag behind the log (head −
  position, and the age of the oldest event of interest not yet handled), the consumer's counters (batches,
  duplicates, dead letters, transient failures, catch-ups, gaps), and the standard ``process_*`` / ``python_gc_*`` /
  ``python_info`` collectors;
- the device-allocator only (``scheduler=True``): kube-scheduler's families with the ``allot_`` prefix
  (``scheduler_schedule_attempts_total`` becomes ``allot_scheduler_schedule_attempts_total``: same suffixes, units,
  label names and bucket layouts, so existing dashboards port). Services that never schedule do not register them;
- domain families (GPUs, fragmentation, quotas, pending pods, submit→bound latency) come from
  :mod:`allot_runtime.domain_metrics`, registered by the services that hold the projection they read.

Cost: counters on the event path are updated once per batch (``service.default_observer``); everything derived from
a projection or the log is computed at scrape time by custom collectors, so a busy pipeline pays nothing for it.
Metrics read projections; they never feed a decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, ClassVar, Protocol, Self

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("allot.metrics")

# No ``*_created`` series next to every counter and histogram, for the whole process.
disable_created_metrics()  # type: ignore[no-untyped-call]

# kube-scheduler: scheduling_attempt_duration_seconds uses exponential buckets from 1 ms, factor 2, 15 buckets.
ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
# kube-scheduler: pod_scheduling_sli_duration_seconds uses exponential buckets from 10 ms, factor 2, 20 buckets.
SLI_BUCKETS = tuple(0.01 * 2**i for i in range(20))
SCRAPE_QUERY_TIMEOUT_S = 2.0

ProcessorSource = Callable[[], Any]
"""Returns the service's current processor (None while the service starts). Read at scrape time: the projection is
rebuilt into a new processor after a failure, so a collector never keeps a processor of its own."""

CollectorFactory = Callable[[ProcessorSource], Collector]


class LogReader(Protocol):
    async def head(self) -> tuple[int, bytes]: ...

    async def read(
        self, *, after: int = 0, types: Collection[str] | None = None, limit: int = 1000
    ) -> list[Any]: ...


class ConsumerView(Protocol):
    name: str
    position: int
    types: frozenset[str]
    stats: Any


Labels = tuple[str, ...]


def counter(registry: CollectorRegistry | None, name: str, text: str, labels: Labels = ()) -> Counter:
    """A counter family named ``name`` with help ``text`` and label names ``labels``, registered on ``registry``
    (None: the caller registers it later)."""
    return Counter(name, text, labels, registry=registry)


def gauge(registry: CollectorRegistry | None, name: str, text: str, labels: Labels = ()) -> Gauge:
    """A gauge family, as :func:`counter`."""
    return Gauge(name, text, labels, registry=registry)


def histogram(
    registry: CollectorRegistry | None, name: str, text: str, labels: Labels, buckets: tuple[float, ...]
) -> Histogram:
    """A histogram family with the bucket bounds ``buckets``, as :func:`counter`."""
    return Histogram(name, text, labels, buckets=buckets, registry=registry)


def build_version() -> str:
    """The installed Allot version (the runtime package's), ``unknown`` when it is not installed as a package."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("allot-runtime")
    except PackageNotFoundError:
        return "unknown"


def standard_collectors(registry: CollectorRegistry, component: str) -> None:
    """What every Allot process exports besides its own families: ``allot_build_info`` (1, labelled with the
    version, the component and the Python version) and the client's process, GC and platform collectors."""
    import platform

    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    text = "Always 1: the Allot version and component of this process, and its Python version"
    info = gauge(registry, "allot_build_info", text, ("version", "component", "python_version"))
    info.labels(build_version(), component, platform.python_version()).set(1)


class Metrics:
    def __init__(self, service: str, *, scheduler: bool = False, process: bool = True) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        if process:  # the standard collectors, on this service's registry (not the library's global one)
            standard_collectors(r, service)
        by_type = ("service", "type")
        self.consumed = counter(
            r, "allot_events_consumed_total", "Events handled by the service's processor", by_type
        )
        self.emitted = counter(
            r, "allot_events_emitted_total", "Events the service decided and appended to the log", by_type
        )
        self.processing = histogram(
            r,
            "allot_event_processing_duration_seconds",
            "Time from receiving an event to committing the decision",
            ("service",),
            ATTEMPT_BUCKETS,
        )
        self.position = gauge(r, "allot_consumer_position", "Last log position handled", ("service",))
        self.log = LogCollector(service)
        r.register(self.log)
        self.consumer = ConsumerCollector(service)
        r.register(self.consumer)
        self.scheduler = SchedulerMetrics(r) if scheduler else None
        self._reading: asyncio.Future[None] | None = None  # the scrape-time read of the log, while it runs

    def add(self, factory: CollectorFactory, source: ProcessorSource) -> None:
        """Register a collector reading the service's projection at scrape time."""
        self.registry.register(factory(source))

    async def refresh(self, store: LogReader | None, consumer: ConsumerView | None) -> None:
        """Scrape-time reads that need IO (the log's head): waited for ``SCRAPE_QUERY_TIMEOUT_S`` at most; when
        they fail or have not answered by then the log families are left out of this scrape rather than reported
        stale. A read that has not answered is not cancelled (cancelling a read of a server that does not answer
        waits for the read's own bound, ``ALLOT_DB_READ_TIMEOUT``): it goes on in the background, and the next
        scrape waits for it rather than starting another."""
        self.consumer.consumer = consumer
        if store is None or consumer is None:
            return
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self.log.refresh(store, consumer))
            self._reading.add_done_callback(_retrieved)
        reading = self._reading
        await asyncio.wait([reading], timeout=SCRAPE_QUERY_TIMEOUT_S)
        failure: object = "no answer in time"
        if reading.done():
            failure = "cancelled" if reading.cancelled() else reading.exception()
        if failure is not None:  # the database may be away: the scrape still answers
            self.log.clear()
            log.debug("metrics: could not read the log head: %s", failure)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _retrieved(reading: asyncio.Future[None]) -> None:
    """A read no scrape waited for to the end: its error is read here (the next scrape reads afresh)."""
    if not reading.cancelled():
        reading.exception()


class SchedulerMetrics:
    """kube-scheduler's families, for the one service that schedules (the device-allocator)."""

    def __init__(self, r: CollectorRegistry) -> None:
        by_result = ("result", "profile")
        self.schedule_attempts = counter(
            r,
            "allot_scheduler_schedule_attempts_total",
            "Number of attempts to schedule pods, by the result",
            by_result,
        )
        self.attempt_duration = histogram(
            r,
            "allot_scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + commit)",
            by_result,
            ATTEMPT_BUCKETS,
        )
        self.pending_pods = gauge(
            r, "allot_scheduler_pending_pods", "Number of pending pods, by the queue type", ("queue",)
        )
        self.unschedulable_pods = gauge(
            r, "allot_scheduler_unschedulable_pods", "Number of unschedulable pods", ("plugin", "profile")
        )


class LogCollector:
    """The log's head and how far this service is behind it, read at scrape time (two indexed queries)."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.head: int | None = None
        self.position = 0
        self.pending_since: int | None = None  # recorded time (µs) of the first event of interest not handled
        self.first_pending = 0  # its position

    async def refresh(self, store: LogReader, consumer: ConsumerView) -> None:
        head, _ = await store.head()
        position = consumer.position
        pending = await store.read(after=position, types=consumer.types, limit=1)
        self.head, self.position = head, position
        if pending:
            self.first_pending, self.pending_since = pending[0].position, pending[0].recorded_at
        else:
            self.first_pending, self.pending_since = 0, None

    def clear(self) -> None:
        self.head = None

    def describe(self) -> Iterable[Any]:
        return self._families(describe=True)

    def collect(self) -> Iterable[Any]:
        return self._families(describe=False)

    def _families(self, *, describe: bool) -> Iterator[Any]:
        labels = ["service"]
        head = GaugeMetricFamily(
            "allot_log_head_position", "Position of the last event in the log", labels=labels
        )
        appended = CounterMetricFamily(
            "allot_log_appended_events",
            "Events appended to the log since it began (its head position; rate() gives the append rate)",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "allot_consumer_lag_events",
            "Log positions between the service's position and the head while an event of interest is waiting "
            "(0 when everything of interest is handled)",
            labels=labels,
        )
        age = GaugeMetricFamily(
            "allot_consumer_lag_seconds",
            "Age of the oldest event of interest the service has not handled yet (0 when none)",
            labels=labels,
        )
        if not describe and self.head is not None:
            head.add_metric([self.service], self.head)
            appended.add_metric([self.service], self.head)
            waiting = self.pending_since is not None
            lag.add_metric([self.service], max(self.head - self.position, 0) if waiting else 0)
            seconds = (
                max(time.time() - self.pending_since / 1e6, 0.0) if self.pending_since is not None else 0.0
            )
            age.add_metric([self.service], seconds)
        yield from (head, appended, lag, age)


_CONSUMER_COUNTERS = (
    # (family, help, ConsumerStats field)
    (
        "allot_consumer_batches",
        "Batches handled (each committed with its checkpoint in one transaction)",
        "batches",
    ),
    (
        "allot_consumer_duplicates",
        "Messages at or below the position, skipped (redelivery, relay retry)",
        "duplicates",
    ),
    (
        "allot_dead_letters",
        "Events given up on permanently (recorded as consumer.dead_lettered)",
        "dead_lettered",
    ),
    (
        "allot_consumer_transient_failures",
        "Transient failures (nak + rebuild + catch-up)",
        "transient_failures",
    ),
    ("allot_consumer_catch_ups", "Catch-ups from PostgreSQL (start, gaps, failures)", "catch_ups"),
    ("allot_consumer_caught_up_events", "Events read from PostgreSQL during catch-ups", "caught_up_events"),
    ("allot_consumer_gaps_detected", "Gaps between JetStream and the log found while idle", "gaps_detected"),
)


class ConsumerCollector:
    """The durable consumer's own counters (``ConsumerStats``), read at scrape time."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.consumer: ConsumerView | None = None

    def describe(self) -> Iterable[Any]:
        return self._families(None)

    def collect(self) -> Iterable[Any]:
        return self._families(self.consumer)

    def _families(self, consumer: ConsumerView | None) -> Iterator[Any]:
        for name, text, field in _CONSUMER_COUNTERS:
            family = CounterMetricFamily(name, text, labels=["service"])
            if consumer is not None:
                family.add_metric([self.service], getattr(consumer.stats, field, 0))
            yield family
        refused = CounterMetricFamily(
            "allot_bus_messages_refused",
            "Messages not acted on because the log does not hold them as claimed (recorded as "
            "security.message_refused), by reason",
            labels=["service", "reason"],
        )
        if consumer is not None:
            for reason, count in sorted(getattr(consumer.stats, "refused", {}).items()):
                refused.add_metric([self.service, reason], count)
        yield refused


class ProjectionCollector:
    """A collector computing its families from the service's current processor at scrape time.

    ``families(processor)`` must only read the processor (a test checks the digest is unchanged by a scrape); it
    runs in the event loop between batches, so it sees a state some events of a batch may already be folded into.
    ``names`` lists the families it yields, for registration before the processor exists."""

    def __init__(
        self,
        source: ProcessorSource,
        families: Callable[[Any], Iterable[Any]],
        names: Iterable[tuple[str, str, str]],
    ) -> None:
        self.source = source
        self.families = families
        self.names = tuple(names)

    def describe(self) -> Iterable[Any]:
        kinds = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}
        return [kinds[kind](name, text) for name, kind, text in self.names]

    def collect(self) -> Iterable[Any]:
        processor = self.source()
        if processor is None:
            return []
        try:
            return list(self.families(processor))
        except Exception:  # a scrape must not take the service down; the failure is logged
            log.exception("metrics: a projection collector failed")
            return []


class RegistryFamilies:
    """Prometheus families that exist once per registry (prometheus_client refuses a name registered twice): a
    subclass creates them in ``__init__``, and :meth:`of` gives the ones of a registry, creating them the first
    time."""

    _by_registry: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, RegistryFamilies]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._by_registry = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        """Create the families, registered on ``registry`` (a subclass's)."""

    @classmethod
    def of(cls, registry: CollectorRegistry) -> Self:
        found = cls._by_registry.get(registry)
        if not isinstance(found, cls):
            found = cls(registry)
            cls._by_registry[registry] = found
        return found
