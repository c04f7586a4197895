"""reservation-manager's decisions: Reservations (lifecycle, which reservations an admitted pod may use) and
PodMigrationJobs, on :class:`allot_reservation.ReservationEngine`.

Consumes Reservations and PodMigrationJobs (``reservation.*``, ``migration.*`` inputs), the admitted pods and gang
groups (``quota.admitted``, ``quota.group_admitted``: the trigger of the pod path), the pods' lives and placements
(``pod.submitted/observed/placed/bound/bind_failed/released/deleted``, ``quota.evicted``, ``gang.group_placed``), the
reserve pods' outcomes (``reservation.placed/unschedulable`` from the device-allocator), nodes (labels for
reservation affinity, removal), the binder's eviction outcomes (Kubernetes mode) and its own ``timer.fired``; for the
descheduler, NodeMetrics and the scheduler's refusals (``pod.unschedulable``, ``gang.group_unschedulable``: the pods
GPUDefrag makes room for).

Emits ``reservation.resolved`` / ``reservation.group_resolved`` (with the reservations each pod may use, whether one
is required), ``reservation.accepted/rejected/succeeded/failed/removed``, ``migration.*`` and, for a standalone
eviction, the pod's ``pod.deleted`` and its re-submission in the same decision. ``evolve`` applies inputs and the
service's own decisions alike; ``decide`` changes nothing (see the engine's docstring).
"""

from __future__ import annotations

from typing import ClassVar

from allot_contracts.events import Event
from allot_contracts.jsonvalue import JsonObject
from allot_reservation import INTERESTS, NAME, ReservationConfig, ReservationEngine
from allot_runtime.processor import Emit
from reservation_manager.descheduler import INTERESTS as DESCHEDULING
from reservation_manager.descheduler import Descheduler, owns


class ReservationManager:
    name: ClassVar[str] = NAME
    interests: ClassVar[frozenset[str]] = INTERESTS | DESCHEDULING

    def __init__(self, config: JsonObject | None = None) -> None:
        settings: dict[str, object] = dict(config or {})
        self.descheduler = Descheduler(settings.pop("descheduler", None))  # docs/descheduling.md
        migration = self.descheduler.config.migration
        if "migration" not in settings and migration is not None:
            settings["migration"] = (
                migration  # the profile's MigrationController args configure the controller
            )
        self.engine = ReservationEngine(ReservationConfig.from_dict(settings))
        self.descheduler.agree(self.engine.config)

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        if not owns(event):
            self.engine.apply(event, at)
        self.descheduler.apply(event, at)

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        out = [] if owns(event) else self.engine.decide(event, at)
        out += self.descheduler.decide(event, at, self.engine)
        return [Emit(stream_id=stream, event=decided) for stream, decided in out]

    def next_deadline(self) -> int | None:
        times = [t for t in (self.engine.next_deadline(), self.descheduler.next_deadline()) if t is not None]
        return min(times) if times else None

    def snapshot(self) -> dict[str, object]:
        snapshot: dict[str, object] = dict(self.engine.snapshot())
        if self.descheduler.enabled:
            snapshot["descheduler"] = self.descheduler.snapshot()
        return snapshot
