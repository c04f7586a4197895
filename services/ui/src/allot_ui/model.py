"""What the web audit view shows, folded from the log and nothing else (read-only: no write path exists here).

``UiModel.refresh`` reads the events recorded since the last call, in pages: they are folded into the same
``ClusterView`` as ``allot get`` uses, the hash chain is checked event by event as they arrive (so the verify status
costs nothing at page load), the latest events are kept for the live stream, and quota borrows are kept as a ledger.
The services' own projections (quota tree, gangs, reservations, migrations) are rebuilt from the log by their decision
code, at most every ``projection_interval`` seconds and only when the log moved: pages read the last rebuild, and say
at which position it was taken.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from allot_contracts.envelope import GENESIS_HASH, RecordedEvent
from allot_contracts.jsonvalue import JsonObject
from allot_eventstore.protocol import EventStore
from allot_views.cluster import ClusterView, GpuRow, gpu_rows

if TYPE_CHECKING:
    from allot_views.nearest import Cluster

RECENT = 500
RETURNS = frozenset({"quota.released", "quota.evicted", "pod.deleted"})
LEDGER = 500
DEFRAG_ROUNDS = 20  # defragmentation rounds the reservations page lists
PAGE = 5000


@dataclass
class Chain:
    """The hash chain checked as events are read: up to which position, and the first problem found."""

    verified_to: int = 0
    prev: bytes = GENESIS_HASH
    problem: str = ""

    def check(self, record: RecordedEvent) -> None:
        if self.problem:
            return
        if record.position != self.verified_to + 1:
            self.problem = f"position {self.verified_to + 1} is missing (next stored is {record.position})"
            return
        if not record.hash_follows(
            self.prev
        ):  # the stored payload hashed as it is: no decoding when it matches
            try:
                record.expected_hash(self.prev)
            except ValueError as exc:
                self.problem = f"event at position {record.position} has an unreadable payload: {exc}"
                return
            self.problem = f"event at position {record.position} does not match its hash"
            return
        self.prev, self.verified_to = record.hash, record.position


@dataclass
class Projections:
    """The services' projections at ``position`` (JSON builtins, ready to render)."""

    position: int = 0
    quotas: list[dict[str, Any]] = field(default_factory=list)
    gangs: list[dict[str, Any]] = field(default_factory=list)
    reservations: list[dict[str, Any]] = field(default_factory=list)
    migrations: list[dict[str, Any]] = field(default_factory=list)
    took_s: float = 0.0
    error: str = ""


