"""What ``allot describe KIND NAME`` reads from the log about one object.

:func:`described`: the object's row (as ``allot get`` loads it, :mod:`allot_stack.listing`), the Kubernetes Events
the binder renders about it (:mod:`binder.notices`) and, for a pod, its ``PodScheduled`` conditions, the lines that
explain where it stands (a pod: ``allot explain pod`` after its timeline; a node: what the node side says; a gang:
the gang-coordinator's explanation) and, for a node, its Allocated resources and GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allot_eventstore.protocol import EventStore
from allot_intake.errors import InputError
from allot_stack.explain import cluster, explain, history
from allot_stack.explain_node import allocated_lines, explain_node, node_history
from allot_stack.listing import loader, rendered
from allot_stack.logtools import cluster_view
from allot_views.kinds import KUBE_KINDS, Kind, Selector, select


@dataclass(frozen=True)
class Described:
    """One object as ``allot describe`` shows it: its row, ``(recorded_at, notice or condition)`` in log order, the
    lines that explain it, and extra sections (a node's Allocated resources and GPUs)."""

    row: Mapping[str, object]
    notices: list[tuple[int, Any]]
    explain: list[str]
    sections: list[str]


async def described(store: EventStore, kind: Kind, name: str, namespace: str | None, now: int) -> Described:
    """The object ``name`` (``NS/NAME`` for a namespaced kind, or in ``namespace``); refused input when it is not
    there, or when no namespace is given and the name is in several."""
    if kind.namespaced and "/" in name:
        namespace, _, name = name.partition("/")
    rows = await loader(kind)(store, now)
    found = select(
        kind, rows, namespace=namespace if kind.namespaced else None, selector=Selector(), names=[name]
    )
    if not found:
        where = f" in namespace {namespace}" if kind.namespaced and namespace else ""
        raise InputError(f'{kind.plural} "{name}" not found{where}')
    if len(found) > 1:  # no -n: the name is in several namespaces
        spaces = ", ".join(sorted(str(r.get("namespace")) for r in found))
        raise InputError(f'{kind.plural} "{name}" is in namespaces {spaces}: give -n NS or NS/{name}')
    row = found[0]
    notices = await events_of(store, KUBE_KINDS[kind.plural], str(row.get("namespace", "")), str(row["name"]))
    return Described(
        row, notices, await explain_lines(store, kind, row, now), await node_sections(store, kind, row)
    )


async def events_of(store: EventStore, kind: str, namespace: str, name: str) -> list[tuple[int, Any]]:
    """``(recorded_at, notice)`` of every Event the binder renders about this object, in log order, and (for a pod)
    its ``PodScheduled`` conditions as ``(recorded_at, condition)``."""
    found: list[tuple[int, Any]] = []
    async for at, out in rendered(store):
        for notice in out.notices:
            r = notice.regarding
            if r.kind == kind and r.name == name and (r.namespace or "") == namespace:
                found.append((at, notice))
        for condition in out.conditions:
            if kind == "Pod" and condition.pod.key == f"{namespace}/{name}":
                found.append((at, condition))
    return found


def pod_explain(lines: list[str]) -> list[str]:
    """What ``allot explain pod`` says after the timeline: where the pod stands and why."""
    if "timeline:" not in lines:
        return []
    rest = lines[lines.index("timeline:") + 1 :]
    while rest and rest[0].startswith("  #"):
        rest = rest[1:]
    return [line for line in rest if line.strip()]


async def explain_lines(store: EventStore, kind: Kind, row: Mapping[str, object], now: int) -> list[str]:
    if kind.plural == "pods":
        key = f"{row['namespace']}/{row['name']}"
        return pod_explain(explain(key, *await history(store, key), await cluster(store)))
    if kind.plural == "nodes":
        name = str(row["name"])
        lines = explain_node(name, await node_history(store, name), now)
        body = lines[2 : lines.index("timeline:")] if "timeline:" in lines else lines[2:]
        return [line for line in body if line.strip()]
    if kind.plural == "gangs":
        return str(row.get("explain") or "").splitlines()
    return []


async def node_sections(store: EventStore, kind: Kind, row: Mapping[str, object]) -> list[str]:
    """A node's Allocated resources and GPUs, from the same fold as ``allot get nodes`` and the web view."""
    if kind.plural != "nodes":
        return []
    return allocated_lines(await cluster_view(store), str(row["name"]))
