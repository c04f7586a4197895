"""Batch and mid overcommit, CPU normalization and resource amplification: Koordinator's slo-controller arithmetic.

Responsibility: from a node (capacity, allocatable, reservation, labels), its latest NodeMetric, the pods placed on it
and the co-location configuration, compute what the scheduler may additionally hand out on it —
``kubernetes.io/batch-cpu``/``batch-memory`` (reclaimed from high-priority pods), ``kubernetes.io/mid-cpu``/
``mid-memory``, NUMA-level batch resources — plus the CPU normalization ratio and the amplified cpu; and decide
whether a new result is worth recording (update suppression). Every number read is returned in ``inputs`` so that a
recorded decision can be checked by hand and re-derived by replay. Pure: no IO, no clock (``now`` is data).

Definitions (cpu in millicores, memory in bytes; ``pct(x, p) = x × p / 100`` rounded down):
- the node's strategy: ``allot_placement.overcommit_facts.node_strategy`` (nodeConfigs, the node's strategy
  annotation and ratio labels; off everywhere when the cluster strategy is off);
- nodeReserved = max(capacity − allocatable, the ``node.koordinator.sh/reservation`` annotation: its resources, or
  as many cores as its ``reservedCPUs`` lists);
- systemUsed = NodeMetric systemUsage + usage of the host applications above the resource's priority (batch: prod
  and mid ones; mid: prod ones); a NodeMetric without systemUsage gets upstream's definition, nodeUsage − Σ podUsage
  − Σ host applications, at least 0 (``NodeMetric.effective_system_usage``; ``inputs.systemUsageDerived`` names
  those resources);
- HP pods = placed pods whose priority class is not batch or free. Their usage is their pod metric (an LSE pod counts
  its cpu request), their request when they have none; metrics of HP pods Allot does not know ("dangling") add
  their usage. HP max-used-request = Σ max(request, usage) (+ dangling).
- batch: ``allot_placement.batchcalc`` (margin, policies, thresholds), for the node and for each NUMA zone of its
  NodeResourceTopology. With a normalization ratio above 1, batch-cpu (node and zones) is multiplied by it.
- Degrade: no NodeMetric, or one older than ``degradeTimeMinutes`` → batch and mid (both modes) are 0.
- mid (default mode) = max(min(prodReclaimable, capacity − nodeUsage), 0) + pct(unallocated, midUnallocatedPercent)
  (capacity − nodeUsage is 0 unless the NodeMetric reports both cpu and memory usage),
  unallocated = max(capacity − max(systemUsed, nodeReserved) − Σ prod requests, 0); static mode:
  pct(capacity, midStatic*ReservedPercent); both capped at pct(capacity, mid*ThresholdPercent).
- CPU normalization ratio (only where co-location is on): enabled by the strategy or by the node label
  ``node.koordinator.sh/cpu-normalization-enabled`` (the label wins); the ratio of the node's CPU model
  (``cpu-basic-info`` of its NodeResourceTopology) for its hyper-threading/turbo state, else ``defaultRatio``;
  ``1.00`` when disabled or unknown (with a note in ``inputs``).
- Amplification: the node annotation ``node.koordinator.sh/resource-amplification-ratio`` (JSON, e.g.
  ``{"cpu": 1.5}``) or, when enabled, the strategy's ratios; cpu's ratio is multiplied by the normalization ratio.
  An amplified resource's allocatable is ``ceil(allocatable × ratio)`` (ratios at most 1 leave it as it is); a
  strategy ratio that ends below 1 voids the strategy's amplification of the node.
- Suppression: a result is recorded when there is no previous one, when the enable/degrade state or a ratio
  changes, when a resource (of the node or of a NUMA zone) moves by more than ``resourceDiffThreshold`` of its
  previous value (or from 0), or when
  more than ``updateTimeThresholdSeconds`` have passed since the previous record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Final

import msgspec

from allot_contracts.objects import names as n
from allot_contracts.objects.colocation import (
    AmplificationStrategy,
    ColocationConfig,
    ColocationStrategy,
    NormalizationStrategy,
)
from allot_contracts.objects.nodemetric import NodeMetric
from allot_contracts.quantity import format_quantity
from allot_placement.batchcalc import HPPod, by_policy, hp_use, zone_batch
from allot_placement.overcommit_facts import (
    LABEL_NORMALIZATION_ENABLED,
    Amounts,
    CpuBasicInfo,
    NodeFacts,
    PodFacts,
    node_facts,
    node_read,
    node_strategy,
)

__all__ = [
    "CpuBasicInfo",
    "NodeFacts",
    "Overcommit",
    "PodFacts",
    "compute",
    "node_facts",
    "node_read",
    "node_strategy",
    "should_record",
]

LOW_PRIORITY: Final = frozenset({"koord-batch", "koord-free"})
ABOVE_BATCH: Final = frozenset({"koord-prod", "koord-mid"})  # host applications counted as system usage
ABOVE_MID: Final = frozenset({"koord-prod"})
BATCH: Final = (n.BATCH_CPU, n.BATCH_MEMORY)
MID: Final = (n.MID_CPU, n.MID_MEMORY)


class Overcommit(msgspec.Struct, frozen=True, kw_only=True):
    allocatable: dict[str, int | None]  # resource -> amount; None = the Node's own amount stands (reset)
    numa: dict[int, Amounts] = {}
    cpu_normalization_ratio: str = "1.00"
    amplification: dict[str, str] = {}
    degraded: bool = False
    enabled: bool = False
    degrade_time_minutes: int = 15  # the node's strategy's: when its NodeMetric goes stale
    inputs: dict[str, object] = {}  # every number the calculation read, for the event

    def quantities(self) -> dict[str, str]:
        """The allocatable as quantity text (``"0"`` for a reset resource, whose Node value then stands)."""
        return {
            k: format_quantity(k, v) if v is not None else "" for k, v in sorted(self.allocatable.items())
        }


# --- arithmetic -------------------------------------------------------------------------------------------------------
def _pct(value: int, percent: int) -> int:
    return value * percent // 100


def _ratio_mul(value: int, ratio: str) -> int:
    return int((Decimal(value) * Decimal(ratio)).to_integral_value(rounding=ROUND_CEILING))


def _sub(a: Mapping[str, int], *bs: Mapping[str, int]) -> Amounts:
    keys = set(a).union(*bs)
    return {k: a.get(k, 0) - sum(b.get(k, 0) for b in bs) for k in keys}


def _max(a: Mapping[str, int], b: Mapping[str, int]) -> Amounts:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in set(a) | set(b)}


def _plus(a: Mapping[str, int], b: Mapping[str, int]) -> Amounts:
    return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}


def _add_into(target: Amounts, values: Mapping[str, int]) -> None:
    for k, v in values.items():
        target[k] = target.get(k, 0) + v


def _cm(values: Mapping[str, int]) -> dict[str, int]:
    return {k: int(values.get(k, 0)) for k in (n.CPU, n.MEMORY)}


def normalization_ratio(strategy: NormalizationStrategy, node: NodeFacts) -> tuple[str, str]:
    """(ratio text, note)."""
    label = node.labels.get(LABEL_NORMALIZATION_ENABLED)
    enabled = strategy.enable if label not in ("true", "false") else label == "true"
    if not enabled:
        return "1.00", "disabled"
    if node.cpu is None:
        return "1.00", "no cpu-basic-info in the node's NodeResourceTopology"
    model = dict(strategy.ratio_model).get(node.cpu.model)
    ratio = None
    if model is not None:
        ht, turbo = node.cpu.hyper_threading, node.cpu.turbo
        ratio = (
            model.hyper_thread_turbo
            if ht and turbo
            else model.hyper_thread
            if ht
            else model.turbo
            if turbo
            else model.base
        )
    if ratio is None:
        ratio = strategy.default_ratio
    if ratio is None:
        return "1.00", f"no ratio for CPU model {node.cpu.model!r} and no defaultRatio"
    return (
        ratio,
        f"model {node.cpu.model!r} (hyper-threading {node.cpu.hyper_threading}, turbo {node.cpu.turbo})",
    )


def compute(
    config: ColocationConfig,
    node: NodeFacts,
    metric: NodeMetric | None,
    pods: Iterable[PodFacts],
    now: int,
) -> Overcommit | None:
    """The node's overcommit result, or None when no strategy applies to it (nothing to record)."""
    strategy, strategy_notes = node_strategy(config, node)
    _, normalization, amplification_cfg = config.for_node(node.labels)
    notes = [*node.notes, *strategy_notes]
    if strategy.enable:
        ratio, ratio_note = normalization_ratio(normalization, node)
    else:  # koord-manager's reconciler stops at a node whose co-location is off: no ratio is calculated
        ratio, ratio_note, amplification_cfg = (
            "1.00",
            "co-location is off for the node",
            AmplificationStrategy(),
        )
    amplification, amplification_note = _amplification(amplification_cfg, node, ratio)
    if amplification_note:
        notes.append(amplification_note)
    if not strategy.enable and not amplification:
        return None
    capacity, allocatable = _cm(node.capacity), _cm(node.allocatable)
    out: dict[str, int | None] = {}
    inputs: dict[str, object] = {
        "capacity": capacity,
        "allocatable": allocatable,
        "normalization": ratio_note,
        "strategy": {
            "enable": strategy.enable,
            "cpuReclaimThresholdPercent": strategy.cpu_reclaim_threshold_percent,
            "memoryReclaimThresholdPercent": strategy.memory_reclaim_threshold_percent,
            "cpuCalculatePolicy": strategy.cpu_calculate_policy,
            "memoryCalculatePolicy": strategy.memory_calculate_policy,
            "degradeTimeMinutes": strategy.degrade_time_minutes,
            "midReclaimMode": strategy.mid_reclaim_mode or "default",
        },
    }
    numa: dict[int, Amounts] = {}
    degraded = False
    if strategy.enable:
        degraded = (
            metric is None
            or metric.update_time is None
            or now - metric.update_time > strategy.degrade_time_minutes * 60_000_000
        )
        inputs["metricUpdateTime"] = metric.update_time if metric is not None else None
        batch, numa, mid = _batch_and_mid(
            strategy, node, metric, list(pods), capacity, allocatable, degraded, inputs
        )
        if ratio != "1.00" and Decimal(ratio) > 1:
            batch[n.BATCH_CPU] = _ratio_mul(batch[n.BATCH_CPU], ratio)
            for zone in numa.values():
                zone[n.BATCH_CPU] = _ratio_mul(zone[n.BATCH_CPU], ratio)
        out.update(batch)
        out.update(mid)
    else:
        for name in (*BATCH, *MID):
            out[name] = None
    for resource, r in sorted(amplification.items()):
        base = node.allocatable.get(resource)
        if base is not None and Decimal(r) > 1:
            out[resource] = _ratio_mul(base, r)
    if notes:
        inputs["notes"] = notes
    return Overcommit(
        allocatable=dict(sorted(out.items())),
        numa=dict(sorted(numa.items())),
        cpu_normalization_ratio=ratio,
        amplification=amplification,
        degraded=degraded,
        enabled=strategy.enable,
        degrade_time_minutes=strategy.degrade_time_minutes,
        inputs=inputs,
    )


