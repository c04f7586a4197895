"""The evictor filter: whether a pod may be evicted at all — one rule set for the descheduler's candidates and for
every PodMigrationJob the migration controller arbitrates (upstream's ``evictions.EvictorFilter`` with
``FilterPodWithMaxEvictionCost``, wrapped by the arbitrator's non-retryable filter).

A pod is refused, with a stable code and a reason, when it is:

- ``Terminating``: being deleted;
- ``NamespaceExcluded``: outside the namespaces migrations may touch (``namespaces.include`` / ``exclude``);
- ``DaemonSet``: owned by a DaemonSet; ``MirrorPod``: a mirror pod (``kubernetes.io/config.mirror``);
  ``StaticPod``: a static pod (``kubernetes.io/config.source`` other than ``api``);
- ``BarePod``: without a controller, unless bare pods may be evicted (``evictAllBarePods``; Allot's standalone mode
  re-creates a bare pod itself, so there they may);
- ``SystemCritical``: of priority ≥ 2000000000, unless ``evictSystemCriticalPods``; ``PriorityThreshold``: of a
  priority not below ``priorityThreshold`` (also lifted by ``evictSystemCriticalPods``, as upstream);
- ``EvictionDisabled``: ``scheduling.koordinator.sh/eviction-cost: "2147483647"`` (upstream's never-evict cost), or
  ``descheduler.alpha.kubernetes.io/prevent-eviction: "true"`` (Allot's: never evicted, whatever else is set);
- ``LocalStorage``: with an ``emptyDir`` or ``hostPath`` volume, unless ``evictLocalStoragePods``;
  ``PersistentVolumeClaim``: with a PVC volume when ``ignorePvcPods``;
- ``LabelSelector``: not matched by the migration controller's ``labelSelector``.

``descheduler.alpha.kubernetes.io/evict`` (any value) on the pod lifts every check but ``prevent-eviction``: the
user asked for the pod to be evictable, as upstream's ``HaveEvictAnnotation``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from allot_contracts.objects.selectors import LabelSelector, match_label_selector
from allot_descheduling.gangs import ANN_GANG_MIGRATION

__all__ = [
    "ANN_EVICT",
    "ANN_EVICTION_COST",
    "ANN_PREVENT_EVICTION",
    "EvictorArgs",
    "PodInput",
    "evict_requested",
    "int_annotation",
    "refusal",
]

ANN_EVICT: Final = "descheduler.alpha.kubernetes.io/evict"
ANN_EVICTION_COST: Final = "scheduling.koordinator.sh/eviction-cost"
ANN_PREVENT_EVICTION: Final = "descheduler.alpha.kubernetes.io/prevent-eviction"
ANN_MIRROR: Final = "kubernetes.io/config.mirror"
ANN_SOURCE: Final = "kubernetes.io/config.source"
ANN_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
# the annotations the evictor filter and the descheduler read of a pod: what :attr:`PodInput.annotations` must hold
READ_ANNOTATIONS: Final = (
    ANN_EVICT,
    ANN_EVICTION_COST,
    ANN_PREVENT_EVICTION,
    ANN_MIRROR,
    ANN_SOURCE,
    ANN_DELETION_COST,
    ANN_GANG_MIGRATION,
)
MAX_COST: Final = 2_147_483_647
SYSTEM_CRITICAL: Final = 2_000_000_000


class PodInput(msgspec.Struct, frozen=True, kw_only=True):
    """A pod as the descheduler and the migration controller read it."""

    key: str  # namespace/name
    uid: str = ""
    node: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}  # those of READ_ANNOTATIONS it has (the others are not read)
    owner_kind: str = ""  # the controller's kind ("" for a bare pod)
    owner_kinds: tuple[str, ...] = ()  # the kinds of all its ownerReferences
    priority: int = 0
    koord_priority: str = ""
    kube_qos: str = "BestEffort"
    koord_qos: str = ""
    requests: dict[str, int] = {}
    local_storage: bool = False  # an emptyDir or hostPath volume
    pvc: bool = False  # a persistentVolumeClaim volume
    gang: str = ""
    reservation: str = ""
    migrating: str = ""  # the active PodMigrationJob moving it
    terminating: bool = False

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]


class EvictorArgs(msgspec.Struct, frozen=True, kw_only=True):
    """The migration controller's evictor settings (upstream's ``MigrationControllerArgs`` names)."""

    evict_local_storage: bool = False  # evictLocalStoragePods
    evict_system_critical: bool = False  # evictSystemCriticalPods
    ignore_pvc: bool = False  # ignorePvcPods
    evict_bare_pods: bool = True  # evictAllBarePods (always true standalone: Allot re-creates a bare pod)
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    priority_threshold: int | None = None
    label_selector: LabelSelector | None = None


def int_annotation(pod: PodInput, key: str) -> int:
    try:
        return int(pod.annotations.get(key, "0"))
    except ValueError:
        return 0


def evict_requested(annotations: Mapping[str, object]) -> bool:
    """The pod carries ``descheduler.alpha.kubernetes.io/evict``: the evictor's checks do not hold it back."""
    return ANN_EVICT in annotations


