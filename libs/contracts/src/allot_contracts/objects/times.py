"""Durations and timestamps as Kubernetes writes them: Go ``time.Duration`` strings and RFC 3339 ``metav1.Time``.

Both become integers: durations in whole microseconds, timestamps in microseconds since the epoch (the unit of every
recorded time in the log). Pure: parsing a timestamp reads no clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Final

from allot_contracts.issues import FieldIssue

__all__ = [
    "DurationError",
    "checked_duration_us",
    "checked_timestamp_us",
    "format_duration",
    "parse_duration_us",
    "parse_timestamp_us",
]

_US: Final = {"h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000, "ms": 1_000, "us": 1, "µs": 1, "ns": 0}
_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")


class DurationError(ValueError):
    """Text that is not a duration or a timestamp."""


def parse_duration_us(value: object) -> int:
    """``"24h"``, ``"1h30m"``, ``"90s"``, ``"500ms"``, ``"0s"`` or ``"0"`` → microseconds. Negative durations are
    refused (no Kubernetes field here accepts one)."""
    if not isinstance(value, str) or not value:
        raise DurationError("must be a duration such as '24h', '30m' or '90s'")
    if value == "0":
        return 0
    if len(value) > 100:  # longer than any duration Kubernetes writes; no number in it too long to convert
        raise DurationError(f"a duration of {len(value)} characters is out of range")
    pos, total = 0, 0
    for m in _PART.finditer(value):
        if m.start() != pos:
            break
        number, unit = m.group(1), m.group(2)
        if unit == "ns":
            pos = m.end()
            continue
        whole, _, frac = number.partition(".")
        scale = _US[unit]
        total += int(whole) * scale + (int(frac) * scale // 10 ** len(frac) if frac else 0)
        pos = m.end()
    if pos != len(value):
        raise DurationError(f"{value!r} is not a duration such as '24h', '30m' or '90s'")
    return total


def format_duration(us: int) -> str:
    """Microseconds as a short Go-style duration (``"24h"``, ``"1h30m"``, ``"90s"``, ``"0s"``)."""
    if us <= 0:
        return "0s"
    seconds, rest = divmod(us, 1_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    if seconds or rest or not out:
        out += f"{seconds}.{rest:06d}".rstrip("0").rstrip(".") + "s"
    return out


def parse_timestamp_us(value: object) -> int:
    """An RFC 3339 time (``"2026-05-01T12:00:00Z"``, with or without fractions or an offset) → µs since the epoch.
    A time without a zone is refused: Kubernetes always writes one."""
    if not isinstance(value, str) or not value:
        raise DurationError("must be an RFC 3339 time such as '2026-05-01T12:00:00Z'")
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise DurationError(f"{value!r} is not an RFC 3339 time such as '2026-05-01T12:00:00Z'") from None
    if parsed.tzinfo is None:
        raise DurationError(f"{value!r} has no time zone (add 'Z' for UTC)")
    delta = parsed - datetime.fromisoformat("1970-01-01T00:00:00+00:00")
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def checked_duration_us(raw: object, path: str, issues: list[FieldIssue]) -> int | None:
    """``raw`` as a duration in µs; None with an ``InvalidValue`` issue when it is not one (None when absent)."""
    return _checked(parse_duration_us, raw, path, issues)


def checked_timestamp_us(raw: object, path: str, issues: list[FieldIssue]) -> int | None:
    """``raw`` as a time in µs since the epoch; None with an ``InvalidValue`` issue when it is not one (None when
    absent)."""
    return _checked(parse_timestamp_us, raw, path, issues)


def _checked(parse: Callable[[object], int], raw: object, path: str, issues: list[FieldIssue]) -> int | None:
    if raw is None:
        return None
    try:
        return parse(raw)
    except DurationError as exc:
        issues.append(FieldIssue(path=path, code="InvalidValue", message=str(exc), value=str(raw)))
        return None
