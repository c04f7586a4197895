"""The scheduling view of a pod: what placement derives from the pod read at the door.

Responsibility: ``pod_spec(pod, default_bind)`` turns a ``Pod`` (:mod:`allot_contracts.objects.pod`: parsed and
validated once, where it entered) into a ``PodSpec`` — the pod's requests, device requests, hints, selectors and
tolerations plus what depends on the scheduler's configuration (the CPU-bind intent) — or into the ``FieldIssue``
that makes the pod unplaceable under this configuration (the pod is then Rejected). ``PodSpec.key`` is the
decision-relevant part of the pod as canonical bytes: two pods with the same key are placed identically on the same
cluster state, which is what the engine's caches rely on. Identity (namespace, name, uid) is deliberately not part
of the key. ``by_name`` and ``reads_device_ids`` say which per-node identities (the node's name, its device ids)
the pod's filters read: the engine's caches key on those identities for such pods only, so identical machines share
results for every other pod.

CPU binding intent (Koordinator PreFilter): only LSE/LSR pods of priority class koord-prod bind CPUs on their own;
the bind policy is the resource-spec's required policy, else its preferred one, else the configured default.
A node whose ``cpu-bind-policy`` label forces binding is handled at filter time (see ``numa_eval``).
Pure; no IO.
"""

from __future__ import annotations

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import DeviceHint, JointSpec, PartitionSpec, ResourceSpec
from allot_contracts.objects.pod import GpuFilter, Pod
from allot_contracts.objects.requests import DeviceRequest
from allot_contracts.objects.selectors import NodeSelectorTerm, Toleration
from allot_placement.loadaware import PodLoad

__all__ = ["PodSpec", "pod_key", "pod_load", "pod_spec"]

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
    required_nodes: tuple[str, ...] | None  # scheduling hint nodeNames: only these nodes
    preferred_nodes: tuple[str, ...]  # scheduling hint preferredNodeNames: tried first, in order
    isolation_provider: str
    gpu_filter: GpuFilter | None  # HAMi use/nouse GPU types and UUIDs
    node_policy: str  # HAMi node scheduler policy (binpack | spread | "")
    gpu_policy: str  # HAMi GPU scheduler policy (binpack | spread | "")
    resource_spec: ResourceSpec  # the pod's own resource-spec (written back, completed, with a cpuset)
    by_name: (
        bool  # a filter reads the node's name (nodeName, matchFields, hint), so results are cached per name
    )
    # a filter reads the node's device ids (HAMi's use-/nouse-gpuuuid), so results are cached per device identity
    reads_device_ids: bool
    fit_order: tuple[tuple[str, int], ...]  # requests in NodeResourcesFit reporting order
    dev_key: bytes  # the device-relevant part of the pod (key of the engine's device-result cache)
    key: bytes  # the decision-relevant part of the pod (see the module docstring)
    load: PodLoad = PodLoad()  # what load-aware scheduling's estimate reads besides the requests

    @property
    def gpu_shared(self) -> bool:
        d = self.devices.get(n.GPU)
        return d is not None and d.shared


_FIT_FIRST = (n.PODS, n.CPU, n.MEMORY, n.EPHEMERAL_STORAGE)


def _fit_rank(name: str) -> tuple[int, str]:
    return (_FIT_FIRST.index(name) if name in _FIT_FIRST else len(_FIT_FIRST), name)


def pod_load(pod: Pod) -> PodLoad:
    """What load-aware scheduling's estimate reads of ``pod`` besides its requests."""
    return PodLoad(
        priority_class=pod.koord_priority,
        daemonset=any(o.kind == "DaemonSet" for o in pod.owners),
        limits=tuple(sorted(pod.limits.items())),
        estimation=pod.load_estimation,
    )


def pod_key(pod: Pod) -> bytes:
    """Canonical bytes of every pod field placement reads (not the pod's identity)."""
    return _ENCODER.encode(
        (
            pod.requests,
            pod.devices,
            pod.hints,
            pod.joint,
            pod.partition,
            pod.resource_spec,
            pod.numa_spec,
            pod.node_selector,
            pod.affinity,
            pod.tolerations,
            pod.node_name,
            pod.required_nodes,
            pod.preferred_nodes,
            pod.isolation_provider,
            pod.gpu_filter,
            pod.node_policy,
            pod.gpu_policy,
            pod.koord_qos,
            pod.koord_priority,
            pod.limits,
            [o.kind for o in pod.owners],
            pod.load_estimation,
        )
    )


def pod_spec(
    pod: Pod, default_bind: str = "FullPCPUs", key: bytes | None = None
) -> tuple[PodSpec | None, list[FieldIssue]]:
    """The placement view of ``pod``; ``None`` with the reason when this configuration cannot place it."""
    errors: list[FieldIssue] = []
    requests = pod.requests
    rspec, nspec = pod.resource_spec, pod.numa_spec
    # CPU binding intent (PreFilter).
    bind_required, bind_policy = "", ""
    if pod.koord_qos in ("LSE", "LSR") and pod.koord_priority == "koord-prod":
        policy = rspec.preferred_bind if rspec.preferred_bind not in ("", "Default") else default_bind
        req = default_bind if rspec.required_bind == "Default" else rspec.required_bind
        if req:
            policy = req
        if policy in ("FullPCPUs", "SpreadByPCPUs"):
            cpu = requests.get(n.CPU, 0)
            if cpu % 1000 != 0:
                errors.append(
                    FieldIssue(
                        path="spec.containers[*].resources.requests[cpu]",
                        code="InvalidCPURequest",
                        message=f"the requested CPUs must be integer for cpu bind policy {policy} "
                        f"(got {cpu}m)",
                    )
                )
            elif cpu > 0:
                bind_required, bind_policy = req, policy
    if errors:
        return None, errors
    exclusive = nspec.exclusive or ("Required" if nspec.policy else "")
    return PodSpec(
        requests=requests,
        devices=pod.devices,
        hints=pod.hints,
        joint=pod.joint,
        partition=pod.partition,
        bind_required=bind_required,
        bind_policy=bind_policy,
        cpu_exclusive="" if rspec.exclusive == "None" else rspec.exclusive,
        numa_policy=nspec.policy,
        numa_exclusive=exclusive,
        node_selector=pod.node_selector,
        affinity=pod.affinity,
        tolerations=pod.tolerations,
        node_name=pod.node_name,
        required_nodes=pod.required_nodes,
        preferred_nodes=pod.preferred_nodes,
        isolation_provider=pod.isolation_provider,
        gpu_filter=pod.gpu_filter,
        node_policy=pod.node_policy,
        gpu_policy=pod.gpu_policy,
        resource_spec=rspec,
        by_name=bool(pod.node_name)
        or pod.required_nodes is not None
        or any(term[1] for term in pod.affinity or ()),
        reads_device_ids=pod.gpu_filter is not None
        and bool(pod.gpu_filter.use_uuids or pod.gpu_filter.nouse_uuids),
        fit_order=tuple((r, requests[r]) for r in sorted(requests, key=_fit_rank)),
        key=key if key is not None else pod_key(pod),
        dev_key=_ENCODER.encode(
            (
                pod.devices,
                pod.hints,
                pod.joint,
                pod.partition,
                pod.isolation_provider,
                pod.gpu_filter,
                pod.gpu_policy,
            )
        ),
        load=pod_load(pod),
    ), []
