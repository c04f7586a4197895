"""node-reporter's decision on a NodeMetric: accepted (with its update time) or rejected with field paths. Pure."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from allot_contracts.events import Event, FieldIssue
from allot_contracts.events.nodeside import NodeMetricRejected, NodeMetricReported
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.nodemetric import format_time, parse_nodemetric
from allot_contracts.quantity import format_quantity

__all__ = ["nodemetric_decision"]


def nodemetric_decision(name: str, manifest: Mapping[str, JsonValue], at: int) -> Event:
    """``nodemetric.reported`` for a readable NodeMetric named after its node, else ``nodemetric.rejected``.

    A NodeMetric without ``status.updateTime`` is taken as of ``at`` (the time it was recorded), written into the
    reported manifest so that every consumer reads the same time."""
    issues: list[FieldIssue] = []
    metric = parse_nodemetric(manifest, issues, [])
    if metric is not None and metric.name != name:
        issues.append(
            FieldIssue(path="metadata.name", message=f"must be the node's name {name!r}", value=metric.name)
        )
    if metric is None or issues:
        return NodeMetricRejected(name=name, errors=issues)
    reported: JsonObject = dict(manifest)
    if metric.update_time is None:
        metric = msgspec.structs.replace(metric, update_time=at)
        found = reported.get("status")
        status = dict(found) if isinstance(found, dict) else {}
        status["updateTime"] = format_time(at)
        reported["status"] = status
    assert metric.update_time is not None
    return NodeMetricReported(
        name=name,
        manifest=reported,
        update_time=metric.update_time,
        usage={k: format_quantity(k, v) for k, v in sorted(metric.node_usage.items())},
        metric=metric,
    )
