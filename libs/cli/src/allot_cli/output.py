"""What ``allot get`` and ``allot describe`` print, for every kind: output formats, label selectors, human units.

Responsibility
--------------
- :class:`Kind`: a kind the log's projections hold (pods, nodes, gangs, quotas, reservations, migrations, devices,
  nodemetrics, and the Kubernetes Events the binder writes), with the words that name it, whether it is namespaced and its table columns. Each kind's rows come
  from a loader named as ``module:function`` and imported only when that kind is asked for, so ``allot get pods``
  imports no scheduling engine.
- :func:`render`: rows as ``table`` / ``wide`` / ``json`` / ``yaml`` / ``name``, as kubectl prints them; a
  ``table`` fits 80 columns (or the terminal's width): long cells and notes are cut with ``…``, never wrapped, and
  ``wide`` shows them whole.
- :func:`parse_selector` / :meth:`Selector.matches`: kubectl's label selector syntax (``a=b,c!=d,e in (x,y),f,!g``).
- table cells in human units (:mod:`allot_views.units`): ``16Gi``, ``500m``, ``unlimited``.

Invariants: every row is a dict of JSON builtins with ``name`` and ``labels`` (and ``namespace`` for a namespaced
kind); ``json`` and ``yaml`` print each row as its Kubernetes object with the exact recorded values
(:mod:`allot_views.objects`), only tables use human units (:func:`allot_views.units.human`).
Pure: no IO but the text returned.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from allot_intake.errors import InputError
from allot_views.units import human

__all__ = [
    "FORMATS",
    "KINDS",
    "Kind",
    "Selector",
    "kind_named",
    "missing",
    "parse_selector",
    "render",
    "select",
    "table_lines",
]

FORMATS = ("table", "wide", "json", "yaml", "name")

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Kind:
    """A kind ``allot get`` lists. ``loader`` is ``module:function``: ``async (store, now_us) -> rows``."""

    plural: str
    singular: str
    aliases: tuple[str, ...]
    namespaced: bool
    columns: tuple[str, ...]
    loader: str
    wide: tuple[str, ...] = ()
    note: str = ""  # a row field printed under the table (why a pod waits), when not empty
    # fields that count time ("5s ago"): a watch does not print a row for them alone
    ages: tuple[str, ...] = ()
    # (column, resource): quantities a table shows in human units
    units: tuple[tuple[str, str], ...] = ()

    @property
    def words(self) -> tuple[str, ...]:
        return (self.plural, self.singular, *self.aliases)

    def load(self) -> Callable[..., Awaitable[Rows]]:
        module, _, function = self.loader.partition(":")
        loaded: Callable[..., Awaitable[Rows]] = getattr(importlib.import_module(module), function)
        return loaded


_GET = "allot_cli.commands.get"
_LISTS = "allot_stack.listing"
KINDS: tuple[Kind, ...] = (
    Kind(
        "pods",
        "pod",
        ("po",),
        True,
        ("name", "phase", "node", "devices", "quota"),
        f"{_GET}:pod_records",
        wide=("cpuset", "qos", "enforcement", "enforced"),
        note="message",
    ),
    Kind(
        "nodes",
        "node",
        ("no",),
        False,
        ("name", "cpu", "memory", "devices", "pods", "usage", "batch", "mid", "heartbeat"),
        f"{_GET}:node_records",
        wide=("labels",),
        ages=("usage", "heartbeat"),
        units=(("cpu", "cpu"), ("memory", "memory")),
    ),
    Kind(
        "gangs",
        "gang",
        ("podgroups", "podgroup", "pg"),
        True,
        ("name", "phase", "present", "bound", "mode", "policy", "attempts"),
        f"{_LISTS}:gang_records",
        note="explain",
    ),
    Kind(
        "quotas",
        "quota",
        ("elasticquotas", "elasticquota", "eq"),
        True,
        ("name", "parent", "pods", "min", "max", "used"),
        f"{_LISTS}:quota_records",
        wide=("runtime", "request"),
    ),
    Kind(
        "reservations",
        "reservation",
        ("resv",),
        False,
        ("name", "phase", "node", "allocated", "expires"),
        f"{_LISTS}:reservation_records",
        wide=("policy", "allocatable", "owners", "job"),
        note="message",
    ),
    Kind(
        "migrations",
        "migration",
        ("podmigrationjobs", "podmigrationjob", "pmj"),
        False,
        ("name", "phase", "pod", "from", "to", "reason"),
        f"{_LISTS}:migration_records",
        wide=("mode", "reservation", "status"),
        note="message",
    ),
    Kind(
        "devices",
        "device",
        ("dev",),
        False,
        ("name", "devices", "healthy", "allocated"),
        f"{_LISTS}:device_records",
        wide=("models", "memory"),
    ),
    Kind(
        "events",
        "event",
        ("ev",),
        True,
        ("lastSeen", "type", "reason", "object", "message"),
        f"{_LISTS}:event_records",
        wide=("name", "action"),
        ages=("lastSeen",),
    ),
    Kind(
        "nodemetrics",
        "nodemetric",
        ("nm",),
        False,
        ("name", "cpu", "memory", "updated"),
        f"{_LISTS}:nodemetric_records",
        wide=("pods",),
        ages=("updated",),
    ),
)


def kind_named(word: str) -> Kind:
    for kind in KINDS:
        if word in kind.words:
            return kind
    known = ", ".join(k.plural for k in KINDS)
    raise InputError(f'the server doesn\'t have a resource type "{word}" (known: {known})')


def all_words() -> list[str]:
    return [w for kind in KINDS for w in dict.fromkeys(kind.words)]


# --- label selectors ------------------------------------------------------------------------------------------------

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_SET = re.compile(r"^\s*(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ = re.compile(r"^\s*(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s=!(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=()]+)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        match self.op:
            case "in":
                return self.key in labels and labels[self.key] in self.values
            case "notin":
                return self.key not in labels or labels[self.key] not in self.values
            case "exists":
                return self.key in labels
            case _:
                return self.key not in labels


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: dict[str, str] | None) -> bool:
        return all(r.matches(labels or {}) for r in self.requirements)


def _split(text: str) -> list[str]:
    """Requirements are separated by commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise InputError(f"label selector {text!r}: unbalanced parentheses")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise InputError(f"label selector {text!r}: unbalanced parentheses")
    return [*parts, current]


