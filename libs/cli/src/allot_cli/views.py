"""Read models built by folding the log: what ``allot get``, ``allot explain``, ``allot sim run`` and the demo show.

Pure folds over recorded events (no service involved), so they work on a live log, a simulator log or a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from allot_contracts.envelope import RecordedEvent
from allot_contracts.events import (
    DevicesReported,
    Event,
    GangGroupPlaced,
    GangGroupReady,
    GangGroupUnschedulable,
    GangHoldsReleased,
    GangMemberWaiting,
    NodeRegistered,
    NodeRemoved,
    ObjectIgnored,
    ObjectRef,
    PodBindFailed,
    PodBindRequested,
    PodBound,
    PodDeleted,
    PodEnqueued,
    PodObserved,
    PodPlaced,
    PodRejected,
    PodReleased,
    PodRequeued,
    PodSubmitted,
    PodUnschedulable,
    QosRecorded,
    QuotaAdmitted,
    QuotaEvicted,
    QuotaGroupWaiting,
    QuotaReleased,
    QuotaWaiting,
    ReservationResolved,
)
from allot_contracts.lives import PodLives


@dataclass
class PodView:
    key: str
    phase: str = "Pending"
    node: str | None = None
    devices: dict[str, list[int]] = field(default_factory=dict)
    cpuset: str = ""
    quota: str = ""
    attempts: int = 0
    message: str = ""
    codes: list[str] = field(default_factory=list)
    qos: str = ""
    annotations: dict[str, Any] = field(default_factory=dict)
    history: list[tuple[int, str, str]] = field(default_factory=list)  # (position, type, producer)


@dataclass
class NodeView:
    name: str
    capacity: dict[str, str] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)


def _device_minors(annotations: dict[str, Any]) -> dict[str, list[int]]:
    allocated = annotations.get("scheduling.koordinator.sh/device-allocated") or {}
    if isinstance(allocated, str):
        import json

        try:
            allocated = json.loads(allocated)
        except ValueError:
            return {}
    out: dict[str, list[int]] = {}
    for kind, entries in sorted(allocated.items()):
        out[kind] = sorted(int(e.get("minor", -1)) for e in entries if isinstance(e, dict))
    return out


def _cpuset(annotations: dict[str, Any]) -> str:
    status = annotations.get("scheduling.koordinator.sh/resource-status") or {}
    if isinstance(status, str):
        import json

        try:
            status = json.loads(status)
        except ValueError:
            return ""
    return str(status.get("cpuset", "")) if isinstance(status, dict) else ""


class ClusterView:
    def last_group_members(self, event: Event) -> None:
        members = getattr(event, "members", None)
        group = getattr(event, "group", None)
        if isinstance(group, str) and members:
            self.groups[group] = list(members)

    def _members_of(self, group: str, phase: str, message: str, codes: list[str] | None = None) -> None:
        for member in self.groups.get(group, []):
            view = self.pods.get(member)
            if view is not None and view.phase not in ("Bound", "Rejected"):
                view.phase, view.message, view.codes = phase, message, list(codes or [])

    def __init__(self) -> None:
        self.groups: dict[str, list[str]] = {}
        self.pods: dict[str, PodView] = {}
        self.nodes: dict[str, NodeView] = {}
        self.removed_nodes: dict[str, NodeView] = {}
        self.ignored: list[str] = []
        self.position = 0
        self.lives = PodLives()

    def pod(self, key: str) -> PodView:
        if key not in self.pods:
            self.pods[key] = PodView(key=key)
        return self.pods[key]

    def apply(self, record: RecordedEvent) -> None:
        self.position = record.position
        try:
            event = record.decode()
        except Exception:  # an event of a newer version: nothing to show for it here
            return
        if self.lives.stale(event):  # about an earlier life of a pod that has since been created again
            return
        self.lives.observe(event)
        pod = getattr(event, "pod", None)
        if (isinstance(pod, ObjectRef) and pod.key not in self.pods
                and not isinstance(event, PodSubmitted | PodObserved | PodDeleted)):
            return  # a late decision about a pod that is gone: nothing to show
        self._apply(event, record)

    def _apply(self, event: Event, record: RecordedEvent) -> None:
        match event:
            case NodeRegistered(name=name, capacity=capacity):
                node = self.nodes.get(name) or self.removed_nodes.pop(name, None) or NodeView(name=name)
                node.capacity = dict(capacity)
                self.nodes[name] = node
            case NodeRemoved(name=name):
                # its device report and the pods still recorded on it come back if the node registers again
                if name in self.nodes:
                    self.removed_nodes[name] = self.nodes.pop(name)
            case DevicesReported(name=name, devices=devices):
                self.nodes.setdefault(name, NodeView(name=name)).devices = dict(devices)
            case ObjectIgnored(kind=kind, ref=ref):
                self.ignored.append(f"{kind} {ref.key}")
            case PodSubmitted(pod=pod):
                view = PodView(key=pod.key)
                self.pods[pod.key] = view
            case PodObserved(pod=pod, manifest=manifest):
                view = self.pod(pod.key)
                view.phase = "Bound"
                view.node = str((manifest.get("spec") or {}).get("nodeName") or "")
                view.annotations = dict((manifest.get("metadata") or {}).get("annotations") or {})
                view.devices = _device_minors(view.annotations)
                view.cpuset = _cpuset(view.annotations)
                self.nodes.setdefault(view.node, NodeView(name=view.node)).pods.add(pod.key)
            case PodDeleted(pod=pod):
                view = self.pods.pop(pod.key, None)
                if view and view.node and view.node in self.nodes:
                    self.nodes[view.node].pods.discard(pod.key)
                return
            case PodEnqueued(pod=pod, attempt=attempt) | PodRequeued(pod=pod, attempt=attempt):
                view = self.pod(pod.key)
                view.phase, view.attempts = "Queued", attempt
            case QuotaWaiting(pod=pod, quota=quota, message=message):
                view = self.pod(pod.key)
                view.phase, view.quota, view.message = "Waiting", quota, message
            case QuotaAdmitted(pod=pod, quota=quota):
                view = self.pod(pod.key)
                view.phase, view.quota, view.message = "Admitted", quota, ""
            case QuotaReleased():
                pass
            case ReservationResolved(pod=pod):
                self.pod(pod.key).phase = "Scheduling"
            case PodPlaced(pod=pod, node=node, decision=decision):
                view = self.pod(pod.key)
                view.phase, view.node, view.message, view.codes = "Placed", node, "", []
                view.annotations = dict(decision.get("annotations") or {})
                view.devices = _device_minors(view.annotations)
                view.cpuset = _cpuset(view.annotations)
            case PodUnschedulable(pod=pod, message=message, codes=codes):
                view = self.pod(pod.key)
                view.phase, view.message, view.codes = "Unschedulable", message, list(codes)
            case PodRejected(pod=pod, message=message, codes=codes):
                view = self.pod(pod.key)
                view.phase, view.message, view.codes = "Rejected", message, list(codes)
            case PodBindRequested(pod=pod, node=node):
                view = self.pod(pod.key)
                view.phase, view.node = "Binding", node
            case PodBindFailed(pod=pod, message=message):
                view = self.pod(pod.key)
                view.phase, view.message = "BindFailed", message
            case PodBound(pod=pod, node=node):
                view = self.pod(pod.key)
                view.phase, view.node = "Bound", node
                self.nodes.setdefault(node, NodeView(name=node)).pods.add(pod.key)
            case PodReleased(pod=pod, node=node):
                if node in self.nodes:
                    self.nodes[node].pods.discard(pod.key)
            case QosRecorded(pod=pod, kube_qos=kube, koord_qos=koord):
                self.pod(pod.key).qos = f"{koord}/{kube}"
            case QuotaEvicted(pod=pod, cause=cause, message=message):
                view = self.pod(pod.key)
                view.phase, view.message = "Evicted", f"{cause}: {message}"
                if view.node and view.node in self.nodes:
                    self.nodes[view.node].pods.discard(pod.key)
            case GangMemberWaiting(pod=pod, gang=gang, present=present, min_available=minimum, reason=reason):
                view = self.pod(pod.key)
                view.phase = "Waiting"
                view.message = f"gang {gang}: {present}/{minimum} members present ({reason})"
            case GangGroupReady(members=members, attempt=attempt):
                for member in members:
                    if member in self.pods:
                        self.pods[member].phase, self.pods[member].attempts = "Scheduling", attempt
                        self.pods[member].message = ""
            case QuotaGroupWaiting(group=group, message=message):
                self._members_of(group, "Waiting", message)
            case GangGroupUnschedulable(group=group, message=message, codes=codes):
                self._members_of(group, "Unschedulable", message, codes)
            case GangGroupPlaced(decisions=decisions):
                for member, decision in decisions.items():
                    if member in self.pods:
                        view = self.pods[member]
                        view.phase, view.node, view.message = "Placed", decision.get("node"), ""
                        view.annotations = dict(decision.get("annotations") or {})
                        view.devices = _device_minors(view.annotations)
                        view.cpuset = _cpuset(view.annotations)
            case GangHoldsReleased(members=members, reason=reason):
                for member in members:
                    view = self.pods.get(member)
                    if view is not None and view.phase in ("Placed", "Scheduling"):
                        view.phase, view.node, view.devices, view.cpuset = "Waiting", None, {}, ""
                        view.message = f"gang holds released: {reason}"
            case _:
                return
        self.last_group_members(event)
        key = getattr(event, "pod", None)
        if key is not None and getattr(key, "key", None) in self.pods:
            self.pods[key.key].history.append((record.position, record.type, record.producer))
