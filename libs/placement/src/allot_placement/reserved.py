"""Scheduling with reservations: a pod that matched reservations, and a reserve pod (§5.3–5.6, §1.14).

The engine calls :func:`schedule` for a pod whose reservation-manager resolution lists reservations
(:class:`ReservationContext`) and :func:`schedule_reserve` for a Reservation's reserve pod; every other pod takes the
engine's ordinary path, untouched. Holds, owners and the remaining part of each reservation live in the engine
(``PlacementEngine.holds``); the rules are in :mod:`allot_placement.reservations`.

For a pod with a context:
- nodes holding matched reservations are evaluated on their *restored* state (the matched holds given back; for a
  ``reservation-ignored`` pod every hold on the node), per reservation in nomination order: Restricted ones must fit
  what remains of them (and their devices and CPUs are the only ones offered), Default/Aligned ones are tried first
  with only their devices and CPUs, then with the node's as well; the first reservation that fits, in nomination
  order, is the one the pod uses on that node; without an affinity, a reservation that reserves none of the
  resources the pod requests is skipped (upstream's ResourceNames intersection);
- the other nodes are evaluated as usual, unless the pod must use a reservation (affinity): then they fail with
  "node(s) no reservations match reservation affinity";
- ranking (upstream's Reservation score outweighs the others): nodes where the pod uses a reservation first — the
  one holding the smallest non-zero ``reservation-order``, then the highest ReservationScore — then the node score,
  then the node name.
The decision names the reservation (``decision.reservation``) and carries ``reservation-allocated``.
Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects import names as n
from allot_placement import explain
from allot_placement import reasons as rs
from allot_placement.decision import Decision
from allot_placement.evaluate import NodeResult, evaluate, infeasible_result, static_filter
from allot_placement.reasons import Reason
from allot_placement.reservations import (
    POLICY_CONFLICT,
    Hold,
    fits_reservation,
    nominate,
    policy_conflict,
    reservation_score,
    restore,
    restrict,
)
from allot_placement.state import NodeState

if TYPE_CHECKING:
    from allot_placement.engine import PlacementEngine
    from allot_placement.pod import PodSpec

__all__ = [
    "ANN_RESERVATION_ALLOCATED",
    "ReservationContext",
    "allocate",
    "fits_on",
    "reserve",
    "schedule",
    "schedule_reserve",
    "unallocate",
    "unreserve",
    "victims_on",
]

ANN_RESERVATION_ALLOCATED: Final = "scheduling.koordinator.sh/reservation-allocated"
NO_MATCH: Final[Reason] = (
    "node(s) no reservations match reservation affinity",
    "ReservationAffinityMismatch",
)
NO_RESERVATION_FITS: Final[Reason] = (
    "node(s) no reservation(s) to meet the requirements",
    "NoReservationMeetsRequirements",
)
CONFLICT: Final[Reason] = (POLICY_CONFLICT, "ReservationAllocatePolicyConflict")
# a reserve pod whose template names a node: every other node
NODE_NOT_MATCHED: Final[Reason] = (
    "node(s) didn't match the nodeName specified by reservation",
    "ReservationNodeNameMismatch",
)


class ReservationContext(msgspec.Struct, frozen=True, kw_only=True):
    """What reservation-manager resolved for a pod: the reservations it matched (by name), whether it must use one,
    whether it ignores reservations, and the one its affinity names."""

    candidates: tuple[str, ...] = ()
    required: bool = False
    ignored: bool = False
    name: str = ""


def _reason_code(message: str) -> str:
    if "Too many pods" in message:
        return "ReservationTooManyPods"
    return "ReservationInsufficientResource"


def _evaluate(engine: PlacementEngine, state: NodeState, spec: PodSpec) -> NodeResult:
    return evaluate(engine.config, state, spec, engine.policy)


def _on_node(
    engine: PlacementEngine, state: NodeState, spec: PodSpec, holds: list[Hold], ctx: ReservationContext
) -> tuple[NodeResult, Hold | None, tuple[Reason, ...]]:
    """The pod on one node holding reservations it matched: its result, the reservation it uses, or the reasons."""
    assert state.info is not None
    static = static_filter(state.info, spec)
    if static:
        return infeasible_result(static), None, static
    restored = restore(state, holds)
    if ctx.ignored:
        res = _evaluate(engine, restored, spec)
        return res, None, res.reasons
    reasons: list[Reason] = []
    # without an affinity, a reservation that reserves none of what the pod requests is not for it (upstream skips it)
    remaining = [h for h in holds if ctx.required or any(k in spec.requests for k in h.resource_names())]
    while remaining:
        hold = nominate(remaining, spec.requests, ctx.name)
        if hold is None:
            break
        remaining.remove(hold)
        if hold.policy == "Restricted":
            why = fits_reservation(spec.requests, hold, detailed=bool(ctx.name))
            if why:
                reasons += [(m, _reason_code(m)) for m in why]
                continue
            res = _evaluate(engine, restrict(restored, hold), spec)
        elif hold.allocation.devices or hold.allocation.cpuset:
            res = _evaluate(engine, restrict(restored, hold), spec)  # its own devices and CPUs first
            if not res.feasible:
                res = _evaluate(engine, restored, spec)
        else:
            res = _evaluate(engine, restored, spec)
        if res.feasible:
            return res, hold, ()
        reasons += list(res.reasons)
    if not ctx.required:
        res = _evaluate(engine, state, spec)  # the node alone, as a pod that uses no reservation
        if res.feasible:
            return res, None, ()
    out = tuple(dict.fromkeys(reasons)) or (NO_RESERVATION_FITS,)
    return infeasible_result(out), None, out


def schedule(engine: PlacementEngine, key: str, spec: PodSpec, ctx: ReservationContext) -> Decision:
    """Place a pod that matched reservations (see the module docstring)."""
    holds_by_node: dict[str, list[Hold]] = {}
    for name in ctx.candidates:
        hold = engine.holds.get(name)
        if hold is not None and (hold.matchable or ctx.ignored):
            holds_by_node.setdefault(hold.node, []).append(hold)
    ranked: list[tuple[tuple[int, int, int, int, str], str, NodeResult, Hold | None]] = []
    counts: dict[str, int] = {}
    codes: dict[str, str] = {}
    infeasible: list[tuple[str, tuple[Reason, ...]]] = []
    resolve = engine._resolver(spec)  # noqa: SLF001 - same package: the engine's memoised path for other nodes
    for name in engine.node_names():
        state = engine.node_state(name)
        if state is None or state.info is None:
            continue
        holds = holds_by_node.get(name)
        if holds:
            res, hold, reasons = _on_node(engine, state, spec, holds, ctx)
        elif ctx.required:
            res, hold, reasons = infeasible_result((NO_MATCH,)), None, (NO_MATCH,)
        else:
            got = resolve(name)
            assert got is not None
            res, hold, reasons = got[1], None, got[1].reasons
        if res.feasible:
            used = hold is not None
            order = hold.order if hold is not None and hold.order > 0 else 2**31
            score = reservation_score(spec.requests, hold) if hold is not None else 0
            ranked.append(((0 if used else 1, order, -score, -res.score, name), name, res, hold))
        else:
            infeasible.append((name, reasons))
            for message, code in reasons:
                counts[message], codes[message] = counts.get(message, 0) + 1, code
    if not ranked:
        first = infeasible[: max(engine.config.max_node_reasons, 0)]
        return explain.unschedulable(engine, key, counts, codes, first)
    ranked.sort(key=lambda r: r[0])
    _, best, res, hold = ranked[0]
    tops = [(nm, r) for _, nm, r, _ in ranked[: max(engine.config.top_scores, 1)]]
    decision = explain.scheduled(engine, key, spec, best, res, tops)
    if hold is None:
        return decision
    allocated = {"name": hold.name, "uid": hold.uid}
    return msgspec.structs.replace(
        decision,
        reservation=allocated,
        annotations={**decision.annotations, ANN_RESERVATION_ALLOCATED: allocated},
    )


def schedule_reserve(
    engine: PlacementEngine, key: str, spec: PodSpec, policy: str, decide: Decision
) -> Decision:
    """A reserve pod: ``decide`` is the engine's ordinary decision; a node whose matchable reservations have an
    incompatible allocate policy cannot take it ("node(s) reservation allocate policy conflict")."""
    if decide.outcome != n.SCHEDULED or decide.node is None:
        return decide
    holds = [h for h in engine.holds.values() if h.node == decide.node]
    if not policy_conflict(policy, holds):
        return decide
    # the chosen node conflicts: decide again among the nodes that do not
    ranked: list[tuple[tuple[int, str], str, NodeResult]] = []
    counts: dict[str, int] = {}
    codes: dict[str, str] = {}
    infeasible: list[tuple[str, tuple[Reason, ...]]] = []
    resolve = engine._resolver(spec)  # noqa: SLF001 - same package
    for name in engine.node_names():
        on_node = [h for h in engine.holds.values() if h.node == name]
        got = resolve(name)
        if got is None:
            continue
        res = got[1]
        reasons = (CONFLICT,) if policy_conflict(policy, on_node) else res.reasons
        reasons = tuple(NODE_NOT_MATCHED if r == rs.NODE_NAME else r for r in reasons)
        if res.feasible and reasons != (CONFLICT,):
            ranked.append(((-res.score, name), name, res))
            continue
        infeasible.append((name, reasons))
        for message, code in reasons:
            counts[message], codes[message] = counts.get(message, 0) + 1, code
    if not ranked:
        return explain.unschedulable(engine, key, counts, codes, infeasible[: engine.config.max_node_reasons])
    ranked.sort(key=lambda r: r[0])
    tops = [(nm, r) for _, nm, r in ranked[: max(engine.config.top_scores, 1)]]
    return explain.scheduled(engine, key, spec, ranked[0][1], ranked[0][2], tops)


# --- holds on the engine (called by PlacementEngine's reservation methods) ------------------------------------------


def reserve(engine: PlacementEngine, hold: Hold) -> None:
    """The node holds what the reservation's reserve pod was given, less what its owners took."""
    engine.holds[hold.name] = hold
    for owner in hold.owners:
        engine._held_by[owner] = hold.name  # noqa: SLF001 - same package
    engine._apply(hold.key, hold.remaining())  # noqa: SLF001


