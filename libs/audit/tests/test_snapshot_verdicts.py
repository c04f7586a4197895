"""Which recorded snapshot mismatches still fail ``allot replay --verify``: the latest verdict of each snapshot
position, and a mismatch resolved by a later ok check of the same snapshot, or (its row no longer stored) by a newer
snapshot of the decider checked ok after it."""

from __future__ import annotations

import asyncio

from allot_audit.snapshot_checks import describe, summarise
from allot_contracts.events import SnapshotVerified
from allot_eventstore.memory import InMemoryEventStore
from allot_eventstore.protocol import Snapshot
from allot_runtime.snapshot_check import MISMATCH, OK, record

NAME = "device-allocator"


def _verdict(position: int, result: str) -> SnapshotVerified:
    return SnapshotVerified(
        consumer=NAME, position=position, state_hash="00", result=result, path="" if result == OK else "$.x"
    )


def _store(stored: list[int], verdicts: list[tuple[int, str]]) -> InMemoryEventStore:
    store = InMemoryEventStore()

    async def fill() -> None:
        for position in stored:
            snapshot = Snapshot(
                consumer=NAME,
                position=position,
                format=1,
                config_hash="c",
                digest="d",
                state=b"",
                state_hash=b"",
            )
            await store.write_snapshot(snapshot, keep=10)
        for position, result in verdicts:
            await record(store, _verdict(position, result))

    asyncio.run(fill())
    return store


def _unresolved(stored: list[int], verdicts: list[tuple[int, str]]) -> list[int]:
    summary = asyncio.run(summarise(_store(stored, verdicts), NAME))
    return [v.position for v in summary.unresolved]


def test_a_mismatch_stays_unresolved_while_its_snapshot_is_stored() -> None:
    assert _unresolved([10, 20], [(10, OK), (20, MISMATCH)]) == [20]
    assert _unresolved([10, 20, 30], [(20, MISMATCH), (30, OK)]) == [20], "a newer ok check does not clear it"


def test_a_later_ok_check_of_the_same_snapshot_resolves_it() -> None:
    assert _unresolved([10, 20], [(20, MISMATCH), (20, OK)]) == []
    assert _unresolved([10, 20], [(20, OK), (20, MISMATCH)]) == [20], "the latest verdict counts"


def test_a_snapshot_gone_is_resolved_only_by_a_newer_one_checked_ok_after_the_mismatch() -> None:
    assert _unresolved([30], [(20, MISMATCH)]) == [20], "gone, nothing checked since"
    assert _unresolved([30], [(30, OK), (20, MISMATCH)]) == [20], "checked before the mismatch was recorded"
    assert _unresolved([30], [(20, MISMATCH), (10, OK)]) == [20], "an older snapshot checked since"
    assert _unresolved([30], [(20, MISMATCH), (30, MISMATCH)]) == [20, 30]
    assert _unresolved([30], [(20, MISMATCH), (30, OK)]) == []


def test_the_snapshots_line_names_the_first_unresolved_mismatch_or_says_all_are_resolved() -> None:
    failing = asyncio.run(summarise(_store([20], [(20, MISMATCH)]), NAME))
    assert describe(NAME, failing).endswith(
        "1 checked, 0 ok, 1 mismatched; newest checked at position 20 "
        "(MISMATCH at position 20, first difference at $.x: not used on restart)"
    )
    resolved = asyncio.run(summarise(_store([30], [(20, MISMATCH), (30, OK)]), NAME))
    assert describe(NAME, resolved).endswith(
        "2 checked, 1 ok, 1 mismatched; newest checked at position 30 "
        "(each mismatch since resolved: a newer snapshot was checked ok after it)"
    )
