"""Validation errors of the quota engine.

``FieldError`` follows Kubernetes ``field.Error``: the path of the offending field, an error type, the offending
value when there is one, and a message (the upstream webhook's wording where users already know it). Validators
return ``list[FieldError]``; an empty list means valid. Nothing here raises except :class:`PodError`, which wraps
the field errors of a pod manifest the engine cannot read (unparseable quantities).

    FieldError          value object, JSON-ready through ``to_dict()``
    PodError(ValueError) carries ``errors: list[FieldError]``
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["ErrorType", "FieldError", "PodError"]

ErrorType = Literal["Invalid", "Required", "Forbidden", "NotFound", "Duplicate", "NotSupported"]


class FieldError(msgspec.Struct, frozen=True, kw_only=True):
    """One problem with one field: ``metadata.labels[quota.scheduling.koordinator.sh/parent]``, ``spec.min[cpu]``."""

    field: str
    type: ErrorType
    message: str
    value: str | None = None

    def __str__(self) -> str:
        return f"{self.field}: {self.type}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class PodError(ValueError):
    """A pod manifest the engine cannot account for (for example an unparseable resource quantity)."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors
