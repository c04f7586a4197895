"""Where a pod may run: node selector, node affinity, tolerations, ``nodeName``, the scheduling hint, and HAMi's
GPU type / UUID filters and scheduler policies.

``read_where(spec, annotations, issues, warnings)`` reads them all (part of reading a pod,
:func:`allot_contracts.objects.pod.parse_pod`). Inter-pod affinity, preferred node affinity, scheduling-hint
extensions and the HAMi options Allot does not implement are read but not acted on: each is a warning. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import msgspec

from allot_contracts.issues import (
    FieldIssue,
    annotation_path,
    invalid_annotation,
    not_acted_on,
    optional_object,
)
from allot_contracts.objects.annotations import decode_annotation
from allot_contracts.objects.selectors import (
    NodeSelectorTerm,
    Toleration,
    parse_node_selector_terms,
    parse_tolerations,
)

__all__ = ["GpuFilter", "Where", "gpu_filter", "read_where"]

ANN_SCHEDULING_HINT: Final = "internal.scheduling.koordinator.sh/scheduling-hint"
ANN_SCHEDULING_HINT_OLD: Final = "scheduling.koordinator.sh/scheduling-hint"
HAMI_USE_TYPE: Final = "nvidia.com/use-gputype"
HAMI_NOUSE_TYPE: Final = "nvidia.com/nouse-gputype"
HAMI_USE_UUID: Final = "nvidia.com/use-gpuuuid"
HAMI_NOUSE_UUID: Final = "nvidia.com/nouse-gpuuuid"
HAMI_NODE_POLICY: Final = "hami.io/node-scheduler-policy"
HAMI_GPU_POLICY: Final = "hami.io/gpu-scheduler-policy"
HAMI_NOT_ACTED_ON: Final = {
    "nvidia.com/numa-bind": "read but not acted on: use Koordinator's numa-topology-spec annotation for NUMA "
    "alignment",
    "nvidia.com/vgpu-mode": "read but not acted on: Allot shares GPUs through HAMi-core only (no MIG or MPS mode)",
    "hami.io/device-scoring-weights": "read but not acted on: device scoring weights come from the scheduler "
    "configuration",
}


class GpuFilter(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """HAMi's pod-level GPU selection: allowed / excluded GPU models (substring match, as HAMi does) and UUIDs."""

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()


def _comma_list(ann: Mapping[str, Any], key: str) -> tuple[str, ...]:
    raw = ann.get(key)
    if raw is None:
        return ()
    return tuple(x.strip() for x in str(raw).split(",") if x.strip())


def gpu_filter(ann: Mapping[str, Any]) -> GpuFilter | None:
    f = GpuFilter(
        use_types=_comma_list(ann, HAMI_USE_TYPE),
        nouse_types=_comma_list(ann, HAMI_NOUSE_TYPE),
        use_uuids=_comma_list(ann, HAMI_USE_UUID),
        nouse_uuids=_comma_list(ann, HAMI_NOUSE_UUID),
    )
    return f if (f.use_types or f.nouse_types or f.use_uuids or f.nouse_uuids) else None


def _hami_policy(
    ann: Mapping[str, Any],
    key: str,
    allowed: tuple[str, ...],
    ignored: tuple[str, ...],
    warnings: list[FieldIssue],
) -> str:
    raw = ann.get(key)
    if raw is None:
        return ""
    value = str(raw).strip()
    if value in allowed:
        return value
    message = (
        f"read but not acted on: policy {value!r} is not implemented; the configured device scoring applies"
        if value in ignored
        else f"unknown policy {value!r} (one of {', '.join(allowed + ignored)}): the configured scoring applies"
    )
    warnings.append(not_acted_on(annotation_path(key), message, value=value))
    return ""