def _amplification(cfg: AmplificationStrategy, node: NodeFacts, ratio: str) -> tuple[dict[str, str], str]:
    """(the ratios above or below 1, a note): cpu's ratio times the normalization ratio. From the strategy, a ratio
    that ends below 1 voids them all, as upstream's validation fails the node's whole calculation."""
    hand_written = node.amplification is not None
    ratios = dict(node.amplification or {}) if hand_written else dict(cfg.ratios) if cfg.enable else {}
    if ratio != "1.00":
        final = (Decimal(ratios.get(n.CPU, "1")) * Decimal(ratio)).quantize(Decimal("0.01"))
        if hand_written or final > 1:
            ratios[n.CPU] = str(final)
    below = sorted(k for k, v in ratios.items() if Decimal(v) < 1)
    if below and not hand_written:
        return {}, f"resource-amplification-config: a ratio below 1 for {', '.join(below)}; nothing amplified"
    return {k: v for k, v in sorted(ratios.items()) if Decimal(v) != 1}, ""


def _host_apps(metric: NodeMetric | None, priorities: frozenset[str]) -> Amounts:
    """Usage of the host applications whose priority is one of ``priorities``."""
    out: Amounts = {}
    for app in metric.host_apps if metric is not None else ():
        if app.priority in priorities:
            _add_into(out, app.usage)
    return _cm(out)


