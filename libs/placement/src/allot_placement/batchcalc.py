"""Batch resources by policy, for a node or for each of its NUMA zones: Koordinator's ``CalculateBatchResourceByPolicy``
and ``calculateOnNUMALevel`` (pkg/slo-controller/noderesource/plugins/{util,batchresource}).

Responsibility: the arithmetic shared by the node and its zones — the safety margin, the three calculate policies,
the batch threshold caps — and the split of the inputs over NUMA zones. Pure; cpu in millicores, memory in bytes.

- margin = capacity × (100 − reclaimThresholdPercent) / 100, truncated (a threshold above 100 gives a negative
  margin: more than the unused capacity may be lent out);
- byUsage = capacity − margin − max(systemUsed, reserved) − HP used; byRequest = capacity − margin − reserved −
  HP requests; byMaxUsedReq = capacity − margin − max(systemUsed, reserved) − Σ max(HP request, HP usage); each ≥ 0;
- batch-cpu by ``cpuCalculatePolicy`` (usage | maxUsageRequest), batch-memory by ``memoryCalculatePolicy``
  (usage | request | maxUsageRequest), each capped at ``batch*ThresholdPercent`` of the capacity (truncated).
- NUMA zones: each zone is a node of its own whose capacity is the zone's allocatable cpu/memory; the node's system
  usage (with high-priority host applications) and reservation are divided evenly over the zones, so is every pod
  without a NUMA allocation and every dangling metric; a pod bound to NUMA nodes counts on those only, evenly.
  Divisions round up at the milli-unit (``DivideResourceList``), so memory is kept exact as a ``Fraction`` until
  the zone's result, which is rounded up to a whole byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Final, NamedTuple

from allot_contracts.objects import names as n
from allot_contracts.objects.colocation import ColocationStrategy

__all__ = ["HPPod", "HPUse", "by_policy", "hp_use", "margin", "zone_batch"]

CM: Final = (n.CPU, n.MEMORY)
Num = int | Fraction
Values = dict[str, Num]


class HPPod(NamedTuple):
    """A high-priority pod as the calculation counts it: request, metric usage (None: no metric), LSE, NUMA nodes."""

    request: Values
    usage: Values | None
    lse: bool
    numa: tuple[int, ...]


class HPUse(NamedTuple):
    request: Values
    used: Values
    max_used_request: Values


def _trunc_pct(value: Num, percent: int) -> int:
    """``value × percent / 100`` truncated toward zero (Go's ``int64(float64 × ratio)``)."""
    product = value * percent
    if isinstance(product, int):
        return product // 100 if product >= 0 else -(-product // 100)
    return int(product / 100)


def margin(strategy: ColocationStrategy, capacity: Mapping[str, Num]) -> Values:
    return {
        n.CPU: _trunc_pct(capacity.get(n.CPU, 0), 100 - strategy.cpu_reclaim_threshold_percent),
        n.MEMORY: _trunc_pct(capacity.get(n.MEMORY, 0), 100 - strategy.memory_reclaim_threshold_percent),
    }


def _add(a: Mapping[str, Num], b: Mapping[str, Num]) -> Values:
    return {k: a.get(k, 0) + b.get(k, 0) for k in CM}


def _max(a: Mapping[str, Num], b: Mapping[str, Num]) -> Values:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in CM}


def _left(capacity: Mapping[str, Num], *minus: Mapping[str, Num]) -> Values:
    return {k: max(capacity.get(k, 0) - sum(m.get(k, 0) for m in minus), 0) for k in CM}


def hp_use(pods: Iterable[HPPod], dangling: Mapping[str, Num]) -> HPUse:
    """High-priority request, usage and Σ max(request, usage) of a node: a pod without a metric counts its request,
    an LSE pod its cpu request (its cpus are its own); dangling metrics add their usage."""
    request: Values = {}
    used: Values = {}
    max_used: Values = {}
    for pod in pods:
        if pod.usage is None:
            counted, peak = pod.request, pod.request
        elif pod.lse:
            counted = {n.CPU: pod.request.get(n.CPU, 0), n.MEMORY: pod.usage.get(n.MEMORY, 0)}
            peak = _max(pod.request, pod.usage)
        else:
            counted, peak = pod.usage, _max(pod.request, pod.usage)
        request = _add(request, pod.request)
        used = _add(used, counted)
        max_used = _add(max_used, peak)
    return HPUse(request=request, used=_add(used, dangling), max_used_request=_add(max_used, dangling))


