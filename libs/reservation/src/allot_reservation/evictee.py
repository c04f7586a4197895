"""A known pod as the evictor filter and the descheduler read it (:class:`allot_descheduling.evictor.PodInput`):
its labels, annotations, owners, priority, volumes (local storage, PVC), QoS, requests, gang, reservation, and the
job migrating it. Read from the pod as the door typed it when the event carried it, else from its manifest; its
volumes and the annotations the evictor and the descheduler read as kept on arrival (a round reads every pod)."""

from __future__ import annotations

from allot_contracts import kube
from allot_descheduling.evictor import PodInput
from allot_reservation.world import PodRecord

__all__ = ["pod_input"]


def pod_input(rec: PodRecord, migrating: str = "") -> PodInput:
    facts, _ = rec.facts()
    controller = rec.controller
    pod = rec.pod
    return PodInput(
        key=rec.key,
        uid=rec.uid,
        node=rec.node,
        labels=dict(facts.labels),
        annotations=dict(rec.evictor_annotations or {}),
        owner_kind=controller.kind if controller is not None else "",
        owner_kinds=tuple(o.kind for o in facts.owners),
        priority=rec.priority,
        koord_priority=pod.koord_priority if pod is not None else "",
        kube_qos=pod.kube_qos if pod is not None else "BestEffort",
        koord_qos=pod.koord_qos if pod is not None else "",
        requests=dict(pod.requests) if pod is not None else {},
        local_storage=rec.local_storage,
        pvc=rec.pvc,
        gang=pod.gang.gang_id if pod is not None and pod.gang is not None else "",
        reservation=rec.reservation,
        migrating=migrating,
        terminating=pod.terminating
        if pod is not None
        else bool(kube.meta(rec.manifest()).get("deletionTimestamp")),
    )
