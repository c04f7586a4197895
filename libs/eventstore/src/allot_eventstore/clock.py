"""Clocks. The only place (with service shells) that reads wall time; everything else gets time as data.

A clock is a zero-argument callable returning microseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], int]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def system_clock() -> int:
    return time.time_ns() // 1000


class ManualClock:
    """A clock that only moves when told to (simulator, tests)."""

    def __init__(self, start_us: int = 1_767_225_600_000_000) -> None:  # 2026-01-01T00:00:00Z
        self.now_us = start_us

    def __call__(self) -> int:
        return self.now_us

    def advance(self, seconds: float) -> None:
        self.now_us += round(seconds * 1_000_000)


def to_datetime(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def from_datetime(value: datetime) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso(us: int) -> str:
    return to_datetime(us).isoformat().replace("+00:00", "Z")
