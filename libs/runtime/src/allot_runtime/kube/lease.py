"""Leader election on a ``coordination.k8s.io/v1`` Lease, with a fencing term.

One Lease per decider (``allot-binder``, ``allot-quota-manager``, …) in the installation's namespace. Replicas of a
decider compete for it the way client-go's leader election does (kube-scheduler's defaults: a 15 s lease, renewed
every 2 s, given up when not renewed for 10 s); a follower takes over a lease whose record it has seen unchanged
for the lease duration, by its own clock. What client-go does not give, and Allot needs, is a *fencing token*:

- **The term.** Taking the lease from another holder (or creating it) increments ``spec.leaseTransitions``, with the
  object's ``resourceVersion`` as the precondition, so two candidates cannot both win; the term is
  ``leaseTransitions + 1``. A new leader records its term in the event log's ``fences`` table
  (``advance_fence``) before it reads the log or decides anything, then records ``leader.elected``. A record that
  fails (the log does not answer) is made again every ``retry_period``, for the same term, for as long as a renewal
  of the lease succeeds: the lease is still this candidate's, and ``advance_fence`` answers with the term's recorded
  holder, so a term recorded for another (a recreated Lease numbered again) is never acted under. Rejected: giving
  the term up, which left the candidate following its own lease until it lapsed, then taking the next term.
- **The log refuses stale terms.** The leader's store appends under ``Fence(decider, term)``: each append checks the
  recorded term in its own transaction, under the log's head lock, so once a successor recorded its term, nothing
  of the ex-leader's lands — whether it was paused, partitioned or just slow (:class:`allot_contracts.errors.Fenced`).
- **API server writes check the lease first.** The API server cannot check our term, so every write the leader
  makes to it goes through :meth:`Leadership.check`: refused once the leader has not renewed for ``renew_deadline``
  (by the monotonic clock, which keeps counting while the process is stopped). A follower needs ``lease_duration``
  of silence to take over; the difference (5 s by default) covers clock-rate skew and the instant between the check
  and the request leaving the process, the one window no lease can close (an API server write cannot be made
  conditional on a Lease).
- **Stepping down.** A refused write is recorded once (``leader.write_refused``, outside the fence), and
  :meth:`Leadership.hold` — the task that renews the lease — raises :class:`LeadershipLost`; the process exits and
  its supervisor restarts it as a follower.
- **Writers without their own refusal handling** (kube-sync's list-watches retry every transient error, and a
  refused append is one) get the leader's store wrapped in :class:`GuardedStore`, which reports the refusal, and run
  under :func:`while_leading`, which stops them when the leadership is lost.

Nothing here decides anything about scheduling: this is the IO shell deciding who may write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.errors import Deposed, Fenced, InvalidInput, TransientError
from allot_contracts.events import LeaderElected, LeaderWriteRefused
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_eventstore.protocol import EventStore, Fence
from allot_runtime.kube.client import ApiError, Resource, call

log = logging.getLogger("allot.lease")

LEASES = Resource("coordination.k8s.io/v1", "Lease", "leases", True)


class LeaseSpec(TypedDict):
    """The spec of a coordination.k8s.io/v1 Lease as this process writes it."""

    holderIdentity: str
    leaseDurationSeconds: int
    acquireTime: str
    renewTime: str
    leaseTransitions: int


class _LeaseMeta(TypedDict):
    name: str
    namespace: str
    resourceVersion: NotRequired[str]


class _LeaseBody(TypedDict):
    apiVersion: str
    kind: str
    metadata: _LeaseMeta
    spec: LeaseSpec | JsonObject  # ours, or the one read back with a field changed


def _part(lease: JsonObject | None, key: str) -> JsonObject:
    """The ``metadata`` or ``spec`` of a Lease as read (empty when there is none)."""
    found = (lease or {}).get(key)
    return found if isinstance(found, dict) else {}


def _number(value: JsonValue) -> int | float | str | None:
    """A number of a Lease's spec as read (a number or the text of one); None for anything else."""
    return value if isinstance(value, int | float | str) else None


class LeadershipLost(Deposed):
    """This process is no longer the leader (the lease lapsed, another holder took it, or a write was refused): it
    stops so that its supervisor restarts it as a follower."""


@dataclass(frozen=True)
class LeaseConfig:
    """Where the lease is and how it is held (kube-scheduler's defaults). ``lease_duration > renew_deadline >
    retry_period``: a follower waits ``lease_duration`` of silence; the leader stops writing after ``renew_deadline``
    without a renewal."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        issues = []
        if not self.namespace or not self.name or not self.identity:
            issues.append(("lease", "needs a namespace, a name and an identity"))
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            issues.append(
                (
                    "lease",
                    "durations must satisfy lease_duration > renew_deadline > retry_period > 0, got "
                    f"{self.lease_duration}, {self.renew_deadline}, {self.retry_period}",
                )
            )
        if issues:
            raise InvalidInput(issues, subject="leader election")


def _now() -> str:
    """A MicroTime (RFC 3339 with microseconds), the wall clock of the shell."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Leadership:
    """One decider's leadership: :meth:`acquire` (wait for the lease, record the term), :meth:`hold` (renew until
    stopped or lost), :meth:`check` (before an API server write), :meth:`refused` (a write was refused)."""

    client: Any
    store: EventStore  # unfenced: the leader's own writes go through a store created with ``fence``
    config: LeaseConfig
    decider: str
    monotonic: Callable[[], float] = time.monotonic
    term: int = 0
    valid_until: float = 0.0  # monotonic: writes are allowed until then
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    _record: JsonObject | None = None  # the Lease as last read or written
    _observed: tuple[str, float] = ("", 0.0)  # (resourceVersion, monotonic time it was first seen)
    _refusal_recorded: bool = False
    _previous: str = ""

    @property
    def fence(self) -> Fence:
        return Fence(self.decider, self.term)

    @property
    def path(self) -> str:
        return LEASES.object_path(self.config.name, self.config.namespace)

    # -- the lease -----------------------------------------------------------------------------------------------

    def _spec(self, *, transitions: int, acquire: str) -> LeaseSpec:
        now = _now()
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "acquireTime": acquire or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _read(self) -> JsonObject | None:
        try:
            found = await call(self.client, "GET", self.path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found if isinstance(found, dict) else None

    async def _write(self, lease: JsonObject | None, spec: LeaseSpec | JsonObject) -> bool:
        """Create the lease, or replace it with its resourceVersion as the precondition; False when another writer
        got there first."""
        body: _LeaseBody = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": spec,
        }
        try:
            if lease is None:
                written = await call(self.client, "POST", LEASES.collection_path(self.config.namespace), body)
            else:
                body["metadata"]["resourceVersion"] = str(_part(lease, "metadata")["resourceVersion"])
                written = await call(self.client, "PUT", self.path, body)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        self._record = written if isinstance(written, dict) else None
        return self._record is not None

    async def _try_acquire_or_renew(self) -> bool:
        """One round of client-go's algorithm; True when this process holds the lease afterwards."""
        started = self.monotonic()
        lease = await self._read()
        spec = _part(lease, "spec")
        holder = str(spec.get("holderIdentity") or "")
        transitions = int(_number(spec.get("leaseTransitions")) or 0)
        if lease is not None and holder == self.config.identity:
            # renewed; a candidate whose term is not recorded yet (its record failed) holds the lease all the same
            # and takes that term up again: the lease names it alone, the identity being this process's own
            ok = await self._write(
                lease, self._spec(transitions=transitions, acquire=str(spec.get("acquireTime") or ""))
            )
            if ok:
                self.valid_until = started + self.config.renew_deadline
                self.term = self.term or transitions + 1
            return ok
        if self.term:
            self.lost.set()  # we led, and the lease is gone or someone else holds it now
            return False
        if lease is not None and holder:
            version = str(_part(lease, "metadata").get("resourceVersion", ""))
            if self._observed[0] != version:
                self._observed = (version, started)
            duration = float(_number(spec.get("leaseDurationSeconds")) or self.config.lease_duration)
            if started < self._observed[1] + duration:
                return False  # held, and renewed within its duration as far as this process has seen
        next_transitions = transitions + 1 if lease is not None else 0
        if not await self._write(lease, self._spec(transitions=next_transitions, acquire="")):
            return False
        self.term = next_transitions + 1
        self.valid_until = started + self.config.renew_deadline
        self._previous = holder
        return True

    # -- life cycle ----------------------------------------------------------------------------------------------

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this process leads (True) or ``stop`` is set (False). The term is recorded in the log's
        fences before this returns; a lease whose term is behind the log's (the Lease object was deleted and
        created again) is renumbered past it first."""
        waiting_logged = False
        while not stop.is_set():
            try:
                if self.term or await self._try_acquire_or_renew():
                    current, holder = await self.store.advance_fence(self.fence, holder=self.config.identity)
                    if (current, holder) == (self.term, self.config.identity):
                        await self._record_elected()
                        log.info(
                            "%s: leading with term %d (lease %s/%s, identity %s)",
                            self.decider,
                            self.term,
                            self.config.namespace,
                            self.config.name,
                            self.config.identity,
                        )
                        return True
                    spec = dict(_part(self._record, "spec"))
                    spec["leaseTransitions"] = current
                    renumbered = self._record is not None and await self._write(self._record, spec)
                    self.term = current + 1 if renumbered else 0
                    if renumbered:
                        continue
                elif not waiting_logged:
                    log.info("%s: another replica leads; following until its lease lapses", self.decider)
                    waiting_logged = True
            except (TransientError, ApiError) as exc:
                self.term = 0  # taken up again while the lease names this process (the docstring)
                log.warning("%s: cannot take the lease yet (%s); retrying", self.decider, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.config.retry_period)
        return False

    async def _record_elected(self) -> None:
        event = LeaderElected(
            decider=self.decider,
            lease=f"{self.config.namespace}/{self.config.name}",
            holder=self.config.identity,
            term=self.term,
            previous=self._previous,
        )
        new = NewEvent(
            stream_id=stream_id("leader", self.decider),
            event=event,
            event_id=derived_event_id(f"{self.decider}.lease", f"elected/{self.term}", 0),
        )
        await self.store.append([new], producer=f"{self.decider}.lease", fence=self.fence)

    async def hold(self, stop: asyncio.Event) -> None:
        """Renew every ``retry_period`` until ``stop``; the owner releases the lease (:meth:`release`, so that a
        follower takes over at once) after its last writes, as a consumer lock is released. Raises
        :class:`LeadershipLost` when the lease could not be renewed for ``renew_deadline``, another holder has it, or
        a write was refused."""
        while not stop.is_set():
            await _first(stop, self.lost, timeout=self.config.retry_period)
            if self.lost.is_set():
                raise LeadershipLost(
                    f"{self.decider}: a write under term {self.term} was refused; stepping down"
                )
            if stop.is_set():
                break
            try:
                renewed = await self._try_acquire_or_renew()
            except (TransientError, ApiError) as exc:
                log.warning("%s: renewing the lease failed (%s)", self.decider, exc)
                renewed = False
            if not renewed and self.monotonic() >= self.valid_until:
                self.lost.set()
                raise LeadershipLost(
                    f"{self.decider}: could not renew the lease within {self.config.renew_deadline}s "
                    f"(term {self.term}); stepping down"
                )

    async def release(self) -> None:
        """Give the lease up (holder cleared) so that a follower does not wait for it to lapse."""
        if self._record is None or not self.valid():
            return
        spec = dict(_part(self._record, "spec"))
        if spec.get("holderIdentity") != self.config.identity:
            return
        spec.update(holderIdentity="", leaseDurationSeconds=1)
        with contextlib.suppress(Exception):
            await self._write(self._record, spec)
        self.valid_until = 0.0

    # -- guarding writes -----------------------------------------------------------------------------------------

    def valid(self) -> bool:
        return bool(self.term) and not self.lost.is_set() and self.monotonic() < self.valid_until

    def check(self, what: str) -> None:
        """Before an API server write: raise :class:`Fenced` (target ``api``) unless the lease is valid now."""
        if not self.valid():
            raise Fenced(self.decider, self.term, self.term + 1 if self.term else 0, target="api")

    async def refused(self, exc: Fenced, detail: str) -> None:
        """A write was refused: record it once (outside the fence) and step down (:meth:`hold` raises)."""
        self.lost.set()
        if self._refusal_recorded:
            return
        self._refusal_recorded = True
        log.error("%s: %s (%s); stepping down", self.decider, exc, detail)
        event = LeaderWriteRefused(
            decider=self.decider,
            holder=self.config.identity,
            term=exc.term,
            current=exc.current,
            target=exc.target,
            detail=detail[:1000],
        )
        new = NewEvent(
            stream_id=stream_id("leader", self.decider),
            event=event,
            event_id=derived_event_id(
                f"{self.decider}.lease", f"refused/{self.config.identity}/{self.term}", 0
            ),
        )
        with contextlib.suppress(Exception):  # the record is best effort: stepping down is what matters
            await self.store.append([new], producer=f"{self.decider}.fence")


async def _first(*events: asyncio.Event, timeout: float) -> None:
    """Wait until one of ``events`` is set, or ``timeout``."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def lease_identity() -> str:
    """A candidate's identity: the pod's name (``HOSTNAME``) and a random suffix, so a restarted container is a new
    candidate and never mistakes the lease of its previous life for its own."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{os.urandom(6).hex()}"


class GuardedStore:
    """The leader's fenced store for a writer that has no refusal handling of its own: an append refused for a
    stale term is recorded (:meth:`Leadership.refused`, which also makes :meth:`Leadership.hold` raise) before the
    :class:`Fenced` error goes on to the writer. Everything else is the store's own."""

    def __init__(self, store: EventStore, leadership: Leadership, what: str) -> None:
        self._store = store
        self._leadership = leadership
        self._what = what

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._store.append(*args, **kwargs)
        except Fenced as exc:
            await self._leadership.refused(exc, self._what)
            raise


async def while_leading(
    hold: Callable[[asyncio.Event], Awaitable[None]],
    work: Callable[[asyncio.Event], Awaitable[None]],
    stop: asyncio.Event,
) -> None:
    """Run ``work`` for as long as ``hold`` keeps this process the leader (:meth:`Leadership.hold`, or an advisory
    lock's). Both get one stop event, set by ``stop`` or as soon as either returns or raises; ``work`` has stopped
    before this returns. An error of ``hold`` (the leadership was lost) is raised first, then one of ``work``."""
    until = asyncio.Event()
    holding = asyncio.ensure_future(hold(until))
    working = asyncio.ensure_future(work(until))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({holding, working, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        until.set()
        stopping.cancel()
        held, worked = await asyncio.gather(holding, working, return_exceptions=True)
    for outcome in (held, worked):
        if isinstance(outcome, BaseException):
            raise outcome
