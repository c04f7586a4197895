"""ResourceList arithmetic with Kubernetes semantics, over canonical integers.

Responsibility: the small set of operations on resource lists (``{name: canonical int}``) that placement, quota and
reservation logic share, with the exact semantics of Kubernetes' ``apiserver/pkg/quota/v1`` helpers, because
Koordinator's decisions depend on their edge cases.

Invariants:
- Values are canonical integers (``allot_contracts.quantity``: cpu in millicores, everything else base units).
- Every function is pure and returns a new dict; inputs are never mutated.
- Returned dicts have sorted keys, so iterating over a result never depends on how the inputs were built.

Semantics worth knowing (quirk #10 in the reference is kept on purpose):
- ``less_than_or_equal(a, b)`` compares only the keys present in **both** lists. A key that only ``a`` has is not
  checked, and an empty ``b`` constrains nothing. A dimension a limit does not list does not constrain it.
- ``subtract`` may go negative; ``subtract_non_negative`` clamps every key at zero.
- ``le_completely`` is the quota webhook's stricter form of ``less_than_or_equal``: every key of the value must exist
  in the limit.
- Aggregates that must not keep zero entries (the quota engine's used and request totals, so that two ways of
  reaching the same totals compare equal) use ``add_into`` (in place, dropping what becomes zero) and
  ``remove_zeros``; runtime lists keep zeros on purpose, because ``{"nvidia.com/gpu": 0}`` constrains and ``{}``
  does not.

This is the one ResourceList module: the placement, quota and reservation engines all use it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from allot_contracts.quantity import QuantityError, format_quantity, to_canonical

__all__ = [
    "ResourceList",
    "add",
    "add_into",
    "cap",
    "describe",
    "equals",
    "exceeded_dimensions",
    "format_resource_list",
    "is_zero",
    "le_completely",
    "less_than_or_equal",
    "mask",
    "max_of",
    "negatives",
    "parse_resource_list",
    "raise_to",
    "remove_zeros",
    "subtract",
    "subtract_non_negative",
    "to_json",
]

ResourceList = dict[str, int]


def _sorted(d: Mapping[str, int]) -> ResourceList:
    return {k: d[k] for k in sorted(d)}


def parse_resource_list(raw: Mapping[str, object] | None) -> ResourceList:
    """Parse ``{name: quantity}`` (strings or numbers) into canonical integers. Raises ``QuantityError``."""
    if not raw:
        return {}
    out: ResourceList = {}
    for name in sorted(raw):
        value = raw[name]
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise QuantityError(f"{name}: quantity must be a string or number, got {type(value).__name__}")
        out[str(name)] = to_canonical(str(name), value)
    return out


def format_resource_list(rl: Mapping[str, int]) -> dict[str, str]:
    """Format canonical integers back into Kubernetes quantity strings (sorted keys)."""
    return {k: format_quantity(k, rl[k]) for k in sorted(rl)}


def add(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Per-key sum over the union of keys."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return _sorted(out)


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Per-key ``a - b`` over the union of keys; may go negative."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return _sorted(out)


def subtract_non_negative(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Per-key ``max(a - b, 0)`` over the union of keys."""
    return {k: max(v, 0) for k, v in subtract(a, b).items()}


def max_of(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Per-key maximum over the union of keys (a key missing on one side counts as 0 there)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0), v)
    return _sorted(out)


def mask(a: Mapping[str, int], names: Iterable[str]) -> ResourceList:
    """Keep only the given names."""
    keep = set(names)
    return _sorted({k: v for k, v in a.items() if k in keep})


def remove_zeros(a: Mapping[str, int]) -> ResourceList:
    """Drop keys whose value is zero."""
    return _sorted({k: v for k, v in a.items() if v != 0})


def is_zero(a: Mapping[str, int]) -> bool:
    """True when every value is zero (an empty list is zero)."""
    return all(v == 0 for v in a.values())


def equals(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """Same key set and same values."""
    return dict(a) == dict(b)


def less_than_or_equal(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """Kubernetes ``LessThanOrEqual``: only keys present in both are compared; an empty ``b`` is always satisfied."""
    for k, limit in b.items():
        v = a.get(k)
        if v is not None and v > limit:
            return False
    return True


def exceeded_dimensions(a: Mapping[str, int], b: Mapping[str, int]) -> list[str]:
    """The sorted keys for which ``less_than_or_equal`` fails (present in both and ``a[k] > b[k]``)."""
    return sorted(k for k, limit in b.items() if k in a and a[k] > limit)


def negatives(a: Mapping[str, int]) -> list[str]:
    """The sorted keys whose value is below zero."""
    return sorted(k for k, v in a.items() if v < 0)


def le_completely(value: Mapping[str, int], limit: Mapping[str, int]) -> bool:
    """Every key of ``value`` must exist in ``limit`` with ``value <= limit`` (zero values may be absent)."""
    return all((v <= 0) if k not in limit else v <= limit[k] for k, v in value.items())


def add_into(acc: dict[str, int], delta: Mapping[str, int], sign: int = 1) -> None:
    """``acc += sign * delta`` in place, dropping entries that become zero (the aggregate form)."""
    for k, v in delta.items():
        total = acc.get(k, 0) + sign * v
        if total:
            acc[k] = total
        else:
            acc.pop(k, None)


def cap(a: Mapping[str, int], limit: Mapping[str, int]) -> ResourceList:
    """Per-key ``min(a, limit)``; keys absent from ``limit`` are unlimited."""
    out: ResourceList = {}
    for k, v in a.items():
        lim = limit.get(k)
        out[k] = v if lim is None or v <= lim else lim
    return out


def raise_to(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """``a`` with each key raised to ``b``'s value where that is greater (a key only ``b`` has is added when it is
    positive: unlike ``max_of``, no zero entry appears)."""
    out = dict(a)
    for k, v in b.items():
        if v > out.get(k, 0):
            out[k] = v
    return out


def to_json(a: Mapping[str, int]) -> str:
    """Compact JSON ResourceList with sorted keys, as written into status annotations."""
    return json.dumps(format_resource_list(a), separators=(",", ":"), sort_keys=True)


def describe(a: Mapping[str, int]) -> str:
    """``cpu:4,memory:8Gi`` (sorted), or ``<empty>``: the form used in admission messages."""
    if not a:
        return "<empty>"
    return ",".join(f"{k}:{format_quantity(k, a[k])}" for k in sorted(a))