def _hp_pods(metric: NodeMetric | None, pods: list[PodFacts]) -> tuple[list[HPPod], list[Amounts], Amounts]:
    """The high-priority pods with their metrics, the usage of dangling HP metrics, and the prod pods' requests."""
    by_key: dict[str, Mapping[str, int]] = {}
    by_uid: dict[str, Mapping[str, int]] = {}
    for pm in metric.pods if metric is not None else ():
        if pm.key:
            by_key[pm.key] = pm.usage
        if pm.uid:
            by_uid[pm.uid] = pm.usage
    hp: list[HPPod] = []
    prod_request: Amounts = {}
    seen: set[str] = set()
    for pod in sorted(pods, key=lambda p: p.key):
        usage = by_key.get(pod.key)
        if usage is None and pod.uid:
            usage = by_uid.get(pod.uid)
        seen.add(pod.key)
        if pod.uid:
            seen.add(f"uid:{pod.uid}")
        if pod.priority_class in LOW_PRIORITY:
            continue
        request = _cm(pod.requests)
        hp.append(
            HPPod(
                request=dict(request),
                usage=None if usage is None else dict(_cm(usage)),
                lse=pod.qos == "LSE",
                numa=pod.numa,
            )
        )
        if pod.priority_class != "koord-mid":
            _add_into(prod_request, request)
    dangling = [
        _cm(pm.usage)
        for pm in (metric.pods if metric is not None else ())
        if not ((pm.key and pm.key in seen) or (pm.uid and f"uid:{pm.uid}" in seen))
        and pm.priority not in LOW_PRIORITY
    ]
    return hp, dangling, _cm(prod_request)


