"""Linux cpuset list format (``"0-3,8,10-11"``): parse to sorted CPU ids and format back (canonical, ranges)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CpusetError", "format_cpuset", "parse_cpuset"]


class CpusetError(ValueError):
    """Text that is not a cpuset list."""


def parse_cpuset(text: str) -> list[int]:
    """Sorted, de-duplicated CPU ids of a cpuset list; the empty string is the empty set."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise CpusetError(f"{text!r} is not a cpuset list (expected e.g. '0-3,8')")
        a, b = int(lo), int(hi) if sep else int(lo)
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
