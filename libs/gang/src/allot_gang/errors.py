"""Why a gang input or configuration was refused.

Validation returns ``list[FieldIssue]`` (:mod:`allot_contracts.issues`; empty means valid) naming the offending field
by its path in the manifest (``metadata.annotations["gang.scheduling.koordinator.sh/min-available"]``); it never
raises for bad user input. ``ConfigError`` is the one exception in this library: a configuration is loaded by a
shell at start-up, and refusing to start is the right outcome there.
"""

from __future__ import annotations

from allot_contracts.issues import FieldIssue

__all__ = ["ConfigError", "FieldIssue"]


class ConfigError(ValueError):
    """A ``GangConfig`` dictionary that cannot be loaded; ``errors`` lists every problem."""

    def __init__(self, errors: list[FieldIssue]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))