def _batch_and_mid(
    strategy: ColocationStrategy,
    node: NodeFacts,
    metric: NodeMetric | None,
    pods: list[PodFacts],
    capacity: Amounts,
    allocatable: Amounts,
    degraded: bool,
    inputs: dict[str, object],
) -> tuple[Amounts, dict[int, Amounts], Amounts]:
    """(node batch, NUMA-zone batch, mid), filling ``inputs``."""
    reserved = _cm(_max(_sub(capacity, allocatable), node.reservation))
    system = _cm(metric.effective_system_usage()) if metric is not None else _cm({})
    derived = [
        r for r in (metric.system_usage_derived() if metric is not None else ()) if r in (n.CPU, n.MEMORY)
    ]
    if derived:
        inputs["systemUsageDerived"] = derived
    system_batch = _plus(system, _host_apps(metric, ABOVE_BATCH))
    hp_pods, dangling, prod_request = _hp_pods(metric, pods)
    danglings = _cm({})
    for usage in dangling:
        _add_into(danglings, usage)
    hp = hp_use(hp_pods, danglings)
    found, calc = by_policy(strategy, capacity, reserved, system_batch, hp)
    batch = {k: int(v) for k, v in found.items()}
    numa = zone_batch(strategy, node.zones, system_batch, reserved, hp_pods, dangling) if node.zones else {}
    if degraded:
        batch = {k: 0 for k in batch}
        numa = {z: {k: 0 for k in v} for z, v in numa.items()}
    inputs.update(
        {
            "margin": calc["margin"],
            "nodeReserved": reserved,
            "systemUsed": calc["systemUsed"],
            "hpRequest": hp.request,
            "hpUsed": hp.used,
            "hpMaxUsedRequest": hp.max_used_request,
            "danglingHpUsed": danglings,
            "byUsage": calc["byUsage"],
            "byRequest": calc["byRequest"],
            "byMaxUsedRequest": calc["byMaxUsedRequest"],
        }
    )
    return batch, numa, _mid(strategy, metric, capacity, reserved, system, prod_request, degraded, inputs)


