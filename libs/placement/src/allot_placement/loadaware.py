"""Load-aware scheduling: Koordinator's LoadAwareScheduling filter and score over the nodes' NodeMetrics.

Responsibility: the plugin's arguments in upstream's shape (``LoadAwareSchedulingArgs``), the estimate of a pod's
usage, each node's *estimated used* resources (``NodeLoad``: its reported usage, corrected for the pods assigned
since that report), and the filter and score that read them. ``LoadTracker`` keeps, per node, the latest NodeMetric
and the pods assigned to it with the time of their assignment, and derives the ``NodeLoad`` the engine caches by.

Rules (upstream's, with the differences listed at the end):
- A node without a NodeMetric (or whose NodeMetric has no ``status.nodeMetric``) passes the filter and is not scored
  (score 0 for every such node, so the ranking is upstream's).
- A NodeMetric is *expired* when ``now - updateTime >= nodeMetricExpirationSeconds`` (default 180). With
  ``filterExpiredNodeMetrics`` (default true) an expired node fails with ``node(s) nodeMetric expired`` unless
  ``enableScheduleWhenNodeMetricsExpired``, and is then let through unchecked; it scores 0. ``now`` is the recorded
  time of the decision's trigger, so replay re-derives it.
- A pod's estimated usage, per resource of ``estimatedScalingFactors`` (default cpu 85 %, memory 70 %):
  ``max(limit, request)`` of the resource its priority class uses (batch pods: ``kubernetes.io/batch-cpu``/``-memory``;
  mid pods: ``kubernetes.io/mid-*``) times the factor, rounded, at most the limit; a zero quantity counts as 250m cpu
  or 200 MiB memory.
- Estimated used of a node (non-prod view): the reported usage (``nodeUsage``, or the configured aggregated
  percentile) minus the reported usage of the *estimated* pods, plus their estimate (the larger of estimate and
  reported usage). A pod is estimated when it has no pod metric, was assigned after the metric's ``updateTime``, was
  assigned less than ``reportIntervalSeconds`` before it, or when score aggregation is configured and the metric has
  no such aggregate. Prod view (prod pods with ``prodUsageThresholds``): the prod pods' reported usage plus the
  estimate of the estimated prod pods.
- Filter: for each resource with a non-zero threshold (``usageThresholds`` cpu 65 / memory 95 by default;
  ``prodUsageThresholds`` for prod pods when set; ``aggregated.usageThresholds`` with the aggregated usage when
  ``aggregated.usageAggregationType`` is set), ``round((estimated used + pod estimate) / allocatable × 100)`` above
  the threshold fails with ``node(s) <resource> usage exceed threshold`` (``aggregated usage`` for the aggregated
  view). DaemonSet pods pass.
- Score (least used, weighted by ``resourceWeights``, default cpu 1 / memory 1): per resource
  ``(allocatable - used) × 100 / allocatable`` (0 when over), weighted mean; the engine adds it as the
  ``LoadAwareScheduling`` component times ``weight``.
Differences: resources are checked in name order (upstream iterates a map, so which reason a node reports is random
there); per-node threshold annotations and ``allowCustomizeEstimation`` are not read; the ``raw-allocatable``
annotation is not read (Allot never rewrites a Node's allocatable, so it is the raw one).
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.duration import parse_go_duration
from allot_contracts.objects.nodemetric import AGGREGATION_TYPES, NodeMetric

__all__ = [
    "Aggregated",
    "AssignedPod",
    "LoadAwareArgs",
    "LoadTracker",
    "NodeLoad",
    "PodLoad",
    "estimate_pod",
    "filter_and_score",
    "node_load",
    "parse_args",
]

NAME: Final = "LoadAwareScheduling"
EXPIRED: Final = ("node(s) nodeMetric expired", "NodeMetricExpired")
DEFAULT_MILLI_CPU: Final = 250
DEFAULT_MEMORY: Final = 200 * 1024 * 1024
_TRANSLATE: Final = {
    "koord-batch": {n.CPU: n.BATCH_CPU, n.MEMORY: n.BATCH_MEMORY},
    "koord-mid": {n.CPU: n.MID_CPU, n.MEMORY: n.MID_MEMORY},
}

Amounts = tuple[tuple[str, int], ...]


def usage_reason(resource: str, aggregated: bool) -> tuple[str, str]:
    if aggregated:
        return (f"node(s) {resource} aggregated usage exceed threshold", "AggregatedUsageExceedThreshold")
    return (f"node(s) {resource} usage exceed threshold", "UsageExceedThreshold")


# --- arguments --------------------------------------------------------------------------------------------------------
class Aggregated(msgspec.Struct, frozen=True, kw_only=True):
    usage_thresholds: Amounts = ()
    usage_aggregation_type: str = ""
    usage_aggregated_duration_s: int = 0
    score_aggregation_type: str = ""
    score_aggregated_duration_s: int = 0

    @property
    def filters(self) -> bool:
        return bool(self.usage_thresholds) and bool(self.usage_aggregation_type)

    @property
    def scores(self) -> bool:
        return bool(self.score_aggregation_type)


class LoadAwareArgs(msgspec.Struct, frozen=True, kw_only=True):
    """``LoadAwareSchedulingArgs`` with upstream's defaults; ``enabled`` and ``weight`` are the plugin's switch and
    score weight in the scheduler profile."""

    enabled: bool = True
    weight: int = 1
    filter_expired_node_metrics: bool = True
    node_metric_expiration_s: int = 180
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: Amounts = ((n.CPU, 1), (n.MEMORY, 1))
    usage_thresholds: Amounts = ((n.CPU, 65), (n.MEMORY, 95))
    prod_usage_thresholds: Amounts = ()
    score_according_prod_usage: bool = False
    estimated_scaling_factors: Amounts = ((n.CPU, 85), (n.MEMORY, 70))
    aggregated: Aggregated = Aggregated()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "enabled": self.enabled,
            "weight": self.weight,
            "filterExpiredNodeMetrics": self.filter_expired_node_metrics,
            "nodeMetricExpirationSeconds": self.node_metric_expiration_s,
            "enableScheduleWhenNodeMetricsExpired": self.enable_schedule_when_node_metrics_expired,
            "resourceWeights": dict(self.resource_weights),
            "usageThresholds": dict(self.usage_thresholds),
            "prodUsageThresholds": dict(self.prod_usage_thresholds),
            "scoreAccordingProdUsage": self.score_according_prod_usage,
            "estimatedScalingFactors": dict(self.estimated_scaling_factors),
        }
        a = self.aggregated
        if a != Aggregated():
            out["aggregated"] = {
                "usageThresholds": dict(a.usage_thresholds),
                "usageAggregationType": a.usage_aggregation_type,
                "usageAggregatedDuration": f"{a.usage_aggregated_duration_s}s",
                "scoreAggregationType": a.score_aggregation_type,
                "scoreAggregatedDuration": f"{a.score_aggregated_duration_s}s",
            }
        return out


_KEYS: Final = {
    "enabled",
    "weight",
    "filterExpiredNodeMetrics",
    "nodeMetricExpirationSeconds",
    "enableScheduleWhenNodeMetricsExpired",
    "resourceWeights",
    "usageThresholds",
    "prodUsageThresholds",
    "scoreAccordingProdUsage",
    "estimator",
    "estimatedScalingFactors",
    "aggregated",
}
_AGG_KEYS: Final = {
    "usageThresholds",
    "usageAggregationType",
    "usageAggregatedDuration",
    "scoreAggregationType",
    "scoreAggregatedDuration",
}


def _bool(raw: Any, path: str, errors: list[FieldIssue], default: bool) -> bool:
    if raw is None:
        return default
    if not isinstance(raw, bool):
        errors.append(FieldIssue(path=path, message="must be true or false", value=str(raw)))
        return default
    return raw


def _int(
    raw: Any, path: str, errors: list[FieldIssue], default: int, low: int = 0, high: int | None = None
) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < low or (high is not None and raw > high):
        bounds = f"between {low} and {high}" if high is not None else f">= {low}"
        errors.append(FieldIssue(path=path, message=f"must be an integer {bounds}", value=str(raw)))
        return default
    return raw


def _amounts(raw: Any, path: str, errors: list[FieldIssue], default: Amounts, high: int | None) -> Amounts:
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        errors.append(FieldIssue(path=path, message="must map resource names to integers"))
        return default
    return tuple((str(k), _int(raw[k], f"{path}[{k}]", errors, 0, 0, high)) for k in sorted(raw, key=str))


def _agg_type(raw: Any, path: str, errors: list[FieldIssue]) -> str:
    if raw is None or raw == "":
        return ""
    if raw not in AGGREGATION_TYPES:
        errors.append(
            FieldIssue(
                path=path, code="NotSupported", message=f"must be one of {', '.join(AGGREGATION_TYPES)}"
            )
        )
        return ""
    return str(raw)


def _agg_duration(raw: Any, path: str, errors: list[FieldIssue]) -> int:
    if raw is None or raw == "" or raw == 0:
        return 0
    us, error = parse_go_duration(raw) if isinstance(raw, str) else (None, "must be a duration such as 5m")
    if us is None or us < 0 or us % 1_000_000:
        errors.append(FieldIssue(path=path, message=error or "must be whole seconds", value=str(raw)))
        return 0
    return us // 1_000_000


def parse_args(raw: Any, path: str, errors: list[FieldIssue]) -> LoadAwareArgs:
    """``LoadAwareSchedulingArgs`` from their YAML/JSON shape (camelCase keys; every key optional)."""
    default = LoadAwareArgs()
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        errors.append(FieldIssue(path=path, message="must be a mapping"))
        return default
    for extra in sorted(set(raw) - _KEYS):
        errors.append(
            FieldIssue(path=f"{path}.{extra}", message=f"unknown key; supported: {', '.join(sorted(_KEYS))}")
        )
    if raw.get("estimator") not in (None, "", "default", "defaultEstimator"):
        errors.append(
            FieldIssue(path=f"{path}.estimator", code="NotSupported", message="only the default estimator")
        )
    factors = dict(
        _amounts(raw.get("estimatedScalingFactors"), f"{path}.estimatedScalingFactors", errors, (), 100)
    )
    for k, v in default.estimated_scaling_factors:  # upstream fills in the defaults it is not given
        factors.setdefault(k, v)
    weights = _amounts(
        raw.get("resourceWeights"), f"{path}.resourceWeights", errors, default.resource_weights, None
    )
    if raw.get("resourceWeights") is not None and not any(w for _, w in weights):
        errors.append(
            FieldIssue(path=f"{path}.resourceWeights", message="needs at least one positive weight")
        )
        weights = default.resource_weights
    agg_raw = raw.get("aggregated")
    aggregated = Aggregated()
    if agg_raw is not None:
        if not isinstance(agg_raw, Mapping):
            errors.append(FieldIssue(path=f"{path}.aggregated", message="must be a mapping"))
        else:
            p = f"{path}.aggregated"
            for extra in sorted(set(agg_raw) - _AGG_KEYS):
                errors.append(
                    FieldIssue(
                        path=f"{p}.{extra}", message=f"unknown key; supported: {', '.join(sorted(_AGG_KEYS))}"
                    )
                )
            aggregated = Aggregated(
                usage_thresholds=_amounts(
                    agg_raw.get("usageThresholds"), f"{p}.usageThresholds", errors, (), 100
                ),
                usage_aggregation_type=_agg_type(
                    agg_raw.get("usageAggregationType"), f"{p}.usageAggregationType", errors
                ),
                usage_aggregated_duration_s=_agg_duration(
                    agg_raw.get("usageAggregatedDuration"), f"{p}.usageAggregatedDuration", errors
                ),
                score_aggregation_type=_agg_type(
                    agg_raw.get("scoreAggregationType"), f"{p}.scoreAggregationType", errors
                ),
                score_aggregated_duration_s=_agg_duration(
                    agg_raw.get("scoreAggregatedDuration"), f"{p}.scoreAggregatedDuration", errors
                ),
            )
    usage = raw.get("usageThresholds")
    return LoadAwareArgs(
        enabled=_bool(raw.get("enabled"), f"{path}.enabled", errors, True),
        weight=_int(raw.get("weight"), f"{path}.weight", errors, 1),
        filter_expired_node_metrics=_bool(
            raw.get("filterExpiredNodeMetrics"), f"{path}.filterExpiredNodeMetrics", errors, True
        ),
        node_metric_expiration_s=_int(
            raw.get("nodeMetricExpirationSeconds"), f"{path}.nodeMetricExpirationSeconds", errors, 180
        ),
        enable_schedule_when_node_metrics_expired=_bool(
            raw.get("enableScheduleWhenNodeMetricsExpired"),
            f"{path}.enableScheduleWhenNodeMetricsExpired",
            errors,
            False,
        ),
        resource_weights=weights,
        usage_thresholds=(
            default.usage_thresholds
            if usage is None or usage == {}
            else _amounts(usage, f"{path}.usageThresholds", errors, default.usage_thresholds, 100)
        ),
        prod_usage_thresholds=_amounts(
            raw.get("prodUsageThresholds"), f"{path}.prodUsageThresholds", errors, (), 100
        ),
        score_according_prod_usage=_bool(
            raw.get("scoreAccordingProdUsage"), f"{path}.scoreAccordingProdUsage", errors, False
        ),
        estimated_scaling_factors=tuple(sorted(factors.items())),
        aggregated=aggregated,
    )


# --- the pod side -----------------------------------------------------------------------------------------------------
class PodLoad(msgspec.Struct, frozen=True, kw_only=True):
    """What the estimate of a pod reads besides its requests: its priority class, DaemonSet ownership and limits."""

    priority_class: str = ""
    daemonset: bool = False
    limits: Amounts = ()

    @property
    def prod(self) -> bool:
        return self.priority_class == "koord-prod"


def _round_div(num: int, den: int) -> int:
    """round(num / den) half away from zero, for non-negative numbers (Go's math.Round)."""
    return (2 * num + den) // (2 * den)


def estimate_pod(args: LoadAwareArgs, requests: Mapping[str, int], pod: PodLoad) -> dict[str, int]:
    """The default estimator: per scaling factor, ``max(limit, request) × factor%`` capped at the limit."""
    translate = _TRANSLATE.get(pod.priority_class, {})
    limits = dict(pod.limits)
    out: dict[str, int] = {}
    for name, factor in args.estimated_scaling_factors:
        real = translate.get(name, name)
        limit, request = limits.get(real, 0), requests.get(real, 0)
        quantity = max(limit, request)
        if quantity == 0:
            out[name] = (
                DEFAULT_MILLI_CPU
                if real in (n.CPU, n.BATCH_CPU)
                else DEFAULT_MEMORY
                if real in (n.MEMORY, n.BATCH_MEMORY)
                else 0
            )
            continue
        value = _round_div(quantity * factor, 100)
        out[name] = min(value, limit) if limit > 0 else value
    return out


# --- the node side ----------------------------------------------------------------------------------------------------
class AssignedPod(msgspec.Struct, frozen=True, kw_only=True):
    key: str  # namespace/name
    uid: str
    requests: Amounts
    load: PodLoad
    at: int  # µs: when it was assigned (placed, or observed bound)


class NodeLoad(msgspec.Struct, frozen=True, kw_only=True):
    """A node's load as the filter and score read it (hashable: the engine keys its caches by it)."""

    usable: bool  # a NodeMetric with status.nodeMetric, not expired
    expired: bool = False
    update_time: int = 0
    allocatable: Amounts = ()
    filter_used: Amounts = ()  # non-prod pods, the filter's view (nodeUsage or the aggregated percentile)
    filter_aggregated: bool = False
    score_used: Amounts = ()  # non-prod pods, the score's view
    prod_used: Amounts = ()  # prod pods: prod pods' usage + estimated prod pods


def _add(target: dict[str, int], values: Mapping[str, int]) -> None:
    for k, v in values.items():
        target[k] = target.get(k, 0) + v


def _used(
    args: LoadAwareArgs,
    metric: NodeMetric,
    assigned: Iterable[AssignedPod],
    node_usage: Mapping[str, int] | None,
    prod: bool,
) -> dict[str, int]:
    update = metric.update_time or 0
    interval = metric.report_interval_s * 1_000_000
    score_missing = args.aggregated.scores and (
        metric.aggregated(args.aggregated.score_aggregation_type, args.aggregated.score_aggregated_duration_s)
        is None
    )
    pod_usage: dict[str, Mapping[str, int]] = {}
    for pm in metric.pods:
        if prod and pm.priority != "koord-prod":
            continue
        if pm.key:
            pod_usage[pm.key] = pm.usage
        if pm.uid:
            pod_usage[f"uid:{pm.uid}"] = pm.usage
    estimated_used: dict[str, int] = {}
    estimated: set[str] = set()
    for pod in assigned:
        if prod and not pod.load.prod:
            continue
        usage = pod_usage.get(pod.key) or (pod_usage.get(f"uid:{pod.uid}") if pod.uid else None) or {}
        if not usage or pod.at > update or (pod.at < update and update - pod.at < interval) or score_missing:
            for name, value in estimate_pod(args, dict(pod.requests), pod.load).items():
                estimated_used[name] = estimated_used.get(name, 0) + max(value, usage.get(name, 0))
            estimated.add(pod.key)
            if pod.uid:
                estimated.add(f"uid:{pod.uid}")
    actual: dict[str, int] = {}
    estimated_actual: dict[str, int] = {}
    for pm in metric.pods:
        if prod and pm.priority != "koord-prod":
            continue
        hit = (pm.key and pm.key in estimated) or (pm.uid and f"uid:{pm.uid}" in estimated)
        _add(estimated_actual if hit else actual, pm.usage)
    if prod:
        _add(estimated_used, actual)
        return estimated_used
    for name, value in (node_usage or {}).items():
        less = estimated_actual.get(name, 0)
        estimated_used[name] = estimated_used.get(name, 0) + (value - less if value >= less else value)
    return estimated_used


def node_load(
    args: LoadAwareArgs,
    metric: NodeMetric,
    allocatable: Mapping[str, int],
    assigned: Iterable[AssignedPod],
    now: int,
) -> NodeLoad:
    """The ``NodeLoad`` of a node with ``metric`` at time ``now`` (µs)."""
    update = metric.update_time
    expired = update is None or (
        args.node_metric_expiration_s > 0 and now - update >= args.node_metric_expiration_s * 1_000_000
    )
    alloc = tuple(sorted(allocatable.items()))
    if expired or not metric.has_node_metric:
        return NodeLoad(usable=False, expired=expired, update_time=update or 0, allocatable=alloc)
    pods = sorted(assigned, key=lambda p: p.key)
    agg = args.aggregated
    filter_view = (
        metric.aggregated(agg.usage_aggregation_type, agg.usage_aggregated_duration_s)
        if agg.filters
        else metric.node_usage
    )
    score_view = (
        metric.aggregated(agg.score_aggregation_type, agg.score_aggregated_duration_s)
        if agg.scores
        else metric.node_usage
    )
    filter_used = _used(args, metric, pods, filter_view, prod=False)
    score_used = (
        filter_used if score_view is filter_view else _used(args, metric, pods, score_view, prod=False)
    )
    prod_used = (
        _used(args, metric, pods, None, prod=True)
        if (args.prod_usage_thresholds or args.score_according_prod_usage)
        else {}
    )
    return NodeLoad(
        usable=True,
        update_time=update or 0,
        allocatable=alloc,
        filter_used=tuple(sorted(filter_used.items())),
        filter_aggregated=agg.filters,
        score_used=tuple(sorted(score_used.items())),
        prod_used=tuple(sorted(prod_used.items())),
    )


def filter_and_score(
    args: LoadAwareArgs, load: NodeLoad, requests: Mapping[str, int], pod: PodLoad
) -> tuple[tuple[str, str] | None, int | None]:
    """(the reason the node fails, or None; the score 0–100, or None when the node is not scored)."""
    blocked = (
        load.expired
        and args.filter_expired_node_metrics
        and not args.enable_schedule_when_node_metrics_expired
    )
    if blocked and not pod.daemonset:
        return EXPIRED, None
    if not load.usable:
        return None, (0 if load.expired else None)
    estimate = estimate_pod(args, requests, pod)
    alloc = dict(load.allocatable)
    if not pod.daemonset:
        prod = pod.prod and bool(args.prod_usage_thresholds)
        if prod:
            thresholds, used, aggregated = args.prod_usage_thresholds, dict(load.prod_used), False
        elif load.filter_aggregated:
            thresholds, used, aggregated = args.aggregated.usage_thresholds, dict(load.filter_used), True
        else:
            thresholds, used, aggregated = args.usage_thresholds, dict(load.filter_used), False
        for name, limit in thresholds:
            total = alloc.get(name, 0)
            if limit == 0 or total == 0:
                continue
            if _round_div(100 * (used.get(name, 0) + estimate.get(name, 0)), total) > limit:
                return usage_reason(name, aggregated), None
    used = dict(load.prod_used if pod.prod and args.score_according_prod_usage else load.score_used)
    num = den = 0
    for name, weight in args.resource_weights:
        total = alloc.get(name, 0)
        value = used.get(name, 0) + estimate.get(name, 0)
        score = 0 if total == 0 or value > total else (total - value) * 100 // total
        num, den = num + score * weight, den + weight
    return None, (num // den if den else 0)


# --- bookkeeping ------------------------------------------------------------------------------------------------------
class LoadTracker:
    """Per node: the latest NodeMetric, the pods assigned to it, and the derived ``NodeLoad``.

    ``now`` only moves forward (``advance``); a node's load is recomputed when its metric, its pods or the expiry of
    its metric change. ``changed()`` returns the nodes whose load changed since the last call (the engine is told).
    """

    def __init__(self, args: LoadAwareArgs) -> None:
        self.args = args
        self.now = 0
        self.metrics: dict[str, NodeMetric] = {}
        self.allocatable: dict[str, dict[str, int]] = {}
        self.pods: dict[str, dict[str, AssignedPod]] = {}
        self.where: dict[str, str] = {}
        self.loads: dict[str, NodeLoad] = {}
        self._expiry: dict[str, int] = {}
        self._dirty: set[str] = set()

    def set_metric(self, metric: NodeMetric) -> None:
        self.metrics[metric.name] = metric
        self._refresh(metric.name)

    def delete_metric(self, name: str) -> None:
        if self.metrics.pop(name, None) is not None:
            self._refresh(name)

    def set_allocatable(self, name: str, allocatable: Mapping[str, int]) -> None:
        if self.allocatable.get(name) != dict(allocatable):
            self.allocatable[name] = dict(allocatable)
            self._refresh(name)

    def assign(self, node: str, pod: AssignedPod) -> None:
        old = self.where.get(pod.key)
        if old is not None and old != node:
            self.unassign(pod.key)
        self.pods.setdefault(node, {})[pod.key] = pod
        self.where[pod.key] = node
        self._refresh(node)

    def unassign(self, key: str) -> None:
        node = self.where.pop(key, None)
        if node is None:
            return
        pods = self.pods.get(node, {})
        pods.pop(key, None)
        if not pods:
            self.pods.pop(node, None)
        self._refresh(node)

    def advance(self, now: int) -> None:
        """Time passes: metrics whose expiry is reached are recomputed (cheap when none is due)."""
        if now <= self.now:
            return
        self.now = now
        if not self._expiry:
            return
        due = [name for name, deadline in self._expiry.items() if deadline <= now]
        for name in sorted(due):
            self._refresh(name)

    def changed(self) -> list[str]:
        out = sorted(self._dirty)
        self._dirty.clear()
        return out

    def _refresh(self, name: str) -> None:
        metric = self.metrics.get(name)
        self._expiry.pop(name, None)
        if metric is None or not self.args.enabled:
            if self.loads.pop(name, None) is not None:
                self._dirty.add(name)
            return
        load = node_load(
            self.args, metric, self.allocatable.get(name, {}), self.pods.get(name, {}).values(), self.now
        )
        if not load.expired and metric.update_time is not None and self.args.node_metric_expiration_s > 0:
            self._expiry[name] = metric.update_time + self.args.node_metric_expiration_s * 1_000_000
        if self.loads.get(name) != load:
            self.loads[name] = load
            self._dirty.add(name)
