"""reservation-manager in Kubernetes mode: the status of Reservations and PodMigrationJobs written back.

An ``Extra`` task of the process. Every ``poll`` seconds it reads the engine's projection (under the runtime's lock,
once the consumer is caught up) and, for each Reservation (those a user applied; a PodMigrationJob's own reservations
live in the log only) and each PodMigrationJob whose status changed since it last wrote it, PATCHes the ``status``
subresource with a JSON merge patch: phase, conditions (times as RFC 3339), nodeName, allocatable / allocated as
quantities, currentOwners; for jobs phase, status, reason, message, conditions, nodeName, podRef. Objects the
manager garbage-collected (finished reservations after ``gcDurationSeconds``, jobs after their scavenge time) are
deleted, with a uid precondition, and each delete's outcome recorded (``adapters/status_ledger.py``:
``reservation.deletion_enacted`` / ``migration.deletion_enacted``, also on 404; ``*.deletion_enactment_failed`` for a
final refusal such as a failed precondition); 401/403, 429, 5xx and transport errors leave the delete pending, asked
again on the next pass, and removals still unanswered in the log are carried out after a restart. Nothing is written for a decision that is not committed: the projection only holds
committed decisions (a failed commit makes the runtime inconsistent until it rebuilds, and nothing is read then).

In Kubernetes mode the descheduler's own jobs are first created in the API server (``adapters/jobs.py``); their status
is written once they exist, and each write's outcome is recorded (the enactment ledger): a final refusal (400, 403,
404, 422) is recorded as ``migration.status_enactment_failed`` and not asked again until the status changes. So is
every Reservation status write (``adapters/status_ledger.py``): ``reservation.status_enacted`` for the latest status
decision it carries out (also when the status already showed it), ``reservation.status_enactment_failed`` for a final
refusal (404: no such Reservation in the cluster).

Errors of the other objects: 404 (the object is gone) is ignored; 401/403 are logged as errors and retried (RBAC: ``patch
reservations/status``, ``podmigrationjobs/status``, ``delete reservations``, ``podmigrationjobs``); transport errors,
429 and 5xx are retried on the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from allot_contracts.envelope import canonical, stream_id
from allot_contracts.errors import Fenced, TransientError
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.quantity import format_quantity
from allot_eventstore.clock import iso
from allot_runtime.kube.client import ApiError, api_client, call
from reservation_manager.adapters.jobs import FINAL_STATUSES, JobEnactor
from reservation_manager.adapters.status_ledger import StatusLedger

log = logging.getLogger("allot.reservation-manager.kube")

GROUP = "/apis/scheduling.koordinator.sh/v1alpha1"
JOBS_PATH = f"{GROUP}/podmigrationjobs/"
RESERVATIONS_PATH = f"{GROUP}/reservations/"


class _Retry:
    """A write to ask again on the next pass."""


RETRY = _Retry()
FINISHED = frozenset({"Succeeded", "Failed", "Aborted"})


def _stream(path: str) -> str:
    """The log stream of the object at ``path``."""
    return stream_id("reservation" if RESERVATIONS_PATH in path else "migration", path.rsplit("/", 1)[1])


def _path(stream: str) -> str:
    kind, _, name = stream.partition(":")
    return f"{RESERVATIONS_PATH if kind == 'reservation' else JOBS_PATH}{name}"


def reservation_status(status: dict[str, Any]) -> JsonObject:
    """The engine's status of a Reservation in the API's shape (quantities and times as Kubernetes writes them)."""
    out = dict(status)
    if "conditions" in out:
        out["conditions"] = [
            {
                **c,
                "lastTransitionTime": iso(c["lastTransitionTime"]),
                "lastProbeTime": iso(c["lastTransitionTime"]),
            }
            for c in out["conditions"]
        ]
    for field in ("allocatable", "allocated"):
        if field in out:
            out[field] = {k: format_quantity(k, v) for k, v in out[field].items()}
    return out


class StatusWriter:
    def __init__(
        self,
        client: Any,
        leadership: Any = None,
        enactor: JobEnactor | None = None,
        ledger: StatusLedger | None = None,
    ) -> None:
        self.client = client
        self.leadership = leadership
        self.enactor = enactor
        self.ledger = (
            ledger  # records the outcome of each Reservation status write (adapters/status_ledger.py)
        )
        self.written: dict[str, tuple[bytes, str, str]] = {}  # path -> (status written, uid, phase)

    def _check(self, what: str) -> None:
        if self.leadership is not None:
            self.leadership.check(what)

    def _own(self, path: str) -> str:
        """The name of the descheduler's job at ``path`` ("" for any other object)."""
        name = path.rsplit("/", 1)[1]
        return name if self.enactor is not None and JOBS_PATH in path and self.enactor.own(name) else ""

    async def step(self, wanted: dict[str, tuple[JsonObject, str]], upto: int = 0) -> None:
        """``wanted``: object path -> (status, uid) for every object the projection holds now; ``upto``: the log
        position that projection reflects (the outcomes of own jobs' writes name the decision they carry out)."""
        for path, (status, uid) in sorted(wanted.items()):
            body = canonical(status)
            name = path.rsplit("/", 1)[1] if self.ledger is not None and RESERVATIONS_PATH in path else ""
            phase = str(status.get("phase", ""))
            if self.written.get(path, (b"",))[0] == body:
                if name:  # a decision that changes nothing the status shows: answered without a write
                    await self._answered(name, upto, phase, None, unchanged=True)
                continue
            own = self._own(path)
            if own and own not in self.enactor.created:  # type: ignore[union-attr]
                continue  # not created yet: written once it is
            if own:
                if await self._write_own(own, path, status, upto):
                    self.written[path] = (body, uid, str(status.get("phase", "")))
                continue
            refused = await self._write_other(path, status, name)
            if isinstance(refused, _Retry):
                continue
            self.written[path] = (body, uid, phase)
            if name:
                await self._answered(name, upto, phase, refused)
        collecting = self.ledger.collecting(upto) if self.ledger is not None else {}
        for path in [p for p in self.written if p not in wanted]:
            _, uid, phase = self.written[path]
            if phase not in FINISHED and _stream(path) not in collecting:
                del self.written[path]  # deleted by its owner, not collected by us
            elif await self._collect(path, uid):
                del self.written[path]
        for stream, decision in sorted(collecting.items()):  # not written since this process started
            path = _path(stream)
            if path not in wanted and path not in self.written:
                await self._collect(path, str(decision.payload_dict().get("uid") or ""))

    async def _collect(self, path: str, uid: str) -> bool:
        """Delete a garbage-collected object and record the outcome; False when it is to be asked again (401, 403;
        transient errors raise and leave it pending too)."""
        stream = _stream(path)
        error: ApiError | None = None
        message = ""
        try:
            self._check(f"delete {path}")
            options: JsonObject = {"preconditions": {"uid": uid}} if uid else {}
            await call(self.client, "DELETE", path, options)
            log.info("garbage-collected %s", path)
        except ApiError as exc:
            if exc.status in (401, 403):
                log.error("%s not deleted: %s (check reservation-manager's RBAC)", path, exc)
                self._delete_retried(stream)
                return False
            if exc.status == 404:
                message = "already gone: nothing to delete"
            else:
                log.warning("garbage collection of %s refused: %s", path, exc)
                error = exc
        except TransientError:
            self._delete_retried(stream)
            raise
        if self.ledger is not None:
            await self.ledger.deleted(stream, uid, error, message)
        return True

    def _delete_retried(self, stream: str) -> None:
        if self.ledger is not None:
            self.ledger.delete_retried(stream)

    async def _write_other(self, path: str, status: JsonObject, name: str) -> ApiError | _Retry | None:
        """Write the status of a Reservation or a user's job: None when written, the refusal when refused for good
        (404: the object is gone), ``RETRY`` for 401/403 (asked again on the next pass; transient errors raise)."""
        try:
            await self._patch_status(path, status)
        except ApiError as exc:
            if exc.status in (401, 403):
                log.error("status of %s not written: %s (check reservation-manager's RBAC)", path, exc)
                self._retried(name)
                return RETRY
            log.log(logging.DEBUG if exc.status == 404 else logging.WARNING, "status of %s: %s", path, exc)
            return exc
        except TransientError:
            self._retried(name)
            raise
        return None

    async def _answered(
        self, name: str, upto: int, phase: str, error: ApiError | None, *, unchanged: bool = False
    ) -> None:
        if name and self.ledger is not None:
            await self.ledger.answered(name, upto, phase, error, unchanged=unchanged)

    def _retried(self, name: str) -> None:
        if name and self.ledger is not None:
            self.ledger.retried(name)

    async def _patch_status(self, path: str, status: JsonObject) -> None:
        self._check(f"status of {path}")
        await call(
            self.client,
            "PATCH",
            f"{path}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    async def _write_own(self, name: str, path: str, status: JsonObject, upto: int) -> bool:
        """Write an own job's status and record the outcome; False when it is to be asked again."""
        enactor = self.enactor
        assert enactor is not None
        phase = str(status.get("phase", ""))
        try:
            await self._patch_status(path, status)
        except ApiError as exc:
            if exc.status not in FINAL_STATUSES:
                log.warning("status of %s: %s; retrying", path, exc)
                enactor.status_retried(name)
                return False
            log.error("status of %s refused: %s", path, exc)
            await enactor.status_written(name, upto, phase, exc)
            return True
        except TransientError:
            enactor.status_retried(name)
            raise
        await enactor.status_written(name, upto, phase, None)
        return True


def wanted_statuses(engine: Any) -> dict[str, tuple[JsonObject, str]]:
    out: dict[str, tuple[JsonObject, str]] = {}
    for name, record in engine.world.book.records.items():
        if not record.job:
            out[f"{GROUP}/reservations/{name}"] = (reservation_status(record.status()), record.uid)
    for name, job in engine.jobs.jobs.items():
        out[f"{GROUP}/podmigrationjobs/{name}"] = (job.status(), job.uid)
    return out


async def status_worker(ctx: Any, stop: asyncio.Event, poll: float = 0.5) -> None:
    """The ``Extra`` added by ``main`` in Kubernetes mode."""
    client = await api_client()
    ledger = StatusLedger(ctx.store)
    writer = StatusWriter(client, getattr(ctx, "leadership", None), ledger=ledger)
    enactor = JobEnactor(client=client, store=ctx.store, check=writer._check)
    writer.enactor = enactor
    try:
        while not stop.is_set():
            async with ctx.runtime.lock:
                ready = bool(ctx.consumer.ready.is_set() and ctx.runtime.consistent)
                engine = ctx.host.processor.engine
                wanted = wanted_statuses(engine) if ready else None
                alive, upto = set(engine.jobs.jobs), int(ctx.host.position)
            if wanted is not None:
                try:
                    await enactor.refresh()
                    await ledger.refresh()
                    await enactor.create_step(alive, asyncio.get_running_loop().time())
                    await writer.step(wanted, upto)
                except Fenced:
                    return
                except TransientError as exc:
                    log.warning("writing statuses: %s; retrying", exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=poll)
    finally:
        await client.close()
