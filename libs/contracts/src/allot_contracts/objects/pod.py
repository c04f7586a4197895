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
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, annotation_path, label_path
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
from allot_contracts.objects.meta import Owner, is_qualified_name, read_meta
from allot_contracts.objects.nodemetric import parse_time
from allot_contracts.objects.qos_rules import koord_priority_of, koord_qos_of, qos_issues
from allot_contracts.objects.requests import DeviceRequest, device_requests, pod_requests
from allot_contracts.objects.reservation import PodReservation, parse_pod_reservation
from allot_contracts.objects.selectors import (
    NodeSelectorTerm,
    Toleration,
    parse_node_selector_terms,
    parse_tolerations,
)
from allot_contracts.quantity import QuantityError, parse_quantity, to_canonical
from allot_contracts.quantity_limits import range_issue

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
_NATIVE: Final = frozenset({n.CPU, n.MEMORY, n.EPHEMERAL_STORAGE, n.PODS})


class PriorityClassInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A ``scheduling.k8s.io/v1`` PriorityClass as pods resolve it."""

    name: str
    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


# What every cluster has (the API server's system classes) and what a Koordinator installation adds.
BUILTIN_PRIORITY_CLASSES: Final = {
    c.name: c
    for c in (
        PriorityClassInfo(name="system-cluster-critical", value=2_000_000_000),
        PriorityClassInfo(name="system-node-critical", value=2_000_001_000),
        *(PriorityClassInfo(name=name, value=low) for name, low, _ in n.PRIORITY_BANDS),
    )
}


class PodContext(msgspec.Struct, frozen=True, kw_only=True):
    """What admission of a pod may consult besides the pod: the PriorityClasses known at the door, and (when the
    door knows them) the names of the elastic quotas that exist. ``quotas is None`` skips the quota check (a
    service learns about quotas from the log in order; the door checks)."""

    priority_classes: dict[str, PriorityClassInfo] = msgspec.field(
        default_factory=lambda: dict(BUILTIN_PRIORITY_CLASSES)
    )
    quotas: frozenset[str] | None = None
    # False for pods read from an API server: their spec.priority was computed by its priority admission from a
    # PriorityClass the door may not know; it is taken as given.
    resolve_priority: bool = True


DEFAULT_CONTEXT: Final = PodContext()


class Container(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One container's resources (canonical integers, after aliases) as node-side enforcement needs them."""

    name: str
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    init: bool = False


