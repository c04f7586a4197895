"""``NodeMetric`` (``slo.koordinator.sh/v1alpha1``): what a node reports about its own load, typed.

Responsibility: read the object koordlet writes (and node-reporter's sampler writes in the same shape) into a frozen
``NodeMetric`` with exact integers — cpu in millicores, memory in bytes, times in microseconds since the epoch — and
report every malformed field as a ``FieldIssue`` with its path; what is read but not acted on is a warning. Write it
back in the same shape (``nodemetric_manifest``).

Shape read (cluster-scoped, named after its node; upstream's ``apis/slo/v1alpha1/nodemetric_types.go``; every usage
is a ``ResourceMap``, :mod:`allot_contracts.objects.resource_map`)::

    spec:
      metricCollectPolicy: {aggregateDurationSeconds: 300, reportIntervalSeconds: 60,
                            nodeAggregatePolicy: {durations: [5m, 10m, 30m]}}
    status:
      updateTime: "2026-01-02T03:04:05Z"
      nodeMetric:
        nodeUsage: {resources: {cpu: "12", memory: 40Gi}}
        aggregatedNodeUsages: [{duration: 5m0s, usage: {avg: {resources: {cpu: ..}}, p50: .., p90: .., p95: ..}}]
        systemUsage: {resources: {cpu: 500m, memory: 2Gi}}
        aggregatedSystemUsages: [...]
        numaUsages: [{numaNodeID: 0, nodeUsage: {resources: ..}, systemUsage: {resources: ..}}]
      podsMetric: [{namespace: ns, name: web-0, podUsage: {resources: {cpu: "2", memory: 4Gi}},
                    priority: koord-prod, qos: LS, extensions: {..}}]
      hostApplicationMetric: [{name: nginx, usage: {resources: ..}, priority: koord-prod, qos: LS}]
      prodReclaimableMetric: {resource: {resources: {cpu: "3", memory: 6Gi}}}
      prodPeakMetric: {resource: {resources: {cpu: "9", memory: 20Gi}}}

Rules:
- Quantities are Kubernetes quantities under a ResourceMap's ``resources``; negative ones are refused, and so is a
  flat map (``nodeUsage: {cpu: ..}``): its keys are unknown fields of a ResourceMap. ``devices`` of a ResourceMap
  are read as a warning (device usage is not acted on).
- ``updateTime`` is RFC 3339; absent means "the time the object was recorded" (node-reporter fills it in).
- Aggregation types are ``avg``, ``p50``, ``p90``, ``p95``, ``p99``; durations are Go durations (``5m``, ``5m0s``).
- A pod metric needs a name, or a uid under ``extensions["allot.dev/pod-uid"]``: node-reporter's sampler identifies
  pods by their cgroup, that is by uid (upstream's ``extensions`` is a free map for third parties). Other
  ``extensions`` keys are a warning.
- ``numaUsages`` (``numaNodeID`` a unique non-negative integer) and ``prodPeakMetric`` are validated and kept, and are
  a warning: nothing in Allot acts on them (nor does upstream's scheduler or slo-controller at v1.8).
- ``systemUsage``: upstream defines it as ``nodeUsage − Σ podUsage − Σ hostApplication usage``; a resource that
  ``nodeUsage`` has and ``systemUsage`` does not (or a NodeMetric without ``systemUsage``) gets that derived value,
  at least 0 — :meth:`NodeMetric.effective_system_usage`, which every consumer reads.
- ``reportIntervalSeconds`` defaults to 60 and ``aggregateDurationSeconds`` to 300, as in Koordinator.
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, checked_list, checked_object, checked_objects, not_acted_on
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.duration import parse_go_duration
from allot_contracts.objects.resource_map import Usage, read_resource_map, resource_map

__all__ = [
    "AGGREGATION_TYPES",
    "API_VERSION",
    "KIND",
    "POD_UID_EXTENSION",
    "AggregatedUsage",
    "HostAppMetric",
    "NUMAUsage",
    "NodeMetric",
    "PodMetric",
    "format_time",
    "nodemetric_manifest",
    "parse_nodemetric",
    "parse_time",
]

API_VERSION: Final = "slo.koordinator.sh/v1alpha1"
KIND: Final = "NodeMetric"
AGGREGATION_TYPES: Final = ("avg", "p50", "p90", "p95", "p99")
POD_UID_EXTENSION: Final = "allot.dev/pod-uid"
DEFAULT_REPORT_INTERVAL_S: Final = 60
DEFAULT_AGGREGATE_DURATION_S: Final = 300
_MAX_INT32: Final = 2**31 - 1


class AggregatedUsage(msgspec.Struct, frozen=True, kw_only=True):
    duration_s: int
    usage: dict[str, Usage]  # aggregation type (avg, p50, ...) -> resource -> canonical amount


class PodMetric(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str = ""
    usage: Usage = {}
    priority: str = ""
    qos: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.name else ""


class HostAppMetric(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    usage: Usage = {}
    priority: str = ""
    qos: str = ""


class NUMAUsage(msgspec.Struct, frozen=True, kw_only=True):
    numa_node_id: int
    node_usage: Usage = {}
    system_usage: Usage = {}


class NodeMetric(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    update_time: int | None = None  # µs since the epoch; None = not given
    report_interval_s: int = DEFAULT_REPORT_INTERVAL_S
    aggregate_duration_s: int = DEFAULT_AGGREGATE_DURATION_S
    aggregate_durations_s: tuple[int, ...] = ()
    has_node_metric: bool = False  # status.nodeMetric present
    node_usage: Usage = {}
    aggregated_node_usages: tuple[AggregatedUsage, ...] = ()
    system_usage: Usage = {}  # as reported; read effective_system_usage()
    aggregated_system_usages: tuple[AggregatedUsage, ...] = ()
    pods: tuple[PodMetric, ...] = ()
    host_apps: tuple[HostAppMetric, ...] = ()
    prod_reclaimable: Usage | None = None
    numa_usages: tuple[NUMAUsage, ...] = ()
    prod_peak: Usage | None = None

    def aggregated(self, kind: str, duration_s: int = 0) -> Usage | None:
        """Koordinator's choice of an aggregated node usage: the window of ``duration_s`` when given (None when that
        window has no ``kind`` value), else the longest window that has one, else ``nodeUsage`` (None when empty)."""
        if duration_s:
            for agg in self.aggregated_node_usages:
                if agg.duration_s == duration_s and agg.usage.get(kind):
                    return agg.usage[kind]
            return None
        best: AggregatedUsage | None = None
        for agg in self.aggregated_node_usages:
            if agg.usage.get(kind) and (best is None or agg.duration_s > best.duration_s):
                best = agg
        if best is not None:
            return best.usage[kind]
        return self.node_usage or None

    def effective_system_usage(self) -> Usage:
        """The system usage every consumer reads: ``systemUsage`` as reported; for a resource of ``nodeUsage`` that
        it lacks, upstream's definition ``nodeUsage − Σ podUsage − Σ hostApplication usage``, at least 0."""
        out = dict(self.system_usage)
        for resource, used in self.node_usage.items():
            if resource in out:
                continue
            others = sum(p.usage.get(resource, 0) for p in self.pods)
            others += sum(h.usage.get(resource, 0) for h in self.host_apps)
            out[resource] = max(used - others, 0)
        return dict(sorted(out.items()))

    def system_and_pods_usage(self) -> Usage:
        """A node's usage as upstream's LowNodeLoad counts it: system usage (as :meth:`effective_system_usage`)
        plus every reported pod's usage — ``nodeUsage`` less the host applications when the report adds up."""
        out = self.effective_system_usage()
        for pod in self.pods:
            for resource, used in pod.usage.items():
                out[resource] = out.get(resource, 0) + used
        return dict(sorted(out.items()))

    def system_usage_derived(self) -> tuple[str, ...]:
        """The resources whose system usage :meth:`effective_system_usage` derives (not reported)."""
        return tuple(sorted(r for r in self.node_usage if r not in self.system_usage))


