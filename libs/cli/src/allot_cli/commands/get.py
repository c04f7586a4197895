"""``allot get KIND [NAME …]``: every kind the log's projections hold, as kubectl lists objects.

Kinds, formats (``-o table|wide|json|yaml|name``), label selectors and human units are in :mod:`allot_cli.output`;
the rows of pods and nodes are built here from :class:`ClusterView`, those of the other kinds in
:mod:`allot_stack.listing`. ``-n NS`` keeps one namespace and ``-A`` (the default: Allot has no current-namespace
context) lists all of them with a NAMESPACE column; ``-w`` prints the list, then every row that changes as the log
grows (polling the log head), until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from allot_cli.output import (
    FORMATS,
    Kind,
    all_words,
    kind_named,
    limit_for,
    missing,
    parse_selector,
    render,
    select,
    table_lines,
)

if TYPE_CHECKING:  # imported when a command runs: ``allot get --help`` loads no log or view code
    from allot_eventstore.protocol import EventStore
    from allot_views.cluster import ClusterView, NodeView


async def load_view() -> ClusterView:
    from allot_eventstore.postgres import PostgresEventStore
    from allot_stack.connect import endpoints
    from allot_stack.logtools import cluster_view

    store = PostgresEventStore.connect(endpoints().database_url)
    try:
        return await cluster_view(store)
    finally:
        await store.close()


def _devices(devices: dict[str, list[int]]) -> str:
    return " ".join(f"{kind}:{','.join(map(str, minors))}" for kind, minors in devices.items()) or "-"


def pods_rows(view: ClusterView, namespace: str | None = None) -> list[dict[str, Any]]:
    from allot_views.cluster import plan_summary

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
                "minors": pod.devices,  # as recorded, for -o json|yaml
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns).rstrip())


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


def _devices_in_use(view: ClusterView, name: str, devices: dict[str, int]) -> str:
    """Per device type, allocated / reported: ``gpu:6/8`` (a GPU counts as allocated when any pod holds a share)."""
    if not devices:
        return "-"
    from allot_views.cluster import gpu_rows

    gpus = gpu_rows(view).get(name, [])
    in_use = {"gpu": sum(1 for g in gpus if g.holders)}
    return " ".join(f"{k}:{in_use[k]}/{v}" if k in in_use else f"{k}:{v}" for k, v in sorted(devices.items()))


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
                "devices": _devices_in_use(view, name, node.devices),
                "pods": len(node.pods),
                "usage": usage,
                "batch": _pair(node, "kubernetes.io/batch"),
                "mid": _pair(node, "kubernetes.io/mid"),
                "heartbeat": heartbeat,
                "raw": _node_status(node),  # as recorded, for -o json|yaml
            }
        )
    return rows


class NodeStatus(TypedDict):
    """A node's side as recorded (``allot get nodes -o json|yaml``); ``None`` where nothing was reported."""

    capacity: dict[str, str]
    allocatable: dict[str, str]
    devices: dict[str, int]
    usage: dict[str, str]
    usageTime: str | None
    heartbeatTime: str | None
    heartbeatLost: bool | None
    degraded: bool | None


def _node_status(node: NodeView) -> NodeStatus:
    from allot_eventstore.clock import iso

    return {
        "capacity": node.capacity,
        "allocatable": node.allocatable,
        "devices": node.devices,
        "usage": node.usage,
        "usageTime": iso(node.metric_time) if node.usage else None,
        "heartbeatTime": iso(node.heartbeat) if node.heartbeat else None,
        "heartbeatLost": bool(node.heartbeat_lost) or None,
        "degraded": node.degraded or None,
    }


# --- loaders of pods and nodes (see allot_cli.output.KINDS) ---------------------------------------------------------


async def pod_records(store: EventStore, now: int) -> list[dict[str, Any]]:
    from allot_stack.listing import fold, split

    view, recorded = await fold(store)
    rows = pods_rows(view)
    for row in rows:
        namespace, name = split(row["pod"])
        row.update(name=name, namespace=namespace, labels=recorded.of("Pod", row["pod"]))
    return rows


async def node_records(store: EventStore, now: int) -> list[dict[str, Any]]:
    from allot_stack.listing import fold

    view, recorded = await fold(store)
    rows = nodes_rows(view, now)
    for row in rows:
        row.update(name=row["node"], labels=recorded.of("Node", row["node"]))
    return rows


# --- the command -----------------------------------------------------------------------------------------------------


async def _with_store(work: Callable[[EventStore], Any]) -> Any:
    from allot_eventstore.postgres import PostgresEventStore
    from allot_stack.connect import endpoints

    store = PostgresEventStore.connect(endpoints().database_url)
    try:
        return await work(store)
    finally:
        await store.close()


def _now() -> int:
    return time.time_ns() // 1000


def _identity(row: dict[str, Any]) -> str:
    return f"{row.get('namespace', '')}/{row['name']}"


def _comparable(kind: Kind, row: dict[str, Any]) -> dict[str, Any]:
    """A row without the columns that only count time (``5s ago``): a watch prints rows whose state changed."""
    return {k: v for k, v in row.items() if k not in kind.ages}


