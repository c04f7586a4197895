"""device-allocator metrics in kube-scheduler's families (``allot_scheduler_*``)."""

from __future__ import annotations

from allot_contracts.envelope import NewEvent, RecordedEvent
from allot_runtime.service import ServiceContext

_RESULT = {"pod.placed": "scheduled", "pod.unschedulable": "unschedulable", "pod.rejected": "error"}


def observe_scheduling(ctx: ServiceContext, record: RecordedEvent, news: list[NewEvent], seconds: float) -> None:
    if record.type != "reservation.resolved":
        return
    profile = "default"
    for new in news:
        result = _RESULT.get(new.tag.rsplit(".", 1)[0])
        if result is not None:
            ctx.metrics.schedule_attempts.labels(result, profile).inc()
            ctx.metrics.attempt_duration.labels(result, profile).observe(seconds)
    processor = ctx.host.processor
    unschedulable = len(getattr(processor, "unschedulable", {}))
    ctx.metrics.pending_pods.labels("unschedulable").set(unschedulable)
    ctx.metrics.unschedulable_pods.labels("DeviceShare", profile).set(unschedulable)
