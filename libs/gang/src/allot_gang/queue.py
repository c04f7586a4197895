"""Queue order and anti-starvation for the device-allocator's retry loop (pure).

Responsibility: given every waiting item — plain pods and gang groups, each as one unit — decide the order in
which to attempt them in a round, which items must hold back so a long-blocked gang can gather capacity, and
how that state evolves from the round's outcomes.

Order (``less``, ``order``): priority desc, sub-priority (label ``koordinator.sh/priority``) desc, last attempt
time asc (an item never attempted uses its arrival time), arrival sequence asc, then ``key`` asc — a total order,
so ties never depend on input order.

Anti-starvation, both ways (``plan`` then ``record`` each round; ``QueueState`` carries what must be remembered):

1. Small items may bypass a blocked gang. A gang group whose attempt failed is *blocked*. Each item placed later
   in the same round's order while the gang is blocked counts as one *bypass* of it. Without a bound, a stream
   of small pods could take every unit of capacity as soon as it frees, forever.
2. So a gang that has been bypassed ``max_bypasses`` times, or blocked for ``max_blocked_seconds``, starts to
   *reserve*: while it reserves, every item of its band or lower (``(priority, sub_priority)`` not above the
   gang's) is held back (``hold``), and the gang is attempted first in its band. Capacity freed by finishing pods
   accumulates until the gang fits. Items of a strictly higher band still go first: priority is honoured, and
   that is not starvation by small pods. At most one gang reserves at a time (the first qualifying in order).
3. A gang cannot hold capacity forever: after ``max_reserve_seconds`` (or ``max_reserve_rounds`` failed attempts)
   without fitting it *yields*: its bypass count restarts from zero, and it may not reserve again before as much
   time has passed as it just held, doubled for each consecutive yield (1×, 2×, 4×, …). So a gang that can never
   fit holds a shrinking share of time, while one that nearly fits soon gets another window. After any
   reservation ends (placed or yielded), no new reservation — by any gang — may start until ``max_bypasses``
   items have been placed (a cool-down), so small items get placements between two reservations.

Hence: one large gang cannot starve small pods forever (holds are bounded by 3), and small pods cannot starve a
gang forever (it reserves after a bounded number of bypasses or time, by 2, and gets the capacity freed during
its reservation window). The property needs ``max_reserve_seconds`` to exceed how long the capacity a gang
needs stays taken; it is configurable for that reason.

Rejected alternative: pure aging (raising a blocked gang's priority over time) alone does not help — a gang that
is first in order but does not fit is bypassed anyway; only holding capacity lets it gather enough.

Time is integer microseconds, like the gang engine. The caller passes *all* waiting items each round, including
ones backing off (``not_before``); state for items no longer passed is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypedDict

from .config import QueueConfig

__all__ = ["Blocked", "QueueItem", "QueueState", "Step", "less", "order", "plan", "record", "sort_key"]


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueItem:
    """One unit of the queue: a plain pod (``size`` 1) or a whole gang group (``is_gang``)."""

    key: str
    priority: int = 0
    sub_priority: int = 0
    last_attempt_at: int = 0
    arrival: int = 0
    size: int = 1
    is_gang: bool = False
    not_before: int = 0

    @property
    def band(self) -> tuple[int, int]:
        return (self.priority, self.sub_priority)


def sort_key(item: QueueItem) -> tuple[int, int, int, int, str]:
    return (-item.priority, -item.sub_priority, item.last_attempt_at, item.arrival, item.key)


def less(a: QueueItem, b: QueueItem) -> bool:
    """True when ``a`` is attempted before ``b``."""
    return sort_key(a) < sort_key(b)


def order(items: Sequence[QueueItem]) -> list[QueueItem]:
    return sorted(items, key=sort_key)


@dataclass(frozen=True, kw_only=True, slots=True)
class Blocked:
    """A gang group that failed and has not been placed since."""

    key: str
    since: int
    bypasses: int = 0
    reserving_since: int | None = None
    reserve_rounds: int = 0
    yields: int = 0
    not_before: int = 0  # earliest time this gang may reserve again after yielding


class BlockedDoc(TypedDict):
    """A blocked head of the queue in a snapshot (times in µs, camelCase as recorded)."""

    key: str
    since: int
    bypasses: int
    reservingSince: int | None
    reserveRounds: int
    yields: int
    notBefore: int


class QueueDoc(TypedDict):
    """The queue's state in a snapshot."""

    cooldown: int
    blocked: list[BlockedDoc]


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueState:
    blocked: tuple[Blocked, ...] = ()  # sorted by key
    cooldown: int = 0  # placements still needed before a new reservation may start

    def get(self, key: str) -> Blocked | None:
        return next((b for b in self.blocked if b.key == key), None)

    @property
    def reserving(self) -> Blocked | None:
        return next((b for b in self.blocked if b.reserving_since is not None), None)

    def to_dict(self) -> QueueDoc:
        return {
            "cooldown": self.cooldown,
            "blocked": [
                {
                    "key": b.key,
                    "since": b.since,
                    "bypasses": b.bypasses,
                    "reservingSince": b.reserving_since,
                    "reserveRounds": b.reserve_rounds,
                    "yields": b.yields,
                    "notBefore": b.not_before,
                }
                for b in self.blocked
            ],
        }

    @classmethod
    def from_dict(cls, d: QueueDoc) -> QueueState:
        return cls(
            cooldown=int(d.get("cooldown", 0)),
            blocked=tuple(
                Blocked(
                    key=b["key"],
                    since=b["since"],
                    bypasses=b["bypasses"],
                    reserving_since=b["reservingSince"],
                    reserve_rounds=b["reserveRounds"],
                    yields=b["yields"],
                    not_before=b["notBefore"],
                )
                for b in d.get("blocked", ())
            ),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """What to do with one item this round: ``attempt`` it, ``wait`` (backing off) or ``hold`` (capacity is
    being gathered for a reserving gang)."""

    key: str
    verdict: Literal["attempt", "wait", "hold"]
    reason: str = ""


def _attempt_order(
    state: QueueState, items: Sequence[QueueItem]
) -> tuple[list[QueueItem], set[str], str | None]:
    ordered = order(items)
    res = state.reserving
    gang = next((i for i in ordered if res is not None and i.key == res.key), None)
    if gang is None:
        return ordered, set(), None
    band = gang.band
    high = [i for i in ordered if (i.priority, i.sub_priority) > band]
    low = [i for i in ordered if (i.priority, i.sub_priority) <= band and i.key != gang.key]
    return [*high, gang, *low], {i.key for i in low}, gang.key


def plan(state: QueueState, items: Sequence[QueueItem], now: int, cfg: QueueConfig) -> list[Step]:
    """The round's steps, in attempt order. Attempt the ``attempt`` items in this order, then ``record``."""
    seq, held, gang = _attempt_order(state, items)
    steps = []
    for item in seq:
        if item.key in held:
            steps.append(Step(key=item.key, verdict="hold", reason=f"capacity held for {gang}"))
        elif item.not_before > now:
            steps.append(Step(key=item.key, verdict="wait", reason=f"backing off until {item.not_before}"))
        else:
            steps.append(Step(key=item.key, verdict="attempt"))
    return steps


def record(
    state: QueueState, items: Sequence[QueueItem], placed: Mapping[str, bool], now: int, cfg: QueueConfig
) -> QueueState:
    """The state after a round: ``placed[key]`` is True (placed) or False (attempted, did not fit) for each
    attempted item; items not in ``placed`` were not attempted."""
    seq, _, reserving_key = _attempt_order(state, items)
    present = {i.key for i in items}
    blocked = {b.key: b for b in state.blocked if b.key in present}
    cooldown = state.cooldown
    ahead: list[str] = []
    for item in seq:
        outcome = placed.get(item.key)
        if outcome is True:
            was = blocked.pop(item.key, None)
            if was is not None and was.reserving_since is not None:
                cooldown = cfg.max_bypasses
            elif item.key != reserving_key:
                cooldown = max(0, cooldown - 1)
            for key in ahead:
                blocked[key] = replace(blocked[key], bypasses=blocked[key].bypasses + 1)
            continue
        if outcome is False and item.is_gang:
            b: Blocked = blocked.get(item.key) or Blocked(key=item.key, since=now)
            if b.reserving_since is not None:
                b = replace(b, reserve_rounds=b.reserve_rounds + 1)
            blocked[item.key] = b
        if item.key in blocked:
            ahead.append(item.key)
    for key, b in sorted(blocked.items()):
        if b.reserving_since is None:
            continue
        by_time = cfg.max_reserve_seconds > 0 and now - b.reserving_since >= cfg.max_reserve_us
        by_rounds = cfg.max_reserve_rounds > 0 and b.reserve_rounds >= cfg.max_reserve_rounds
        if by_time or by_rounds:
            held = now - b.reserving_since
            blocked[key] = Blocked(
                key=key, since=now, yields=b.yields + 1, not_before=now + (held << min(b.yields, 30))
            )
            cooldown = cfg.max_bypasses
    if cooldown == 0 and all(b.reserving_since is None for b in blocked.values()):
        for item in order(items):
            cand = blocked.get(item.key)
            if cand is None:
                continue
            by_time = cfg.max_blocked_seconds > 0 and now - cand.since >= cfg.max_blocked_us
            if now >= cand.not_before and (cand.bypasses >= cfg.max_bypasses or by_time):
                blocked[item.key] = replace(cand, reserving_since=now, reserve_rounds=0)
                break
    return QueueState(blocked=tuple(b for _, b in sorted(blocked.items())), cooldown=cooldown)
