"""``allot kube-sync``: the cluster's pods, ElasticQuotas, ElasticQuotaProfiles and PodGroups into the event log.

One process per installation list-watches the API server and records, as producer ``kube-sync``, the same input
events ``allot apply`` records (the conversion is :func:`allot_intake.manifests.to_input`), so everything downstream is
identical to the standalone path:

==================================================  ==============================================================
what kube-sync sees                                 what it records
==================================================  ==============================================================
a pod with ``spec.schedulerName`` = ours, first     ``pod.submitted`` (unbound; once its scheduling gates are
seen alive                                          gone) or ``pod.observed`` (already bound)
that pod's ``status.phase`` becoming Running,       ``pod.phase_observed`` (once per phase per pod life)
Succeeded or Failed
that pod deleted, or in phase Succeeded/Failed      ``pod.deleted`` (once per pod life, i.e. per uid; after the
                                                    ``pod.phase_observed`` of its final phase)
anything else about a recorded pod                  nothing (other status updates, labels, the binding itself:
                                                    the binder records ``pod.bound``)
a Reservation / PodMigrationJob created or          ``reservation.applied`` / ``migration.applied``; deleted:
changed (labels, annotations, spec)                 ``reservation.deleted`` / ``migration.deleted``
an ElasticQuota / ElasticQuotaProfile / PodGroup    ``quota.applied`` / ``quotaprofile.applied`` /
created or changed (labels, annotations, spec)      ``podgroup.applied``
one deleted                                         ``quota.deleted`` / ``quotaprofile.deleted`` / ``podgroup.deleted``
==================================================  ==============================================================

"Changed" ignores what Allot writes itself: ElasticQuota status and the quota status annotations
(``quota.scheduling.koordinator.sh/runtime``, ``request``, …) published by the binder. The PodMigrationJobs Allot's
descheduler created are not input at all (``allot_kube_sync.reservations.JobMirror``).

What was recorded is read back from the log (this producer's events) at start and before every reconciliation, so a
restart neither records everything again nor misses a deletion; after ``410 Gone`` the full list is compared with
it and what is gone is recorded deleted. Event ids are derived from (kind, uid, resourceVersion) — deletions from
(kind, uid), a pod's phase from (uid, phase) — so recording again is a no-op. Quotas, profiles and PodGroups are listed
before pods.

A pod is recorded as the API server holds it: ClusterColocationProfiles are not applied here (the mutating webhook
applied them when the pod was created; kube-sync does not watch profiles).

A pod's phase is recorded only for a life that is recorded (a pod first seen already finished is not input at all),
and only the phases the PodGroup controller counts: Pending and Unknown record nothing. A pod deleted while nobody
watched has no final phase to record; a ``DELETED`` watch event records the phase its last state shows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    ObjectRef,
    PodDeleted,
    PodGroupApplied,
    PodGroupDeleted,
    PodObserved,
    PodPhaseObserved,
    PodSubmitted,
    QuotaApplied,
    QuotaDeleted,
    QuotaProfileApplied,
    QuotaProfileDeleted,
)
from allot_contracts.events.inputs import POD_LIFE_TYPES
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.quota import STATUS_ANNOTATIONS
from allot_intake.documents import Document
from allot_intake.manifests import Door, to_input
from allot_kube_sync.reservations import RESERVATION_KIND, JobMirror
from allot_runtime.kube import (
    ELASTIC_QUOTAS,
    POD_GROUPS,
    PODS,
    QUOTA_PROFILES,
    Kind,
    Known,
    Mirror,
    Resource,
    Sink,
    WatchMetrics,
    Writer,
    event_fold,
    list_watches,
    meta,
    object_key,
    part,
    run_in_order,
    spec_fingerprint,
    storage_issues,
    strip_server_fields,
)

log = logging.getLogger("allot.kube-sync")

PRODUCER = "kube-sync"
DEFAULT_SCHEDULER_NAME = "allot-scheduler"
TERMINAL_PHASES = ("Succeeded", "Failed")
OBSERVED_PHASES = ("Running", *TERMINAL_PHASES)  # recorded as pod.phase_observed


# The API server resolved priorities and runs the controllers; its mutating webhooks (Allot's `/mutate`, or
# Koordinator's) already applied the ClusterColocationProfiles to a pod before it was created: applying them again
# would record another pod (label suffixes appended twice, a second probability draw) than the one that runs.
_DOOR = Door(resolve_priority=False, expand_workloads=False, profiles=None, strict=False)


def _document(body: JsonObject) -> Document:
    doc = Document(source="kubernetes", index=0, body=body)
    _DOOR.check(doc)
    return doc


def _delete_events(kind: str, key: str) -> list[tuple[str, Event]]:
    namespace, _, name = key.rpartition("/")
    return to_input(
        _document(
            {
                "apiVersion": "allot.dev/v1",
                "kind": "Delete",
                "spec": {"kind": kind, "namespace": namespace, "name": name},
            }
        )
    ).events


def normalize_custom(obj: JsonObject, drop_annotations: frozenset[str] = frozenset()) -> JsonObject:
    """Without server bookkeeping, status, and annotations Allot writes itself."""
    manifest = {k: v for k, v in strip_server_fields(obj).items() if k != "status"}
    m = dict(part(manifest, "metadata"))
    if drop_annotations and m.get("annotations"):
        m["annotations"] = {k: v for k, v in part(m, "annotations").items() if k not in drop_annotations}
    manifest["metadata"] = m
    return manifest


def _custom_kind(
    resource: Resource,
    stream_kind: str,
    applied_cls: type[Event],
    deleted_cls: type[Event],
    ref_field: str,
    drop: frozenset[str] = frozenset(),
) -> Kind:
    return Kind(
        resource=resource,
        types=frozenset({f"{stream_kind}.applied", f"{stream_kind}.deleted"}),
        normalize=lambda obj: normalize_custom(obj, drop),
        fingerprint=lambda manifest: spec_fingerprint(manifest, drop_annotations=drop),
        applied=lambda manifest: to_input(_document(manifest)).events,
        deleted=lambda key, uid: _delete_events(resource.kind, key),
        fold=event_fold(applied_cls, deleted_cls, ref_field),
    )


QUOTA_KIND = _custom_kind(ELASTIC_QUOTAS, "quota", QuotaApplied, QuotaDeleted, "quota", STATUS_ANNOTATIONS)
PROFILE_KIND = _custom_kind(
    QUOTA_PROFILES, "quotaprofile", QuotaProfileApplied, QuotaProfileDeleted, "profile"
)
PODGROUP_KIND = _custom_kind(POD_GROUPS, "podgroup", PodGroupApplied, PodGroupDeleted, "group")


def normalize_pod(obj: JsonObject) -> JsonObject:
    """A pod as input: without server bookkeeping and without status (its phase is acted on, not recorded)."""
    return {k: v for k, v in strip_server_fields(obj).items() if k != "status"}


@dataclass(kw_only=True, eq=False)
class PodMirror(Sink):
    """Pods for our scheduler: one ``pod.submitted``/``pod.observed`` and one ``pod.deleted`` per pod life (uid), and
    one ``pod.phase_observed`` per phase of that life."""

    types = frozenset({*POD_LIFE_TYPES, "pod.phase_observed"})

    store: Any
    producer: str
    scheduler_name: str
    metrics: WatchMetrics
    component: str = PRODUCER
    known: dict[str, Known] = field(default_factory=dict, init=False)
    writer: Writer = field(init=False)
    position: int = field(default=0, init=False)
    refused: dict[str, str] = field(
        default_factory=dict, init=False
    )  # pod -> uid not recorded (logged once per life)
    phases: dict[str, tuple[str, str]] = field(
        default_factory=dict, init=False
    )  # pod -> (uid, phase) last recorded

    def __post_init__(self) -> None:
        self.writer = Writer(self.store, self.producer, self.component, self.metrics)

    async def refresh(self) -> None:
        async for entry in self.store.iterate(after=self.position, types=self.types, producer=self.producer):
            self.position = entry.position
            match entry.decode():
                case PodSubmitted(pod=pod, uid=uid) | PodObserved(pod=pod, uid=uid):
                    self.known[pod.key] = Known(uid=uid, fingerprint=b"")
                case PodDeleted(pod=pod, uid=uid):
                    known = self.known.get(pod.key)
                    if known is not None and (not uid or uid == known.uid):
                        known.alive = False
                case PodPhaseObserved(pod=pod, uid=uid, phase=phase):
                    self.phases[pod.key] = (uid, phase)

    def ours(self, obj: JsonObject) -> bool:
        return bool(part(obj, "spec").get("schedulerName") == self.scheduler_name)

    async def replace(self, objects: list[JsonObject]) -> None:
        await self.refresh()
        seen = set()
        async with self.writer.batch():
            for obj in objects:
                if self.ours(obj):
                    seen.add(object_key(obj, True))
                    await self.upsert(obj)
            for key, known in sorted(self.known.items()):
                if known.alive and key not in seen:
                    await self._delete(key, known.uid)

    async def apply(self, event_type: str, obj: JsonObject) -> None:
        if not self.ours(obj):
            return
        key = object_key(obj, True)
        if event_type == "DELETED":
            known = self.known.get(key)
            uid = str(meta(obj).get("uid", ""))
            if known is not None and known.alive and (not uid or uid == known.uid):
                await self._phase(key, known.uid, part(obj, "status").get("phase"))
                await self._delete(key, known.uid)
            return
        await self.upsert(obj)

    async def upsert(self, obj: JsonObject) -> None:
        key = object_key(obj, True)
        m = meta(obj)
        uid, version = str(m.get("uid", "")), str(m.get("resourceVersion", ""))
        spec = part(obj, "spec")
        phase = part(obj, "status").get("phase")
        known = self.known.get(key)
        if known is not None and known.alive and known.uid != uid:
            await self._delete(key, known.uid)  # the earlier life ended while nobody was watching
        elif known is not None and known.uid == uid:
            if known.alive:
                await self._phase(key, uid, phase)
                if phase in TERMINAL_PHASES:
                    await self._delete(key, uid)  # finished: its resources are free
            return  # this life is recorded; nothing else about it is input
        if phase in TERMINAL_PHASES:
            return  # first seen already finished: nothing to schedule, nothing held
        bound = bool(spec.get("nodeName"))
        if not bound and (spec.get("schedulingGates") or m.get("deletionTimestamp")):
            return  # gated (kube-scheduler would not schedule it yet either) or being deleted
        manifest = normalize_pod(obj)
        problems = storage_issues(manifest)
        if problems:
            if self.refused.get(key) != uid:
                self.refused[key] = uid
                self.metrics.skipped.labels(self.component, str(PODS)).inc()
                log.warning("pod %s (uid %s) not recorded: %s", key, uid, "; ".join(problems))
            return
        self.refused.pop(key, None)
        life = Known(uid=uid, fingerprint=b"")
        await self.writer.write(
            to_input(_document(manifest)).events,
            f"Pod/{uid}/{version}",
            lambda: self.known.__setitem__(key, life),
        )
        await self._phase(key, uid, phase)  # first seen bound and already running

    async def _phase(self, key: str, uid: str, phase: Any) -> None:
        """Record the life's phase when it is one the PodGroup controller counts and not recorded yet."""
        if phase not in OBSERVED_PHASES or self.phases.get(key) == (uid, phase):
            return
        namespace, name = key.split("/", 1)
        event = PodPhaseObserved(pod=ObjectRef(namespace=namespace, name=name), uid=uid, phase=str(phase))
        await self.writer.write(
            [(stream_id("pod", key), event)],
            f"Pod/{uid or key}/phase/{phase}",
            lambda: self.phases.__setitem__(key, (uid, str(phase))),
        )

    async def _delete(self, key: str, uid: str) -> None:
        namespace, name = key.split("/", 1)
        event = PodDeleted(pod=ObjectRef(namespace=namespace, name=name), uid=uid)
        entry = self.known[key]
        await self.writer.write(
            [(stream_id("pod", key), event)],
            f"Pod/{uid or key}/deleted",
            lambda: setattr(entry, "alive", False),
        )


