"""The scheduling view of a pod: everything placement reads, parsed and validated once.

Responsibility: ``parse_pod(manifest, default_bind)`` turns a v1 Pod dict into a ``PodSpec`` (requests, device
requests, hints, NUMA and CPU-bind intent, selectors, tolerations) or a list of ``FieldError`` (the pod is then
Rejected). ``pod_cache_key`` extracts the decision-relevant part of a manifest as canonical bytes: two pods with the
same key are placed identically on the same cluster state, which is what the engine's caches rely on. Identity
(namespace, name, uid) is deliberately not part of the key.

CPU binding intent (Koordinator PreFilter): only LSE/LSR pods of priority class koord-prod bind CPUs on their own;
the bind policy is the resource-spec's required policy, else its preferred one, else the configured default.
A node whose ``cpu-bind-policy`` label forces binding is handled at filter time (see ``numa_eval``).
Pure; no IO.
"""

from __future__ import annotations

from typing import Any

import msgspec

from allot_placement import names as n
from allot_placement.annotations import (
    DeviceHint,
    JointSpec,
    PartitionSpec,
    decode_annotation,
    parse_hints,
    parse_joint,
    parse_numa_spec,
    parse_partition_spec,
    parse_resource_spec,
)
from allot_placement.errors import FieldError
from allot_placement.requests import DeviceRequest, device_requests, pod_requests
from allot_placement.selectors import (
    NodeSelectorTerm,
    Toleration,
    parse_node_selector_terms,
    parse_tolerations,
)

__all__ = ["PodSpec", "parse_pod", "pod_cache_key", "pod_identity", "priority_class"]

_ENCODER = msgspec.json.Encoder(order="sorted")


class PodSpec(msgspec.Struct, frozen=True, kw_only=True):
    requests: dict[str, int]
    devices: dict[str, DeviceRequest]
    hints: dict[str, DeviceHint]
    joint: JointSpec | None
    partition: PartitionSpec | None
    bind_required: str  # pod-level required CPU bind policy ("" if none)
    bind_policy: str  # FullPCPUs | SpreadByPCPUs when the pod itself asks for a cpuset, else ""
    cpu_exclusive: str  # None | PCPULevel | NUMANodeLevel ("" = None)
    numa_policy: str  # "" | BestEffort | Restricted | SingleNUMANode
    numa_exclusive: str  # "" | Required | Preferred (defaults to Required when the pod sets a policy)
    node_selector: tuple[tuple[str, str], ...]
    affinity: tuple[NodeSelectorTerm, ...] | None
    tolerations: tuple[Toleration, ...]
    node_name: str
    isolation_provider: str
    spec_has_bind: bool  # the resource-spec names a bind policy (else one is written back with the cpuset)
    by_name: bool  # a filter reads the node's name (nodeName, matchFields), so results are cached per name
    fit_order: tuple[tuple[str, int], ...]  # requests in NodeResourcesFit reporting order
    dev_key: bytes  # the device-relevant part of the pod (key of the engine's device-result cache)
    key: bytes  # the pod_cache_key this spec was parsed from

    @property
    def gpu_shared(self) -> bool:
        d = self.devices.get(n.GPU)
        return d is not None and d.shared



_FIT_FIRST = (n.PODS, n.CPU, n.MEMORY, n.EPHEMERAL_STORAGE)


def _fit_rank(name: str) -> tuple[int, str]:
    return (_FIT_FIRST.index(name) if name in _FIT_FIRST else len(_FIT_FIRST), name)


def pod_identity(manifest: dict[str, Any]) -> tuple[str, str, str]:
    meta = manifest.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or ""), str(meta.get("uid") or "")


def priority_class(labels: dict[str, Any], priority: Any) -> str:
    """Koordinator priority class with the QoS-derived default (LSE/LSR/LS/SYSTEM → prod, BE → batch)."""
    pc = labels.get(n.LABEL_PRIORITY_CLASS)
    if pc in n.PRIORITY_CLASSES:
        return str(pc)
    if isinstance(priority, int) and not isinstance(priority, bool):
        for lo, hi, name in ((9000, 9999, "koord-prod"), (7000, 7999, "koord-mid"), (5000, 5999, "koord-batch"),
                             (3000, 3999, "koord-free")):
            if lo <= priority <= hi:
                return name
    qos = labels.get(n.LABEL_QOS)
    if qos in ("SYSTEM", "LSE", "LSR", "LS"):
        return "koord-prod"
    if qos == "BE":
        return "koord-batch"
    return ""


def _resources_only(containers: Any) -> list[Any]:
    if not isinstance(containers, list):
        return [containers]
    return [c.get("resources") if isinstance(c, dict) else c for c in containers]


def pod_cache_key(manifest: dict[str, Any]) -> bytes:
    """Canonical bytes of every manifest field placement reads (not the pod's identity)."""
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    affinity = spec.get("affinity") or {}
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_aff, dict) else None
    parts = (
        _resources_only(spec.get("containers") or []),
        _resources_only(spec.get("initContainers") or []),
        spec.get("overhead"),
        spec.get("nodeSelector"),
        required,
        spec.get("tolerations"),
        spec.get("nodeName"),
        spec.get("priority"),
        [labels.get(k) for k in n.POD_LABELS_READ] if isinstance(labels, dict) else labels,
        [ann.get(k) for k in n.POD_ANNOTATIONS_READ] if isinstance(ann, dict) else ann,
    )
    try:
        return _ENCODER.encode(parts)
    except (TypeError, msgspec.EncodeError):
        return repr(parts).encode()


