"""Load-aware scheduling: Koordinator's LoadAwareScheduling filter and score over the nodes' NodeMetrics.

Responsibility: the estimate of a pod's usage, each node's *estimated used* resources (``NodeLoad``: its reported
usage, corrected for the pods assigned since that report) and thresholds, and the filter and score that read them.
``LoadTracker`` keeps, per node, the latest NodeMetric, the node's own thresholds and the pods assigned to it with the
time of their assignment, and derives the ``NodeLoad`` the engine caches by. The plugin's arguments
(``LoadAwareSchedulingArgs``) are read by :mod:`allot_placement.loadaware_args`.

Rules (upstream's, with the differences listed at the end):
- A node without a NodeMetric (or whose NodeMetric has no ``status.nodeMetric``) passes the filter and is not scored
  (score 0 for every such node, so the ranking is upstream's).
- A NodeMetric is *expired* when ``now - updateTime >= nodeMetricExpirationSeconds`` (default 180). With
  ``filterExpiredNodeMetrics`` (default true) an expired node fails with ``node(s) nodeMetric expired`` unless
  ``enableScheduleWhenNodeMetricsExpired``, and is then let through unchecked; it scores 0. ``now`` is the recorded
  time of the decision's trigger, so replay re-derives it.
- A pod's estimated usage, per resource of ``estimatedScalingFactors`` (default cpu 85 %, memory 70 %; with
  ``allowCustomizeEstimation`` the pod's ``scheduling.koordinator.sh/load-estimated-scaling-factors`` override them
  per resource): ``max(limit, request)`` of the resource its priority class uses (batch pods:
  ``kubernetes.io/batch-cpu``/``-memory``; mid pods: ``kubernetes.io/mid-*``) times the factor, rounded, at most the
  limit; a zero quantity counts as 250m cpu or 200 MiB memory.
- Estimated used of a node (non-prod view): the reported usage (``nodeUsage``, or the configured aggregated
  percentile) minus the reported usage of the *estimated* pods, plus their estimate (the larger of estimate and
  reported usage). A pod is estimated when it has no pod metric, was assigned after ``updateTime -
  reportIntervalSeconds`` (so the metric cannot hold a full interval of it), is still within its forced estimation
  when the metric was taken (``estimation_deadline`` after ``updateTime``), or when score aggregation is configured
  and the metric has no such aggregate. Prod view (prod pods with prod thresholds, or ``scoreAccordingProdUsage``):
  the prod pods' reported usage (plus the node's system usage with ``prodUsageIncludeSys``: ``systemUsage``, or
  upstream's ``nodeUsage − Σ podUsage − Σ host applications`` when it is absent) plus the estimate of the
  estimated prod pods.
- Forced estimation (``estimation_deadline``): ``estimatedSecondsAfterInitialized`` after the pod's Initialized
  condition when it has one, else ``estimatedSecondsAfterPodScheduled`` after its assignment; with
  ``allowCustomizeEstimation`` the pod's ``load-estimated-seconds-after-initialized`` / ``-after-pod-scheduled``
  annotations come first. As upstream, the deadline is compared with the NodeMetric's ``updateTime``, not with the
  clock: the pod stops being forced by the first metric taken after its deadline, so the change comes with a
  recorded NodeMetric and replay re-derives it without a timer.
- Thresholds (``node_thresholds``): ``usageThresholds`` (cpu 65 / memory 95 by default), ``prodUsageThresholds``,
  ``aggregated.usageThresholds`` with ``aggregated.usageAggregationType``; a Node's
  ``scheduling.koordinator.sh/usage-thresholds`` annotation (read at the door into ``NodeInfo.usage_thresholds``)
  replaces each part it sets, for that node; its resources outside the plugin's resource vector (cpu, memory, the
  resources the arguments name, ``supportedResources``) are skipped.
- Filter: prod pods against the prod thresholds when the node has any; otherwise the aggregated thresholds over the
  aggregated usage when set, else the usage thresholds. For each resource with a non-zero threshold,
  ``round((estimated used + pod estimate) / allocatable × 100)`` above it fails with
  ``node(s) <resource> usage exceed threshold`` (``aggregated usage`` for the aggregated view). DaemonSet pods pass.
- Score (least used): per resource ``(allocatable - used) × 100 / allocatable`` (0 when over), weighted by
  ``resourceWeights`` (default cpu 1 / memory 1); with ``dominantResourceWeight`` the lowest such score over the
  resource vector joins the mean with that weight. The engine adds it as the ``LoadAwareScheduling`` component times
  ``weight``.
- Members of one gang placement are assigned (at the tracker's ``now``) while the rest of the gang is placed, so each
  member's filter and score count the ones placed before it (upstream's Reserve does the same for each pod).
Differences: resources are checked in name order (upstream iterates a map, so which reason a node reports is random
there); the ``raw-allocatable`` annotation is not read (Allot never rewrites a Node's allocatable, so it is the raw
one); a NodeMetric without the configured aggregated usage leaves only the estimated pods in that view (upstream
counts the full estimate of every assigned pod there); the prod view sums every pod the NodeMetric reports as prod
(upstream counts those it also knows as assigned prod pods); an annotation that cannot be read is a warning at the
door (upstream logs it), with the same effect: the plugin's arguments apply.
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from allot_contracts.objects import names as n
from allot_contracts.objects.load_aware import CustomUsageThresholds, LoadEstimation
from allot_contracts.objects.nodemetric import NodeMetric
from allot_contracts.objects.sharing import Parts
from allot_placement.loadaware_args import Aggregated, Amounts, LoadAwareArgs, parse_args

__all__ = [
    "Aggregated",
    "AssignedPod",
    "LoadAwareArgs",
    "LoadTracker",
    "NodeLoad",
    "PodLoad",
    "Thresholds",
    "estimate_pod",
    "estimation_deadline",
    "filter_and_score",
    "node_load",
    "node_thresholds",
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


def usage_reason(resource: str, aggregated: bool) -> tuple[str, str]:
    if aggregated:
        return (f"node(s) {resource} aggregated usage exceed threshold", "AggregatedUsageExceedThreshold")
    return (f"node(s) {resource} usage exceed threshold", "UsageExceedThreshold")


# --- the pod side -----------------------------------------------------------------------------------------------------
class PodLoad(msgspec.Struct, frozen=True, kw_only=True):
    """What the estimate of a pod reads besides its requests: its priority class, DaemonSet ownership, limits, and
    its own estimation annotations (read only with ``allowCustomizeEstimation``)."""

    priority_class: str = ""
    daemonset: bool = False
    limits: Amounts = ()
    estimation: LoadEstimation | None = None

    @property
    def prod(self) -> bool:
        return self.priority_class == "koord-prod"


def _round_div(num: int, den: int) -> int:
    """round(num / den) half away from zero, for non-negative numbers (Go's math.Round)."""
    return (2 * num + den) // (2 * den)


def _factors(args: LoadAwareArgs, pod: PodLoad) -> Amounts:
    custom = pod.estimation.scaling_factors if pod.estimation is not None else ()
    if not custom or not args.allow_customize_estimation:
        return args.estimated_scaling_factors
    merged = dict(args.estimated_scaling_factors)
    merged.update(custom)  # the pod's own factors win; the arguments' fill in the rest
    return tuple(sorted(merged.items()))


def estimate_pod(args: LoadAwareArgs, requests: Mapping[str, int], pod: PodLoad) -> dict[str, int]:
    """The default estimator: per scaling factor, ``max(limit, request) × factor%`` capped at the limit."""
    translate = _TRANSLATE.get(pod.priority_class, {})
    limits = dict(pod.limits)
    out: dict[str, int] = {}
    for name, factor in _factors(args, pod):
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
    at: int  # µs: when it was assigned (its PodScheduled condition, else when it was placed or observed bound)
    initialized_at: int | None = None  # µs: when its Initialized condition became True


def estimation_deadline(args: LoadAwareArgs, pod: AssignedPod) -> int | None:
    """Until when (µs) ``pod`` is estimated whatever its NodeMetric says: ``estimatedSecondsAfterInitialized`` after
    its Initialized condition when it has one, else ``estimatedSecondsAfterPodScheduled`` after its assignment (the
    pod's own annotations first, with ``allowCustomizeEstimation``); None when neither applies."""
    after_scheduled = after_initialized = -1
    own = pod.load.estimation
    if own is not None and args.allow_customize_estimation:
        after_scheduled, after_initialized = own.seconds_after_pod_scheduled, own.seconds_after_initialized
    if after_scheduled < 0 and args.estimated_seconds_after_pod_scheduled is not None:
        after_scheduled = args.estimated_seconds_after_pod_scheduled
    if after_initialized < 0 and args.estimated_seconds_after_initialized is not None:
        after_initialized = args.estimated_seconds_after_initialized
    if after_initialized > 0 and pod.initialized_at is not None:
        return pod.initialized_at + after_initialized * 1_000_000
    if after_scheduled > 0:
        return pod.at + after_scheduled * 1_000_000
    return None


class Thresholds(msgspec.Struct, frozen=True, kw_only=True):
    """The filter's thresholds for one node (percent; zero entries dropped): the arguments', or the node's own
    ``usage-thresholds`` annotation part by part over them. ``aggregation_type`` set: non-prod pods are filtered
    by ``aggregated`` over that aggregated usage."""

    usage: Amounts = ()
    prod: Amounts = ()
    aggregated: Amounts = ()
    aggregation_type: str = ""
    aggregated_duration_s: int = 0


def _nonzero(amounts: Amounts, known: frozenset[str] | None = None) -> Amounts:
    return tuple((k, v) for k, v in amounts if v and (known is None or k in known))


def node_thresholds(args: LoadAwareArgs, custom: CustomUsageThresholds | None) -> Thresholds:
    """The thresholds a node is filtered by. A non-empty part of ``custom`` replaces the arguments' part; its
    resources outside ``args.resources`` are skipped (upstream's resource vector)."""
    agg = args.aggregated
    usage, prod = _nonzero(args.usage_thresholds), _nonzero(args.prod_usage_thresholds)
    aggregated, kind, duration = (
        (_nonzero(agg.usage_thresholds), agg.usage_aggregation_type, agg.usage_aggregated_duration_s)
        if agg.filters
        else ((), "", 0)
    )
    if custom is not None:
        known = args.resources
        if custom.usage_thresholds:
            usage = _nonzero(custom.usage_thresholds, known)
        if custom.prod_usage_thresholds:
            prod = _nonzero(custom.prod_usage_thresholds, known)
        if custom.aggregated is not None:
            c = custom.aggregated
            aggregated, kind, duration = _nonzero(c.usage_thresholds, known), c.aggregation_type, c.duration_s
    return Thresholds(
        usage=usage, prod=prod, aggregated=aggregated, aggregation_type=kind, aggregated_duration_s=duration
    )


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
    thresholds: Thresholds | None = None  # set when usable


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
    since = update - metric.report_interval_s * 1_000_000  # assigned after this: not fully in the metric yet
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
        if not usage or pod.at > since or score_missing or _forced(args, pod, update):
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
        if args.prod_usage_include_sys:
            _add(estimated_used, metric.effective_system_usage())
        return estimated_used
    for name, value in (node_usage or {}).items():
        less = estimated_actual.get(name, 0)
        estimated_used[name] = estimated_used.get(name, 0) + (value - less if value >= less else value)
    return estimated_used


def _forced(args: LoadAwareArgs, pod: AssignedPod, update: int) -> bool:
    """The pod is still within its forced estimation when the metric was taken (its deadline is after it)."""
    deadline = estimation_deadline(args, pod)
    return deadline is not None and deadline > update


def node_load(
    args: LoadAwareArgs,
    metric: NodeMetric,
    allocatable: Mapping[str, int],
    assigned: Iterable[AssignedPod],
    now: int,
    custom: CustomUsageThresholds | None = None,
) -> NodeLoad:
    """The ``NodeLoad`` of a node with ``metric`` at time ``now`` (µs); ``custom``: the node's own thresholds."""
    update = metric.update_time
    expired = update is None or (
        args.node_metric_expiration_s > 0 and now - update >= args.node_metric_expiration_s * 1_000_000
    )
    alloc = tuple(sorted(allocatable.items()))
    if expired or not metric.has_node_metric:
        return NodeLoad(usable=False, expired=expired, update_time=update or 0, allocatable=alloc)
    pods = sorted(assigned, key=lambda p: p.key)
    agg = args.aggregated
    th = node_thresholds(args, custom)
    filter_view = (
        metric.aggregated(th.aggregation_type, th.aggregated_duration_s)
        if th.aggregation_type
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
        _used(args, metric, pods, None, prod=True) if (th.prod or args.score_according_prod_usage) else {}
    )
    return NodeLoad(
        usable=True,
        update_time=update or 0,
        allocatable=alloc,
        filter_used=tuple(sorted(filter_used.items())),
        filter_aggregated=bool(th.aggregation_type),
        score_used=tuple(sorted(score_used.items())),
        prod_used=tuple(sorted(prod_used.items())),
        thresholds=th,
    )


def _least_used(used: int, total: int) -> int:
    return 0 if total == 0 or used > total else (total - used) * 100 // total


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
        th = load.thresholds or node_thresholds(args, None)
        if pod.prod and th.prod:
            thresholds, used, aggregated = th.prod, dict(load.prod_used), False
        elif th.aggregation_type:
            thresholds, used, aggregated = th.aggregated, dict(load.filter_used), True
        else:
            thresholds, used, aggregated = th.usage, dict(load.filter_used), False
        for name, limit in thresholds:
            total = alloc.get(name, 0)
            if total == 0:
                continue
            if _round_div(100 * (used.get(name, 0) + estimate.get(name, 0)), total) > limit:
                return usage_reason(name, aggregated), None
    used = dict(load.prod_used if pod.prod and args.score_according_prod_usage else load.score_used)
    num = den = 0
    for name, weight in args.resource_weights:
        num += _least_used(used.get(name, 0) + estimate.get(name, 0), alloc.get(name, 0)) * weight
        den += weight
    if args.dominant_resource_weight:  # the most used resource of upstream's resource vector, weighted
        lowest = min(
            _least_used(used.get(name, 0) + estimate.get(name, 0), alloc.get(name, 0))
            for name in sorted(args.resources)
        )
        num, den = num + lowest * args.dominant_resource_weight, den + args.dominant_resource_weight
    return None, (num // den if den > 0 else 0)


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
        self.custom: dict[str, CustomUsageThresholds] = {}  # nodes' own thresholds (their annotation)
        self.pods: dict[str, dict[str, AssignedPod]] = {}  # their requests and loads held once (``parts``)
        self.parts = Parts()
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

    def set_thresholds(self, name: str, custom: CustomUsageThresholds | None) -> None:
        if self.custom.get(name) != custom:
            if custom is None:
                del self.custom[name]
            else:
                self.custom[name] = custom
            self._refresh(name)

    def assign(self, node: str, pod: AssignedPod) -> None:
        old = self.where.get(pod.key)
        if old is not None and old != node:
            self.unassign(pod.key)
        requests, load = self.parts.one(pod.requests), self.parts.one(pod.load)
        if requests is not pod.requests or load is not pod.load:
            pod = msgspec.structs.replace(pod, requests=requests, load=load)
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
            self.args,
            metric,
            self.allocatable.get(name, {}),
            self.pods.get(name, {}).values(),
            self.now,
            self.custom.get(name),
        )
        if not load.expired and metric.update_time is not None and self.args.node_metric_expiration_s > 0:
            self._expiry[name] = metric.update_time + self.args.node_metric_expiration_s * 1_000_000
        if self.loads.get(name) != load:
            self.loads[name] = load
            self._dirty.add(name)
