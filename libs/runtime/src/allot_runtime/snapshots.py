"""Snapshots of a service's projection: made while it runs, restored when it starts (docs/adr/0011).

A snapshot is an optimisation of restart, never a source of truth. It is taken at the host's position after a
committed batch, encoded data-only (:mod:`allot_runtime.statecodec`), and stored with the hash of the configuration
the service decides under and the projection's digest. On start, the newest snapshot of the current format and
configuration at or before the checkpoint whose latest recorded check (``snapshot.verified``, written by ``allot
replay --verify --check-snapshots``) is not a mismatch is loaded into a host built afresh from the configuration, and checked:
the state's bytes against their SHA-256, the decoded projection's digest against the one recorded. Anything wrong
(no such snapshot, a read error, corrupt or forged bytes, a refused class name, another digest) and the service says
so in a warning and folds the log from position 0, as it would without snapshots.

A running service snapshots its projection once ``every`` log positions have passed and its consumer is idle, and at
once after the batch that completes ``OVERDUE`` intervals while events keep coming (a burst is never left longer
without one). The tail a restart after a crash refolds is therefore at most ``OVERDUE × every`` positions
(plus the batch that crossed it and a snapshot still being encoded or written when the process died), whatever the
load.

Taking a snapshot (:class:`Snapshots`) pauses the service only for a fork on Linux: a child process encodes the
projection as it was at the committed batch from its copy-on-write memory (:mod:`allot_runtime.forked`) and, on
PostgreSQL, writes it over a connection of its own (else it sends it back and the service writes it). Elsewhere the export runs in process (:func:`take`, also what
``allot bench restart`` and the tests use). Either write is bounded as the service's appends are (its store's
``write_timeout``): against a PostgreSQL that stops answering it fails in time, is logged, and the next snapshot is
tried an interval later.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.protocol import EventStore, Snapshot
from allot_runtime import forked, memory, statecodec
from allot_runtime.processor import Host

log = logging.getLogger("allot.snapshots")

FORMAT = statecodec.FORMAT
OVERDUE = 2  # intervals: a snapshot this late is taken after the next batch, even while events keep coming
IDLE_S = 0.5  # a due snapshot waits for the consumer to be idle this long (until it is overdue)
# a snapshot taken while the service runs is encoded at this niceness: on two cores a forked encoder at the services'
# own priority took a core from them for seconds, and submit-to-bound latency rose with it (docs/benchmarks/e2e.md)
BACKGROUND_NICE = 10


def take(host: Host, config_hash: str) -> tuple[Snapshot, float]:
    """The host's snapshot now, and the seconds the export took (the pause of the service)."""
    started = time.perf_counter()
    state = host.export_state()
    snapshot = Snapshot(
        consumer=host.name,
        position=host.position,
        format=FORMAT,
        config_hash=config_hash,
        digest=host.digest(),
        state=state,
        state_hash=hashlib.sha256(state).digest(),
    )
    return snapshot, time.perf_counter() - started


class Restored(NamedTuple):
    """A host restored from a snapshot and checked (or built afresh: position 0), the snapshot's position, and the
    projection's digest there (None when nothing was restored)."""

    host: Host
    position: int
    digest: str | None


async def restore(build: Callable[[], Host], store: EventStore, *, config_hash: str, until: int) -> Restored:
    """A host restored from the newest usable snapshot at or before ``until``, the snapshot's position and the
    digest the projection was checked against (the host's digest until it folds anything more); or a fresh host, 0
    and None (with a warning saying why when a snapshot was found but not used)."""
    host = build()
    name = host.name
    try:
        found = await store.latest_snapshot(name, format=FORMAT, config_hash=config_hash, until=until)
        if found is not None:
            found = await _unrefuted(store, found, config_hash=config_hash)
    except Exception as exc:  # the table may be unreadable: folding from 0 is always correct
        log.warning("%s: could not read its snapshots (%s); folding the log from position 0", name, exc)
        return Restored(host, 0, None)
    if found is None:
        return Restored(host, 0, None)
    problem = check(host, found)
    if problem is not None:
        log.warning(
            "%s: snapshot at position %d not used: %s; folding the log from position 0",
            name,
            found.position,
            problem,
        )
        return Restored(build(), 0, None)
    log.info("%s: projection restored from the snapshot at position %d", name, found.position)
    return Restored(host, found.position, found.digest)


