"""GPUDefrag: the fewest migrations that let waiting GPU pods fit, as a pure function.

``plan_round`` reads the projected state as data (:class:`DefragInput`: the nodes' free CPU and per-GPU free
milli-GPU, the bound GPU pods and the GPUs they hold, the waiting GPU pods in queue order, the PodDisruptionBudgets'
remaining disruptions and the round's limits) and the FGD fragmentation measure (``measure``: ``F`` of a node from its
GPU model, free CPU and per-GPU free milli — the placement library's ``FragModel.frag``, passed in by the host), and
returns one :class:`DefragPlan` per waiting pod it can make room for, or why not (:class:`DefragWaiting`).

Rules (docs/descheduling.md, "GPUDefrag"):

1. A waiting pod that fits some node as things are gets no plan (``Fits``: the scheduler places it). One whose
   request (count × milli per GPU) is more than the free milli-GPU of the schedulable nodes of its GPU models,
   fragments included, gets none either (``InsufficientFree``: no moving of pods can make that room).
2. What may move: a pod holding GPU, not refused by the evictor filter (``refused``, the host's
   :func:`allot_descheduling.evictor.refusal`) and not already placed by this round's plans. A gang moves whole or
   not at all: its members are one unit, movable only when the gang's policy allows (``gang_whole``) and every member
   may move; otherwise none of them moves.
3. A plan picks a target node for the waiting pod and a set of units on it to move off; each moved pod goes to the
   node other than the target and its own that lowers the cluster's fragmentation most (the FGD choice: least
   ``F_after − F_before``, then name), its GPUs chosen best-fit (fullest GPUs that hold it, then index). The moved
   pods leave first, then the waiting pod takes the target, then the moved pods are placed, largest first.
4. Fewest migrations first: every target and set of units of ``k`` pods is tried before any of ``k + 1``; among
   plans of the same size the one leaving the least cluster fragmentation wins, then the target's name (weighed
   among the first ``max_candidates`` sets that leave the target room, fewest GPU moved first, then target name;
   at most four times as many are tried before the search moves on to ``k + 1``: a bound on the search). A plan
   stays within ``max_per_plan`` pods, the round's ``total`` / ``per_node`` (moved off one node) /
   ``per_namespace`` limits, and every PodDisruptionBudget's remaining disruptions (``budgets``).
5. Waiting pods are taken in the order given (the queue's), each plan applied to the state the next one sees; at
   most ``max_plans`` plans a round (``RoundLimit`` for the rest).
Pure: no IO, no clock; ties broken by names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import combinations
from typing import Final

import msgspec

from allot_contracts.events import DefragMove, DefragPlan, DefragWaiting
from allot_descheduling.gangs import gang_refusal

__all__ = [
    "DefragInput",
    "DefragLimits",
    "DefragOutcome",
    "GpuNode",
    "GpuPod",
    "Measure",
    "PendingGpuPod",
    "plan_round",
]

MILLI: Final = 1000
# F of a node (weight × milli-GPU) from its GPU model, free CPU (milli) and per-GPU free milli-GPU
Measure = Callable[[str, int, Sequence[int]], int]


class GpuNode(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    model: str = ""
    cpu_free: int = 0  # milli-CPU
    free: tuple[int, ...] = ()  # per GPU, milli-GPU (1000 = an idle GPU)
    schedulable: bool = True


class GpuPod(msgspec.Struct, frozen=True, kw_only=True):
    """A bound pod; ``gpus``: ``(GPU index, milli)`` it holds on its node."""

    key: str  # namespace/name
    uid: str = ""
    node: str
    cpu: int = 0
    gpus: tuple[tuple[int, int], ...] = ()
    models: tuple[str, ...] = ()  # the GPU models it may run on (() any)
    gang: str = ""
    gang_whole: bool = False  # its gang's policy lets the descheduler move the gang whole
    refused: str = ""  # why the evictor filter refuses it ("" when it may move)
    pdb: str = ""  # the PodDisruptionBudget covering it ("" none)

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]


class PendingGpuPod(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    cpu: int = 0
    gpu_count: int
    gpu_milli: int  # per GPU
    models: tuple[str, ...] = ()


class DefragLimits(msgspec.Struct, frozen=True, kw_only=True):
    """0: no limit (but ``max_per_plan``, which bounds the search, is at least 1)."""

    max_per_plan: int = 4
    max_plans: int = 8
    # per number of migrations: the sets weighed by fragmentation (the first that leave the target room, fewest
    # GPU moved first, then target name); four times as many may be tried before the next number is
    max_candidates: int = 16
    total: int = 0
    per_node: int = 0
    per_namespace: int = 0


class DefragInput(msgspec.Struct, frozen=True, kw_only=True):
    nodes: tuple[GpuNode, ...]
    pods: tuple[GpuPod, ...] = ()
    pending: tuple[PendingGpuPod, ...] = ()
    budgets: dict[str, int] = {}  # PodDisruptionBudget -> disruptions it still allows
    limits: DefragLimits = DefragLimits()


class DefragOutcome(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    plans: list[DefragPlan]
    waiting: list[DefragWaiting]
    frag_before: int
    frag_after: int
    free_milli: int


class _Unit(msgspec.Struct, frozen=True):
    pods: tuple[GpuPod, ...]
    gang: str


class _Candidate(msgspec.Struct, frozen=True):
    frag_after: int
    target: str
    gpus: tuple[int, ...]
    moves: tuple[tuple[GpuPod, str, tuple[int, ...]], ...]


class _World:
    """The round's working state: free CPU and GPU per node, each node's F, the bound pods, the limits used."""

    def __init__(self, data: DefragInput, measure: Measure) -> None:
        self.measure = measure
        self.nodes = {n.name: n for n in data.nodes}
        self.names = sorted(self.nodes)
        self.free = {n.name: list(n.free) for n in data.nodes}
        self.cpu = {n.name: n.cpu_free for n in data.nodes}
        self.memo: dict[tuple[str, int, tuple[int, ...]], int] = {}
        self.frag = {n.name: self.f_now(n.name) for n in data.nodes}
        self.pods = {p.key: p for p in sorted(data.pods, key=lambda p: p.key)}
        self.budgets = dict(data.budgets)
        self.limits = data.limits
        self.total = 0
        self.off: dict[str, int] = {}
        self.namespaces: dict[str, int] = {}
        # per (GPU count, milli, models): the nodes whose GPUs could hold it when the current search began
        self.fitting: dict[tuple[int, int, tuple[str, ...]], list[str]] = {}

    def f_now(self, node: str) -> int:
        key = (self.nodes[node].model, self.cpu[node], tuple(self.free[node]))
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self.measure(*key)
        return got

    def gpus_for(
        self, node: str, cpu: int, count: int, milli: int, models: Sequence[str]
    ) -> tuple[int, ...] | None:
        """The GPUs ``node`` would give a pod (best-fit: fullest first, then index), None when it does not fit."""
        info = self.nodes[node]
        if not info.schedulable or (models and info.model not in models) or self.cpu[node] < cpu:
            return None
        holds = sorted((left, i) for i, left in enumerate(self.free[node]) if left >= milli)
        return tuple(sorted(i for _, i in holds[:count])) if len(holds) >= count else None

    def take(self, node: str, cpu: int, gpus: Sequence[int], milli: int, sign: int = 1) -> None:
        self.cpu[node] -= sign * cpu
        for i in gpus:
            self.free[node][i] -= sign * milli

    def best_node(
        self, pod: GpuPod, exclude: set[str], saved: Mapping[str, tuple[list[int], int]]
    ) -> tuple[str, tuple[int, ...]] | None:
        """The FGD destination of a moved pod: least rise of F, then name. Looked for among the nodes its GPUs fit
        as the search found them (``saved`` holds the state of the nodes a trial changed) and those changed."""
        count, milli = len(pod.gpus), pod.gpus[0][1]
        key = (count, milli, pod.models)
        fitting = self.fitting.get(key)
        if fitting is None:
            fitting = self.fitting[key] = [
                n
                for n in self.names
                if self._could_hold(n, saved[n][0] if n in saved else self.free[n], count, milli, pod.models)
            ]
        best: tuple[int, str, tuple[int, ...]] | None = None
        for name in sorted({*fitting, *saved}):
            if name in exclude:
                continue
            gpus = self.gpus_for(name, pod.cpu, count, milli, pod.models)
            if gpus is None:
                continue
            before = self.f_now(name)
            self.take(name, pod.cpu, gpus, milli)
            delta = self.f_now(name) - before
            self.take(name, pod.cpu, gpus, milli, -1)
            if best is None or (delta, name) < best[:2]:
                best = (delta, name, gpus)
        return (best[1], best[2]) if best is not None else None

    def _could_hold(
        self, node: str, free: Sequence[int], count: int, milli: int, models: Sequence[str]
    ) -> bool:
        info = self.nodes[node]
        if not info.schedulable or (models and info.model not in models):
            return False
        return sum(1 for left in free if left >= milli) >= count

    def allows(self, pods: Sequence[GpuPod]) -> bool:
        """Whether moving ``pods`` stays within the round's limits and every PodDisruptionBudget."""
        lim = self.limits
        if lim.total and self.total + len(pods) > lim.total:
            return False
        off: dict[str, int] = {}
        namespaces: dict[str, int] = {}
        pdbs: dict[str, int] = {}
        for p in pods:
            off[p.node] = off.get(p.node, 0) + 1
            namespaces[p.namespace] = namespaces.get(p.namespace, 0) + 1
            if p.pdb:
                pdbs[p.pdb] = pdbs.get(p.pdb, 0) + 1
        if lim.per_node and any(self.off.get(n, 0) + c > lim.per_node for n, c in off.items()):
            return False
        if lim.per_namespace and any(
            self.namespaces.get(n, 0) + c > lim.per_namespace for n, c in namespaces.items()
        ):
            return False
        return all(self.budgets.get(b, 0) >= c for b, c in pdbs.items())

    def units(self) -> dict[str, list[_Unit]]:
        """Per node, the units (a pod, or a whole gang) with a member holding GPU there that may move."""
        gangs: dict[str, list[GpuPod]] = {}
        for p in self.pods.values():
            if p.gang:
                gangs.setdefault(p.gang, []).append(p)
        out: dict[str, list[_Unit]] = {}
        seen: set[str] = set()
        for p in self.pods.values():
            if not p.gpus or p.refused:
                continue
            if p.gang:
                members = gangs[p.gang]
                held = (
                    (m.key, m.gang_whole, m.refused or ("" if m.gpus else "holds no GPU")) for m in members
                )
                if p.gang in seen or gang_refusal(p.gang, held)[0]:
                    continue
                seen.add(p.gang)
                unit = _Unit(tuple(members), p.gang)
            else:
                unit = _Unit((p,), "")
            for node in sorted({m.node for m in unit.pods}):
                out.setdefault(node, []).append(unit)
        return out


