"""What ``allot get`` and ``allot describe`` print, for every kind: output formats and human units.

Responsibility
--------------
- :func:`render`: rows of a :class:`allot_views.kinds.Kind` as ``table`` / ``wide`` / ``json`` / ``yaml`` /
  ``name``, as kubectl prints them; a ``table`` fits 80 columns (or the terminal's width): long cells and notes are
  cut with ``…``, never wrapped, and ``wide`` shows them whole.
- table cells in human units (:mod:`allot_views.units`): ``16Gi``, ``500m``, ``unlimited``.

The kinds, their loaders and label selectors are :mod:`allot_views.kinds`. Invariants: ``json`` and ``yaml`` print
each row as its Kubernetes object with the exact recorded values (:mod:`allot_views.objects`), only tables use human
units (:func:`allot_views.units.human`). Pure: no IO but the text returned.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from allot_views.kinds import Kind
from allot_views.units import human

__all__ = ["FORMATS", "columns_of", "elide", "limit_for", "render", "table_lines"]

Rows = list[dict[str, Any]]

FORMATS = ("table", "wide", "json", "yaml", "name")


def columns_of(kind: Kind, output: str, *, namespaces: bool) -> list[str]:
    columns = list(kind.columns) + (list(kind.wide) if output == "wide" else [])
    return (["namespace"] if namespaces and kind.namespaced else []) + columns


def _cell(row: Mapping[str, object], column: str, units: dict[str, str] | None = None) -> str:
    value = row.get(column, "")
    if units and column in units and isinstance(value, str | int) and value not in ("", "-"):
        return human(units[column], value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items())) or "<none>"
    if value is None or value == "":
        return "-"
    return str(value)


def _header(column: str) -> str:
    """``lastSeen`` → ``LAST SEEN``."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", column).upper()


WIDTH = 80  # what a default table fits in (a wider terminal gets its width)
_KEEP = ("namespace", "name", "lastSeen")  # shortened last: what names a row
_SHORT = 14  # a column no wider is shortened only when the wide ones are not enough


def elide(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in ``…`` when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def fit(widths: dict[str, int], columns: list[str], limit: int) -> dict[str, int]:
    """Column widths that fit a line of ``limit`` characters (two spaces between columns). The widest columns are
    narrowed first (free text: messages, quantity lists, quota names); short ones (phases, node names, ages) only
    when that is not enough, and those that name a row (namespace, name) last."""
    fitted = {c: widths[c] for c in columns}
    floor = {c: max(len(_header(c)), 5) for c in columns}
    excess = sum(fitted.values()) + 2 * (len(columns) - 1) - limit
    for stage in range(3):
        while excess > 0:
            narrowable = [
                c
                for c in columns
                if fitted[c] > floor[c]
                and (stage == 2 or c not in _KEEP)
                and (stage > 0 or widths[c] > _SHORT)
            ]
            if not narrowable:
                break
            widest = max(narrowable, key=lambda c: fitted[c])
            fitted[widest] -= 1
            excess -= 1
    return fitted


def table_lines(
    rows: Rows,
    columns: list[str],
    widths: dict[str, int] | None = None,
    units: dict[str, str] | None = None,
    limit: int | None = None,
) -> list[str]:
    """A header and one line per row; ``widths`` (updated) keeps the columns of a watch aligned; ``units`` maps a
    column to the resource whose quantities it holds (shown in human units); ``limit``: lines fit that many
    characters, cells too long for their column cut with ``…`` (never wrapped)."""
    widths = widths if widths is not None else {}
    for column in columns:
        widths[column] = max(
            widths.get(column, 0), len(_header(column)), *(len(_cell(r, column, units)) for r in rows)
        )
    shown = fit(widths, columns, limit) if limit else widths

    def line(cells: list[str]) -> str:
        return "  ".join(
            elide(v, shown[c]).ljust(shown[c]) for c, v in zip(columns, cells, strict=True)
        ).rstrip()

    return [line([_header(c) for c in columns])] + [line([_cell(r, c, units) for c in columns]) for r in rows]


def limit_for(output: str) -> int | None:
    """How wide a ``table`` may be: 80 characters, or the terminal's width when wider; ``wide`` is not limited."""
    if output != "table":
        return None
    import shutil
    import sys

    if sys.stdout.isatty():
        return max(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
    return WIDTH


def render(kind: Kind, rows: Rows, output: str, *, namespaces: bool = True, single: bool = False) -> str:
    """The text ``allot get`` prints (without the final newline). ``json``/``yaml`` print the rows as Kubernetes
    objects (:mod:`allot_views.objects`) in a ``List``, or, with ``single`` (one object was asked for by name), that
    object alone."""
    if output == "name":
        return "\n".join(f"{kind.singular}/{row['name']}" for row in rows)
    if output in ("json", "yaml"):
        from allot_views.objects import as_list, to_object

        objects = [to_object(kind.plural, row, namespaced=kind.namespaced) for row in rows]
        data: Any = objects[0] if single and len(objects) == 1 else as_list(objects)
        if output == "json":
            return json.dumps(data, indent=2, default=str)
        import yaml

        return yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False).rstrip("\n")
    limit = limit_for(output)
    lines = table_lines(
        rows, columns_of(kind, output, namespaces=namespaces), units=dict(kind.units), limit=limit
    )
    if kind.note:
        notes = [
            f"  {row['name']}: {' '.join(str(row[kind.note]).split())}" for row in rows if row.get(kind.note)
        ]
        lines += [elide(n, limit) for n in notes] if limit else notes
    return "\n".join(lines)