# --- time -------------------------------------------------------------------------------------------------------------
def parse_time(text: Any, path: str, issues: list[FieldIssue]) -> int | None:
    """RFC 3339 text -> µs since the epoch (a time without zone is UTC)."""
    if not isinstance(text, str) or not text:
        issues.append(FieldIssue(path=path, message="must be an RFC 3339 time such as 2026-01-02T03:04:05Z"))
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        issues.append(
            FieldIssue(path=path, message="must be an RFC 3339 time such as 2026-01-02T03:04:05Z", value=text)
        )
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def format_time(us: int) -> str:
    """µs since the epoch -> RFC 3339 text in UTC (``2026-01-02T03:04:05Z``, with microseconds when not whole)."""
    seconds, micro = divmod(us, 1_000_000)
    stamp = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{micro:06d}Z" if micro else f"{stamp}Z"


# --- pieces -------------------------------------------------------------------------------------------------------------
def _seconds(raw: Any, path: str, issues: list[FieldIssue], default: int) -> int:
    if raw is None:
        return default
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        issues.append(FieldIssue(path=path, message="must be a whole number of seconds >= 1", value=str(raw)))
        return default
    return raw


def _duration(raw: Any, path: str, issues: list[FieldIssue]) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool):  # seconds, as some tools write it
        if raw > 0:
            return raw
    elif isinstance(raw, str):
        us, error = parse_go_duration(raw)
        if us is not None and us > 0 and us % 1_000_000 == 0:
            return us // 1_000_000
        if us is not None and us > 0:
            issues.append(FieldIssue(path=path, message="must be a whole number of seconds", value=raw))
            return None
        if error:
            issues.append(FieldIssue(path=path, message=error, value=raw))
            return None
    issues.append(FieldIssue(path=path, message="must be a positive duration such as 5m", value=str(raw)))
    return None


