"""The node-level plan: the BestEffort QoS cgroup (SCHED_IDLE, BE suppression's CFS quota), the QoS classes'
resctrl groups, and which BE pods to evict under memory pressure. Pure (no IO, no clock)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from allot_contracts.events.qos import CgroupTarget, QosUsageSampled, ResctrlGroup
from allot_contracts.issues import FieldIssue
from qos_enforcer.cgroups.paths import qos_cgroup
from qos_enforcer.config import QosConfig
from qos_enforcer.plan_rules import BATCH_CPU, PERIOD_US, Target, class_group
from qos_enforcer.podfacts import NodeFacts, PodFacts

__all__ = ["NodePlan", "choose_evictions", "plan_node"]


class NodePlan(msgspec.Struct, frozen=True, kw_only=True):
    cgroups: list[CgroupTarget] = []
    resctrl: list[ResctrlGroup] = []
    basis: dict[str, int | None] = {}
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
    be = Target("qos", qos_cgroup("BestEffort", config.cgroup_driver, config.cgroup_root))  # type: ignore[arg-type]
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
    basis: dict[str, int | None] = {}
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
        budget = node.resource(BATCH_CPU)  # the newest node.allocatable_updated wins
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
) -> tuple[list[str], dict[str, int]]:
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
