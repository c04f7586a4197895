"""``allot replay --verify --since P``: where each service's decision checks start, and the check of that start.

A service's decisions are re-derived from its newest stored snapshot at or before ``P`` whose latest recorded check
(``snapshot.verified``, ``--check-snapshots``) is not a mismatch (docs/adr/0011). The snapshot
is never trusted as it is:

- it is restored into a host built from the configuration that governed the triggers after it, its bytes checked
  against their SHA-256 and the restored projection's digest against the recorded one (``allot_runtime.snapshots``);
- its interval is re-derived: the log is folded from the service's previous snapshot (restored and checked the same
  way) up to it, or from position 0 when there is no previous one and that fold is short (``FOLD_FROM_ZERO``
  positions at most), and must reach the snapshot's digest; otherwise the report says it was not re-derived;
- one earlier interval between two consecutive snapshots of the service, chosen from the head hash (the same for a
  given log), is re-derived the same way.

A digest that differs is a failure naming the snapshot (service and position): a forged row whose encoding is valid
but whose state is wrong cannot pass, unless it was forged together with its predecessor and the interval was not
sampled. Decisions before the start are not re-derived (the chain over them is still checked in full).
"""

from __future__ import annotations

import hashlib

import msgspec

from allot_audit.replay_configs import DeciderConfigs
from allot_eventstore.protocol import EventStore, Snapshot
from allot_runtime.processor import Host
from allot_runtime.recorded_config import RecordedConfig
from allot_runtime.replay import rebuild
from allot_runtime.snapshot_check import MISMATCH, verdicts
from allot_runtime.snapshots import FORMAT
from allot_runtime.statecodec import StateCodecError

FOLD_FROM_ZERO = 20_000  # a snapshot with no predecessor is re-derived from position 0 up to this position


class SnapshotFailure(Exception):
    """A snapshot that does not reproduce (``consumer`` at ``position``)."""

    def __init__(self, consumer: str, position: int, reason: str) -> None:
        super().__init__(f"snapshot of {consumer} at position {position}: {reason}")
        self.consumer = consumer
        self.position = position


class Unusable(Exception):
    """A snapshot this code cannot decode (written by another version: a class renamed or moved): not evidence of
    tampering, as restart would not use it either; the checks start earlier (or the interval is not re-derived)."""


class Interval(msgspec.Struct, frozen=True, kw_only=True):
    """A fold of the log from ``start`` (a snapshot's position, or 0) to the snapshot at ``end``; ``checked``: it was
    re-derived and reached the snapshot's digest, else ``reason`` says why not."""

    start: int
    end: int
    checked: bool
    reason: str = ""


class Start(msgspec.Struct, frozen=True, kw_only=True):
    """Where a service's decision checks started with ``--since``: after ``position`` (0: no usable snapshot at or
    before ``since``), the interval up to that snapshot re-derived (``refold``), a sampled earlier one (``sample``),
    and ``problem``: a snapshot that did not reproduce (a verification failure)."""

    since: int
    position: int = 0
    refold: Interval | None = None
    sample: Interval | None = None
    problem: str = ""
    snapshot: tuple[str, int] | None = None  # the snapshot that failed: (consumer, position)
    unusable: str = ""  # why the newest snapshot at or before ``since`` was not used (it cannot be decoded)


def _governing(segments: list[RecordedConfig], position: int) -> RecordedConfig:
    """The configuration the triggers after ``position`` were decided under."""
    found = segments[0]
    for config in segments:
        if config.after <= position:
            found = config
    return found