class GpuFilter(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """HAMi's pod-level GPU selection: allowed / excluded GPU models (substring match, as HAMi does) and UUIDs."""

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()


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


# --- containers ----------------------------------------------------------------------------------------------------


def _quantities(raw: Any, path: str, issues: list[FieldIssue]) -> dict[str, int]:
    """A container's requests or limits (names as written, canonical values), with name and range checks."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path=path, message="must be a map of resource name to quantity"))
        return {}
    out: dict[str, int] = {}
    for name, value in raw.items():
        fpath = f"{path}[{name}]"
        if not isinstance(name, str) or not is_qualified_name(name):
            issues.append(
                FieldIssue(
                    path=fpath,
                    code="InvalidResourceName",
                    message="must be a standard resource name or a fully qualified extended resource name "
                    "(e.g. 'example.com/foo')",
                    value=str(name)[:100],
                )
            )
            continue
        try:
            amount = to_canonical(name, parse_quantity(value))
        except QuantityError as exc:
            issues.append(FieldIssue(path=fpath, code="InvalidQuantity", message=str(exc)))
            continue
        problem = range_issue(name, amount, fpath, value)
        if problem is not None:
            issues.append(problem)
            continue
        out[name] = amount
    return out


def _containers(spec: Mapping[str, Any], issues: list[FieldIssue]) -> tuple[Container, ...]:
    out: list[Container] = []
    for field, init in (("containers", False), ("initContainers", True)):
        raw = spec.get(field)
        if raw is None:
            continue
        if not isinstance(raw, list):
            issues.append(FieldIssue(path=f"spec.{field}", message="must be a list"))
            continue
        for i, c in enumerate(raw):
            path = f"spec.{field}[{i}]"
            if not isinstance(c, Mapping):
                issues.append(FieldIssue(path=path, message="must be a container object"))
                continue
            res = c.get("resources") or {}
            if not isinstance(res, Mapping):
                issues.append(
                    FieldIssue(path=f"{path}.resources", message="must be an object with requests and limits")
                )
                continue
            requests = _quantities(res.get("requests"), f"{path}.resources.requests", issues)
            limits = _quantities(res.get("limits"), f"{path}.resources.limits", issues)
            for name in sorted(requests.keys() | limits.keys()):
                if name in _NATIVE or name.startswith(("hugepages-", "kubernetes.io/")):
                    continue
                if "/" not in name:
                    continue
                req, lim = requests.get(name), limits.get(name)
                if req is not None and lim is not None and req != lim:
                    issues.append(
                        FieldIssue(
                            path=f"{path}.resources.requests[{name}]",
                            code="InvalidValue",
                            message=f"must be equal to {name} limit of {res['limits'][name]}",
                            value=str(res["requests"][name]),
                        )
                    )
            cname = c.get("name")
            out.append(
                Container(
                    name=cname if isinstance(cname, str) else f"#{i}",
                    requests=dict(sorted(requests.items())),
                    limits=dict(sorted(limits.items())),
                    init=init,
                )
            )
    return tuple(out)


def _pod_limits(containers: tuple[Container, ...]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in containers:
        for k, v in c.limits.items():
            total[k] = max(total.get(k, 0), v) if c.init else total.get(k, 0) + v
    return dict(sorted(total.items()))


def _kube_qos(containers: tuple[Container, ...]) -> str:
    """Kubernetes QoS: Guaranteed (every container: cpu and memory limits == requests), BestEffort (no cpu or
    memory requests or limits anywhere), else Burstable. A request defaults to the limit."""
    if not containers:
        return "BestEffort"
    any_set = False
    guaranteed = True
    for c in containers:
        for res in (n.CPU, n.MEMORY):
            lim = c.limits.get(res)
            req = c.requests.get(res, lim)
            if req is not None or lim is not None:
                any_set = True
            if lim is None or req is None or req != lim:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# --- priority ------------------------------------------------------------------------------------------------------


def _priority(
    spec: Mapping[str, Any], context: PodContext, issues: list[FieldIssue]
) -> tuple[int, str, bool, bool]:
    """``(priority, priorityClassName, preemption_never, priority_given)`` as the priority admission computes."""
    raw = spec.get("priority")
    given: int | None = None
    if raw is not None:
        if isinstance(raw, bool) or not isinstance(raw, int) or not -(2**31) <= raw < 2**31:
            issues.append(
                FieldIssue(path="spec.priority", message="must be a 32-bit integer", value=str(raw))
            )
        else:
            given = raw
    name = spec.get("priorityClassName")
    policy = spec.get("preemptionPolicy")
    if policy is not None and policy not in ("Never", "PreemptLowerPriority"):
        issues.append(
            FieldIssue(
                path="spec.preemptionPolicy",
                code="NotSupported",
                message='supported values: "Never", "PreemptLowerPriority"',
                value=str(policy),
            )
        )
    if name not in (None, "") and given is not None and not context.resolve_priority:
        return given, str(name), policy == "Never", True
    if name not in (None, ""):
        if not isinstance(name, str):
            issues.append(FieldIssue(path="spec.priorityClassName", message="must be a string"))
            return given or 0, "", policy == "Never", given is not None
        pc = context.priority_classes.get(name)
        if pc is None:
            issues.append(
                FieldIssue(
                    path="spec.priorityClassName",
                    code="NotFound",
                    message=f"no PriorityClass with name {name} was found",
                    value=name,
                )
            )
            return given or 0, name, policy == "Never", given is not None
        if given is not None and given != pc.value:
            issues.append(
                FieldIssue(
                    path="spec.priority",
                    code="Forbidden",
                    message=f"the integer value of priority ({given}) must not be provided in pod spec; priority "
                    f"admission controller computed {pc.value} from the given PriorityClass name",
                )
            )
        never = (policy or pc.preemption_policy) == "Never"
        return pc.value, name, never, True
    if given is not None:
        return given, "", policy == "Never", True
    default = next(
        (c for c in sorted(context.priority_classes.values(), key=lambda c: c.name) if c.global_default), None
    )
    if default is not None:
        return default.value, default.name, (policy or default.preemption_policy) == "Never", True
    return 0, "", policy == "Never", False


# --- annotations ---------------------------------------------------------------------------------------------------


def _comma_list(ann: Mapping[str, Any], key: str) -> tuple[str, ...]:
    raw = ann.get(key)
    if raw is None:
        return ()
    return tuple(x.strip() for x in str(raw).split(",") if x.strip())


def _gpu_filter(ann: Mapping[str, Any]) -> GpuFilter | None:
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
    warnings.append(FieldIssue(path=annotation_path(key), code="Ignored", message=message, value=value))
    return ""


def _node_names(raw: Any, path: str, issues: list[FieldIssue]) -> tuple[str, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
        issues.append(FieldIssue(path=path, code="InvalidAnnotation", message="must be a list of node names"))
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
        issues.append(
            FieldIssue(path=annotation_path(key), code="InvalidAnnotation", message="must be an object")
        )
        return None, ()
    for field in sorted(set(value) - {"nodeNames", "preferredNodeNames", "extensions"}):
        issues.append(
            FieldIssue(
                path=annotation_path(key, f".{field}"),
                code="InvalidAnnotation",
                message="unknown field; supported: extensions, nodeNames, preferredNodeNames",
            )
        )
    if value.get("extensions"):
        warnings.append(
            FieldIssue(
                path=annotation_path(key, ".extensions"),
                code="Ignored",
                message="read but not acted on: no scheduling-hint extension is implemented",
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
    aff = spec.get("affinity")
    if aff is None:
        return None
    if not isinstance(aff, Mapping):
        issues.append(FieldIssue(path="spec.affinity", message="must be an object"))
        return None
    for kind in ("podAffinity", "podAntiAffinity"):
        if aff.get(kind):
            warnings.append(
                FieldIssue(
                    path=f"spec.affinity.{kind}",
                    code="Ignored",
                    message="read but not acted on: inter-pod affinity is not evaluated by Allot's placement",
                )
            )
    node_aff = aff.get("nodeAffinity")
    if node_aff is None:
        return None
    if not isinstance(node_aff, Mapping):
        issues.append(FieldIssue(path="spec.affinity.nodeAffinity", message="must be an object"))
        return None
    if node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"):
        warnings.append(
            FieldIssue(
                path="spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                code="Ignored",
                message="read but not acted on: preferred node affinity does not score nodes in Allot",
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


def parse_pod(
    manifest: Mapping[str, Any],
    issues: list[FieldIssue],
    warnings: list[FieldIssue],
    context: PodContext = DEFAULT_CONTEXT,
) -> Pod | None:
    """Read and validate a ``v1 Pod``; ``None`` (with ``issues``) when anything is refused."""
    start = len(issues)
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
    labels, ann = meta.labels, meta.annotations

    containers = _containers(spec, issues)
    overhead = spec.get("overhead")
    if overhead is not None:
        if not isinstance(overhead, Mapping):
            issues.append(
                FieldIssue(path="spec.overhead", message="must be a mapping of resource name to quantity")
            )
        else:
            _quantities(overhead, "spec.overhead", issues)
    if len(issues) > start:
        return None
    requests = pod_requests(spec, issues)
    raw_gpu = [c.requests.get(n.KOORD_GPU, c.limits.get(n.KOORD_GPU)) for c in containers]
    if any(v == 0 for v in raw_gpu):
        issues.append(
            FieldIssue(
                path=f"spec.containers[*].resources.requests[{n.KOORD_GPU}]",
                code="InvalidValue",
                message='Invalid value: "0": the requested GPU must be greater than zero',
            )
        )
    kube_qos = _kube_qos(containers)
    if ANN_RESERVE_POD in ann:
        issues.append(
            FieldIssue(
                path=annotation_path(ANN_RESERVE_POD),
                code="Forbidden",
                message="Forbidden: cannot set in annotations (it marks the placeholder pods of Reservations)",
            )
        )
    before_priority = len(issues)
    priority, pc_name, never, priority_given = _priority(spec, context, issues)
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
    koord_priority = koord_priority_of(labels, resolved, koord_qos)

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
            warnings.append(FieldIssue(path=annotation_path(key), code="Ignored", message=why))
    node_policy = _hami_policy(ann, HAMI_NODE_POLICY, ("binpack", "spread"), (), warnings)
    gpu_policy = _hami_policy(
        ann, HAMI_GPU_POLICY, ("binpack", "spread"), ("topology-aware", "mutex", "numa"), warnings
    )

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
    preemptible = _bool_label(labels, PREEMPTIBLE_LABEL, True, issues)
    sub_priority = read_sub_priority(labels, issues)
    gang = read_pod_gang(meta.namespace, ann, labels, issues, warnings)
    reservation = parse_pod_reservation(ann, labels, issues)

    bound: BoundAllocation | None = None
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
    elif ann.get(n.ANN_DEVICE_ALLOCATED) not in (None, ""):
        warnings.append(
            FieldIssue(
                path=annotation_path(n.ANN_DEVICE_ALLOCATED),
                code="Ignored",
                message="set on a pod that is not bound: the scheduler writes its own allocation here at bind "
                "time, replacing this value",
            )
        )
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
        node_name=node_name or "",
        phase=phase if isinstance(phase, str) else "",
        terminating=meta.terminating,
        start_time=str(start_time) if start_time else None,
        priority=priority,
        priority_class_name=pc_name,
        preemption_never=never,
        sub_priority=sub_priority,
        kube_qos=kube_qos,
        koord_qos=koord_qos,
        koord_priority=koord_priority,
        requests=requests,
        limits=_pod_limits(containers),
        containers=containers,
        devices=devices,
        hints=hints,
        joint=joint,
        partition=partition,
        resource_spec=rspec,
        numa_spec=nspec,
        node_selector=tuple(sorted((str(k), str(v)) for k, v in node_selector.items())),
        affinity=affinity,
        tolerations=tolerations,
        required_nodes=required_nodes,
        preferred_nodes=preferred_nodes,
        isolation_provider=labels.get(n.LABEL_GPU_ISOLATION_PROVIDER, ""),
        gpu_filter=_gpu_filter(ann),
        node_policy=node_policy,
        gpu_policy=gpu_policy,
        quota=quota,
        preemptible=preemptible,
        gang=gang,
        reservation=reservation,
        bound=bound,
        load_estimation=load_estimation,
        initialized_at=_initialized_at(status, warnings),
    )
