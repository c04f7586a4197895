"""The quota forest and its incremental accounting.

Design
------
All quotas live in one ``Hierarchy`` keyed by name (names are global, as upstream). Trees are identified by
their root: the built-in ``koordinator-root-quota`` for the default tree, or a quota labelled ``is-root`` (an
ElasticQuotaProfile's quota) for a separate tree. The built-in system and default quotas sit outside every tree;
their runtime is their max, and their usage is taken off the default tree's total.

Per quota we keep (canonical ResourceLists, zero entries dropped):

- ``self_request`` / ``self_used``: the quota's own pods (pending + assigned / assigned), masked to its max keys;
- ``child_request`` = Σ children's ``limited`` + ``self_request``; ``used`` = Σ children's ``used`` + ``self_used``;
- ``request`` = ``child_request`` (or ``max(child_request, min)`` when the quota does not lend);
  ``limited`` = ``min(request, max)`` — what the parent's calculator sees;
- with the guarantee gate: ``allocated`` = Σ children's ``guaranteed`` + ``self_used``; ``guaranteed`` =
  ``max(allocated, min)``.

Incremental recomputation. A pod change touches one quota; the delta of its ``limited`` (and ``used``,
``guaranteed``) is pushed to the parent, whose own ``limited`` delta is pushed further, stopping as soon as a
delta is empty (O(depth)). Each parent carries a calculator version that is bumped when a child's input changes.
Runtimes are computed lazily: :meth:`Hierarchy.runtime` walks the path root → quota and recomputes a parent's
calculator only if its version moved or the total handed to it changed (``runtime.redistribute``). Calculators
off that path stay stale until someone asks (:meth:`refresh_all` brings everything up to date, recomputing only
stale ones). Because every runtime is a function of its ancestors' inputs only, lazy and eager evaluation give
the same numbers, so replays compare equal whatever was asked in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from allot_contracts.resources import ResourceList, add_into, cap, mask, raise_to, remove_zeros, subtract
from allot_quota.config import QuotaConfig
from allot_quota.model import DEFAULT_QUOTA, ROOT_QUOTA, SYSTEM_QUOTA, PodInfo, QuotaSpec
from allot_quota.runtime import Share, redistribute, scale_mins

__all__ = ["Hierarchy", "Node", "PodEntry"]

_OUTSIDE: Final = frozenset({SYSTEM_QUOTA, DEFAULT_QUOTA})


@dataclass(slots=True)
class PodEntry:
    info: PodInfo
    quota: str
    masked: ResourceList  # requests masked to the quota's max keys
    assigned: bool
    seq: int  # arrival order in this engine


class Node:
    __slots__ = (
        "allocated",
        "assigned_pods",
        "auto_min",
        "calc_done",
        "calc_total",
        "calc_version",
        "child_request",
        "children",
        "guaranteed",
        "keys",
        "limited",
        "np_request",
        "np_used",
        "pods",
        "request",
        "runtime",
        "self_request",
        "self_used",
        "spec",
        "used",
    )

    def __init__(self, spec: QuotaSpec) -> None:
        self.spec = spec
        self.keys = _keys(spec)  # the keys pods' requests are masked to (None: unlimited), kept with ``spec``
        self.children: list[str] = []
        self.pods: dict[str, PodEntry] = {}
        self.assigned_pods = 0  # how many of ``pods`` are assigned (kept with them)
        self.self_request: ResourceList = {}
        self.self_used: ResourceList = {}
        self.np_request: ResourceList = {}
        self.np_used: ResourceList = {}
        self.child_request: ResourceList = {}
        self.used: ResourceList = {}
        self.request: ResourceList = {}
        self.limited: ResourceList = {}
        self.allocated: ResourceList = {}
        self.guaranteed: ResourceList = {}
        self.runtime: ResourceList = {}
        self.auto_min: ResourceList = dict(spec.min)
        self.calc_version = 0
        self.calc_done = -1
        self.calc_total: ResourceList | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def mask_keys(self) -> frozenset[str] | None:
        return self.keys


def _keys(spec: QuotaSpec) -> frozenset[str] | None:
    return None if spec.unlimited else frozenset(spec.max)


def _neg(a: ResourceList) -> ResourceList:
    return {k: -v for k, v in a.items()}


def _delta(new: ResourceList, old: ResourceList) -> ResourceList:
    """``remove_zeros(subtract(new, old))`` (sorted, no zero entry) in one pass: called on every change of a pod."""
    if new == old:
        return {}
    out = {k: v - old.get(k, 0) for k, v in new.items()}
    for k, v in old.items():
        if k not in new:
            out[k] = -v
    return {k: out[k] for k in sorted(out) if out[k]}


class Hierarchy:
    """Mutable forest of quotas with incremental request/used propagation and lazy runtimes."""

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self.nodes: dict[str, Node] = {}
        self.tree_roots: set[str] = set()
        self.cluster_total: ResourceList = {}
        self.recomputed = 0  # calculators recomputed (for benchmarks and tests)
        self._names: tuple[str, ...] | None = (
            None  # sorted names of ``nodes``, kept until a quota comes or goes
        )

    def names(self) -> tuple[str, ...]:
        """The quotas' names, sorted."""
        if self._names is None:
            self._names = tuple(sorted(self.nodes))
        return self._names

    # ----------------------------------------------------------------- structure
    def is_tree_root(self, node: Node) -> bool:
        return node.spec.name == ROOT_QUOTA or node.spec.is_root

    def parent_of(self, node: Node) -> Node | None:
        if node.name in _OUTSIDE or self.is_tree_root(node):
            return None
        return self.nodes[node.spec.parent]

    def tree_root_of(self, name: str) -> Node | None:
        node: Node | None = self.nodes[name]
        if name in _OUTSIDE:
            return None
        while node is not None and not self.is_tree_root(node):
            node = self.parent_of(node)
        return node

    def path(self, name: str) -> list[str]:
        """Names from the tree root down to ``name`` (just ``[name]`` outside the trees)."""
        out = [name]
        node = self.parent_of(self.nodes[name])
        while node is not None:
            out.append(node.name)
            node = self.parent_of(node)
        return out[::-1]

    def add(self, spec: QuotaSpec) -> None:
        node = Node(spec)
        self.nodes[spec.name] = node
        self._names = None
        if spec.is_root:
            self.tree_roots.add(spec.name)
        self._refresh_request(node)
        self._refresh_guaranteed(node)
        self._attach(node)

    def replace(self, spec: QuotaSpec) -> None:
        node = self.nodes[spec.name]
        self._detach(node)
        node.spec = spec
        node.keys = _keys(spec)
        self.tree_roots.discard(spec.name)
        if spec.is_root:
            self.tree_roots.add(spec.name)
        self._recount_self(node)
        node.child_request = dict(node.self_request)
        node.used = dict(node.self_used)
        node.allocated = dict(node.self_used)
        for c in node.children:
            child = self.nodes[c]
            add_into(node.child_request, child.limited)
            add_into(node.used, child.used)
            add_into(node.allocated, child.guaranteed)
        node.limited, node.guaranteed = {}, {}
        self._refresh_request(node)
        self._refresh_guaranteed(node)
        node.calc_version += 1
        self._attach(node)

    def remove(self, name: str) -> None:
        node = self.nodes[name]
        self._detach(node)
        self.tree_roots.discard(name)
        del self.nodes[name]
        self._names = None

    def _attach(self, node: Node) -> None:
        parent = self.parent_of(node)
        if parent is None:
            return
        parent.children.append(node.name)
        parent.children.sort()
        parent.calc_version += 1
        self._bubble(parent, node.limited, node.used, node.guaranteed)

    def _detach(self, node: Node) -> None:
        parent = self.parent_of(node)
        if parent is None:
            return
        parent.children.remove(node.name)
        parent.calc_version += 1
        self._bubble(parent, _neg(node.limited), _neg(node.used), _neg(node.guaranteed))

    # ----------------------------------------------------------------- accounting
    def _refresh_request(self, node: Node, delta: bool = True) -> ResourceList:
        """Recompute ``request``/``limited`` from ``child_request``; return the delta of ``limited`` (empty without
        ``delta``: a quota without a parent has no one to pass it to)."""
        spec = node.spec
        lent = spec.allow_lent and not self.config.enable_guarantee
        req = node.child_request if lent else raise_to(node.child_request, spec.min)
        request = remove_zeros(req)
        limited = dict(request) if spec.unlimited else remove_zeros(cap(req, spec.max))
        change = _delta(limited, node.limited) if delta else {}
        node.request = request
        node.limited = limited
        return change

    def _refresh_guaranteed(self, node: Node) -> ResourceList:
        if not self.config.enable_guarantee:
            return {}
        new = remove_zeros(raise_to(node.allocated, node.spec.min))
        delta = remove_zeros(subtract(new, node.guaranteed))
        node.guaranteed = new
        return delta

    def _bubble(
        self, parent: Node | None, d_limited: ResourceList, d_used: ResourceList, d_guaranteed: ResourceList
    ) -> None:
        while parent is not None and (d_limited or d_used or d_guaranteed):
            if d_limited or d_guaranteed:
                parent.calc_version += 1
            if d_limited:
                add_into(parent.child_request, d_limited)
            if d_used:
                add_into(parent.used, d_used)
            if d_guaranteed:
                add_into(parent.allocated, d_guaranteed)
            d_limited = self._refresh_request(parent) if d_limited else {}
            d_guaranteed = self._refresh_guaranteed(parent) if d_guaranteed else {}
            parent = self.parent_of(parent)

    def _self_delta(self, node: Node, d_request: ResourceList, d_used: ResourceList) -> None:
        if d_request:
            add_into(node.self_request, d_request)
            add_into(node.child_request, d_request)
        if d_used:
            add_into(node.self_used, d_used)
            add_into(node.used, d_used)
            if self.config.enable_guarantee:
                add_into(node.allocated, d_used)
        parent = self.parent_of(node)
        if parent is None:  # nothing to pass up
            if d_request:
                self._refresh_request(node, delta=False)
            if d_used:
                self._refresh_guaranteed(node)
            return
        d_limited = self._refresh_request(node) if d_request else {}
        d_guaranteed = self._refresh_guaranteed(node) if d_used else {}
        self._bubble(parent, d_limited, d_used, d_guaranteed)

    def _recount_self(self, node: Node) -> None:
        keys = node.mask_keys()
        node.self_request, node.self_used, node.np_request, node.np_used = {}, {}, {}, {}
        node.assigned_pods = sum(1 for entry in node.pods.values() if entry.assigned)
        for entry in node.pods.values():
            entry.masked = entry.info.requests if keys is None else mask(entry.info.requests, keys)
            add_into(node.self_request, entry.masked)
            if not entry.info.preemptible:
                add_into(node.np_request, entry.masked)
            if entry.assigned:
                add_into(node.self_used, entry.masked)
                if not entry.info.preemptible:
                    add_into(node.np_used, entry.masked)

    def add_pod(self, entry: PodEntry) -> None:
        node = self.nodes[entry.quota]
        keys = node.mask_keys()
        entry.masked = entry.info.requests if keys is None else mask(entry.info.requests, keys)
        node.pods[entry.info.key] = entry
        node.assigned_pods += entry.assigned
        if not entry.info.preemptible:
            add_into(node.np_request, entry.masked)
            if entry.assigned:
                add_into(node.np_used, entry.masked)
        self._self_delta(node, entry.masked, entry.masked if entry.assigned else {})

    def remove_pod(self, entry: PodEntry) -> None:
        node = self.nodes[entry.quota]
        del node.pods[entry.info.key]
        node.assigned_pods -= entry.assigned
        if not entry.info.preemptible:
            add_into(node.np_request, entry.masked, -1)
            if entry.assigned:
                add_into(node.np_used, entry.masked, -1)
        neg = _neg(entry.masked)
        self._self_delta(node, neg, neg if entry.assigned else {})

    def set_assigned(self, entry: PodEntry, assigned: bool) -> None:
        if entry.assigned == assigned:
            return
        node = self.nodes[entry.quota]
        entry.assigned = assigned
        sign = 1 if assigned else -1
        node.assigned_pods += sign
        if not entry.info.preemptible:
            add_into(node.np_used, entry.masked, sign)
        self._self_delta(node, {}, entry.masked if assigned else _neg(entry.masked))

    # ----------------------------------------------------------------- runtime
    def tree_total(self, root: Node) -> ResourceList:
        """The capacity a tree shares out: its root's total-resource, or, for the default tree, the cluster's."""
        if root.name != ROOT_QUOTA:
            return dict(root.spec.total_resource if root.spec.total_resource is not None else root.spec.min)
        total = dict(self.cluster_total)
        for name in sorted(self.tree_roots):
            r = self.nodes[name].spec
            if not r.ignore_default_tree and r.total_resource:
                for k, v in r.total_resource.items():
                    total[k] = total.get(k, 0) - v
        for name in sorted(_OUTSIDE):
            if name in self.nodes:
                for k, v in self.nodes[name].used.items():
                    total[k] = total.get(k, 0) - v
        return {k: max(0, v) for k, v in total.items()}

    def _root_runtime(self, root: Node) -> ResourceList:
        total = self.tree_total(root)
        root.runtime = total if root.spec.unlimited else {k: total.get(k, 0) for k in root.spec.max}
        return root.runtime

    def _ensure_calc(self, parent: Node, total: ResourceList) -> None:
        if parent.calc_done == parent.calc_version and parent.calc_total == total:
            return
        self.recomputed += 1
        kids = [self.nodes[c] for c in parent.children]
        runtimes: dict[str, ResourceList] = {k.name: {} for k in kids}
        auto: dict[str, ResourceList] = {k.name: {} for k in kids}
        dims = sorted({d for k in kids for d in k.spec.max})
        lent_allowed = not self.config.enable_guarantee
        scale = self.config.enable_min_quota_scale
        for d in dims:
            part = [k for k in kids if d in k.spec.max]
            t = total.get(d, 0)
            mins = [(k.name, k.spec.min.get(d, 0)) for k in part]
            scaled = scale_mins(t, mins) if scale else None
            shares = []
            for k, (_, m) in zip(part, mins, strict=True):
                eff = scaled[k.name] if scaled is not None else m
                auto[k.name][d] = eff
                floor = max(eff, k.guaranteed.get(d, 0))
                weight = k.spec.weight.get(d, 0)
                shares.append(
                    Share(k.name, k.limited.get(d, 0), floor, weight, k.spec.allow_lent and lent_allowed)
                )
            for name, rt in redistribute(t, shares).items():
                runtimes[name][d] = rt
        for k in kids:
            k.runtime = runtimes[k.name]
            k.auto_min = auto[k.name]
        parent.calc_done = parent.calc_version
        parent.calc_total = dict(total)

    def runtime(self, name: str) -> ResourceList:
        """Bring the calculators on the path root → ``name`` up to date and return ``name``'s runtime."""
        node = self.nodes[name]
        if name in _OUTSIDE:
            node.runtime = dict(node.spec.max)
            return node.runtime
        chain: list[Node] = []
        cur = node
        while not self.is_tree_root(cur):
            chain.append(cur)
            parent = self.parent_of(cur)
            assert parent is not None
            cur = parent
        self._root_runtime(cur)
        for child in reversed(chain):
            parent = self.parent_of(child)
            assert parent is not None
            self._ensure_calc(parent, parent.runtime)
        return node.runtime

    def refresh_all(self) -> None:
        """Bring every runtime up to date, recomputing only stale calculators."""
        for name in sorted(_OUTSIDE & self.nodes.keys()):
            self.nodes[name].runtime = dict(self.nodes[name].spec.max)
        roots = sorted(self.tree_roots | ({ROOT_QUOTA} & self.nodes.keys()))
        stack = [self.nodes[r] for r in reversed(roots)]
        for r in stack:
            self._root_runtime(r)
        while stack:
            parent = stack.pop()
            if not parent.children:
                continue
            self._ensure_calc(parent, parent.runtime)
            stack.extend(self.nodes[c] for c in reversed(parent.children))

    def invalidate(self) -> None:
        """Mark every calculator stale (a full recompute follows on the next refresh)."""
        for node in self.nodes.values():
            node.calc_done = -1
