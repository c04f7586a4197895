"""Value objects of the quota engine: label/annotation keys, the parsed quota spec and the parsed pod.

Design: manifests (plain dicts, as decoded from YAML/JSON) are read once at the edge of the engine into frozen
value objects with canonical integer ResourceLists; everything downstream computes on those. ``QuotaSpec`` is
what an ``ElasticQuota`` means to the engine; ``PodInfo`` is what a pod means to it (quota label, priority,
preemptibility, summed requests). Both serialise to JSON builtins (``to_state``) for the state digest.

Pod requests follow Kubernetes ``PodRequests``: the sum over containers (a container without a request for a
resource but with a limit requests its limit, as the apiserver defaults it), the per-resource maximum with each
init container, plus ``spec.overhead``. Importance (for reprieve and revoke order) is priority descending, then
earlier ``status.startTime`` (RFC 3339 strings compare in time order), then pod key; a pod without a start time
counts as started last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from allot_contracts.quantity import QuantityError
from allot_quota._resources import RL, parse_list, quantities
from allot_quota.errors import FieldError, PodError

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
    "pod_info",
]

PREFIX: Final = "quota.scheduling.koordinator.sh/"
LABEL_IS_PARENT: Final = PREFIX + "is-parent"
LABEL_PARENT: Final = PREFIX + "parent"
LABEL_ALLOW_LENT: Final = PREFIX + "allow-lent-resource"
LABEL_TREE_ID: Final = PREFIX + "tree-id"
LABEL_IS_ROOT: Final = PREFIX + "is-root"
LABEL_PROFILE: Final = PREFIX + "profile"
LABEL_IGNORE_DEFAULT_TREE: Final = PREFIX + "ignore-default-tree"
LABEL_ALLOW_FORCE_UPDATE: Final = PREFIX + "allow-force-update"
LABEL_POD_QUOTA: Final = PREFIX + "name"
LABEL_POD_PREEMPTIBLE: Final = PREFIX + "preemptible"

ANNO_SHARED_WEIGHT: Final = PREFIX + "shared-weight"
ANNO_NAMESPACES: Final = PREFIX + "namespaces"
ANNO_RESOURCE_KEYS: Final = PREFIX + "resource-keys"
ANNO_TOTAL_RESOURCE: Final = PREFIX + "total-resource"
ANNO_UNSCHEDULABLE_RESOURCE: Final = PREFIX + "unschedulable-resource"
ANNO_MAX_STRICT_KEYS: Final = PREFIX + "max-strict-check-resource-keys"
ANNO_RUNTIME: Final = PREFIX + "runtime"
ANNO_REQUEST: Final = PREFIX + "request"
ANNO_CHILD_REQUEST: Final = PREFIX + "child-request"
ANNO_GUARANTEED: Final = PREFIX + "guaranteed"
ANNO_ALLOCATED: Final = PREFIX + "allocated"
ANNO_NP_REQUEST: Final = PREFIX + "non-preemptible-request"
ANNO_NP_USED: Final = PREFIX + "non-preemptible-used"

ROOT_QUOTA: Final = "koordinator-root-quota"
SYSTEM_QUOTA: Final = "koordinator-system-quota"
DEFAULT_QUOTA: Final = "koordinator-default-quota"
BUILTIN: Final = frozenset({ROOT_QUOTA, SYSTEM_QUOTA, DEFAULT_QUOTA})


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    """What one ElasticQuota means to the engine (canonical integers; ``parent`` normalised to the root)."""

    name: str
    namespace: str
    parent: str = ROOT_QUOTA
    is_parent: bool = False
    allow_lent: bool = True
    tree_id: str = ""
    is_root: bool = False
    ignore_default_tree: bool = False
    allow_force_update: bool = False
    min: RL = field(default_factory=dict)
    max: RL = field(default_factory=dict)
    shared_weight: RL | None = None  # None: weight = max
    namespaces: tuple[str, ...] = ()
    total_resource: RL | None = None  # tree roots only
    profile: str = ""  # "<ns>/<name>" of the ElasticQuotaProfile that manages it, if any
    unlimited: bool = False  # the built-in root: no max, pods never land here
    strict_keys: tuple[str, ...] = ()  # max-strict-check-resource-keys: max may not drop below used

    @property
    def weight(self) -> RL:
        """Effective shared weight: the annotation when present and not all zero, else max."""
        if self.shared_weight and any(self.shared_weight.values()):
            return self.shared_weight
        return self.max

    def to_state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "parent": self.parent,
            "is_parent": self.is_parent,
            "allow_lent": self.allow_lent,
            "tree_id": self.tree_id,
            "is_root": self.is_root,
            "ignore_default_tree": self.ignore_default_tree,
            "allow_force_update": self.allow_force_update,
            "min": quantities(self.min),
            "max": quantities(self.max),
            "shared_weight": None if self.shared_weight is None else quantities(self.shared_weight),
            "namespaces": list(self.namespaces),
            "total_resource": None if self.total_resource is None else quantities(self.total_resource),
            "profile": self.profile,
            "strict_keys": list(self.strict_keys),
        }


@dataclass(frozen=True, slots=True)
class PodInfo:
    key: str  # "<namespace>/<name>"
    namespace: str
    name: str
    quota_label: str
    priority: int
    preemptible: bool
    requests: RL
    preemption_never: bool = False
    terminating: bool = False
    start_time: str | None = None

    def to_state(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "quota_label": self.quota_label,
            "priority": self.priority,
            "preemptible": self.preemptible,
            "requests": quantities(self.requests),
            "start_time": self.start_time,
        }


def importance_key(priority: int, start_time: str | None, key: str) -> tuple[int, int, str, str]:
    """Sort key, most important first: priority desc, earlier start, then pod key."""
    return (-priority, 0 if start_time else 1, start_time or "", key)


def _container_requests(c: Any, path: str, errors: list[FieldError]) -> RL:
    res = (c.get("resources") or {}) if isinstance(c, dict) else {}
    if not isinstance(res, dict):
        errors.append(FieldError(field=f"{path}.resources", type="Invalid", message="must be a map"))
        return {}
    out: RL = {}
    for kind in ("limits", "requests"):  # requests override limits per resource
        raw = res.get(kind) or {}
        if not isinstance(raw, dict):
            errors.append(
                FieldError(field=f"{path}.resources.{kind}", type="Invalid", message="must be a map")
            )
            continue
        for k, v in raw.items():
            try:
                out.update(parse_list({k: v}))
            except QuantityError as exc:
                errors.append(
                    FieldError(
                        field=f"{path}.resources.{kind}[{k}]", type="Invalid", value=str(v), message=str(exc)
                    )
                )
    return out


def _pod_requests(spec: dict[str, Any], errors: list[FieldError]) -> RL:
    total: RL = {}
    for i, c in enumerate(spec.get("containers") or []):
        for k, v in _container_requests(c, f"spec.containers[{i}]", errors).items():
            total[k] = total.get(k, 0) + v
    for i, c in enumerate(spec.get("initContainers") or []):
        for k, v in _container_requests(c, f"spec.initContainers[{i}]", errors).items():
            if v > total.get(k, 0):
                total[k] = v
    overhead = spec.get("overhead") or {}
    for k, v in overhead.items() if isinstance(overhead, dict) else ():
        try:
            total[k] = total.get(k, 0) + parse_list({k: v})[k]
        except QuantityError as exc:
            errors.append(
                FieldError(field=f"spec.overhead[{k}]", type="Invalid", value=str(v), message=str(exc))
            )
    return {k: v for k, v in total.items() if v}


def pod_info(manifest: dict[str, Any]) -> PodInfo:
    """Read a pod manifest; raises :class:`PodError` naming the field when it cannot be read."""
    errors: list[FieldError] = []
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    status = manifest.get("status") or {}
    name = str(meta.get("name") or "")
    if not name:
        errors.append(FieldError(field="metadata.name", type="Required", message="pod name is required"))
    namespace = str(meta.get("namespace") or "default")
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        errors.append(FieldError(field="metadata.labels", type="Invalid", message="must be a mapping"))
        labels = {}
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        errors.append(
            FieldError(
                field="spec.priority", type="Invalid", value=str(priority), message="must be an integer"
            )
        )
        priority = 0
    requests = _pod_requests(spec, errors)
    if errors:
        raise PodError(errors)
    start = status.get("startTime")
    return PodInfo(
        key=f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        quota_label=str(labels.get(LABEL_POD_QUOTA) or ""),
        priority=priority,
        preemptible=str(labels.get(LABEL_POD_PREEMPTIBLE, "")).lower() != "false",
        requests=requests,
        preemption_never=spec.get("preemptionPolicy") == "Never",
        terminating=bool(meta.get("deletionTimestamp")),
        start_time=str(start) if start else None,
    )
