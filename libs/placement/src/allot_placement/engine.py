"""The placement engine: cluster view in, placement decisions out.

Responsibility: hold the node view (v1 Node, Device, NodeResourceTopology, bound and assumed pods), answer
``schedule(pod) -> Decision`` without changing that view, and change it only through explicit commands
(``upsert_*``/``delete_*``, ``assume``, ``add_bound_pod``, ``release``). The service and the simulators feed it
recorded inputs in order; replaying the same inputs re-derives the same decisions.

Invariants:
- Pure: no IO, clock or randomness. Every tie is broken by a documented total order (score, then node name; minors,
  NUMA ids, PCIe ids, table order inside allocators). Caches (parsed pods, per-node results, per-shape rankings)
  never influence results; ``digest()`` covers the allocation state only.
- Every cache key covers every input its filter or score reads. Node results are keyed by the node's content
  signature (resources, the labels placement reads, inventory and topology content, load, overrides, allocation
  state, what the GPU policy reads), shared by identical machines; per-node identities join the key only for the
  pods that read them: the node's name (``PodSpec.by_name``, a policy's ``reads_node_name``) and its device ids
  (``PodSpec.reads_device_ids``: HAMi's UUID selectors). ``PlacementEngine(..., caches=False)`` turns every cache
  off (tests check that decisions are the same either way).
- ``schedule`` evaluates every node that can fit, incrementally per pod shape (``_index``): the free-resource index
  (``_free``) leaves out nodes that fail NodeResourcesFit or the GPU shape, which changes no decision, and they are
  evaluated only to explain an unschedulable pod; unless ``percentageOfNodesToScore`` sets a feasible-node budget:
  then the nodes examined depend only on the node set and the pod (``budget``).
Concurrency: single-threaded; the scheduling cycle is serial, as in kube-scheduler.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from typing import Any, ClassVar

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import BoundAllocation
from allot_contracts.objects.inventory import Inventory, NodeInfo, Topology
from allot_contracts.objects.nodemetric import NodeMetric
from allot_contracts.objects.pod import Pod
from allot_placement import explain, reserved
from allot_placement._entries import Entry, Memos, fresh_resolver, memo_resolvers
from allot_placement._free import FreeIndex, need
from allot_placement._index import Rankings, ShapeIndex
from allot_placement.budget import budgeted_index
from allot_placement.config import PlacementConfig
from allot_placement.decision import Decision, Freed, GroupDecision
from allot_placement.device_view import complete_gpu
from allot_placement.devices import DeviceMemo
from allot_placement.evaluate import GpuPolicy, NodeResult
from allot_placement.loadaware import AssignedPod, LoadTracker, PodLoad
from allot_placement.nodeside import NodeOverrides, effective_info, effective_topology
from allot_placement.output import NodeSnapshot, snapshot_node
from allot_placement.pod import PodSpec, pod_key, pod_spec
from allot_placement.reasons import Reason
from allot_placement.reservations import Hold
from allot_placement.state import VF, Allocation, DeviceAlloc, NodeState, NumaAlloc

__all__ = ["PlacementEngine"]

_RESOURCE_LABELS = (
    n.LABEL_CPU_BIND_POLICY,
    n.LABEL_GPU_ISOLATION_PROVIDER,
    n.LABEL_GPU_MODEL,
    n.LABEL_GPU_PARTITION_POLICY,
    n.LABEL_GPU_VENDOR,
    n.LABEL_NUMA_ALLOCATE_STRATEGY,
    n.LABEL_NUMA_TOPOLOGY_POLICY,
)
# node results kept at least (the bound grows with the cluster: ``_MEMO_PER_NODE``). Few are asked twice: a node's
# signature changes with every pod placed on it, so at 6,000 nodes and 30,000 pods a bound of 400,000 saved 8 % of the
# evaluations a bound of 50,000 makes, for 200 MB more (docs/benchmarks/e2e.md, 2026-11-29, later)
_MEMO_LIMIT = 50_000
_MEMO_PER_NODE = 8  # node results kept per live node beyond ``_MEMO_LIMIT``'s floor
# The free-resource tests (small) and the interned node contents (about 1.3 kB each) have bounds of their own, twice
# and a quarter of the node results': under binpack a few node results answer most pods, so the results' bound alone
# let these grow to 480,000 tests and 29,000 contents (100 MB) at 6,000 nodes and 30,000 pods. A quarter, not a half,
# saved 12 MB more there for 4.5 % more evaluations (docs/benchmarks/placement.md, 2026-11-29).
_TESTS_PER_RESULT = 2.0
_CONTENTS_PER_RESULT = 0.25
_INDEX_ENTRY_BUDGET = 1_000_000
_LOG_SLACK = 4096  # the change log holds 4 entries per node and this many more, then drops its older half
_PARSE_CACHE_LIMIT = 4096


class PlacementEngine:
    """See the module docstring. ``PlacementEngine(PlacementConfig())`` uses the documented defaults;
    ``caches=False`` computes everything afresh for every pod (for tests: decisions must not change);
    ``free_index=False`` evaluates every node for a new pod shape instead of the candidates of the free-resource
    index (``_free``; for tests and benchmarks: decisions must not change)."""

    # The memos: answers keyed by node and pod signatures, recomputed on a miss, never read for what they hold
    # beyond that. A snapshot leaves them out (on openb after a 5,000-pod burst they are 93 of its 111 MB) and a
    # restored engine starts with them empty.
    MEMOS: ClassVar[tuple[str, ...]] = ("_memo", "_static_memo", "_admit_memo", "_dev_memo")

    def __init__(
        self,
        config: PlacementConfig | None = None,
        policy: GpuPolicy | None = None,
        *,
        caches: bool = True,
        free_index: bool = True,
    ) -> None:
        self.config = config or PlacementConfig()
        self.config_version = self.config.version
        self.caches = caches
        self._free = FreeIndex() if caches and free_index else None
        if policy is None and self.config.gpu_policy:
            from allot_placement.policies import make_policy

            policy = make_policy(self.config, caches)
        self.policy = policy
        from allot_placement.policies import KeyedChoice

        self._keyed = KeyedChoice(self.config.seed, caches)
        self._nodes: dict[str, NodeState] = {}
        self._pod_node: dict[str, str] = {}
        self._clock = 0  # global version counter (not time)
        self._changes: list[str] = []
        self._change_base = 0
        self._indexes = Rankings(_INDEX_ENTRY_BUDGET)
        self._memo: dict[tuple[int, bytes], NodeResult] = {}
        self._static_memo: dict[tuple[int, bytes, str], NodeResult] = {}
        # (node signature, pod key) -> the free-resource index admits the node: its room is a function of the
        # signature (allocatable, requests, pod count, device use), its need of the pod key
        self._admit_memo: dict[tuple[int, bytes], bool | NodeResult] = {}
        self._entries: dict[str, Entry] = {}
        self._ids: dict[Any, int] = {}
        self._next_id = 0  # ids are never reused, so trimming ``_ids`` cannot make two contents share one
        self._sig: dict[str, int] = {}
        # name -> (the objects its static and label ids were read from, those ids)
        self._static_of: dict[str, tuple[tuple[object, ...], int, int]] = {}
        self._dev_sig: dict[str, int] = {}
        self._dev_memo = DeviceMemo()
        self._label_id: dict[str, int] = {}
        self._order: list[str] | None = None  # live node names in name order (the budgeted walk's ring)
        self._parsed: dict[bytes, tuple[PodSpec | None, list[FieldIssue]]] = {}
        self.stats = {"evaluations": 0}
        self.holds: dict[str, Hold] = {}  # reservations placed on nodes (allot_placement.reserved)
        self._held_by: dict[str, str] = {}  # owner pod -> the reservation it was placed in
        self.loads = LoadTracker(
            self.config.load_aware
        )  # NodeMetrics and assigned pods (load-aware scheduling)

    # --- node-side inputs -------------------------------------------------------------------------------------------
    def upsert_node(self, info: NodeInfo) -> None:
        state = self._state(info.name)
        state.base, state.info = info, effective_info(info, state.overrides)
        self.loads.set_allocatable(info.name, info.allocatable)
        self.loads.set_thresholds(info.name, info.usage_thresholds)
        self.loads.changed()  # only this node's load can have moved: it is taken here
        state.load = self.loads.loads.get(info.name)
        self._touch(info.name)

    def delete_node(self, name: str) -> None:
        if name in self._nodes:
            self._nodes[name].info = self._nodes[name].base = None
            self._touch(name)

    # --- node side: overrides, NodeMetrics, time (allot_placement.nodeside, allot_placement.loadaware) --------------
    def set_overrides(self, name: str, overrides: NodeOverrides | None) -> None:
        """Batch/mid and amplified allocatable, and device liveness, beyond the Node object."""
        state = self._state(name)
        state.overrides = overrides
        state.info = effective_info(state.base, overrides)
        state.topology = effective_topology(state.base_topology, overrides)
        self._touch(name)

    def upsert_metric(self, metric: NodeMetric) -> None:
        self.loads.set_metric(metric)
        self._sync_loads()

    def delete_metric(self, name: str) -> None:
        self.loads.delete_metric(name)
        self._sync_loads()

    def advance(self, now: int) -> None:
        """Time passes (µs: the recorded time of the trigger being handled); NodeMetrics expire."""
        self.loads.advance(now)
        self._sync_loads()

    def track_assigned(self, node: str, pod: AssignedPod) -> None:
        """A pod assigned to ``node`` at ``pod.at``, with what its load estimate reads (load-aware scheduling)."""
        self.loads.assign(node, pod)
        self._sync_loads()

    def _sync_loads(self) -> None:
        for name in self.loads.changed():
            state = self._nodes.get(name)
            if state is not None:
                state.load = self.loads.loads.get(name)
                self._touch(name)

    def upsert_device(self, name: str, inventory: Inventory) -> None:
        self._state(name).inventory = inventory
        self._touch(name)

    def delete_device(self, name: str) -> None:
        if name in self._nodes:
            self._nodes[name].inventory = None
            self._touch(name)

    def upsert_topology(self, name: str, topology: Topology) -> None:
        state = self._state(name)
        state.base_topology, state.topology = topology, effective_topology(topology, state.overrides)
        self._touch(name)

    def delete_topology(self, name: str) -> None:
        if name in self._nodes:
            self._nodes[name].topology = self._nodes[name].base_topology = None
            self._touch(name)

    # --- pods -------------------------------------------------------------------------------------------------------
    def schedule(
        self,
        pod: Pod,
        reservations: reserved.ReservationContext | None = None,
        reserve_policy: str | None = None,
    ) -> Decision:
        """Decide where ``pod`` goes. Does not change the cluster view. ``reservations``: the reservations the pod
        matched (it may, or must, use one); ``reserve_policy``: the pod is a Reservation's reserve pod with this
        allocate policy (allot_placement.reserved)."""
        key = pod.key
        spec, errors = self._spec(pod)
        if spec is None:
            return explain.rejected(self, key, errors)
        if reserve_policy is not None:
            decide = (
                self._schedule_named(key, spec, reserved.NODE_NOT_MATCHED)
                if spec.node_name
                else self.schedule(pod)
            )
            return reserved.schedule_reserve(self, key, spec, reserve_policy, decide)
        if reservations is not None and not spec.node_name:
            return reserved.schedule(self, key, spec, reservations)
        if spec.node_name:
            return self._schedule_named(key, spec)
        resolve = self._resolver(spec)
        for name in spec.preferred_nodes:  # the scheduling hint: the first preferred node that fits wins
            got = resolve(name)
            if got is not None and got[1].feasible:
                res = self._resolved(resolve, name)
                return explain.scheduled(self, key, spec, name, res, [(name, res)])
        idx = self._index(spec, key)
        top = idx.top(max(self.config.top_scores, 1))
        pick = getattr(self.policy, "pick", None)
        chosen = None
        if top and pick is not None:  # a policy choosing among all feasible nodes (random)
            chosen = pick(key, list(idx.feasible))
        elif top and self.config.tie_break == "hash" and len(top) > 1 and top[1][1] == top[0][1]:
            top_score = top[0][1]
            chosen = self._keyed.pick(key, [nm for nm, s in idx.scores() if s == top_score])
        if chosen is not None:
            top = [(chosen, idx.score(chosen))] + [t for t in top if t[0] != chosen][: len(top) - 1]
        if not top:
            if self._free is not None:  # the explanation covers every node, the ones the index left out too
                self._indexes.complete(spec.key, idx, self._label_id, self._resolver(spec))
            return explain.unschedulable(
                self, key, idx.counts, idx.codes, idx.first_infeasible(self.config.max_node_reasons)
            )
        best = top[0][0]
        results = {nm: self._resolved(resolve, nm) for nm, _ in top}
        return explain.scheduled(self, key, spec, best, results[best], [(nm, results[nm]) for nm, _ in top])

    def _schedule_named(self, pod: str, spec: PodSpec, other_nodes: Reason = explain.NODE_NAME) -> Decision:
        """A pod with ``nodeName``: that node only; ``other_nodes`` is the reason every other node gives."""
        state = self._nodes.get(spec.node_name)
        total = self.nodes_total()
        counts: dict[str, int] = {}
        codes: dict[str, str] = {}
        others = total - (1 if state is not None and state.info is not None else 0)
        if others:
            msg, code = other_nodes
            counts[msg], codes[msg] = others, code
        if state is None or state.info is None:
            return explain.unschedulable(self, pod, counts, codes, [])
        res = self._result(state, spec)
        if not res.feasible:
            for msg, code in res.reasons:
                counts[msg], codes[msg] = counts.get(msg, 0) + 1, code
            return explain.unschedulable(self, pod, counts, codes, [(state.name, res.reasons)])
        return explain.scheduled(self, pod, spec, state.name, res, [(state.name, res)])

    def assume(self, decision: Decision) -> None:
        """Commit a Scheduled decision: its allocation becomes used."""
        if decision.outcome != n.SCHEDULED or decision.allocation is None:
            raise ValueError(
                f"only a Scheduled decision can be assumed (got {decision.outcome} for {decision.pod})"
            )
        self._apply(decision.pod, decision.allocation)
        if decision.reservation:
            reserved.allocate(self, decision)

    def add_bound_pod(self, pod: Pod) -> None:
        """Account a pod already bound to its ``nodeName`` with the allocation its annotations record. A pod that
        has finished (Succeeded or Failed) holds nothing."""
        key, node = pod.key, pod.node_name
        if not node:
            raise ValueError(f"pod {key} is not bound (no spec.nodeName)")
        if pod.phase in ("Succeeded", "Failed"):
            self.release(pod.namespace, pod.name)
            return
        bound = pod.bound or BoundAllocation()
        inv = self._nodes[node].inventory if node in self._nodes else None
        devices: dict[str, tuple[DeviceAlloc, ...]] = {}
        for dtype in sorted(bound.devices):
            entries = []
            for minor, res, buses in sorted(bound.devices[dtype]):
                dev = inv.device(dtype, minor) if inv is not None else None
                if dtype == n.GPU and dev is not None:
                    res = complete_gpu(res, dev.resources)
                entries.append(
                    DeviceAlloc(minor=minor, resources=res, vfs=tuple(VF(bus_id=b) for b in buses))
                )
            devices[dtype] = tuple(entries)
        exclusive = pod.resource_spec.exclusive
        alloc = Allocation(
            node=node,
            requests=dict(pod.requests),
            devices=devices,
            cpuset=bound.cpuset,
            cpu_exclusive="" if exclusive == "None" else exclusive,
            numa=tuple(NumaAlloc(node=z, resources=r) for z, r in sorted(bound.numa.items())),
        )
        self._apply(key, alloc)

    def release(self, namespace: str, name: str) -> Freed | None:
        """Free a pod's allocation; returns what was freed or ``None`` if the pod held nothing."""
        pod = f"{namespace}/{name}"
        if pod in self._held_by:
            reserved.unallocate(self, pod)
        node = self._pod_node.pop(pod, None)
        if node is None:
            return None
        alloc = self._nodes[node].remove(pod)
        self._touch(node)
        if pod in self.loads.where:
            self.loads.unassign(pod)
            self._sync_loads()
        return Freed(pod=pod, node=node, allocation=alloc)

    def schedule_group(
        self, pods: list[Pod], contexts: dict[str, reserved.ReservationContext] | None = None
    ) -> GroupDecision:
        """All-or-nothing: place every member as if assumed one after another, or none. ``contexts``: the
        reservations members matched (pod key -> context)."""
        decisions: list[Decision] = []
        applied: list[Decision] = []
        try:
            for m in pods:
                d = self.schedule(m, reservations=(contexts or {}).get(m.key))
                decisions.append(d)
                if d.outcome != n.SCHEDULED:
                    return explain.group_failure(self, pods, decisions, d)
                self._apply(d.pod, d.allocation)  # type: ignore[arg-type]
                if d.reservation:
                    reserved.allocate(self, d)
                applied.append(d)
                self._track_member(m, d)  # the next members see its load estimate (release() untracks it)
        finally:
            for d in reversed(applied):
                ns, _, nm = d.pod.partition("/")
                self.release(ns, nm)
        return GroupDecision(outcome=n.SCHEDULED, members=decisions)

    def _track_member(self, pod: Pod, d: Decision) -> None:
        """A gang member applied for the rest of its group's placement counts as assigned now (load-aware)."""
        alloc = d.allocation
        if alloc is None or alloc.node not in self.loads.metrics or not self.config.load_aware.enabled:
            return
        spec, _ = self._spec(pod)
        load = spec.load if spec is not None else PodLoad()
        requests = tuple(sorted(alloc.requests.items()))
        self.loads.assign(
            alloc.node, AssignedPod(key=d.pod, uid=pod.uid, requests=requests, load=load, at=self.loads.now)
        )
        self._sync_loads()

    def assume_group(self, group: GroupDecision) -> None:
        if group.outcome != n.SCHEDULED:
            raise ValueError("only a Scheduled group decision can be assumed")
        for d in group.members:
            self.assume(d)

    # --- reservations (allot_placement.reserved) --------------------------------------------------------------------
    def reserve(self, hold: Hold) -> None:
        """A Reservation placed on ``hold.node``: the node holds its remaining part for its owners."""
        reserved.reserve(self, hold)

    def unreserve(self, name: str) -> JsonObject | None:
        """The Reservation ended: what it still held goes back to the node; returns what was freed."""
        return reserved.unreserve(self, name)

    def update_hold(self, hold: Hold) -> None:
        """The Reservation's policy or order changed (same place, same owners)."""
        self.holds[hold.name] = hold

    # --- views ------------------------------------------------------------------------------------------------------
    def nodes_total(self) -> int:
        return len(self._label_id)

    def node_state(self, name: str) -> NodeState | None:
        return self._nodes.get(name)

    def node_names(self) -> list[str]:
        return sorted(name for name, s in self._nodes.items() if s.info is not None)

    def snapshot(self) -> dict[str, NodeSnapshot]:
        return {
            name: snapshot_node(self._nodes[name])
            for name in sorted(self._nodes)
            if self._nodes[name].info is not None or self._nodes[name].inventory is not None
        }

    def digest(self) -> str:
        pods = {p: self._nodes[node].pods[p].to_dict() for p, node in sorted(self._pod_node.items())}
        state: dict[str, object] = {"pods": pods, "nodes": self.snapshot()}
        if self.holds:
            state["holds"] = {
                n: [h.uid, h.node, h.policy, sorted(h.owners)] for n, h in sorted(self.holds.items())
            }
        blob = json.dumps(state, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    # --- internals --------------------------------------------------------------------------------------------------
    def _state(self, name: str) -> NodeState:
        state = self._nodes.get(name)
        if state is None:
            state = self._nodes[name] = NodeState(name)
        return state

    def _intern(self, key: Any) -> int:
        got = self._ids.get(key)
        if got is None:
            got = self._ids[key] = self._next_id
            self._next_id += 1
        return got

    def _touch(self, name: str) -> None:
        state = self._nodes[name]
        self._clock += 1
        state.version = self._clock
        info, inv, topo = state.info, state.inventory, state.topology
        if info is None and inv is None and topo is None and not state.pods:
            del self._nodes[name]
        if (info is None) == (name in self._label_id):  # a node appears or goes
            self._order = None
        if info is None:
            self._label_id.pop(name, None)
            self._sig.pop(name, None)
            self._static_of.pop(name, None)
            self._entries.pop(name, None)
        else:
            self._intern_node(name, state)
        if self._free is not None:
            self._free.update(name, state)
        self._changes.append(name)
        if len(self._changes) > 4 * len(self._nodes) + _LOG_SLACK:  # the older half goes
            drop = len(self._changes) // 2
            self._change_base += drop
            del self._changes[:drop]
        limit = max(_MEMO_LIMIT, _MEMO_PER_NODE * len(self._label_id))
        if len(self._memo) > limit or len(self._dev_memo.views) > limit:
            self._trim_caches()
        else:  # what fills without new node results (binpack reuses a few): each bounded on its own
            for memo, share in ((self._admit_memo, _TESTS_PER_RESULT), (self._ids, _CONTENTS_PER_RESULT)):
                if len(memo) > limit * share:
                    _drop_oldest(memo, len(memo) // 2)

    def _trim_caches(self) -> None:
        """Drop the older half of every memo (bounded memory for long-running services). The entries dropped
        are the ones inserted first; node signatures stay valid (ids are never reused), so what stays keeps
        answering, and the rankings hold node names, versions and scores, no signature."""
        for memo in (
            self._memo,
            self._static_memo,
            self._admit_memo,
            self._ids,
            self._dev_memo.results,
            self._dev_memo.views,
        ):
            _drop_oldest(memo, len(memo) // 2)  # type: ignore[arg-type]

    def _intern_node(self, name: str, state: NodeState) -> None:
        info, inv, topo = state.info, state.inventory, state.topology
        assert info is not None
        overrides, load = state.overrides, state.load
        ratio = overrides.ratio if overrides is not None else None
        # the static part changes only when one of the (frozen) objects it is read from is replaced
        sources = (info, inv, topo, load, overrides)
        known = self._static_of.get(name)
        if known is not None and all(a is b for a, b in zip(known[0], sources, strict=True)):
            static, label_id = known[1], known[2]
        else:
            static = self._intern(
                (
                    tuple(info.allocatable.items()),
                    tuple((k, info.labels[k]) for k in _RESOURCE_LABELS if k in info.labels),
                    info.reserved_cpus,
                    inv.content_key if inv else None,
                    topo.content_key if topo else None,
                    load,
                    (overrides.devices_stale, overrides.cpu_amplification) if overrides is not None else None,
                )
            )
            label_id = self._intern((tuple(info.labels.items()), info.taints, info.unschedulable))
            self._static_of[name] = (sources, static, label_id)
        dyn = state.dyn_key()
        extra = None  # what the amplified-CPU filter and the GPU policy read beyond the totals in ``dyn``
        if ratio is not None or self.policy is not None:
            amplified = state.amplified_extra(ratio)
            extra = (
                amplified[0],
                tuple(sorted(amplified[1].items())),
                self.policy.state_key(state) if self.policy is not None else None,
            )
        self._sig[name] = self._intern((static, dyn, extra))
        self._dev_sig[name] = self._intern((static, dyn[2], dyn[3]))
        self._label_id[name] = label_id
        self._entries[name] = (
            state,
            self._sig[name],
            self._dev_sig[name],
            label_id,
            bool(info.taints) or info.unschedulable,
        )

    def _apply(self, pod: str, alloc: Allocation) -> None:
        old = self._pod_node.get(pod)
        if old is not None and old != alloc.node:
            ns, _, nm = pod.partition("/")
            self.release(ns, nm)
        self._state(alloc.node).apply(pod, alloc)
        self._pod_node[pod] = alloc.node
        self._touch(alloc.node)

    def _spec(self, pod: Pod) -> tuple[PodSpec | None, list[FieldIssue]]:
        key = pod_key(pod)
        if not self.caches:
            return pod_spec(pod, self.config.default_cpu_bind_policy, key)
        got = self._parsed.get(key)
        if got is None:
            if len(self._parsed) >= _PARSE_CACHE_LIMIT:
                self._parsed.clear()
            got = self._parsed[key] = pod_spec(pod, self.config.default_cpu_bind_policy, key)
        return got

    def _result(self, state: NodeState, spec: PodSpec) -> NodeResult:
        return self._resolved(self._resolver(spec), state.name)

    @staticmethod
    def _resolved(resolve: Callable[[str], tuple[int, NodeResult] | None], name: str) -> NodeResult:
        got = resolve(name)
        assert got is not None
        return got[1]

    def _resolver(self, spec: PodSpec) -> Callable[[str], tuple[int, NodeResult] | None]:
        """``name -> (version, result)`` for ``spec``: static filters then the resource side, both memoised (what
        their keys cover: see the module docstring)."""
        return self._resolvers(spec, None)[0]

    def _resolvers(
        self, spec: PodSpec, admits: Callable[[str], bool] | None
    ) -> tuple[
        Callable[[str], tuple[int, NodeResult] | None], Callable[[str], tuple[int, NodeResult] | None] | None
    ]:
        """The resolver of ``spec`` (``_resolver``) and, with ``admits`` (the free-resource index's test of the
        pod's need), the same resolver for the nodes it admits, ``None`` for the others: what a ranking catching up
        evaluates. The test is memoised by node signature and pod key."""
        if not self.caches:
            return fresh_resolver(self._entries, spec, self.config, self.policy, self.stats), None
        memos = Memos(self._static_memo, self._memo, self._admit_memo, self._dev_memo)
        return memo_resolvers(
            self._entries, spec, admits, memos, self.config, self.policy, self.stats, self._intern
        )

    def _index(self, spec: PodSpec, pod: str) -> ShapeIndex:
        if (
            self.config.percentage_of_nodes_to_score < 100
        ):  # the nodes examined within the budget, for this pod
            self._order = self._order or sorted(self._label_id)
            return budgeted_index(self._order, pod, self.config, self._resolver(spec))
        if not self.caches:  # a ranking of every node, built for this pod alone
            fresh = ShapeIndex(0)
            fresh.build(self._live(), self._resolver(spec))
            return fresh
        free = (self._free, need(spec)) if self._free is not None else None
        log = (self._changes, self._change_base)
        resolve, admitted = self._resolvers(spec, free[0].admitter(free[1]) if free is not None else None)
        return self._indexes.ranking(spec.key, log, free, resolve, self._live, admitted)

    def _live(self) -> list[str]:
        return [name for name, s in self._nodes.items() if s.info is not None]


def _drop_oldest(memo: dict[Any, Any], count: int) -> None:
    """Remove the first ``count`` entries of ``memo`` in insertion order."""
    for key in list(itertools.islice(memo, count)):
        del memo[key]
