"""Reading a configuration's fields with their paths: every helper appends a :class:`FieldIssue` for a bad value
and returns the default, so one pass reports every problem. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allot_contracts.issues import FieldIssue, checked_bool, checked_object
from allot_contracts.objects.selectors import LabelSelector, parse_label_selector
from allot_contracts.objects.times import checked_duration_us

__all__ = [
    "boolean",
    "duration",
    "integer",
    "namespaces",
    "one_of",
    "selector",
    "strings",
    "unknown",
]


def unknown(raw: Mapping[str, object], allowed: frozenset[str], path: str, issues: list[FieldIssue]) -> None:
    for key in sorted(set(raw) - allowed, key=str):
        issues.append(
            FieldIssue(
                path=f"{path}{key}",
                code="FieldValueNotSupported",
                message=f"unknown field; supported: {', '.join(sorted(allowed))}",
            )
        )


def one_of(
    value: object, allowed: tuple[object, ...], path: str, issues: list[FieldIssue], message: str
) -> bool:
    """Whether ``value`` is one of ``allowed``; when not, a ``NotSupported`` issue at ``path`` says ``message``."""
    if value in allowed:
        return True
    issues.append(FieldIssue(path=path, code="NotSupported", message=message, value=str(value)))
    return False


def boolean(raw: Any, path: str, issues: list[FieldIssue], default: bool) -> bool:
    value = checked_bool(raw, path, issues)
    return default if value is None else value


def integer(raw: Any, path: str, issues: list[FieldIssue], default: int, minimum: int) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        issues.append(FieldIssue(path=path, message=f"must be an integer ≥ {minimum}", value=str(raw)))
        return default
    return raw


def duration(raw: Any, path: str, issues: list[FieldIssue], default: int) -> int:
    value = checked_duration_us(raw, path, issues)
    return default if value is None else value


def selector(raw: Any, path: str, issues: list[FieldIssue]) -> LabelSelector | None:
    return None if raw is None else parse_label_selector(raw, path, issues)


def strings(raw: Any, path: str, issues: list[FieldIssue]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        issues.append(FieldIssue(path=path, message="must be a list of names"))
        return ()
    return tuple(raw)


def namespaces(raw: Any, path: str, issues: list[FieldIssue]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``evictableNamespaces`` at ``path``: ``(include, exclude)``, which are mutually exclusive."""
    data = checked_object(raw, path, issues)
    unknown(data, frozenset({"include", "exclude"}), f"{path}.", issues)
    include = strings(data.get("include"), f"{path}.include", issues)
    exclude = strings(data.get("exclude"), f"{path}.exclude", issues)
    if include and exclude:
        issues.append(FieldIssue(path=path, message="include and exclude are mutually exclusive"))
    return include, exclude
