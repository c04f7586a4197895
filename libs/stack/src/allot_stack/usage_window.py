"""The window of ``allot report usage`` (and of the web view's usage page) from its ``--since``/``--until`` flags:
durations back from the last recorded event or ISO-8601 times, never the wall clock; and the report's rows for that
window, read from the log (the fold is :class:`allot_views.usage.UsageFold`).

The log is read in pages of :data:`PAGE` events and each page is folded before the next is read, so what a report
holds is one page and the fold's per-pod records, however long the window: a year's window costs time, not memory.
A window's ends are times the report can show (years 1 to 9999, UTC); one reaching past them is refused naming the
flag, as a window that ends before it starts is."""

from __future__ import annotations

import contextlib
import re
from typing import Any

from allot_contracts.clipping import clipped
from allot_views.usage import Window

__all__ = [
    "PAGE",
    "SYNTAX_ANCHOR_US",
    "fold_window",
    "parse_window",
    "store_usage",
    "usage_rows",
]

# an anchor for checking a window's syntax before the log is read (any instant far from both ends of time will do)
SYNTAX_ANCHOR_US = 1 << 62
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_NEGATIVE = re.compile(r"^-\s*\d+[smhdw]$")  # -5m: a duration that already counts back, given a sign
# what a duration counts back from, per flag (the flag's help says the same)
_BACK_FROM = {
    "--since": "starts 5 minutes before --until, which is the last recorded event unless given",
    "--until": "ends 5 minutes before the last recorded event",
}
# the first and last µs a report can show (0001-01-01T00:00:00Z, 9999-12-31T23:59:59.999999Z)
EARLIEST_US, LATEST_US = -62_135_596_800_000_000, 253_402_300_799_999_999
PAGE = 2000  # events read (and decoded) at a time


def _duration_s(text: str, flag: str) -> int:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{flag}: {text!r} is not a duration (a whole number and s, m, h, d or w, e.g. 7d)")
    digits = m.group(1).lstrip("0")
    seconds = (
        int(digits or "0") * _UNITS[m.group(2)] if len(digits) <= 12 else None
    )  # no int() of 5,000 digits
    if seconds is None or seconds * 1_000_000 > LATEST_US - EARLIEST_US:
        raise ValueError(f"{flag}: {clipped(text)} is longer than any window (at most 9999 years)")
    return seconds


def _instant_us(text: str, flag: str, anchor_us: int) -> int:
    """A duration back from ``anchor_us`` (``7d``) or an ISO-8601 time with a zone (``2026-01-01T00:00:00Z``)."""
    if _DURATION.match(text.strip()):
        return anchor_us - _duration_s(text, flag) * 1_000_000
    if _NEGATIVE.match(text.strip()):
        raise ValueError(
            f"{flag}: {clipped(text)} has a sign, but a duration already counts back ({flag} 5m "
            f"{_BACK_FROM[flag]}): give it without '-', or an ISO-8601 time (e.g. 2026-01-01T00:00:00Z)"
        )
    from datetime import datetime

    from allot_eventstore.clock import from_datetime

    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{flag}: {clipped(text)} is neither a duration (e.g. 7d, 12h) nor an ISO-8601 time "
            "(e.g. 2026-01-01T00:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"{flag}: {text!r} has no time zone (add Z for UTC)")
    return from_datetime(moment)


def _in_range(us: int, flag: str, text: str) -> None:
    if not EARLIEST_US <= us <= LATEST_US:
        raise ValueError(
            f"{flag}: {clipped(text)} is outside the times a report can show "
            "(0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z)"
        )


def parse_window(since: str, until: str | None, *, last_us: int) -> Window:
    """The window ``[since, until]``, never read from the wall clock: ``until`` defaults to the last recorded event
    (``last_us``) and a duration given as ``until`` counts back from it; a duration given as ``since`` counts back
    from ``until``. Raises ValueError naming the flag when input is bad: not a duration or a time, an end outside
    the years 1 to 9999 (unless ``last_us`` is :data:`SYNTAX_ANCHOR_US`), or an empty or reversed window."""
    until_us = last_us if until is None else _instant_us(until, "--until", last_us)
    since_us = _instant_us(since, "--since", until_us if _DURATION.match(since.strip()) else last_us)
    if last_us != SYNTAX_ANCHOR_US:
        _in_range(until_us, "--until", until or "the last recorded event")
        _in_range(since_us, "--since", since)
    if until_us < since_us and until is None:
        raise ValueError(
            f"--since: {since.strip()!r} is after the window's end (the last recorded event, {_shown(until_us)})"
        )
    if until_us < since_us:
        raise ValueError("--until: the window ends before it starts (--until is earlier than --since)")
    if until_us == since_us:
        raise ValueError("--since: the window is empty (--since is the same time as --until)")
    return Window(since_us, until_us)


def _shown(us: int) -> str:
    from allot_eventstore.clock import iso

    return iso(us) if EARLIEST_US <= us <= LATEST_US else f"{us} µs since 1970"


async def usage_rows(url: str, since: str, until: str | None, by: str) -> tuple[Any, list[Any]]:
    """The window and its rows, read from the log at ``url`` (only the event types the report needs)."""
    from allot_intake.errors import UsageError
    from allot_stack.connect import on_log

    try:
        return await on_log(lambda store: store_usage(store, since, until, by), url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


async def window_at(store: Any, since: str, until: str | None, *, position: int | None = None) -> Window:
    """The window for the log up to ``position`` (its head when None): :func:`parse_window` from the time of the
    event at that position; ValueError naming the flag for a bad window."""
    if position is None:
        position, _ = await store.head()
    last = await store.read(after=position - 1, limit=1) if position else []
    return parse_window(since, until, last_us=last[0].recorded_at if last else 0)


async def fold_window(store: Any, window: Window, by: str, *, position: int | None = None) -> list[Any]:
    """The rows of ``window`` from the log up to ``position`` (its head when None), read :data:`PAGE` events at a
    time and folded page by page (the module's docstring): the reading stops at the first event after the window."""
    from allot_views.usage import USAGE_TYPES, UsageFold

    fold = UsageFold(window, by)  # type: ignore[arg-type]
    async with contextlib.aclosing(store.iterate(until=position, types=USAGE_TYPES, page=PAGE)) as records:
        async for record in records:
            if not fold.add(record.recorded_at, record.decode()):
                break
    return fold.rows()


async def store_usage(
    store: Any, since: str, until: str | None, by: str, *, position: int | None = None
) -> tuple[Any, list[Any]]:
    """The window and its rows from an open event store; ValueError naming the flag for a bad window."""
    if position is None:
        position, _ = await store.head()
    window = await window_at(store, since, until, position=position)
    return window, await fold_window(store, window, by, position=position)
