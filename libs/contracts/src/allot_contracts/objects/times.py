"""Durations and timestamps as Kubernetes writes them: Go ``time.Duration`` strings and RFC 3339 ``metav1.Time``.

Both become integers: durations in whole microseconds, timestamps in microseconds since the epoch (the unit of every
recorded time in the log). Pure: parsing a timestamp reads no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.duration import parse_go_duration

__all__ = [
    "DurationError",
    "checked_duration_us",
    "checked_timestamp_us",
    "format_duration",
    "parse_duration_us",
    "parse_timestamp_us",
]


class DurationError(ValueError):
    """Text that is not a duration or a timestamp."""


def parse_duration_us(value: object) -> int:
    """``"24h"``, ``"1h30m"``, ``"90s"``, ``"500ms"``, ``"0s"`` or ``"0"`` → microseconds, read as Go reads a
    ``time.Duration`` (:func:`~allot_contracts.objects.duration.parse_go_duration`: at most about 292 years) and
    rounded up to a whole microsecond, so a positive duration never becomes zero (``ttl: 1ns`` read as 0 made a
    Reservation that never expires, where upstream's expires at once). Negative durations are refused (no
    Kubernetes field here accepts one)."""
    if not isinstance(value, str) or not value:
        raise DurationError("must be a duration such as '24h', '30m' or '90s'")
    us, reason = parse_go_duration(value)
    if us is None:
        raise DurationError(f"{value[:40]!r} {reason}")
    if us < 0:
        raise DurationError(f"{value!r} is negative; a duration here is at least 0")
    return us


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
