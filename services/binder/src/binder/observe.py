"""binder metrics: the submit→bound latency of every pod bound while the service runs.

The submission time is the ``recorded_at`` of the pod's ``pod.submitted`` (the door's commit); the binding time is
the ``recorded_at`` of ``pod.bound`` when it is an input (Kubernetes mode: the worker recorded the API server's
answer), or the commit of the batch that decided it (standalone mode: the decision is the binding). Pods submitted
before the service started are not measured (the histogram is of this process, as kube-scheduler's are).
"""

from __future__ import annotations

from prometheus_client import Histogram
from prometheus_client.registry import Collector

from allot_eventstore.clock import system_clock
from allot_runtime.metrics import SLI_BUCKETS, ProcessorSource
from allot_runtime.service import Handled, ServiceContext

BOUND = "pod.bound"


class BindLatency:
    def __init__(self) -> None:
        self.histogram = Histogram(
            "allot_pod_submit_to_bound_duration_seconds",
            "Time from a pod's submission being recorded to its binding being recorded",
            buckets=SLI_BUCKETS,
            registry=None,  # registered on the service's registry by ``latency_metrics``
        )
        self.submitted: dict[str, int] = {}  # pod stream -> recorded_at (µs) of its pod.submitted

    def observe(self, handled: list[Handled], now_us: int) -> None:
        for item in handled:
            record = item.record
            if record.type == "pod.submitted":
                self.submitted[record.stream_id] = record.recorded_at
            elif record.type == "pod.deleted":
                self.submitted.pop(record.stream_id, None)
            elif record.type == BOUND:  # Kubernetes mode: the worker's outcome, with its own time
                self._bound(record.stream_id, record.recorded_at)
            for new in item.news:
                if new.tag.rsplit(".", 1)[0] == BOUND:  # standalone: the decision is the binding
                    self._bound(new.stream_id, now_us)

    def _bound(self, stream: str, at: int) -> None:
        submitted = self.submitted.pop(stream, None)
        if submitted is not None:
            self.histogram.observe(max(at - submitted, 0) / 1e6)


LATENCY = BindLatency()  # one service per process


def latency_metrics(_: ProcessorSource) -> Collector:
    return LATENCY.histogram


def observe_binding(ctx: ServiceContext, handled: list[Handled]) -> None:
    LATENCY.observe(handled, system_clock())
