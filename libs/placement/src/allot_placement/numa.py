"""NUMA placement on one node: policies, topology-manager hint merge, NUMA resource distribution, cpusets.

Responsibility: ``numa_plan`` decides, for one pod on one node, whether NUMA/CPU orchestration applies and if so
returns the plan: the NUMA affinity mask devices must respect, per-NUMA resources and the cpuset — or the reason the
node cannot host the pod.

Rules (Koordinator NodeNUMAResource + topology manager, with our decisions):
- Node policy = label ``numa-topology-policy``, else the kubelet policy in the NodeResourceTopology. A pod policy
  (``numa-topology-spec``) that differs from a set node policy is unschedulable there.
- CPU binding: the pod's intent (see ``pod``), or the node's ``cpu-bind-policy`` label / kubelet full-pcpus-only,
  which forces binding for any pod with CPU requests (the pod's required policy must agree).
- Restricted / SingleNUMANode / BestEffort run the hint merge over the NUMA provider (cpu, memory, ...) and the
  device provider (``devices.device_hints``): every permutation of one hint per resource is ANDed; preferred and
  narrower masks win, then higher score (decision 4: ties keep the first permutation in enumeration order).
  ``singleNUMANodeExclusive: Required`` (the default when the pod sets a policy) forbids multi-NUMA masks on nodes
  used by single-NUMA pods and vice versa; NUMA status counts every pod with a NUMA-bound allocation (decision 7).
  A resource without any hint: Restricted / SingleNUMANode refuse the node (``Unsatisfied NUMA <r>``), BestEffort
  uses every NUMA node.
- Capacity: a zone's cpu less the reserved CPUs in it (kubelet, kubelet-managed cpusets, node reservation).
- Distribution: per resource, NUMA nodes of the mask by (available, id) ascending (decision 7), each taking its even
  share of what remains rounded down (whole CPUs, or whole cores under required FullPCPUs, when binding).
Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from itertools import product
from typing import NamedTuple

import msgspec

from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import Topology
from allot_placement import reasons as rs
from allot_placement.config import PlacementConfig, Strategy
from allot_placement.cpus import bind_policy_holds, take_cpus
from allot_placement.devices import device_hints, numa_subsets
from allot_placement.pod import PodSpec
from allot_placement.reasons import Reason
from allot_placement.state import NodeState, NumaAlloc, amplify

__all__ = ["NumaPlan", "numa_plan"]

Hint = tuple[frozenset[int] | None, bool, int]
_FORCED = {"FullPCPUsOnly": "FullPCPUs", "FullPCPUs": "FullPCPUs", "SpreadByPCPUs": "SpreadByPCPUs"}


class NumaPlan(msgspec.Struct, frozen=True, kw_only=True):
    mask: frozenset[int] | None  # device NUMA affinity (None = unrestricted)
    numa: tuple[NumaAlloc, ...] = ()
    cpuset: tuple[int, ...] = ()
    cpu_exclusive: str = ""
    bind: str = ""
    required: bool = False  # the bind policy is required (by the pod or forced by the node)
    bound: bool = False  # placement is NUMA-bound (scored over its NUMA nodes)
    score: int = 0  # NodeNUMAResource score over the NUMA nodes used (bound plans only)


def _bitmask(mask: frozenset[int]) -> int:
    return sum(1 << z for z in mask)


class _Ctx:
    __slots__ = (
        "avail",
        "bind",
        "caps",
        "excl",
        "extra",
        "most",
        "owner",
        "pod",
        "ratio",
        "required",
        "state",
        "topo",
        "tracked",
    )

    def __init__(
        self, state: NodeState, topo: Topology, pod: PodSpec, bind: str, required: str, most: bool
    ) -> None:
        self.state, self.topo, self.pod, self.bind, self.required, self.most = (
            state,
            topo,
            pod,
            bind,
            required,
            most,
        )
        self.owner = state.cpu_owner
        self.excl = pod.cpu_exclusive
        node_reserved = set(state.info.reserved_cpus) if state.info is not None else set()
        self.avail = [
            c
            for c in topo.cpus
            if c not in state.cpu_owner and c not in topo.reserved and c not in node_reserved
        ]
        zones = topo.numa_allocatable
        self.tracked = [r for r in pod.requests if any(r in zones[z] for z in topo.numa_ids)]
        # reserved CPUs (kubelet, kubelet-managed cpusets, node reservation) leave their zone's cpu
        self.caps = {z: dict(zones.get(z, {})) for z in topo.numa_ids}
        for z, amount in topo.numa_reserved.items():
            if n.CPU in self.caps.get(z, {}):
                self.caps[z][n.CPU] -= amount
        for c in node_reserved - topo.reserved:
            zone = self.caps.get(topo.cpus[c][2], {}) if c in topo.cpus else {}
            if n.CPU in zone:
                zone[n.CPU] -= 1000
        # CPU amplification (allot_placement.nodeside): zone cpu is amplified; cpuset-bound pods count amplified
        self.ratio = state.overrides.ratio if state.overrides is not None else None
        self.extra = state.amplified_extra(self.ratio)[1]

    def used(self, z: int, r: str) -> int:
        used = self.state.numa_used.get(z, {}).get(r, 0)
        return used + self.extra.get(z, 0) if r == n.CPU else used

    def available(self, z: int, r: str) -> int:
        a = self.caps.get(z, {}).get(r, 0) - self.used(z, r)
        if r == n.CPU and self.bind and self.ratio is not None and a > 0:
            a = int(Decimal(a) / self.ratio)  # what is left, in CPUs this pod holds exclusively
        if r == n.CPU and self.bind:
            free = [c for c in self.avail if self.topo.cpus[c][2] == z]
            if self.required == "FullPCPUs":
                cores: dict[int, int] = {}
                for c in free:
                    cores[self.topo.cpus[c][0]] = cores.get(self.topo.cpus[c][0], 0) + 1
                usable = sum(k for k in cores.values() if k == self.topo.cpus_per_core)
            elif self.required == "SpreadByPCPUs":
                usable = len({self.topo.cpus[c][0] for c in free})
            else:
                usable = len(free)
            a = min(a, usable * 1000)
        return max(a, 0)

    def distribute(self, mask: frozenset[int]) -> tuple[dict[int, dict[str, int]] | None, Reason | None]:
        out: dict[int, dict[str, int]] = {}
        step = 1000 * (self.topo.cpus_per_core if self.required == "FullPCPUs" else 1)
        for r in self.tracked:
            remaining = self.pod.requests[r]
            nodes = sorted(mask, key=lambda z: (self.available(z, r), z))
            whole = r == n.CPU and self.bind  # cpus bound: whole CPUs (whole cores under required FullPCPUs)
            for i, z in enumerate(nodes):
                # an even share rounded down, as Koordinator's splitQuantity: the rest goes to the later nodes
                k = len(nodes) - i
                share = remaining // step // k * step if whole else remaining // k
                avail = self.available(z, r)
                if whole:
                    avail -= avail % step
                take = min(avail, share, remaining)
                if take > 0:
                    out.setdefault(z, {})[r] = take
                    remaining -= take
            if remaining > 0:
                return None, rs.insufficient_numa(r)
        return out, None

    def take(self, candidates: list[int], count: int) -> list[int] | None:
        """``count`` of the ``candidates`` CPUs for this pod, under its bind policy, exclusivity and the node's
        most/least-allocated preference; ``None`` when there are not enough."""
        return take_cpus(self.topo, candidates, self.owner, count, self.bind, self.excl, self.most)

    def cpuset(self, dist: dict[int, dict[str, int]] | None) -> list[int] | None:
        cpus_needed = self.pod.requests.get(n.CPU, 0) // 1000
        if dist is None or not self.topo.numa_ids:
            got = self.take(self.avail, cpus_needed)
        else:
            got = []
            for z in sorted(dist):
                k = dist[z].get(n.CPU, 0) // 1000
                part = self.take([c for c in self.avail if self.topo.cpus[c][2] == z], k)
                if part is None:
                    return None
                got.extend(part)
            if len(got) < cpus_needed:
                rest = self.take([c for c in self.avail if c not in set(got)], cpus_needed - len(got))
                if rest is None:
                    return None
                got.extend(rest)
        if got is None or (self.required and not bind_policy_holds(self.topo, got, self.required)):
            return None
        return sorted(got)

    def score(self, mask: frozenset[int], scoring: Strategy) -> int:
        num = den = 0
        most = scoring.strategy == "MostAllocated"
        for r, w in scoring.resources:
            cap = sum(self.caps.get(z, {}).get(r, 0) for z in mask)
            if cap <= 0:
                continue
            own = self.pod.requests.get(r, 0)
            if r == n.CPU and self.bind:
                own = amplify(own, self.ratio)
            req = sum(self.used(z, r) for z in mask) + own
            s = min(req, cap) * 100 // cap if most else ((cap - req) * 100 // cap if req <= cap else 0)
            num, den = num + s * w, den + w
        return num // den if den else 0


def _merge(
    lists: list[list[Hint]], all_nodes: frozenset[int], exclusive_ok: object
) -> tuple[frozenset[int], bool, bool]:
    best_mask, best_pref, best_score, best_unsat = all_nodes, False, 0, True
    for combo in product(*lists):
        masks = [h[0] for h in combo if h[0] is not None]
        merged = all_nodes
        for m in masks:
            merged = merged & m
        if not merged:
            continue
        preferred = all(h[1] for h in combo) and all(m == masks[0] for m in masks)
        unsat = bool(masks) and max(len(m) for m in masks) != len(merged)
        if not exclusive_ok(merged):  # type: ignore[operator]
            preferred = False
        score = sum(h[2] for h in combo if h[0] == merged)
        if preferred and not best_pref:
            best_mask, best_pref, best_score, best_unsat = merged, preferred, score, unsat
            continue
        if not preferred and best_pref:
            continue
        narrower = len(merged) < len(best_mask) or (
            len(merged) == len(best_mask) and _bitmask(merged) < _bitmask(best_mask)
        )
        if not narrower:
            if len(merged) == len(best_mask) and score > best_score:
                best_mask, best_pref, best_score, best_unsat = merged, preferred, score, unsat
            continue
        best_mask, best_pref, best_score, best_unsat = merged, preferred, score, unsat
    return best_mask, best_pref, best_unsat


class _Intent(NamedTuple):
    policy: str  # the NUMA topology policy ("" = none)
    bind: str  # the CPU bind policy ("" = no cpuset)
    required: str  # the bind policy when it is required (by the pod or forced by the node)


def _intent(state: NodeState, pod: PodSpec) -> tuple[_Intent | None, Reason | None]:
    """The NUMA and CPU-binding policies that apply to ``pod`` on this node, or why the node cannot host it;
    ``(None, None)`` when neither applies."""
    info, topo = state.info, state.topology
    assert info is not None
    labels = info.labels
    node_policy = labels.get(n.LABEL_NUMA_TOPOLOGY_POLICY) or (topo.kubelet_policy if topo else "")
    node_policy = "" if node_policy == "None" else node_policy
    if pod.numa_policy and node_policy and pod.numa_policy != node_policy:
        return None, rs.NUMA_POLICY_MISMATCH
    policy = pod.numa_policy or node_policy
    cpu = pod.requests.get(n.CPU, 0)
    bind, required = pod.bind_policy, pod.bind_required
    forced = _FORCED.get(labels.get(n.LABEL_CPU_BIND_POLICY, ""), "")
    if not forced and topo is not None and topo.full_pcpus_only:
        forced = "FullPCPUs"
    if forced and cpu > 0:
        if cpu % 1000:
            return None, rs.NON_INTEGER_CPU
        if required and required != forced:
            return None, rs.BIND_CONFLICT
        bind = required = forced
    if bind:
        if topo is None or not topo.valid:
            return None, rs.INVALID_CPU_TOPOLOGY
        if required == "FullPCPUs" and (cpu // 1000) % topo.cpus_per_core:
            return None, rs.NOT_MULTIPLE_CORE
    if policy and (topo is None or not topo.numa_ids):
        if policy != "BestEffort":
            return None, rs.NUMA_TOPOLOGY_UNKNOWN
        policy = ""
    if not policy and not bind:
        return None, None
    return _Intent(policy, bind, required), None


def _hint_lists(
    cfg: PlacementConfig, state: NodeState, pod: PodSpec, ctx: _Ctx, policy: str
) -> tuple[list[list[Hint]] | None, bool, Reason | None]:
    """One list of hints per NUMA resource and device type, filtered by the policy, for the merge; and whether a
    resource had no hint at all (BestEffort then gives up alignment). ``None`` with the reason when the policy
    refuses the node."""
    topo = ctx.topo
    hints: dict[str, list[Hint]] = {r: [] for r in ctx.tracked}
    for mask in numa_subsets(topo.numa_ids):
        dist, _ = ctx.distribute(mask)
        if dist is None or (ctx.bind and ctx.cpuset(dist) is None):
            continue
        score = ctx.score(mask, cfg.numa_nodes)
        for r in ctx.tracked:
            if all(ctx.available(z, r) > 0 for z in mask):
                hints[r].append((mask, False, score))
    lists: list[list[Hint]] = []
    unsatisfied = False
    for r in ctx.tracked:
        if not hints[r]:
            if policy != "BestEffort":
                return None, False, rs.unsatisfied_numa(r)
            unsatisfied = True
            continue
        smallest = min(len(h[0]) for h in hints[r] if h[0] is not None)
        lists.append(
            [(m, policy == "Restricted" or (m is not None and len(m) == smallest), s) for m, _, s in hints[r]]
        )
    dev_hints, why = device_hints(cfg, state, pod, topo.numa_ids)
    if why is not None:
        return None, False, why
    lists.extend([(m, p, sc) for m, p, sc in dev_hints[t]] for t in sorted(dev_hints))
    if not lists:
        lists = [[(None, True, 0)]]
    if policy == "SingleNUMANode":
        lists = [[h for h in lst if h[1] and (h[0] is None or len(h[0]) == 1)] for lst in lists]
        if any(not lst for lst in lists):
            return None, False, rs.UNALIGNED_NUMA
    return lists, unsatisfied, None


def _exclusive_ok(state: NodeState, pod: PodSpec) -> Callable[[frozenset[int]], bool]:
    """``singleNUMANodeExclusive: Required``: multi-NUMA masks avoid NUMA nodes used by single-NUMA pods, and single
    ones avoid NUMA nodes shared by multi-NUMA pods."""
    status = state.numa_status()

    def exclusive_ok(mask: frozenset[int]) -> bool:
        if pod.numa_exclusive != "Required":
            return True
        if len(mask) > 1:
            return all(status.get(z) != "single" for z in mask)
        return all(status.get(z) != "shared" for z in mask)

    return exclusive_ok


def numa_plan(cfg: PlacementConfig, state: NodeState, pod: PodSpec) -> tuple[NumaPlan | None, Reason | None]:
    """``(None, None)`` when NUMA/CPU orchestration does not apply to this pod on this node."""
    intent, why = _intent(state, pod)
    if intent is None:
        return None, why
    policy, bind, required = intent
    topo = state.topology
    assert topo is not None and state.info is not None
    strategy = state.info.labels.get(n.LABEL_NUMA_ALLOCATE_STRATEGY) or cfg.numa_nodes.strategy
    ctx = _Ctx(state, topo, pod, bind, required, strategy == "MostAllocated")
    if not policy:
        only = ctx.cpuset(None)
        if only is None:
            return None, rs.INSUFFICIENT_CPUS
        return NumaPlan(
            mask=None, cpuset=tuple(only), cpu_exclusive=pod.cpu_exclusive, bind=bind, required=bool(required)
        ), None
    all_nodes = frozenset(topo.numa_ids)
    lists, unsatisfied, why = _hint_lists(cfg, state, pod, ctx, policy)
    if lists is None:
        return None, why
    mask, preferred, unsat = _merge(lists, all_nodes, _exclusive_ok(state, pod))
    if policy == "BestEffort":
        if unsat or unsatisfied:
            mask = all_nodes
    elif not preferred:
        return None, rs.UNALIGNED_NUMA
    dist, why = ctx.distribute(mask)
    if dist is None:
        return None, why
    cpus: list[int] = []
    if bind:
        got = ctx.cpuset(dist)
        if got is None:
            return None, rs.INSUFFICIENT_CPUS
        cpus = got
    numa = tuple(NumaAlloc(node=z, resources=dict(sorted(dist[z].items()))) for z in sorted(dist))
    device_mask = None if (policy == "SingleNUMANode" and mask == all_nodes) else mask
    return NumaPlan(
        mask=device_mask,
        numa=numa,
        cpuset=tuple(cpus),
        cpu_exclusive=pod.cpu_exclusive,
        bind=bind,
        required=bool(required),
        bound=True,
        score=ctx.score(frozenset(dist) or mask, cfg.numa),
    ), None
