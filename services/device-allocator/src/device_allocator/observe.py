"""device-allocator metrics: kube-scheduler's families (``allot_scheduler_*``), updated per batch, and the domain
families read from the projection at scrape time (GPUs per node, fragmentation, pending pods by reason code)."""

from __future__ import annotations

from typing import Any

from allot_runtime.domain_metrics import (
    FRAGMENTATION_FAMILIES,
    GPU_FAMILIES,
    PENDING_FAMILIES,
    PER_GPU_FAMILIES,
    PlacementMeter,
    family_names,
    pending_families,
)
from allot_runtime.metrics import ProcessorSource, ProjectionCollector
from allot_runtime.service import Handled, ServiceContext

_RESULT = {
    "pod.placed": "scheduled",
    "pod.unschedulable": "unschedulable",
    "pod.rejected": "error",
    "gang.group_placed": "scheduled",
    "gang.group_unschedulable": "unschedulable",
}
# The triggers of a scheduling attempt: one pod's, or a gang group's (an attempt for each member, as kube-scheduler
# counts each pod of a co-scheduled group).
_TRIGGERS = frozenset({"reservation.resolved", "reservation.group_resolved"})


def attempts(news: list[Any]) -> list[tuple[str, int]]:
    """(result, pods) of the scheduling attempts an event's decisions record."""
    out = []
    for new in news:
        result = _RESULT.get(new.tag.rsplit(".", 1)[0])
        if result is not None:
            out.append((result, max(len(getattr(new.event, "members", None) or ()), 1)))
    return out


def observe_scheduling(ctx: ServiceContext, handled: list[Handled]) -> None:
    scheduler = ctx.metrics.scheduler
    if scheduler is None:
        return
    profile = "default"
    scheduled = False
    for item in handled:
        if item.record.type not in _TRIGGERS:
            continue
        scheduled = True
        for result, pods in attempts(item.news):
            scheduler.schedule_attempts.labels(result, profile).inc(pods)
            for _ in range(pods):
                scheduler.attempt_duration.labels(result, profile).observe(item.seconds)
    if not scheduled:
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
        source,
        families,
        family_names(GPU_FAMILIES, PER_GPU_FAMILIES, FRAGMENTATION_FAMILIES, PENDING_FAMILIES),
    )
