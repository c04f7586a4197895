"""Prometheus metrics of a service, one registry per process.

Names mirror kube-scheduler's families where they apply (``scheduler_schedule_attempts_total`` becomes
``allot_scheduler_schedule_attempts_total``: same suffixes, units, label names and bucket layouts, so existing
dashboards port), plus Allot's own families for the log and the bus. Label sets are the same in every service.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# kube-scheduler: scheduling_attempt_duration_seconds uses exponential buckets from 1 ms, factor 2, 15 buckets.
ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))


class Metrics:
    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.consumed = Counter(
            "allot_events_consumed_total",
            "Events handled by the service's processor",
            ["service", "type"],
            registry=r,
        )
        self.emitted = Counter(
            "allot_events_emitted_total",
            "Events the service decided and appended",
            ["service", "type"],
            registry=r,
        )
        self.processing = Histogram(
            "allot_event_processing_duration_seconds",
            "Time from receiving an event to committing the decision",
            ["service"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.position = Gauge("allot_consumer_position", "Last log position handled", ["service"], registry=r)
        self.dead_letters = Counter(
            "allot_dead_letters_total", "Events given up on permanently", ["service"], registry=r
        )
        self.transient_failures = Counter(
            "allot_consumer_transient_failures_total",
            "Transient failures (nak + catch-up)",
            ["service"],
            registry=r,
        )
        # kube-scheduler families (device-allocator)
        self.schedule_attempts = Counter(
            "allot_scheduler_schedule_attempts_total",
            "Number of attempts to schedule pods, by the result",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "allot_scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + commit)",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.pending_pods = Gauge(
            "allot_scheduler_pending_pods", "Number of pending pods, by the queue type", ["queue"], registry=r
        )
        self.unschedulable_pods = Gauge(
            "allot_scheduler_unschedulable_pods",
            "Number of unschedulable pods",
            ["plugin", "profile"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
