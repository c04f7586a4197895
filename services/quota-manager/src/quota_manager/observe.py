"""quota-manager metrics, read from the projection at scrape time: min / max / runtime / used / request / borrowed
per quota and resource, and the pods waiting for quota by reason code."""

from __future__ import annotations

from typing import Any

from allot_runtime.domain_metrics import (
    PENDING_FAMILIES,
    QUOTA_FAMILIES,
    family_names,
    pending_families,
    quota_families,
)
from allot_runtime.metrics import ProcessorSource, ProjectionCollector


def quota_metrics(source: ProcessorSource) -> ProjectionCollector:
    def families(processor: Any) -> list[Any]:
        reasons = processor.waiting_reasons
        waiting = {key: (reasons.get(key, "InsufficientQuota"),) for key in processor.waiting}
        return [*quota_families(processor.engine.hierarchy), *pending_families(processor.name, waiting)]

    return ProjectionCollector(source, families, family_names(QUOTA_FAMILIES, PENDING_FAMILIES))