def _aggregated(
    raw: Any, path: str, issues: list[FieldIssue], warnings: list[FieldIssue]
) -> tuple[AggregatedUsage, ...]:
    out: list[AggregatedUsage] = []
    seen: set[int] = set()
    for where, entry in checked_objects(raw, path, issues):
        duration = _duration(entry.get("duration"), f"{where}.duration", issues)
        usage = checked_object(entry.get("usage"), f"{where}.usage", issues)
        kinds: dict[str, Usage] = {}
        for kind in sorted(usage, key=str):
            if kind not in AGGREGATION_TYPES:
                issues.append(
                    FieldIssue(
                        path=f"{where}.usage.{kind}",
                        code="NotSupported",
                        message=f"unknown aggregation type; one of {', '.join(AGGREGATION_TYPES)}",
                    )
                )
                continue
            kinds[str(kind)] = read_resource_map(usage[kind], f"{where}.usage.{kind}", issues, warnings)
        if duration is None:
            continue
        if duration in seen:
            issues.append(
                FieldIssue(path=f"{where}.duration", message="duplicate duration", value=str(duration))
            )
            continue
        seen.add(duration)
        out.append(AggregatedUsage(duration_s=duration, usage=kinds))
    return tuple(sorted(out, key=lambda a: a.duration_s))


def _numa_usages(
    raw: Any, path: str, issues: list[FieldIssue], warnings: list[FieldIssue]
) -> tuple[NUMAUsage, ...]:
    out: dict[int, NUMAUsage] = {}
    for where, entry in checked_objects(raw, path, issues):
        node_id = entry.get("numaNodeID")
        if not isinstance(node_id, int) or isinstance(node_id, bool) or not 0 <= node_id <= _MAX_INT32:
            issues.append(
                FieldIssue(
                    path=f"{where}.numaNodeID",
                    code="Required" if node_id is None else "InvalidField",
                    message="is required: the NUMA node's id, a whole number >= 0",
                    value="" if node_id is None else str(node_id),
                )
            )
            continue
        usage = NUMAUsage(
            numa_node_id=node_id,
            node_usage=read_resource_map(entry.get("nodeUsage"), f"{where}.nodeUsage", issues, warnings),
            system_usage=read_resource_map(
                entry.get("systemUsage"), f"{where}.systemUsage", issues, warnings
            ),
        )
        if node_id in out:
            issues.append(
                FieldIssue(path=f"{where}.numaNodeID", message="duplicate NUMA node", value=str(node_id))
            )
            continue
        out[node_id] = usage
    if out:
        warnings.append(not_acted_on(path, "per-NUMA usage is read but not acted on"))
    return tuple(out[k] for k in sorted(out))


def _text(raw: Any, path: str, issues: list[FieldIssue]) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        issues.append(FieldIssue(path=path, message="must be a string", value=str(raw)))
        return ""
    return raw


def _pod_uid(
    entry: Mapping[str, Any], where: str, issues: list[FieldIssue], warnings: list[FieldIssue]
) -> str:
    """The pod's uid from ``extensions`` (node-reporter's sampler); other extensions are a warning."""
    if "uid" not in entry and "extensions" not in entry:
        return ""
    if "uid" in entry:
        issues.append(
            FieldIssue(
                path=f"{where}.uid",
                code="FieldValueNotSupported",
                message=f'unknown field; a pod metric carries its uid under extensions["{POD_UID_EXTENSION}"]',
            )
        )
    extensions = checked_object(entry.get("extensions"), f"{where}.extensions", issues)
    for key in sorted(set(map(str, extensions)) - {POD_UID_EXTENSION}):
        warnings.append(not_acted_on(f'{where}.extensions["{key}"]', "extension is not acted on"))
    return _text(extensions.get(POD_UID_EXTENSION), f'{where}.extensions["{POD_UID_EXTENSION}"]', issues)


