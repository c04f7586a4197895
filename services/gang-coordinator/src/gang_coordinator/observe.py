"""gang-coordinator metrics, read from the gang engine at scrape time: the members it holds back, by reason
(``GangWaiting``: waiting for their gang group to be complete or for its next attempt; ``GangHeld``: placed, the
group short of members, NonStrict)."""

from __future__ import annotations

from typing import Any

from allot_runtime.domain_metrics import PENDING_FAMILIES, family_names, pending_families
from allot_runtime.metrics import ProcessorSource, ProjectionCollector

REASONS = {"pending": "GangWaiting", "held": "GangHeld"}


def gang_metrics(source: ProcessorSource) -> ProjectionCollector:
    def families(processor: Any) -> list[Any]:
        reasons: dict[str, tuple[str, ...]] = {}
        for status in processor.engine.statuses():
            members = status["members"]
            for state, reason in REASONS.items():
                for index in range(members.get(state, 0)):
                    reasons[f"{status['gang']}#{state}#{index}"] = (reason,)
        return pending_families(processor.name, reasons)

    return ProjectionCollector(source, families, family_names(PENDING_FAMILIES))
