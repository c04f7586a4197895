"""gang-coordinator's decisions: the gate every pod passes first (the PreEnqueue / Permit stage).

Consumes ``pod.submitted`` and ``pod.deleted``. A pod that is not a gang member goes on at once: ``pod.enqueued``.
Gang members are held until their whole gang group can be placed as one unit (see docs/gang.md).
"""

from __future__ import annotations

from typing import Any, ClassVar

from allot_contracts.envelope import stream_id
from allot_contracts.events import Event, PodDeleted, PodEnqueued, PodSubmitted
from allot_runtime.processor import Emit


class GangCoordinator:
    name: ClassVar[str] = "gang-coordinator"
    interests: ClassVar[frozenset[str]] = frozenset({"pod.submitted", "pod.deleted"})

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.pods: dict[str, str] = {}  # pod key -> uid

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        match event:
            case PodSubmitted(pod=pod, uid=uid):
                self.pods[pod.key] = uid
            case PodDeleted(pod=pod):
                self.pods.pop(pod.key, None)
            case _:
                pass

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case PodSubmitted(pod=pod):
                return [Emit(stream_id=stream_id("pod", pod.key), event=PodEnqueued(pod=pod, attempt=1))]
            case _:
                return []

    def snapshot(self) -> dict[str, Any]:
        return {"pods": dict(sorted(self.pods.items()))}
