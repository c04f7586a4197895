"""What enforcement needs to know about a pod, read from its manifest and its binding annotations in one place.

This is the only module of qos-enforcer that reads a pod: the typed ``allot_contracts.objects.pod.Pod`` the door
read when the event carries one, and the manifest (through the pure helpers of :mod:`allot_contracts.kube` and
:mod:`allot_contracts.objects.annotations`) for what the typed pod does not carry; planning takes
:class:`PodFacts`.

Read: the Kubernetes and Koordinator QoS classes and the priority class (``koordinator.sh/qosClass`` or derived),
``spec.priority``, each container's name, requests and limits (canonical integers: cpu in millicores), whether it
asks for a GPU and whether it opts out of HAMi-core's control (env ``CUDA_DISABLE_CONTROL=true``), its container id
(``status.containerStatuses``), the ``koordinator.sh/gpu-isolation-provider`` label, the GPU allocation
(``scheduling.koordinator.sh/device-allocated``: minor, ``gpu-core``, ``gpu-memory``, ``gpu-memory-ratio``, id), the
cpuset (``scheduling.koordinator.sh/resource-status``) and the pod-level QoS annotations ``koordinator.sh/cpuQOS``,
``koordinator.sh/cpuBurst``, ``koordinator.sh/memoryQOS`` and ``node.koordinator.sh/resctrl``.

A value that cannot be read becomes a :class:`FieldIssue` in ``issues`` (with its field path) and the rest is still
read: enforcement then does what it can and the plan reports what it could not.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Final

import msgspec

from allot_contracts import gpu_isolation
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.kube import koord_priority_class, koord_qos_class, kube_qos_class, labels, priority_value
from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import (
    BoundAllocation,
    decode_annotation,
    decoded_object,
    parse_device_allocated,
    parse_resource_status,
)
from allot_contracts.objects.inventory import Inventory, parse_device_cr, parse_nrt
from allot_contracts.objects.pod import Pod
from allot_contracts.quantity import QuantityError, to_canonical

ANN_CPU_QOS: Final = "koordinator.sh/cpuQOS"
ANN_CPU_BURST: Final = "koordinator.sh/cpuBurst"
ANN_MEMORY_QOS: Final = "koordinator.sh/memoryQOS"
ANN_RESCTRL: Final = "node.koordinator.sh/resctrl"


class ContainerFacts(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    requests: dict[str, int]
    limits: dict[str, int]
    gpu: bool = False
    disable_control: bool = False
    container_id: str = ""


class GpuAlloc(msgspec.Struct, frozen=True, kw_only=True):
    """One allocated GPU: core %, memory bytes and memory ratio as allocated (0 when not given), the id if any."""

    minor: int
    core: int
    memory_bytes: int
    ratio: int
    id: str = ""


class PodFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A bound pod as the enforcement plan reads it: QoS classes, containers with their cgroup ids, GPUs, cpuset
    and the node-side QoS annotations. Distinct from reservation matching's and placement's ``PodFacts``, which
    read what scheduling needs, not what a node enforces."""

    key: str
    uid: str
    kube_qos: str
    koord_qos: str
    priority_class: str
    priority: int
    isolation_provider: str = ""
    containers: tuple[ContainerFacts, ...] = ()
    gpus: tuple[GpuAlloc, ...] = ()
    cpuset: tuple[int, ...] = ()
    cpu_qos: JsonObject | None = None
    cpu_burst: JsonObject | None = None
    memory_qos: JsonObject | None = None
    resctrl: JsonObject | None = None
    issues: tuple[FieldIssue, ...] = ()


