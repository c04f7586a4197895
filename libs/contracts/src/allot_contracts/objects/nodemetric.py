"""``NodeMetric`` (``slo.koordinator.sh/v1alpha1``): what a node reports about its own load, typed.

Responsibility: read the object koordlet writes (and node-reporter's sampler writes in the same shape) into a frozen
``NodeMetric`` with exact integers — cpu in millicores, memory in bytes, times in microseconds since the epoch — and
report every malformed field as a ``FieldIssue`` with its path; what is read but not acted on is a warning.

Shape read (cluster-scoped, named after its node)::

    spec:
      metricCollectPolicy: {aggregateDurationSeconds: 300, reportIntervalSeconds: 60,
                            nodeAggregatePolicy: {durations: [5m, 10m, 30m]}}
    status:
      updateTime: "2026-01-02T03:04:05Z"
      nodeMetric:
        nodeUsage: {cpu: "12", memory: 40Gi}
        aggregatedNodeUsages: [{duration: 5m0s, usage: {avg: {cpu: ..}, p50: .., p90: .., p95: .., p99: ..}}]
        systemUsage: {cpu: 500m, memory: 2Gi}
        aggregatedSystemUsages: [...]
      podsMetric: [{namespace: ns, name: web-0, podUsage: {cpu: "2", memory: 4Gi}, priority: koord-prod, qos: LS}]
      hostApplicationMetric: [{name: nginx, usage: {..}, priority: koord-prod, qos: LS}]
      prodReclaimableMetric: {resource: {cpu: "3", memory: 6Gi}}

Rules:
- Quantities are Kubernetes quantities; negative ones are refused. ``devices`` entries of a usage map are read as a
  warning (device usage is not acted on).
- ``updateTime`` is RFC 3339; absent means "the time the object was recorded" (node-reporter fills it in).
- Aggregation types are ``avg``, ``p50``, ``p90``, ``p95``, ``p99``; durations are Go durations (``5m``, ``5m0s``).
- ``podsMetric[*].uid`` is an Allot extension (node-reporter's sampler identifies pods by their cgroup, that is by
  uid); a pod metric needs a name or a uid.
- ``reportIntervalSeconds`` defaults to 60 and ``aggregateDurationSeconds`` to 300, as in Koordinator.
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.duration import parse_go_duration
from allot_contracts.quantity import QuantityError, format_quantity, to_canonical

__all__ = [
    "AGGREGATION_TYPES",
    "API_VERSION",
    "KIND",
    "AggregatedUsage",
    "HostAppMetric",
    "NodeMetric",
    "PodMetric",
    "format_time",
    "nodemetric_manifest",
    "parse_nodemetric",
    "parse_time",
    "usage_map",
]

API_VERSION: Final = "slo.koordinator.sh/v1alpha1"
KIND: Final = "NodeMetric"
AGGREGATION_TYPES: Final = ("avg", "p50", "p90", "p95", "p99")
DEFAULT_REPORT_INTERVAL_S: Final = 60
DEFAULT_AGGREGATE_DURATION_S: Final = 300

Usage = dict[str, int]


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


class NodeMetric(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    update_time: int | None = None  # µs since the epoch; None = not given
    report_interval_s: int = DEFAULT_REPORT_INTERVAL_S
    aggregate_duration_s: int = DEFAULT_AGGREGATE_DURATION_S
    aggregate_durations_s: tuple[int, ...] = ()
    has_node_metric: bool = False  # status.nodeMetric present
    node_usage: Usage = {}
    aggregated_node_usages: tuple[AggregatedUsage, ...] = ()
    system_usage: Usage = {}
    aggregated_system_usages: tuple[AggregatedUsage, ...] = ()
    pods: tuple[PodMetric, ...] = ()
    host_apps: tuple[HostAppMetric, ...] = ()
    prod_reclaimable: Usage | None = None

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
def usage_map(raw: Any, path: str, issues: list[FieldIssue], warnings: list[FieldIssue]) -> Usage:
    """A ``ResourceMap`` (resource name -> quantity, plus ``devices``) as canonical integers."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path=path, message="must be a map of resource name to quantity"))
        return {}
    out: Usage = {}
    for name in sorted(raw, key=str):
        value = raw[name]
        if name == "devices":
            if value:
                warnings.append(
                    FieldIssue(path=f"{path}.devices", code="Ignored", message="device usage is not acted on")
                )
            continue
        where = f"{path}[{name}]"
        try:
            amount = to_canonical(str(name), value)
        except QuantityError as exc:
            issues.append(FieldIssue(path=where, code="InvalidQuantity", message=str(exc)))
            continue
        if amount < 0:
            issues.append(FieldIssue(path=where, message="must not be negative", value=str(value)))
            continue
        out[str(name)] = amount
    return out


