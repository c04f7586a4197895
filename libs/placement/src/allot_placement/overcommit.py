"""Batch and mid overcommit, CPU normalization and resource amplification: Koordinator's slo-controller arithmetic.

Responsibility: from a node (capacity, allocatable, reservation, labels), its latest NodeMetric, the pods placed on it
and the co-location configuration, compute what the scheduler may additionally hand out on it —
``kubernetes.io/batch-cpu``/``batch-memory`` (reclaimed from high-priority pods), ``kubernetes.io/mid-cpu``/
``mid-memory``, NUMA-level batch resources — plus the CPU normalization ratio and the amplified cpu; and decide
whether a new result is worth recording (update suppression). Every number read is returned in ``inputs`` so that a
recorded decision can be checked by hand and re-derived by replay. Pure: no IO, no clock (``now`` is data).

Definitions (cpu in millicores, memory in bytes; ``pct(x, p) = x × p / 100`` rounded down):
- margin = capacity − pct(capacity, reclaimThresholdPercent) (cpu 60, memory 65 by default);
- nodeReserved = max(capacity − allocatable, the ``node.koordinator.sh/reservation`` annotation's resources);
- systemUsed = max(NodeMetric systemUsage + usage of host applications that are not batch/free, nodeReserved);
  a NodeMetric without systemUsage gets upstream's definition, nodeUsage − Σ podUsage − Σ host applications,
  at least 0 (``NodeMetric.effective_system_usage``; ``inputs.systemUsageDerived`` names those resources);
- HP pods = placed pods whose priority class is not batch or free. Their usage is their pod metric (an LSE pod counts
  its cpu request), their request when they have none; metrics of HP pods Allot does not know ("dangling") add
  their usage. HP max-used-request = Σ max(request, usage) (+ dangling).
- byUsage = capacity − margin − systemUsed − HP used; byRequest = capacity − margin − nodeReserved − HP request;
  byMaxUsedReq = capacity − margin − systemUsed − HP max-used-request; each at least 0.
- batch-cpu = byMaxUsedReq when ``cpuCalculatePolicy: maxUsageRequest``, else byUsage; batch-memory per
  ``memoryCalculatePolicy`` (usage | request | maxUsageRequest); capped by ``batch*ThresholdPercent`` of capacity.
  With a normalization ratio above 1, batch-cpu is multiplied by it.
- Degrade: no NodeMetric, or one older than ``degradeTimeMinutes`` → batch (and mid in default mode) are 0.
- mid (default mode) = max(min(prodReclaimable, capacity − nodeUsage), 0) + pct(unallocated, midUnallocatedPercent),
  unallocated = max(capacity − max(systemUsed, nodeReserved) − Σ prod requests, 0); static mode:
  pct(capacity, midStatic*ReservedPercent); both capped at pct(capacity, mid*ThresholdPercent).
- NUMA-level batch: the node's batch resources split over its NUMA zones in proportion to each zone's allocatable
  (largest remainder, ties to the lower zone id, so the zones add up to the node exactly).
- CPU normalization ratio: enabled by the strategy or by the node label
  ``node.koordinator.sh/cpu-normalization-enabled`` (the label wins); the ratio of the node's CPU model
  (``cpu-basic-info`` of its NodeResourceTopology) for its hyper-threading/turbo state, else ``defaultRatio``;
  ``1.00`` when disabled or unknown (with a note in ``inputs``).
- Amplification: the node annotation ``node.koordinator.sh/resource-amplification-ratio`` (JSON, e.g.
  ``{"cpu": 1.5}``) or, when enabled, the strategy's ratios; cpu's ratio is multiplied by the normalization ratio.
  An amplified resource's allocatable is ``ceil(allocatable × ratio)`` (ratios at most 1 leave it as it is).
- Suppression: a result is recorded when there is no previous one, when the enable/degrade state or a ratio
  changes, when a resource moves by more than ``resourceDiffThreshold`` of its previous value (or from 0), or when
  ``updateTimeThresholdSeconds`` have passed since the previous record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.colocation import (
    AmplificationStrategy,
    ColocationConfig,
    ColocationStrategy,
    NormalizationStrategy,
    parse_ratio,
    parse_strategy,
)
from allot_contracts.objects.nodemetric import NodeMetric
from allot_contracts.quantity import QuantityError, format_quantity, to_canonical

__all__ = [
    "CpuBasicInfo",
    "NodeFacts",
    "Overcommit",
    "PodFacts",
    "compute",
    "node_facts",
    "should_record",
]

LABEL_NORMALIZATION_ENABLED: Final = "node.koordinator.sh/cpu-normalization-enabled"
ANN_AMPLIFICATION: Final = "node.koordinator.sh/resource-amplification-ratio"
ANN_COLOCATION_STRATEGY: Final = "node.koordinator.sh/colocation-strategy"
ANN_CPU_BASIC_INFO: Final = "node.koordinator.sh/cpu-basic-info"
LOW_PRIORITY: Final = frozenset({"koord-batch", "koord-free"})
BATCH: Final = (n.BATCH_CPU, n.BATCH_MEMORY)
MID: Final = (n.MID_CPU, n.MID_MEMORY)
Amounts = dict[str, int]


class CpuBasicInfo(msgspec.Struct, frozen=True, kw_only=True):
    model: str = ""
    hyper_threading: bool = False
    turbo: bool = False


class NodeFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the calculation reads of a Node (and of its NodeResourceTopology)."""

    name: str
    labels: dict[str, str] = {}
    capacity: Amounts = {}
    allocatable: Amounts = {}
    reservation: Amounts = {}
    amplification: dict[str, str] | None = None  # the node annotation, as ratio text
    strategy_override: dict[str, Any] | None = None  # the colocation-strategy annotation, as JSON
    cpu: CpuBasicInfo | None = None
    zones: dict[int, Amounts] = {}  # NUMA zone -> allocatable
    notes: tuple[str, ...] = ()  # annotations that could not be read


