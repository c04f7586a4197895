"""``allot explain node NAME``: what the node side says about a node, answered from the event log.

Prints its registration, its agent's heartbeats (and whether its devices are unschedulable because they stopped),
its latest NodeMetric (usage as a share of capacity, aggregated percentiles), the latest batch/mid allocatable
decision with every input it read, and the node-side timeline.
"""

from __future__ import annotations

import json

from allot_contracts.envelope import RecordedEvent
from allot_contracts.quantity import QuantityError, to_canonical
from allot_eventstore.clock import iso
from allot_eventstore.protocol import EventStore

__all__ = ["explain_node", "node_history"]

TIMELINE = (
    "node.registered",
    "node.rejected",
    "node.removed",
    "node.heartbeat_lost",
    "node.heartbeat_resumed",
    "node.allocatable_updated",
    "nodemetric.reported",
    "nodemetric.rejected",
    "nodemetric.removed",
)


async def node_history(store: EventStore, name: str) -> list[RecordedEvent]:
    records = [*await store.read_stream(f"node:{name}"), *await store.read_stream(f"nodemetric:{name}")]
    return sorted(records, key=lambda r: r.position)


def _share(value: str, capacity: str, resource: str) -> str:
    try:
        total = to_canonical(resource, capacity)
        return f"{value} ({to_canonical(resource, value) * 100 // total}%)" if total else value
    except QuantityError:
        return value


def _age(us: int) -> str:
    seconds = max(us, 0) // 1_000_000
    return (
        f"{seconds}s" if seconds < 120 else f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"
    )


def explain_node(name: str, records: list[RecordedEvent], now: int) -> list[str]:
    if not records:
        return [f"no node {name} in the log"]
    lines = [f"node {name}", ""]
    last: dict[str, RecordedEvent] = {}
    for r in records:
        last[r.type] = r
    capacity: dict[str, str] = {}
    registered = last.get("node.registered")
    if registered is not None:
        capacity = dict(registered.payload_dict().get("capacity") or {})
        removed = last.get("node.removed")
        state = "removed" if removed is not None and removed.position > registered.position else "registered"
        lines.append(f"node:       {state}; allocatable {json.dumps(capacity, sort_keys=True)}")
        for warning in registered.payload_dict().get("warnings") or []:
            lines.append(f"  warning: {warning['path']}: {warning['message']} (read, not acted on)")
    beats = [r for r in records if r.type == "node.heartbeat"]
    lost = last.get("node.heartbeat_lost")
    resumed = last.get("node.heartbeat_resumed")
    if beats:
        age = _age(now - beats[-1].recorded_at)
        if lost is not None and (resumed is None or resumed.position < lost.position):
            p = lost.payload_dict()
            lines.append(
                f"heartbeat:  LOST since {iso(lost.recorded_at)} (none for more than {p['grace_s']}s; last one "
                f"{age} ago): its devices are unschedulable"
            )
        else:
            lines.append(f"heartbeat:  last {age} ago from {beats[-1].producer} ({len(beats)} recorded)")
    else:
        lines.append("heartbeat:  none recorded (no agent on this node: its devices are not watched)")
    metric = last.get("nodemetric.reported")
    if metric is not None:
        p = metric.payload_dict()
        usage = ", ".join(
            f"{res} {_share(v, capacity.get(res, ''), res)}"
            for res, v in sorted((p.get("usage") or {}).items())
        )
        lines.append(
            f"usage:      {usage or '-'} (NodeMetric of {iso(p['update_time'])}, {_age(now - p['update_time'])} ago)"
        )
        node_metric = (p.get("manifest") or {}).get("status", {}).get("nodeMetric") or {}
        for agg in node_metric.get("aggregatedNodeUsages") or []:
            p95 = ((agg.get("usage") or {}).get("p95") or {}).get("resources") or {}  # a ResourceMap
            if p95:
                lines.append(f"  p95 over {agg.get('duration')}: {json.dumps(p95, sort_keys=True)}")
    else:
        lines.append(
            "usage:      no NodeMetric (load-aware scheduling lets pods through and does not score it)"
        )
    update = last.get("node.allocatable_updated")
    if update is not None:
        p = update.payload_dict()
        degraded = " DEGRADED (no fresh NodeMetric)" if p.get("degraded") else ""
        lines.append(
            f"overcommit: {json.dumps(p.get('allocatable') or {}, sort_keys=True)}{degraded} "
            f"(#{update.position}, {iso(update.recorded_at)}, {p.get('reason', '')})"
        )
        if p.get("numa"):
            lines.append(f"  NUMA:     {json.dumps(p['numa'], sort_keys=True)}")
        if p.get("cpu_normalization_ratio", "1.00") != "1.00" or p.get("amplification"):
            lines.append(
                f"  cpu normalization ratio {p.get('cpu_normalization_ratio')}, amplification "
                f"{json.dumps(p.get('amplification') or {}, sort_keys=True)}"
            )
        for key, value in sorted((p.get("inputs") or {}).items()):
            lines.append(f"  {key}: {json.dumps(value, sort_keys=True)}")
    lines += ["", "timeline:"]
    for r in records:
        if r.type in TIMELINE:
            lines.append(f"  #{r.position:<7} {iso(r.recorded_at)}  {r.type:<26} {r.producer}")
    return lines
