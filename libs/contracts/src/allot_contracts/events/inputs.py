"""Inputs: objects applied or deleted by a user (``allot apply``) or observed from a Kubernetes API server
(``allot kube-sync``, node-reporter's watch). Produced by ``api`` or the watchers; every other event is a decision."""

from __future__ import annotations

from typing import Any

from allot_contracts.events._base import Event, ObjectRef


class NodeApplied(Event, frozen=True, kw_only=True, tag="node.applied.v1"):
    """A v1 Node manifest was applied (created or updated)."""

    name: str
    manifest: dict[str, Any]


class NodeDeleted(Event, frozen=True, kw_only=True, tag="node.deleted.v1"):
    name: str


class DeviceApplied(Event, frozen=True, kw_only=True, tag="device.applied.v1"):
    """A Koordinator ``Device`` object (cluster-scoped, named after its node) was applied."""

    name: str
    manifest: dict[str, Any]


class DeviceDeleted(Event, frozen=True, kw_only=True, tag="device.deleted.v1"):
    name: str


class TopologyApplied(Event, frozen=True, kw_only=True, tag="topology.applied.v1"):
    """A ``NodeResourceTopology`` object (named after its node) was applied."""

    name: str
    manifest: dict[str, Any]


class TopologyDeleted(Event, frozen=True, kw_only=True, tag="topology.deleted.v1"):
    name: str


class PodSubmitted(Event, frozen=True, kw_only=True, tag="pod.submitted.v1"):
    """A pod was submitted for scheduling (no ``spec.nodeName``)."""

    pod: ObjectRef
    uid: str
    manifest: dict[str, Any]


class PodObserved(Event, frozen=True, kw_only=True, tag="pod.observed.v1"):
    """An already-bound pod (``spec.nodeName`` and allocation annotations) was applied or observed."""

    pod: ObjectRef
    uid: str
    manifest: dict[str, Any]


class PodDeleted(Event, frozen=True, kw_only=True, tag="pod.deleted.v1"):
    pod: ObjectRef
    uid: str = ""


class QuotaApplied(Event, frozen=True, kw_only=True, tag="quota.applied.v1"):
    """An ``ElasticQuota`` object was applied."""

    quota: ObjectRef
    manifest: dict[str, Any]


class QuotaDeleted(Event, frozen=True, kw_only=True, tag="quota.deleted.v1"):
    quota: ObjectRef


class QuotaProfileApplied(Event, frozen=True, kw_only=True, tag="quotaprofile.applied.v1"):
    """An ``ElasticQuotaProfile`` (quota.koordinator.sh/v1alpha1) was applied: a separate quota tree whose total is
    the selected nodes' allocatable × ratio."""

    profile: ObjectRef
    manifest: dict[str, Any]


class QuotaProfileDeleted(Event, frozen=True, kw_only=True, tag="quotaprofile.deleted.v1"):
    profile: ObjectRef


class PodGroupApplied(Event, frozen=True, kw_only=True, tag="podgroup.applied.v1"):
    """A ``PodGroup`` (scheduling.sigs.k8s.io/v1alpha1) was applied."""

    group: ObjectRef
    manifest: dict[str, Any]


class PodGroupDeleted(Event, frozen=True, kw_only=True, tag="podgroup.deleted.v1"):
    group: ObjectRef


class ObjectIgnored(Event, frozen=True, kw_only=True, tag="object.ignored.v1"):
    """An object of a kind this version accepts but does not act on yet (recorded, so nothing is silently lost)."""

    api_version: str
    kind: str
    ref: ObjectRef
    manifest: dict[str, Any]
