"""The descheduler's PodMigrationJobs made real in Kubernetes mode, and the enactment ledger's outcomes of them.

The descheduler records each job it asks for as a ``migration.applied`` of producer ``reservation-manager`` (its
manifest is upstream's ``scheduling.koordinator.sh/v1alpha1`` PodMigrationJob). This worker tails those decisions and
creates each job in the API server (``POST podmigrationjobs``, field manager ``allot-reservation-manager``), so
operators see, pause and delete them with kubectl and upstream tools that watch jobs see them; kube-sync recognises
them on the way back (``allot_kube_sync.reservations``) and records nothing for them. Once created, the status
reservation-manager writes on every job (``adapters/kube.py``) is written on it too.

Every create and every status write of such a job gets one recorded outcome (producer ``reservation-manager.kube``,
caused by the decision, its event id derived from the decision's): ``migration.job_enacted`` /
``migration.job_enactment_failed`` for the create, ``migration.status_enacted`` /
``migration.status_enactment_failed`` for the latest ``migration.*`` status decision of the job a write carries out.
A final refusal (400, 403, 404, 409 for another object of that name, 422) is recorded with the API server's reason
and never asked again; no answer, 401, 429 and 5xx are retried with backoff (0.5 s doubling to 30 s), ``attempts``
counting the calls. A job removed from the projection before it was created is not created (withdrawn).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from allot_contracts.envelope import RecordedEvent, stream_id
from allot_contracts.events import (
    Event,
    MigrationJobEnacted,
    MigrationJobEnactmentFailed,
    MigrationStatusEnacted,
    MigrationStatusEnactmentFailed,
    ObjectRef,
)
from allot_contracts.events.migration_enactment import STATUS_DECISIONS
from allot_contracts.jsonvalue import JsonObject
from allot_runtime.enactment import record_outcome
from allot_runtime.kube.client import ApiError, call, read_json, request

log = logging.getLogger("allot.reservation-manager.kube")

PRODUCER: Final = "reservation-manager.kube"
DECIDER: Final = "reservation-manager"
FIELD_MANAGER: Final = "allot-reservation-manager"
JOBS: Final = "/apis/scheduling.koordinator.sh/v1alpha1/podmigrationjobs"
FINAL_STATUSES: Final = frozenset({400, 403, 404, 409, 422})
CREATE_OUTCOMES: Final = frozenset({"migration.job_enacted", "migration.job_enactment_failed"})


@dataclass
class _Create:
    decision: RecordedEvent
    manifest: JsonObject
    attempts: int = 0
    next_at: float = 0.0
    delay: float = 0.0


@dataclass
class JobEnactor:
    """Creates the descheduler's jobs and records the outcomes of their creation and status writes."""

    client: Any
    store: Any
    backoff: tuple[float, float] = (0.5, 30.0)
    check: Callable[[str], None] = lambda what: None  # leadership: raises Fenced when this process lost it
    position: int = 0  # how far the descheduler's job decisions are folded
    answered_position: int = 0  # how far the create outcomes are folded
    pending: dict[str, _Create] = field(default_factory=dict)  # job -> create still to make
    created: set[str] = field(default_factory=set)  # own jobs whose object exists in the API server
    answered: set[str] = field(default_factory=set)  # decision ids whose create outcome is recorded
    status_attempts: dict[str, int] = field(default_factory=dict)  # job -> calls of its current status write

    async def refresh(self) -> None:
        """Fold the create outcomes already recorded, then the descheduler's new job decisions."""
        async for record in self.store.iterate(
            after=self.answered_position, types=CREATE_OUTCOMES, producer=PRODUCER
        ):
            self.answered_position = record.position
            if record.causation_id:
                self.answered.add(record.causation_id)
        async for record in self.store.iterate(
            after=self.position, types={"migration.applied"}, producer=DECIDER
        ):
            self.position = record.position
            payload = record.payload_dict()
            name = str((payload.get("job") or {}).get("name") or "")
            if record.event_id in self.answered:
                self.created.add(name)  # created (or refused) before a restart
            elif name:
                self.pending[name] = _Create(decision=record, manifest=dict(payload.get("manifest") or {}))

    def own(self, name: str) -> bool:
        return name in self.created or name in self.pending

    async def create_step(self, alive: set[str], now: float) -> None:
        """Create every pending job still in the projection (``alive``) whose retry time has come."""
        for name in sorted(self.pending):
            item = self.pending[name]
            if name not in alive:
                del self.pending[name]  # removed before it was made: withdrawn, nothing to create
                continue
            if item.next_at > now:
                continue
            self.check(f"create PodMigrationJob {name}")
            item.attempts += 1
            event = await self._create(name, item)
            if event is None:
                item.delay = min(max(item.delay * 2, self.backoff[0]), self.backoff[1])
                item.next_at = now + item.delay
                continue
            await self._record(item.decision, stream_id("migration", name), event)
            del self.pending[name]
            self.answered.add(item.decision.event_id)
            if isinstance(event, MigrationJobEnacted):
                self.created.add(name)

    async def _create(self, name: str, item: _Create) -> Event | None:
        ref = ObjectRef(name=name)
        decision = item.decision.event_id
        try:
            answer = await request(
                self.client, "POST", JOBS, body=item.manifest, query=[("fieldManager", FIELD_MANAGER)]
            )
            made = await read_json(answer)
        except ApiError as exc:
            if exc.status == 409 and await self._ours(name, item.manifest):
                return MigrationJobEnacted(
                    job=ref,
                    decision=decision,
                    message="already created by an earlier attempt",
                    attempts=item.attempts,
                )
            if exc.status not in FINAL_STATUSES:
                log.warning("PodMigrationJob %s not created: %s; retrying", name, exc)
                return None
            log.error("PodMigrationJob %s refused: %s", name, exc)
            return MigrationJobEnactmentFailed(
                job=ref, decision=decision, reason=exc.reason, message=exc.message, attempts=item.attempts
            )
        except Exception as exc:  # noqa: BLE001 - no answer (transport, 429, 5xx): asked again with backoff
            log.warning("PodMigrationJob %s not created: %s; retrying", name, exc)
            return None
        uid = str(((made or {}).get("metadata") or {}).get("uid") or "")
        return MigrationJobEnacted(job=ref, decision=decision, uid=uid, attempts=item.attempts)

    async def _ours(self, name: str, manifest: JsonObject) -> bool:
        """A job of that name exists: it is ours (an earlier attempt whose answer was lost) when it moves that pod."""
        try:
            there = await call(self.client, "GET", f"{JOBS}/{name}")
        except Exception:  # noqa: BLE001 - cannot tell: treat as another object's name
            return False
        spec = manifest.get("spec")
        moves = spec.get("podRef") if isinstance(spec, dict) else None
        return bool((there.get("spec") or {}).get("podRef") == moves)

    async def status_written(self, name: str, upto: int, phase: str, error: ApiError | None) -> None:
        """Record the outcome of a status write of own job ``name`` for its latest status decision at or before
        ``upto`` (the position the written projection reflects)."""
        attempts = self.status_attempts.pop(name, 0) + 1
        decision = await self._latest_status_decision(name, upto)
        if decision is None:
            return
        ref = ObjectRef(name=name)
        event: Event
        if error is None:
            event = MigrationStatusEnacted(
                job=ref, decision=decision.event_id, phase=phase, attempts=attempts
            )
        else:
            event = MigrationStatusEnactmentFailed(
                job=ref,
                decision=decision.event_id,
                reason=error.reason,
                message=error.message,
                attempts=attempts,
            )
        await self._record(decision, stream_id("migration", name), event)

    def status_retried(self, name: str) -> None:
        self.status_attempts[name] = self.status_attempts.get(name, 0) + 1

    async def _latest_status_decision(self, name: str, upto: int) -> RecordedEvent | None:
        history: list[RecordedEvent] = await self.store.read_stream(stream_id("migration", name))
        for record in reversed(history):
            if record.position <= upto and record.producer == DECIDER and record.type in STATUS_DECISIONS:
                return record
        return None

    async def _record(self, decision: RecordedEvent, stream: str, event: Event) -> None:
        await record_outcome(self.store, producer=PRODUCER, decision=decision, stream=stream, event=event)
