"""Reservation status writes in the enactment ledger: each write of reservation-manager's worker records the outcome
of the latest status decision it carries out (enacted, also when nothing changed; refused for good, e.g. a
Reservation that is not in the cluster), so ``allot replay --verify`` finds every decision answered. So does its
garbage collection: the DELETE of a finished Reservation answers the ``reservation.removed`` that dropped it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from allot_cli.kube.ledger import fold
from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.errors import TransientError
from allot_contracts.events import Event, ObjectRef, ReservationPlaced, ReservationUnschedulable
from allot_reservation.testing import Driver, a_reservation_manifest
from allot_testing.fake_kube import FakeKube
from reservation_manager.adapters.kube import StatusWriter, wanted_statuses
from reservation_manager.adapters.status_ledger import PRODUCER, StatusLedger

pytestmark = pytest.mark.integration


class Recorded:
    """The Driver's decisions, and the device-allocator's it is fed, recorded in the log as the services do."""

    def __init__(self, store: Any, driver: Driver) -> None:
        self.store, self.driver, self.count = store, driver, 0

    async def append(self, producer: str, *events: Event) -> None:
        for event in events:
            self.count += 1
            name = event.reservation.name  # type: ignore[attr-defined]
            new = NewEvent(
                stream_id=stream_id("reservation", name),
                event=event,
                event_id=derived_event_id(producer, str(self.count), 0),
            )
            await self.store.append([new], producer=producer)

    async def decided_by_others(self, event: Event) -> None:
        await self.append("device-allocator", event)
        await self.append("reservation-manager", *self.driver.feed(event))

    async def head(self) -> int:
        return int((await self.store.head())[0])


def process(store: Any, client: Any, log: Recorded) -> Callable[[], Awaitable[None]]:
    """One reservation-manager worker's pass (a new one: as after a restart): fold the log, write the projection."""
    ledger = StatusLedger(store)
    writer = StatusWriter(client, ledger=ledger)

    async def write() -> None:
        await ledger.refresh()
        await writer.step(wanted_statuses(log.driver.engine), await log.head())

    return write


async def outcomes(store: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(r.type, json.loads(r.payload)) async for r in store.iterate(producer=PRODUCER)]


async def test_every_reservation_status_decision_gets_its_outcome(
    kube: FakeKube, store: Any, client: Any
) -> None:
    kube.create(a_reservation_manifest("r1", ttl="1h"))
    d = Driver({"mode": "kubernetes"})
    d.node("n1")
    log = Recorded(store, d)
    await log.append("reservation-manager", *d.reservation(a_reservation_manifest("r1", ttl="1h")))
    await log.append(
        "reservation-manager", *d.reservation(a_reservation_manifest("elsewhere"))
    )  # not in the cluster
    write = process(store, client, log)
    await write()
    got = await outcomes(store)
    assert [(t, p["reservation"]["name"]) for t, p in got] == [
        ("reservation.status_enactment_failed", "elsewhere"),
        ("reservation.status_enacted", "r1"),
    ]
    assert got[0][1]["reason"] == "NotFound" and got[1][1]["phase"] == "Pending"

    # Placed by the device-allocator: Available written, and answered; an unschedulable verdict after it changes
    # nothing the status shows (the reservation is placed) and is answered without a write.
    record = d.engine.world.book.get("r1")
    assert record is not None
    await log.decided_by_others(
        ReservationPlaced(reservation=ObjectRef(name="r1"), uid=record.uid, node="n1", decision={})
    )
    await write()
    assert kube.get("Reservation", "r1")["status"]["phase"] == "Available"  # type: ignore[index]
    patches = len(kube.patches)
    await log.decided_by_others(
        ReservationUnschedulable(
            reservation=ObjectRef(name="r1"), uid=record.uid, message="0/1 nodes are available", codes=[]
        )
    )
    await write()
    assert len(kube.patches) == patches
    got = await outcomes(store)
    assert [(t, p["phase"], p["message"]) for t, p in got[2:]] == [
        ("reservation.status_enacted", "Available", ""),
        ("reservation.status_enacted", "Available", "the status already showed it: nothing to write"),
    ]
    await write()  # answered once: nothing recorded twice
    assert len(await outcomes(store)) == 4

    # The ledger read back: every Reservation decision answered, none open.
    ledger_read = fold([r async for r in store.iterate()])
    states = {(e.type, e.state) for e in ledger_read.entries.values() if e.type.startswith("reservation.")}
    assert states == {
        ("reservation.accepted", "refused"),
        ("reservation.accepted", "enacted"),
        ("reservation.placed", "enacted"),
        ("reservation.unschedulable", "enacted"),
    }


async def test_a_garbage_collected_reservation_is_deleted_once_and_the_removal_answered(
    kube: FakeKube, store: Any, client: Any
) -> None:
    d = Driver({"mode": "kubernetes"})
    d.node("n1")
    log = Recorded(store, d)
    for name in ("r1", "r2", "r3"):
        kube.create(a_reservation_manifest(name, ttl="1h"))
        await log.append("reservation-manager", *d.reservation(a_reservation_manifest(name, ttl="1h")))
    write = process(store, client, log)
    await write()
    await log.append("reservation-manager", *d.tick(3600))  # expired: Failed, written
    await write()
    assert kube.get("Reservation", "r2")["status"]["phase"] == "Failed"  # type: ignore[index]

    # Garbage-collected; the API server fails the first DELETE of r2 and of r3 (500): asked again on the next pass.
    await log.append("reservation-manager", *d.tick(3600 + 86400))
    removals = {r.stream_id: r.event_id async for r in store.iterate(types={"reservation.removed"})}
    assert set(removals) == {"reservation:r1", "reservation:r2", "reservation:r3"}
    for name in ("r2", "r3"):
        kube.fail("DELETE", f"/reservations/{name}$", status=500)
    for _ in range(2):
        with contextlib.suppress(TransientError):
            await write()
    assert kube.get("Reservation", "r1") is None and kube.get("Reservation", "r2") is None
    assert kube.get("Reservation", "r3") is not None

    # Restarted: the garbage collection still unanswered in the log (r3) is carried out; the answered ones are not
    # asked again.
    for _ in range(2):
        await process(store, client, log)()
    assert kube.get("Reservation", "r3") is None
    assert [kube.count("DELETE", f"/reservations/{n}$") for n in ("r1", "r2", "r3")] == [1, 2, 2]

    deletions = [r async for r in store.iterate(producer=PRODUCER, types={"reservation.deletion_enacted"})]
    assert [(r.stream_id, r.causation_id, r.payload_dict()["attempts"]) for r in deletions] == [
        ("reservation:r1", removals["reservation:r1"], 1),
        ("reservation:r2", removals["reservation:r2"], 2),
        ("reservation:r3", removals["reservation:r3"], 1),
    ]
    ledger_read = fold([r async for r in store.iterate()])
    removed = [e.state for e in ledger_read.entries.values() if e.type == "reservation.removed"]
    assert removed == ["enacted", "enacted", "enacted"]
