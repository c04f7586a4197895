"""Kubernetes resource quantities, exactly.

Responsibility: parse the quantity strings found in manifests (``"500m"``, ``"8Gi"``, ``"1e3"``, ``"83201216Ki"``)
into exact rational numbers, convert them to the integer units the engines compute in, and format integers back
into canonical quantity strings.

Invariants:
- Parsing is exact (``fractions.Fraction``); no float ever touches a quantity.
- Canonical integer units: ``cpu`` in millicores, everything else in base units (bytes, device units, counts).
  Conversion rounds up, like Kubernetes ``MilliValue()`` / ``Value()``. Koordinator's ``kubernetes.io/batch-cpu``
  and ``kubernetes.io/mid-cpu`` are extended resources whose *value* is a number of millicores (``"2500"`` is 2.5
  cores; slo-controller writes them so and the kubelet counts extended resources in whole units), so they are read
  with ``Value()`` and their canonical integer is millicores all the same.
- ``format_quantity`` is the inverse for canonical integers: binary suffixes for byte-like resources when exact,
  decimal otherwise, millicores as ``"500m"`` or whole cores as ``"4"``.

Pure: no IO, no clock. Errors are ``QuantityError`` (a ``ValueError``) naming the offending text.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Final

from allot_contracts.clipping import clipped

__all__ = [
    "QuantityError",
    "format_quantity",
    "is_milli_resource",
    "parse_quantity",
    "to_canonical",
]


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN: Final = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))\Z"
)

# Resources whose canonical unit is the milli-unit (Kubernetes MilliValue). Everything else uses Value(): the
# batch/mid cpu extended resources too, whose values already count millicores.
_MILLI_RESOURCES: Final = frozenset({"cpu"})

# Digits a quantity's number may have: far more than any resource needs (a 64-bit count has 19; nanos add 9), few
# enough that a number is never longer than Python converts (a 5,000-digit one raised instead of being refused).
MAX_DIGITS: Final = 64


def is_milli_resource(name: str) -> bool:
    """True when ``name`` is counted in milli-units (cpu)."""
    return name in _MILLI_RESOURCES


def parse_quantity(text: object) -> Fraction:
    """Parse a Kubernetes quantity into an exact ``Fraction``.

    Integers are accepted as they are; floats only when they are integral (YAML turns ``4`` into an int but
    ``0.5`` into a float, which we accept by way of its shortest decimal representation).
    """
    if isinstance(text, bool):
        raise QuantityError(f"quantity must be a string or number, got {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if text != text or text in (float("inf"), float("-inf")):
            raise QuantityError(f"quantity {text!r} is not a finite number")
        return Fraction(repr(text))
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string or number, got {type(text).__name__}")
    return _parse_text(text)


@functools.lru_cache(maxsize=8192)  # manifests repeat a few quantity strings; Fractions are immutable
def _parse_text(text: str) -> Fraction:
    s = text
    m = _PATTERN.match(s)
    if m is None:
        raise QuantityError(
            f"{clipped(text)} is not a valid quantity (expected e.g. '500m', '4', '8Gi', '1e3')"
        )
    if len(m.group("num")) > MAX_DIGITS:
        raise QuantityError(
            f"{clipped(text)} is not a valid quantity: its number has {len(m.group('num'))} characters, at most"
            f" {MAX_DIGITS} are accepted"
        )
    num = Fraction(m.group("num"))
    if m.group("bin"):
        num *= _BINARY[m.group("bin")]
    elif m.group("exp"):
        exp = int(m.group("exp")[1:]) if len(m.group("exp")) <= 6 else 10**6
        if abs(exp) > 30:
            raise QuantityError(f"{text!r}: exponent out of range")
        num *= Fraction(10) ** exp
    else:
        num *= _DECIMAL[m.group("dec") or ""]
    if m.group("sign") == "-":
        num = -num
    return num


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def to_canonical(name: str, quantity: str | int | float | Fraction) -> int:
    """Convert a quantity of resource ``name`` to its canonical integer unit (millicores for cpu)."""
    if type(quantity) is str:
        return _canonical_text(name, quantity)
    q = quantity if isinstance(quantity, Fraction) else parse_quantity(quantity)
    if is_milli_resource(name):
        return _ceil(q * 1000)
    return _ceil(q)


@functools.lru_cache(maxsize=8192)
def _canonical_text(name: str, quantity: str) -> int:
    q = _parse_text(quantity)
    if is_milli_resource(name):
        return _ceil(q * 1000)
    return _ceil(q)


_BINARY_DESC: Final = sorted(_BINARY.items(), key=lambda kv: -kv[1])
_DECIMAL_DESC: Final = [("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)]
_BYTE_HINTS: Final = ("memory", "storage", "gpu-memory", "hugepages")


_PLAIN: Final = 0
_MILLI: Final = 1
_BYTES: Final = 2


@functools.lru_cache(maxsize=1024)
def _format_kind(name: str) -> int:
    """How quantities of resource ``name`` are written: millicores, bytes (binary suffixes) or plain counts. A
    cluster names a few dozen resources and every decision formats some: the answer is kept per name (bounded)."""
    if is_milli_resource(name):
        return _MILLI
    return _BYTES if any(h in name for h in _BYTE_HINTS) else _PLAIN


@functools.lru_cache(maxsize=16384)  # a cluster's pods and quotas repeat a few (resource, amount) pairs
def format_quantity(name: str, value: int) -> str:
    """Format a canonical integer of resource ``name`` as a canonical Kubernetes quantity string."""
    kind = _format_kind(name)
    if kind == _MILLI:
        if value % 1000 == 0:
            return str(value // 1000)
        return f"{value}m"
    if value == 0:
        return "0"
    if kind == _BYTES:
        for suffix, factor in _BINARY_DESC:
            if value % factor == 0:
                return f"{value // factor}{suffix}"
        return str(value)
    return str(value)
