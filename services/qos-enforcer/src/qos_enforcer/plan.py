"""The enforcement plan: what must hold on a node for each pod and for the node itself, from recorded facts only.

Pure (no IO, no clock): :func:`plan_pod` turns :class:`~qos_enforcer.podfacts.PodFacts` into a
:class:`~allot_contracts.events.qos.QosPlan`; :func:`plan_node` gives the node-level targets (BE suppression, the
QoS classes' resctrl groups); :func:`choose_evictions` picks BE pods to evict under memory pressure. Every value
carries the rule that set it (``why``) so ``allot explain`` can show it; everything read but not enforced is a
warning in the plan. The rules, with the Koordinator/HAMi setting each comes from, are tabled in docs/enforcement.md.

Per pod (paths as the kubelet names them, for the configured cgroup driver and root):

- cpuset: a pod with a ``resource-status`` cpuset (LSE/LSR, or any pod the scheduler bound CPUs for) gets it on the
  pod and its containers; with share pools on and the node's CPUs known, an LS pod gets the CPUs no bound pod holds
  and a BE pod the CPUs no LSE pod holds.
- CPU QoS (class ``cpuQOS.enable`` or the pod's ``koordinator.sh/cpuQOS``): group identity -> ``cpu.bvt_warp_ns``
  (kernels with the feature), ``schedIdle`` -> ``cpu.idle``; a BE pod is SCHED_IDLE unless ``schedIdle: 0``.
- batch resources (a pod asking ``kubernetes.io/batch-cpu`` / ``batch-memory``): ``cpu.shares`` from the batch-cpu
  request, the CFS quota from its limit, the memory limit from the batch-memory limit (what the kubelet cannot
  derive from extended resources).
- CPU burst (``cpuBurstStrategy`` ``cpuBurstOnly``/``auto``, or the pod's ``koordinator.sh/cpuBurst``), LS pods with
  CPU limits: ``cfs_burst_us = limit x cpuBurstPercent% x period``, capped at the quota (mainline kernels refuse a
  burst above the quota).
- memory QoS (class ``memoryQOS.enable`` or the pod's ``koordinator.sh/memoryQOS``): ``memory.min/low`` = request x
  min/low percent, ``memory.high`` = limit (or node allocatable) x throttling percent ("max" at 0); low and high are
  raised to min.
- GPU isolation (pod label and node label ``koordinator.sh/gpu-isolation-provider: HAMi-core``, GPUs allocated): one
  CDI device per container that asks for a GPU, with HAMi-core's environment and mounts.
- resctrl (class ``resctrlQOS.enable``): the class group ``allot-<class>``; the pod's ``node.koordinator.sh/resctrl``
  gives it its own group ``allot-pod-<uid>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from allot_contracts import gpu_isolation
from allot_contracts.events.qos import (
    CgroupTarget,
    GpuIsolation,
    GpuShare,
    QosPlan,
    QosUsageSampled,
    ResctrlGroup,
)
from allot_contracts.issues import FieldIssue, annotation_path, label_path
from allot_contracts.objects import names as n
from allot_contracts.objects.cpuset import format_cpuset
from qos_enforcer import cdi
from qos_enforcer.cgroups.mode import CgroupError
from qos_enforcer.cgroups.paths import container_cgroup, pod_cgroup, qos_cgroup
from qos_enforcer.config import (
    UNENFORCED_CPU_QOS,
    UNENFORCED_MEMORY_QOS,
    ClassQos,
    CpuQos,
    MemoryQos,
    QosConfig,
)
from qos_enforcer.podfacts import ANN_CPU_BURST, ANN_CPU_QOS, ANN_MEMORY_QOS, ANN_RESCTRL, NodeFacts, PodFacts

PERIOD_US: Final = 100_000
MIB: Final = 1 << 20
BATCH_CPU: Final = n.BATCH_CPU
BATCH_MEMORY: Final = n.BATCH_MEMORY


class SharePools(msgspec.Struct, frozen=True, kw_only=True):
    """The CPUs LS pods share (no bound pod holds them) and those BE pods share (no LSE pod holds them)."""

    ls: tuple[int, ...]
    be: tuple[int, ...]


def share_pools(node_cpus: Iterable[int], pods: Iterable[PodFacts]) -> SharePools | None:
    cpus = set(node_cpus)
    if not cpus:
        return None
    bound: set[int] = set()
    lse: set[int] = set()
    for pod in pods:
        bound.update(pod.cpuset)
        if pod.koord_qos == "LSE":
            lse.update(pod.cpuset)
    return SharePools(ls=tuple(sorted(cpus - bound)), be=tuple(sorted(cpus - lse)))


class _Target:
    """Settings being gathered for one cgroup."""

    def __init__(self, scope: str, path: str, container: str = "") -> None:
        self.scope, self.path, self.container = scope, path, container
        self.settings: dict[str, Any] = {}
        self.why: dict[str, str] = {}

    def set(self, knob: str, value: Any, why: str) -> None:
        self.settings[knob] = value
        self.why[knob] = why

    def done(self) -> CgroupTarget | None:
        if not self.settings:
            return None
        return CgroupTarget(
            scope=self.scope,
            path=self.path,
            container=self.container,
            settings=dict(sorted(self.settings.items())),
            why=dict(sorted(self.why.items())),
        )


def _total(values: Iterable[int | None]) -> int | None:
    """The sum, or None when any part is unlimited (None)."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _unread(
    raw: Mapping[str, Any],
    key: str,
    known: set[str],
    unenforced: Mapping[str, str],
    warnings: list[FieldIssue],
) -> None:
    """Warnings for the fields of a pod annotation that are read but not acted on."""
    path = annotation_path(key)
    for name in sorted(set(map(str, raw)) - known):
        why = unenforced.get(name, "unknown field; ignored")
        message = why if name not in unenforced else f"not enforced here: {why}"
        warnings.append(
            FieldIssue(path=f"{path}.{name}", message=message, code="NotSupported", value=str(raw[name]))
        )


