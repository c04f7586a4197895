"""Read-only views of the quota state: ``allot quota tree`` rows, snapshots and the status annotations.

Design
------
Every view refreshes the runtimes it shows (only stale calculators are recomputed) and renders quantities as
Kubernetes quantity strings in maps with sorted keys, so the output is JSON-ready and stable across processes.
``tree_view`` lists each tree depth-first with children in name order: the default tree (from
``koordinator-root-quota``), then the profile trees by root name, then the system and default quotas.
``status_annotations`` gives what the binder writes back on the ElasticQuota object (JSON ResourceLists under
the upstream annotation keys); ``status_patch`` adds ``status.used`` for a merge patch.
"""

from __future__ import annotations

from typing import TypedDict

from allot_contracts.jsonvalue import JsonObject
from allot_contracts.resources import ResourceList, add_into, format_resource_list, to_json
from allot_quota.model import (
    ANNO_ALLOCATED,
    ANNO_CHILD_REQUEST,
    ANNO_GUARANTEED,
    ANNO_NP_REQUEST,
    ANNO_NP_USED,
    ANNO_REQUEST,
    ANNO_RUNTIME,
    DEFAULT_QUOTA,
    ROOT_QUOTA,
    SYSTEM_QUOTA,
)
from allot_quota.tree import Hierarchy, Node

__all__ = [
    "QuotaRow",
    "QuotaUse",
    "Snapshot",
    "snapshot",
    "status_annotations",
    "status_patch",
    "tree_view",
]


class QuotaRow(TypedDict):
    """One row of ``allot quota tree``: a quota, where it sits, its dimensions and its amounts as quantities."""

    name: str
    namespace: str
    parent: str
    tree: str
    depth: int
    is_parent: bool
    allow_lent: bool
    dimensions: list[str]
    min: dict[str, str]
    max: dict[str, str]
    runtime: dict[str, str]
    used: dict[str, str]
    request: dict[str, str]
    pods: int
    children: int


class QuotaUse(TypedDict):
    max: dict[str, str]
    min: dict[str, str]
    request: dict[str, str]
    runtime: dict[str, str]
    used: dict[str, str]


class Snapshot(TypedDict):
    quotas: dict[str, QuotaUse]


def _subtree_np(h: Hierarchy, node: Node) -> tuple[ResourceList, ResourceList]:
    req, used = dict(node.np_request), dict(node.np_used)
    for c in node.children:
        r, u = _subtree_np(h, h.nodes[c])
        add_into(req, r)
        add_into(used, u)
    return req, used


def _row(h: Hierarchy, node: Node, depth: int, tree: str) -> QuotaRow:
    spec = node.spec
    dims = sorted(set(spec.max) | set(node.runtime) | set(node.used) | set(node.request))
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "parent": "" if h.parent_of(node) is None else spec.parent,
        "tree": tree,
        "depth": depth,
        "is_parent": spec.is_parent,
        "allow_lent": spec.allow_lent,
        "dimensions": dims,
        "min": format_resource_list(spec.min),
        "max": {} if spec.unlimited else format_resource_list(spec.max),
        "runtime": format_resource_list(node.runtime),
        "used": format_resource_list(node.used),
        "request": format_resource_list(node.request),
        "pods": len(node.pods),
        "children": len(node.children),
    }


def _roots(h: Hierarchy) -> list[str]:
    roots = [ROOT_QUOTA] if ROOT_QUOTA in h.nodes else []
    return roots + sorted(h.tree_roots)


def tree_view(h: Hierarchy) -> list[QuotaRow]:
    h.refresh_all()
    rows: list[QuotaRow] = []
    for root in _roots(h):
        stack = [(h.nodes[root], 0)]
        while stack:
            node, depth = stack.pop()
            rows.append(_row(h, node, depth, root))
            stack.extend((h.nodes[c], depth + 1) for c in reversed(node.children))
    for name in (SYSTEM_QUOTA, DEFAULT_QUOTA):
        if name in h.nodes:
            rows.append(_row(h, h.nodes[name], 0, ""))
    return rows


def snapshot(h: Hierarchy) -> Snapshot:
    h.refresh_all()
    quotas: dict[str, QuotaUse] = {}
    for name in sorted(h.nodes):
        node = h.nodes[name]
        quotas[name] = {
            "max": {} if node.spec.unlimited else format_resource_list(node.spec.max),
            "min": format_resource_list(node.spec.min),
            "request": format_resource_list(node.request),
            "runtime": format_resource_list(node.runtime),
            "used": format_resource_list(node.used),
        }
    return {"quotas": quotas}


def status_annotations(h: Hierarchy, name: str) -> dict[str, str]:
    node = h.nodes[name]
    h.runtime(name)
    np_req, np_used = _subtree_np(h, node)
    out = {
        ANNO_RUNTIME: to_json(node.runtime),
        ANNO_REQUEST: to_json(node.request),
        ANNO_CHILD_REQUEST: to_json(node.child_request),
        ANNO_NP_REQUEST: to_json(np_req),
        ANNO_NP_USED: to_json(np_used),
    }
    if h.config.enable_guarantee:
        out[ANNO_GUARANTEED] = to_json(node.guaranteed)
        out[ANNO_ALLOCATED] = to_json(node.allocated)
    return dict(sorted(out.items()))


def status_patch(h: Hierarchy, name: str) -> JsonObject:
    """A JSON merge patch for the ElasticQuota object: status annotations plus ``status.used``."""
    node = h.nodes[name]
    return {
        "metadata": {"annotations": dict(status_annotations(h, name))},
        "status": {"used": dict(format_resource_list(node.used))},
    }