def _node_names(raw: Any, path: str, issues: list[FieldIssue]) -> tuple[str, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
        issues.append(invalid_annotation(path, "must be a list of node names"))
        return None
    seen: list[str] = []
    for x in raw:
        if x not in seen:
            seen.append(x)
    return tuple(seen)


def _scheduling_hint(
    ann: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    key = ANN_SCHEDULING_HINT
    if ann.get(key) is None and ann.get(ANN_SCHEDULING_HINT_OLD) is not None:
        key = ANN_SCHEDULING_HINT_OLD
        warnings.append(
            FieldIssue(
                path=annotation_path(key),
                code="Deprecated",
                message=f"deprecated key; use {ANN_SCHEDULING_HINT} (read the same way)",
            )
        )
    value = decode_annotation(dict(ann), key, issues)
    if value is None:
        return None, ()
    if not isinstance(value, dict):
        issues.append(invalid_annotation(annotation_path(key), "must be an object"))
        return None, ()
    for field in sorted(set(value) - {"nodeNames", "preferredNodeNames", "extensions"}):
        issues.append(
            invalid_annotation(
                annotation_path(key, f".{field}"),
                "unknown field; supported: extensions, nodeNames, preferredNodeNames",
            )
        )
    if value.get("extensions"):
        warnings.append(
            not_acted_on(
                annotation_path(key, ".extensions"),
                "read but not acted on: no scheduling-hint extension is implemented",
            )
        )
    required = _node_names(value.get("nodeNames"), annotation_path(key, ".nodeNames"), issues)
    preferred = _node_names(
        value.get("preferredNodeNames"), annotation_path(key, ".preferredNodeNames"), issues
    )
    return required, preferred or ()


def _affinity(
    spec: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> tuple[NodeSelectorTerm, ...] | None:
    aff = optional_object(spec.get("affinity"), "spec.affinity", issues)
    if aff is None:
        return None
    for kind in ("podAffinity", "podAntiAffinity"):
        if aff.get(kind):
            warnings.append(
                not_acted_on(
                    f"spec.affinity.{kind}",
                    "read but not acted on: inter-pod affinity is not evaluated by Allot's placement",
                )
            )
    node_aff = optional_object(aff.get("nodeAffinity"), "spec.affinity.nodeAffinity", issues)
    if node_aff is None:
        return None
    if node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"):
        warnings.append(
            not_acted_on(
                "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                "read but not acted on: preferred node affinity does not score nodes in Allot",
            )
        )
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    return parse_node_selector_terms(
        terms if terms is not None else [],
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        issues,
    )


class Where(NamedTuple):
    """The fields of a pod that say where it may run, as :func:`read_where` reads them."""

    node_selector: tuple[tuple[str, str], ...]
    affinity: tuple[NodeSelectorTerm, ...] | None
    tolerations: tuple[Toleration, ...]
    node_name: str
    required_nodes: tuple[str, ...] | None
    preferred_nodes: tuple[str, ...]
    gpu_filter: GpuFilter | None
    node_policy: str
    gpu_policy: str


def read_where(
    spec: Mapping[str, Any], ann: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> Where:
    """Node selector, required node affinity, tolerations, ``nodeName``, the scheduling hint and HAMi's GPU filters
    and policies; the HAMi options Allot does not act on are warned about."""
    node_selector = spec.get("nodeSelector") or {}
    if not isinstance(node_selector, Mapping):
        issues.append(FieldIssue(path="spec.nodeSelector", message="must be a map of strings"))
        node_selector = {}
    affinity = _affinity(spec, issues, warnings)
    tolerations = parse_tolerations(spec.get("tolerations"), "spec.tolerations", issues)
    node_name = spec.get("nodeName")
    if node_name is not None and not isinstance(node_name, str):
        issues.append(FieldIssue(path="spec.nodeName", message="must be a string"))
        node_name = ""
    required_nodes, preferred_nodes = _scheduling_hint(ann, issues, warnings)
    for key, why in HAMI_NOT_ACTED_ON.items():
        if key in ann:
            warnings.append(not_acted_on(annotation_path(key), why))
    node_policy = _hami_policy(ann, HAMI_NODE_POLICY, ("binpack", "spread"), (), warnings)
    gpu_policy = _hami_policy(
        ann, HAMI_GPU_POLICY, ("binpack", "spread"), ("topology-aware", "mutex", "numa"), warnings
    )
    return Where(
        node_selector=tuple(sorted((str(k), str(v)) for k, v in node_selector.items())),
        affinity=affinity,
        tolerations=tolerations,
        node_name=node_name or "",
        required_nodes=required_nodes,
        preferred_nodes=preferred_nodes,
        gpu_filter=gpu_filter(ann),
        node_policy=node_policy,
        gpu_policy=gpu_policy,
    )
