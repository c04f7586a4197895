"""Why a gang input or configuration was refused.

Validation returns ``list[FieldIssue]`` (:mod:`allot_contracts.issues`; empty means valid) naming the offending field
by its path in the manifest (``metadata.annotations["gang.scheduling.koordinator.sh/min-available"]``); it never
raises for bad user input. ``ConfigError`` is the one exception in this library: a configuration is loaded by a
shell at start-up, and refusing to start is the right outcome there.
"""

from __future__ import annotations

from allot_contracts.errors import InvalidConfig
from allot_contracts.issues import FieldIssue

__all__ = ["ConfigError", "FieldIssue"]


class ConfigError(InvalidConfig):
    """A ``GangConfig`` dictionary that cannot be loaded; ``errors`` (``issues``) lists every problem."""

    def __init__(self, errors: list[FieldIssue]) -> None:
        super().__init__(errors)
        self.errors = errors
