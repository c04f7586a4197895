"""The samples node-reporter keeps and the NodeMetric it builds from them (Koordinator's shape). Pure.

A ``Sample`` is one sampling instant: the node's cpu (millicores over the last interval) and memory, and every pod's.
``Window`` keeps node samples for the longest aggregation window and pod samples for the aggregation duration.

Rules of ``Window.metric``:
- ``nodeUsage`` and each pod's ``podUsage``: the average over the last ``aggregateDurationSeconds`` (default 300) —
  what koordlet reports; ``systemUsage``: the average of node usage minus the pods' usage, at least 0.
- ``aggregatedNodeUsages`` (and ``aggregatedSystemUsages``): for each window of ``durations`` (default 5m, 10m,
  30m) that the samples cover for at least 90 % of its length: ``avg`` and nearest-rank ``p50``/``p90``/``p95``/
  ``p99`` of the samples in it (upstream reports a window only once it has enough samples).
- Pods are identified by uid (their cgroup); ``priority`` is guessed from the QoS class of their cgroup:
  BestEffort → ``koord-batch`` (Koordinator's batch pods request only extended resources), else ``koord-prod``.
  The device-allocator reads a pod's real priority class from the pod itself when it knows the pod.
- ``prodReclaimable``: once the aggregation duration is covered, the sum over prod pods of
  ``max(request − p95 × 110 %, 0)`` — cpu requests from ``cpu.shares``; memory only for Guaranteed pods, whose
  request equals their limit.
- ``updateTime`` is the time of the newest sample.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import msgspec

from allot_contracts.objects import names as n
from allot_contracts.objects.nodemetric import AggregatedUsage, NodeMetric, PodMetric
from node_reporter.metrics.cgroups import PodLimits

__all__ = ["PodInfo", "Sample", "Window", "percentile"]

COVERAGE_PERCENT = 90
RECLAIM_MARGIN_PERCENT = 110


class Sample(msgspec.Struct, frozen=True):
    at: int  # µs since the epoch
    cpu: int  # millicores
    memory: int  # bytes
    pods: dict[str, tuple[int, int]] = {}  # uid -> (millicores, bytes)


class PodInfo(msgspec.Struct, frozen=True):
    """A running pod as the node's metrics see it (its cgroup's QoS tier and limits), keyed by uid; unlike the quota
    and gang engines' ``PodInfo`` it comes from the node, not from the door's ``Pod``."""

    uid: str
    qos: str  # guaranteed | burstable | besteffort
    limits: PodLimits = PodLimits()

    @property
    def priority(self) -> str:
        return "koord-batch" if self.qos == "besteffort" else "koord-prod"


def percentile(sorted_values: list[int], p: int) -> int:
    """Nearest rank: the smallest value with at least ``p`` % of the values at or below it."""
    if not sorted_values:
        return 0
    rank = -(-len(sorted_values) * p // 100)
    return sorted_values[max(rank, 1) - 1]


def _aggregate(values: list[int]) -> dict[str, int]:
    ordered = sorted(values)
    return {
        "avg": sum(values) // len(values),
        "p50": percentile(ordered, 50),
        "p90": percentile(ordered, 90),
        "p95": percentile(ordered, 95),
        "p99": percentile(ordered, 99),
    }


class Window:
    def __init__(self, aggregate_s: int = 300, durations_s: tuple[int, ...] = (300, 600, 1800)) -> None:
        self.aggregate_s = aggregate_s
        self.durations_s = tuple(sorted(durations_s))
        self.keep_us = max((aggregate_s, *durations_s)) * 1_000_000
        self.pod_keep_us = aggregate_s * 1_000_000
        self.nodes: deque[Sample] = (
            deque()
        )  # node-level samples (pods dropped after the aggregation duration)
        self.pods: deque[Sample] = deque()

    def add(self, sample: Sample) -> None:
        self.nodes.append(
            Sample(at=sample.at, cpu=sample.cpu, memory=sample.memory, pods=_pod_totals(sample.pods))
        )
        self.pods.append(sample)
        while self.nodes and self.nodes[0].at < sample.at - self.keep_us:
            self.nodes.popleft()
        while self.pods and self.pods[0].at < sample.at - self.pod_keep_us:
            self.pods.popleft()

    def _since(self, samples: deque[Sample], now: int, seconds: int) -> list[Sample]:
        start = now - seconds * 1_000_000
        return [s for s in samples if s.at > start]

    def _covered(self, samples: list[Sample], now: int, seconds: int) -> bool:
        return bool(samples) and (now - samples[0].at) * 100 >= seconds * 1_000_000 * COVERAGE_PERCENT

    def metric(
        self, name: str, pods: Mapping[str, PodInfo], *, report_interval_s: int = 60
    ) -> NodeMetric | None:
        """The NodeMetric of the samples so far (None before the first sample)."""
        if not self.nodes:
            return None
        now = self.nodes[-1].at
        recent = self._since(self.nodes, now, self.aggregate_s)
        node_usage = _mean([{n.CPU: s.cpu, n.MEMORY: s.memory} for s in recent])
        system = [_system(s) for s in recent]
        aggregated: list[AggregatedUsage] = []
        aggregated_system: list[AggregatedUsage] = []
        for duration in self.durations_s:
            window = self._since(self.nodes, now, duration)
            if not self._covered(window, now, duration):
                continue
            usage: dict[str, dict[str, int]] = {}
            sys_usage: dict[str, dict[str, int]] = {}
            for resource in (n.CPU, n.MEMORY):
                values = [s.cpu if resource == n.CPU else s.memory for s in window]
                for kind, v in _aggregate(values).items():
                    usage.setdefault(kind, {})[resource] = v
                for kind, v in _aggregate([_system(s)[resource] for s in window]).items():
                    sys_usage.setdefault(kind, {})[resource] = v
            aggregated.append(AggregatedUsage(duration_s=duration, usage=usage))
            aggregated_system.append(AggregatedUsage(duration_s=duration, usage=sys_usage))
        pod_samples = self._since(self.pods, now, self.aggregate_s)
        per_pod: dict[str, list[tuple[int, int]]] = {}
        for s in pod_samples:
            for uid, pair in s.pods.items():
                per_pod.setdefault(uid, []).append(pair)
        metrics = []
        for uid in sorted(per_pod):
            samples = per_pod[uid]
            info = pods.get(uid)
            metrics.append(
                PodMetric(
                    namespace="",
                    name="",
                    uid=uid,
                    usage={
                        n.CPU: sum(v[0] for v in samples) // len(samples),
                        n.MEMORY: sum(v[1] for v in samples) // len(samples),
                    },
                    priority=info.priority if info is not None else "",
                    qos=("BE" if info.qos == "besteffort" else "LS") if info is not None else "",
                )
            )
        reclaimable = None
        if self._covered(pod_samples, now, self.aggregate_s):
            reclaimable = {n.CPU: 0, n.MEMORY: 0}
            for uid, samples in per_pod.items():
                info = pods.get(uid)
                if info is None or info.priority != "koord-prod":
                    continue
                cpu_p95 = percentile(sorted(v[0] for v in samples), 95) * RECLAIM_MARGIN_PERCENT // 100
                reclaimable[n.CPU] += max(info.limits.cpu_request - cpu_p95, 0)
                if info.qos == "guaranteed" and info.limits.memory_limit is not None:
                    mem_p95 = percentile(sorted(v[1] for v in samples), 95) * RECLAIM_MARGIN_PERCENT // 100
                    reclaimable[n.MEMORY] += max(info.limits.memory_limit - mem_p95, 0)
        return NodeMetric(
            name=name,
            update_time=now,
            report_interval_s=report_interval_s,
            aggregate_duration_s=self.aggregate_s,
            aggregate_durations_s=self.durations_s,
            has_node_metric=True,
            node_usage=node_usage,
            aggregated_node_usages=tuple(aggregated),
            system_usage=_mean(system),
            aggregated_system_usages=tuple(aggregated_system),
            pods=tuple(metrics),
            prod_reclaimable=reclaimable,
        )


def _pod_totals(pods: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """A node sample keeps only the pods' total (what system usage needs), under the key ``""``."""
    if not pods:
        return {}
    return {"": (sum(v[0] for v in pods.values()), sum(v[1] for v in pods.values()))}


def _system(s: Sample) -> dict[str, int]:
    cpu, memory = s.pods.get("", (0, 0)) if "" in s.pods else _pod_totals(s.pods).get("", (0, 0))
    return {n.CPU: max(s.cpu - cpu, 0), n.MEMORY: max(s.memory - memory, 0)}


def _mean(values: list[dict[str, int]]) -> dict[str, int]:
    if not values:
        return {}
    return {k: sum(v[k] for v in values) // len(values) for k in values[0]}
