"""The pod, read once: every field any part of Allot acts on, typed, validated, with warnings for the rest.

Responsibility: ``parse_pod(manifest, issues, warnings, context)`` turns a ``v1 Pod`` into a frozen ``Pod``
(or ``None`` with ``issues`` saying why, field path and reason), used alike by ``allot apply``, ``kube-sync``, the
simulator and every service: the placement, quota and gang engines read the same requests, priority, QoS, quota
and gang fields, so they cannot disagree.

What is computed here, once:
- identity, labels, owner references, phase, start time, termination;
- requests as Kubernetes ``PodRequests`` over canonical integers, with the device protocol's aliases: deprecated
  ``kubernetes.io/`` device names renamed, HAMi's ``nvidia.com/gpumem|gpucores|gpumem-percentage`` converted to
  Koordinator's shared-GPU names (the placement and quota engines both see the converted names);
- per container requests and limits (what node-side enforcement needs);
- priority: ``priorityClassName`` resolved against the PriorityClasses known at the door (``PodContext``), as the
  API server's priority admission does; Koordinator priority class (label, else ``spec.priority`` band, else QoS);
  Kubernetes QoS class and Koordinator QoS class;
- device requests, hints, joint allocation, partition spec, CPU bind and NUMA specs;
- node selector, required node affinity, tolerations, ``nodeName``, the scheduling hint (required and preferred
  node names), HAMi's GPU type / UUID filters and scheduler policies;
- elastic quota name and preemptibility; gang declaration; reservation affinity, exact match and opt-outs; for bound
  pods, the allocation annotations.

``parse_pod`` reads section by section; the sections with most to say have their own modules:
:mod:`~allot_contracts.objects.pod_containers` (per container requests and limits, Kubernetes QoS),
:mod:`~allot_contracts.objects.pod_priority` (priority admission, PriorityClasses) and
:mod:`~allot_contracts.objects.pod_where` (node selection, the scheduling hint, HAMi's filters and policies).

Refused, as upstream refuses (the bad-input catalogue in docs/placement.md): invalid names, labels and annotation
sizes; malformed or out-of-range quantities; invalid resource names; extended resources whose request differs from
their limit; ``koordinator.sh/gpu: 0``; the QoS class / priority class combinations and CPU requests Koordinator's
pod webhook refuses (:mod:`allot_contracts.objects.qos_rules`); the reserved
``scheduling.koordinator.sh/reserve-pod`` annotation; an unknown ``priorityClassName`` or a ``spec.priority``
contradicting it; malformed device, NUMA, gang and hint annotations.

Warned (accepted, read but not acted on, or suspicious): a ``device-allocated`` annotation on a pod that is not
bound yet (the scheduler writes its own), HAMi options Allot does not implement, deprecated annotation keys.
Pure; nothing here raises for bad input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import msgspec

from allot_contracts.issues import FieldIssue, annotation_path, label_path, not_acted_on
from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import (
    BoundAllocation,
    DeviceHint,
    JointSpec,
    NUMASpec,
    PartitionSpec,
    ResourceSpec,
    decode_annotation,
    parse_device_allocated,
    parse_hints,
    parse_joint,
    parse_numa_spec,
    parse_partition_spec,
    parse_resource_spec,
    parse_resource_status,
)
from allot_contracts.objects.gang import GangDecl, read_pod_gang, read_sub_priority
from allot_contracts.objects.load_aware import LoadEstimation, read_load_estimation
from allot_contracts.objects.meta import Meta, Owner, read_meta
from allot_contracts.objects.nodemetric import parse_time
from allot_contracts.objects.pod_containers import (
    Container,
    kube_qos_of,
    pod_limits,
    read_containers,
    read_quantities,
)
from allot_contracts.objects.pod_priority import (
    BUILTIN_PRIORITY_CLASSES,
    DEFAULT_CONTEXT,
    PodContext,
    PriorityClassInfo,
    read_priority,
)
from allot_contracts.objects.pod_where import GpuFilter, read_where
from allot_contracts.objects.qos_rules import koord_priority_of, koord_qos_of, qos_issues
from allot_contracts.objects.requests import DeviceRequest, device_requests, pod_requests
from allot_contracts.objects.reservation_pod import PodReservation, parse_pod_reservation
from allot_contracts.objects.selectors import NodeSelectorTerm, Toleration

# Re-exported for the packages that import them from here (the CLI's door and webhook, placement).
__all__ = [
    "BUILTIN_PRIORITY_CLASSES",
    "Container",
    "GpuFilter",
    "Pod",
    "PodContext",
    "PriorityClassInfo",
    "koord_priority_of",
    "parse_pod",
]

QUOTA_LABEL: Final = "quota.scheduling.koordinator.sh/name"
PREEMPTIBLE_LABEL: Final = "quota.scheduling.koordinator.sh/preemptible"
ANN_RESERVE_POD: Final = "scheduling.koordinator.sh/reserve-pod"


class Pod(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A pod as every engine reads it. See the module docstring for what each field means."""

    namespace: str
    name: str
    uid: str = ""
    labels: dict[str, str] = {}
    owners: tuple[Owner, ...] = ()
    node_name: str = ""
    phase: str = ""
    terminating: bool = False
    start_time: str | None = None
    # priority
    priority: int = 0
    priority_class_name: str = ""
    preemption_never: bool = False
    sub_priority: int = 0
    kube_qos: str = "BestEffort"
    koord_qos: str = "BE"
    koord_priority: str = ""  # koord-prod | koord-mid | koord-batch | koord-free | "" (none)
    # resources
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}  # Kubernetes PodLimits (containers summed, init containers as floors)
    containers: tuple[Container, ...] = ()
    devices: dict[str, DeviceRequest] = {}
    hints: dict[str, DeviceHint] = {}
    joint: JointSpec | None = None
    partition: PartitionSpec | None = None
    resource_spec: ResourceSpec = ResourceSpec()
    numa_spec: NUMASpec = NUMASpec()
    # where
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    required_nodes: tuple[str, ...] | None = None  # scheduling hint nodeNames (hard)
    preferred_nodes: tuple[str, ...] = ()  # scheduling hint preferredNodeNames, tried in order
    isolation_provider: str = ""
    gpu_filter: GpuFilter | None = None
    node_policy: str = ""  # HAMi node scheduler policy: binpack | spread | ""
    gpu_policy: str = ""  # HAMi GPU scheduler policy: binpack | spread | ""
    # quota and gang
    quota: str = ""
    preemptible: bool = True
    gang: GangDecl | None = None
    reservation: PodReservation = PodReservation()  # reservation affinity, exact match, ignored, allocated
    # a bound pod's allocation (spec.nodeName set): devices, cpuset and NUMA resources from its annotations
    bound: BoundAllocation | None = None
    # load-aware scheduling: the pod's own estimation annotations, and when its Initialized condition became True
    load_estimation: LoadEstimation | None = None
    initialized_at: int | None = None  # µs since the epoch

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpu_shared(self) -> bool:
        d = self.devices.get(n.GPU)
        return d is not None and d.shared