class KubeSync:
    """The four list-watches of ``allot kube-sync``, in start order: profiles, quotas, PodGroups, pods."""

    def __init__(
        self,
        *,
        store: Any,
        client: Any,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        registry: Any = None,
        producer: str = PRODUCER,
        watch_timeout: int = 300,
        backoff: tuple[float, float] = (0.5, 30.0),
        absent_retry: float = 60.0,
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.metrics = WatchMetrics.of(registry if registry is not None else CollectorRegistry())
        self.scheduler_name = scheduler_name
        self.pods = PodMirror(
            store=store, producer=producer, scheduler_name=scheduler_name, metrics=self.metrics
        )
        sinks: list[tuple[Resource, Sink, str]] = [
            (
                kind.resource,
                Mirror(store=store, producer=producer, kind=kind, component=PRODUCER, metrics=self.metrics),
                "",
            )
            for kind in (PROFILE_KIND, QUOTA_KIND, PODGROUP_KIND, RESERVATION_KIND)
        ]
        sinks.append((PODS, self.pods, f"spec.schedulerName={scheduler_name}"))
        jobs = JobMirror(store=store, producer=producer, component=PRODUCER, metrics=self.metrics)
        sinks.append((jobs.resource, jobs, ""))  # after pods: a job names its pod
        self.reflectors = list_watches(
            client,
            sinks,
            component=PRODUCER,
            metrics=self.metrics,
            watch_timeout=watch_timeout,
            backoff=backoff,
            absent_retry=absent_retry,
        )

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    async def run(self, stop: Any) -> None:
        log.info(
            "recording pods of scheduler %r, ElasticQuotas, ElasticQuotaProfiles, PodGroups, Reservations and"
            " PodMigrationJobs",
            self.scheduler_name,
        )
        await run_in_order(self.reflectors, stop)
