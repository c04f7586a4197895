"""``allot replay --verify --enactment-bound``: how old a Kubernetes-mode decision may be with no recorded outcome
before the report names it (read by the command line without loading the ledger)."""

from __future__ import annotations

import argparse
import math

DEFAULT_BOUND = 300.0  # seconds


def bound_seconds(text: str) -> float:
    """``--enactment-bound``: a number of seconds ≥ 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds ≥ 0, not {text!r}")
    return value
