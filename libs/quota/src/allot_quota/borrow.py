"""Borrow and return facts: who lends to whom, how much, under which runtime.

Design
------
A quota *borrows* when its used goes above its floor: its configured min (or its guaranteed amount, with the
guarantee gate). The configured min is used even while min scaling is active: scaling decides runtimes, while
these facts explain usage against what each quota was promised. For a usage change of ``r`` units in dimension
``d`` at quota ``X`` (``+r`` when a pod is assigned, ``-r`` when it leaves) the amount borrowed (or returned) is

    b = max(0, after − max(before, floor))         (borrow)
    b = max(0, before − max(after, floor))         (return)

That amount is funded inside the parent ``P`` as far as ``P`` has room: ``free(P) = base(P) − Σ occupied(c)``
over ``P``'s children, where ``base`` is ``P``'s floor (or the tree total at a root), ``X`` occupies
``max(used, floor)``, a lending sibling occupies its used and a sibling that does not lend occupies
``max(used, floor)``. ``within = min(b, free)``; the rest, ``b − within``, is what ``P`` itself borrows one level
up, where the same rule applies. Returns are evaluated on the state after the pod left, so a return mirrors the
borrow it undoes. The part funded within ``P`` is attributed to

- the lending siblings, with their idle min ``max(0, floor − used)`` (kind ``idle-min``), and
- ``P``'s capacity promised to none of its children, ``base(P) − Σ children's floors`` (kind ``unassigned``,
  lender = ``P``),

in proportion to those amounts, by largest remainder with ties by quota name (the runtime calculator's
apportionment), so the lenders add up exactly to ``within``. What a tree root cannot fund is attributed to the
root with kind ``overcommitted`` (runtime let it in, but the promised mins already exceed the total).
This is an attribution model for explaining decisions; it never changes a runtime.
"""

from __future__ import annotations

from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.quantity import format_quantity
from allot_contracts.resources import ResourceList
from allot_quota.runtime import hamilton
from allot_quota.tree import Hierarchy, Node

__all__ = ["usage_facts"]


def _floor(node: Node, d: str) -> int:
    return max(node.spec.min.get(d, 0), node.guaranteed.get(d, 0))


def _moved(before: int, after: int, floor: int, sign: int) -> int:
    if sign > 0:
        return max(0, after - max(before, floor))
    return max(0, before - max(after, floor))


def _lends(node: Node, config_guarantee: bool) -> bool:
    return node.spec.allow_lent and not config_guarantee


def _level(h: Hierarchy, parent: Node, x: Node, d: str, adj: int) -> tuple[int, list[tuple[str, int, str]]]:
    """(free room in ``parent`` for ``x``'s excess, lenders with their supply) for dimension ``d``."""
    guarantee = h.config.enable_guarantee
    base = parent.runtime.get(d, 0) if h.is_tree_root(parent) else _floor(parent, d)
    occupied = floors = 0
    supply: list[tuple[str, int, str]] = []
    for c in parent.children:
        child = h.nodes[c]
        if d not in child.spec.max:
            continue
        f = _floor(child, d)
        used = child.used.get(d, 0)
        floors += f
        if child is x:
            occupied += max(used + adj, f)
        elif _lends(child, guarantee):
            occupied += used
            if f > used:
                supply.append((c, f - used, "idle-min"))
        else:
            occupied += max(used, f)
    if base > floors:
        supply.append((parent.name, base - floors, "unassigned"))
    return base - occupied, sorted(supply)


def _fact(d: str, x: Node, parent: Node, *, change: int, amounts: tuple[int, int, int]) -> JsonObject:
    b, within, up = amounts
    before = x.used.get(d, 0)
    return {
        "direction": "borrow" if change > 0 else "return",
        "dimension": d,
        "quota": x.name,
        "parent": parent.name,
        "amount": format_quantity(d, b),
        "within_parent": format_quantity(d, within),
        "passed_up": format_quantity(d, up),
        "floor": format_quantity(d, _floor(x, d)),
        "used_before": format_quantity(d, before),
        "used_after": format_quantity(d, before + change),
        "runtime": format_quantity(d, x.runtime.get(d, 0)),
        "parent_runtime": format_quantity(d, parent.runtime.get(d, 0)),
    }


def usage_facts(h: Hierarchy, quota: str, delta: ResourceList, sign: int) -> list[JsonObject]:
    """Facts for a usage change of ``sign * delta`` at ``quota``; call before applying the change."""
    start = h.nodes[quota]
    if h.parent_of(start) is None:
        return []
    h.runtime(quota)
    facts: list[JsonObject] = []
    adj = 0 if sign > 0 else -1
    for d in sorted(delta):
        r = delta[d]
        if r <= 0:
            continue
        x = start
        b = _moved(x.used.get(d, 0), x.used.get(d, 0) + sign * r, _floor(x, d), sign)
        while b > 0:
            parent = h.parent_of(x)
            if parent is None:
                break
            free, supply = _level(h, parent, x, d, adj * r)
            within = min(b, max(0, free))
            up = b - within if h.parent_of(parent) is not None else 0
            lenders: list[JsonValue] = []
            if within and supply:
                split = hamilton(within, [(n, s) for n, s, _ in supply])
                kinds = {n: k for n, _, k in supply}
                lenders = [
                    {"quota": n, "amount": format_quantity(d, a), "kind": kinds[n]}
                    for n, a in sorted(split.items())
                    if a
                ]
            short = b - within - up
            if short:
                lenders.append(
                    {"quota": parent.name, "amount": format_quantity(d, short), "kind": "overcommitted"}
                )
            fact = _fact(d, x, parent, change=sign * r, amounts=(b, within, up))
            fact["lenders"] = lenders
            facts.append(fact)
            x, b = parent, up
    return facts
