"""reservation-manager under the service host: a standalone eviction deletes and re-submits the pod in one decision,
the host follows the new life (events about it are not skipped as stale), and a projection rebuilt from the log, and
``replay --verify``, reproduce what the live service decided."""

from __future__ import annotations

import uuid

import pytest

from allot_contracts.envelope import NewEvent, RecordedEvent, stream_id
from allot_contracts.events import (
    Event,
    MigrationApplied,
    NodeRegistered,
    ObjectRef,
    PodObserved,
    QuotaAdmitted,
    ReservationPlaced,
)
from allot_eventstore.memory import InMemoryEventStore
from allot_eventstore.protocol import Checkpoint
from allot_reservation.testing import a_job_manifest, a_pod_manifest, node_registered
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from reservation_manager.processor import ReservationManager

POD = ObjectRef(namespace="default", name="web-0")


class Log:
    def __init__(self) -> None:
        self.store = InMemoryEventStore()
        self.host = Host(ReservationManager({}))
        self.n = 0

    def record(self, event: Event, producer: str, stream: str = "x") -> list[NewEvent]:
        self.n += 1
        self.store.append_sync(
            [
                NewEvent(
                    stream_id=stream, event=event, event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, str(self.n)))
                )
            ],
            producer=producer,
        )
        record: RecordedEvent = self.store.events[-1]
        if not self.host.wants(record):
            return []
        news = self.host.step(record)
        if news:
            self.store.append_sync(
                news, producer=self.host.name, checkpoint=Checkpoint(self.host.name, record.position)
            )
        return news


def node(name: str) -> NodeRegistered:
    return node_registered(
        {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "10"}}}
    )


def run_migration() -> tuple[Log, str]:
    log = Log()
    log.record(node("n1"), "node-reporter")
    log.record(node("n2"), "node-reporter")
    log.record(
        PodObserved(pod=POD, uid="u-old", manifest=a_pod_manifest("web-0", uid="u-old", node="n1")), "api"
    )
    news = log.record(
        MigrationApplied(
            job=ObjectRef(name="j1"), uid="uj", manifest=a_job_manifest("j1", pod="default/web-0")
        ),
        "api",
    )
    reservation = next(n.event for n in news if n.tag == "reservation.accepted.v1")
    news = log.record(
        ReservationPlaced(reservation=reservation.reservation, uid=reservation.uid, node="n2", decision={}),  # type: ignore[attr-defined]
        "device-allocator",
    )
    tags = [n.tag.rsplit(".", 1)[0] for n in news]
    assert tags[-3:] == ["migration.evicted", "pod.deleted", "pod.submitted"]
    new_uid = news[-1].event.uid  # type: ignore[attr-defined]
    return log, new_uid


def test_the_host_follows_the_life_its_own_eviction_began() -> None:
    log, new_uid = run_migration()
    assert log.host.lives.current["default/web-0"] == new_uid
    news = log.record(
        QuotaAdmitted(pod=POD, uid=new_uid, attempt=1, quota="", request={}, used={}, limit={}),
        "quota-manager",
        stream_id("pod", "default/web-0"),
    )
    (resolved,) = news
    assert resolved.tag == "reservation.resolved.v1"
    assert resolved.event.match is not None  # type: ignore[attr-defined]
    # a decision about the life the eviction ended is stale now
    assert (
        log.record(
            QuotaAdmitted(pod=POD, uid="u-old", attempt=1, quota="", request={}, used={}, limit={}),
            "quota-manager",
        )
        == []
    )


def test_rebuild_and_verify_reproduce_the_live_service() -> None:
    log, _ = run_migration()
    rebuilt = Host(ReservationManager({}))
    outputs: dict[str, list[RecordedEvent]] = {}
    for record in log.store.events:
        if record.producer == log.host.name and record.causation_id:
            outputs.setdefault(record.causation_id, []).append(record)
    for record in log.store.events:
        if rebuilt.wants(record):
            rebuilt.apply_recorded(record, outputs.get(record.event_id, ()))
    assert rebuilt.digest() == log.host.digest()
    assert rebuilt.lives.current == log.host.lives.current


@pytest.mark.asyncio
async def test_replay_verify_finds_no_mismatch() -> None:
    log, _ = run_migration()
    checked, mismatches = await verify_decisions(Host(ReservationManager({})), log.store)
    assert checked >= 5 and mismatches == []
