"""The enactment ledger's outcomes (Kubernetes mode): what the API server answered when a recorded decision was
carried out by the component that performs it.

Every decision that changes the cluster has exactly one outcome in the log, recorded by the worker that made the
call (producer ``binder.kube``), with the decision's event id as its causation and in ``decision``, and an event id
derived from it (so a retried or repeated call never records a second outcome). Older outcomes keep their names
(``pod.bound``/``pod.bind_failed``, ``pod.eviction_enacted``, ``migration.evicted``/``migration.eviction_failed``);
the ones here follow the ``<decision>_enacted`` / ``<decision>_enactment_failed`` pattern. ``attempts`` counts the
calls it took (transient failures retried with backoff, plus the final one); ``reason`` is the API server's reason
(``TooManyRequests`` for a PodDisruptionBudget that allows no disruption, ``NotFound``, ``Invalid``, …).
Pure data: the time of the outcome is its record's time.
"""

from __future__ import annotations

from allot_contracts.events._base import Event, ObjectRef, PodEvent


class QuotaStatusEnacted(Event, frozen=True, kw_only=True, tag="quota.status_enacted.v1"):
    """The ElasticQuota's status and annotations of a ``quota.status_published`` patch were written."""

    quota: ObjectRef
    decision: str
    attempts: int = 1


class QuotaStatusEnactmentFailed(Event, frozen=True, kw_only=True, tag="quota.status_enactment_failed.v1"):
    """A ``quota.status_published`` patch was refused for good (the quota does not exist in the cluster, or a webhook
    refused its annotations: then ``status_written`` says whether the status subresource was written first)."""

    quota: ObjectRef
    decision: str
    reason: str
    message: str
    status_written: bool = False
    attempts: int = 1


class QuotaEvictionEnacted(PodEvent, frozen=True, kw_only=True, tag="quota.eviction_enacted.v1"):
    """The Eviction API accepted the eviction of a ``quota.evicted`` pod (or that life of the pod was already gone:
    ``message`` says which)."""

    quota: str = ""
    decision: str
    message: str = ""
    attempts: int = 1


class QuotaEvictionEnactmentFailed(
    PodEvent, frozen=True, kw_only=True, tag="quota.eviction_enactment_failed.v1"
):
    """The Eviction API refused the eviction of a ``quota.evicted`` pod: a PodDisruptionBudget that allows no
    disruption (``reason`` ``TooManyRequests``), more than one budget selecting the pod, or another final refusal. The
    pod keeps running; ``message`` is the API server's."""

    quota: str = ""
    decision: str
    reason: str
    message: str
    attempts: int = 1


class NodeStatusEnacted(Event, frozen=True, kw_only=True, tag="node.status_enacted.v1"):
    """The Node's resources and annotations a ``node.allocatable_updated`` or ``device.reported``/``device.removed``
    decision leads to were written (``nodes/{name}/status``; nothing to write when they were already there)."""

    node: str
    decision: str
    attempts: int = 1


class NodeStatusEnactmentFailed(Event, frozen=True, kw_only=True, tag="node.status_enactment_failed.v1"):
    """The Node's status patch for that decision was refused for good (``NotFound``: no such Node in the cluster)."""

    node: str
    decision: str
    reason: str
    message: str
    attempts: int = 1


__all__ = [
    "NodeStatusEnacted",
    "NodeStatusEnactmentFailed",
    "QuotaEvictionEnacted",
    "QuotaEvictionEnactmentFailed",
    "QuotaStatusEnacted",
    "QuotaStatusEnactmentFailed",
]
