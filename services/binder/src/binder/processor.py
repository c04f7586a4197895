"""binder's decisions: bind each placed pod to its node (the PreBind/Bind stage).

Consumes ``pod.placed``, gang admissions and pod life-cycle events; decides which pods to bind, with the output
annotations (device-allocated, resource-status, …) as the strings a Kubernetes Binding carries. It is also the
writer of ElasticQuota status: ``quota.status_synced`` becomes one ``quota.status_published`` per quota.

Two modes (config key ``mode``; the service's main sets it from ``ALLOT_KUBE_MODE``):

- ``standalone`` (default): the binding is the recorded event itself, ``pod.bound``.
- ``kubernetes``: the decision is ``pod.bind_requested`` {pod, uid, attempt, node, annotations}. The binder's IO
  worker (``adapters/kube.py``) POSTs the Binding to the API server and records the outcome as ``pod.bound`` or
  ``pod.bind_failed`` with the producer ``binder.kube``; this processor consumes those as inputs. A request is
  *outstanding* from its decision until its outcome arrives (or the pod goes away): :meth:`Binder.outstanding` is
  what the worker binds. ``quota.status_published`` (mode ``kubernetes``) is the merge patch the worker applies to
  the ElasticQuota object; :meth:`Binder.quota_patches` holds the latest one per quota.

A pod deleted before its placement arrives is not bound; a pod is bound at most once per life.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar

import msgspec

from allot_contracts import gpu_isolation
from allot_contracts.envelope import stream_id
from allot_contracts.errors import InvalidInput
from allot_contracts.events import (
    Event,
    GangGroupAdmitted,
    GangGroupPlaced,
    GangHoldsReleased,
    ObjectRef,
    PodBindFailed,
    PodBindRequested,
    PodBound,
    PodDeleted,
    PodEvicted,
    PodObserved,
    PodPlaced,
    PodSubmitted,
    QuotaEvicted,
    QuotaStatusPublished,
    QuotaStatusSynced,
)
from allot_contracts.events.inputs import POD_LIFE_TYPES
from allot_contracts.jsonvalue import JsonObject
from allot_runtime.processor import Emit, config_keys
from binder.evictions import EvictionRequests

MODES = ("standalone", "kubernetes")
_COMPACT = json.JSONEncoder(separators=(",", ":"), sort_keys=True)  # json.dumps's, built once


def annotation_strings(annotations: Mapping[str, object]) -> dict[str, str]:
    """Annotation values as Kubernetes stores them: JSON objects compact-encoded, strings as they are."""
    return {
        key: value if isinstance(value, str) else _COMPACT.encode(value)
        for key, value in sorted(annotations.items())
    }


class BindRequest(msgspec.Struct, frozen=True, kw_only=True):
    """An outstanding binding (Kubernetes mode): decided, neither bound nor failed yet."""

    pod: ObjectRef
    uid: str
    attempt: int
    node: str
    annotations: dict[str, str] = {}


class Binder:
    name: ClassVar[str] = "binder"
    interests: ClassVar[frozenset[str]] = frozenset(
        {
            *POD_LIFE_TYPES,  # with pod.observed, a pod recorded already bound: standalone, a pod.evicted deletes it too
            "pod.placed",
            "quota.evicted",
            "gang.group_placed",
            "gang.group_admitted",
            "gang.holds_released",
            "quota.status_synced",
            "pod.bound",
            "pod.bind_failed",
            "pod.evicted",  # standalone: enacted by deleting the pod; Kubernetes: by the worker (binder.evictions)
            "pod.eviction_enacted",
            "quota.eviction_enacted",  # Kubernetes mode: the worker's answers to quota.evicted (binder.evictions)
            "quota.eviction_enactment_failed",
            # Kubernetes mode: PodMigrationJob evictions the worker carries out (binder.evictions)
            "migration.eviction_requested",
            "migration.evicted",
            "migration.eviction_failed",
            "migration.removed",
        }
    )

    def __init__(self, config: JsonObject | None = None) -> None:
        mode = str(config_keys(config, ("mode",), "binder").get("mode", "standalone"))
        if mode not in MODES:
            raise InvalidInput(
                [("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")], subject="binder config"
            )
        self.kube = mode == "kubernetes"
        self.live: dict[str, str] = {}  # pod -> uid of pods that exist
        self.bound: dict[str, str] = {}  # pod -> node
        self.held: dict[str, tuple[int, str, JsonObject]] = {}  # gang member -> (attempt, node, annotations)
        self.requested: dict[str, BindRequest] = {}  # Kubernetes mode: pod -> outstanding binding
        self.quota_status: dict[str, JsonObject] = {}  # Kubernetes mode: quota -> latest status patch
        self.evictions = EvictionRequests()  # Kubernetes mode: PodMigrationJob evictions to carry out
        self.isolated: dict[str, list[str]] = {}  # HAMi-core pods -> containers that get a CDI device at bind

    # -- state ---------------------------------------------------------------------------------------------------

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        if self.kube:
            self.evictions.evolve(event)
        match event:
            case PodSubmitted(pod=pod, uid=uid, manifest=manifest, spec=spec):
                key = pod.key
                self.live[key] = uid
                self.bound.pop(key, None)
                self.requested.pop(key, None)
                # the pod as the door read it says whether it is a HAMi-core pod: only those are read again
                if (spec is None or spec.isolation_provider == gpu_isolation.HAMI_CORE) and (
                    containers := gpu_isolation.isolated_containers(manifest)
                ):
                    self.isolated[key] = containers
                else:
                    self.isolated.pop(key, None)
            case PodObserved(pod=pod, uid=uid, spec=spec) if spec is not None and spec.node_name:
                self.live[pod.key] = uid
                self.bound[pod.key] = spec.node_name
                self.requested.pop(pod.key, None)
            case PodDeleted(pod=pod) | QuotaEvicted(pod=pod):
                key = pod.key
                self.live.pop(key, None)
                self.isolated.pop(key, None)
                self.bound.pop(key, None)
                self.held.pop(key, None)
                self.requested.pop(key, None)
            case GangGroupPlaced(attempt=attempt, decisions=decisions):
                for member, decision in decisions.items():
                    self.held[member] = (attempt, str(decision.node), dict(decision.annotations))
            case GangHoldsReleased(attempt=attempt, members=members):
                for member in members:
                    if self.held.get(member, (None,))[0] == attempt:
                        self.held.pop(member, None)
            case PodBindRequested(pod=pod, uid=uid, attempt=attempt, node=node, annotations=annotations):
                self.requested[pod.key] = BindRequest(
                    pod=pod, uid=uid, attempt=attempt, node=node, annotations=annotations
                )
                self.held.pop(pod.key, None)
            case PodBound(pod=pod, attempt=attempt, node=node) if own or self.kube:
                # Standalone: only our own decisions bind (a delivery of our own event as input changes nothing).
                # Kubernetes: the worker's outcome of the request for this attempt.
                if own or self._answers(pod, attempt):
                    key = pod.key
                    self.bound[key] = node
                    self.held.pop(key, None)
                    self.requested.pop(key, None)
            case PodBindFailed(pod=pod, attempt=attempt) if self.kube:
                if self._answers(pod, attempt):
                    self.requested.pop(pod.key, None)
            case QuotaStatusPublished(quota=quota, patch=patch) if own and self.kube:
                self.quota_status[quota.key] = patch
            case _:
                pass

    def _answers(self, pod: ObjectRef, attempt: int) -> bool:
        request = self.requested.get(pod.key)
        return request is not None and request.attempt == attempt

    # -- decisions -----------------------------------------------------------------------------------------------

    def _bind(self, pod: ObjectRef, attempt: int, node: str, annotations: JsonObject) -> Emit:
        key = pod.key
        # HAMi-core isolation: the containers ask for their CDI devices through the binding (docs/adr/0007)
        isolated = self.isolated.get(key)
        cdi = gpu_isolation.bind_annotations(self.live[key], isolated, annotations) if isolated else {}
        strings = annotation_strings({**annotations, **cdi})
        event: Event = (
            PodBindRequested(pod=pod, uid=self.live[key], attempt=attempt, node=node, annotations=strings)
            if self.kube
            else PodBound(pod=pod, attempt=attempt, node=node, annotations=strings)
        )
        return Emit(stream_id=stream_id("pod", key), event=event)

    def _bindable(self, key: str) -> bool:
        return key in self.live and key not in self.bound and key not in self.requested

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case PodEvicted(pod=pod, uid=uid) if not self.kube and pod.key in self.live:
                # qos-enforcer or a preemption evicted it from its node: standalone, the pod is deleted
                if uid and self.live[pod.key] != uid:
                    return []
                return [Emit(stream_id=stream_id("pod", pod.key), event=PodDeleted(pod=pod, uid=uid))]
            case PodPlaced(pod=pod, attempt=attempt, node=node, decision=decision):
                if not self._bindable(pod.key):
                    return []
                return [self._bind(pod, attempt, node, dict(decision.annotations))]
            case QuotaStatusSynced(patches=patches):
                malformed = [
                    (f"patches[{key}]", "must be a namespace/name quota key")
                    for key in patches
                    if "/" not in key
                ]
                if malformed:
                    raise InvalidInput(malformed, subject="quota.status_synced")
                mode = "kubernetes" if self.kube else "standalone"
                return [
                    Emit(
                        stream_id=stream_id("quota", key),
                        event=QuotaStatusPublished(
                            quota=ObjectRef(namespace=key.split("/", 1)[0], name=key.split("/", 1)[1]),
                            patch=patch,
                            mode=mode,
                        ),
                    )
                    for key, patch in sorted(patches.items())
                ]
            case GangGroupAdmitted(members=members):
                # Every admitted member that holds a placement is bound, whichever attempt placed it: a member placed
                # by an earlier attempt keeps its hold while a later attempt places the rest of the group.
                out = []
                for member in members:
                    held = self.held.get(member)
                    if held is None or not self._bindable(member):
                        continue
                    namespace, name = member.split("/", 1)
                    out.append(
                        self._bind(ObjectRef(namespace=namespace, name=name), held[0], held[1], held[2])
                    )
                return out
            case _:
                return []

    # -- what the Kubernetes worker reads (under the runtime's lock) ---------------------------------------------

    def outstanding(self) -> list[BindRequest]:
        """Bindings decided but neither bound nor failed yet, in pod order."""
        return [self.requested[key] for key in sorted(self.requested)]

    def quota_patches(self) -> dict[str, JsonObject]:
        """The latest status patch of every quota (Kubernetes mode)."""
        return dict(self.quota_status)

    def snapshot(self) -> dict[str, object]:
        snap: dict[str, object] = {
            "bound": dict(sorted(self.bound.items())),
            "live": len(self.live),
            "held": sorted(self.held),
        }
        if self.kube:
            snap["mode"] = "kubernetes"
            snap["requested"] = {k: [r.uid, r.attempt, r.node] for k, r in sorted(self.requested.items())}
            snap["quota_status"] = sorted(self.quota_status)
            snap["evictions"] = sorted(self.evictions.requested)
        return snap
