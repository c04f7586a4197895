"""Builders for quota tests (shared: the quota-manager, simulator and CLI tests use them too).

``a_*_manifest`` builders return a plain manifest dict, as decoded from YAML; ``a_*`` return the same object read
as the door reads it (:mod:`allot_contracts.objects`), which is what the engine takes, so tests exercise the same
parsing as production. Resource lists take quantities as strings or ints (``{"cpu": 4, "memory": "8Gi"}``).

    a_quota("team-a", min={"cpu": 4}, max={"cpu": 10}, parent="dept", is_parent=False)
    a_pod("p1", quota="team-a", cpu="2", priority=100, preemptible=False)
    a_node("n1", cpu=32, memory="128Gi", gpu=8, labels={"pool": "a"})
    a_profile("gpu-pool", quota_name="gpu-root", selector={"pool": "a"}, ratio="0.9")
    an_engine(a_quota(...), ..., nodes=[a_node(...)])     # applies everything, failing loudly on errors
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.inventory import NodeInfo, parse_node
from allot_contracts.objects.pod import Pod, parse_pod
from allot_contracts.objects.quota import ProfileSpec, QuotaSpec, parse_profile, parse_quota
from allot_quota.config import QuotaConfig
from allot_quota.engine import QuotaEngine
from allot_quota.model import (
    ANNO_NAMESPACES,
    ANNO_RESOURCE_KEYS,
    ANNO_SHARED_WEIGHT,
    ANNO_TOTAL_RESOURCE,
    LABEL_ALLOW_FORCE_UPDATE,
    LABEL_ALLOW_LENT,
    LABEL_IS_PARENT,
    LABEL_IS_ROOT,
    LABEL_PARENT,
    LABEL_POD_PREEMPTIBLE,
    LABEL_POD_QUOTA,
    LABEL_TREE_ID,
)

__all__ = [
    "a_node",
    "a_node_manifest",
    "a_pod",
    "a_pod_manifest",
    "a_profile",
    "a_profile_manifest",
    "a_quota",
    "a_quota_manifest",
    "an_engine",
    "resources",
]

Quantities = Mapping[str, str | int]
GPU = "nvidia.com/gpu"
T = TypeVar("T")


def resources(
    cpu: str | int | None = None, memory: str | int | None = None, gpu: str | int | None = None
) -> dict[str, str]:
    out: dict[str, str] = {}
    if cpu is not None:
        out["cpu"] = str(cpu)
    if memory is not None:
        out["memory"] = str(memory)
    if gpu is not None:
        out[GPU] = str(gpu)
    return out


def _strs(rl: Quantities | None) -> JsonObject | None:
    return None if rl is None else {k: str(v) for k, v in rl.items()}


def a_quota_manifest(
    name: str,
    *,
    min: Quantities | None = None,  # noqa: A002 - the field is called min
    max: Quantities | None = None,  # noqa: A002
    parent: str | None = None,
    namespace: str = "default",
    is_parent: bool | None = None,
    allow_lent: bool | str | None = None,
    shared_weight: Quantities | str | None = None,
    namespaces: Iterable[str] | str | None = None,
    tree_id: str | None = None,
    is_root: bool | None = None,
    total: Quantities | None = None,
    force: bool = False,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> JsonObject:
    lab: JsonObject = dict(labels or {})
    ann: JsonObject = dict(annotations or {})
    if parent is not None:
        lab[LABEL_PARENT] = parent
    if is_parent is not None:
        lab[LABEL_IS_PARENT] = "true" if is_parent else "false"
    if allow_lent is not None:
        lab[LABEL_ALLOW_LENT] = (
            allow_lent if isinstance(allow_lent, str) else ("true" if allow_lent else "false")
        )
    if tree_id is not None:
        lab[LABEL_TREE_ID] = tree_id
    if is_root is not None:
        lab[LABEL_IS_ROOT] = "true" if is_root else "false"
    if force:
        lab[LABEL_ALLOW_FORCE_UPDATE] = "true"
    if shared_weight is not None:
        ann[ANNO_SHARED_WEIGHT] = (
            shared_weight if isinstance(shared_weight, str) else json.dumps(_strs(shared_weight))
        )
    if namespaces is not None:
        ann[ANNO_NAMESPACES] = namespaces if isinstance(namespaces, str) else json.dumps(list(namespaces))
    if total is not None:
        ann[ANNO_TOTAL_RESOURCE] = json.dumps(_strs(total))
    spec: JsonObject = {}
    if min is not None:
        spec["min"] = _strs(min)
    if max is not None:
        spec["max"] = _strs(max)
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": namespace, "labels": lab, "annotations": ann},
        "spec": spec,
    }


def a_pod_manifest(
    name: str,
    *,
    namespace: str = "default",
    quota: str | None = None,
    cpu: str | int | None = None,
    memory: str | int | None = None,
    gpu: str | int | None = None,
    requests: Quantities | None = None,
    priority: int | None = None,
    preemptible: bool = True,
    node: str | None = None,
    start_time: str | None = None,
    preemption_never: bool = False,
    terminating: bool = False,
    labels: Mapping[str, str] | None = None,
) -> JsonObject:
    lab: JsonObject = dict(labels or {})
    if quota is not None:
        lab[LABEL_POD_QUOTA] = quota
    if not preemptible:
        lab[LABEL_POD_PREEMPTIBLE] = "false"
    req: JsonObject = {**resources(cpu, memory, gpu), **(_strs(requests) or {})}
    spec: JsonObject = {"containers": [{"name": "main", "resources": {"requests": req}}]}
    if priority is not None:
        spec["priority"] = priority
    if node is not None:
        spec["nodeName"] = node
    if preemption_never:
        spec["preemptionPolicy"] = "Never"
    meta: JsonObject = {"name": name, "namespace": namespace, "labels": lab}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod: JsonObject = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if start_time is not None:
        pod["status"] = {"startTime": start_time}
    return pod


def a_node_manifest(
    name: str,
    *,
    cpu: str | int | None = None,
    memory: str | int | None = None,
    gpu: str | int | None = None,
    allocatable: Quantities | None = None,
    labels: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> JsonObject:
    alloc: JsonObject = {**resources(cpu, memory, gpu), **(_strs(allocatable) or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def a_profile_manifest(
    name: str,
    *,
    quota_name: str,
    namespace: str = "default",
    ratio: str | None = None,
    selector: Mapping[str, str] | None = None,
    quota_labels: Mapping[str, str] | None = None,
    resource_keys: Iterable[str] | None = None,
    tree_id: str | None = None,
) -> JsonObject:
    spec: JsonObject = {"quotaName": quota_name, "nodeSelector": {"matchLabels": dict(selector or {})}}
    if ratio is not None:
        spec["resourceRatio"] = ratio
    if quota_labels is not None:
        spec["quotaLabels"] = dict(quota_labels)
    meta: JsonObject = {"name": name, "namespace": namespace}
    if resource_keys is not None:
        meta["annotations"] = {ANNO_RESOURCE_KEYS: json.dumps(list(resource_keys))}
    if tree_id is not None:
        meta["labels"] = {LABEL_TREE_ID: tree_id}
    return {
        "apiVersion": "quota.koordinator.sh/v1alpha1",
        "kind": "ElasticQuotaProfile",
        "metadata": meta,
        "spec": spec,
    }


def _admitted(manifest: JsonObject, parse: Callable[[JsonObject, list[FieldIssue]], T | None]) -> T:
    issues: list[FieldIssue] = []
    obj = parse(manifest, issues)
    if obj is None or issues:
        meta = manifest["metadata"]
        name = meta.get("name") if isinstance(meta, dict) else None
        raise AssertionError(f"{manifest['kind']} {name} refused: {[str(i) for i in issues]}")
    return obj


def _pod(manifest: JsonObject, issues: list[FieldIssue]) -> Pod | None:
    return parse_pod(manifest, issues, [])


def _node(manifest: JsonObject, issues: list[FieldIssue]) -> NodeInfo | None:
    info, errors = parse_node(manifest)
    issues.extend(errors)
    return info


def _quota(manifest: JsonObject, issues: list[FieldIssue]) -> QuotaSpec | None:
    spec, errors = parse_quota(manifest)
    issues.extend(errors)
    return spec


def _profile(manifest: JsonObject, issues: list[FieldIssue]) -> ProfileSpec | None:
    spec, errors = parse_profile(manifest)
    issues.extend(errors)
    return spec


def a_quota(name: str, **kw: Any) -> QuotaSpec:
    """``a_quota_manifest`` read as the door reads it (raises when the manifest is refused)."""
    return _admitted(a_quota_manifest(name, **kw), _quota)


def a_pod(name: str, **kw: Any) -> Pod:
    return _admitted(a_pod_manifest(name, **kw), _pod)


def a_node(name: str, **kw: Any) -> NodeInfo:
    return _admitted(a_node_manifest(name, **kw), _node)


def a_profile(name: str, **kw: Any) -> ProfileSpec:
    return _admitted(a_profile_manifest(name, **kw), _profile)


def an_engine(
    *quotas: QuotaSpec,
    nodes: Iterable[NodeInfo] = (),
    config: QuotaConfig | Mapping[str, JsonValue] | None = None,
) -> QuotaEngine:
    """An engine with the given nodes and quotas applied in order; raises if any quota is refused."""
    cfg = config if isinstance(config, QuotaConfig) else QuotaConfig.from_dict(dict(config or {}))
    engine = QuotaEngine(cfg)
    engine.set_nodes(list(nodes))
    for q in quotas:
        errors = engine.apply_quota(q)
        if errors:
            raise AssertionError(f"quota {q.name} refused: {[str(e) for e in errors]}")
    return engine
