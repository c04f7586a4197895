"""Quantities for people: ``16Gi``, ``500m``, ``unlimited`` (the tables of ``allot get``, explain lines, the web view),
shares of a capacity (``75%``) and ages (``90s``, ``5m``, ``3h``, ``2d``).

Pure: recorded quantities in, text out; the exact values stay in the log and in ``-o json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from allot_contracts.quantity import (
    QuantityError,
    format_quantity,
    is_milli_resource,
    parse_quantity,
    to_canonical,
)

__all__ = ["UNLIMITED_FROM", "age", "human", "human_list", "percent"]

# Quantities from here up are shown as ``unlimited``: the smallest of the "no limit" values Koordinator writes
# (MaxInt64/5 of cpu cores and memory bytes on its built-in quotas, MaxInt64/2000 on a profile's root quota), in the
# resource's base unit (cores, bytes, devices). No real capacity comes near: 4.6e15 cores, or 4 PiB of memory.
UNLIMITED_FROM = Fraction((2**63 - 1) // 2000)
_BYTES = ("memory", "storage", "gpu-memory", "hugepages", "gpu.memory")
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def _bytes(value: Fraction) -> str:
    if value < 0:
        return "-" + _bytes(-value)
    for suffix, factor in _BINARY:
        if value >= factor:
            scaled = value / factor
            if scaled.denominator == 1:
                return f"{scaled.numerator}{suffix}"
            return f"{round(float(scaled), 1):g}{suffix}"
    return str(round(float(value)))


def human(resource: str, quantity: Any) -> str:
    """A quantity for a table: ``unlimited`` for Koordinator's no-limit values, bytes in binary units (``16Gi``,
    ``15.5Gi`` when not exact), cpu as ``500m`` or cores; anything that is not a quantity is shown as it is."""
    try:
        value = parse_quantity(quantity)
    except QuantityError:
        return str(quantity)
    if value >= UNLIMITED_FROM:
        return "unlimited"
    if any(hint in resource for hint in _BYTES):
        return _bytes(value)
    if is_milli_resource(resource):
        return format_quantity(resource, -((-value.numerator * 1000) // value.denominator))
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):g}"


def human_list(values: Mapping[str, object], skip: Iterable[str] = ("pods",)) -> str:
    """``cpu=4 memory=16Gi nvidia.com/gpu=2`` (``-`` when empty)."""
    skipped = set(skip)
    return " ".join(f"{k}={human(k, v)}" for k, v in sorted(values.items()) if k not in skipped) or "-"


def percent(value: str, capacity: str, resource: str) -> str | None:
    """``value`` as a whole percentage of ``capacity`` (``75%``); None when the capacity is zero or either is not a
    quantity."""
    try:
        total = to_canonical(resource, capacity)
        return f"{to_canonical(resource, value) * 100 // total}%" if total else None
    except QuantityError:
        return None


def age(us: int, *, days: bool = True) -> str:
    """A duration in microseconds as ``90s``, ``5m``, ``3h`` and, from two days on, ``2d`` (unless ``days`` is
    False: a node's metric and heartbeat are counted in hours)."""
    seconds = max(us, 0) // 1_000_000
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800 or not days:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
