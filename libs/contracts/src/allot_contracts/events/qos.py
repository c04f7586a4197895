"""Node-side enforcement: what must hold for every bound pod on its node (the plan), what the node agent did about
it (applied, drift corrected, reconciled), the usage samples the node decisions are made from, and QoS evictions.

The plan is a decision of ``qos-enforcer@<node>`` (pure, from the log; replay re-derives it). The writes are the node
agent's (``qos-enforcer-agent@<node>``): every write is read back and recorded as applied or failed, with the error;
a periodic reconcile corrects drift and records what it found. Paths in the plan are cgroup directories relative to
each controller's root, as the kubelet names them; the agent maps settings to the v1 or v2 files of the node it runs
on (docs/enforcement.md has the table).
"""

from __future__ import annotations

from typing import Any

import msgspec

from allot_contracts.events._base import Event, FieldIssue, ObjectRef, PodEvent, PodOnNode


class CgroupTarget(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One cgroup whose values the plan sets.

    ``scope``: ``pod``, ``container`` or ``qos`` (the kubelet's BestEffort QoS-level cgroup). ``path``: the cgroup
    directory relative to a controller root (``kubepods.slice/kubepods-besteffort.slice/...``). ``settings``: knob ->
    value, knobs ``cpuset_cpus`` (cpu list), ``cpu_quota`` ({"quota_us": int | null, "period_us": int}),
    ``cpu_shares``, ``cpu_burst_us``, ``cpu_idle`` (bool), ``cpu_bvt_warp_ns`` (group identity, -1..2),
    ``memory_min``/``memory_low``/``memory_high``/``memory_max`` (bytes or "max"). ``why``: knob -> the rule that set
    it (Koordinator's setting and the numbers)."""

    scope: str
    path: str
    container: str = ""
    settings: dict[str, Any] = {}
    why: dict[str, str] = {}


class GpuShare(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU of a container's HAMi-core isolation: UUID (from the Device object), minor, memory (MiB), SM %."""

    uuid: str
    minor: int
    memory_mib: int
    cores: int


class GpuIsolation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """HAMi-core isolation of one container, delivered as a CDI device: ``device`` is its qualified name
    (``allot.dev/gpu=<pod-uid>-<container>``), ``env`` what the spec sets, ``annotations`` how the container asks for
    it (the pod annotation written at bind time, read by the NRI CDI device injector)."""

    container: str
    device: str
    gpus: list[GpuShare]
    env: dict[str, str] = {}
    annotations: dict[str, str] = {}
    disable_control: bool = False


class ResctrlGroup(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A resctrl control group: LLC ways as a percentage range of the cache (``llc_start``..``llc_end``) and memory
    bandwidth as a percentage, for every cache, or per cache id (``per_cache``: id -> {"llc": [start, end], "mb":
    percent})."""

    group: str
    llc_start: int = 0
    llc_end: int = 100
    mb_percent: int = 100
    per_cache: dict[str, dict[str, Any]] = {}


class QosPlan(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What must hold for one pod on its node. ``revision`` starts at 1 and grows each time the plan changes;
    ``resctrl`` names the group whose ``tasks`` receive the pod's processes (a class group, or the pod's own
    ``resctrl_group`` when it asks for one); ``warnings`` lists what was read but not acted on, with the reason."""

    revision: int
    cgroups: list[CgroupTarget] = []
    gpu: list[GpuIsolation] = []
    resctrl: str = ""
    resctrl_group: ResctrlGroup | None = None
    warnings: list[FieldIssue] = []


class QosPlanRecorded(PodOnNode, frozen=True, kw_only=True, tag="qos.plan_recorded.v1"):
    """The plan of a pod on its node, when it is first made for a pod that was not bound through Allot (observed) or
    when its inputs change (containers observed, node labels or devices, the CPU share pools); it replaces the
    previous revision. The plan made at bind time travels in ``qos.recorded``."""

    plan: QosPlan
    reason: str = ""


class QosPlanRemoved(PodOnNode, frozen=True, kw_only=True, tag="qos.plan_removed.v1"):
    """The pod left its node (deleted, evicted): nothing of its plan needs to hold any more."""

    reason: str


class QosNodePlanRecorded(Event, frozen=True, kw_only=True, tag="qos.node_plan_recorded.v1"):
    """What must hold on the node itself: the BestEffort QoS cgroup's CPU quota (BE suppression) and the resctrl
    groups of the QoS classes. ``basis`` holds the numbers behind the suppression (capacity, usage, budget)."""

    node: str
    revision: int
    cgroups: list[CgroupTarget] = []
    resctrl: list[ResctrlGroup] = []
    basis: dict[str, Any] = {}
    warnings: list[FieldIssue] = []


class PodUsage(msgspec.Struct, frozen=True, kw_only=True):
    cpu_milli: int
    memory_bytes: int


class QosUsageSampled(Event, frozen=True, kw_only=True, tag="qos.usage_sampled.v1"):
    """The node agent's measurement of its node (CPU in millicores over the sampling window, memory in bytes without
    reclaimable page cache) and of each pod it enforces (``pods``: "ns/name" -> usage). The input of BE suppression and
    memory-pressure eviction."""

    node: str
    cpu_capacity_milli: int
    cpu_used_milli: int
    memory_capacity_bytes: int
    memory_used_bytes: int
    pods: dict[str, PodUsage] = {}
    window_ms: int = 0


class WriteOutcome(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One write of the node agent, after reading it back. ``outcome``: ``applied`` (written, read back equal),
    ``unchanged`` (already held), ``refused`` (outside the cgroups the agent owns), ``missing`` (the cgroup or target
    does not exist), ``unsupported`` (the kernel lacks the controller or knob), ``rejected`` (the kernel refused the
    value), ``mismatch`` (read back differently), ``failed`` (any other error), ``planned`` (dry run). ``found`` is
    the value a drift correction replaced."""

    kind: str  # cgroup | cdi | resctrl
    target: str
    outcome: str
    value: str = ""
    readback: str = ""
    found: str = ""
    error: str = ""


class QosApplied(Event, frozen=True, kw_only=True, tag="qos.applied.v1"):
    """The node agent applied a plan revision (``pod`` None: the node plan). ``ok`` when every write holds;
    ``trigger``: ``plan`` (a new revision) or ``restart`` (re-applied after the agent started)."""

    node: str
    pod: ObjectRef | None = None
    uid: str = ""
    revision: int
    trigger: str = "plan"
    ok: bool
    results: list[WriteOutcome] = []


class QosDriftCorrected(Event, frozen=True, kw_only=True, tag="qos.drift_corrected.v1"):
    """A reconcile found values that no longer held (changed behind the agent's back) and wrote them again."""

    node: str
    pod: ObjectRef | None = None
    uid: str = ""
    revision: int
    corrected: list[WriteOutcome]


class QosReconciled(Event, frozen=True, kw_only=True, tag="qos.reconciled.v1"):
    """A periodic reconcile pass of the node agent: plans checked, values found drifted, writes still failing.
    Recorded when it found something, and otherwise at most once per record interval."""

    node: str
    plans: int
    checked: int
    drifted: int
    failed: int


class PodEvicted(PodOnNode, frozen=True, kw_only=True, tag="pod.evicted.v1"):
    """qos-enforcer evicted a BE pod from its node (``cause`` ``MemoryPressure``: node memory above the eviction
    threshold; ``detail`` holds the numbers). The binder enacts it: standalone, the pod is deleted; in Kubernetes
    mode, through the Eviction API (answered by ``pod.eviction_enacted``)."""

    cause: str
    message: str
    detail: dict[str, Any] = {}


class PodEvictionEnacted(PodEvent, frozen=True, kw_only=True, tag="pod.eviction_enacted.v1"):
    """Kubernetes mode: the API server's answer to the binder's Eviction of a ``pod.evicted`` pod (producer
    ``binder.kube``). ``evicted``: accepted, or that life of the pod is already gone (the pod's deletion then reaches
    the log as ``pod.deleted``); otherwise refused for good, ``message`` saying why. ``cause`` repeats the
    decision's."""

    node: str = ""
    cause: str = ""
    evicted: bool
    message: str


__all__ = [
    "CgroupTarget",
    "GpuIsolation",
    "GpuShare",
    "PodEvicted",
    "PodEvictionEnacted",
    "PodUsage",
    "QosApplied",
    "QosDriftCorrected",
    "QosNodePlanRecorded",
    "QosPlan",
    "QosPlanRecorded",
    "QosPlanRemoved",
    "QosReconciled",
    "QosUsageSampled",
    "ResctrlGroup",
    "WriteOutcome",
]
