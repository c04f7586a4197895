"""device-allocator metrics: kube-scheduler's families (``allot_scheduler_*``), updated per batch, and the domain
families read from the projection at scrape time (GPUs per node, fragmentation, pending pods by reason code)."""

from __future__ import annotations

from typing import Any

from allot_runtime.domain_metrics import (
    FRAGMENTATION_FAMILIES,
    GPU_FAMILIES,
    PENDING_FAMILIES,
    PlacementMeter,
    family_names,
    pending_families,
)
from allot_runtime.metrics import ProcessorSource, ProjectionCollector
from allot_runtime.service import Handled, ServiceContext

_RESULT = {"pod.placed": "scheduled", "pod.unschedulable": "unschedulable", "pod.rejected": "error"}


def observe_scheduling(ctx: ServiceContext, handled: list[Handled]) -> None:
    scheduler = ctx.metrics.scheduler
    if scheduler is None:
        return
    profile = "default"
    attempts = False
    for item in handled:
        if item.record.type != "reservation.resolved":
            continue
        attempts = True
        for new in item.news:
            result = _RESULT.get(new.tag.rsplit(".", 1)[0])
            if result is not None:
                scheduler.schedule_attempts.labels(result, profile).inc()
                scheduler.attempt_duration.labels(result, profile).observe(item.seconds)
    if not attempts:
        return
    unschedulable = len(getattr(ctx.host.processor, "unschedulable", {}))
    scheduler.pending_pods.labels("unschedulable").set(unschedulable)
    scheduler.unschedulable_pods.labels("DeviceShare", profile).set(unschedulable)


def placement_metrics(source: ProcessorSource) -> ProjectionCollector:
    meter = PlacementMeter()

    def families(processor: Any) -> list[Any]:
        engine = processor.engine
        codes = processor.unschedulable_codes
        reasons = {key: codes.get(key, ()) for key in processor.unschedulable}
        return [
            *meter.families(engine, processor.pods.values()),
            *pending_families(processor.name, reasons),
        ]

    return ProjectionCollector(
        source, families, family_names(GPU_FAMILIES, FRAGMENTATION_FAMILIES, PENDING_FAMILIES)
    )