async def watch(
    store: EventStore,
    kind: Kind,
    pick: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    output: str,
    *,
    namespaces: bool,
    write: Callable[[str], None],
    interval: float = 1.0,
    now: Callable[[], int] = _now,
    rounds: int | None = None,
) -> None:
    """Print the rows, then each row that appears or changes (and the last state of one that goes) as the log head
    moves. ``rounds`` bounds the polls (tests); otherwise it runs until interrupted."""
    load = kind.load()
    head = (await store.head())[0]  # before reading: what lands while it reads is printed by the next poll
    rows = pick(await load(store, now()))
    widths: dict[str, int] = {}
    columns = None
    if output in ("table", "wide"):
        from allot_cli.output import columns_of

        columns = columns_of(kind, output, namespaces=namespaces)
        if rows:  # with none yet, the header comes with the first rows (sized to them)
            write("\n".join(table_lines(rows, columns, widths, dict(kind.units), limit_for(output))))
    elif rows:
        write(_documents(kind, rows, output))
    last = {_identity(r): r for r in rows}
    header = not rows  # the table's header is still to be printed
    polled = 0
    while rounds is None or polled < rounds:
        polled += 1
        await asyncio.sleep(interval)
        moved = (await store.head())[0]
        if moved == head:
            continue
        head = moved
        current = {_identity(r): r for r in pick(await load(store, now()))}
        changed = [
            r
            for key, r in current.items()
            if key not in last or _comparable(kind, last[key]) != _comparable(kind, r)
        ]
        changed += [deleted(kind, r, now()) for key, r in last.items() if key not in current]
        last = current
        if not changed:
            continue
        if columns is not None:
            lines = table_lines(changed, columns, widths, dict(kind.units), limit_for(output))
            write("\n".join(lines if header else lines[1:]))
            header = False
        else:
            write(_documents(kind, changed, output))


def deleted(kind: Kind, row: dict[str, Any], now: int) -> dict[str, Any]:
    """What a watch prints for a row that went, as kubectl's watch reports a DELETED object: its name and
    ``Deleted`` in its first column after the name (the phase, for pods), nothing it held (no node, no GPUs: another
    row may hold them now); as an object, ``metadata.deletionTimestamp`` and ``status.phase: Deleted``."""
    from allot_eventstore.clock import iso

    state = next(c for c in kind.columns if c not in ("name", "namespace"))
    gone = {k: row[k] for k in ("name", "namespace", "labels") if k in row}
    return gone | {state: "Deleted", "phase": "Deleted", "deletionTimestamp": iso(now)}


def _documents(kind: Kind, rows: list[dict[str, Any]], output: str) -> str:
    """Rows one object at a time, as ``kubectl get -w -o json|yaml|name`` prints them."""
    if output == "yaml":
        return "\n".join(f"---\n{render(kind, [row], output, single=True)}" for row in rows)
    return "\n".join(render(kind, [row], output, single=True) for row in rows)


async def run_get(
    args: argparse.Namespace,
    store: EventStore,
    *,
    write: Callable[[str], None],
    now: Callable[[], int] = _now,
) -> int:
    """``allot get`` over ``store``: 1 when a NAME asked for is not there (kubectl's NotFound), else 0."""
    kind = kind_named(args.what)
    if args.show_labels:  # a LABELS column last, as kubectl --show-labels
        kind = dataclasses.replace(
            kind, columns=(*kind.columns, "labels"), wide=tuple(c for c in kind.wide if c != "labels")
        )
    selector = parse_selector(args.selector)
    names: list[str] = list(args.names)
    namespace = None if args.all_namespaces else args.namespace
    namespaces = kind.namespaced and namespace is None

    def pick(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return select(kind, rows, namespace=namespace, selector=selector, names=names)

    if args.watch:
        await watch(store, kind, pick, args.output, namespaces=namespaces, write=write, now=now)
        return 0
    rows = pick(await kind.load()(store, now()))
    structured = args.output in ("json", "yaml")
    if rows or (structured and len(names) != 1):  # json/yaml: an empty List, as kubectl prints it
        write(render(kind, rows, args.output, namespaces=namespaces, single=len(names) == 1))
    absent = missing(kind, rows, names)
    for name in absent:
        print(f'Error from server (NotFound): {kind.plural} "{name}" not found', file=sys.stderr)
    if not rows and not names and not structured:
        where = f" in {namespace} namespace" if kind.namespaced and namespace else ""
        print(f"No resources found{where}.", file=sys.stderr)
    return 1 if absent else 0


def cmd_get(args: argparse.Namespace) -> int:
    kind_named(args.what)  # refused before connecting
    parse_selector(args.selector)
    code: int = asyncio.run(_with_store(lambda store: run_get(args, store, write=_print)))
    return code


def _print(text: str) -> None:
    print(text, flush=True)


class _Intermixed(argparse.ArgumentParser):
    """Options and names in any order, as kubectl takes them (``get pods -n ns a b``): plain argparse stops reading
    positionals at the first option."""

    _inner = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inner:
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("get", help="list any kind the log holds, as kubectl does")
    p.__class__ = _Intermixed
    kind = p.add_argument(
        "what",
        metavar="KIND",
        help="pods, nodes, gangs (podgroups), quotas (elasticquotas), reservations, migrations (podmigrationjobs), "
        "devices, nodemetrics",
    )
    kind.completions = all_words()  # type: ignore[attr-defined]  # checked by kind_named: an unknown kind exits 1
    names = p.add_argument("names", nargs="*", metavar="NAME", help="only these (NAME, or NS/NAME)")
    names.complete_names = True  # type: ignore[attr-defined]  # completion offers the names of the kind
    p.add_argument("-n", "--namespace", help="only this namespace")
    p.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace (the default when -n is not given)",
    )
    p.add_argument("-l", "--selector", help="label selector: key=value, key!=value, key in (a,b), key, !key")
    p.add_argument("--show-labels", action="store_true", help="a LABELS column in tables")
    p.add_argument("-w", "--watch", action="store_true", help="after the list, print rows as they change")
    p.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="wide: more columns (pods: what qos-enforcer enforces on their node and whether it holds); "
        "json/yaml: every field; name: KIND/NAME",
    )
    p.set_defaults(func=cmd_get)
