"""Numeric flag values (``type=`` of an argparse option), for the CLI and every process's own command line.

Each takes the text as typed and returns the number, or refuses it with argparse's usage error naming the flag, the
value and what it must be ("argument --port: must be a port from 1 to 65535, not '99999'"): a bad value never
reaches the code as a negative count, an empty benchmark or a socket error. Whole numbers take ASCII digits only (no
sign, no spaces, no other scripts' digits), so ``-5`` and ``+5`` are refused like ``abc``. Numbers of seconds and
factors take a decimal number, finite and above zero. A string default is converted (and checked) the same way.
"""

from __future__ import annotations

import argparse
import math


def _whole(text: str, *, least: int, most: int | None = None, what: str) -> int:
    """``text`` as an int from ``least`` to ``most``, else the usage error "must be ``what``, not 'text'"."""
    if (
        not (text.isascii() and text.isdigit())
        or int(text) < least
        or (most is not None and int(text) > most)
    ):
        raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
    return int(text)


def log_position(text: str) -> int:
    """A position in the event log: 1 or more."""
    return _whole(text, least=1, what="a log position ≥ 1")


def after_position(text: str) -> int:
    """A position to read after: 0 (the start of the log) or more."""
    return _whole(text, least=0, what="a log position ≥ 0")


def event_count(text: str) -> int:
    """A number of events: 0 or more."""
    return _whole(text, least=0, what="a number of events ≥ 0")


def positive(text: str) -> int:
    """A whole number ≥ 1 (a count of runs, pods or processes, a last position, a segment's size)."""
    return _whole(text, least=1, what="a positive whole number")


def whole_number(text: str) -> int:
    """A whole number ≥ 0 (a seed; a limit where 0 means none)."""
    return _whole(text, least=0, what="a whole number ≥ 0")


def percent(text: str) -> int:
    """A whole percentage from 1 to 100."""
    return _whole(text, least=1, most=100, what="a whole percentage from 1 to 100")


def port(text: str) -> int:
    """A TCP port to listen on: 1 to 65535."""
    return _whole(text, least=1, most=65535, what="a port from 1 to 65535")


def _above_zero(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
    return value


def seconds(text: str) -> float:
    """A number of seconds above zero (a timeout, an interval, a duration)."""
    return _above_zero(text, "a number of seconds above 0")


def factor(text: str) -> float:
    """A multiple above zero (``1.3``: 130 %)."""
    return _above_zero(text, "a number above 0")
