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

Reference cycles are still collected; only how often the collector scans long-lived objects changes.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 50, 100)


def configure() -> None:
    gc.set_threshold(*THRESHOLDS)


def unsettle() -> None:
    gc.unfreeze()


def settle() -> None:
    gc.collect()
    gc.freeze()