def _pods(raw: Any, issues: list[FieldIssue], warnings: list[FieldIssue]) -> tuple[PodMetric, ...]:
    out: dict[tuple[str, str, str], PodMetric] = {}
    for where, entry in checked_objects(raw, "status.podsMetric", issues):
        name = _text(entry.get("name"), f"{where}.name", issues)
        uid = _pod_uid(entry, where, issues, warnings)
        if not name and not uid:
            issues.append(
                FieldIssue(path=f"{where}.name", code="Required", message="a pod metric needs a name")
            )
            continue
        namespace = _text(entry.get("namespace"), f"{where}.namespace", issues) or ("default" if name else "")
        metric = PodMetric(
            namespace=namespace,
            name=name,
            uid=uid,
            usage=read_resource_map(entry.get("podUsage"), f"{where}.podUsage", issues, warnings),
            priority=_text(entry.get("priority"), f"{where}.priority", issues),
            qos=_text(entry.get("qos"), f"{where}.qos", issues),
        )
        ident = (namespace, name, uid)
        if ident in out:
            issues.append(FieldIssue(path=where, message="duplicate pod metric", value=f"{namespace}/{name}"))
            continue
        out[ident] = metric
    return tuple(out[k] for k in sorted(out))


def _host_apps(raw: Any, issues: list[FieldIssue], warnings: list[FieldIssue]) -> tuple[HostAppMetric, ...]:
    out: list[HostAppMetric] = []
    for where, entry in checked_objects(raw, "status.hostApplicationMetric", issues):
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            issues.append(
                FieldIssue(path=f"{where}.name", code="Required", message="a host application needs a name")
            )
            continue
        out.append(
            HostAppMetric(
                name=name,
                usage=read_resource_map(entry.get("usage"), f"{where}.usage", issues, warnings),
                priority=_text(entry.get("priority"), f"{where}.priority", issues),
                qos=_text(entry.get("qos"), f"{where}.qos", issues),
            )
        )
    return tuple(sorted(out, key=lambda h: h.name))


def _predicted(
    status: Mapping[str, Any], field: str, issues: list[FieldIssue], warnings: list[FieldIssue]
) -> Usage | None:
    """``status.<field>.resource`` (a ``ReclaimableMetric`` or ``PeakMetric``), None when the field is absent."""
    raw = status.get(field)
    if raw is None:
        return None
    body = checked_object(raw, f"status.{field}", issues)
    return read_resource_map(body.get("resource"), f"status.{field}.resource", issues, warnings)


def _policy(spec: Mapping[str, Any], issues: list[FieldIssue]) -> tuple[int, int, tuple[int, ...]]:
    """``spec.metricCollectPolicy``: report interval, aggregation duration, aggregation windows (seconds)."""
    where = "spec.metricCollectPolicy"
    policy = checked_object(spec.get("metricCollectPolicy"), where, issues)
    report = _seconds(
        policy.get("reportIntervalSeconds"),
        f"{where}.reportIntervalSeconds",
        issues,
        DEFAULT_REPORT_INTERVAL_S,
    )
    aggregate = _seconds(
        policy.get("aggregateDurationSeconds"),
        f"{where}.aggregateDurationSeconds",
        issues,
        DEFAULT_AGGREGATE_DURATION_S,
    )
    agg_policy = checked_object(policy.get("nodeAggregatePolicy"), f"{where}.nodeAggregatePolicy", issues)
    durations: set[int] = set()
    for i, d in enumerate(
        checked_list(agg_policy.get("durations"), f"{where}.nodeAggregatePolicy.durations", issues)
    ):
        got = _duration(d, f"{where}.nodeAggregatePolicy.durations[{i}]", issues)
        if got is not None:
            durations.add(got)
    return report, aggregate, tuple(sorted(durations))


