"""Value objects of the quota engine: label/annotation keys, the parsed quota spec and the parsed pod.

Design: objects are read once at the door (:mod:`allot_contracts.objects`) into frozen values with canonical
integer ResourceLists; everything here computes on those. ``QuotaSpec`` (from the contracts) is what an
``ElasticQuota`` means to the engine; ``PodInfo`` is what a pod means to it (quota label, priority,
preemptibility, requests as the door computed them, HAMi names converted). Both serialise to JSON builtins
(``to_state``) for the state digest.

Importance (for reprieve and revoke order) is priority descending, then
earlier ``status.startTime`` (RFC 3339 strings compare in time order), then pod key; a pod without a start time
counts as started last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from allot_contracts.objects.pod import Pod
from allot_contracts.objects.quota import (  # noqa: F401  (re-exported: the quota engine's vocabulary)
    ANNO_ALLOCATED,
    ANNO_CHILD_REQUEST,
    ANNO_GUARANTEED,
    ANNO_MAX_STRICT_KEYS,
    ANNO_NAMESPACES,
    ANNO_NP_REQUEST,
    ANNO_NP_USED,
    ANNO_REQUEST,
    ANNO_RESOURCE_KEYS,
    ANNO_RUNTIME,
    ANNO_SHARED_WEIGHT,
    ANNO_TOTAL_RESOURCE,
    ANNO_UNSCHEDULABLE_RESOURCE,
    BUILTIN,
    DEFAULT_QUOTA,
    LABEL_ALLOW_FORCE_UPDATE,
    LABEL_ALLOW_LENT,
    LABEL_IGNORE_DEFAULT_TREE,
    LABEL_IS_PARENT,
    LABEL_IS_ROOT,
    LABEL_PARENT,
    LABEL_POD_PREEMPTIBLE,
    LABEL_POD_QUOTA,
    LABEL_PROFILE,
    LABEL_TREE_ID,
    PREFIX,
    ROOT_QUOTA,
    SYSTEM_QUOTA,
    QuotaSpec,
    parent_quota_message,
)
from allot_contracts.resources import ResourceList, format_resource_list

__all__ = [
    "ANNO_ALLOCATED",
    "ANNO_CHILD_REQUEST",
    "ANNO_GUARANTEED",
    "ANNO_MAX_STRICT_KEYS",
    "ANNO_NAMESPACES",
    "ANNO_NP_REQUEST",
    "ANNO_NP_USED",
    "ANNO_REQUEST",
    "ANNO_RESOURCE_KEYS",
    "ANNO_RUNTIME",
    "ANNO_SHARED_WEIGHT",
    "ANNO_TOTAL_RESOURCE",
    "ANNO_UNSCHEDULABLE_RESOURCE",
    "BUILTIN",
    "DEFAULT_QUOTA",
    "LABEL_ALLOW_FORCE_UPDATE",
    "LABEL_ALLOW_LENT",
    "LABEL_IGNORE_DEFAULT_TREE",
    "LABEL_IS_PARENT",
    "LABEL_IS_ROOT",
    "LABEL_PARENT",
    "LABEL_POD_PREEMPTIBLE",
    "LABEL_POD_QUOTA",
    "LABEL_PROFILE",
    "LABEL_TREE_ID",
    "PREFIX",
    "ROOT_QUOTA",
    "SYSTEM_QUOTA",
    "PodInfo",
    "QuotaSpec",
    "importance_key",
    "parent_quota_message",
    "pod_info",
]


class PodState(TypedDict):
    key: str
    quota_label: str
    priority: int
    preemptible: bool
    requests: dict[str, str]
    start_time: str | None


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod as the quota engine accounts it: its quota, priority, preemptibility and requests (taken from the
    door's ``Pod``). A projection of its own, not the gang engine's ``PodInfo`` (gang membership) nor node-reporter's
    (a running pod's cgroup limits): each engine keeps only what its decisions read, and its state snapshots
    (``to_state``) depend on exactly these fields."""

    key: str  # "<namespace>/<name>"
    namespace: str
    name: str
    quota_label: str
    priority: int
    preemptible: bool
    requests: ResourceList
    preemption_never: bool = False
    terminating: bool = False
    start_time: str | None = None

    def to_state(self) -> PodState:
        return {
            "key": self.key,
            "quota_label": self.quota_label,
            "priority": self.priority,
            "preemptible": self.preemptible,
            "requests": format_resource_list(self.requests),
            "start_time": self.start_time,
        }


def importance_key(priority: int, start_time: str | None, key: str) -> tuple[int, int, str, str]:
    """Sort key, most important first: priority desc, earlier start, then pod key."""
    return (-priority, 0 if start_time else 1, start_time or "", key)


def pod_info(pod: Pod) -> PodInfo:
    """What a pod (read at the door) means to the quota engine."""
    return PodInfo(
        key=pod.key,
        namespace=pod.namespace,
        name=pod.name,
        quota_label=pod.quota,
        priority=pod.priority,
        preemptible=pod.preemptible,
        requests=dict(pod.requests),
        preemption_never=pod.preemption_never,
        terminating=pod.terminating,
        start_time=pod.start_time,
    )