async def _unrefuted(store: EventStore, found: Snapshot, *, config_hash: str) -> Snapshot | None:
    """``found``, or the newest earlier snapshot whose latest recorded check (``snapshot.verified``) is not a
    mismatch: a snapshot that re-deriving refuted is never restored (a warning says so)."""
    from allot_runtime.snapshot_check import MISMATCH, verdicts

    refuted = {p for p, v in (await verdicts(store, found.consumer)).items() if v.result == MISMATCH}
    snapshot: Snapshot | None = found
    while snapshot is not None and snapshot.position in refuted:
        log.warning(
            "%s: snapshot at position %d not used: its latest check did not reproduce it; trying an earlier one",
            snapshot.consumer,
            snapshot.position,
        )
        snapshot = await store.latest_snapshot(
            snapshot.consumer, format=FORMAT, config_hash=config_hash, until=snapshot.position - 1
        )
    return snapshot


def check(host: Host, snapshot: Snapshot) -> str | None:
    """Restore ``snapshot`` into ``host`` (fresh); None when it is sound, else what is wrong with it."""
    if hashlib.sha256(snapshot.state).digest() != snapshot.state_hash:
        return "its state does not match its SHA-256"
    try:
        with memory.paused():  # everything decoded stays alive: a collection on the way would find nothing
            host.restore_state(snapshot.state)
    except statecodec.StateCodecError as exc:
        return f"its state cannot be decoded ({exc})"
    digest = host.digest()
    if digest != snapshot.digest:
        return f"the restored projection's digest {digest[:12]} is not the recorded {snapshot.digest[:12]}"
    if host.position != snapshot.position:
        return f"the restored position {host.position} is not the snapshot's {snapshot.position}"
    return None