def _key(text: str, key: str) -> str:
    if not _KEY.match(key):
        raise InputError(
            f"label selector {text!r}: {key!r} is not a valid label key (an optional DNS prefix and '/', then up to "
            "63 characters: letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
        )
    return key


def _value(text: str, value: str) -> str:
    if not _VALUE.match(value):
        raise InputError(f"label selector {text!r}: {value!r} is not a valid label value")
    return value


def parse_selector(text: str | None) -> Selector:
    """kubectl's ``-l`` syntax; an invalid selector is refused input naming the part that is wrong."""
    if text is None or not text.strip():
        return Selector()
    requirements = []
    for part in _split(text):
        if m := _SET.match(part):
            values = [v.strip() for v in m["values"].split(",")]
            if values == [""]:
                raise InputError(f"label selector {text!r}: {part.strip()!r} needs at least one value")
            requirements.append(
                Requirement(_key(text, m["key"]), m["op"], frozenset(_value(text, v) for v in values))
            )
        elif m := _EQ.match(part):
            op = "notin" if m["op"] == "!=" else "in"
            requirements.append(Requirement(_key(text, m["key"]), op, frozenset({_value(text, m["value"])})))
        elif m := _EXISTS.match(part):
            requirements.append(Requirement(_key(text, m["key"]), "!" if m["neg"] else "exists"))
        else:
            raise InputError(
                f"label selector {text!r}: cannot read {part.strip()!r} (expected key=value, key!=value, "
                "key in (a,b), key notin (a,b), key or !key)"
            )
    return Selector(tuple(requirements))


def select(
    kind: Kind,
    rows: list[dict[str, Any]],
    *,
    namespace: str | None,
    selector: Selector,
    names: list[str],
) -> list[dict[str, Any]]:
    """The rows of ``namespace`` (all when None) that the selector matches and, when names are given, have one of
    them (``NAME``, or ``NS/NAME`` for a namespaced kind)."""
    out = []
    for row in rows:
        if kind.namespaced and namespace is not None and row.get("namespace") != namespace:
            continue
        if not selector.matches(row.get("labels")):
            continue
        if names and not ({row["name"], f"{row.get('namespace')}/{row['name']}"} & set(names)):
            continue
        out.append(row)
    return out


def missing(kind: Kind, rows: list[dict[str, Any]], names: list[str]) -> list[str]:
    found = {r["name"] for r in rows} | {f"{r.get('namespace')}/{r['name']}" for r in rows}
    return [n for n in names if n not in found]


# --- formats -------------------------------------------------------------------------------------------------------


def columns_of(kind: Kind, output: str, *, namespaces: bool) -> list[str]:
    columns = list(kind.columns) + (list(kind.wide) if output == "wide" else [])
    return (["namespace"] if namespaces and kind.namespaced else []) + columns


def _cell(row: dict[str, Any], column: str, units: dict[str, str] | None = None) -> str:
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
