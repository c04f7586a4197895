"""Small pure helpers of the quota-manager's decisions: references, node fit for preemption, used after a charge."""

from __future__ import annotations

import json
from typing import Any

from allot_contracts.events import ObjectRef
from allot_contracts.objects.pod import Pod
from allot_contracts.quantity import format_quantity, to_canonical
from allot_quota.decisions import AdmitDecision

__all__ = ["after", "fits_node", "object_ref", "why_waiting"]


def object_ref(key: str) -> ObjectRef:
    namespace, name = key.split("/", 1)
    return ObjectRef(namespace=namespace, name=name)


def fits_node(pod: Pod | None, allocatable: dict[str, int]) -> Any:
    """Whether a pod fits a node next to the given pods: every resource the node reports, summed."""
    request = pod.requests if pod is not None else {}

    def fits(remaining: list[Pod]) -> bool:
        used: dict[str, int] = {}
        for other in remaining:
            for name, amount in other.requests.items():
                used[name] = used.get(name, 0) + amount
        return all(
            used.get(name, 0) + amount <= allocatable[name]
            for name, amount in request.items()
            if name in allocatable
        )

    return fits


def after(decision: AdmitDecision) -> dict[str, str]:
    """Used after charging the pod (the engine reports used before)."""
    out = {k: to_canonical(k, v) for k, v in decision.used.items()}
    for k, v in decision.request.items():
        out[k] = out.get(k, 0) + to_canonical(k, v)
    return {k: format_quantity(k, v) for k, v in sorted(out.items())}


def why_waiting(decision: AdmitDecision | None, message: str) -> str:
    """Why a pod waits, without the numbers that move with every admission and release (used): the check that
    failed, the dimensions it exceeds, the limit it was held to and the quotas involved."""
    if decision is None:
        return message
    return json.dumps(
        [decision.reason, decision.exceed_dimensions, decision.limit, decision.min, decision.topology],
        sort_keys=True,
    )