@dataclass
class UiModel:
    store: EventStore
    projection_interval: float = 2.0
    view: ClusterView = field(default_factory=ClusterView)
    chain: Chain = field(default_factory=Chain)
    recent: deque[RecordedEvent] = field(default_factory=lambda: deque(maxlen=RECENT))
    ledger: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=LEDGER))
    # the latest GPU defragmentation rounds that planned or found a pod waiting (descheduler.defrag_planned)
    defrag: deque[tuple[int, dict[str, Any]]] = field(default_factory=lambda: deque(maxlen=DEFRAG_ROUNDS))
    head: int = 0
    checkpoints: dict[str, int] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # consumer -> first event of interest not handled
    projections: Projections = field(default_factory=Projections)
    _projected_at: float = 0.0
    _gpus: tuple[int, dict[str, list[GpuRow]]] = (-1, {})
    # each submitted pod's priority, arrival and spec: what the nearest miss and the queue place read
    priority: dict[str, int] = field(default_factory=dict)
    arrival: dict[str, int] = field(default_factory=dict)
    specs: dict[str, JsonObject] = field(default_factory=dict)
    outage: str = ""  # why the log cannot be read, while the background reader's reads fail (else empty)

    def cluster(self) -> Cluster:
        """The fold ``allot explain`` reads for the nearest miss and the queue place, at the view's position."""
        from allot_views.nearest import Cluster

        return Cluster(
            view=self.view, priority=self.priority, arrival=self.arrival, specs=self.specs, _gpus=self.gpus()
        )

    def gpus(self) -> dict[str, list[GpuRow]]:
        """Every node's GPUs (:func:`allot_views.cluster.gpu_rows`), computed once per log position the view reached."""
        if self._gpus[0] != self.view.position:
            self._gpus = (self.view.position, gpu_rows(self.view))
        return self._gpus[1]

    @property
    def position(self) -> int:
        return self.view.position

    def fold(self, record: RecordedEvent) -> None:
        self.view.apply(record)
        if record.type == "pod.submitted":
            from allot_views.nearest import note_submitted

            note_submitted(self.priority, self.arrival, self.specs, record)
        self.chain.check(record)
        self.recent.append(record)
        if record.type == "descheduler.defrag_planned":
            payload = record.payload_dict()
            if payload.get("plans") or payload.get("waiting"):
                self.defrag.append((record.position, payload))
        elif record.type in ("quota.admitted", "quota.group_admitted"):
            payload = record.payload_dict()
            detail = payload.get("detail") or {}
            admitted = (
                {record.stream_id.split(":", 1)[1]: detail}
                if record.type == "quota.admitted"
                else dict(detail.get("members") or {})
            )
            for pod, decision in admitted.items():
                for fact in (decision or {}).get("borrow") or []:
                    self.ledger.append({"position": record.position, "pod": pod, "returned": 0, **fact})
        elif record.type in RETURNS:
            # the pod's charge went back to its quota (or the pod is gone): its borrows are no longer current
            pod = record.stream_id.split(":", 1)[1]
            for entry in self.ledger:
                if entry["pod"] == pod and not entry["returned"]:
                    entry["returned"] = record.position

    async def refresh(self) -> int:
        """Fold what was recorded since the last call; the number of events read."""
        read = 0
        while True:
            batch = await self.store.read(after=self.view.position, limit=PAGE)
            for record in batch:
                self.fold(record)
            read += len(batch)
            if len(batch) < PAGE:
                break
        self.head = (await self.store.head())[0]
        self.checkpoints = await self.store.checkpoints()
        self.pending = await pending_work(self.store, self.checkpoints)
        return read

    def lag(self) -> dict[str, int]:
        """Per consumer, as ``allot_consumer_lag_events`` counts it: the log positions between its checkpoint and the
        head while an event it consumes is waiting there, else 0 (a service is not behind events it never reads)."""
        return {
            name: max(self.head - position, 0) if name in self.pending else 0
            for name, position in sorted(self.checkpoints.items())
        }

    async def refresh_projections(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and (
            self.projections.position == self.head or now - self._projected_at < self.projection_interval
        ):
            return
        self._projected_at = now
        self.projections = await build_projections(self.store, self.head)


async def pending_work(store: EventStore, checkpoints: dict[str, int]) -> dict[str, int]:
    """Per consumer, the position of the first event it consumes after its checkpoint (none: it is caught up). A
    service's instances (``service@node``) consume what the service does; a consumer that is no service reads all."""
    from allot_stack.pipeline import interests

    consumed = interests()
    pending: dict[str, int] = {}
    for name, position in checkpoints.items():
        first = await store.read(after=position, types=consumed.get(name.split("@", 1)[0]), limit=1)
        if first:
            pending[name] = first[0].position
    return pending


async def build_projections(store: EventStore, head: int) -> Projections:
    from allot_stack.logtools import projection
    from allot_stack.reservation_views import migration_rows, reservation_rows

    started = time.perf_counter()
    try:
        quota = await projection(store, "quota-manager")
        gangs = await projection(store, "gang-coordinator")
        reservations = await projection(store, "reservation-manager")
    except Exception as exc:  # a projection that cannot be rebuilt is shown as such, never crashes the view
        return Projections(position=head, error=f"{type(exc).__name__}: {exc}")
    return Projections(
        position=head,
        quotas=list(quota.engine.tree_view()),
        gangs=[{**s, "explain": gangs.engine.explain(s["gang"])} for s in gangs.engine.statuses()],
        reservations=reservation_rows(reservations.engine),
        migrations=migration_rows(reservations.engine),
        took_s=time.perf_counter() - started,
    )