class _Snapshots:
    """One decider's stored snapshots, each read and checked against the configuration that governed after it."""

    def __init__(self, decider: DeciderConfigs, store: EventStore, positions: list[int]) -> None:
        self.decider = decider
        self.store = store
        self.positions = positions
        self.segments = decider.timeline.segments()
        self.read: dict[
            int, Snapshot | None
        ] = {}  # each row is read once (a projection's state can be megabytes)

    def config(self, position: int) -> RecordedConfig:
        return _governing(self.segments, position)

    async def load(self, position: int) -> Snapshot | None:
        """The snapshot at ``position`` if it is of the current format and its configuration is the one that
        governed after it (else it is not usable)."""
        if position not in self.read:
            found = await self.store.latest_snapshot(
                self.decider.name, format=FORMAT, config_hash=self.config(position).hash, until=position
            )
            self.read[position] = found if found is not None and found.position == position else None
        return self.read[position]

    async def restore(self, position: int) -> Host:
        """A host restored from the snapshot at ``position``, checked (raises :class:`SnapshotFailure`)."""
        name = self.decider.name
        snapshot = await self.load(position)
        if snapshot is None:
            raise SnapshotFailure(name, position, "not readable under the configuration in force there")
        if hashlib.sha256(snapshot.state).digest() != snapshot.state_hash:
            raise SnapshotFailure(name, position, "its state does not match its SHA-256")
        host = self.decider.host(self.config(position))
        try:
            host.restore_state(snapshot.state)
        except StateCodecError as exc:
            raise Unusable(f"the snapshot at position {position} cannot be decoded ({exc})") from exc
        if host.digest() != snapshot.digest or host.position != position:
            raise SnapshotFailure(
                name,
                position,
                f"the restored projection is not the recorded one (digest {snapshot.digest[:12]})",
            )
        return host

    async def refold(self, start: int, end: int) -> Interval:
        """Fold from the snapshot at ``start`` (0: from the log's start) to ``end``; the snapshot at ``end`` must
        have the digest reached. A different configuration in between cannot be folded across: not re-derived."""
        name = self.decider.name
        config = self.config(end)
        if start and self.config(start).hash != config.hash:
            return Interval(
                start=start, end=end, checked=False, reason="the configuration changed in between"
            )
        try:
            host = await self.restore(start) if start else self.decider.host(config)
        except Unusable as exc:
            return Interval(start=start, end=end, checked=False, reason=str(exc))
        await rebuild(host, self.store, until=end, after=start)
        snapshot = await self.load(end)
        if snapshot is None:
            raise SnapshotFailure(name, end, "not readable under the configuration in force there")
        if host.digest() != snapshot.digest:
            origin = f"the snapshot at position {start}" if start else "position 0"
            raise SnapshotFailure(
                name,
                end,
                f"its digest {snapshot.digest[:12]} is not the fold of the log from {origin} "
                f"({host.digest()[:12]}): its state is not what the log gives",
            )
        return Interval(start=start, end=end, checked=True)


def _sample(name: str, head_hash: bytes, pairs: list[tuple[int, int]]) -> tuple[int, int] | None:
    """One of ``pairs``, chosen from the head hash and the decider's name (the same for a given log)."""
    if not pairs:
        return None
    index = int.from_bytes(hashlib.sha256(head_hash + name.encode()).digest()[:8], "big")
    return pairs[index % len(pairs)]


async def start_from(
    decider: DeciderConfigs, store: EventStore, *, since: int, head_hash: bytes
) -> tuple[Host, Start]:
    """The host the decider's checks start with (restored from its newest usable snapshot at or before ``since``,
    checked and its interval re-derived) and how; a fresh host at position 0 when there is none or it fails."""
    stored = await store.snapshot_positions(decider.name)
    refuted = {p for p, v in (await verdicts(store, decider.name)).items() if v.result == MISMATCH}
    snapshots = _Snapshots(decider, store, [p for p in stored if p <= since and p not in refuted])
    position = 0
    for candidate in reversed(
        snapshots.positions
    ):  # the newest this version can read under its configuration
        if await snapshots.load(candidate) is not None:
            position = candidate
            break
    if not position:
        return decider.first(), Start(since=since)
    try:
        host = await snapshots.restore(position)
        earlier = [p for p in snapshots.positions if p < position]
        if earlier:
            refold = await snapshots.refold(earlier[-1], position)
        elif position <= FOLD_FROM_ZERO:
            refold = await snapshots.refold(0, position)
        else:
            reason = (
                f"no earlier snapshot, and a fold from position 0 is longer than {FOLD_FROM_ZERO} positions"
            )
            refold = Interval(start=0, end=position, checked=False, reason=reason)
        pair = _sample(decider.name, head_hash, list(zip(earlier[:-1], earlier[1:], strict=True)))
        sample = await snapshots.refold(*pair) if pair else None
    except Unusable as exc:
        return decider.first(), Start(since=since, unusable=str(exc))
    except SnapshotFailure as failure:
        return decider.first(), Start(
            since=since, problem=str(failure), snapshot=(failure.consumer, failure.position)
        )
    return host, Start(since=since, position=position, refold=refold, sample=sample)


def _interval(interval: Interval, what: str) -> str:
    span = f"{interval.start}–{interval.end}"
    if interval.checked:
        origin = "position 0" if not interval.start else f"the snapshot at {interval.start}"
        return f"{what} {span} re-derived from {origin}: reproduces"
    return f"{what} {span} not re-derived ({interval.reason})"


def describe(name: str, start: Start) -> str:
    """One line of ``allot replay --verify --since`` about where a decider's checks started."""
    head = f"since        {name:<20}"
    if start.problem:
        return f"{head} {start.problem}"
    if start.unusable:
        return f"{head} {start.unusable}: not used; verified from position 0"
    if not start.position:
        return f"{head} no snapshot at or before position {start.since}: verified from position 0"
    parts = [f"state and digest ok; {_interval(start.refold, 'interval')}"] if start.refold else []
    parts.append(
        _interval(start.sample, "sampled earlier interval")
        if start.sample
        else "no earlier interval to sample"
    )
    return (
        f"{head} from the snapshot at position {start.position} ({'; '.join(parts)}): "
        f"decisions at or before position {start.position} not re-derived"
    )