def _mid(
    strategy: ColocationStrategy,
    metric: NodeMetric | None,
    capacity: Amounts,
    reserved: Amounts,
    system: Amounts,
    prod_request: Amounts,
    degraded: bool,
    inputs: dict[str, object],
) -> Amounts:
    if degraded or metric is None:
        mid = {n.MID_CPU: 0, n.MID_MEMORY: 0}
    elif strategy.mid_reclaim_mode == "static":
        mid = {
            n.MID_CPU: _pct(capacity[n.CPU], strategy.mid_static_cpu_reserved_percent),
            n.MID_MEMORY: _pct(capacity[n.MEMORY], strategy.mid_static_memory_reserved_percent),
        }
    else:
        system_mid = _plus(system, _host_apps(metric, ABOVE_MID))
        reclaimable = _cm(metric.prod_reclaimable or {})
        known = metric.has_node_metric and n.CPU in metric.node_usage and n.MEMORY in metric.node_usage
        unused = _cm(_sub(capacity, metric.node_usage)) if known else {n.CPU: 0, n.MEMORY: 0}
        unallocated = {
            k: max(v, 0) for k, v in _cm(_sub(capacity, _max(system_mid, reserved), prod_request)).items()
        }
        inputs.update(
            {
                "midSystemUsed": system_mid,
                "prodReclaimable": reclaimable,
                "nodeUnused": unused,
                "unallocated": unallocated,
            }
        )
        mid = {
            name: max(min(reclaimable[plain], unused[plain]), 0)
            + _pct(unallocated[plain], strategy.mid_unallocated_percent)
            for name, plain in ((n.MID_CPU, n.CPU), (n.MID_MEMORY, n.MEMORY))
        }
    mid[n.MID_CPU] = min(mid[n.MID_CPU], _pct(capacity[n.CPU], strategy.mid_cpu_threshold_percent))
    mid[n.MID_MEMORY] = min(
        mid[n.MID_MEMORY], _pct(capacity[n.MEMORY], strategy.mid_memory_threshold_percent)
    )
    return mid


def _moved(old: int | None, new: int | None, threshold: Decimal) -> bool:
    if old is None or new is None:
        return old != new
    if old == 0:
        return new != 0
    return Decimal(abs(new - old)) > Decimal(old) * threshold


def should_record(
    previous: Overcommit | None, previous_at: int, result: Overcommit, now: int, strategy: ColocationStrategy
) -> bool:
    """Update suppression: is ``result`` different enough from ``previous`` (recorded at ``previous_at``)?"""
    if previous is None:
        return True
    if (
        previous.enabled != result.enabled
        or previous.degraded != result.degraded
        or previous.cpu_normalization_ratio != result.cpu_normalization_ratio
        or previous.amplification != result.amplification
        or set(previous.allocatable) != set(result.allocatable)
        or set(previous.numa) != set(result.numa)
    ):
        return True
    if now - previous_at > strategy.update_time_threshold_s * 1_000_000:  # strictly more, as upstream
        return True
    threshold = Decimal(strategy.resource_diff_threshold)
    zones = (  # the NodeResourceTopology's zones are updated on the same threshold
        _moved(previous.numa[z].get(k), v, threshold)
        for z, zone in result.numa.items()
        for k, v in zone.items()
    )
    return any(
        _moved(previous.allocatable.get(k), v, threshold) for k, v in result.allocatable.items()
    ) or any(zones)