def _cpu_qos(
    pod: PodFacts, strategy: ClassQos | None, warnings: list[FieldIssue]
) -> tuple[CpuQos | None, str]:
    base = strategy.cpu if strategy is not None else None
    override = pod.cpu_qos
    if override is None:
        return (
            (base, f"resourceQOSStrategy {pod.koord_qos} cpuQOS")
            if base is not None and base.enable
            else (None, "")
        )
    path = annotation_path(ANN_CPU_QOS)
    _unread(override, ANN_CPU_QOS, {"enable", "groupIdentity", "schedIdle"}, UNENFORCED_CPU_QOS, warnings)
    gi, idle = override.get("groupIdentity"), override.get("schedIdle")
    if gi is not None and (not isinstance(gi, int) or isinstance(gi, bool) or not -1 <= gi <= 2):
        warnings.append(
            FieldIssue(path=f"{path}.groupIdentity", message="must be an integer in -1..2", value=str(gi))
        )
        gi = None
    if idle is not None and idle not in (0, 1):
        warnings.append(FieldIssue(path=f"{path}.schedIdle", message="must be 0 or 1", value=str(idle)))
        idle = None
    if override.get("enable") is False:
        return None, ""
    return (
        CpuQos(
            enable=True,
            group_identity=gi if gi is not None else (base.group_identity if base else None),
            sched_idle=idle if idle is not None else (base.sched_idle if base else None),
        ),
        f"pod annotation {ANN_CPU_QOS}",
    )


