"""Inputs: objects applied or deleted by a user (``allot apply``) or observed from a Kubernetes API server
(``allot kube-sync``, node-reporter's watch). Produced by ``api`` or the watchers; every other event is a decision."""

from __future__ import annotations

from typing import Any, Final

from allot_contracts.events._base import (
    Event,
    FieldIssue,
    Named,
    NamedManifest,
    ObjectRef,
    PodArrived,
    PodEvent,
)
from allot_contracts.objects.gang import PodGroupInfo
from allot_contracts.objects.pod_priority import PriorityClassInfo
from allot_contracts.objects.quota import ProfileSpec, QuotaSpec

__all__ = [
    "DeviceApplied",
    "DeviceDeleted",
    "NodeApplied",
    "NodeDeleted",
    "ObjectIgnored",
    "PodDeleted",
    "PodGroupApplied",
    "PodGroupDeleted",
    "PodObserved",
    "PodPhaseObserved",
    "PodSubmitted",
    "PriorityClassApplied",
    "PriorityClassDeleted",
    "QuotaApplied",
    "QuotaDeleted",
    "QuotaProfileApplied",
    "QuotaProfileDeleted",
    "TopologyApplied",
    "TopologyDeleted",
    "WorkloadExpanded",
]


class NodeApplied(NamedManifest, frozen=True, kw_only=True, tag="node.applied.v1"):
    """A v1 Node manifest was applied (created or updated)."""


class NodeDeleted(Named, frozen=True, kw_only=True, tag="node.deleted.v1"):
    pass


class DeviceApplied(NamedManifest, frozen=True, kw_only=True, tag="device.applied.v1"):
    """A Koordinator ``Device`` object (cluster-scoped, named after its node) was applied."""


class DeviceDeleted(Named, frozen=True, kw_only=True, tag="device.deleted.v1"):
    pass


class TopologyApplied(NamedManifest, frozen=True, kw_only=True, tag="topology.applied.v1"):
    """A ``NodeResourceTopology`` object (named after its node) was applied."""


class TopologyDeleted(Named, frozen=True, kw_only=True, tag="topology.deleted.v1"):
    pass


class PodSubmitted(PodArrived, frozen=True, kw_only=True, tag="pod.submitted.v2"):
    """A pod was submitted for scheduling (no ``spec.nodeName``), as it entered and as the door read it.

    ``spec`` is the pod read once at the door (:func:`allot_contracts.objects.pod.parse_pod`): what every service
    acts on. ``None`` when the door refused it (``issues`` say why; only a Kubernetes watch records such a pod, and
    the gang-coordinator then records ``pod.rejected``). ``warnings`` list what was read but is not acted on.
    v1 (``manifest`` only) is upcast by reading the manifest at the door."""


class PodObserved(PodArrived, frozen=True, kw_only=True, tag="pod.observed.v2"):
    """An already-bound pod (``spec.nodeName`` and allocation annotations) was applied or observed; ``spec`` as in
    ``pod.submitted``."""


class PodDeleted(PodEvent, frozen=True, kw_only=True, tag="pod.deleted.v1"):
    pass


# A pod's life as recorded at the door: it arrives (submitted to be scheduled, or observed already bound) and it is
# deleted. What a service that keeps its own copy of the pods follows.
POD_LIFE_TYPES: Final = frozenset({"pod.submitted", "pod.observed", "pod.deleted"})


class PodPhaseObserved(Event, frozen=True, kw_only=True, tag="pod.phase_observed.v1"):
    """A Kubernetes watch saw a recorded pod's ``status.phase`` become ``Running``, ``Succeeded`` or ``Failed``
    (once per phase per pod life, ``uid``). A fact about the pod for status and audit (the PodGroup controller's
    ``running``/``succeeded``/``failed`` counts); no scheduling decision reads it. A finished pod is also recorded
    ``pod.deleted``, after this event: its resources are free."""

    pod: ObjectRef
    uid: str
    phase: str


class QuotaApplied(Event, frozen=True, kw_only=True, tag="quota.applied.v2"):
    """An ``ElasticQuota`` object was applied; ``spec`` is what it means, read at the door (``None`` with
    ``issues`` when refused there)."""

    quota: ObjectRef
    manifest: dict[str, Any]
    spec: QuotaSpec | None = None
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []


class QuotaDeleted(Event, frozen=True, kw_only=True, tag="quota.deleted.v1"):
    quota: ObjectRef


class QuotaProfileApplied(Event, frozen=True, kw_only=True, tag="quotaprofile.applied.v2"):
    """An ``ElasticQuotaProfile`` (quota.koordinator.sh/v1alpha1) was applied: a separate quota tree whose total is
    the selected nodes' allocatable × ratio. ``spec`` as read at the door."""

    profile: ObjectRef
    manifest: dict[str, Any]
    spec: ProfileSpec | None = None
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []


class QuotaProfileDeleted(Event, frozen=True, kw_only=True, tag="quotaprofile.deleted.v1"):
    profile: ObjectRef


class PodGroupApplied(Event, frozen=True, kw_only=True, tag="podgroup.applied.v2"):
    """A ``PodGroup`` (scheduling.sigs.k8s.io/v1alpha1) was applied; ``spec`` as read at the door."""

    group: ObjectRef
    manifest: dict[str, Any]
    spec: PodGroupInfo | None = None
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []


class PodGroupDeleted(Event, frozen=True, kw_only=True, tag="podgroup.deleted.v1"):
    group: ObjectRef


class PriorityClassApplied(NamedManifest, frozen=True, kw_only=True, tag="priorityclass.applied.v1"):
    """A ``scheduling.k8s.io/v1`` PriorityClass was applied: the door resolves ``priorityClassName`` with it (as the
    API server's priority admission does), so pods carry their priority from then on."""

    spec: PriorityClassInfo


class PriorityClassDeleted(Named, frozen=True, kw_only=True, tag="priorityclass.deleted.v1"):
    pass


class WorkloadExpanded(Event, frozen=True, kw_only=True, tag="workload.expanded.v1"):
    """Standalone mode: a Deployment, ReplicaSet, StatefulSet or Job was applied and the door created the pods its
    controller would (their ``pod.submitted`` events follow in the same batch)."""

    api_version: str
    kind: str
    ref: ObjectRef
    manifest: dict[str, Any]
    pods: list[str]


class ObjectIgnored(Event, frozen=True, kw_only=True, tag="object.ignored.v1"):
    """An object of a kind this version accepts but does not act on yet (recorded, so nothing is silently lost)."""

    api_version: str
    kind: str
    ref: ObjectRef
    manifest: dict[str, Any]
