"""Borrow and return facts: who lends to whom, how much, under which runtime.

Design
------
A quota *borrows* when its used goes above its floor (its min — scaled when the cluster is short — or its
guaranteed amount). For a usage change of ``r`` units in dimension ``d`` at quota ``X`` (``+r`` when a pod is
assigned, ``-r`` when it leaves), the newly borrowed amount is

    b(X) = max(0, after − max(before, floor))         (borrow)
    b(X) = max(0, before − max(after, floor))         (return)

and the same rule applied to the parent ``P`` gives ``b(P) ≤ b(X)``: the part of ``X``'s borrowing that ``P``
itself has to borrow one level up. The remainder ``b(X) − b(P)`` is funded *inside* ``P``, by

- every sibling that lends, with what it lends under the current runtime: ``max(0, floor − runtime)`` (kind
  ``idle-min``); a sibling that does not lend has runtime ≥ floor and so lends nothing;
- ``P``'s capacity promised to none of its children: ``floor(P) − Σ children's floors``, or at a tree root the
  tree total minus the children's floors (kind ``unassigned``, lender = ``P``).

That remainder is split over those lenders in proportion to what each can lend, by largest remainder with ties
by quota name (the same apportionment as the runtime calculator), so the facts add up exactly. When nobody can
lend (the level is already over-committed), the remainder is attributed to ``P`` with kind ``overcommitted``.
One fact per (dimension, level) is emitted, from the quota up to the first level that borrows nothing. This is
an attribution model for explaining decisions; it does not change any runtime.
"""

from __future__ import annotations

from typing import Any

from allot_contracts.quantity import format_quantity

from allot_quota._resources import RL
from allot_quota.runtime import hamilton
from allot_quota.tree import Hierarchy, Node

__all__ = ["usage_facts"]


def _floor(node: Node, d: str) -> int:
    return max(node.auto_min.get(d, node.spec.min.get(d, 0)), node.guaranteed.get(d, 0))


def _moved(before: int, after: int, floor: int, sign: int) -> int:
    if sign > 0:
        return max(0, after - max(before, floor))
    return max(0, before - max(after, floor))


def _lenders(h: Hierarchy, parent: Node, borrower: str, d: str) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    floors = 0
    for c in parent.children:
        child = h.nodes[c]
        if d not in child.spec.max:
            continue
        f = _floor(child, d)
        floors += f
        if c != borrower:
            idle = f - child.runtime.get(d, 0)
            if idle > 0:
                out.append((c, idle, "idle-min"))
    base = parent.runtime.get(d, 0) if h.is_tree_root(parent) else _floor(parent, d)
    if base - floors > 0:
        out.append((parent.name, base - floors, "unassigned"))
    return sorted(out)


def usage_facts(h: Hierarchy, quota: str, delta: RL, sign: int) -> list[dict[str, Any]]:
    """Facts for a usage change of ``sign * delta`` at ``quota``; call before applying the change."""
    start = h.nodes[quota]
    if h.parent_of(start) is None:
        return []
    h.runtime(quota)
    facts: list[dict[str, Any]] = []
    for d in sorted(delta):
        r = delta[d]
        if r <= 0:
            continue
        x, carried = start, None
        while True:
            parent = h.parent_of(x)
            if parent is None:
                break
            before = x.used.get(d, 0)
            b = _moved(before, before + sign * r, _floor(x, d), sign)
            if carried is not None:
                b = min(b, carried)
            if b == 0:
                break
            up = 0
            if h.parent_of(parent) is not None:
                pb = parent.used.get(d, 0)
                up = min(b, _moved(pb, pb + sign * r, _floor(parent, d), sign))
            here = b - up
            lenders: list[dict[str, str]] = []
            if here:
                supply = _lenders(h, parent, x.name, d)
                if supply:
                    split = hamilton(here, [(n, s) for n, s, _ in supply])
                    kinds = {n: k for n, _, k in supply}
                    lenders = [
                        {"quota": n, "amount": format_quantity(d, a), "kind": kinds[n]}
                        for n, a in sorted(split.items())
                        if a
                    ]
                else:
                    lenders = [
                        {"quota": parent.name, "amount": format_quantity(d, here), "kind": "overcommitted"}
                    ]
            facts.append(
                {
                    "direction": "borrow" if sign > 0 else "return",
                    "dimension": d,
                    "quota": x.name,
                    "parent": parent.name,
                    "amount": format_quantity(d, b),
                    "within_parent": format_quantity(d, here),
                    "passed_up": format_quantity(d, up),
                    "floor": format_quantity(d, _floor(x, d)),
                    "used_before": format_quantity(d, before),
                    "used_after": format_quantity(d, before + sign * r),
                    "runtime": format_quantity(d, x.runtime.get(d, 0)),
                    "parent_runtime": format_quantity(d, parent.runtime.get(d, 0)),
                    "lenders": lenders,
                }
            )
            if up == 0:
                break
            x, carried = parent, up
    return facts
