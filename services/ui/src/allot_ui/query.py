"""The query parameters each page of the web view takes, and how each is checked (docs/ui.md, docs/limits.md): a
parameter a page does not take, one given twice, or a value out of its range is refused (400) with
``query.<name>: <reason>``; an empty value means "no filter"."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from multidict import MultiMapping

from allot_ui import usage
from allot_ui.pages import PHASES

__all__ = ["PARAMETERS", "QueryError", "checked"]

Check = Callable[[str], str]  # the value as given, or ValueError with the reason

MAX_POSITION: Final = 2**63 - 1  # a log position (PostgreSQL bigint)
POSITION_DIGITS: Final = len(str(MAX_POSITION))  # 19
MAX_LIMIT: Final = 10_000


class QueryError(ValueError):
    """One query parameter refused: ``query.<name>: <reason>``."""


def _digits(value: str, most: int) -> bool:
    """Whether ``value`` is a whole number written with at most ``most`` ASCII digits (checked before it is read as
    one: Python refuses to read an integer of more than 4,300 digits with a message of its own)."""
    return value.isascii() and value.isdigit() and len(value) <= most


def _position(value: str) -> str:
    if not value:
        return value  # as when absent: from the start of the log
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"must be a non-negative integer (got {value[:40]!r})")
    if not _digits(value, POSITION_DIGITS) or int(value) > MAX_POSITION:
        raise ValueError(f"must be a log position, at most {MAX_POSITION} (got {len(value)} digits)")
    return value


def _limit(value: str) -> str:
    if value and not (_digits(value, 5) and 1 <= int(value) <= MAX_LIMIT):
        raise ValueError(f"must be an integer from 1 to {MAX_LIMIT} (got {value[:40]!r})")
    return value


def _phase(value: str) -> str:
    if value not in PHASES:
        raise ValueError(f"must be one of {', '.join(p for p in PHASES if p)} or empty (got {value[:40]!r})")
    return value


def _text(most: int) -> Check:
    def check(value: str) -> str:
        if len(value) > most:
            raise ValueError(f"at most {most} characters (got {len(value)})")
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("must not contain control characters")
        return value

    return check


# The pages that take parameters (by route); every other page takes none.
PARAMETERS: Final[Mapping[str, Mapping[str, Check]]] = {
    "/pods": {"phase": _phase, "namespace": _text(253), "node": _text(253), "q": _text(256), "limit": _limit},
    "/gpus": {"node": _text(253)},
    "/api/stream": {"after": _position},
    "/usage": {
        "by": usage.check_by,
        "since": usage.check_since,
        "until": usage.check_until,
        "metric": usage.check_metric,
    },
}


def checked(route: str, query: MultiMapping[str]) -> dict[str, str]:
    """The query of a request to ``route``, each parameter checked: :class:`QueryError` for the first refused."""
    accepted = PARAMETERS.get(route, {})
    found: dict[str, str] = {}
    for name in query:
        if name in found:
            continue
        if name not in accepted:
            taken = f"accepted: {', '.join(accepted)}" if accepted else "this page takes none"
            raise QueryError(f"query.{name[:40]}: unknown parameter ({taken})")
        values = query.getall(name)
        if len(values) > 1:
            raise QueryError(f"query.{name}: given {len(values)} times; at most once")
        try:
            found[name] = accepted[name](values[0])
        except ValueError as exc:
            raise QueryError(f"query.{name}: {exc}") from None
    return found
