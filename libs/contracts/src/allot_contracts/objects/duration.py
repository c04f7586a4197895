"""Go duration text (``"600s"``, ``"1h30m"``, ``"1.5h"``) parsed exactly into microseconds.

Responsibility: the ``gang.scheduling.koordinator.sh/waiting-time`` annotation is a Go ``time.Duration`` string;
this module accepts exactly what Go's ``time.ParseDuration`` accepts and turns it into whole microseconds.

Invariants:
- Grammar: an optional sign, then one or more ``<number><unit>`` terms, where a number is decimal digits with an
  optional fraction (``"1.5"``, ``".5"``, ``"5."``) and a unit is ``ns``, ``us``, ``µs``, ``μs``, ``ms``, ``s``,
  ``m`` or ``h``. A bare ``"0"`` is the only term without a unit. Anything else is refused.
- Arithmetic is exact (``Fraction``); the result is rounded up to a whole microsecond, so a positive duration never
  becomes zero.
- Like Go, durations beyond the int64 nanosecond range (about 292 years) are refused as out of range. This is a
  limit of the format, not a cap on the gang timeout: any representable duration is honoured.

Pure; errors are returned as a reason string, never raised.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

__all__ = ["parse_go_duration"]

_UNITS_NS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_TERM: Final = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|μs|ms|s|m|h)")
_MAX_NS: Final = 2**63 - 1


# longer than any duration Go formats, short enough that no number in it is too long to convert
_MAX_TEXT = 100


def parse_go_duration(text: str) -> tuple[int | None, str]:
    """Parse Go duration ``text``; return ``(microseconds, "")`` or ``(None, reason)``.

    The sign is kept (``"-5s"`` gives ``-5_000_000``); callers decide whether zero or negative is acceptable.
    """
    if not isinstance(text, str):
        return None, 'must be a Go duration string such as "600s" or "1h30m"'
    s = text
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0, ""
    if not s:
        return None, 'must be a Go duration such as "600s" or "1h30m" (empty)'
    if len(s) > _MAX_TEXT:
        return None, f"is out of range (a Go duration is at most {_MAX_TEXT} characters; this is {len(s)})"
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _TERM.match(s, pos)
        if m is None or (not m.group(1) and not m.group(2)):
            return None, (
                'must be a Go duration such as "600s", "10m" or "1h30m" '
                "(units ns, us, ms, s, m, h; every number needs a unit)"
            )
        whole, frac, unit = m.group(1) or "0", m.group(2) or "", m.group(3)
        number = Fraction(int(whole)) + (Fraction(int(frac), 10 ** len(frac)) if frac else 0)
        total += number * _UNITS_NS[unit]
        pos = m.end()
    if total > _MAX_NS:
        return None, "is out of range (a Go duration holds at most about 292 years)"
    micros = -((-total.numerator) // (total.denominator * 1_000))
    return sign * micros, ""
