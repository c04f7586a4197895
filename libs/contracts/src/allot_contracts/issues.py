"""Why an input was refused: one value type for every validator in Allot.

``FieldIssue`` names the offending field by its path in the manifest, in Kubernetes notation
(``spec.containers[0].resources.requests[cpu]``, ``metadata.annotations["scheduling.koordinator.sh/device-allocate-hint"]
.gpu.requiredTopologyScope``), says why in words (upstream's wording where users already know it), carries a stable
``code`` for machines (``InvalidField``, ``InvalidQuantity``, ``Required``, ``Forbidden``, ``NotSupported``, …) and,
when useful, the offending ``value`` as text. Validators return ``list[FieldIssue]`` (empty = valid) and never raise
on bad user input; the same issues travel in rejection events, in ``allot apply``'s output and in ``explain``.

Issues are also used for warnings (something read but not acted on): the same shape, reported instead of refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from allot_contracts.jsonvalue import JsonObject, JsonValue

__all__ = [
    "FieldIssue",
    "annotation_path",
    "checked_bool",
    "checked_int",
    "checked_list",
    "checked_object",
    "checked_objects",
    "checked_text",
    "format_issues",
    "invalid_annotation",
    "not_acted_on",
    "label_path",
    "not_supported",
    "optional_object",
]


class FieldIssue(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One problem with one field: where (``path``), why (``message``), a stable ``code`` and the ``value`` given."""

    path: str
    message: str
    code: str = "InvalidField"
    value: str = ""

    def __str__(self) -> str:
        shown = f" (got {self.value!r})" if self.value else ""
        return f"{self.path}: {self.message}{shown}" if self.path else f"{self.message}{shown}"

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {"path": self.path, "message": self.message, "code": self.code}
        if self.value:
            out["value"] = self.value
        return out


def annotation_path(key: str, suffix: str = "") -> str:
    """The field path of an annotation value, optionally followed by a JSON path inside it."""
    return f'metadata.annotations["{key}"]{suffix}'


def label_path(key: str) -> str:
    return f'metadata.labels["{key}"]'


def invalid_annotation(path: str, message: str, value: str = "") -> FieldIssue:
    """An annotation's value (or a part of it, at ``path``) is refused: ``message`` says why."""
    return FieldIssue(path=path, code="InvalidAnnotation", message=message, value=value)


def not_acted_on(path: str, message: str, value: str = "") -> FieldIssue:
    """A warning: what is at ``path`` is read but not acted on (``message`` says why or what applies instead)."""
    return FieldIssue(path=path, code="Ignored", message=message, value=value)


def not_supported(path: str, allowed: Iterable[str], value: object) -> FieldIssue:
    """``value`` at ``path`` is none of ``allowed`` (listed in the message in the order given)."""
    return FieldIssue(
        path=path, code="NotSupported", message=f"must be one of {', '.join(allowed)}", value=str(value)
    )


def format_issues(issues: Iterable[FieldIssue]) -> str:
    """One line listing every issue, in the order given."""
    return "; ".join(str(i) for i in issues)


def checked_int(
    raw: Any, path: str, issues: list[FieldIssue], *, low: int = 0, high: int | None = None
) -> int | None:
    """``raw`` when it is an integer within ``[low, high]``; otherwise None with an issue (None when absent)."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < low or (high is not None and raw > high):
        bounds = f"between {low} and {high}" if high is not None else f">= {low}"
        issues.append(FieldIssue(path=path, message=f"must be an integer {bounds}", value=str(raw)))
        return None
    return raw


def checked_text(raw: Any, path: str, issues: list[FieldIssue]) -> str | None:
    """``raw`` when it is a string; otherwise None with an issue (None when absent). A number, a list or an object
    where a string belongs is refused, not turned into its text or into the default."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        issues.append(FieldIssue(path=path, message="must be a string", value=str(raw)[:100]))
        return None
    return raw


def checked_bool(raw: Any, path: str, issues: list[FieldIssue]) -> bool | None:
    """``raw`` when it is true or false; otherwise None with an issue (None when absent)."""
    if raw is None:
        return None
    if not isinstance(raw, bool):
        issues.append(FieldIssue(path=path, message="must be true or false", value=str(raw)))
        return None
    return raw


def checked_object(
    raw: object, path: str, issues: list[FieldIssue], *, message: str = "must be an object"
) -> JsonObject:
    """``raw`` when it is an object; otherwise an empty one with an issue saying ``message`` (empty when absent)."""
    got = optional_object(raw, path, issues, message=message)
    return {} if got is None else got


def optional_object(
    raw: object, path: str, issues: list[FieldIssue], *, message: str = "must be an object"
) -> JsonObject | None:
    """``raw`` when it is an object; otherwise None, with an issue saying ``message`` unless it is absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        issues.append(FieldIssue(path=path, message=message))
        return None
    return raw


def checked_list(
    raw: object, path: str, issues: list[FieldIssue], *, message: str = "must be a list"
) -> list[JsonValue]:
    """``raw`` when it is a list; otherwise an empty one with an issue saying ``message`` (empty when absent)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        issues.append(FieldIssue(path=path, message=message))
        return []
    return raw


def checked_objects(raw: object, path: str, issues: list[FieldIssue]) -> Iterator[tuple[str, JsonObject]]:
    """The entries of the list at ``path`` that are objects, with their paths (any other entry is an issue)."""
    for i, entry in enumerate(checked_list(raw, path, issues)):
        if isinstance(entry, dict):
            yield f"{path}[{i}]", entry
        else:
            issues.append(FieldIssue(path=f"{path}[{i}]", message="must be an object"))