def plan_round(data: DefragInput, measure: Measure) -> DefragOutcome:
    """One GPUDefrag round over ``data`` (rules in the module docstring)."""
    world = _World(data, measure)
    frag_before = sum(world.frag.values())
    free_milli = _free(world, ())
    plans: list[DefragPlan] = []
    waiting: list[DefragWaiting] = []
    for pod in data.pending:
        if len(plans) >= max(data.limits.max_plans, 0) and data.limits.max_plans:
            waiting.append(
                DefragWaiting(pod=pod.key, code="RoundLimit", reason="the round's plans are used up")
            )
            continue
        code, reason = _blocked(world, pod)
        if code:
            waiting.append(DefragWaiting(pod=pod.key, code=code, reason=reason))
            continue
        found = _search(world, pod)
        if found is None:
            reason = (
                f"no set of at most {max(data.limits.max_per_plan, 1)} migration(s) within the limits and"
                " disruption budgets lets it fit"
            )
            waiting.append(DefragWaiting(pod=pod.key, code="NoPlan", reason=reason))
            continue
        plans.append(_apply(world, pod, found))
    frag_after = sum(world.frag.values())
    moved = sum(len(p.moves) for p in plans)
    message = (
        f"{len(plans)} of {len(data.pending)} waiting GPU pod(s) made to fit by {moved} migration(s)"
        if data.pending
        else "no GPU pod is waiting"
    )
    return DefragOutcome(
        message=message,
        plans=plans,
        waiting=waiting,
        frag_before=frag_before,
        frag_after=frag_after,
        free_milli=free_milli,
    )


