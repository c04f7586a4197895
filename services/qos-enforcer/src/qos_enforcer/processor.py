"""qos-enforcer's decisions: record the QoS of every bound pod (the PostBind stage).

Consumes ``pod.submitted``/``pod.observed`` (manifests), ``pod.bound`` and ``pod.deleted``; emits ``qos.recorded``
with the Kubernetes QoS class (Guaranteed / Burstable / BestEffort), the Koordinator QoS (LSE, LSR, LS, BE, SYSTEM)
and the Koordinator priority class, which is what node-side enforcement keys on.
"""

from __future__ import annotations

from typing import Any, ClassVar

from allot_contracts.envelope import stream_id
from allot_contracts.events import Event, PodBound, PodDeleted, PodObserved, PodSubmitted, QosRecorded
from allot_contracts.kube import koord_priority_class, koord_qos_class, kube_qos_class
from allot_runtime.processor import Emit


class QosEnforcer:
    name: ClassVar[str] = "qos-enforcer"
    interests: ClassVar[frozenset[str]] = frozenset({"pod.submitted", "pod.observed", "pod.bound", "pod.deleted"})
    SCOPED: ClassVar[bool] = True  # one instance per node (a DaemonSet pod) records its own node's pods

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.node = str(((config or {}).get("scope") or {}).get("node") or "")
        self.manifests: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, str] = {}

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        match event:
            case PodSubmitted(pod=pod, manifest=manifest) | PodObserved(pod=pod, manifest=manifest):
                self.manifests[pod.key] = manifest
            case PodDeleted(pod=pod):
                self.manifests.pop(pod.key, None)
                self.classes.pop(pod.key, None)
            case QosRecorded(pod=pod, koord_qos=qos, kube_qos=kube):
                self.classes[pod.key] = f"{kube}/{qos}"
            case _:
                pass

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case PodBound(pod=pod, node=node):
                manifest = self.manifests.get(pod.key)
                if manifest is None or (self.node and node != self.node):
                    return []
                return [Emit(stream_id=stream_id("pod", pod.key), event=QosRecorded(
                    pod=pod, node=node, kube_qos=kube_qos_class(manifest), koord_qos=koord_qos_class(manifest),
                    priority_class=koord_priority_class(manifest)))]
            case _:
                return []

    def snapshot(self) -> dict[str, Any]:
        return {"scope": self.node, "classes": dict(sorted(self.classes.items()))}
