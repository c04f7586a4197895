"""``allot get pods|nodes|gangs``: tables (or JSON) folded from the event log."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from allot_cli.connect import endpoints
from allot_cli.logtools import cluster_view
from allot_cli.views import ClusterView
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
        rows.append({"pod": key, "phase": pod.phase, "node": pod.node or "-", "devices": _devices(pod.devices),
                     "cpuset": pod.cpuset or "-", "quota": pod.quota or "-", "qos": pod.qos or "-",
                     "message": pod.message})
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
        return [{**status, "explain": processor.engine.explain(status["gang"])}
                for status in processor.engine.statuses()]
    finally:
        await store.close()


def cmd_get(args: argparse.Namespace) -> int:
    if args.what in ("gangs", "gang", "podgroups", "pg"):
        statuses = asyncio.run(gang_statuses())
        if args.output == "json":
            print(json.dumps(statuses, indent=2))
            return 0
        rows = [{"gang": s["gang"], "phase": s["phase"], "present": f"{s['members']['present']}/{s['minMember']}",
                 "bound": s["members"]["bound"], "mode": s["mode"], "policy": s["matchPolicy"],
                 "attempts": s["group"]["attempts"], "explain": s["explain"]} for s in statuses]
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
            print_table(rows, ["pod", "phase", "node", "devices", "cpuset", "quota", "qos"])
            waiting = [r for r in rows if r["message"]]
            for row in waiting:
                print(f"  {row['pod']}: {row['message']}")
        return 0
    rows = [
        {"node": name, "cpu": node.capacity.get("cpu", "-"), "memory": node.capacity.get("memory", "-"),
         "devices": " ".join(f"{k}:{v}" for k, v in sorted(node.devices.items())) or "-", "pods": len(node.pods)}
        for name, node in sorted(view.nodes.items())
    ]
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ["node", "cpu", "memory", "devices", "pods"])
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("get", help="list pods, nodes or gangs as the event log records them")
    p.add_argument("what", choices=["pods", "pod", "po", "nodes", "node", "no", "gangs", "gang", "podgroups", "pg"])
    p.add_argument("-n", "--namespace")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_get)
