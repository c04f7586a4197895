"""``allot describe KIND NAME``: one object as ``kubectl describe`` shows it, answered from the event log.

Sections: the object's fields (the row ``allot get -o wide`` shows, with its labels), its ``Conditions``, an
``Explain`` summary (for a pod, where it stands and why: the lines of ``allot explain pod`` after its timeline; for a
node, what the node side says; for a gang, the gang-coordinator's explanation) and its ``Events``: the Kubernetes
Events the binder writes for the recorded decisions (:mod:`binder.notices`), so a pod shows ``FailedScheduling`` with
the "0/N nodes are available" message and ``Scheduled`` once bound, in either mode.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from allot_cli.names import namespace, object_name
from allot_views.kinds import KUBE_KINDS, Kind, all_words, kind_named

if TYPE_CHECKING:
    from allot_eventstore.protocol import EventStore

_HIDDEN = {"name", "namespace", "labels"}


def _title(field: str) -> str:
    return field[:1].upper() + field[1:]


def _age(now: int, at: int) -> str:
    from allot_views.units import age

    return age(now - at)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def describe(
    kind: Kind,
    row: Mapping[str, object],
    *,
    notices: list[tuple[int, Any]],
    explain: list[str],
    now: int,
    sections: list[str] | None = None,
) -> list[str]:
    """The lines of ``allot describe`` for one object (``sections``: a node's Allocated resources and GPUs)."""
    from binder.notices import Condition

    fields: list[tuple[str, str]] = [("Name", str(row["name"]))]
    if kind.namespaced:
        fields.append(("Namespace", str(row.get("namespace", ""))))
    fields.append(("Kind", KUBE_KINDS[kind.plural]))
    labels = row.get("labels")
    pairs = sorted(labels.items()) if isinstance(labels, dict) else []
    fields.append(("Labels", ",".join(f"{k}={v}" for k, v in pairs) or "<none>"))
    for column in (*kind.columns, *kind.wide, kind.note):
        if column and column not in _HIDDEN and column != "explain":
            value = row.get(column)
            if isinstance(value, dict):
                value = ",".join(f"{k}={v}" for k, v in sorted(value.items()))
            fields.append((_title(column), "-" if value in (None, "") else str(value).replace("\n", " ")))
    width = max(len(f) for f, _ in fields) + 2
    lines = [f"{f + ':':<{width}}{v}" for f, v in fields]

    conditions = [c for _, c in notices if isinstance(c, Condition)]
    table: list[list[str]] = []
    if kind.plural == "pods":
        if row.get("phase") == "Bound":
            table.append(["PodScheduled", "True", "-", f"bound to {row.get('node')}"])
        elif conditions:
            last = conditions[-1]
            table.append(["PodScheduled", last.status, last.reason, last.message])
    if kind.plural == "nodes":
        heartbeat = str(row.get("heartbeat") or "-")
        if heartbeat.startswith("LOST"):
            table.append(
                ["AgentHeartbeat", "False", "HeartbeatLost", f"{heartbeat}: its devices are unschedulable"]
            )
        elif heartbeat == "-":
            table.append(["AgentHeartbeat", "Unknown", "NoAgent", "no node agent has reported"])
        else:
            table.append(["AgentHeartbeat", "True", "-", f"last {heartbeat}"])
    conditions_of = row.get("conditions")
    for condition in conditions_of if isinstance(conditions_of, list) else []:
        table.append(
            [
                str(condition.get("type", "")),
                str(condition.get("status", "")),
                str(condition.get("reason", "") or "-"),
                str(condition.get("message", "") or ""),
            ]
        )
    if kind.plural == "pods":  # a pod's message is shown once, in its Message field
        table, explain, notices = _once(str(row.get(kind.note) or ""), table, explain, notices)
    lines.append("Conditions:")
    lines += _table([["Type", "Status", "Reason", "Message"], *table]) if table else ["  <none>"]

    if explain:
        lines.append("Explain:")
        lines += [f"  {line}" if line else "" for line in explain]

    lines += sections or []
    events = [(at, n) for at, n in notices if not isinstance(n, Condition)]
    lines.append("Events:")
    if events:
        header = ["Type", "Reason", "Age", "From", "Message"]
        lines += _table(
            [
                header,
                ["-" * len(h) for h in header],
                *[[n.type, n.reason, _age(now, at), "allot-scheduler", n.note] for at, n in events],
            ]
        )
    else:
        lines.append("  <none>")
    return lines


_SAME = "(the Message above)"


def _once(
    message: str, table: list[list[str]], explain: list[str], notices: list[tuple[int, Any]]
) -> tuple[list[list[str]], list[str], list[tuple[int, Any]]]:
    """Conditions, explain lines and events of a pod with its message (a long one: the quota or node summary, often
    quoted inside another message) said only in the Message field: elsewhere it is referred to."""
    if len(message) < 60:  # short: said again where it belongs
        return table, explain, notices
    import msgspec

    table = [[*r[:3], r[3].replace(message, _SAME)] for r in table]
    explain = [line.replace(message, _SAME) for line in explain]
    notices = [
        (at, msgspec.structs.replace(n, note=n.note.replace(message, _SAME)) if hasattr(n, "note") else n)
        for at, n in notices
    ]
    return table, explain, notices


async def run_describe(args: argparse.Namespace, store: EventStore, *, now: int) -> list[str]:
    from allot_stack.describing import described

    kind = kind_named(args.what)
    found = await described(store, kind, args.name, args.namespace, now)
    return describe(
        kind, found.row, notices=found.notices, explain=found.explain, now=now, sections=found.sections
    )


def cmd_describe(args: argparse.Namespace) -> int:
    from allot_stack.connect import on_log

    kind_named(args.what)  # refused before connecting
    print("\n".join(asyncio.run(on_log(lambda store: run_describe(args, store, now=time.time_ns() // 1000)))))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "describe", help="one object with its conditions, events and why it stands where it does"
    )
    kind = p.add_argument("what", metavar="KIND", help="any kind allot get lists")
    kind.completions = all_words()  # type: ignore[attr-defined]  # checked by kind_named: an unknown kind exits 1
    name = p.add_argument(
        "name",
        type=object_name,
        metavar="NAME",
        help="its name (NS/NAME or NAME with -n for a namespaced kind)",
    )
    name.complete_names = True  # type: ignore[attr-defined]  # completion offers the names of the kind
    p.add_argument(
        "-n",
        "--namespace",
        type=namespace,
        help="its namespace (without it, a name found in one namespace only)",
    )
    p.set_defaults(func=cmd_describe)