def parse_pod(manifest: dict[str, Any], default_bind: str = "FullPCPUs") -> tuple[PodSpec | None, list[FieldError]]:
    """Validate and parse a pod; on any error the spec is ``None`` and the errors say why, with field paths."""
    errors: list[FieldError] = []
    if not isinstance(manifest, dict):
        return None, [FieldError(path="", message="pod manifest must be a mapping")]
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return None, [FieldError(path="metadata", message="metadata and spec must be mappings")]
    if not meta.get("name"):
        errors.append(FieldError(path="metadata.name", message="is required"))
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    if not isinstance(labels, dict) or not isinstance(ann, dict):
        return None, [FieldError(path="metadata", message="labels and annotations must be maps")]
    requests = pod_requests(spec, errors)
    hints = parse_hints(decode_annotation(ann, n.ANN_DEVICE_ALLOCATE_HINT, errors), errors)
    joint = parse_joint(decode_annotation(ann, n.ANN_DEVICE_JOINT_ALLOCATE, errors), errors)
    partition = parse_partition_spec(decode_annotation(ann, n.ANN_GPU_PARTITION_SPEC, errors), errors)
    rspec = parse_resource_spec(decode_annotation(ann, n.ANN_RESOURCE_SPEC, errors), errors)
    nspec = parse_numa_spec(decode_annotation(ann, n.ANN_NUMA_TOPOLOGY_SPEC, errors), errors)
    strategies = {t: (h.allocate_strategy, h.exclusive_policy) for t, h in hints.items()}
    devices = device_requests(requests, strategies, errors) if not errors else {}
    if joint is not None:
        kept = tuple(t for t in joint.device_types
                     if t in devices and strategies.get(t, ("", ""))[0] != "ApplyForAll")
        joint = JointSpec(device_types=kept, required_scope=joint.required_scope) if len(kept) > 1 else None
    # CPU binding intent (PreFilter).
    bind_required, bind_policy = "", ""
    qos = labels.get(n.LABEL_QOS)
    if qos in ("LSE", "LSR") and priority_class(labels, spec.get("priority")) == "koord-prod":
        policy = rspec.preferred_bind if rspec.preferred_bind not in ("", "Default") else default_bind
        req = default_bind if rspec.required_bind == "Default" else rspec.required_bind
        if req:
            policy = req
        if policy in ("FullPCPUs", "SpreadByPCPUs"):
            cpu = requests.get(n.CPU, 0)
            if cpu % 1000 != 0:
                errors.append(FieldError(path="spec.containers[*].resources.requests[cpu]", code="InvalidCPURequest",
                                         message=f"the requested CPUs must be integer for cpu bind policy {policy} "
                                                 f"(got {cpu}m)"))
            elif cpu > 0:
                bind_required, bind_policy = req, policy
    node_selector = spec.get("nodeSelector") or {}
    if not isinstance(node_selector, dict):
        errors.append(FieldError(path="spec.nodeSelector", message="must be a map of strings"))
        node_selector = {}
    affinity = None
    aff = spec.get("affinity") or {}
    node_aff = aff.get("nodeAffinity") if isinstance(aff, dict) else None
    req_aff = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_aff, dict) else None
    if req_aff is not None:
        terms_raw = req_aff.get("nodeSelectorTerms") if isinstance(req_aff, dict) else None
        affinity = parse_node_selector_terms(
            terms_raw if terms_raw is not None else [],
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", errors)
    tolerations = parse_tolerations(spec.get("tolerations"), "spec.tolerations", errors)
    if errors:
        return None, errors
    exclusive = nspec.exclusive or ("Required" if nspec.policy else "")
    return PodSpec(
        requests=requests, devices=devices, hints=hints, joint=joint, partition=partition,
        bind_required=bind_required, bind_policy=bind_policy,
        cpu_exclusive="" if rspec.exclusive == "None" else rspec.exclusive,
        numa_policy=nspec.policy, numa_exclusive=exclusive,
        node_selector=tuple(sorted((str(k), str(v)) for k, v in node_selector.items())),
        affinity=affinity, tolerations=tolerations, node_name=str(spec.get("nodeName") or ""),
        isolation_provider=str(labels.get(n.LABEL_GPU_ISOLATION_PROVIDER) or ""),
        spec_has_bind=bool(rspec.required_bind or rspec.preferred_bind),
        by_name=bool(spec.get("nodeName")) or any(term[1] for term in affinity or ()),
        fit_order=tuple((r, requests[r]) for r in sorted(requests, key=_fit_rank)),
        key=pod_cache_key(manifest),
        dev_key=_ENCODER.encode((devices, hints, joint, partition, labels.get(n.LABEL_GPU_ISOLATION_PROVIDER))),
    ), []
