"""Whole-number flag values (``type=`` of an argparse option): log positions and counts of events.

Only ASCII digits are taken (no sign, no spaces, no other scripts' digits), so ``-5`` and ``+5`` are refused like
``abc``; a refusal is argparse's usage error, naming the flag and the value.
"""

from __future__ import annotations

import argparse


def _whole(text: str, *, least: int, what: str) -> int:
    """``text`` as an int of at least ``least``, else the usage error "must be ``what``, not 'text'"."""
    if not (text.isascii() and text.isdigit()) or int(text) < least:
        raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
    return int(text)


def log_position(text: str) -> int:
    """A position in the event log: 1 or more."""
    return _whole(text, least=1, what="a log position ≥ 1")


def event_count(text: str) -> int:
    """A number of events: 0 or more."""
    return _whole(text, least=0, what="a number of events ≥ 0")


def positive(text: str) -> int:
    """A whole number ≥ 1 (a last position, a segment's size)."""
    return _whole(text, least=1, what="a positive whole number")