class PodFacts(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    uid: str = ""
    priority_class: str = ""
    qos: str = ""
    requests: Amounts = {}


class Overcommit(msgspec.Struct, frozen=True, kw_only=True):
    allocatable: dict[str, int | None]  # resource -> amount; None = the Node's own amount stands (reset)
    numa: dict[int, Amounts] = {}
    cpu_normalization_ratio: str = "1.00"
    amplification: dict[str, str] = {}
    degraded: bool = False
    enabled: bool = False
    inputs: dict[str, Any] = {}

    def quantities(self) -> dict[str, str]:
        """The allocatable as quantity text (``"0"`` for a reset resource, whose Node value then stands)."""
        return {
            k: format_quantity(k, v) if v is not None else "" for k, v in sorted(self.allocatable.items())
        }


# --- reading a Node ---------------------------------------------------------------------------------------------------
def _amounts(raw: Any) -> Amounts:
    out: Amounts = {}
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            try:
                out[str(k)] = to_canonical(str(k), v)
            except (QuantityError, TypeError):
                continue
    return out


def _json(value: Any) -> Any:
    if isinstance(value, str):
        return json.loads(value)
    return value


def node_facts(
    manifest: Mapping[str, Any], topology: Mapping[str, Any] | None, zones: Mapping[int, Amounts]
) -> NodeFacts:
    """The facts of a registered Node (and its NodeResourceTopology); unreadable annotations become notes."""
    meta = manifest.get("metadata") or {}
    status = manifest.get("status") or {}
    ann = meta.get("annotations") or {}
    notes: list[str] = []
    capacity = _amounts(status.get("capacity")) or _amounts(status.get("allocatable"))
    allocatable = _amounts(status.get("allocatable")) or dict(capacity)
    reservation: Amounts = {}
    if n.ANN_NODE_RESERVATION in ann:
        try:
            reservation = _amounts((_json(ann[n.ANN_NODE_RESERVATION]) or {}).get("resources"))
        except (ValueError, AttributeError):
            notes.append(f"annotation {n.ANN_NODE_RESERVATION} is not valid JSON; not read")
    amplification = None
    if ANN_AMPLIFICATION in ann:
        issues: list[FieldIssue] = []
        try:
            raw = _json(ann[ANN_AMPLIFICATION])
            amplification = {
                str(k): r
                for k, v in sorted((raw or {}).items())
                if (r := parse_ratio(v, f"{ANN_AMPLIFICATION}.{k}", issues, low="0")) is not None
            }
        except (ValueError, AttributeError):
            notes.append(f"annotation {ANN_AMPLIFICATION} is not valid JSON; not read")
        notes.extend(str(i) for i in issues)
    override = None
    if ANN_COLOCATION_STRATEGY in ann:
        try:
            override = _json(ann[ANN_COLOCATION_STRATEGY])
            if not isinstance(override, dict):
                raise ValueError("not an object")
        except ValueError:
            override = None
            notes.append(f"annotation {ANN_COLOCATION_STRATEGY} is not a JSON object; not read")
    cpu = None
    tann = ((topology or {}).get("metadata") or {}).get("annotations") or {}
    if ANN_CPU_BASIC_INFO in tann:
        try:
            info = _json(tann[ANN_CPU_BASIC_INFO]) or {}
            cpu = CpuBasicInfo(
                model=str(info.get("cpuModel") or ""),
                hyper_threading=info.get("hyperThreadEnabled") is True,
                turbo=info.get("turboEnabled") is True,
            )
        except (ValueError, AttributeError):
            notes.append(f"topology annotation {ANN_CPU_BASIC_INFO} is not valid JSON; not read")
    return NodeFacts(
        name=str(meta.get("name") or ""),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        capacity=capacity,
        allocatable=allocatable,
        reservation=reservation,
        amplification=amplification,
        strategy_override=override,
        cpu=cpu,
        zones={int(z): dict(v) for z, v in zones.items()},
        notes=tuple(notes),
    )


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


def _split(total: int, weights: Mapping[int, int]) -> dict[int, int]:
    den = sum(weights.values())
    if den <= 0:
        return {z: 0 for z in weights}
    out = {z: total * w // den for z, w in weights.items()}
    rest = total - sum(out.values())
    order = sorted(weights, key=lambda z: (-(total * weights[z] % den), z))
    for z in order[:rest]:
        out[z] += 1
    return out


def compute(
    config: ColocationConfig,
    node: NodeFacts,
    metric: NodeMetric | None,
    pods: Iterable[PodFacts],
    now: int,
) -> Overcommit | None:
    """The node's overcommit result, or None when no strategy applies to it (nothing to record)."""
    strategy, normalization, amplification_cfg = config.for_node(node.labels)
    notes = list(node.notes)
    if node.strategy_override is not None:
        issues: list[FieldIssue] = []
        strategy = parse_strategy(node.strategy_override, ANN_COLOCATION_STRATEGY, issues, [], strategy)
        notes.extend(str(i) for i in issues)
    ratio, ratio_note = normalization_ratio(normalization, node)
    amplification = _amplification(amplification_cfg, node, ratio)
    if not strategy.enable and ratio == "1.00" and not amplification:
        return None
    capacity, allocatable = _cm(node.capacity), _cm(node.allocatable)
    out: dict[str, int | None] = {}
    inputs: dict[str, Any] = {
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
        batch, mid = _batch_and_mid(
            strategy, node, metric, list(pods), capacity, allocatable, degraded, inputs
        )
        if ratio != "1.00" and Decimal(ratio) > 1:
            batch[n.BATCH_CPU] = _ratio_mul(batch[n.BATCH_CPU], ratio)
        out.update(batch)
        out.update(mid)
        if node.zones:
            for name in BATCH:
                plain = n.CPU if name == n.BATCH_CPU else n.MEMORY
                for zone, amount in _split(
                    batch[name], {z: v.get(plain, 0) for z, v in node.zones.items()}
                ).items():
                    numa.setdefault(zone, {})[name] = amount
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
        inputs=inputs,
    )


def _amplification(cfg: AmplificationStrategy, node: NodeFacts, ratio: str) -> dict[str, str]:
    ratios = (
        dict(node.amplification) if node.amplification is not None else dict(cfg.ratios) if cfg.enable else {}
    )
    if ratio != "1.00":
        base = Decimal(ratios.get(n.CPU, "1"))
        ratios[n.CPU] = str((base * Decimal(ratio)).quantize(Decimal("0.01")))
    return {k: v for k, v in sorted(ratios.items()) if Decimal(v) != 1}


def _batch_and_mid(
    strategy: ColocationStrategy,
    node: NodeFacts,
    metric: NodeMetric | None,
    pods: list[PodFacts],
    capacity: Amounts,
    allocatable: Amounts,
    degraded: bool,
    inputs: dict[str, Any],
) -> tuple[Amounts, Amounts]:
    margin = {
        n.CPU: capacity[n.CPU] - _pct(capacity[n.CPU], strategy.cpu_reclaim_threshold_percent),
        n.MEMORY: capacity[n.MEMORY] - _pct(capacity[n.MEMORY], strategy.memory_reclaim_threshold_percent),
    }
    reserved = _cm(_max(_sub(capacity, allocatable), node.reservation))
    by_key: dict[str, Mapping[str, int]] = {}
    by_uid: dict[str, Mapping[str, int]] = {}
    priority_of: dict[str, str] = {}
    system = metric.effective_system_usage() if metric is not None else {}
    if metric is not None:
        for pm in metric.pods:
            if pm.key:
                by_key[pm.key] = pm.usage
            if pm.uid:
                by_uid[pm.uid] = pm.usage
        for app in metric.host_apps:
            if app.priority not in LOW_PRIORITY:
                _add_into(system, app.usage)
    system_used = _cm(_max(_cm(system), reserved))
    derived = [
        r for r in (metric.system_usage_derived() if metric is not None else ()) if r in (n.CPU, n.MEMORY)
    ]
    if derived:
        inputs["systemUsageDerived"] = derived
    hp_request: Amounts = {}
    hp_used: Amounts = {}
    hp_max: Amounts = {}
    prod_request: Amounts = {}
    seen: set[str] = set()
    for pod in sorted(pods, key=lambda p: p.key):
        usage = by_key.get(pod.key) or (by_uid.get(pod.uid) if pod.uid else None)
        seen.add(pod.key)
        if pod.uid:
            seen.add(f"uid:{pod.uid}")
        priority_of[pod.key] = pod.priority_class
        if pod.priority_class in LOW_PRIORITY:
            continue
        req = _cm(pod.requests)
        used = _cm(usage) if usage else dict(req)
        if usage and pod.qos == "LSE":
            used[n.CPU] = req[n.CPU]
        _add_into(hp_request, req)
        _add_into(hp_used, used)
        _add_into(hp_max, _max(req, used))
        if pod.priority_class not in ("koord-mid",):
            _add_into(prod_request, req)
    dangling: Amounts = {}
    if metric is not None:
        for pm in metric.pods:
            known = (pm.key and pm.key in seen) or (pm.uid and f"uid:{pm.uid}" in seen)
            if not known and pm.priority not in LOW_PRIORITY:
                _add_into(dangling, _cm(pm.usage))
    _add_into(hp_used, dangling)
    _add_into(hp_max, dangling)
    hp_request, hp_used, hp_max = _cm(hp_request), _cm(hp_used), _cm(hp_max)

    def floor0(values: Mapping[str, int]) -> Amounts:
        return {k: max(v, 0) for k, v in _cm(values).items()}

    by_usage = floor0(_sub(capacity, margin, system_used, hp_used))
    by_request = floor0(_sub(capacity, margin, reserved, hp_request))
    by_max = floor0(_sub(capacity, margin, system_used, hp_max))
    cpu = by_max[n.CPU] if strategy.cpu_calculate_policy == "maxUsageRequest" else by_usage[n.CPU]
    memory = {"request": by_request, "maxUsageRequest": by_max}.get(
        strategy.memory_calculate_policy, by_usage
    )[n.MEMORY]
    if strategy.batch_cpu_threshold_percent is not None:
        cpu = min(cpu, _pct(capacity[n.CPU], strategy.batch_cpu_threshold_percent))
    if strategy.batch_memory_threshold_percent is not None:
        memory = min(memory, _pct(capacity[n.MEMORY], strategy.batch_memory_threshold_percent))
    if degraded:
        cpu = memory = 0
    inputs.update(
        {
            "margin": margin,
            "nodeReserved": reserved,
            "systemUsed": system_used,
            "hpRequest": hp_request,
            "hpUsed": hp_used,
            "hpMaxUsedRequest": hp_max,
            "danglingHpUsed": _cm(dangling),
            "byUsage": by_usage,
            "byRequest": by_request,
            "byMaxUsedRequest": by_max,
        }
    )
    # mid
    if strategy.mid_reclaim_mode == "static":
        mid = {
            n.MID_CPU: _pct(capacity[n.CPU], strategy.mid_static_cpu_reserved_percent),
            n.MID_MEMORY: _pct(capacity[n.MEMORY], strategy.mid_static_memory_reserved_percent),
        }
    elif degraded or metric is None:
        mid = {n.MID_CPU: 0, n.MID_MEMORY: 0}
    else:
        reclaimable = _cm(metric.prod_reclaimable or {})
        unused = _cm(_sub(capacity, metric.node_usage)) if metric.has_node_metric else {n.CPU: 0, n.MEMORY: 0}
        unallocated = floor0(_sub(capacity, _max(system_used, reserved), prod_request))
        inputs.update({"prodReclaimable": reclaimable, "nodeUnused": unused, "unallocated": unallocated})
        mid = {
            name: max(min(reclaimable[plain], unused[plain]), 0)
            + _pct(unallocated[plain], strategy.mid_unallocated_percent)
            for name, plain in ((n.MID_CPU, n.CPU), (n.MID_MEMORY, n.MEMORY))
        }
    mid[n.MID_CPU] = min(mid[n.MID_CPU], _pct(capacity[n.CPU], strategy.mid_cpu_threshold_percent))
    mid[n.MID_MEMORY] = min(
        mid[n.MID_MEMORY], _pct(capacity[n.MEMORY], strategy.mid_memory_threshold_percent)
    )
    return {n.BATCH_CPU: cpu, n.BATCH_MEMORY: memory}, mid


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
    ):
        return True
    if now - previous_at >= strategy.update_time_threshold_s * 1_000_000:
        return True
    threshold = Decimal(strategy.resource_diff_threshold)
    return any(_moved(previous.allocatable.get(k), v, threshold) for k, v in result.allocatable.items())