def by_policy(
    strategy: ColocationStrategy,
    capacity: Mapping[str, Num],
    reserved: Mapping[str, Num],
    system_used: Mapping[str, Num],
    hp: HPUse,
) -> tuple[dict[str, Num], dict[str, Values]]:
    """(batch cpu and memory, the inputs and each policy's result) of a node or a zone."""
    safety = margin(strategy, capacity)
    system = _max(system_used, reserved)
    by_usage = _left(capacity, safety, system, hp.used)
    by_request = _left(capacity, safety, reserved, hp.request)
    by_max = _left(capacity, safety, system, hp.max_used_request)
    cpu = by_max[n.CPU] if strategy.cpu_calculate_policy == "maxUsageRequest" else by_usage[n.CPU]
    memory = {"request": by_request, "maxUsageRequest": by_max}.get(
        strategy.memory_calculate_policy, by_usage
    )[n.MEMORY]
    if strategy.batch_cpu_threshold_percent is not None:
        cpu = min(cpu, _trunc_pct(capacity.get(n.CPU, 0), strategy.batch_cpu_threshold_percent))
    if strategy.batch_memory_threshold_percent is not None:
        memory = min(memory, _trunc_pct(capacity.get(n.MEMORY, 0), strategy.batch_memory_threshold_percent))
    inputs = {
        "margin": safety,
        "systemUsed": system,
        "byUsage": by_usage,
        "byRequest": by_request,
        "byMaxUsedRequest": by_max,
    }
    return {n.BATCH_CPU: cpu, n.BATCH_MEMORY: memory}, inputs


def _divide(values: Mapping[str, Num], parts: int) -> Values:
    """``DivideResourceList``: each amount over ``parts``, rounded up at the milli-unit."""
    out: Values = {}
    for k in CM:
        value = values.get(k, 0)
        milli = value if k == n.CPU else value * 1000
        share = -((-milli) // parts)
        if k == n.CPU:
            out[k] = int(share)
        else:  # whole bytes stay integers (the common case: exact Fractions are slow)
            out[k] = int(share) // 1000 if share % 1000 == 0 else Fraction(share, 1000)
    return out


def _ceil(value: Num) -> int:
    return value if isinstance(value, int) else -((-value) // 1)


def zone_batch(
    strategy: ColocationStrategy,
    zones: Mapping[int, Mapping[str, int]],
    system_used: Mapping[str, int],
    reserved: Mapping[str, int],
    pods: Iterable[HPPod],
    dangling: Iterable[Mapping[str, int]],
) -> dict[int, dict[str, int]]:
    """Each NUMA zone's batch-cpu / batch-memory (module docstring); ``system_used`` before the reservation."""
    ids = sorted(zones)
    count = len(ids)
    if not count:
        return {}
    per_zone: dict[int, list[HPPod]] = {z: [] for z in ids}
    for pod in pods:
        bound = [z for z in pod.numa if z in per_zone]
        shares = len(bound) or count
        split = HPPod(
            request=_divide(pod.request, shares),
            usage=None if pod.usage is None else _divide(pod.usage, shares),
            lse=pod.lse,
            numa=(),
        )
        for z in bound or ids:
            per_zone[z].append(split)
    unknown: Values = {k: 0 for k in CM}
    for usage in dangling:
        unknown = _add(unknown, _divide(usage, count))
    system, kept = _divide(system_used, count), _divide(reserved, count)
    out: dict[int, dict[str, int]] = {}
    for z in ids:
        capacity = {k: zones[z].get(k, 0) for k in CM}
        batch, _ = by_policy(strategy, capacity, kept, system, hp_use(per_zone[z], unknown))
        out[z] = {k: _ceil(v) for k, v in batch.items()}
    return out