def refusal(pod: PodInput, args: EvictorArgs) -> tuple[str, str]:
    """Why the pod may not be evicted, as ``(code, reason)``; ``("", "")`` when it may."""
    if pod.annotations.get(ANN_PREVENT_EVICTION) == "true":
        return "EvictionDisabled", f"{ANN_PREVENT_EVICTION} is true"
    if evict_requested(pod.annotations):
        return "", ""
    return _checks(pod, args)


def _checks(pod: PodInput, args: EvictorArgs) -> tuple[str, str]:
    if pod.terminating:
        return "Terminating", "the pod is terminating"
    namespace = pod.namespace
    if args.include_namespaces and namespace not in args.include_namespaces:
        return (
            "NamespaceExcluded",
            f"namespace {namespace!r} is not among the namespaces migrations may touch",
        )
    if namespace in args.exclude_namespaces:
        return "NamespaceExcluded", f"namespace {namespace!r} is excluded from migrations"
    if "DaemonSet" in (pod.owner_kind, *pod.owner_kinds):
        return "DaemonSet", "a DaemonSet pod belongs to its node"
    if ANN_MIRROR in pod.annotations:
        return "MirrorPod", "a mirror (static) pod cannot be evicted"
    if pod.annotations.get(ANN_SOURCE, "api") != "api":
        return "StaticPod", f"a static pod ({ANN_SOURCE}: {pod.annotations[ANN_SOURCE]}) cannot be evicted"
    if not pod.owner_kind and not args.evict_bare_pods:
        return "BarePod", "the pod has no controller to re-create it (set evictAllBarePods to allow it)"
    if not args.evict_system_critical:
        if pod.priority >= SYSTEM_CRITICAL:
            return (
                "SystemCritical",
                f"system-critical priority {pod.priority} (evictSystemCriticalPods is off)",
            )
        if args.priority_threshold is not None and pod.priority >= args.priority_threshold:
            return (
                "PriorityThreshold",
                f"the pod's priority {pod.priority} is not below the threshold {args.priority_threshold}",
            )
    if int_annotation(pod, ANN_EVICTION_COST) >= MAX_COST:
        return "EvictionDisabled", f"{ANN_EVICTION_COST} is {MAX_COST}: never evicted"
    if pod.local_storage and not args.evict_local_storage:
        return "LocalStorage", "uses local storage (emptyDir or hostPath; evictLocalStoragePods is off)"
    if pod.pvc and args.ignore_pvc:
        return "PersistentVolumeClaim", "uses a PersistentVolumeClaim (ignorePvcPods is on)"
    if args.label_selector is not None and not match_label_selector(args.label_selector, pod.labels):
        return "LabelSelector", "the pod does not match the configured label selector"
    return "", ""
