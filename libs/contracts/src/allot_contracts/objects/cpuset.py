"""Linux cpuset list format (``"0-3,8,10-11"``): parse to sorted CPU ids and format back (canonical, ranges)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CpusetError", "format_cpuset", "parse_cpuset"]


class CpusetError(ValueError):
    """Text that is not a cpuset list."""


# CPU ids a cpuset may name: Linux's own bound (``NR_CPUS`` is at most 8192); a range is expanded id by id, so an
# unbounded one ("0-30000000") held the reader for seconds and gigabytes
MAX_CPUS = 8192


def _cpu_id(digits: str, text: str) -> int:
    if not (digits.isascii() and digits.isdigit()):  # "²" is a digit to isdigit(), not to int()
        raise CpusetError(f"{text!r} is not a cpuset list (expected e.g. '0-3,8')")
    if len(digits) > 5 or int(digits) >= MAX_CPUS:
        raise CpusetError(f"{text!r}: CPU {digits[:12]} is beyond the {MAX_CPUS} CPUs Linux numbers")
    return int(digits)


def parse_cpuset(text: str) -> list[int]:
    """Sorted, de-duplicated CPU ids of a cpuset list; the empty string is the empty set."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        a = _cpu_id(lo, text)
        b = _cpu_id(hi, text) if sep else a
        if b < a:
            raise CpusetError(f"{text!r}: range {part!r} is reversed")
        out.update(range(a, b + 1))
    return sorted(out)


def format_cpuset(cpus: Iterable[int]) -> str:
    """Canonical cpuset list: sorted, consecutive ids collapsed into ranges."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)
