"""Field errors: why a manifest or a configuration was refused.

Responsibility: one small value type, ``FieldError``, naming the offending field by its path in the manifest
(``metadata.annotations["gang.scheduling.koordinator.sh/min-available"]``) and the reason in words, plus
``ConfigError`` for a configuration that cannot be loaded.

Invariants: a ``FieldError`` is a frozen msgspec Struct of strings only, so it serialises to JSON and compares equal
on replay. Validation never raises for bad user input; it returns a list of ``FieldError`` (empty means valid).
``ConfigError`` is the one exception in this library: a configuration is loaded by a shell at start-up, and refusing
to start is the right outcome there.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["ConfigError", "FieldError"]


class FieldError(msgspec.Struct, frozen=True, kw_only=True):
    """One refused field: ``path`` in the manifest, ``reason`` in words, ``value`` as given (as text)."""

    path: str
    reason: str
    value: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason, "value": self.value}

    def __str__(self) -> str:
        shown = f" (got {self.value!r})" if self.value else ""
        return f"{self.path}: {self.reason}{shown}"


class ConfigError(ValueError):
    """A ``GangConfig`` dictionary that cannot be loaded; ``errors`` lists every problem."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))