def unreserve(engine: PlacementEngine, name: str) -> JsonObject | None:
    """Give back what the reservation still holds (its owners keep their allocations); what was freed, JSON-able."""
    hold = engine.holds.pop(name, None)
    if hold is None:
        return None
    for owner in hold.owners:
        engine._held_by.pop(owner, None)  # noqa: SLF001
    engine._pod_node.pop(hold.key, None)  # noqa: SLF001
    state = engine.node_state(hold.node)
    alloc = state.remove(hold.key) if state is not None else None
    if state is not None:
        engine._touch(hold.node)  # noqa: SLF001
    return {
        "reservation": name,
        "node": hold.node,
        "allocation": alloc.to_dict() if alloc is not None else None,
    }


def allocate(engine: PlacementEngine, decision: Decision) -> None:
    """An assumed placement in a reservation: the pod becomes an owner and the hold shrinks by what it took."""
    got = decision.reservation or {}
    hold = engine.holds.get(got.get("name", ""))
    if hold is None or decision.allocation is None:
        return
    updated = msgspec.structs.replace(hold, owners={**hold.owners, decision.pod: decision.allocation})
    engine.holds[hold.name] = updated
    engine._held_by[decision.pod] = hold.name  # noqa: SLF001
    engine._apply(hold.key, updated.remaining())  # noqa: SLF001