def _mapping(value: JsonValue | Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    return value if isinstance(value, Mapping) else {}


def _quantities(raw: JsonValue | Mapping[str, str], path: str, issues: list[FieldIssue]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in sorted(_mapping(raw).items()):
        if not isinstance(value, str | int | float):
            message = f"quantity must be a string or number, got {type(value).__name__}"
            issues.append(FieldIssue(path=f"{path}[{name}]", message=message, code="InvalidQuantity"))
            continue
        try:
            out[str(name)] = to_canonical(str(name), value)
        except QuantityError as exc:
            issues.append(FieldIssue(path=f"{path}[{name}]", message=str(exc), code="InvalidQuantity"))
    return out


def _container_ids(manifest: Mapping[str, JsonValue]) -> dict[str, str]:
    statuses = _mapping(manifest.get("status")).get("containerStatuses")
    out: dict[str, str] = {}
    for entry in statuses if isinstance(statuses, list) else []:
        status = _mapping(entry)
        cid = str(status.get("containerID") or "")
        if status.get("name") and cid:
            out[str(status["name"])] = cid.split("://", 1)[-1]
    return out


def _named_containers(manifest: Mapping[str, JsonValue]) -> list[tuple[int, Mapping[str, JsonValue], str]]:
    """The manifest's containers with their index and name ("" when it has none, or not a string)."""
    raw = _mapping(manifest.get("spec")).get("containers")
    out: list[tuple[int, Mapping[str, JsonValue], str]] = []
    for i, entry in enumerate(raw if isinstance(raw, list) else []):
        container = _mapping(entry)
        name = container.get("name")
        out.append((i, container, name if isinstance(name, str) else ""))
    return out


def _control(container: Mapping[str, JsonValue]) -> tuple[bool, bool]:
    """What only a container's manifest says: whether it asks for a GPU, and opts out of HAMi-core's control."""
    env = container.get("env")
    disable = any(
        _mapping(e).get("name") == "CUDA_DISABLE_CONTROL" and str(_mapping(e).get("value")).lower() == "true"
        for e in (env if isinstance(env, list) else [])
    )
    return gpu_isolation.requests_gpu(container), disable


def _containers(manifest: Mapping[str, JsonValue], issues: list[FieldIssue]) -> tuple[ContainerFacts, ...]:
    ids = _container_ids(manifest)
    out: list[ContainerFacts] = []
    for i, container, name in _named_containers(manifest):
        path = f"spec.containers[{i}]"
        if not name:
            issues.append(FieldIssue(path=f"{path}.name", message="is required", code="Required"))
            continue
        resources = _mapping(container.get("resources"))
        limits = _quantities(resources.get("limits"), f"{path}.resources.limits", issues)
        requests = {**limits, **_quantities(resources.get("requests"), f"{path}.resources.requests", issues)}
        gpu, disable = _control(container)
        out.append(
            ContainerFacts(
                name=name,
                requests=requests,
                limits=limits,
                gpu=gpu,
                disable_control=disable,
                container_id=ids.get(name, ""),
            )
        )
    return tuple(out)


# GPU allocations by the device-allocated annotation's text, with the issues reading it raised: pods bound to the same
# share of the same GPU carry the same text, so most are read once. Cleared when it grows past the bound.
_GPUS: dict[str, tuple[tuple[GpuAlloc, ...], tuple[FieldIssue, ...]]] = {}
_GPUS_BOUND = 4096


def _gpus(annotations: Mapping[str, JsonValue], issues: list[FieldIssue]) -> tuple[GpuAlloc, ...]:
    text = annotations.get(n.ANN_DEVICE_ALLOCATED)
    if not isinstance(text, str):
        return _read_gpus(annotations, issues)
    got = _GPUS.get(text)
    if got is None:
        raised: list[FieldIssue] = []
        if len(_GPUS) >= _GPUS_BOUND:
            _GPUS.clear()
        got = _GPUS[text] = (_read_gpus(annotations, raised), tuple(raised))
    issues.extend(got[1])
    return got[0]


def _read_gpus(annotations: Mapping[str, JsonValue], issues: list[FieldIssue]) -> tuple[GpuAlloc, ...]:
    raw = decode_annotation(annotations, n.ANN_DEVICE_ALLOCATED, issues)
    bound = BoundAllocation()
    parse_device_allocated(raw, issues, bound)
    entries = _mapping(raw).get(n.GPU) if isinstance(raw, Mapping) else None
    ids = {
        e.get("minor"): str(e.get("id") or "")
        for e in (entries if isinstance(entries, list) else [])
        if isinstance(e, Mapping)
    }
    return tuple(
        GpuAlloc(
            minor=minor,
            core=resources.get(n.GPU_CORE, 0),
            memory_bytes=resources.get(n.GPU_MEMORY, 0),
            ratio=resources.get(n.GPU_MEMORY_RATIO, 0),
            id=ids.get(minor, ""),
        )
        for minor, resources, _ in bound.devices.get(n.GPU, [])
    )


def _json_object(
    annotations: Mapping[str, JsonValue], key: str, issues: list[FieldIssue]
) -> JsonObject | None:
    return decoded_object(decode_annotation(annotations, key, issues), key, issues, "must be a JSON object")


def _typed_containers(
    spec: Pod, manifest: Mapping[str, JsonValue], issues: list[FieldIssue]
) -> tuple[ContainerFacts, ...]:
    """The typed pod's containers (requests and limits as the door read them), with what only the manifest has:
    whether a container asks for a GPU, opts out of HAMi-core's control, and its container id (the manifest's
    quantities are not read again: the door's are taken)."""
    control = {name: _control(container) for _, container, name in _named_containers(manifest) if name}
    ids = _container_ids(manifest) if control else {}
    return tuple(
        ContainerFacts(
            name=c.name,
            requests={**c.limits, **c.requests},  # a limit without a request requests the limit (Kubernetes)
            limits=dict(c.limits),
            gpu=control[c.name][0] if c.name in control else False,
            disable_control=control[c.name][1] if c.name in control else False,
            container_id=ids.get(c.name, "") if c.name in control else "",
        )
        for c in spec.containers
        if not c.init
    )


class PendingFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What enforcement keeps of a pod from its submission until it is bound, read once when it arrives: its facts
    as far as the pod alone says them, and the little the binding's annotations are read with (see
    :func:`bound_facts`). Keeping this rather than the manifest and the door's pod keeps a burst of pending pods
    small."""

    facts: PodFacts  # no GPUs and no cpuset yet; ``issues``: those from reading the containers
    allocation: dict[str, JsonValue] | None = None  # the manifest's own device-allocated and resource-status
    # from the pod-level QoS annotations, listed after the allocation's
    qos_issues: tuple[FieldIssue, ...] = ()


_ALLOCATION_ANNOTATIONS: Final[tuple[str, ...]] = (n.ANN_DEVICE_ALLOCATED, n.ANN_RESOURCE_STATUS)


def pending_facts(manifest: Mapping[str, JsonValue], uid: str, spec: Pod | None = None) -> PendingFacts:
    """The facts of a pod before its binding: ``manifest`` (submitted or observed), ``uid`` its life, ``spec`` the pod
    as the door read it (``allot_contracts.objects.pod.Pod``): its QoS classes, priority, isolation provider and
    container resources are taken from it; the manifest is read for what it does not carry (container env and ids,
    the pod-level QoS annotations) and for events recorded before the door read pods."""
    issues: list[FieldIssue] = []
    meta = _mapping(manifest.get("metadata"))
    own = {str(k): v for k, v in _mapping(meta.get("annotations")).items()}
    if spec is not None:
        # the classes take a handful of values: one string each, not one per pending pod (as decoded from the event)
        kube_qos, koord_qos = sys.intern(spec.kube_qos), sys.intern(spec.koord_qos)
        priority_class, priority = sys.intern(spec.koord_priority or "none"), spec.priority
        isolation, containers = sys.intern(spec.isolation_provider), _typed_containers(spec, manifest, issues)
    else:
        kube_qos, koord_qos = kube_qos_class(manifest), koord_qos_class(manifest)
        priority_class, priority = koord_priority_class(manifest), priority_value(manifest)
        isolation = labels(manifest).get(n.LABEL_GPU_ISOLATION_PROVIDER, "")
        containers = _containers(manifest, issues)
    qos_issues: list[FieldIssue] = []
    facts = PodFacts(
        key=f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}",
        uid=uid,
        kube_qos=kube_qos,
        koord_qos=koord_qos,
        priority_class=priority_class,
        priority=priority,
        isolation_provider=isolation,
        containers=containers,
        cpu_qos=_json_object(own, ANN_CPU_QOS, qos_issues) if own else None,  # most pods have no annotations
        cpu_burst=_json_object(own, ANN_CPU_BURST, qos_issues) if own else None,
        memory_qos=_json_object(own, ANN_MEMORY_QOS, qos_issues) if own else None,
        resctrl=_json_object(own, ANN_RESCTRL, qos_issues) if own else None,
        issues=tuple(issues),
    )
    allocation = {key: own[key] for key in _ALLOCATION_ANNOTATIONS if key in own}
    return PendingFacts(facts=facts, allocation=allocation or None, qos_issues=tuple(qos_issues))


def bound_facts(pending: PendingFacts, bound_annotations: Mapping[str, JsonValue] | None = None) -> PodFacts:
    """The facts of a bound pod: ``pending`` completed with ``bound_annotations``, what the binding wrote
    (device-allocated, resource-status), else the manifest's own annotations (an observed pod). Issues in the order
    they are read: the resource status, the containers, the GPUs, the pod-level QoS annotations."""
    issues: list[FieldIssue] = []
    allocation = {**(pending.allocation or {}), **dict(bound_annotations or {})}
    status = BoundAllocation()
    parse_resource_status(decode_annotation(allocation, n.ANN_RESOURCE_STATUS, issues), issues, status)
    issues.extend(pending.facts.issues)
    gpus = _gpus(allocation, issues)
    return msgspec.structs.replace(
        pending.facts, gpus=gpus, cpuset=status.cpuset, issues=(*issues, *pending.qos_issues)
    )


def pod_facts(
    manifest: Mapping[str, JsonValue],
    uid: str,
    bound_annotations: Mapping[str, JsonValue] | None = None,
    spec: Pod | None = None,
) -> PodFacts:
    """The facts of a pod read whole at once (an observed pod): :func:`pending_facts` of ``manifest``, ``uid`` and
    ``spec`` completed by :func:`bound_facts` with ``bound_annotations``."""
    return bound_facts(pending_facts(manifest, uid, spec), bound_annotations)


class GpuInfo(msgspec.Struct, frozen=True, kw_only=True):
    uuid: str
    memory_bytes: int


class NodeFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What enforcement needs about the node: labels, allocatable and capacity (canonical integers), its GPUs by minor
    (from the Device object) and its CPUs (from the NodeResourceTopology). ``computed``: the batch/mid resources of
    the newest ``node.allocatable_updated``, which replace the Node object's own amounts (see :meth:`resource`)."""

    name: str
    labels: dict[str, str] = {}
    allocatable: dict[str, int] = {}
    computed: dict[str, int] = {}
    capacity: dict[str, int] = {}
    gpus: dict[int, GpuInfo] = {}
    cpus: tuple[int, ...] = ()

    def resource(self, name: str) -> int | None:
        """The allocatable amount of ``name`` as the scheduler sees it: the newest decision's when it names one (a
        Node recorded again later, e.g. the echo of the binder writing that decision, does not undo it), else the
        Node object's own; None when neither has it."""
        return self.computed.get(name, self.allocatable.get(name))


def node_facts(
    previous: NodeFacts | None,
    name: str,
    *,
    node: Mapping[str, JsonValue] | None = None,
    device: Mapping[str, JsonValue] | None = None,
    topology: Mapping[str, JsonValue] | None = None,
    inventory: Inventory | None = None,
    computed: Mapping[str, str] | None = None,
) -> NodeFacts:
    """``previous`` updated with a Node, Device or NodeResourceTopology manifest (already accepted by
    node-reporter; unreadable parts are left as they were). ``inventory``: the Device as read at the door, when the
    event carries it (the manifest is then not read again)."""
    facts = previous or NodeFacts(name=name)
    if node is not None:
        status = _mapping(node.get("status"))
        ignored: list[FieldIssue] = []
        allocatable = _quantities(
            status.get("allocatable") or status.get("capacity"), "status.allocatable", ignored
        )
        capacity = _quantities(
            status.get("capacity") or status.get("allocatable"), "status.capacity", ignored
        )
        facts = msgspec.structs.replace(
            facts, labels=labels(node), allocatable=allocatable, capacity=capacity
        )
    if computed is not None:  # a node.allocatable_updated replaces the previous one whole
        facts = msgspec.structs.replace(facts, computed=_quantities(computed, "allocatable", []))
    if device is not None or inventory is not None:
        if inventory is None and device is not None:
            _, inventory, _ = parse_device_cr(dict(device))
        gpus = {
            d.minor: GpuInfo(uuid=d.id, memory_bytes=d.resources.get(n.GPU_MEMORY, 0))
            for d in (inventory.devices.get(n.GPU, ()) if inventory is not None else ())
        }
        facts = msgspec.structs.replace(facts, gpus=gpus)
    if topology is not None:
        _, topo, _ = parse_nrt(dict(topology))
        facts = msgspec.structs.replace(facts, cpus=tuple(sorted(topo.cpus)) if topo is not None else ())
    return facts
