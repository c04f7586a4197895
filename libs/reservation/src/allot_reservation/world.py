"""What reservation-manager knows about pods and nodes (besides reservations and jobs).

A pod is known from ``pod.submitted`` / ``pod.observed`` until ``pod.deleted``; ``node`` is where it holds resources
(placed, bound or observed), ``bound`` whether it was bound, ``reservation`` the reservation it was placed in.
Facts for matching are read lazily, once per pod life.

Every known pod is kept until it is deleted, bound pods included, so a record is kept small:

- the manifest is kept encoded (JSON, about a fifth of the decoded dict) and decoded only on the rare paths that
  need it, through :meth:`PodRecord.manifest` (a migration's re-submission and reservation template, the
  descheduler's job template). What the per-event and per-round paths read of it and the typed pod does not carry is
  read once on arrival: whether it states a reservation affinity (every admission reads that), the few annotations
  the evictor filter and the descheduler read (``READ_ANNOTATIONS``), and its local-storage and PVC volumes.
  Rejected: keeping the decoded dict (about 1.7 KB a pod); keeping the event's own payload bytes (the processor is
  handed the decoded event, and the payload holds the typed pod as well).
- the typed pod, as the door read it, keeps its values but shares its repeated strings (namespace, classes, node,
  container and owner names: :func:`sys.intern`) and the sections most pods have at their defaults, which each pod
  decodes into its own copy of (:meth:`World.known`). Equal values, so nothing that reads or encodes the pod can tell.
  The shared sections are the world's own (``World.defaults``), part of the state: a snapshot restores one copy of
  each, referenced by the pods restored and by those known after, so the restored state encodes as the live one.
  Rejected: keeping the typed pod encoded too (the descheduler and the defragmenter read it for every pod at every
  round).
"""

from __future__ import annotations

import sys
from typing import Final

import msgspec

from allot_contracts import kube
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.annotations import NUMASpec, ResourceSpec
from allot_contracts.objects.meta import Owner
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.reservation_pod import ANN_RESERVATION_AFFINITY, OwnerRef, PodReservation
from allot_descheduling.evictor import READ_ANNOTATIONS
from allot_reservation.book import Book
from allot_reservation.facts import facts_from_pod, facts_of
from allot_reservation.match import PodFacts

__all__ = ["PodRecord", "World"]

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()
Sections = tuple[ResourceSpec, NUMASpec, PodReservation]


class PodRecord:
    __slots__ = (
        "_facts",
        "_manifest",
        "affinity_stated",
        "evictor_annotations",
        "bound",
        "key",
        "local_storage",
        "node",
        "pod",
        "pvc",
        "reservation",
        "uid",
    )

    def __init__(
        self,
        key: str,
        uid: str,
        manifest: JsonObject,
        node: str = "",
        bound: bool = False,
        pod: Pod | None = None,
    ) -> None:
        self.key = key
        self.uid = uid
        self._manifest = _ENCODER.encode(manifest)
        annotations = kube.annotations_of(manifest)
        # what the evictor filter and the descheduler read of them (every placed pod at every round)
        self.evictor_annotations = {
            k: str(annotations[k]) for k in READ_ANNOTATIONS if k in annotations
        } or None
        self.affinity_stated = ANN_RESERVATION_AFFINITY in annotations
        volumes = [v for v in _list(kube.spec_of(manifest).get("volumes")) if isinstance(v, dict)]
        self.local_storage = any("emptyDir" in v or "hostPath" in v for v in volumes)
        self.pvc = any("persistentVolumeClaim" in v for v in volumes)
        self.pod = pod  # as the door read it (None for events that carry none; slim: World.known)
        self.node = sys.intern(node)
        self.bound = bound
        self.reservation = ""
        self._facts: tuple[PodFacts, list[FieldIssue]] | None = None

    def manifest(self) -> JsonObject:
        """The pod's manifest as it arrived, decoded afresh at every call: the caller's own copy, free to change."""
        manifest: JsonObject = _DECODER.decode(self._manifest)
        return manifest

    def facts(self) -> tuple[PodFacts, list[FieldIssue]]:
        if self._facts is None:
            self._facts = (
                (facts_from_pod(self.pod), []) if self.pod is not None else facts_of(self.manifest())
            )
        return self._facts

    @property
    def controller(self) -> Owner | OwnerRef | None:
        """The owner that is its controller, from the typed pod when there is one (no matching facts built)."""
        owners = self.pod.owners if self.pod is not None else self.facts()[0].owners
        return next((o for o in owners if o.controller), None)

    @property
    def priority(self) -> int:
        if self.pod is not None:
            return self.pod.priority
        return kube.priority_value(self.manifest())


