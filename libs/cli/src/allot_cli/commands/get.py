"""``allot get pods|nodes|gangs|reservations|migrations``: tables (or JSON) folded from the event log."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from allot_cli.connect import endpoints
from allot_cli.logtools import cluster_view
from allot_cli.reservation_views import CHOICES, cmd_get_reservations
from allot_cli.views import ClusterView, plan_summary
from allot_eventstore.postgres import PostgresEventStore


async def load_view() -> ClusterView:
    store = PostgresEventStore.connect(endpoints().database_url)
    try:
        return await cluster_view(store)
    finally:
        await store.close()


def _devices(devices: dict[str, list[int]]) -> str:
    return " ".join(f"{kind}:{','.join(map(str, minors))}" for kind, minors in devices.items()) or "-"


def pods_rows(view: ClusterView, namespace: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for key, pod in sorted(view.pods.items()):
        if namespace and not key.startswith(f"{namespace}/"):
            continue
        rows.append(
            {
                "pod": key,
                "phase": pod.phase,
                "node": pod.node or "-",
                "devices": _devices(pod.devices),
                "cpuset": pod.cpuset or "-",
                "quota": pod.quota or "-",
                "qos": pod.qos or "-",
                "enforced": plan_summary(pod.enforcement.plan) if pod.enforcement else "-",
                "enforcement": pod.enforcement.status() if pod.enforcement else "-",
                "message": pod.message,
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns).rstrip())


async def gang_statuses() -> list[dict[str, Any]]:
    from allot_cli.logtools import projection

    store = PostgresEventStore.connect(endpoints().database_url)
    try:
        processor = await projection(store, "gang-coordinator")
        return [
            {**status, "explain": processor.engine.explain(status["gang"])}
            for status in processor.engine.statuses()
        ]
    finally:
        await store.close()


def cmd_get(args: argparse.Namespace) -> int:
    if args.what in CHOICES:
        return cmd_get_reservations(args)
    if args.what in ("gangs", "gang", "podgroups", "pg"):
        statuses = asyncio.run(gang_statuses())
        if args.output == "json":
            print(json.dumps(statuses, indent=2))
            return 0
        rows = [
            {
                "gang": s["gang"],
                "phase": s["phase"],
                "present": f"{s['members']['present']}/{s['minMember']}",
                "bound": s["members"]["bound"],
                "mode": s["mode"],
                "policy": s["matchPolicy"],
                "attempts": s["group"]["attempts"],
                "explain": s["explain"],
            }
            for s in statuses
        ]
        print_table(rows, ["gang", "phase", "present", "bound", "mode", "policy", "attempts"])
        for row in rows:
            print(f"  {row['gang']}: {row['explain']}")
        return 0
    view = asyncio.run(load_view())
    if args.what in ("pods", "pod", "po"):
        rows = pods_rows(view, args.namespace)
        if args.output == "json":
            print(json.dumps(rows, indent=2))
        else:
            columns = ["pod", "phase", "node", "devices", "cpuset", "quota", "qos"]
            print_table(rows, columns + (["enforcement", "enforced"] if args.output == "wide" else []))
            waiting = [r for r in rows if r["message"]]
            for row in waiting:
                print(f"  {row['pod']}: {row['message']}")
        return 0
    rows = nodes_rows(view, time.time_ns() // 1000)
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ["node", "cpu", "memory", "devices", "pods", "usage", "batch", "mid", "heartbeat"])
    return 0


def _age(us: int) -> str:
    seconds = max(us, 0) // 1_000_000
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _percent(used: str, total: str, name: str) -> str:
    from allot_contracts.quantity import QuantityError, to_canonical

    try:
        capacity = to_canonical(name, total)
        return f"{to_canonical(name, used) * 100 // capacity}%" if capacity else used
    except QuantityError:
        return used


def _pair(node: Any, prefix: str) -> str:
    cpu, memory = node.allocatable.get(f"{prefix}-cpu"), node.allocatable.get(f"{prefix}-memory")
    if cpu is None and memory is None:
        return "-"
    degraded = " (degraded)" if node.degraded and prefix.endswith("batch") else ""
    return f"cpu {cpu or 0} mem {memory or 0}{degraded}"


def nodes_rows(view: ClusterView, now: int) -> list[dict[str, Any]]:
    """One row per node: capacity, devices, pods, and the node side — usage from its latest NodeMetric (with the
    metric's age), the batch and mid allocatable computed from it, and how long ago its agent's heartbeat came."""
    rows = []
    for name, node in sorted(view.nodes.items()):
        usage = "-"
        if node.usage:
            parts = [
                f"{res} {_percent(node.usage[res], node.capacity.get(res, ''), res)}"
                for res in ("cpu", "memory")
                if res in node.usage
            ]
            usage = f"{' '.join(parts)} ({_age(now - node.metric_time)} ago)"

        heartbeat = "-"
        if node.heartbeat_lost:
            heartbeat = f"LOST {_age(now - node.heartbeat)} ago"
        elif node.heartbeat:
            heartbeat = f"{_age(now - node.heartbeat)} ago"
        rows.append(
            {
                "node": name,
                "cpu": node.capacity.get("cpu", "-"),
                "memory": node.capacity.get("memory", "-"),
                "devices": " ".join(f"{k}:{v}" for k, v in sorted(node.devices.items())) or "-",
                "pods": len(node.pods),
                "usage": usage,
                "batch": _pair(node, "kubernetes.io/batch"),
                "mid": _pair(node, "kubernetes.io/mid"),
                "heartbeat": heartbeat,
            }
        )
    return rows


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("get", help="list pods, nodes or gangs as the event log records them")
    p.add_argument(
        "what",
        choices=["pods", "pod", "po", "nodes", "node", "no", "gangs", "gang", "podgroups", "pg", *CHOICES],
    )
    p.add_argument("-n", "--namespace")
    p.add_argument(
        "-o",
        "--output",
        choices=["table", "wide", "json"],
        default="table",
        help="wide: pods also show what qos-enforcer enforces on their node and whether it holds",
    )
    p.set_defaults(func=cmd_get)
