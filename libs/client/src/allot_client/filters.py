"""Which events a subscription wants: by type, namespace, node and quota.

Responsibility: decide, from a recorded event alone, whether it matches a :class:`Filter`. Types are matched on the
event's type name (``pod.placed``), its versioned tag (``pod.placed.v2``) or its kind (``pod.*``). Namespaces, nodes
and quotas are read from the event as recorded (:func:`scope_of`), the same way for every event type, so a new event
type is covered without a table to update:

- **namespace**: the namespace of every top-level object reference in the payload (``pod``, ``quota``, ``group``,
  ``job``, ``reservation``, ``ref``, ... : an object with ``name`` and a non-empty ``namespace``), of every
  ``namespace/name`` key in a top-level ``members`` list (gang groups), and of the stream key of namespaced streams
  (``pod:<namespace>/<name>``, ``podgroup:``, ``quota:``, ``quotaprofile:``, ``colocation:``);
- **node**: a top-level ``node`` (a name, or an object with a ``name``), and the stream key of per-node streams
  (``node:``, ``device:``, ``topology:``, ``nodemetric:``, ``qos:``);
- **quota**: a top-level ``quota`` (a name, or an object reference: its name) and the name in a ``quota:<namespace>/<name>``
  stream key.

An empty criterion matches everything; the criteria are combined with "and", the values of one criterion with "or".
An event without a namespace never matches a namespace filter (cluster-scoped objects, node facts), and likewise for
nodes and quotas.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import msgspec

from allot_contracts.envelope import RecordedEvent
from allot_contracts.events import type_pattern
from allot_contracts.jsonvalue import JsonObject, JsonValue

__all__ = ["Filter", "FilterError", "Scope", "scope_of"]

NAMESPACED_STREAMS = frozenset({"pod", "podgroup", "quota", "quotaprofile", "colocation"})
NODE_STREAMS = frozenset({"node", "device", "topology", "nodemetric", "qos"})


class FilterError(ValueError):
    """A filter criterion is malformed; the message names the field (``types[1]``)."""


class Scope(msgspec.Struct, frozen=True, kw_only=True):
    """The namespaces, nodes and quotas an event is about."""

    namespaces: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    quotas: frozenset[str] = frozenset()


def _ref(value: JsonValue) -> tuple[str, str] | None:
    """(namespace, name) of an object reference in a payload; None for any other value."""
    if not isinstance(value, dict):
        return None
    namespace, name = value.get("namespace"), value.get("name")
    return (namespace, name) if isinstance(namespace, str) and isinstance(name, str) else None


def scope_of(record: RecordedEvent, payload: JsonObject | None = None) -> Scope:
    """What ``record`` is about (see the module docstring for the rules). ``payload``: its decoded JSON, if known."""
    body: JsonObject = record.payload_dict() if payload is None else payload
    namespaces: set[str] = set()
    nodes: set[str] = set()
    quotas: set[str] = set()
    for value in body.values():
        ref = _ref(value)
        if ref is not None and ref[0]:
            namespaces.add(ref[0])
    members = body.get("members")
    if isinstance(members, list):
        namespaces.update(m.split("/", 1)[0] for m in members if isinstance(m, str) and "/" in m)
    node = body.get("node")
    if isinstance(node, str) and node:
        nodes.add(node)
    elif isinstance(node, dict) and isinstance(named := node.get("name"), str):
        nodes.add(named)
    quota = body.get("quota")
    if isinstance(quota, str) and quota:
        quotas.add(quota)
    elif (ref := _ref(quota)) is not None:
        quotas.add(ref[1])
    kind, _, key = record.stream_id.partition(":")
    if kind in NAMESPACED_STREAMS and "/" in key:
        namespace, _, name = key.partition("/")
        namespaces.add(namespace)
        if kind == "quota":
            quotas.add(name)
    elif kind in NODE_STREAMS and key:
        nodes.add(key)
    return Scope(namespaces=frozenset(namespaces), nodes=frozenset(nodes), quotas=frozenset(quotas))


def _names(field: str, values: Iterable[str] | None) -> frozenset[str]:
    if values is None:
        return frozenset()
    if isinstance(values, str):
        raise FilterError(f"{field}: expected a list of names, got the string {values!r}")
    out = []
    for index, value in enumerate(values):
        if not isinstance(value, str) or not value.strip():
            raise FilterError(f"{field}[{index}]: expected a non-empty name, got {value!r}")
        out.append(value.strip())
    return frozenset(out)


class Filter:
    """Events of these ``types`` about these ``namespaces``, ``nodes`` and ``quotas`` (each optional).

    ``types`` entries are type names (``pod.placed``), versioned tags (``pod.placed.v2``) or kinds (``pod.*``).
    """

    __slots__ = ("_kinds", "_names", "_tags", "namespaces", "nodes", "quotas", "types")

    def __init__(
        self,
        *,
        types: Collection[str] | None = None,
        namespaces: Collection[str] | None = None,
        nodes: Collection[str] | None = None,
        quotas: Collection[str] | None = None,
    ) -> None:
        self.types = _names("types", types)
        self.namespaces = _names("namespaces", namespaces)
        self.nodes = _names("nodes", nodes)
        self.quotas = _names("quotas", quotas)
        kinds: set[str] = set()
        names: set[str] = set()
        tags: set[str] = set()
        for index, entry in enumerate(sorted(self.types)):
            form = type_pattern(entry)
            if form is None:
                raise FilterError(
                    f"types[{index}]: {entry!r} is not an event type (pod.placed), tag (pod.placed.v2) or kind "
                    f"(pod.*)"
                )
            {"kind": kinds, "type": names, "tag": tags}[form[0]].add(form[1])
        self._kinds, self._names, self._tags = frozenset(kinds), frozenset(names), frozenset(tags)

    def __repr__(self) -> str:
        parts = [
            f"{field}={sorted(getattr(self, field))!r}"
            for field in ("types", "namespaces", "nodes", "quotas")
            if getattr(self, field)
        ]
        return f"Filter({', '.join(parts)})"

    @property
    def scoped(self) -> bool:
        """Whether matching needs the payload (a namespace, node or quota criterion)."""
        return bool(self.namespaces or self.nodes or self.quotas)

    def store_types(self) -> list[str] | None:
        """The type names to ask PostgreSQL for, or ``None`` for every type (no type filter, or a kind)."""
        if not self.types or self._kinds:
            return None
        return sorted(self._names | {tag.rsplit(".", 1)[0] for tag in self._tags})

    def matches_type(self, event_type: str, schema_version: int) -> bool:
        if not self.types:
            return True
        return (
            event_type in self._names
            or f"{event_type}.v{schema_version}" in self._tags
            or event_type.split(".", 1)[0] in self._kinds
        )

    def matches(self, record: RecordedEvent) -> bool:
        if not self.matches_type(record.type, record.schema_version):
            return False
        if not self.scoped:
            return True
        scope = scope_of(record)
        return (
            (not self.namespaces or not self.namespaces.isdisjoint(scope.namespaces))
            and (not self.nodes or not self.nodes.isdisjoint(scope.nodes))
            and (not self.quotas or not self.quotas.isdisjoint(scope.quotas))
        )
