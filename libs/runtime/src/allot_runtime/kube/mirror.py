"""Recording Kubernetes objects into the event log: "what was recorded" from the log, real changes only.

A :class:`Mirror` is the sink of reflectors: it compares each object with what the log already holds for it (a
fingerprint of the parts that matter, so status heartbeats are not recorded), and a :class:`Writer` appends the
changes in batches with ids derived from (kind, uid, resourceVersion), so a restart records nothing twice.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from allot_contracts.envelope import NewEvent, canonical, derived_event_id
from allot_contracts.errors import PermanentError
from allot_contracts.events import Event, type_of
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.kube import storage_issues as contract_storage_issues
from allot_runtime.kube.client import Resource, meta, object_key, part
from allot_runtime.kube.reflector import Sink, WatchMetrics

log = logging.getLogger("allot.kube")


# ---------------------------------------------------------------------------------------------------------------
# The log side: what was recorded, and recording real changes only
# ---------------------------------------------------------------------------------------------------------------


def strip_server_fields(obj: JsonObject) -> JsonObject:
    """The object without ``metadata.managedFields`` (server bookkeeping, never an input)."""
    m = {k: v for k, v in meta(obj).items() if k != "managedFields"}
    return {**obj, "metadata": m}


def storage_issues(value: Any, path: str = "") -> list[str]:
    """Values the log cannot store faithfully, as ``path: reason`` (see :func:`allot_contracts.kube.storage_issues`).
    Everything else is recorded, and the services reject what they must with a recorded event."""
    return [f"{where}: {why}" for where, why in contract_storage_issues(value, path)]


# the field manager of the binder's writes to Nodes (``nodes/{name}/status``): what it owns there is Allot's output
BINDER_FIELD_MANAGER = "allot-binder"


def field_paths(fields: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The leaf paths of a ``FieldsV1`` set (``{"f:status": {"f:allocatable": {"f:cpu": {}}}}`` →
    ``{("status", "allocatable", "cpu")}``)."""
    if not isinstance(fields, dict) or not fields:
        return {prefix} if prefix else set()
    out: set[tuple[str, ...]] = set()
    for key, sub in fields.items():
        if isinstance(key, str) and key.startswith("f:"):
            out |= field_paths(sub, (*prefix, key[2:]))
    return out


def owned_fields(obj: JsonObject, manager: str) -> set[tuple[str, ...]]:
    """The fields ``manager`` owns in ``obj`` according to its ``metadata.managedFields`` (``FieldsV1`` paths, e.g.
    ``("status", "allocatable", "kubernetes.io/batch-cpu")``). A field another writer changed since is theirs."""
    found: set[tuple[str, ...]] = set()
    entries = meta(obj).get("managedFields")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("manager") == manager:
            found |= field_paths(entry.get("fieldsV1"))
    return found


def without_owned(obj: JsonObject, manager: str, maps: Iterable[tuple[str, str]]) -> JsonObject:
    """``obj`` without the keys ``manager`` owns in the maps ``maps`` (``("status", "allocatable")``, …): a copy
    of those maps only, the rest shared. Used before ``metadata.managedFields`` is stripped."""
    owned = owned_fields(obj, manager)
    out = dict(obj)
    for section, name in maps:
        parent = out.get(section)
        values = parent.get(name) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or not isinstance(values, dict):
            continue
        kept = {k: v for k, v in values.items() if (section, name, k) not in owned}
        if len(kept) != len(values):
            out[section] = {**parent, name: kept}
    return out


@dataclass
class Known:
    uid: str
    fingerprint: bytes
    alive: bool = True


@dataclass
class Kind:
    """How one resource becomes input events.

    ``normalize`` gives the manifest to record (what matters, without server bookkeeping); ``fingerprint`` is
    computed on a normalized manifest — the recorded one when folding the log — so heartbeats compare equal;
    ``applied``/``deleted`` build the events; ``fold`` reads a recorded event back as (key, manifest or None for a
    deletion); ``admit`` returns admission problems (then nothing is recorded)."""

    resource: Resource
    types: frozenset[str]
    normalize: Callable[[JsonObject], JsonObject]
    fingerprint: Callable[[JsonObject], Any]
    applied: Callable[[JsonObject], list[tuple[str, Event]]]
    deleted: Callable[[str, str], list[tuple[str, Event]]]
    fold: Callable[[Event], tuple[str, JsonObject | None] | None]
    admit: Callable[[JsonObject], list[str]] = storage_issues


def event_fold(
    applied_cls: type[Event], deleted_cls: type[Event], ref_field: str
) -> Callable[[Event], tuple[str, JsonObject | None] | None]:
    """The ``fold`` of a :class:`Kind` whose events name their object in ``ref_field``: (key, manifest) for an
    ``applied_cls`` event, (key, None) for a ``deleted_cls`` one, None for any other event."""

    def fold(event: Event) -> tuple[str, JsonObject | None] | None:
        if isinstance(event, applied_cls):
            return getattr(event, ref_field).key, event.manifest  # type: ignore[attr-defined]
        if isinstance(event, deleted_cls):
            return getattr(event, ref_field).key, None
        return None

    return fold


def spec_fingerprint(obj: JsonObject, *, drop_annotations: Iterable[str] = ()) -> Any:
    """uid, labels, annotations and spec: what a custom resource means to the scheduler."""
    m = meta(obj)
    dropped = set(drop_annotations)
    annotations = {k: v for k, v in part(m, "annotations").items() if k not in dropped}
    return {
        "uid": m.get("uid", ""),
        "labels": m.get("labels") or {},
        "annotations": annotations,
        "spec": obj.get("spec"),
    }


