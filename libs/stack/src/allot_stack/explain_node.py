"""``allot explain node NAME``: what the node side says about a node, answered from the event log.

Prints its registration, its agent's heartbeats (and whether its devices are unschedulable because they stopped),
its latest NodeMetric (usage as a share of capacity, aggregated percentiles), the latest batch/mid allocatable
decision with every input it read, and the node-side timeline.
"""

from __future__ import annotations

import json

from allot_contracts.envelope import RecordedEvent
from allot_contracts.quantity import format_quantity
from allot_eventstore.clock import iso
from allot_eventstore.protocol import EventStore
from allot_views.cluster import ClusterView, GpuRow, gpu_rows, node_allocated
from allot_views.units import age, percent

__all__ = ["allocated_lines", "explain_node", "gpu_lines", "node_history"]

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
    share = percent(value, capacity, resource)
    return f"{value} ({share})" if share else value


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
        since = age(now - beats[-1].recorded_at, days=False)
        if lost is not None and (resumed is None or resumed.position < lost.position):
            p = lost.payload_dict()
            lines.append(
                f"heartbeat:  LOST since {iso(lost.recorded_at)} (none for more than {p['grace_s']}s; last one "
                f"{since} ago): its devices are unschedulable"
            )
        else:
            lines.append(f"heartbeat:  last {since} ago from {beats[-1].producer} ({len(beats)} recorded)")
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
            f"usage:      {usage or '-'} (NodeMetric of {iso(p['update_time'])}, {age(now - p['update_time'], days=False)} ago)"
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


# --- what ``allot describe node`` adds: Allocated resources and the GPUs -------------------------------------------


def _of(resource: str, value: int, total: int | None) -> str:
    text = format_quantity(resource, value)
    return f"{text} ({value * 100 // total}%)" if total else text


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def allocated_lines(view: ClusterView, name: str) -> list[str]:
    """``Allocated resources`` as ``kubectl describe node`` prints it: the requests and limits of the pods placed or
    bound on the node, summed, each as a share of the node's allocatable; then its GPUs one by one."""
    node = view.nodes.get(name)
    if node is None:
        return []
    requests, limits, count = node_allocated(view, name)
    resources = ["cpu", "memory", *sorted((set(requests) | set(limits)) - {"cpu", "memory", "pods"})]
    table = [["Resource", "Requests", "Limits"], ["--------", "--------", "------"]]
    for resource in resources:
        total = node.kube_allocatable.get(resource)
        table.append(
            [
                resource,
                _of(resource, requests.get(resource, 0), total),
                _of(resource, limits.get(resource, 0), total),
            ]
        )
    lines = [
        f"Non-terminated Pods:  ({count} in total)",
        "Allocated resources:",
        "  (Total limits may be over 100 percent, i.e., overcommitted.)",
        *_columns(table),
    ]
    return lines + gpu_lines(gpu_rows(view).get(name, []))


def gpu_lines(rows: list[GpuRow]) -> list[str]:
    """The node's GPUs: index, uuid, model, health, gpu-core and memory allocated of the total, and who holds it."""
    if not rows:
        return []
    gib = 1 << 30
    table = [["Index", "UUID", "Model", "Health", "Cores", "Memory", "Held by"]]
    for g in rows:
        held = ", ".join(f"{pod} ({cores}%)" for pod, cores, _ in g.holders) or "-"
        table.append(
            [
                str(g.index),
                g.uuid,
                g.model or "-",
                "Healthy" if g.healthy else "Unhealthy",
                f"{g.cores_used}/{g.cores}%",
                f"{g.memory_used / gib:g}/{g.memory / gib:g}Gi",
                held,
            ]
        )
    free = sum(1 for g in rows if g.free)
    return [f"GPUs:  ({free} of {len(rows)} free)", *_columns(table)]
