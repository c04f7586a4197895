"""``--node-labels SELECTOR:KEY=VALUE[,KEY=VALUE…]``: a change of the nodes' facts, seen through the log.

"What if this node pool had the Prefer partition policy" is a question about node labels (Koordinator's
``node.koordinator.sh/gpu-partition-policy`` is read from the Node and from its Device), not about a service's
settings. The change is applied to every record that carries a node's labels as the deciders fold and decide:
``node.registered`` (the Node read at the door and its manifest) and ``device.reported`` (the Device's inventory
and manifest) of every node the selector matches (``k=v[,k=v…]`` on the Node's labels as recorded, or ``*``: every
node). A Device reported before its Node was registered is matched on its own labels. The log itself is not touched:
the records are changed in memory, on the way from the store to the deciders.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from allot_contracts.clipping import clipped
from allot_intake.errors import UsageError

if TYPE_CHECKING:
    from allot_contracts.envelope import RecordedEvent
    from allot_eventstore.protocol import EventStore

TYPES = ("node.registered", "device.reported")


def _pairs(text: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key:
            raise UsageError(f"--node-labels: {what} {clipped(part.strip())} is not KEY=VALUE")
        out[key] = value
    return out


@dataclass(frozen=True)
class NodeLabels:
    """Set ``labels`` on the nodes whose labels include ``selector`` (empty: every node)."""

    selector: dict[str, str]
    labels: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> NodeLabels:
        selector, sep, labels = text.partition(":")
        if not sep or not labels.strip():
            raise UsageError(
                f"--node-labels: {clipped(text)} is not SELECTOR:KEY=VALUE[,KEY=VALUE…] (SELECTOR: k=v,… or *)"
            )
        chosen = {} if selector.strip() == "*" else _pairs(selector, "selector")
        return cls(selector=chosen, labels=_pairs(labels, "label"))

    def matches(self, labels: Mapping[str, object]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector.items())

    def describe(self) -> str:
        chosen = ",".join(f"{k}={v}" for k, v in self.selector.items())
        where = f"nodes {chosen}" if chosen else "every node"
        return f"{where} labelled " + ",".join(f"{k}={v}" for k, v in self.labels.items())


def _set(target: Any, labels: dict[str, str]) -> None:
    if isinstance(target, dict):
        target["labels"] = {**(target.get("labels") or {}), **labels}


@dataclass
class Relabel:
    """The change applied to records one by one, in log order (it remembers which nodes the selector matched)."""

    change: NodeLabels
    matched: dict[str, bool] = field(default_factory=dict)  # node name -> matched when registered

    def record(self, record: RecordedEvent) -> RecordedEvent:
        if record.type not in TYPES:
            return record
        import msgspec

        from allot_contracts.envelope import canonical

        p = record.payload_dict()
        name = str(p.get("name", ""))
        manifest = p.get("manifest") or {}
        meta = manifest.get("metadata") if isinstance(manifest, dict) else None
        if record.type == "node.registered":
            self.matched[name] = self.change.matches(dict((meta or {}).get("labels") or {}))
            if not self.matched[name]:
                return record
            _set(p.get("node"), self.change.labels)
        else:
            own = dict((meta or {}).get("labels") or {})
            if not self.matched.get(name, self.change.matches(own)):
                return record
            _set(p.get("inventory"), self.change.labels)
        _set(meta, self.change.labels)
        return msgspec.structs.replace(record, payload=canonical(p))


class RelabelledStore:
    """``store`` with ``change`` applied to the records it hands out (every other call goes to ``store``)."""

    def __init__(self, store: EventStore, change: NodeLabels) -> None:
        self._store = store
        self._change = change

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def iterate(self, **kwargs: Any) -> AsyncIterator[RecordedEvent]:
        relabel = Relabel(self._change)
        types = kwargs.get("types")
        if types is not None and "node.registered" not in types and any(t in types for t in TYPES):
            kwargs["types"] = {*types, "node.registered"}  # which nodes match, even for a Device reader
        async for record in self._store.iterate(**kwargs):
            changed = relabel.record(record)
            if types is None or record.type in types:
                yield changed

    async def read(self, **kwargs: Any) -> list[RecordedEvent]:
        relabel = Relabel(self._change)
        return [relabel.record(r) for r in await self._store.read(**kwargs)]


def relabelled(store: EventStore, change: NodeLabels | None) -> EventStore:
    return store if change is None else cast("EventStore", RelabelledStore(store, change))