def _bool_label(labels: Mapping[str, str], key: str, default: bool, issues: list[FieldIssue]) -> bool:
    raw = labels.get(key)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    issues.append(FieldIssue(path=label_path(key), message='must be "true" or "false"', value=raw))
    return default


def _initialized_at(status: Mapping[str, Any], warnings: list[FieldIssue]) -> int | None:
    """When the pod's ``Initialized`` condition became True (load-aware scheduling's estimation deadline)."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return None
    for i, condition in enumerate(conditions):
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "Initialized"
            and condition.get("status") == "True"
            and condition.get("lastTransitionTime")
        ):
            unreadable: list[FieldIssue] = []
            at = parse_time(
                condition["lastTransitionTime"], f"status.conditions[{i}].lastTransitionTime", unreadable
            )
            warnings.extend(
                msgspec.structs.replace(w, code="Unreadable", message=f"{w.message}; not read")
                for w in unreadable
            )
            return at
    return None


# --- the pod -------------------------------------------------------------------------------------------------------


class _Priority(NamedTuple):
    priority: int
    class_name: str
    never: bool
    kube_qos: str
    koord_qos: str
    koord_priority: str


def _read_priority(
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    requests: dict[str, int],
    kube_qos: str,
    context: PodContext,
    issues: list[FieldIssue],
) -> _Priority:
    """Priority and priority class (refused combinations with the QoS class included), then the Koordinator QoS and
    priority classes with their defaults."""
    before_priority = len(issues)
    priority, pc_name, never, priority_given = read_priority(spec, context, issues)
    resolved = priority if priority_given else None
    issues.extend(
        qos_issues(
            labels,
            resolved,
            requests,
            priority_class_name=pc_name,
            check_priority=len(issues) == before_priority,
        )
    )
    koord_qos = koord_qos_of(labels, kube_qos)
    return _Priority(
        priority, pc_name, never, kube_qos, koord_qos, koord_priority_of(labels, resolved, koord_qos)
    )


class _Devices(NamedTuple):
    devices: dict[str, DeviceRequest]
    hints: dict[str, DeviceHint]
    joint: JointSpec | None
    partition: PartitionSpec | None
    resource_spec: ResourceSpec
    numa_spec: NUMASpec


def _read_devices(
    ann: Mapping[str, Any], requests: dict[str, int], start: int, issues: list[FieldIssue]
) -> _Devices:
    """The device annotations (hints, joint allocation, partition, resource and NUMA specs) and the device requests,
    computed only when nothing was refused so far (``start``: the issue count when reading began)."""
    hints = parse_hints(decode_annotation(dict(ann), n.ANN_DEVICE_ALLOCATE_HINT, issues), issues)
    joint = parse_joint(decode_annotation(dict(ann), n.ANN_DEVICE_JOINT_ALLOCATE, issues), issues)
    partition = parse_partition_spec(decode_annotation(dict(ann), n.ANN_GPU_PARTITION_SPEC, issues), issues)
    rspec = parse_resource_spec(decode_annotation(dict(ann), n.ANN_RESOURCE_SPEC, issues), issues)
    nspec = parse_numa_spec(decode_annotation(dict(ann), n.ANN_NUMA_TOPOLOGY_SPEC, issues), issues)
    strategies = {t: (h.allocate_strategy, h.exclusive_policy) for t, h in hints.items()}
    devices = device_requests(requests, strategies, issues) if len(issues) == start else {}
    for dtype, req in list(devices.items()):
        hint = hints.get(dtype)
        if hint is not None and hint.vf_selector is not None:
            # A virtual function is one unit of its NIC: Koordinator records (and accounts) ``1`` per VF whatever
            # the request says (``koordinator.sh/rdma: 100`` with a vfSelector asks for one VF).
            devices[dtype] = msgspec.structs.replace(
                req,
                per_instance={k: 1 for k in req.per_instance},
                total={k: max(req.count, 1) for k in req.total},
            )
    if joint is not None:
        kept = tuple(
            t for t in joint.device_types if t in devices and strategies.get(t, ("", ""))[0] != "ApplyForAll"
        )
        joint = JointSpec(device_types=kept, required_scope=joint.required_scope) if len(kept) > 1 else None
    return _Devices(devices, hints, joint, partition, rspec, nspec)


def _read_quota(labels: Mapping[str, str], context: PodContext, issues: list[FieldIssue]) -> tuple[str, bool]:
    """The elastic quota the pod names (checked against the known quotas when the door knows them) and whether
    it may be preempted."""
    quota = labels.get(QUOTA_LABEL, "")
    if quota and context.quotas is not None and quota not in context.quotas:
        issues.append(
            FieldIssue(
                path=label_path(QUOTA_LABEL),
                code="NotFound",
                message=f"elastic quota {quota} not found",
                value=quota,
            )
        )
    return quota, _bool_label(labels, PREEMPTIBLE_LABEL, True, issues)


def _read_bound(node_name: str, ann: Mapping[str, Any], warnings: list[FieldIssue]) -> BoundAllocation | None:
    """A bound pod's allocation from its annotations; on a pod not bound yet, a ``device-allocated`` annotation is
    a warning (the scheduler writes its own)."""
    if node_name:
        # The pod runs there whatever its annotations say: what cannot be read is reported and the pod is
        # accounted by its requests alone (its resources come back when it goes).
        unreadable: list[FieldIssue] = []
        bound = BoundAllocation()
        parse_device_allocated(
            decode_annotation(dict(ann), n.ANN_DEVICE_ALLOCATED, unreadable), unreadable, bound
        )
        parse_resource_status(
            decode_annotation(dict(ann), n.ANN_RESOURCE_STATUS, unreadable), unreadable, bound
        )
        warnings.extend(
            msgspec.structs.replace(
                i, code="Unreadable", message=f"{i.message}; the bound pod is accounted by its requests alone"
            )
            for i in unreadable
        )
        return bound
    if ann.get(n.ANN_DEVICE_ALLOCATED) not in (None, ""):
        warnings.append(
            not_acted_on(
                annotation_path(n.ANN_DEVICE_ALLOCATED),
                "set on a pod that is not bound: the scheduler writes its own allocation here at bind "
                "time, replacing this value",
            )
        )
    return None


def _read_sections(
    manifest: Mapping[str, Any], issues: list[FieldIssue]
) -> tuple[Meta, Mapping[str, Any], Mapping[str, Any]] | None:
    """Metadata, ``spec`` and ``status``; ``None`` when ``spec`` is not an object."""
    meta = read_meta(manifest, issues, namespaced=True)
    spec = manifest.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        issues.append(FieldIssue(path="spec", message="must be an object"))
        return None
    status = manifest.get("status") or {}
    if not isinstance(status, Mapping):
        issues.append(FieldIssue(path="status", message="must be an object"))
        status = {}
    if not isinstance(spec.get("containers"), list) or not spec.get("containers"):
        issues.append(
            FieldIssue(path="spec.containers", code="Required", message="at least one container is required")
        )
    return meta, spec, status


def _resource_issues(
    containers: tuple[Container, ...], ann: Mapping[str, Any], issues: list[FieldIssue]
) -> None:
    """What the pod's resources and annotations may not say: ``koordinator.sh/gpu: 0`` and the reserved
    ``reserve-pod`` annotation."""
    raw_gpu = [c.requests.get(n.KOORD_GPU, c.limits.get(n.KOORD_GPU)) for c in containers]
    if any(v == 0 for v in raw_gpu):
        issues.append(
            FieldIssue(
                path=f"spec.containers[*].resources.requests[{n.KOORD_GPU}]",
                code="InvalidValue",
                message='Invalid value: "0": the requested GPU must be greater than zero',
            )
        )
    if ANN_RESERVE_POD in ann:
        issues.append(
            FieldIssue(
                path=annotation_path(ANN_RESERVE_POD),
                code="Forbidden",
                message="Forbidden: cannot set in annotations (it marks the placeholder pods of Reservations)",
            )
        )


def parse_pod(
    manifest: Mapping[str, Any],
    issues: list[FieldIssue],
    warnings: list[FieldIssue],
    context: PodContext = DEFAULT_CONTEXT,
) -> Pod | None:
    """Read and validate a ``v1 Pod``, section by section; ``None`` (with ``issues``) when anything is refused."""
    start = len(issues)
    sections = _read_sections(manifest, issues)
    if sections is None:
        return None
    meta, spec, status = sections
    labels, ann = meta.labels, meta.annotations
    containers = read_containers(spec, issues)
    overhead = spec.get("overhead")
    if overhead is not None:
        if not isinstance(overhead, Mapping):
            issues.append(
                FieldIssue(path="spec.overhead", message="must be a mapping of resource name to quantity")
            )
        else:
            read_quantities(overhead, "spec.overhead", issues)
    if len(issues) > start:
        return None
    requests = pod_requests(spec, issues)
    kube_qos = kube_qos_of(containers)
    _resource_issues(containers, ann, issues)
    prio = _read_priority(spec, labels, requests, kube_qos, context, issues)
    dev = _read_devices(ann, requests, start, issues)
    where = read_where(spec, ann, issues, warnings)
    quota, preemptible = _read_quota(labels, context, issues)
    sub_priority = read_sub_priority(labels, issues)
    gang = read_pod_gang(meta.namespace, ann, labels, issues, warnings)
    reservation = parse_pod_reservation(ann, labels, issues)
    bound = _read_bound(where.node_name, ann, warnings)
    if len(issues) > start:
        return None
    load_estimation = read_load_estimation(ann, warnings)
    start_time = status.get("startTime")
    phase = status.get("phase")
    return Pod(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        labels=dict(sorted(labels.items())),
        owners=meta.owners,
        node_name=where.node_name,
        phase=phase if isinstance(phase, str) else "",
        terminating=meta.terminating,
        start_time=str(start_time) if start_time else None,
        priority=prio.priority,
        priority_class_name=prio.class_name,
        preemption_never=prio.never,
        sub_priority=sub_priority,
        kube_qos=prio.kube_qos,
        koord_qos=prio.koord_qos,
        koord_priority=prio.koord_priority,
        requests=requests,
        limits=pod_limits(containers),
        containers=containers,
        devices=dev.devices,
        hints=dev.hints,
        joint=dev.joint,
        partition=dev.partition,
        resource_spec=dev.resource_spec,
        numa_spec=dev.numa_spec,
        node_selector=where.node_selector,
        affinity=where.affinity,
        tolerations=where.tolerations,
        required_nodes=where.required_nodes,
        preferred_nodes=where.preferred_nodes,
        isolation_provider=labels.get(n.LABEL_GPU_ISOLATION_PROVIDER, ""),
        gpu_filter=where.gpu_filter,
        node_policy=where.node_policy,
        gpu_policy=where.gpu_policy,
        quota=quota,
        preemptible=preemptible,
        gang=gang,
        reservation=reservation,
        bound=bound,
        load_estimation=load_estimation,
        initialized_at=_initialized_at(status, warnings),
    )
