"""A known pod as the evictor filter and the descheduler read it (:class:`allot_descheduling.evictor.PodInput`):
its labels, annotations, owners, priority, volumes (local storage, PVC), QoS, requests, gang, reservation, and the
job migrating it. Read from the pod as the door typed it when the event carried it, else from its manifest."""

from __future__ import annotations

from collections.abc import Mapping

from allot_contracts import kube
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_descheduling.evictor import PodInput
from allot_reservation.edits import items
from allot_reservation.world import PodRecord

__all__ = ["pod_input"]


def _volumes(spec: Mapping[str, JsonValue]) -> list[JsonObject]:
    return [v for v in items(spec.get("volumes")) if isinstance(v, dict)]


def pod_input(rec: PodRecord, migrating: str = "") -> PodInput:
    meta = kube.meta(rec.manifest)
    volumes = _volumes(kube.spec_of(rec.manifest))
    facts, _ = rec.facts()
    controller = rec.controller
    pod = rec.pod
    return PodInput(
        key=rec.key,
        uid=rec.uid,
        node=rec.node,
        labels=dict(facts.labels),
        annotations={str(k): str(v) for k, v in kube.annotations_of(rec.manifest).items()},
        owner_kind=controller.kind if controller is not None else "",
        owner_kinds=tuple(o.kind for o in facts.owners),
        priority=rec.priority,
        koord_priority=pod.koord_priority if pod is not None else "",
        kube_qos=pod.kube_qos if pod is not None else "BestEffort",
        koord_qos=pod.koord_qos if pod is not None else "",
        requests=dict(pod.requests) if pod is not None else {},
        local_storage=any("emptyDir" in v or "hostPath" in v for v in volumes),
        pvc=any("persistentVolumeClaim" in v for v in volumes),
        gang=pod.gang.gang_id if pod is not None and pod.gang is not None else "",
        reservation=rec.reservation,
        migrating=migrating,
        terminating=pod.terminating if pod is not None else bool(meta.get("deletionTimestamp")),
    )
