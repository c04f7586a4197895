"""``allot replay --verify --check-snapshots N``: re-derive stored snapshots, record the verdicts, report them.

For each decider the newest ``N`` stored snapshots are checked, oldest first (:func:`allot_runtime.snapshot_check.
sample`): each is read under the configuration it was made under (one the decider recorded), folded from the
previous snapshot of that configuration whose latest verdict is ok (or from position 0) and compared byte for byte
with the stored state. Each verdict is appended as ``snapshot.verified``; a service restarting refuses a snapshot
whose latest verdict is a mismatch. The ``snapshots`` lines of ``--verify`` summarise the latest verdict recorded for
each snapshot position of each decider, whether checked by this run or an earlier one.

A snapshot whose latest verdict is a mismatch stays a failure of every later ``--verify`` (it is evidence that the
``snapshots`` table holds a state the log does not give) until it is resolved, by either:
- a later check of the same snapshot that reproduces it (the row was replaced by a sound one and checked again), or
- once the row is no longer stored (pruned as newer snapshots were written, or deleted), a newer snapshot of the same
  decider checked ok after the mismatch was recorded: what a restart would use has been checked since.
The mismatch verdict stays in the log either way.
"""

from __future__ import annotations

import functools

import msgspec

from allot_audit.replay_configs import DeciderConfigs
from allot_contracts.events import SnapshotVerified
from allot_eventstore.protocol import EventStore, Snapshot
from allot_runtime.snapshot_check import (
    MISMATCH,
    OK,
    check,
    made_by_other_code,
    record,
    sample,
    verdict_stream,
    verdicts,
)
from allot_runtime.snapshots import FORMAT


class Summary(msgspec.Struct, kw_only=True):
    """The latest verdicts of one decider's snapshots: how many, how many ok, the mismatches, the newest checked."""

    checked: int = 0
    ok: int = 0
    mismatched: list[SnapshotVerified] = msgspec.field(default_factory=list)
    newest: int = 0
    unresolved: list[SnapshotVerified] = msgspec.field(default_factory=list)  # mismatches still a failure


async def _read(decider: DeciderConfigs, store: EventStore, position: int) -> Snapshot | None:
    """The stored snapshot at ``position`` under one of the configurations the decider recorded (None: none)."""
    hashes = dict.fromkeys(c.hash for c in [*decider.timeline.segments(), decider.timeline.latest()])
    for config_hash in hashes:
        found = await store.latest_snapshot(
            decider.name, format=FORMAT, config_hash=config_hash, until=position
        )
        if found is not None and found.position == position:
            return found
    return None


async def check_decider(decider: DeciderConfigs, store: EventStore, count: int) -> list[SnapshotVerified]:
    """Check the decider's newest ``count`` snapshots and record each verdict; the verdicts."""
    stored = await store.snapshot_positions(decider.name)
    recorded = await verdicts(store, decider.name)
    configs = {c.hash: c for c in [*decider.timeline.segments(), decider.timeline.latest()]}
    found: list[SnapshotVerified] = []
    for position in sample(stored, count):
        snapshot = await _read(decider, store, position)
        if snapshot is None or made_by_other_code(snapshot.state):
            continue  # of another format or release, or of a configuration never recorded: restart would not use it
        start = None
        for earlier in reversed([p for p in stored if p < position]):
            previous = recorded.get(earlier)
            if previous is not None and previous.result == OK:
                candidate = await _read(decider, store, earlier)
                if candidate is not None and candidate.config_hash == snapshot.config_hash:
                    start = candidate
                    break
        config = configs[snapshot.config_hash]
        verdict = await check(functools.partial(decider.host, config), store, snapshot, start=start)
        await record(store, verdict)
        recorded[position] = verdict
        found.append(verdict)
    return found


async def summarise(store: EventStore, name: str) -> Summary:
    """The latest recorded verdict of each of ``name``'s snapshot positions, summed up, and the mismatches among them
    not resolved (see the module's docstring)."""
    latest: dict[int, tuple[int, SnapshotVerified]] = {}  # position -> (order recorded, verdict)
    for order, recorded in enumerate(await store.read_stream(verdict_stream(name))):
        event = recorded.decode()
        if isinstance(event, SnapshotVerified):
            latest[event.position] = (order, event)
    stored = set(await store.snapshot_positions(name))
    summary = Summary()
    for position, (order, verdict) in sorted(latest.items()):
        summary.checked += 1
        summary.newest = position
        if verdict.result != MISMATCH:
            summary.ok += 1
            continue
        summary.mismatched.append(verdict)
        replaced = position not in stored and any(
            later > order and other.result == OK and p > position for p, (later, other) in latest.items()
        )
        if not replaced:
            summary.unresolved.append(verdict)
    return summary


def describe(name: str, summary: Summary) -> str:
    """One ``snapshots`` line of ``allot replay --verify``."""
    head = f"snapshots    {name:<20}"
    if not summary.checked:
        return f"{head} none checked"
    line = (
        f"{head} {summary.checked} checked, {summary.ok} ok, {len(summary.mismatched)} mismatched; "
        f"newest checked at position {summary.newest}"
    )
    if summary.unresolved:
        first = summary.unresolved[0]
        line += (
            f" (MISMATCH at position {first.position}, first difference at {first.path}: not used on restart)"
        )
    elif summary.mismatched:
        line += " (each mismatch since resolved: a newer snapshot was checked ok after it)"
    return line
