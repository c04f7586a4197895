"""The node side: what nodes report about themselves (load, liveness), the co-location configuration, and the
decisions taken on them (metrics accepted, heartbeats lost and resumed, batch/mid allocatable computed)."""

from __future__ import annotations

from typing import Any

from allot_contracts.events._base import Event, FieldIssue, Named, NamedManifest, NameRefused, ObjectRef
from allot_contracts.objects.nodemetric import NodeMetric

__all__ = [
    "ColocationConfigApplied",
    "ColocationConfigDeleted",
    "ColocationConfigRejected",
    "ColocationProfileApplied",
    "ColocationProfileDeleted",
    "NodeAllocatableUpdated",
    "NodeHeartbeat",
    "NodeHeartbeatLost",
    "NodeHeartbeatResumed",
    "NodeMetricApplied",
    "NodeMetricDeleted",
    "NodeMetricRejected",
    "NodeMetricRemoved",
    "NodeMetricReported",
]

# --- inputs -------------------------------------------------------------------------------------------------------------


class NodeMetricApplied(NamedManifest, frozen=True, kw_only=True, tag="nodemetric.applied.v2"):
    """A ``NodeMetric`` (``slo.koordinator.sh/v1alpha1``, named after its node) was applied: sampled by
    node-reporter's agent, written by koordlet (Kubernetes mode) or applied by hand. v2: the manifest in upstream's
    shape (usage maps nest their quantities under ``resources``); v1 manifests are upcast to it."""


class NodeMetricDeleted(Named, frozen=True, kw_only=True, tag="nodemetric.deleted.v1"):
    pass


class NodeHeartbeat(Named, frozen=True, kw_only=True, tag="node.heartbeat.v1"):
    """node-reporter's agent on ``name`` is alive (recorded every ``interval_s`` seconds)."""

    instance: str = ""
    interval_s: int = 0


class ColocationConfigApplied(Event, frozen=True, kw_only=True, tag="colocation.applied.v1"):
    """Koordinator's ``slo-controller-config`` ConfigMap (co-location, CPU normalization, amplification) was
    applied; ``manifest`` is the ConfigMap."""

    ref: ObjectRef
    manifest: dict[str, Any]


class ColocationConfigDeleted(Event, frozen=True, kw_only=True, tag="colocation.deleted.v1"):
    ref: ObjectRef


class ColocationProfileApplied(NamedManifest, frozen=True, kw_only=True, tag="colocationprofile.applied.v1"):
    """A ``ClusterColocationProfile`` (``config.koordinator.sh/v1alpha1``) was applied."""


class ColocationProfileDeleted(Named, frozen=True, kw_only=True, tag="colocationprofile.deleted.v1"):
    pass


# --- decisions ----------------------------------------------------------------------------------------------------------


class NodeMetricReported(NamedManifest, frozen=True, kw_only=True, tag="nodemetric.reported.v1"):
    """node-reporter accepted a NodeMetric; ``update_time`` (µs) is its ``status.updateTime``, or the time it was
    recorded when it had none (then also written into ``manifest``). ``usage`` summarises ``nodeUsage``."""

    update_time: int
    usage: dict[str, str] = {}
    metric: NodeMetric | None = None  # the manifest as read at the door (with update_time filled in)


class NodeMetricRejected(NameRefused, frozen=True, kw_only=True, tag="nodemetric.rejected.v1"):
    pass


class NodeMetricRemoved(Named, frozen=True, kw_only=True, tag="nodemetric.removed.v1"):
    pass


class NodeHeartbeatLost(Named, frozen=True, kw_only=True, tag="node.heartbeat_lost.v1"):
    """No heartbeat from the node's agent for longer than the grace: its devices are unschedulable from now on."""

    last_heartbeat: int  # µs
    grace_s: int


class NodeHeartbeatResumed(Named, frozen=True, kw_only=True, tag="node.heartbeat_resumed.v1"):
    """The node's agent is back: its devices are schedulable again."""

    lost_since: int  # µs: when the heartbeat was declared lost


class NodeAllocatableUpdated(Named, frozen=True, kw_only=True, tag="node.allocatable_updated.v1"):
    """The node's allocatable as the scheduler sees it beyond its Node object: batch and mid resources computed
    from its NodeMetric (Koordinator's slo-controller), NUMA-level batch resources, the CPU normalization ratio and
    the resource amplification ratios. ``inputs`` holds every number the calculation read, so that it can be
    checked by hand and re-derived by replay; ``reason`` says what triggered it."""

    allocatable: dict[str, str]
    numa: dict[str, dict[str, str]] = {}
    cpu_normalization_ratio: str = "1.00"
    amplification: dict[str, str] = {}
    degraded: bool = False
    reason: str = ""
    inputs: dict[str, Any] = {}


class ColocationConfigRejected(Event, frozen=True, kw_only=True, tag="colocation.rejected.v1"):
    ref: ObjectRef
    errors: list[FieldIssue]