class Snapshots:
    """When a running service takes its snapshots: ``every`` log positions after the last one (or the one it was
    restored from) as soon as the consumer is idle, and at once after the batch that completes ``OVERDUE``
    intervals, so that no more than ``OVERDUE × every`` positions separate two snapshots (the tail a restart after a
    crash folds). At most one is in flight. With ``fork`` (Linux, the default there) the caller, holding the
    runtime's lock at a committed batch, only forks: a child encodes the projection from its copy-on-write memory
    and writes it (PostgreSQL) or sends it back to be written (:mod:`allot_runtime.forked`), and the service goes on
    deciding meanwhile; without it the export runs in process under the lock. A snapshot that cannot be taken or
    written is logged; the next try is an interval later. ``every`` = 0 takes none."""

    def __init__(
        self, store: EventStore, *, every: int, keep: int, config_hash: str | None, fork: bool | None = None
    ) -> None:
        self.store = store
        self.every = every if config_hash is not None else 0  # no recorded config, no hash to check on load
        self.keep = keep
        self.config_hash = config_hash or ""
        self.fork = forked.AVAILABLE if fork is None else fork
        self.since = 0  # position of the last snapshot taken (or restored)
        self.writing: asyncio.Task[bool] | None = (
            None  # the snapshot in flight (encoding in a child, or writing)
        )
        self.last_pause = (
            0.0  # seconds the last snapshot held the service (the fork, or the export in process)
        )

    def due(self, position: int) -> bool:
        """An interval since the last snapshot: taken once the consumer is idle."""
        return self.every > 0 and position - self.since >= self.every

    def overdue(self, position: int) -> bool:
        """``OVERDUE`` intervals since the last snapshot: taken now, even while events keep coming."""
        return self.every > 0 and position - self.since >= OVERDUE * self.every

    def export(self, host: Host) -> Snapshot | None:
        """Take the snapshot in process (the caller holds the lock); None when it cannot be encoded (logged)."""
        self.since = host.position
        try:
            snapshot, self.last_pause = take(host, self.config_hash)
        except Exception as exc:  # a snapshot is an optimisation: failing to take one never stops the service
            log.warning("%s: its projection cannot be snapshot: %s", host.name, exc)
            return None
        log.info(
            "%s: snapshot at position %d (%d bytes, export %.0f ms)",
            host.name,
            snapshot.position,
            len(snapshot.state),
            self.last_pause * 1000,
        )
        return snapshot

    def _begin(self, host: Host, *, background: bool = False) -> _Pending:
        """Start the snapshot of the host now (the caller holds the lock): a forked child encoding it (and, in the
        ``background`` on PostgreSQL, writing it over a connection of its own, so that the state never comes into
        this process, at :data:`BACKGROUND_NICE`), or, without fork (or when forking fails), the export in
        process."""
        if self.fork:
            self.since = host.position
            store = self.store if background and isinstance(self.store, PostgresEventStore) else None
            target = _Target.of(store, host, self.config_hash, self.keep) if store is not None else None
            started = time.perf_counter()
            try:
                child = forked.start(
                    lambda: _encoded(host, target), nice=BACKGROUND_NICE if background else 0
                )
            except OSError as exc:
                log.warning(
                    "%s: cannot fork to snapshot its projection (%s); exporting in process", host.name, exc
                )
            else:
                self.last_pause = time.perf_counter() - started
                return _Pending(self, host.name, host.position, child, None)
        return _Pending(self, host.name, host.position, None, self.export(host))

    async def write(self, snapshot: Snapshot) -> bool:
        """Write ``snapshot`` (True), or log why it could not be (False)."""
        try:
            await self.store.write_snapshot(snapshot, keep=self.keep)
            return True
        except Exception as exc:  # deciding never waits for a snapshot: try again an interval later
            log.warning(
                "%s: could not write its snapshot at position %d: %s",
                snapshot.consumer,
                snapshot.position,
                exc,
            )
            return False

    async def _take_and_write(self, pending: _Pending) -> bool:
        snapshot = await pending.snapshot()
        return snapshot is not None and (pending.written or await self.write(snapshot))

    def start(self, host: Host) -> None:
        """Start a snapshot now (the caller holds the lock) and finish it in the background, unless one is still in
        flight."""
        if self.writing is not None and not self.writing.done():
            return
        pending = self._begin(host, background=True)
        self.writing = asyncio.create_task(self._take_and_write(pending), name=f"{host.name}-snapshot")

    async def on_stop(self, host: Host, consistent: bool, *, timeout: float) -> Snapshot | None:
        """A graceful stop (the caller holds the lock, the consumer has stopped and flushed its checkpoint): the
        snapshot at the host's position when it moved since the last one, so that the next start folds no tail;
        the export and the write (after one still in flight) within ``timeout`` seconds. The snapshot written, or
        None (none due, or it could not be taken or written in time: the next start folds the tail)."""
        if not (self.every > 0 and consistent and host.position > self.since):
            return None
        deadline = time.monotonic() + timeout
        if self.writing is not None and not self.writing.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.writing), timeout=timeout)
        pending = self._begin(host)
        try:
            snapshot = await asyncio.wait_for(pending.snapshot(), timeout=max(deadline - time.monotonic(), 0))
        except TimeoutError:
            snapshot = None
        finally:
            pending.close()
        remaining = deadline - time.monotonic()
        if snapshot is None or remaining <= 0:
            if snapshot is None and pending.child is not None and time.monotonic() >= deadline:
                log.warning(
                    "%s: its snapshot at position %d was not encoded within the shutdown timeout (%.1f s)",
                    host.name,
                    pending.position,
                    timeout,
                )
            return None
        try:
            written = await asyncio.wait_for(self.write(snapshot), timeout=remaining)
        except TimeoutError:
            log.warning(
                "%s: its snapshot at position %d was not written within the shutdown timeout (%.1f s)",
                host.name,
                snapshot.position,
                timeout,
            )
            return None
        return snapshot if written else None

    def after_batch(self, host: Host, consistent: bool) -> None:
        """After a committed batch (lock held): an overdue snapshot (``OVERDUE`` intervals since the last) is taken now."""
        if consistent and self.overdue(host.position):
            self.start(host)

    async def loop(
        self, lock: asyncio.Lock, current: Callable[[], tuple[Host, bool, float]], stop: asyncio.Event
    ) -> None:
        """Take a due snapshot once the consumer has been idle for ``IDLE_S`` (``current``: the host, whether it
        is consistent, and when it last handled a batch, ``time.monotonic()``)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=IDLE_S)
            host, consistent, last = current()
            if not (consistent and self.due(host.position) and time.monotonic() - last >= IDLE_S):
                continue
            async with lock:
                host, consistent, _ = current()
                if consistent and self.due(host.position):
                    self.start(host)
        if self.writing is not None:
            await self.writing


class _Target(NamedTuple):
    """Where a forked child writes the snapshot itself: the store's URL and bounds (a write that gets no answer fails
    in the child as it would in the service), and the row's fields it cannot know."""

    url: str
    consumer: str
    position: int
    config_hash: str
    keep: int
    write_timeout: float | None
    connect_timeout: float
    timeouts_from: str | None

    @classmethod
    def of(cls, store: PostgresEventStore, host: Host, config_hash: str, keep: int) -> _Target:
        bounds = (store.write_timeout, store.connect_timeout, store.timeouts_from)
        return cls(store.url, host.name, host.position, config_hash, keep, *bounds)