def _list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def _slim(pod: Pod, uid: str, defaults: Sections) -> Pod:
    """``pod`` with its repeated strings interned, its uid the record's (when equal) and the sections equal to
    ``defaults`` those: an equal pod."""
    intern = sys.intern
    resource_spec, numa_spec, reservation = defaults
    return msgspec.structs.replace(
        pod,
        namespace=intern(pod.namespace),
        uid=uid if pod.uid == uid else pod.uid,
        owners=tuple(
            msgspec.structs.replace(
                o,
                api_version=intern(o.api_version),
                kind=intern(o.kind),
                name=intern(o.name),
                uid=intern(o.uid),
            )
            for o in pod.owners
        ),
        node_name=intern(pod.node_name),
        phase=intern(pod.phase),
        priority_class_name=intern(pod.priority_class_name),
        kube_qos=intern(pod.kube_qos),
        koord_qos=intern(pod.koord_qos),
        koord_priority=intern(pod.koord_priority),
        containers=tuple(msgspec.structs.replace(c, name=intern(c.name)) for c in pod.containers),
        devices={intern(k): msgspec.structs.replace(d, type=intern(d.type)) for k, d in pod.devices.items()},
        resource_spec=resource_spec if pod.resource_spec == resource_spec else pod.resource_spec,
        numa_spec=numa_spec if pod.numa_spec == numa_spec else pod.numa_spec,
        quota=intern(pod.quota),
        reservation=reservation if pod.reservation == reservation else pod.reservation,
    )


class World:
    def __init__(self) -> None:
        self.pods: dict[str, PodRecord] = {}
        # workload key -> the keys of its known pods (an index of ``pods``: a migration's limits read a workload's
        # pods on every event while its job waits; a scan sorted every known pod each time)
        self.workloads: dict[str, set[str]] = {}
        self.nodes: dict[str, dict[str, str]] = {}  # node -> labels
        self.book = Book()
        self.defaults: Sections = (ResourceSpec(), NUMASpec(), PodReservation())  # shared by the typed pods

    def known(
        self,
        key: str,
        uid: str,
        manifest: JsonObject,
        *,
        node: str = "",
        bound: bool = False,
        pod: Pod | None = None,
    ) -> PodRecord:
        """Record a pod that arrived (``pod``: as the door read it, kept slim)."""
        typed = _slim(pod, uid, self.defaults) if pod is not None else None
        self.forget(key)
        record = self.pods[key] = PodRecord(key, uid, manifest, node=node, bound=bound, pod=typed)
        if (workload := self.workload_key(record)) is not None:
            self.workloads.setdefault(workload, set()).add(key)
        return record

    def forget(self, key: str) -> None:
        """A pod that is gone (deleted, evicted by its quota)."""
        record = self.pods.pop(key, None)
        if record is not None and (workload := self.workload_key(record)) is not None:
            members = self.workloads.get(workload)
            if members is not None:
                members.discard(key)
                if not members:
                    del self.workloads[workload]

    def workload_key(self, pod: PodRecord) -> str | None:
        """The pod's workload: its controller's uid, else its namespace, kind and name; None without a controller."""
        ctl = pod.controller
        if ctl is None:
            return None
        return ctl.uid or f"{pod.key.split('/', 1)[0]}/{ctl.kind}/{ctl.name}"

    def workload_pods(self, key: str) -> list[PodRecord]:
        """The workload's known pods, in key order."""
        return [self.pods[k] for k in sorted(self.workloads.get(key, ()))]