@dataclass(eq=False, kw_only=True)
class Mirror(Sink):
    """One resource mirrored into the log as ``*.applied``/``*.deleted`` input events."""

    store: Any
    producer: str
    kind: Kind
    component: str
    metrics: WatchMetrics
    in_scope: Callable[[str], bool] = lambda _: True
    known: dict[str, Known] = field(default_factory=dict, init=False)
    position: int = field(default=0, init=False)  # how far the log has been folded
    # key -> resourceVersion refused by admission (logged once)
    refused: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.writer = Writer(self.store, self.producer, self.component, self.metrics)

    @property
    def resource(self) -> Resource:
        return self.kind.resource

    def key_of(self, obj: JsonObject) -> str:
        return object_key(obj, self.resource.namespaced)

    async def refresh(self) -> None:
        """Fold what this producer recorded since the last refresh (the log is the memory; this is a cache)."""
        async for record in self.store.iterate(
            after=self.position, types=self.kind.types, producer=self.producer
        ):
            self.position = record.position
            folded = self.kind.fold(record.decode())
            if folded is None:
                continue
            key, manifest = folded
            if manifest is None:
                if key in self.known:
                    self.known[key].alive = False
            else:
                self.known[key] = Known(
                    uid=str(meta(manifest).get("uid", "")),
                    fingerprint=canonical(self.kind.fingerprint(manifest)),
                )

    async def replace(self, objects: list[JsonObject]) -> None:
        await self.refresh()
        seen = set()
        async with self.writer.batch():
            for obj in objects:
                seen.add(self.key_of(obj))
                await self.upsert(obj)
            for key, known in sorted(self.known.items()):
                if known.alive and key not in seen and self.in_scope(key):
                    await self._delete(key, known.uid)

    async def apply(self, event_type: str, obj: JsonObject) -> None:
        if event_type == "DELETED":
            key = self.key_of(obj)
            known = self.known.get(key)
            if known is not None and known.alive and self.in_scope(key):
                await self._delete(key, known.uid)
        else:
            await self.upsert(obj)

    async def upsert(self, obj: JsonObject) -> None:
        key = self.key_of(obj)
        if not key or not self.in_scope(key):
            return
        manifest = self.kind.normalize(obj)
        m = meta(manifest)
        uid, version = str(m.get("uid", "")), str(m.get("resourceVersion", ""))
        fingerprint = canonical(self.kind.fingerprint(manifest))
        known = self.known.get(key)
        if known is not None and known.alive and known.fingerprint == fingerprint:
            return  # nothing that matters changed (a status heartbeat, a resync)
        problems = self.kind.admit(manifest)
        if problems:
            if self.refused.get(key) != version:
                self.refused[key] = version
                self.metrics.skipped.labels(self.component, str(self.resource)).inc()
                log.warning(
                    "%s %s (resourceVersion %s) not recorded: %s",
                    self.resource.kind,
                    key,
                    version,
                    "; ".join(problems),
                )
            return
        self.refused.pop(key, None)
        known_now = Known(uid=uid, fingerprint=fingerprint)
        await self.writer.write(
            self.kind.applied(manifest),
            f"{self.resource.kind}/{uid}/{version}",
            lambda: self.known.__setitem__(key, known_now),
        )

    async def _delete(self, key: str, uid: str) -> None:
        entry = self.known[key]
        await self.writer.write(
            self.kind.deleted(key, uid),
            f"{self.resource.kind}/{uid or key}/deleted",
            lambda: setattr(entry, "alive", False),
        )


@dataclass
class _Pending:
    news: list[NewEvent]
    events: list[Event]
    basis: str
    done: Callable[[], None]


@dataclass(eq=False)
class Writer:
    """Appends one producer's input events, with ids derived from a basis (kind/uid/version). Alone, each change is
    one transaction; inside :meth:`batch` (a full list) changes are appended ``chunk`` at a time, so the first list
    of a large cluster takes a few transactions, not thousands. ``done`` runs once a change is in the log.

    A change the log refuses for good (``PermanentError``) is logged and skipped; transient failures propagate, and
    the list-watch retries (nothing of a failed batch was written)."""

    store: Any
    producer: str
    component: str
    metrics: WatchMetrics
    chunk: int = 500
    _batch: list[_Pending] | None = field(default=None, init=False)

    async def write(self, events: list[tuple[str, Event]], basis: str, done: Callable[[], None]) -> None:
        pending = _Pending(
            news=[
                NewEvent(
                    stream_id=stream, event=event, event_id=derived_event_id(self.producer, basis, index)
                )
                for index, (stream, event) in enumerate(events)
            ],
            events=[event for _, event in events],
            basis=basis,
            done=done,
        )
        if self._batch is not None:
            self._batch.append(pending)
        else:
            await self._commit([pending])

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        self._batch = []
        try:
            yield
            items = self._batch
        finally:
            self._batch = None
        for start in range(0, len(items), self.chunk):
            await self._commit(items[start : start + self.chunk])

    async def _commit(self, items: list[_Pending]) -> None:
        try:
            result = await self.store.append(
                [new for item in items for new in item.news], producer=self.producer
            )
        except PermanentError as exc:
            if len(items) > 1:  # find the one the log refuses; record the others
                for item in items:
                    await self._commit([item])
                return
            log.error("%s: cannot record %s: %s", self.producer, items[0].basis, exc)
            return
        skipped = set(result.skipped)
        for item in items:
            item.done()
            for new, event in zip(item.news, item.events):
                if new.event_id not in skipped:
                    self.metrics.recorded.labels(self.component, type_of(event)).inc()
