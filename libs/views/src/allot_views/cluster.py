"""Read models built by folding the log: what ``allot get``, ``allot explain``, ``allot sim run`` and the demo show.

Pure folds over recorded events (no service involved), so they work on a live log, a simulator log or a copy.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
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
    NodeAllocatableUpdated,
    NodeHeartbeat,
    NodeHeartbeatLost,
    NodeHeartbeatResumed,
    NodeMetricReported,
    NodeRegistered,
    NodeRemoved,
    ObjectIgnored,
    ObjectRef,
    PodBindFailed,
    PodBindRequested,
    PodBound,
    PodDeleted,
    PodEnqueued,
    PodEvicted,
    PodObserved,
    PodPlaced,
    PodRejected,
    PodReleased,
    PodRequeued,
    PodSubmitted,
    PodUnschedulable,
    QosApplied,
    QosDriftCorrected,
    QosPlanRecorded,
    QosPlanRemoved,
    QosRecorded,
    QuotaAdmitted,
    QuotaEvicted,
    QuotaGroupWaiting,
    QuotaReleased,
    QuotaWaiting,
    ReservationResolved,
)
from allot_contracts.events.qos import QosPlan
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.lives import PodLives
from allot_contracts.objects.annotations import annotation_object
from allot_contracts.objects.inventory import Device
from allot_contracts.objects.names import GPU, GPU_CORE, GPU_MEMORY, LABEL_GPU_MODEL
from allot_contracts.quantity import QuantityError, to_canonical

HOLDING = ("Bound", "Placed", "Binding")  # the phases in which a pod holds what it was allocated
# The phases of a pod that waits for something (quota, a gang, a node, a binding); each has a reason code.
HELD = ("Pending", "Queued", "Waiting", "Admitted", "Scheduling", "Unschedulable", "BindFailed")


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
    annotations: JsonObject = field(default_factory=dict)
    history: list[tuple[int, str, str]] = field(default_factory=list)  # (position, type, producer)
    enforcement: Enforcement | None = None
    requests: dict[str, int] = field(
        default_factory=dict
    )  # canonical (millicores, bytes, counts), as read at the door
    limits: dict[str, int] = field(default_factory=dict)


@dataclass
class Enforcement:
    """What qos-enforcer planned for a pod on its node and what the node agent reported."""

    plan: QosPlan
    applied: int = 0  # the revision last applied
    ok: bool = False
    failed: int = 0  # writes of that application that did not hold
    unsupported: int = 0
    drift: int = 0  # values corrected by reconciles since

    def status(self) -> str:
        if not self.applied:
            return f"r{self.plan.revision} not applied yet"
        state = "applied" if self.ok else f"FAILED ({self.failed} writes)"
        extra = [f"{self.unsupported} unsupported"] if self.unsupported else []
        extra += [f"{self.drift} drift corrected"] if self.drift else []
        behind = f" (plan r{self.plan.revision})" if self.applied != self.plan.revision else ""
        return f"r{self.applied} {state}{behind}" + (f", {', '.join(extra)}" if extra else "")


_SHORT = {
    "cpuset_cpus": "cpuset",
    "cpu_quota": "quota",
    "cpu_shares": "shares",
    "cpu_burst_us": "burst",
    "cpu_idle": "idle",
    "cpu_bvt_warp_ns": "gi",
    "memory_min": "mem.min",
    "memory_low": "mem.low",
    "memory_high": "mem.high",
    "memory_max": "mem.max",
}


def _short_value(knob: str, value: Any) -> str:
    if knob == "cpu_quota" and isinstance(value, dict):
        quota = value.get("quota_us")
        return "max" if quota is None else f"{quota * 1000 // max(int(value.get('period_us') or 1), 1)}m"
    if knob.startswith("memory_") and isinstance(value, int):
        return f"{value >> 20}Mi"
    if knob == "cpu_burst_us" and isinstance(value, int):
        return f"{value // 1000}ms"
    return str(value).lower() if isinstance(value, bool) else str(value)


def plan_summary(plan: QosPlan) -> str:
    """The pod-level values of a plan in one short line (``cpuset=2-3 idle=true quota=500m gpu:main rdt=allot-BE``)."""
    parts: list[str] = []
    for target in plan.cgroups:
        if target.scope == "pod":
            parts += [f"{_SHORT.get(k, k)}={_short_value(k, v)}" for k, v in sorted(target.settings.items())]
    parts += [
        f"gpu:{g.container}({','.join(f'{s.cores}%/{s.memory_mib}Mi' for s in g.gpus)})" for g in plan.gpu
    ]
    if plan.resctrl:
        parts.append(f"rdt={plan.resctrl}")
    return " ".join(parts) or "nothing to enforce"


@dataclass
class NodeView:
    name: str
    capacity: dict[str, str] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)
    # node side: the latest NodeMetric's usage and time, the computed batch/mid allocatable, heartbeats (µs)
    usage: dict[str, str] = field(default_factory=dict)
    metric_time: int = 0
    allocatable: dict[str, str] = field(default_factory=dict)
    degraded: bool = False
    heartbeat: int = 0
    heartbeat_lost: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    kube_allocatable: dict[str, int] = field(default_factory=dict)  # the Node's status.allocatable, canonical
    inventory: dict[str, tuple[Device, ...]] = field(default_factory=dict)  # the reported devices by type


def _minor(entry: JsonObject) -> int:
    minor = entry.get("minor", -1)
    if not isinstance(minor, int | float | str):
        raise TypeError(f"device minor {minor!r} is not a number")
    return int(minor)


def _entries(value: JsonValue) -> list[JsonObject]:
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def _device_minors(annotations: Mapping[str, JsonValue]) -> dict[str, list[int]]:
    allocated = annotation_object(annotations, "scheduling.koordinator.sh/device-allocated")
    return {kind: sorted(_minor(e) for e in _entries(entries)) for kind, entries in sorted(allocated.items())}


def _cpuset(annotations: Mapping[str, JsonValue]) -> str:
    return str(annotation_object(annotations, "scheduling.koordinator.sh/resource-status").get("cpuset", ""))


def _set_annotations(view: PodView, annotations: JsonObject) -> None:
    """Record a pod's annotations with the devices and cpuset they allocate."""
    view.annotations = annotations
    view.devices = _device_minors(annotations)
    view.cpuset = _cpuset(annotations)