def _encoded(host: Host, target: _Target | None) -> tuple[list[Any], list[Any]]:
    """In the forked child: the host's digest, the state's SHA-256 and size and whether the child wrote it (to
    ``target``), and the state itself when it did not (consecutive buffers, sent one after the other)."""
    parts = host.export_state_parts()
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(part)
    size = sum(memoryview(part).nbytes for part in parts)
    digest = host.digest()
    if target is None:
        return [digest, hashed.digest(), size, False], parts
    state = b"".join(parts)
    parts.clear()
    snapshot = Snapshot(
        consumer=target.consumer,
        position=target.position,
        format=FORMAT,
        config_hash=target.config_hash,
        digest=digest,
        state=state,
        state_hash=hashed.digest(),
    )
    _write_from_child(target, snapshot)
    return [digest, hashed.digest(), size, True], []


def _write_from_child(target: _Target, snapshot: Snapshot) -> None:
    """Write ``snapshot`` over a connection of the child's own, on an event loop of its own (in a thread: the
    parent's loop, copied into this process, is never touched)."""

    async def write() -> None:
        store = PostgresEventStore.connect(
            target.url,
            pool_size=1,
            write_timeout=target.write_timeout,
            connect_timeout=target.connect_timeout,
            timeouts_from=target.timeouts_from,
        )
        try:
            await store.write_snapshot(snapshot, keep=target.keep)
        finally:
            await store.close()

    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(write())
        except BaseException as exc:  # noqa: BLE001 - raised again in the child's main thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="snapshot-writer")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


class _Pending:
    """A snapshot started at ``position``: being encoded by a forked ``child``, or already ``taken`` in process."""

    def __init__(
        self, owner: Snapshots, name: str, position: int, child: forked.Child | None, taken: Snapshot | None
    ) -> None:
        self.owner = owner
        self.name = name
        self.position = position
        self.child = child
        self.taken = taken
        self.written = False  # the child wrote it itself

    async def snapshot(self) -> Snapshot | None:
        """The snapshot, once the child has sent it; None when it could not be taken (logged)."""
        if self.child is None:
            return self.taken
        try:
            answer = await self.child.answer()
            digest, state_hash, size, self.written = answer.meta
        except (forked.ChildFailed, ValueError, TypeError) as exc:
            log.warning(
                "%s: its projection cannot be snapshot at position %d: %s", self.name, self.position, exc
            )
            return None
        snapshot = Snapshot(
            consumer=self.name,
            position=self.position,
            format=FORMAT,
            config_hash=self.owner.config_hash,
            digest=str(digest),
            # the bytearray read from the pipe, not a copy: the store only reads it (hashes it, sends it)
            state=cast(bytes, answer.payload),
            state_hash=bytes(state_hash),
        )
        log.info(
            "%s: snapshot at position %d (%d bytes, export %.0f ms) encoded%s by a forked process in %.0f ms, peak"
            " RSS %.0f MiB",
            self.name,
            self.position,
            size,
            self.owner.last_pause * 1000,
            " and written" if self.written else "",
            answer.seconds * 1000,
            answer.peak_rss / 2**20,
        )
        return snapshot

    def close(self) -> None:
        """Kill the child if it is still running (a stop that cannot wait for it)."""
        if self.child is not None and self.child.fd >= 0:
            self.child.kill()