def _memory_qos(
    pod: PodFacts, strategy: ClassQos | None, warnings: list[FieldIssue]
) -> tuple[MemoryQos | None, str]:
    base = strategy.memory if strategy is not None else MemoryQos()
    override = pod.memory_qos
    if override is None:
        return (base, f"resourceQOSStrategy {pod.koord_qos} memoryQOS") if base.enable else (None, "")
    _unread(
        override,
        ANN_MEMORY_QOS,
        {"enable", "policy", "minLimitPercent", "lowLimitPercent", "throttlingPercent"},
        UNENFORCED_MEMORY_QOS,
        warnings,
    )
    policy = override.get("policy", "auto")
    if policy == "none" or override.get("enable") is False:
        return None, ""
    path = annotation_path(ANN_MEMORY_QOS)
    values = {}
    for key, field in (
        ("minLimitPercent", "min_limit_percent"),
        ("lowLimitPercent", "low_limit_percent"),
        ("throttlingPercent", "throttling_percent"),
    ):
        value = override.get(key, getattr(base, field))
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
            warnings.append(
                FieldIssue(path=f"{path}.{key}", message="must be an integer in 0..100", value=str(value))
            )
            value = getattr(base, field)
        values[field] = value
    return MemoryQos(enable=True, **values), f"pod annotation {ANN_MEMORY_QOS}"


def _burst_percent(pod: PodFacts, config: QosConfig, warnings: list[FieldIssue]) -> tuple[int | None, str]:
    policy, percent, source = config.burst.policy, config.burst.cpu_burst_percent, "cpuBurstStrategy"
    if pod.cpu_burst is not None:
        path = annotation_path(ANN_CPU_BURST)
        _unread(
            pod.cpu_burst,
            ANN_CPU_BURST,
            {"policy", "cpuBurstPercent"},
            {
                "cfsQuotaBurstPercent": "cfsQuotaBurst (raising a throttled pod's quota) is not decided here",
                "cfsQuotaBurstPeriodSeconds": "cfsQuotaBurst (raising a throttled pod's quota) is not decided here",
            },
            warnings,
        )
        policy = pod.cpu_burst.get("policy", policy)
        raw = pod.cpu_burst.get("cpuBurstPercent", percent)
        if not isinstance(raw, int) or isinstance(raw, bool) or not 0 <= raw <= 10000:
            warnings.append(
                FieldIssue(
                    path=f"{path}.cpuBurstPercent", message="must be an integer in 0..10000", value=str(raw)
                )
            )
        else:
            percent = raw
        source = f"pod annotation {ANN_CPU_BURST}"
    if policy not in ("cpuBurstOnly", "auto"):
        return None, ""
    return percent, source


def _memory_values(
    request: int, limit: int | None, node_memory: int, mq: MemoryQos
) -> tuple[int | None, int | None, int | str | None]:
    low_min = request * mq.min_limit_percent // 100 if mq.min_limit_percent else None
    low = request * mq.low_limit_percent // 100 if mq.low_limit_percent else None
    high: int | str | None
    if mq.throttling_percent == 0:
        high = "max"
    elif limit:
        high = limit * mq.throttling_percent // 100
    else:
        high = node_memory * mq.throttling_percent // 100 if node_memory else None
    if low_min is not None and low is not None and low < low_min:
        low = low_min
    if low_min is not None and isinstance(high, int) and high < low_min:
        high = low_min
    return low_min, low, high


