"""The HTML pieces every page of the web audit view is built from; every value shown is escaped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any
from urllib.parse import quote


def e(value: Any) -> str:
    return escape(str(value), quote=True)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, raw: Iterable[int] = ()) -> str:
    """An HTML table; cells are escaped except the columns listed in ``raw`` (already HTML)."""
    unescaped = set(raw)
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    out = []
    for row in rows:
        cells = "".join(f"<td>{v if i in unescaped else e(v)}</td>" for i, v in enumerate(row))
        out.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(out)}</tbody></table>"


def pod_link(key: str) -> str:
    return f'<a href="/pods/{quote(key)}">{e(key)}</a>'


def tiles(items: Iterable[tuple[str, Any]]) -> str:
    return (
        "<div class=tiles>"
        + "".join(f"<div class=tile><b>{e(v)}</b>{e(k)}</div>" for k, v in items)
        + "</div>"
    )
