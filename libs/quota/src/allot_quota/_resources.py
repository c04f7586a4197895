"""ResourceList arithmetic on canonical integers (private to the quota engine).

A ResourceList here is ``dict[str, int]`` in canonical units (cpu in millicores, everything else in base units,
see :mod:`allot_contracts.quantity`). The comparison helpers follow the Kubernetes quota helpers that Koordinator
relies on:

- :func:`exceeds` is ``LessThanOrEqual`` inverted: only keys of the *limit* that are also present in the value are
  compared, so a dimension absent from the limit never constrains (decision 10 in the behaviour reference).
- :func:`le_completely` is the webhook's stricter form: every key of the value must exist in the limit.

Aggregates (used, request) never keep zero entries, so two ways of reaching the same totals compare equal;
runtime lists keep zeros on purpose, because ``{"nvidia.com/gpu": 0}`` constrains and ``{}`` does not.
Pure: no IO; no floats.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from allot_contracts.quantity import format_quantity, to_canonical

RL = dict[str, int]

__all__ = [
    "RL",
    "add",
    "add_into",
    "cap",
    "describe",
    "exceeds",
    "le_completely",
    "mask",
    "negatives",
    "nonzero",
    "parse_list",
    "quantities",
    "rmax",
    "sub",
    "to_json",
]


def parse_list(raw: Mapping[str, Any]) -> RL:
    """Parse a manifest ResourceList (``{"cpu": "500m"}``) into canonical integers; raises ``QuantityError``."""
    return {str(k): to_canonical(str(k), v) for k, v in raw.items()}


def add_into(acc: RL, delta: Mapping[str, int], sign: int = 1) -> None:
    """``acc += sign * delta`` in place, dropping entries that become zero."""
    for k, v in delta.items():
        n = acc.get(k, 0) + sign * v
        if n:
            acc[k] = n
        else:
            acc.pop(k, None)


def add(a: Mapping[str, int], b: Mapping[str, int]) -> RL:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> RL:
    """``a - b`` over the union of keys, dropping zero entries (the delta form)."""
    out = dict(a)
    add_into(out, b, -1)
    return {k: v for k, v in out.items() if v}


def nonzero(a: Mapping[str, int]) -> RL:
    return {k: v for k, v in a.items() if v}


def mask(a: Mapping[str, int], keys: Iterable[str]) -> RL:
    ks = keys if isinstance(keys, (set, frozenset, dict)) else set(keys)
    return {k: v for k, v in a.items() if k in ks}


def cap(a: Mapping[str, int], limit: Mapping[str, int]) -> RL:
    """Per-key ``min(a, limit)``; keys absent from ``limit`` are unlimited."""
    out: RL = {}
    for k, v in a.items():
        lim = limit.get(k)
        out[k] = v if lim is None or v <= lim else lim
    return out


def rmax(a: Mapping[str, int], b: Mapping[str, int]) -> RL:
    """Per-key maximum over the union of keys (a missing key counts as 0)."""
    out = dict(a)
    for k, v in b.items():
        if v > out.get(k, 0):
            out[k] = v
    return out


def exceeds(value: Mapping[str, int], limit: Mapping[str, int]) -> list[str]:
    """Dimensions where ``value > limit``, sorted; ``[]`` means ``LessThanOrEqual(value, limit)`` holds.

    Only keys present in both lists are compared: a key missing from ``limit`` is unconstrained and a key
    missing from ``value`` is not checked.
    """
    return sorted(k for k, lim in limit.items() if k in value and value[k] > lim)


def le_completely(value: Mapping[str, int], limit: Mapping[str, int]) -> bool:
    """Every key of ``value`` must exist in ``limit`` with ``value <= limit`` (zero values may be absent)."""
    return all((v <= 0) if k not in limit else v <= limit[k] for k, v in value.items())


def negatives(a: Mapping[str, int]) -> list[str]:
    return sorted(k for k, v in a.items() if v < 0)


def quantities(a: Mapping[str, int]) -> dict[str, str]:
    """Kubernetes quantity strings, keys sorted (the JSON shape used in decisions and snapshots)."""
    return {k: format_quantity(k, a[k]) for k in sorted(a)}


def to_json(a: Mapping[str, int]) -> str:
    """Compact JSON ResourceList with sorted keys, as written into status annotations."""
    return json.dumps(quantities(a), separators=(",", ":"), sort_keys=True)


def describe(a: Mapping[str, int]) -> str:
    """``cpu:4,memory:8Gi`` (sorted), or ``<empty>``: the form used in admission messages."""
    if not a:
        return "<empty>"
    return ",".join(f"{k}:{format_quantity(k, a[k])}" for k in sorted(a))