def _free(world: _World, models: Sequence[str]) -> int:
    return sum(
        sum(world.free[n])
        for n in world.names
        if world.nodes[n].schedulable and (not models or world.nodes[n].model in models)
    )


def _blocked(world: _World, pod: PendingGpuPod) -> tuple[str, str]:
    """Why no plan is looked for: it fits as things are, or the free GPU it may use is too little."""
    fits = next(
        (n for n in world.names if world.gpus_for(n, pod.cpu, pod.gpu_count, pod.gpu_milli, pod.models)),
        None,
    )
    if fits is not None:
        return "Fits", f"fits node {fits} without moving any pod"
    want = pod.gpu_count * pod.gpu_milli
    have = _free(world, pod.models)
    if have < want:
        return (
            "InsufficientFree",
            f"asks {want} milli-GPU; the nodes it may use have {have} free, fragments included",
        )
    return "", ""


def _by_cost(units: Sequence[_Unit], cost: int) -> Iterator[tuple[_Unit, ...]]:
    """The sets of ``units`` moving exactly ``cost`` pods, in a fixed order."""
    for size in range(1, cost + 1):
        for combo in combinations(units, size):
            if sum(len(u.pods) for u in combo) == cost:
                yield combo


def _search(world: _World, pod: PendingGpuPod) -> _Candidate | None:
    """The plan of fewest migrations, least fragmentation after, then target name."""
    world.fitting.clear()
    units = world.units()
    targets = [
        n
        for n in world.names
        if n in units
        and world.nodes[n].schedulable
        and (not pod.models or world.nodes[n].model in pod.models)
        and len(world.free[n]) >= pod.gpu_count
    ]
    targets = [t for t in targets if _room(world, pod, t, units[t])]  # with every unit moved off
    limit = max(world.limits.max_candidates, 1)
    for cost in range(1, max(world.limits.max_per_plan, 1) + 1):
        roomy = sorted(
            (sum(m for u in combo for p in u.pods for _, m in p.gpus), t, i, combo)
            for t in targets
            for i, combo in enumerate(_by_cost(units[t], cost))
            if _room(world, pod, t, combo)
        )
        found: list[_Candidate] = []
        for _, t, _, combo in roomy[: 4 * limit]:
            c = _try(world, pod, t, combo)
            if c is not None:
                found.append(c)
                if len(found) >= limit:
                    break
        if found:
            return min(found, key=lambda c: (c.frag_after, c.target))
    return None


