"""Runtime quota: how a parent's total is shared among its children, one resource dimension at a time.

Design
------
Every parent quota (and every tree root) owns a calculator over its direct children. Given the parent's total
for a dimension (the tree total at a root, the parent's own runtime elsewhere), each child gets a *runtime*:

1. Floor. A child asking for more than its floor ``max(min, guaranteed)`` starts at the floor and joins the
   borrowers; a child asking for less gets exactly what it asks (it lends the rest of its min) unless it does
   not lend (``allow-lent-resource: "false"``), in which case it keeps its full min even when idle.
2. Surplus. What is left of the total is shared among the borrowers in proportion to their shared weights with
   the largest-remainder (Hamilton) method: everyone gets ``floor(w·R/W)``, and the units left over go one each
   to the largest remainders, ties broken by quota name ascending. The split is exact: it never loses or
   over-assigns a unit. A borrower that reaches its request gives back the excess, which is shared again among
   those still short, until nothing is left or nobody is short. Children with weight 0 never receive surplus.
3. Min scaling (``enableMinQuotaScale``). When the children's mins add up to more than the total, each min is
   scaled to ``floor(total·min/Σmin)`` for that dimension before step 1; otherwise mins are used as they are.

Requests entering the calculator are already limited to each child's max, so a runtime never exceeds max.
All arithmetic is on Python integers (cpu in millicores), so nothing overflows or rounds.
Pure functions; the incremental bookkeeping (which calculators are stale) lives in :mod:`allot_quota.tree`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["Share", "hamilton", "redistribute", "scale_mins"]


class Share(NamedTuple):
    """One child's inputs for one dimension."""

    name: str
    request: int  # limited request (≤ max)
    floor: int  # max(scaled min, guaranteed)
    weight: int
    allow_lent: bool


def hamilton(amount: int, weights: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Split ``amount`` in proportion to ``weights`` by largest remainder; ties by name ascending.

    Entries with weight ≤ 0 get 0. The parts always add up to ``amount`` when any weight is positive.
    """
    out = {name: 0 for name, _ in weights}
    total = sum(w for _, w in weights if w > 0)
    if amount <= 0 or total <= 0:
        return out
    given = 0
    remainders: list[tuple[int, str]] = []
    for name, w in weights:
        if w <= 0:
            continue
        q, r = divmod(w * amount, total)
        out[name] = q
        given += q
        remainders.append((-r, name))
    residual = amount - given
    if residual:
        remainders.sort()
        for _, name in remainders[:residual]:
            out[name] += 1
    return out


def scale_mins(total: int, mins: Sequence[tuple[str, int]]) -> dict[str, int] | None:
    """Scaled mins when ``Σ mins > total`` (``floor(total·min/Σmin)``, 0 when total ≤ 0); None when they fit."""
    s = sum(m for _, m in mins)
    if s <= total:
        return None
    if total <= 0:
        return {name: 0 for name, _ in mins}
    return {name: total * m // s for name, m in mins}


def redistribute(total: int, shares: Sequence[Share]) -> dict[str, int]:
    """Runtime of each child for one dimension, given the parent's ``total`` for it."""
    runtime: dict[str, int] = {}
    remaining = total
    borrowers: list[Share] = []
    for s in shares:
        if s.request > s.floor:
            rt = s.floor
            if s.weight > 0:
                borrowers.append(s)
        elif s.allow_lent:
            rt = s.request
        else:
            rt = s.floor
        runtime[s.name] = rt
        remaining -= rt
    while remaining > 0 and borrowers:
        deltas = hamilton(remaining, [(s.name, s.weight) for s in borrowers])
        still_short: list[Share] = []
        remaining = 0
        for s in borrowers:
            rt = runtime[s.name] + deltas[s.name]
            if rt < s.request:
                still_short.append(s)
            else:
                remaining += rt - s.request
                rt = s.request
            runtime[s.name] = rt
        borrowers = still_short
    return runtime