def _gpu(
    pod: PodFacts,
    node: NodeFacts,
    config: QosConfig,
    warnings: list[FieldIssue],
) -> list[GpuIsolation]:
    if pod.isolation_provider != gpu_isolation.HAMI_CORE or not pod.gpus:
        if pod.isolation_provider and pod.isolation_provider != gpu_isolation.HAMI_CORE:
            warnings.append(
                FieldIssue(
                    path=label_path(n.LABEL_GPU_ISOLATION_PROVIDER),
                    message="only HAMi-core isolation is enforced; this pod's GPUs are not isolated",
                    code="NotSupported",
                    value=pod.isolation_provider,
                )
            )
        return []
    if node.labels.get(n.LABEL_GPU_ISOLATION_PROVIDER) != gpu_isolation.HAMI_CORE:
        warnings.append(
            FieldIssue(
                path=label_path(n.LABEL_GPU_ISOLATION_PROVIDER),
                message=f"the node {node.name} does not offer HAMi-core isolation; the pod's GPUs are not isolated",
                code="Forbidden",
                value=gpu_isolation.HAMI_CORE,
            )
        )
        return []
    shares: list[GpuShare] = []
    for gpu in pod.gpus:
        info = node.gpus.get(gpu.minor)
        uuid = gpu.id or (info.uuid if info is not None else "")
        memory = gpu.memory_bytes
        if not memory and gpu.ratio and info is not None and info.memory_bytes:
            memory = info.memory_bytes * gpu.ratio // 100
        if not uuid:
            warnings.append(
                FieldIssue(
                    path=annotation_path(n.ANN_DEVICE_ALLOCATED, f".gpu[minor={gpu.minor}]"),
                    message=f"no UUID for GPU minor {gpu.minor} (neither the allocation nor the node's Device lists "
                    "one); the pod's GPUs are not isolated",
                    code="Required",
                )
            )
            return []
        shares.append(GpuShare(uuid=uuid, minor=gpu.minor, memory_mib=memory // MIB, cores=gpu.core or 100))
    paths = cdi.HamiCorePaths(
        libvgpu_host_path=config.hami.libvgpu_host_path,
        cache_host_dir=config.hami.cache_host_dir,
        lock_host_dir=config.hami.lock_host_dir,
        container_dir=config.hami.container_dir,
        ld_so_preload_host_path=config.hami.ld_so_preload_host_path,
    )
    out: list[GpuIsolation] = []
    for container in pod.containers:
        if not container.gpu:
            continue
        try:
            device = cdi.gpu_device(
                pod.uid,
                container.name,
                [cdi.GpuShare(uuid=s.uuid, memory_mib=s.memory_mib, cores=s.cores) for s in shares],
                paths,
                disable_control=container.disable_control,
            )
        except cdi.CdiError as error:
            warnings.append(
                FieldIssue(
                    path=annotation_path(n.ANN_DEVICE_ALLOCATED),
                    message=f"container {container.name}: {error}; not isolated",
                    code="InvalidField",
                )
            )
            continue
        env = dict(item.split("=", 1) for item in device.spec["devices"][0]["containerEdits"]["env"])
        out.append(
            GpuIsolation(
                container=container.name,
                device=device.qualified_name,
                gpus=shares,
                env=env,
                annotations=device.pod_annotation,
                disable_control=container.disable_control,
            )
        )
    return out


def _resctrl(
    pod: PodFacts, strategy: ClassQos | None, warnings: list[FieldIssue]
) -> tuple[str, ResctrlGroup | None]:
    if pod.resctrl is not None:
        group = parse_resctrl(pod.resctrl, f"allot-pod-{pod.uid}", warnings)
        if group is not None:
            return group.group, group
    if strategy is not None and strategy.resctrl.enable:
        return class_group(pod.koord_qos), None
    return "", None


def class_group(koord_qos: str) -> str:
    return f"allot-{'LSR' if koord_qos == 'LSE' else koord_qos}"


def _range(value: Any, path: str, warnings: list[FieldIssue]) -> tuple[int, int] | None:
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and 0 <= value[0] < value[1] <= 100
    ):
        return value[0], value[1]
    warnings.append(
        FieldIssue(
            path=path, message="must be [start, end] percentages, 0 <= start < end <= 100", value=str(value)
        )
    )
    return None


def _percent(value: Any, path: str, warnings: list[FieldIssue]) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100:
        return value
    warnings.append(FieldIssue(path=path, message="must be a percentage in 1..100", value=str(value)))
    return None


def parse_resctrl(raw: Mapping[str, Any], name: str, warnings: list[FieldIssue]) -> ResctrlGroup | None:
    """A pod's ``node.koordinator.sh/resctrl`` value (``{"llc": {"schemata": {"range": [a, b]}, "schemataPerCache":
    [{"cacheID", "range"}]}, "mb": {"schemata": {"percent": p}, "schemataPerCache": [{"cacheID", "percent"}]}}``) as
    the pod's own group; None (with warnings) when nothing in it is usable."""
    base = annotation_path(ANN_RESCTRL)
    _unread(raw, ANN_RESCTRL, {"llc", "mb"}, {}, warnings)
    llc, mb = raw.get("llc") or {}, raw.get("mb") or {}
    start, end, percent = 0, 100, 100
    per_cache: dict[str, dict[str, Any]] = {}
    usable = False
    if isinstance(llc, Mapping):
        if "range" in (llc.get("schemata") or {}):
            found = _range(llc["schemata"]["range"], f"{base}.llc.schemata.range", warnings)
            if found is not None:
                (start, end), usable = found, True
        for i, entry in enumerate(llc.get("schemataPerCache") or []):
            if isinstance(entry, Mapping) and isinstance(entry.get("cacheID"), int):
                found = _range(entry.get("range"), f"{base}.llc.schemataPerCache[{i}].range", warnings)
                if found is not None:
                    per_cache.setdefault(str(entry["cacheID"]), {})["llc"] = list(found)
                    usable = True
    if isinstance(mb, Mapping):
        if "percent" in (mb.get("schemata") or {}):
            found_percent = _percent(mb["schemata"]["percent"], f"{base}.mb.schemata.percent", warnings)
            if found_percent is not None:
                percent, usable = found_percent, True
        for i, entry in enumerate(mb.get("schemataPerCache") or []):
            if isinstance(entry, Mapping) and isinstance(entry.get("cacheID"), int):
                found_percent = _percent(
                    entry.get("percent"), f"{base}.mb.schemataPerCache[{i}].percent", warnings
                )
                if found_percent is not None:
                    per_cache.setdefault(str(entry["cacheID"]), {})["mb"] = found_percent
                    usable = True
    if not usable:
        warnings.append(FieldIssue(path=base, message="names no usable LLC range or MB percent; ignored"))
        return None
    return ResctrlGroup(
        group=name,
        llc_start=start,
        llc_end=end,
        mb_percent=percent,
        per_cache=dict(sorted(per_cache.items())),
    )


def plan_pod(
    pod: PodFacts,
    node: NodeFacts,
    config: QosConfig,
    *,
    revision: int,
    pools: SharePools | None = None,
) -> QosPlan:
    """What must hold on ``node`` for ``pod`` (see the module docstring for the rules)."""
    warnings: list[FieldIssue] = list(pod.issues)  # the config's own warnings go with the node plan
    strategy = config.qos_of(pod.koord_qos)
    kube_qos = pod.kube_qos if pod.kube_qos in ("Guaranteed", "Burstable", "BestEffort") else "BestEffort"
    targets: list[CgroupTarget] = []
    try:
        pod_path = pod_cgroup(pod.uid, kube_qos, config.cgroup_driver, config.cgroup_root)  # type: ignore[arg-type]
    except CgroupError as error:
        warnings.append(
            FieldIssue(path="metadata.uid", message=f"{error}; no cgroup can be named for it", value=pod.uid)
        )
        pod_path = ""
    if pod_path:
        pod_t = _Target("pod", pod_path)
        containers: list[tuple[_Target | None, Any]] = []
        for c in pod.containers:
            target = None
            if c.container_id:
                try:
                    target = _Target(
                        "container",
                        container_cgroup(pod_path, c.container_id, config.cgroup_driver, config.runtime),  # type: ignore[arg-type]
                        c.name,
                    )
                except CgroupError as error:
                    warnings.append(
                        FieldIssue(path="status.containerStatuses", message=f"container {c.name}: {error}")
                    )
            containers.append((target, c))
        all_targets = [pod_t] + [t for t, _ in containers if t is not None]

        # cpuset
        if pod.cpuset:
            value = format_cpuset(pod.cpuset)
            for t in all_targets:
                t.set("cpuset_cpus", value, f"{n.ANN_RESOURCE_STATUS} cpuset ({pod.koord_qos})")
        elif config.share_pools and pools is not None and pod.koord_qos in ("LS", "BE"):
            pool = pools.ls if pod.koord_qos == "LS" else pools.be
            holders = "bound" if pod.koord_qos == "LS" else "LSE"
            if pool:
                for t in all_targets:
                    t.set(
                        "cpuset_cpus",
                        format_cpuset(pool),
                        f"{pod.koord_qos} share pool (CPUs no {holders} pod holds)",
                    )
            else:
                warnings.append(
                    FieldIssue(
                        path="", message=f"the {pod.koord_qos} share pool is empty; cpuset left as it is"
                    )
                )

        # CPU QoS
        cpu_qos, cpu_source = _cpu_qos(pod, strategy, warnings)
        idle = False
        if cpu_qos is not None:
            if cpu_qos.group_identity is not None:
                pod_t.set("cpu_bvt_warp_ns", cpu_qos.group_identity, f"{cpu_source} groupIdentity")
            if cpu_qos.sched_idle is not None or pod.koord_qos == "BE":
                idle = (cpu_qos.sched_idle if cpu_qos.sched_idle is not None else 1) == 1
                pod_t.set(
                    "cpu_idle",
                    idle,
                    f"{cpu_source} schedIdle" + ("" if cpu_qos.sched_idle is not None else " (BE)"),
                )

        # batch resources (BE pods)
        batch_cpu_req = [c.requests.get(BATCH_CPU) for c in pod.containers]
        if any(BATCH_CPU in c.requests or {BATCH_CPU, BATCH_MEMORY} & set(c.limits) for c in pod.containers):
            for tg, c in [(pod_t, None), *containers]:
                if tg is None:
                    continue
                members = pod.containers if c is None else (c,)
                request = sum(m.requests.get(BATCH_CPU, 0) for m in members)
                cpu_limit = _total(m.limits.get(BATCH_CPU) for m in members)
                memory_limit = _total(m.limits.get(BATCH_MEMORY) for m in members)
                if request and not idle:
                    tg.set("cpu_shares", max(2, request * 1024 // 1000), f"{BATCH_CPU} request {request}m")
                if cpu_limit:
                    tg.set(
                        "cpu_quota",
                        {"quota_us": max(1000, cpu_limit * PERIOD_US // 1000), "period_us": PERIOD_US},
                        f"{BATCH_CPU} limit {cpu_limit}m",
                    )
                if memory_limit:
                    tg.set("memory_max", memory_limit, f"{BATCH_MEMORY} limit {memory_limit}")
            if idle and any(batch_cpu_req):
                warnings.append(
                    FieldIssue(
                        path="spec.containers[*].resources.requests[kubernetes.io/batch-cpu]",
                        message="cpu.shares not set: the pod is SCHED_IDLE (cpu.idle), whose weight the kernel fixes",
                        code="NotSupported",
                    )
                )

        # CPU burst (LS pods with CPU limits)
        percent, burst_source = _burst_percent(pod, config, warnings)
        if percent is not None and pod.koord_qos == "LS" and not pod.cpuset:
            bursts: list[int | None] = []
            for tg, c in containers:
                limit = c.limits.get("cpu")
                if not limit:
                    bursts.append(None)
                    continue
                quota = limit * PERIOD_US // 1000
                burst = min(limit * percent * PERIOD_US // 100_000, quota)
                bursts.append(burst)
                if tg is not None:
                    tg.set(
                        "cpu_burst_us",
                        burst,
                        f"{burst_source} cpuBurstPercent {percent}% of limit {limit}m (<= quota)",
                    )
            pod_burst = _total(bursts)
            if pod_burst:
                pod_t.set(
                    "cpu_burst_us",
                    pod_burst,
                    f"{burst_source} cpuBurstPercent {percent}% (sum of containers)",
                )

        # memory QoS
        mq, mem_source = _memory_qos(pod, strategy, warnings)
        if mq is not None:
            node_memory = node.allocatable.get("memory", 0)
            for tg, c in [(pod_t, None), *containers]:
                if tg is None:
                    continue
                members = pod.containers if c is None else (c,)
                request = sum(m.requests.get("memory", m.requests.get(BATCH_MEMORY, 0)) for m in members)
                limit = _total(m.limits.get("memory", m.limits.get(BATCH_MEMORY)) for m in members)
                low_min, low, high = _memory_values(request, limit, node_memory, mq)
                if low_min is not None:
                    tg.set(
                        "memory_min",
                        low_min,
                        f"{mem_source} minLimitPercent {mq.min_limit_percent}% of request",
                    )
                if low is not None:
                    tg.set(
                        "memory_low", low, f"{mem_source} lowLimitPercent {mq.low_limit_percent}% of request"
                    )
                if high is not None:
                    base = "limit" if limit else "node allocatable"
                    tg.set(
                        "memory_high",
                        high,
                        f"{mem_source} throttlingPercent {mq.throttling_percent}% of {base}",
                    )
        for t in all_targets:
            done = t.done()
            if done is not None:
                targets.append(done)

    gpu = _gpu(pod, node, config, warnings)
    resctrl, resctrl_group = _resctrl(pod, strategy, warnings)
    return QosPlan(
        revision=revision,
        cgroups=targets,
        gpu=gpu,
        resctrl=resctrl,
        resctrl_group=resctrl_group,
        warnings=_unique(warnings),
    )


def _unique(issues: Iterable[FieldIssue]) -> list[FieldIssue]:
    seen: set[tuple[str, str]] = set()
    out: list[FieldIssue] = []
    for issue in issues:
        if (issue.path, issue.message) not in seen:
            seen.add((issue.path, issue.message))
            out.append(issue)
    return out


def same_plan(a: QosPlan | None, b: QosPlan | None) -> bool:
    """Whether two plans require the same things (revisions aside)."""
    if a is None or b is None:
        return a is b
    return msgspec.structs.replace(a, revision=0) == msgspec.structs.replace(b, revision=0)


# --- the node ----------------------------------------------------------------------------------------------------


class NodePlan(msgspec.Struct, frozen=True, kw_only=True):
    cgroups: list[CgroupTarget] = []
    resctrl: list[ResctrlGroup] = []
    basis: dict[str, Any] = {}
    warnings: list[FieldIssue] = []
    be_quota_milli: int | None = None


def _is_be(pod: PodFacts) -> bool:
    return pod.koord_qos == "BE" or pod.kube_qos == "BestEffort"


def plan_node(
    node: NodeFacts,
    config: QosConfig,
    *,
    pods: Mapping[str, PodFacts],
    usage: QosUsageSampled | None,
    previous_quota: int | None,
) -> NodePlan:
    """The node-level targets: the BestEffort QoS cgroup (SCHED_IDLE with BE CPU QoS; BE suppression's CFS quota)
    and the resctrl groups of the classes that enable resctrl. The suppressed quota is kept while it moves less than
    ``suppressUpdateThresholdMilli`` from ``previous_quota``."""
    warnings = list(config.warnings)
    be = _Target("qos", qos_cgroup("BestEffort", config.cgroup_driver, config.cgroup_root))  # type: ignore[arg-type]
    be_strategy = config.qos_of("BE")
    if be_strategy is not None and be_strategy.cpu.enable:
        idle = be_strategy.cpu.sched_idle if be_strategy.cpu.sched_idle is not None else 1
        be.set("cpu_idle", idle == 1, "resourceQOSStrategy BE cpuQOS schedIdle")
        if be_strategy.cpu.group_identity is not None:
            be.set(
                "cpu_bvt_warp_ns",
                be_strategy.cpu.group_identity,
                "resourceQOSStrategy BE cpuQOS groupIdentity",
            )
    basis: dict[str, Any] = {}
    quota: int | None = None
    t = config.thresholds
    if t.enable and usage is not None:
        capacity = usage.cpu_capacity_milli
        pod_used = sum(u.cpu_milli for u in usage.pods.values())
        non_be = sum(
            u.cpu_milli for key, u in sorted(usage.pods.items()) if key in pods and not _is_be(pods[key])
        )
        system = max(usage.cpu_used_milli - pod_used, 0)
        reserved = max(node.capacity.get("cpu", 0) - node.allocatable.get("cpu", 0), 0)
        suppress = capacity * t.cpu_suppress_percent // 100 - non_be - max(system, reserved)
        budget = node.allocatable.get(BATCH_CPU)
        quota = max(min(suppress, budget) if budget is not None else suppress, t.cpu_suppress_min_milli)
        if previous_quota is not None and abs(quota - previous_quota) < t.suppress_update_milli:
            quota = previous_quota
        basis = {
            "capacity_milli": capacity,
            "threshold_percent": t.cpu_suppress_percent,
            "non_be_used_milli": non_be,
            "system_used_milli": system,
            "reserved_milli": reserved,
            "suppress_milli": suppress,
            "batch_budget_milli": budget,
            "floor_milli": t.cpu_suppress_min_milli,
            "be_quota_milli": quota,
        }
        be.set(
            "cpu_quota",
            {"quota_us": max(1000, quota * PERIOD_US // 1000), "period_us": PERIOD_US},
            f"BE suppression: {capacity}m x {t.cpu_suppress_percent}% - non-BE {non_be}m - "
            f"max(system {system}m, reserved {reserved}m)"
            + (f", within the batch budget {budget}m" if budget is not None else "")
            + f", at least {t.cpu_suppress_min_milli}m",
        )
    groups = []
    for qos in ("LSR", "LS", "BE"):
        strategy = config.classes.get(qos)
        if strategy is not None and strategy.resctrl.enable:
            groups.append(
                ResctrlGroup(
                    group=class_group(qos),
                    llc_start=strategy.resctrl.cat_start,
                    llc_end=strategy.resctrl.cat_end,
                    mb_percent=strategy.resctrl.mba_percent,
                )
            )
    done = be.done()
    return NodePlan(
        cgroups=[done] if done is not None else [],
        resctrl=groups,
        basis=basis,
        warnings=warnings,
        be_quota_milli=quota,
    )


def choose_evictions(
    usage: QosUsageSampled,
    pods: Mapping[str, PodFacts],
    config: QosConfig,
    *,
    exclude: Iterable[str] = (),
) -> tuple[list[str], dict[str, Any]]:
    """BE pods to evict when node memory is at or above ``memoryEvictThresholdPercent`` of capacity: lowest priority
    first, then largest memory use, then name, until what they use brings the node down to
    ``memoryEvictLowerPercent``. Returns the victims and the numbers behind the choice."""
    t = config.thresholds
    capacity, used = usage.memory_capacity_bytes, usage.memory_used_bytes
    if not t.enable or capacity <= 0 or used * 100 < capacity * t.memory_evict_percent:
        return [], {}
    target = capacity * t.memory_evict_lower_percent // 100
    skip = set(exclude)
    candidates = sorted(
        (key for key, pod in pods.items() if pod.koord_qos == "BE" and key not in skip),
        key=lambda key: (
            pods[key].priority,
            -(usage.pods[key].memory_bytes if key in usage.pods else 0),
            key,
        ),
    )
    victims: list[str] = []
    released = 0
    for key in candidates:
        if used - released <= target:
            break
        victims.append(key)
        released += usage.pods[key].memory_bytes if key in usage.pods else 0
    detail = {
        "memory_capacity_bytes": capacity,
        "memory_used_bytes": used,
        "threshold_percent": t.memory_evict_percent,
        "lower_percent": t.memory_evict_lower_percent,
        "released_bytes": released,
    }
    return victims, detail
