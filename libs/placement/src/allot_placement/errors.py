"""Structured validation errors: a field path and a message, like Kubernetes ``field.Error``.

Every input the engine reads (manifests, annotation JSON, config) is validated into a list of ``FieldError``; the
engine never raises on bad user input. ``path`` uses Kubernetes notation, e.g.
``metadata.annotations["scheduling.koordinator.sh/device-allocate-hint"].gpu.requiredTopologyScope``.
"""

from __future__ import annotations

import msgspec

__all__ = ["FieldError", "annotation_path", "format_errors"]


class FieldError(msgspec.Struct, frozen=True, kw_only=True):
    """One invalid field: where (``path``), why (``message``) and a stable ``code`` for machines."""

    path: str
    message: str
    code: str = "InvalidField"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message, "code": self.code}


def annotation_path(key: str, suffix: str = "") -> str:
    """The field path of an annotation value, optionally followed by a JSON path inside it."""
    return f'metadata.annotations["{key}"]{suffix}'


def format_errors(errors: list[FieldError]) -> str:
    """One line listing every error, in the order given."""
    return "; ".join(str(e) for e in errors)