def parse_nodemetric(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> NodeMetric | None:
    """The typed NodeMetric, or None when ``issues`` were found (every one of them is appended)."""
    before = len(issues)
    meta = checked_object(manifest.get("metadata"), "metadata", issues)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        issues.append(
            FieldIssue(path="metadata.name", code="Required", message="is required (the node's name)")
        )
        name = ""
    report, aggregate, durations = _policy(checked_object(manifest.get("spec"), "spec", issues), issues)
    status = checked_object(manifest.get("status"), "status", issues)
    update = status.get("updateTime")
    update_time = parse_time(update, "status.updateTime", issues) if update is not None else None
    node = status.get("nodeMetric")
    info = checked_object(node, "status.nodeMetric", issues)
    prod_peak = _predicted(status, "prodPeakMetric", issues, warnings)
    if prod_peak is not None:
        warnings.append(not_acted_on("status.prodPeakMetric", "the prod peak is read but not acted on"))
    where = "status.nodeMetric"
    metric = NodeMetric(
        name=name,
        update_time=update_time,
        report_interval_s=report,
        aggregate_duration_s=aggregate,
        aggregate_durations_s=durations,
        has_node_metric=isinstance(node, Mapping),
        node_usage=read_resource_map(info.get("nodeUsage"), f"{where}.nodeUsage", issues, warnings),
        aggregated_node_usages=_aggregated(
            info.get("aggregatedNodeUsages"), f"{where}.aggregatedNodeUsages", issues, warnings
        ),
        system_usage=read_resource_map(info.get("systemUsage"), f"{where}.systemUsage", issues, warnings),
        aggregated_system_usages=_aggregated(
            info.get("aggregatedSystemUsages"), f"{where}.aggregatedSystemUsages", issues, warnings
        ),
        numa_usages=_numa_usages(info.get("numaUsages"), f"{where}.numaUsages", issues, warnings),
        pods=_pods(status.get("podsMetric"), issues, warnings),
        host_apps=_host_apps(status.get("hostApplicationMetric"), issues, warnings),
        prod_reclaimable=_predicted(status, "prodReclaimableMetric", issues, warnings),
        prod_peak=prod_peak,
    )
    return None if len(issues) > before else metric


# --- writing ------------------------------------------------------------------------------------------------------------
def _go_duration(seconds: int) -> str:
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "") + f"{secs}s"


def _aggregated_manifest(usages: tuple[AggregatedUsage, ...]) -> list[JsonValue]:
    return [
        {
            "duration": _go_duration(a.duration_s),
            "usage": {k: resource_map(v) for k, v in sorted(a.usage.items())},
        }
        for a in usages
    ]


def _pod_manifest(p: PodMetric) -> JsonObject:
    entry: JsonObject = {}
    if p.name:
        entry.update(namespace=p.namespace, name=p.name)
    entry["podUsage"] = resource_map(p.usage)
    if p.priority:
        entry["priority"] = p.priority
    if p.qos:
        entry["qos"] = p.qos
    if p.uid:
        entry["extensions"] = {POD_UID_EXTENSION: p.uid}
    return entry


def _host_app_manifest(h: HostAppMetric) -> JsonObject:
    entry: JsonObject = {"name": h.name, "usage": resource_map(h.usage)}
    if h.priority:
        entry["priority"] = h.priority
    if h.qos:
        entry["qos"] = h.qos
    return entry


def _node_manifest(metric: NodeMetric) -> JsonObject:
    node: JsonObject = {
        "nodeUsage": resource_map(metric.node_usage),
        "systemUsage": resource_map(metric.system_usage),
    }
    if metric.aggregated_node_usages:
        node["aggregatedNodeUsages"] = _aggregated_manifest(metric.aggregated_node_usages)
    if metric.aggregated_system_usages:
        node["aggregatedSystemUsages"] = _aggregated_manifest(metric.aggregated_system_usages)
    if metric.numa_usages:
        node["numaUsages"] = [
            {
                "numaNodeID": u.numa_node_id,
                "nodeUsage": resource_map(u.node_usage),
                "systemUsage": resource_map(u.system_usage),
            }
            for u in metric.numa_usages
        ]
    return node


def nodemetric_manifest(metric: NodeMetric) -> JsonObject:
    """The object in Koordinator's shape (what node-reporter's sampler records); ``parse_nodemetric`` reads it back."""
    status: JsonObject = {}
    if metric.update_time is not None:
        status["updateTime"] = format_time(metric.update_time)
    status["nodeMetric"] = _node_manifest(metric)
    status["podsMetric"] = [_pod_manifest(p) for p in metric.pods]
    if metric.host_apps:
        status["hostApplicationMetric"] = [_host_app_manifest(h) for h in metric.host_apps]
    if metric.prod_reclaimable is not None:
        status["prodReclaimableMetric"] = {"resource": resource_map(metric.prod_reclaimable)}
    if metric.prod_peak is not None:
        status["prodPeakMetric"] = {"resource": resource_map(metric.prod_peak)}
    policy: JsonObject = {
        "aggregateDurationSeconds": metric.aggregate_duration_s,
        "reportIntervalSeconds": metric.report_interval_s,
    }
    if metric.aggregate_durations_s:
        policy["nodeAggregatePolicy"] = {"durations": [_go_duration(d) for d in metric.aggregate_durations_s]}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": metric.name},
        "spec": {"metricCollectPolicy": policy},
        "status": status,
    }
