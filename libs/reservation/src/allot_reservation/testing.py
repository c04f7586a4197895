"""Builders and a driver for tests (here, in reservation-manager, in the CLI).

``a_reservation_manifest("r1", owners=[{"labelSelector": {"matchLabels": {"app": "web"}}}], cpu="2")``;
``a_pod_manifest("web-0", labels={"app": "web"}, node="n1")``; ``a_job_manifest("j1", pod="default/web-0")``.
``Driver`` feeds events to a :class:`ReservationEngine` the way the service host does (apply the input, decide,
apply the decisions) and keeps what was decided; ``at(s)`` is ``s`` seconds after a fixed origin (µs).
"""

from __future__ import annotations

from collections.abc import Mapping

from allot_contracts.decisions.placement import Decision
from allot_contracts.events import (
    Event,
    MigrationApplied,
    NodeRegistered,
    ObjectRef,
    PodBound,
    PodObserved,
    PodPlaced,
    PodSubmitted,
    QuotaAdmitted,
    ReservationApplied,
    ReservationPlaced,
    TimerFired,
)
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.inventory import parse_node
from allot_contracts.objects.pod import parse_pod
from allot_reservation.config import ReservationConfig
from allot_reservation.engine import NAME, ReservationEngine

__all__ = [
    "T0",
    "Driver",
    "a_job_manifest",
    "a_pod_manifest",
    "a_reservation_manifest",
    "at",
    "node_registered",
]

T0 = 1_700_000_000_000_000


def at(seconds: float = 0) -> int:
    return T0 + round(seconds * 1_000_000)


def a_reservation_manifest(
    name: str,
    *,
    owners: list[JsonValue] | None = None,
    cpu: str = "2",
    memory: str = "4Gi",
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: JsonValue,
) -> JsonObject:
    meta: JsonObject = {"name": name, "uid": uid or f"uid-{name}"}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    body: JsonObject = {
        "template": {
            "metadata": {"namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
            },
        },
        "owners": owners or [{"labelSelector": {"matchLabels": {"app": "web"}}}],
    }
    body.update(spec)
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": meta,
        "spec": body,
    }


def a_pod_manifest(
    name: str,
    *,
    namespace: str = "default",
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: Mapping[str, JsonValue] | None = None,
    controller: tuple[str, str] | None = None,
    node: str | None = None,
    cpu: str = "2",
    memory: str = "4Gi",
    priority: int | None = None,
) -> JsonObject:
    meta: JsonObject = {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}"}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if controller is not None:
        kind, owner = controller
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
    spec: JsonObject = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
    }
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def a_job_manifest(name: str, *, pod: str, uid: str | None = None, **spec: JsonValue) -> JsonObject:
    namespace, pod_name = pod.split("/", 1)
    body: JsonObject = {"podRef": {"namespace": namespace, "name": pod_name}}
    body.update(spec)
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {"name": name, "uid": uid or f"uid-{name}"},
        "spec": body,
    }


def _ref(key: str) -> ObjectRef:
    namespace, _, name = key.rpartition("/")
    return ObjectRef(namespace=namespace, name=name)


def _meta(manifest: JsonObject) -> JsonObject:
    meta = manifest["metadata"]
    assert isinstance(meta, dict), manifest
    return meta


def _str(meta: JsonObject, key: str) -> str:
    value = meta.get(key, "")
    assert isinstance(value, str), (key, value)
    return value


def node_registered(manifest: JsonObject) -> NodeRegistered:
    """``node.registered`` for a Node manifest, with the Node as read at the door."""
    info, errors = parse_node(manifest)
    assert info is not None, errors
    return NodeRegistered(name=_str(_meta(manifest), "name"), manifest=manifest, node=info)


class Driver:
    """Feeds a :class:`ReservationEngine` as the service host does."""

    def __init__(self, config: JsonObject | None = None) -> None:
        self.engine = ReservationEngine(ReservationConfig.from_dict(config))
        self.now = T0
        self.decided: list[tuple[str, Event]] = []
        self.log: list[tuple[Event, int]] = []  # every input and decision with its time, in log order

    def feed(self, event: Event, seconds: float | None = None) -> list[Event]:
        if seconds is not None:
            self.now = at(seconds)
        self.engine.apply(event, self.now)
        out = self.engine.decide(event, self.now)
        for _, emitted in out:
            self.engine.apply(emitted, self.now)
        self.decided += out
        self.log += [(event, self.now), *((e, self.now) for _, e in out)]
        return [e for _, e in out]

    # --- shortcuts ----------------------------------------------------------------------------------------------------
    def node(self, name: str, labels: dict[str, str] | None = None) -> list[Event]:
        manifest: JsonObject = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
        }
        return self.feed(node_registered(manifest))

    def reservation(self, manifest: JsonObject) -> list[Event]:
        meta = _meta(manifest)
        return self.feed(
            ReservationApplied(
                reservation=ObjectRef(name=_str(meta, "name")), uid=_str(meta, "uid"), manifest=manifest
            )
        )

    def placed_reservation(self, name: str, node: str) -> list[Event]:
        record = self.engine.world.book.get(name)
        assert record is not None, name
        return self.feed(
            ReservationPlaced(reservation=ObjectRef(name=name), uid=record.uid, node=node, decision={})
        )

    def pod(self, manifest: JsonObject) -> list[Event]:
        meta = _meta(manifest)
        ref = ObjectRef(namespace=_str(meta, "namespace"), name=_str(meta, "name"))
        uid = _str(meta, "uid")
        spec = manifest.get("spec")
        node = _str(spec, "nodeName") if isinstance(spec, dict) else ""
        kind = PodObserved if node else PodSubmitted
        issues: list[FieldIssue] = []
        typed = parse_pod(manifest, issues, [])
        out = self.feed(kind(pod=ref, uid=uid, manifest=manifest, spec=typed))
        if kind is PodObserved:
            out += self.feed(PodBound(pod=ref, uid=uid, attempt=1, node=node))
        return out

    def admit(self, key: str, attempt: int = 1) -> list[Event]:
        return self.feed(
            QuotaAdmitted(pod=_ref(key), attempt=attempt, quota="", request={}, used={}, limit={})
        )

    def place(self, key: str, node: str, reservation: str | None = None, cpu: int = 2000) -> list[Event]:
        raw: JsonObject = {
            "pod": key,
            "outcome": "Scheduled",
            "node": node,
            "allocation": {"node": node, "requests": {"cpu": cpu}},
        }
        if reservation is not None:
            record = self.engine.world.book.get(reservation)
            raw["reservation"] = {"name": reservation, "uid": record.uid if record else ""}
        uid = self.engine.world.pods[key].uid
        decision = Decision.from_dict(raw)
        return self.feed(PodPlaced(pod=_ref(key), uid=uid, attempt=1, node=node, decision=decision))

    def bind(self, key: str, node: str) -> list[Event]:
        uid = self.engine.world.pods[key].uid
        return self.feed(PodBound(pod=_ref(key), uid=uid, attempt=1, node=node))

    def job(self, manifest: JsonObject, seconds: float | None = None) -> list[Event]:
        meta = _meta(manifest)
        return self.feed(
            MigrationApplied(
                job=ObjectRef(name=_str(meta, "name")), uid=_str(meta, "uid"), manifest=manifest
            ),
            seconds,
        )

    def tick(self, seconds: float) -> list[Event]:
        return self.feed(TimerFired(service=NAME, due=at(seconds)), seconds)
