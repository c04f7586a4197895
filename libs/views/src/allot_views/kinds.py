"""The kinds ``allot get`` and ``allot describe`` know, and how rows of them are chosen: kubectl's label selectors.

Responsibility
--------------
- :class:`Kind`: a kind the log's projections hold (pods, nodes, gangs, quotas, reservations, migrations, devices,
  nodemetrics, and the Kubernetes Events the binder writes), with the words that name it, whether it is namespaced,
  its table columns, and its loader in :mod:`allot_stack.listing` (imported only when that kind is asked for, so
  ``allot get pods`` imports no scheduling engine).
- :func:`parse_selector` / :meth:`Selector.matches`: kubectl's label selector syntax (``a=b,c!=d,e in (x,y),f,!g``).
- :func:`select` / :func:`missing`: the rows of a namespace that a selector and names choose, and the names not found.

Invariants: every row is a dict of JSON builtins with ``name`` and ``labels`` (and ``namespace`` for a namespaced
kind). Pure: no IO.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from allot_contracts.clipping import clipped
from allot_intake.errors import InputError

__all__ = [
    "KINDS",
    "KUBE_KINDS",
    "Kind",
    "Requirement",
    "Selector",
    "all_words",
    "kind_named",
    "missing",
    "parse_selector",
    "select",
]

Rows = list[dict[str, Any]]
RowT = TypeVar("RowT", bound=Mapping[str, object])


@dataclass(frozen=True)
class Kind:
    """A kind ``allot get`` lists. ``loader`` names its loader in :mod:`allot_stack.listing`: ``async (store, now_us)
    -> rows``."""

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


KINDS: tuple[Kind, ...] = (
    Kind(
        "pods",
        "pod",
        ("po",),
        True,
        ("name", "phase", "node", "devices", "quota"),
        "pod_records",
        wide=("cpuset", "qos", "enforcement", "enforced"),
        note="message",
    ),
    Kind(
        "nodes",
        "node",
        ("no",),
        False,
        ("name", "cpu", "memory", "devices", "pods", "usage", "batch", "mid", "heartbeat"),
        "node_records",
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
        "gang_records",
        note="explain",
    ),
    Kind(
        "quotas",
        "quota",
        ("elasticquotas", "elasticquota", "eq"),
        True,
        ("name", "parent", "pods", "min", "max", "used"),
        "quota_records",
        wide=("runtime", "request"),
    ),
    Kind(
        "reservations",
        "reservation",
        ("resv",),
        False,
        ("name", "phase", "node", "allocated", "expires"),
        "reservation_records",
        wide=("policy", "allocatable", "owners", "job"),
        note="message",
    ),
    Kind(
        "migrations",
        "migration",
        ("podmigrationjobs", "podmigrationjob", "pmj"),
        False,
        ("name", "phase", "pod", "from", "to", "reason"),
        "migration_records",
        wide=("mode", "reservation", "status"),
        note="message",
    ),
    Kind(
        "devices",
        "device",
        ("dev",),
        False,
        ("name", "devices", "healthy", "allocated"),
        "device_records",
        wide=("models", "memory"),
    ),
    Kind(
        "events",
        "event",
        ("ev",),
        True,
        ("lastSeen", "type", "reason", "object", "message"),
        "event_records",
        wide=("name", "action"),
        ages=("lastSeen",),
    ),
    Kind(
        "nodemetrics",
        "nodemetric",
        ("nm",),
        False,
        ("name", "cpu", "memory", "updated"),
        "nodemetric_records",
        wide=("pods",),
        ages=("updated",),
    ),
)


# the Kubernetes kind of each kind
KUBE_KINDS = {
    "pods": "Pod",
    "nodes": "Node",
    "gangs": "PodGroup",
    "quotas": "ElasticQuota",
    "reservations": "Reservation",
    "migrations": "PodMigrationJob",
    "devices": "Device",
    "nodemetrics": "NodeMetric",
    "events": "Event",
}


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
            raise InputError(f"label selector {clipped(text)}: unbalanced parentheses")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise InputError(f"label selector {clipped(text)}: unbalanced parentheses")
    return [*parts, current]


def _key(text: str, key: str) -> str:
    if not _KEY.match(key):
        raise InputError(
            f"label selector {clipped(text)}: {clipped(key)} is not a valid label key (an optional DNS prefix and '/', then up to "
            "63 characters: letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
        )
    return key


def _value(text: str, value: str) -> str:
    if not _VALUE.match(value):
        raise InputError(f"label selector {clipped(text)}: {clipped(value)} is not a valid label value")
    return value


def parse_selector(text: str | None) -> Selector:
    """kubectl's ``-l`` syntax; an invalid selector is refused input naming the part that is wrong."""
    if text is None or not text.strip():
        return Selector()
    requirements = []
    for part in _split(text):
        if m := _SET.match(part):
            # "()" is the one value "" and "(b,,c)" holds it too, as Kubernetes' selector parser reads them
            values = [v.strip() for v in m["values"].split(",")]
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
                f"label selector {clipped(text)}: cannot read {clipped(part.strip())} (expected key=value, key!=value, "
                "key in (a,b), key notin (a,b), key or !key)"
            )
    return Selector(tuple(requirements))


def select(
    kind: Kind,
    rows: list[RowT],
    *,
    namespace: str | None,
    selector: Selector,
    names: list[str],
) -> list[RowT]:
    """The rows of ``namespace`` (all when None) that the selector matches and, when names are given, have one of
    them (``NAME``, or ``NS/NAME`` for a namespaced kind)."""
    out = []
    for row in rows:
        if kind.namespaced and namespace is not None and row.get("namespace") != namespace:
            continue
        labels = row.get("labels")
        if not selector.matches(labels if isinstance(labels, dict) else None):
            continue
        if names and not ({row["name"], f"{row.get('namespace')}/{row['name']}"} & set(names)):
            continue
        out.append(row)
    return out


def missing(kind: Kind, rows: Sequence[Mapping[str, object]], names: list[str]) -> list[str]:
    found = {r["name"] for r in rows} | {f"{r.get('namespace')}/{r['name']}" for r in rows}
    return [n for n in names if n not in found]