def unallocate(engine: PlacementEngine, pod: str) -> None:
    """An owner pod released: what it took goes back to the reservation (while the reservation lasts)."""
    name = engine._held_by.pop(pod, None)  # noqa: SLF001
    hold = engine.holds.get(name) if name is not None else None
    if hold is None or pod not in hold.owners:
        return
    updated = msgspec.structs.replace(hold, owners={k: v for k, v in hold.owners.items() if k != pod})
    engine.holds[hold.name] = updated
    engine._apply(hold.key, updated.remaining())  # noqa: SLF001


# --- preemption (§5.7) -----------------------------------------------------------------------------------------------


def fits_on(engine: PlacementEngine, spec: PodSpec, ctx: ReservationContext, node: str) -> bool:
    """Would the pod fit on ``node`` using the reservations it matched there (as :func:`schedule` evaluates)?"""
    state = engine.node_state(node)
    holds = [h for n in ctx.candidates if (h := engine.holds.get(n)) is not None and h.node == node]
    if state is None or state.info is None or not holds:
        return False
    return _on_node(engine, state, spec, holds, ctx)[0].feasible


def victims_on(
    engine: PlacementEngine,
    spec: PodSpec,
    ctx: ReservationContext,
    node: str,
    candidates: list[tuple[int, str]],
) -> list[str] | None:
    """The pods to evict so the pod fits on ``node`` in its reservations, or ``None`` when evicting every candidate
    (``(priority, pod)``, least important first) would not do. Like kube-scheduler's default preemption: remove the
    candidates, then reprieve the most important ones whose return still leaves room. The engine is changed while
    trying and restored exactly before returning."""
    from allot_placement.trial import lifted  # the trial imports this module's allocate/unallocate

    if engine.node_state(node) is None:
        return None
    with lifted(engine) as lift:
        for _, pod in candidates:
            lift.remove(pod)
        if not fits_on(engine, spec, ctx, node):
            return None
        for _, pod in sorted(candidates, key=lambda c: (-c[0], c[1])):  # reprieve the most important first
            if not lift.holds(pod):
                continue
            lift.restore(pod)
            if not fits_on(engine, spec, ctx, node):
                lift.remove(pod)
        return lift.pods