@dataclass(frozen=True)
class GpuRow:
    """One GPU of a node as the log says: the reported device and what the pods holding it were allocated (gpu-core
    percent, 100 = the whole GPU; memory in bytes)."""

    node: str
    index: int
    uuid: str
    model: str
    healthy: bool
    cores: int
    memory: int
    holders: tuple[tuple[str, int, int], ...]  # (pod, cores, memory bytes)

    @property
    def cores_used(self) -> int:
        return sum(c for _, c, _ in self.holders)

    @property
    def memory_used(self) -> int:
        return sum(m for _, _, m in self.holders)

    @property
    def free(self) -> bool:
        """Whole and healthy with nothing allocated: what a pod asking for a whole GPU can have."""
        return self.healthy and self.cores > 0 and not self.holders


@functools.lru_cache(maxsize=1024)
def _canonical(resource: str, text: str) -> int:
    """A quantity of an allocation annotation (a few distinct texts across a cluster: parsed once each)."""
    return to_canonical(resource, text)


def gpu_allocations(pod: PodView) -> list[tuple[int, int, int]]:
    """(minor, gpu-core percent, memory bytes) of each GPU the pod was allocated, from its device-allocated
    annotation (a whole GPU when the entry names no gpu-core)."""
    allocated = annotation_object(pod.annotations, "scheduling.koordinator.sh/device-allocated")
    out = []
    for entry in _entries(allocated.get(GPU)):
        resources = entry.get("resources")
        resources = resources if isinstance(resources, dict) else {}
        try:
            cores = _canonical(GPU_CORE, str(resources.get(GPU_CORE, "100")))
            memory = _canonical(GPU_MEMORY, str(resources.get(GPU_MEMORY, "0")))
        except QuantityError:
            continue
        out.append((_minor(entry), cores, memory))
    return out


def gpu_rows(view: ClusterView) -> dict[str, list[GpuRow]]:
    """node -> its GPUs in index order, with the pods placed or bound on each (nodes without GPUs left out)."""
    held: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
    for key, pod in sorted(view.pods.items()):
        if pod.node and pod.phase in HOLDING:
            for minor, cores, memory in gpu_allocations(pod):
                held.setdefault((pod.node, minor), []).append((key, cores, memory))
    out: dict[str, list[GpuRow]] = {}
    for name, node in sorted(view.nodes.items()):
        model = node.labels.get(LABEL_GPU_MODEL, "")
        rows = [
            GpuRow(
                node=name,
                index=d.minor,
                uuid=d.id,
                model=d.labels.get(LABEL_GPU_MODEL, model),
                healthy=d.healthy,
                cores=d.resources.get(GPU_CORE, 0),
                memory=d.resources.get(GPU_MEMORY, 0),
                holders=tuple(held.get((name, d.minor), ())),
            )
            for d in sorted(node.inventory.get(GPU, ()), key=lambda d: d.minor)
        ]
        if rows:
            out[name] = rows
    return out


