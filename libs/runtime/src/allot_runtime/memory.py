"""Garbage-collector settings of the long-running processes (the services and the relay).

A service's projection is a large, long-lived heap (the placement engine's nodes, devices and memo tables, every
pod's manifest), and CPython's default collector re-scans it over and over: a full collection runs every ~70,000
net container allocations, and placing one pod allocates hundreds of tuples and dicts. Measured on the openb trace,
the default settings cost the placement engine a third of its throughput (about 2,500 against 4,000 placements/s).
Two settings remove that cost without turning the collector off:

- ``configure()``: a larger young generation (collections every 50,000 allocations instead of 700, so short-lived
  decision garbage is freed by reference counting before a collection ever looks at it) and much rarer older ones
  (the oldest generation every 100 middle ones instead of 10);
- ``settle()``: after a projection is rebuilt, collect once and move everything that survived into the permanent
  generation (``gc.freeze``), which later collections skip. The projection changes incrementally from there; what
  the next rebuild discards is unfrozen first (``unsettle``) so that it can still be collected.
- ``paused()``: no collection while a snapshot's state is decoded. Decoding builds the whole projection at once,
  objects that all stay alive, and every collection on the way would scan what was built so far for nothing (a
  third of the decoding time of a 10 MB state with the default thresholds).

Reference cycles are still collected; only how often the collector scans long-lived objects changes.

``tree_rss`` measures what a process and its children hold (the benchmarks sample it to report a peak).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from pathlib import Path

THRESHOLDS = (50_000, 50, 100)


def configure() -> None:
    gc.set_threshold(*THRESHOLDS)


def unsettle() -> None:
    gc.unfreeze()


def settle() -> None:
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off for the block (reference counting still frees what the block drops)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def tree_rss(pid: int) -> int:
    """Resident bytes of process ``pid`` and all its descendants now (Linux ``/proc``; 0 once it has exited)."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            total += int(Path(f"/proc/{current}/statm").read_text().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
        pending.extend(_children(current))
    return total
