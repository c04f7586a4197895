"""binder's decisions: bind each placed pod to its node (the PreBind/Bind stage).

Consumes ``pod.placed`` and ``pod.deleted``; emits ``pod.bound`` with the output annotations (device-allocated,
resource-status, …) as the strings a Kubernetes Binding carries. It is also the writer of ElasticQuota status:
``quota.status_synced`` becomes one ``quota.status_published`` per quota (the merge patch Kubernetes mode applies). In standalone mode the binding is the recorded
event itself. A pod deleted before its placement arrives is not bound.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    GangGroupAdmitted,
    GangGroupPlaced,
    GangHoldsReleased,
    ObjectRef,
    PodBound,
    PodDeleted,
    PodPlaced,
    PodSubmitted,
    QuotaEvicted,
    QuotaStatusPublished,
    QuotaStatusSynced,
)
from allot_runtime.processor import Emit


def annotation_strings(annotations: dict[str, Any]) -> dict[str, str]:
    """Annotation values as Kubernetes stores them: JSON objects compact-encoded, strings as they are."""
    return {
        key: value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True)
        for key, value in sorted(annotations.items())
    }


class Binder:
    name: ClassVar[str] = "binder"
    interests: ClassVar[frozenset[str]] = frozenset(
        {"pod.submitted", "pod.placed", "pod.deleted", "quota.evicted", "gang.group_placed", "gang.group_admitted",
         "gang.holds_released", "quota.status_synced"}
    )

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.live: dict[str, str] = {}  # pod -> uid of pods that exist
        self.bound: dict[str, str] = {}  # pod -> node
        self.held: dict[str, tuple[int, str, dict[str, Any]]] = {}  # gang member -> (attempt, node, annotations)

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        match event:
            case PodSubmitted(pod=pod, uid=uid):
                self.live[pod.key] = uid
                self.bound.pop(pod.key, None)
            case PodDeleted(pod=pod) | QuotaEvicted(pod=pod):
                self.live.pop(pod.key, None)
                self.bound.pop(pod.key, None)
                self.held.pop(pod.key, None)
            case GangGroupPlaced(attempt=attempt, decisions=decisions):
                for member, decision in decisions.items():
                    self.held[member] = (attempt, str(decision.get("node")), dict(decision.get("annotations") or {}))
            case GangHoldsReleased(attempt=attempt, members=members):
                for member in members:
                    if self.held.get(member, (None,))[0] == attempt:
                        self.held.pop(member, None)
            case PodBound(pod=pod, node=node):
                self.bound[pod.key] = node
                self.held.pop(pod.key, None)
            case _:
                pass

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case PodPlaced(pod=pod, attempt=attempt, node=node, decision=decision):
                if pod.key not in self.live or pod.key in self.bound:
                    return []
                annotations = annotation_strings(dict(decision.get("annotations") or {}))
                return [Emit(stream_id=stream_id("pod", pod.key),
                             event=PodBound(pod=pod, attempt=attempt, node=node, annotations=annotations))]
            case QuotaStatusSynced(patches=patches):
                return [Emit(stream_id=stream_id("quota", key), event=QuotaStatusPublished(
                    quota=ObjectRef(namespace=key.split("/", 1)[0], name=key.split("/", 1)[1]), patch=patch))
                        for key, patch in sorted(patches.items())]
            case GangGroupAdmitted(attempt=attempt, members=members):
                out = []
                for member in members:
                    held = self.held.get(member)
                    if held is None or held[0] != attempt or member not in self.live or member in self.bound:
                        continue
                    namespace, name = member.split("/", 1)
                    out.append(Emit(stream_id=stream_id("pod", member), event=PodBound(
                        pod=ObjectRef(namespace=namespace, name=name), attempt=attempt, node=held[1],
                        annotations=annotation_strings(held[2]))))
                return out
            case _:
                return []

    def snapshot(self) -> dict[str, Any]:
        return {"bound": dict(sorted(self.bound.items())), "live": len(self.live), "held": sorted(self.held)}