def node_allocated(view: ClusterView, name: str) -> tuple[dict[str, int], dict[str, int], int]:
    """What the pods holding resources on a node were allocated: (requests, limits) summed per resource, canonical
    units, and the number of those pods (what ``kubectl describe node`` calls Allocated resources)."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    count = 0
    for pod in view.pods.values():
        if pod.node != name or pod.phase not in HOLDING:
            continue
        count += 1
        for resource, value in pod.requests.items():
            requests[resource] = requests.get(resource, 0) + value
        for resource, value in pod.limits.items():
            limits[resource] = limits.get(resource, 0) + value
    return requests, limits, count


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
        if (
            isinstance(pod, ObjectRef)
            and pod.key not in self.pods
            and not isinstance(event, PodSubmitted | PodObserved | PodDeleted)
        ):
            return  # a late decision about a pod that is gone: nothing to show
        self._apply(event, record)

    def _apply(self, event: Event, record: RecordedEvent) -> None:
        if isinstance(event, PodDeleted):
            gone = self.pods.pop(event.pod.key, None)
            if gone is not None and gone.node and gone.node in self.nodes:
                self.nodes[gone.node].pods.discard(event.pod.key)
            return
        handled = (
            self._apply_node(event, record)
            or self._apply_pod(event)
            or self._apply_qos(event)
            or self._apply_gang(event)
        )
        if not handled:
            return
        self.last_group_members(event)
        key = getattr(event, "pod", None)
        if key is not None and getattr(key, "key", None) in self.pods:
            self.pods[key.key].history.append((record.position, record.type, record.producer))

    def _apply_node(self, event: Event, record: RecordedEvent) -> bool:
        """Fold an event about a node (or an ignored object); False when the event is of another kind."""
        match event:
            case NodeRegistered(name=name, capacity=capacity, node=info):
                node = self.nodes.get(name) or self.removed_nodes.pop(name, None) or NodeView(name=name)
                node.capacity = dict(capacity)
                node.labels = dict(info.labels) if info is not None else {}
                node.kube_allocatable = dict(info.allocatable) if info is not None else {}
                self.nodes[name] = node
            case NodeRemoved(name=name):
                # its device report and the pods still recorded on it come back if the node registers again
                if name in self.nodes:
                    self.removed_nodes[name] = self.nodes.pop(name)
            case DevicesReported(name=name, devices=devices, inventory=inventory):
                node = self.nodes.setdefault(name, NodeView(name=name))
                node.devices, node.inventory = dict(devices), dict(inventory.devices)
            case NodeMetricReported(name=name, usage=usage, update_time=update_time):
                node = self.nodes.setdefault(name, NodeView(name=name))
                node.usage, node.metric_time = dict(usage), update_time
            case NodeAllocatableUpdated(name=name, allocatable=allocatable, degraded=degraded):
                node = self.nodes.setdefault(name, NodeView(name=name))
                node.allocatable, node.degraded = dict(allocatable), degraded
            case NodeHeartbeat(name=name):
                self.nodes.setdefault(name, NodeView(name=name)).heartbeat = record.recorded_at
            case NodeHeartbeatLost(name=name):
                self.nodes.setdefault(name, NodeView(name=name)).heartbeat_lost = record.recorded_at
            case NodeHeartbeatResumed(name=name):
                self.nodes.setdefault(name, NodeView(name=name)).heartbeat_lost = 0
            case ObjectIgnored(kind=kind, ref=ref):
                self.ignored.append(f"{kind} {ref.key}")
            case _:
                return False
        return True

    def _apply_pod(self, event: Event) -> bool:
        """Fold an event of a pod's way through quota, placement and binding; False when of another kind."""
        match event:
            case PodSubmitted(pod=pod, spec=spec):
                view = PodView(key=pod.key)
                if spec is not None:
                    view.requests, view.limits = dict(spec.requests), dict(spec.limits)
                self.pods[pod.key] = view
            case PodObserved(pod=pod, manifest=manifest, spec=spec):
                view = self.pod(pod.key)
                if spec is not None:
                    view.requests, view.limits = dict(spec.requests), dict(spec.limits)
                view.phase = "Bound"
                view.node = str((manifest.get("spec") or {}).get("nodeName") or "")
                _set_annotations(view, dict((manifest.get("metadata") or {}).get("annotations") or {}))
                self.nodes.setdefault(view.node, NodeView(name=view.node)).pods.add(pod.key)
            case PodEnqueued(pod=pod, attempt=attempt) | PodRequeued(pod=pod, attempt=attempt):
                view = self.pod(pod.key)
                view.phase, view.attempts = "Queued", attempt
            case QuotaWaiting(pod=pod, quota=quota, message=message, detail=detail):
                view = self.pod(pod.key)
                view.phase, view.quota, view.message = "Waiting", quota, message
                # the reason code quota-manager holds the pod back under (its allot_pending_pods label)
                view.codes = [detail.reason if detail is not None and detail.reason else "InsufficientQuota"]
            case QuotaAdmitted(pod=pod, quota=quota):
                view = self.pod(pod.key)
                view.phase, view.quota, view.message, view.codes = "Admitted", quota, "", []
            case QuotaReleased():
                pass
            case ReservationResolved(pod=pod):
                self.pod(pod.key).phase = "Scheduling"
            case PodPlaced(pod=pod, node=node, decision=decision):
                view = self.pod(pod.key)
                view.phase, view.node, view.message, view.codes = "Placed", node, "", []
                _set_annotations(view, dict(decision.annotations))
            case _:
                return self._apply_pod_outcome(event)
        return True

    def _apply_pod_outcome(self, event: Event) -> bool:
        """Fold an event that ends or undoes a pod's attempt (refusal, binding, release, eviction)."""
        match event:
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
            case PodEvicted(pod=pod, cause=cause, message=message):
                view = self.pod(pod.key)
                view.phase, view.message = "Evicted", f"{cause}: {message}"
            case QuotaEvicted(pod=pod, cause=cause, message=message):
                view = self.pod(pod.key)
                view.phase, view.message = "Evicted", f"{cause}: {message}"
                if view.node and view.node in self.nodes:
                    self.nodes[view.node].pods.discard(pod.key)
            case _:
                return False
        return True

    def _apply_qos(self, event: Event) -> bool:
        """Fold an event of qos-enforcer's plan for a pod and its application; False when of another kind."""
        match event:
            case QosRecorded(pod=pod, kube_qos=kube, koord_qos=koord, plan=plan):
                self.pod(pod.key).qos = f"{koord}/{kube}"
                if plan is not None:
                    self.pod(pod.key).enforcement = Enforcement(plan=plan)
            case QosPlanRecorded(pod=pod, plan=plan):
                view = self.pod(pod.key)
                previous = view.enforcement
                view.enforcement = Enforcement(plan=plan)
                if previous is not None:
                    view.enforcement.applied, view.enforcement.ok = previous.applied, previous.ok
            case QosPlanRemoved(pod=pod):
                self.pod(pod.key).enforcement = None
            case QosApplied(pod=pod, revision=revision, ok=ok, results=results) if pod is not None:
                enforcement = self.pod(pod.key).enforcement
                if enforcement is not None:
                    enforcement.applied, enforcement.ok, enforcement.drift = revision, ok, 0
                    enforcement.unsupported = sum(r.outcome == "unsupported" for r in results)
                    enforcement.failed = sum(
                        r.outcome in ("refused", "missing", "rejected", "mismatch", "failed") for r in results
                    )
            case QosDriftCorrected(pod=pod, corrected=corrected) if pod is not None:
                enforcement = self.pod(pod.key).enforcement
                if enforcement is not None:
                    enforcement.drift += sum(c.outcome == "applied" for c in corrected)
            case _:
                return False
        return True

    def _apply_gang(self, event: Event) -> bool:
        """Fold an event about a gang or a quota group of pods; False when of another kind."""
        match event:
            case GangMemberWaiting(pod=pod, gang=gang, present=present, min_available=minimum, reason=reason):
                view = self.pod(pod.key)
                view.phase, view.codes = "Waiting", ["GangWaiting"]
                view.message = f"gang {gang}: {present}/{minimum} members present ({reason})"
            case GangGroupReady(members=members, attempt=attempt):
                for member in members:
                    if member in self.pods:
                        self.pods[member].phase, self.pods[member].attempts = "Scheduling", attempt
                        self.pods[member].message, self.pods[member].codes = "", []
            case QuotaGroupWaiting(group=group, message=message, detail=detail):
                first = detail.first if detail is not None else None
                self._members_of(group, "Waiting", message, [first.reason if first else "InsufficientQuota"])
            case GangGroupUnschedulable(group=group, message=message, codes=codes):
                self._members_of(group, "Unschedulable", message, codes)
            case GangGroupPlaced(decisions=decisions):
                for member, decision in decisions.items():
                    if member in self.pods:
                        view = self.pods[member]
                        view.phase, view.node, view.message = "Placed", decision.node, ""
                        _set_annotations(view, dict(decision.annotations))
            case GangHoldsReleased(members=members, reason=reason):
                for member in members:
                    held = self.pods.get(member)
                    if held is not None and held.phase in ("Placed", "Scheduling"):
                        held.phase, held.node, held.devices, held.cpuset = "Waiting", None, {}, ""
                        held.message = f"gang holds released: {reason}"
            case _:
                return False
        return True