def _mapping(raw: Any, path: str, issues: list[FieldIssue]) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path=path, message="must be an object"))
        return {}
    return raw


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
    if raw is None:
        return ()
    if not isinstance(raw, list):
        issues.append(FieldIssue(path=path, message="must be a list"))
        return ()
    out: list[AggregatedUsage] = []
    seen: set[int] = set()
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(entry, Mapping):
            issues.append(FieldIssue(path=where, message="must be an object"))
            continue
        duration = _duration(entry.get("duration"), f"{where}.duration", issues)
        usage = _mapping(entry.get("usage"), f"{where}.usage", issues)
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
            kinds[str(kind)] = usage_map(usage[kind], f"{where}.usage.{kind}", issues, warnings)
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


def _text(raw: Any, path: str, issues: list[FieldIssue]) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        issues.append(FieldIssue(path=path, message="must be a string", value=str(raw)))
        return ""
    return raw


def _pods(raw: Any, issues: list[FieldIssue], warnings: list[FieldIssue]) -> tuple[PodMetric, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        issues.append(FieldIssue(path="status.podsMetric", message="must be a list"))
        return ()
    out: dict[tuple[str, str, str], PodMetric] = {}
    for i, entry in enumerate(raw):
        where = f"status.podsMetric[{i}]"
        if not isinstance(entry, Mapping):
            issues.append(FieldIssue(path=where, message="must be an object"))
            continue
        name = _text(entry.get("name"), f"{where}.name", issues)
        uid = _text(entry.get("uid"), f"{where}.uid", issues)
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
            usage=usage_map(entry.get("podUsage"), f"{where}.podUsage", issues, warnings),
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
    if raw is None:
        return ()
    if not isinstance(raw, list):
        issues.append(FieldIssue(path="status.hostApplicationMetric", message="must be a list"))
        return ()
    out: list[HostAppMetric] = []
    for i, entry in enumerate(raw):
        where = f"status.hostApplicationMetric[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            issues.append(FieldIssue(path=where, message="must be an object with a name"))
            continue
        out.append(
            HostAppMetric(
                name=entry["name"],
                usage=usage_map(entry.get("usage"), f"{where}.usage", issues, warnings),
                priority=_text(entry.get("priority"), f"{where}.priority", issues),
                qos=_text(entry.get("qos"), f"{where}.qos", issues),
            )
        )
    return tuple(sorted(out, key=lambda h: h.name))


def parse_nodemetric(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> NodeMetric | None:
    """The typed NodeMetric, or None when ``issues`` were found (every one of them is appended)."""
    before = len(issues)
    meta = _mapping(manifest.get("metadata"), "metadata", issues)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        issues.append(
            FieldIssue(path="metadata.name", code="Required", message="is required (the node's name)")
        )
        name = ""
    spec = _mapping(manifest.get("spec"), "spec", issues)
    policy = _mapping(spec.get("metricCollectPolicy"), "spec.metricCollectPolicy", issues)
    report = _seconds(
        policy.get("reportIntervalSeconds"),
        "spec.metricCollectPolicy.reportIntervalSeconds",
        issues,
        DEFAULT_REPORT_INTERVAL_S,
    )
    aggregate = _seconds(
        policy.get("aggregateDurationSeconds"),
        "spec.metricCollectPolicy.aggregateDurationSeconds",
        issues,
        DEFAULT_AGGREGATE_DURATION_S,
    )
    durations: list[int] = []
    agg_policy = _mapping(
        policy.get("nodeAggregatePolicy"), "spec.metricCollectPolicy.nodeAggregatePolicy", issues
    )
    raw_durations = agg_policy.get("durations")
    if raw_durations is not None and not isinstance(raw_durations, list):
        issues.append(
            FieldIssue(
                path="spec.metricCollectPolicy.nodeAggregatePolicy.durations", message="must be a list"
            )
        )
    for i, d in enumerate(raw_durations if isinstance(raw_durations, list) else []):
        got = _duration(d, f"spec.metricCollectPolicy.nodeAggregatePolicy.durations[{i}]", issues)
        if got is not None:
            durations.append(got)
    status = _mapping(manifest.get("status"), "status", issues)
    update = status.get("updateTime")
    update_time = parse_time(update, "status.updateTime", issues) if update is not None else None
    node = status.get("nodeMetric")
    info = _mapping(node, "status.nodeMetric", issues)
    reclaim_raw = status.get("prodReclaimableMetric")
    reclaim = None
    if reclaim_raw is not None:
        reclaim = usage_map(
            _mapping(reclaim_raw, "status.prodReclaimableMetric", issues).get("resource"),
            "status.prodReclaimableMetric.resource",
            issues,
            warnings,
        )
    metric = NodeMetric(
        name=name,
        update_time=update_time,
        report_interval_s=report,
        aggregate_duration_s=aggregate,
        aggregate_durations_s=tuple(sorted(set(durations))),
        has_node_metric=isinstance(node, Mapping),
        node_usage=usage_map(info.get("nodeUsage"), "status.nodeMetric.nodeUsage", issues, warnings),
        aggregated_node_usages=_aggregated(
            info.get("aggregatedNodeUsages"), "status.nodeMetric.aggregatedNodeUsages", issues, warnings
        ),
        system_usage=usage_map(info.get("systemUsage"), "status.nodeMetric.systemUsage", issues, warnings),
        aggregated_system_usages=_aggregated(
            info.get("aggregatedSystemUsages"), "status.nodeMetric.aggregatedSystemUsages", issues, warnings
        ),
        pods=_pods(status.get("podsMetric"), issues, warnings),
        host_apps=_host_apps(status.get("hostApplicationMetric"), issues, warnings),
        prod_reclaimable=reclaim,
    )
    return None if len(issues) > before else metric


# --- writing ------------------------------------------------------------------------------------------------------------
def _quantities(usage: Mapping[str, int]) -> dict[str, str]:
    return {name: format_quantity(name, amount) for name, amount in sorted(usage.items())}


def _go_duration(seconds: int) -> str:
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "") + f"{secs}s"


def nodemetric_manifest(metric: NodeMetric) -> dict[str, Any]:
    """The object in Koordinator's shape (what node-reporter's sampler records); ``parse_nodemetric`` reads it back."""
    aggregated = [
        {
            "duration": _go_duration(a.duration_s),
            "usage": {k: _quantities(v) for k, v in sorted(a.usage.items())},
        }
        for a in metric.aggregated_node_usages
    ]
    aggregated_system = [
        {
            "duration": _go_duration(a.duration_s),
            "usage": {k: _quantities(v) for k, v in sorted(a.usage.items())},
        }
        for a in metric.aggregated_system_usages
    ]
    node: dict[str, Any] = {
        "nodeUsage": _quantities(metric.node_usage),
        "systemUsage": _quantities(metric.system_usage),
    }
    if aggregated:
        node["aggregatedNodeUsages"] = aggregated
    if aggregated_system:
        node["aggregatedSystemUsages"] = aggregated_system
    pods = []
    for p in metric.pods:
        entry: dict[str, Any] = {"namespace": p.namespace, "name": p.name, "podUsage": _quantities(p.usage)}
        if p.uid:
            entry["uid"] = p.uid
        if p.priority:
            entry["priority"] = p.priority
        if p.qos:
            entry["qos"] = p.qos
        pods.append(entry)
    status: dict[str, Any] = {"nodeMetric": node, "podsMetric": pods}
    if metric.update_time is not None:
        status["updateTime"] = format_time(metric.update_time)
    if metric.prod_reclaimable is not None:
        status["prodReclaimableMetric"] = {"resource": _quantities(metric.prod_reclaimable)}
    policy: dict[str, Any] = {
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
