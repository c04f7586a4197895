"""device-allocator metrics in kube-scheduler's families (``allot_scheduler_*``)."""

from __future__ import annotations

from allot_runtime.service import Handled, ServiceContext

_RESULT = {"pod.placed": "scheduled", "pod.unschedulable": "unschedulable", "pod.rejected": "error"}


def observe_scheduling(ctx: ServiceContext, handled: list[Handled]) -> None:
    profile = "default"
    attempts = False
    for item in handled:
        if item.record.type != "reservation.resolved":
            continue
        attempts = True
        for new in item.news:
            result = _RESULT.get(new.tag.rsplit(".", 1)[0])
            if result is not None:
                ctx.metrics.schedule_attempts.labels(result, profile).inc()
                ctx.metrics.attempt_duration.labels(result, profile).observe(item.seconds)
    if not attempts:
        return
    unschedulable = len(getattr(ctx.host.processor, "unschedulable", {}))
    ctx.metrics.pending_pods.labels("unschedulable").set(unschedulable)
    ctx.metrics.unschedulable_pods.labels("DeviceShare", profile).set(unschedulable)
