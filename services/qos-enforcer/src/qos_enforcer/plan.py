"""The enforcement plan: what must hold on a node for each pod and for the node itself, from recorded facts only.

Pure (no IO, no clock): :func:`plan_pod` turns :class:`~qos_enforcer.podfacts.PodFacts` into a
:class:`~allot_contracts.events.qos.QosPlan`, applying the rules of :mod:`qos_enforcer.plan_rules` to the pod's
cgroups section by section; :mod:`qos_enforcer.plan_node` gives the node-level targets (BE suppression, the QoS
classes' resctrl groups) and picks BE pods to evict under memory pressure. Every value
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

from collections.abc import Iterable

import msgspec

from allot_contracts.events.qos import CgroupTarget, QosPlan
from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.cpuset import format_cpuset
from qos_enforcer.cgroups.mode import CgroupError
from qos_enforcer.cgroups.paths import container_cgroup, pod_cgroup
from qos_enforcer.config import ClassQos, QosConfig
from qos_enforcer.plan_rules import (
    BATCH_CPU,
    BATCH_MEMORY,
    PERIOD_US,
    Target,
    burst_percent,
    cpu_qos_of,
    gpu_plan,
    memory_qos_of,
    memory_values,
    resctrl_of,
    total,
)
from qos_enforcer.podfacts import ContainerFacts, NodeFacts, PodFacts

__all__ = ["SharePools", "plan_pod", "same_plan", "share_pools"]

_Containers = list[tuple[Target | None, ContainerFacts]]


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


def _cgroups(
    pod: PodFacts, config: QosConfig, pod_path: str, warnings: list[FieldIssue]
) -> tuple[Target, _Containers]:
    """The pod's cgroup and each container's (``None`` for a container whose cgroup cannot be named)."""
    containers: _Containers = []
    for c in pod.containers:
        target = None
        if c.container_id:
            try:
                target = Target(
                    "container",
                    container_cgroup(pod_path, c.container_id, config.cgroup_driver, config.runtime),  # type: ignore[arg-type]
                    c.name,
                )
            except CgroupError as error:
                warnings.append(
                    FieldIssue(path="status.containerStatuses", message=f"container {c.name}: {error}")
                )
        containers.append((target, c))
    return Target("pod", pod_path), containers


def _cpuset(
    pod: PodFacts,
    config: QosConfig,
    pools: SharePools | None,
    all_targets: list[Target],
    warnings: list[FieldIssue],
) -> None:
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
                FieldIssue(path="", message=f"the {pod.koord_qos} share pool is empty; cpuset left as it is")
            )


def _cpu_qos(pod: PodFacts, strategy: ClassQos | None, pod_t: Target, warnings: list[FieldIssue]) -> bool:
    """Group identity and SCHED_IDLE on the pod's cgroup; whether the pod is SCHED_IDLE."""
    cpu_qos, cpu_source = cpu_qos_of(pod, strategy, warnings)
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
    return idle


def _batch(
    pod: PodFacts, pod_t: Target, containers: _Containers, idle: bool, warnings: list[FieldIssue]
) -> None:
    """Batch resources (BE pods): shares from the batch-cpu request, CFS quota and memory limit from the limits."""
    batch_cpu_req = [c.requests.get(BATCH_CPU) for c in pod.containers]
    if not any(BATCH_CPU in c.requests or {BATCH_CPU, BATCH_MEMORY} & set(c.limits) for c in pod.containers):
        return
    for tg, c in [(pod_t, None), *containers]:
        if tg is None:
            continue
        members = pod.containers if c is None else (c,)
        request = sum(m.requests.get(BATCH_CPU, 0) for m in members)
        cpu_limit = total(m.limits.get(BATCH_CPU) for m in members)
        memory_limit = total(m.limits.get(BATCH_MEMORY) for m in members)
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


def _burst(
    pod: PodFacts, config: QosConfig, pod_t: Target, containers: _Containers, warnings: list[FieldIssue]
) -> None:
    """CPU burst (LS pods with CPU limits), capped at the quota."""
    percent, burst_source = burst_percent(pod, config, warnings)
    if percent is None or pod.koord_qos != "LS" or pod.cpuset:
        return
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
    pod_burst = total(bursts)
    if pod_burst:
        pod_t.set("cpu_burst_us", pod_burst, f"{burst_source} cpuBurstPercent {percent}% (sum of containers)")


def _memory_qos(
    pod: PodFacts,
    node: NodeFacts,
    strategy: ClassQos | None,
    pod_t: Target,
    containers: _Containers,
    warnings: list[FieldIssue],
) -> None:
    """memory.min / memory.low from the request, memory.high from the limit (or the node's allocatable)."""
    mq, mem_source = memory_qos_of(pod, strategy, warnings)
    if mq is None:
        return
    node_memory = node.allocatable.get("memory", 0)
    for tg, c in [(pod_t, None), *containers]:
        if tg is None:
            continue
        members = pod.containers if c is None else (c,)
        request = sum(m.requests.get("memory", m.requests.get(BATCH_MEMORY, 0)) for m in members)
        limit = total(m.limits.get("memory", m.limits.get(BATCH_MEMORY)) for m in members)
        low_min, low, high = memory_values(request, limit, node_memory, mq)
        if low_min is not None:
            tg.set("memory_min", low_min, f"{mem_source} minLimitPercent {mq.min_limit_percent}% of request")
        if low is not None:
            tg.set("memory_low", low, f"{mem_source} lowLimitPercent {mq.low_limit_percent}% of request")
        if high is not None:
            base = "limit" if limit else "node allocatable"
            tg.set("memory_high", high, f"{mem_source} throttlingPercent {mq.throttling_percent}% of {base}")


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
        pod_t, containers = _cgroups(pod, config, pod_path, warnings)
        all_targets = [pod_t] + [t for t, _ in containers if t is not None]
        _cpuset(pod, config, pools, all_targets, warnings)
        idle = _cpu_qos(pod, strategy, pod_t, warnings)
        _batch(pod, pod_t, containers, idle, warnings)
        _burst(pod, config, pod_t, containers, warnings)
        _memory_qos(pod, node, strategy, pod_t, containers, warnings)
        targets = [done for done in (t.done() for t in all_targets) if done is not None]
    gpu = gpu_plan(pod, node, config, warnings)
    resctrl, resctrl_group = resctrl_of(pod, strategy, warnings)
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