def _room(world: _World, pod: PendingGpuPod, target: str, combo: Sequence[_Unit]) -> bool:
    """Whether moving ``combo`` off ``target`` leaves room there for ``pod`` (nothing else is checked)."""
    free, cpu = list(world.free[target]), world.cpu[target]
    for p in (p for u in combo for p in u.pods if p.node == target):
        cpu += p.cpu
        for i, m in p.gpus:
            free[i] += m
    return cpu >= pod.cpu and sum(1 for left in free if left >= pod.gpu_milli) >= pod.gpu_count


def _try(world: _World, pod: PendingGpuPod, target: str, combo: Sequence[_Unit]) -> _Candidate | None:
    """The candidate of moving ``combo`` off ``target`` for ``pod``, or None; leaves ``world`` as it found it."""
    moved = [p for u in combo for p in u.pods]
    if not world.allows(moved):
        return None
    saved = {n: (list(world.free[n]), world.cpu[n]) for n in {target, *(p.node for p in moved)}}

    def touch(node: str) -> None:
        saved.setdefault(node, (list(world.free[node]), world.cpu[node]))

    try:
        for p in moved:
            world.take(p.node, p.cpu, [i for i, _ in p.gpus], p.gpus[0][1], -1)
        gpus = world.gpus_for(target, pod.cpu, pod.gpu_count, pod.gpu_milli, pod.models)
        if gpus is None:
            return None
        world.take(target, pod.cpu, gpus, pod.gpu_milli)
        moves: list[tuple[GpuPod, str, tuple[int, ...]]] = []
        for p in sorted(moved, key=lambda p: (-sum(m for _, m in p.gpus), p.key)):
            dest = world.best_node(p, {target, p.node}, saved)
            if dest is None:
                return None
            touch(dest[0])
            world.take(dest[0], p.cpu, dest[1], p.gpus[0][1])
            moves.append((p, dest[0], dest[1]))
        after = sum(world.frag.values()) + sum(world.f_now(n) - world.frag[n] for n in saved)
        return _Candidate(after, target, gpus, tuple(moves))
    finally:
        for n, (free, cpu) in saved.items():
            world.free[n], world.cpu[n] = free, cpu


def _apply(world: _World, pod: PendingGpuPod, found: _Candidate) -> DefragPlan:
    """Carry out ``found`` on the working state and count it against the limits; the plan as recorded."""
    before = sum(world.frag.values())
    touched = {found.target}
    for p, dest, gpus in found.moves:
        milli = p.gpus[0][1]
        world.take(p.node, p.cpu, [i for i, _ in p.gpus], milli, -1)
        world.take(dest, p.cpu, gpus, milli)
        touched |= {p.node, dest}
        world.total += 1
        world.off[p.node] = world.off.get(p.node, 0) + 1
        world.namespaces[p.namespace] = world.namespaces.get(p.namespace, 0) + 1
        if p.pdb:
            world.budgets[p.pdb] = world.budgets.get(p.pdb, 0) - 1
        world.pods[p.key] = msgspec.structs.replace(p, node=dest, gpus=tuple((i, milli) for i in gpus))
    world.take(found.target, pod.cpu, found.gpus, pod.gpu_milli)
    world.pods[pod.key] = GpuPod(
        key=pod.key,
        node=found.target,
        cpu=pod.cpu,
        gpus=tuple((i, pod.gpu_milli) for i in found.gpus),
        refused="placed by this round's plan",
    )
    for n in touched:
        world.frag[n] = world.f_now(n)
    return DefragPlan(
        pending=pod.key,
        target=found.target,
        gpus=list(found.gpus),
        moves=[
            DefragMove(pod=p.key, uid=p.uid, source=p.node, target=dest, gpus=list(gpus), gang=p.gang)
            for p, dest, gpus in found.moves
        ],
        frag_before=before,
        frag_after=sum(world.frag.values()),
    )
