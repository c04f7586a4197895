"""The descheduler's PodMigrationJobs in Kubernetes mode, against the fake API server and a real PostgreSQL: a real
round (the simulator's log, copied into PostgreSQL) has its jobs created as upstream's objects, their status written
back, every create and status write answered in the enactment ledger; kube-sync records nothing for them; a refusal
is recorded with the API server's reason, once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from allot_contracts.envelope import NewEvent
from allot_kube_sync.sync import PRODUCER as KUBE_SYNC
from allot_kube_sync.sync import KubeSync
from allot_reservation.testing import a_job_manifest
from allot_stack.enactment import ENACTED, REFUSED, TYPES, fold, verify_report
from allot_testing.fake_kube import FakeKube
from allot_testing.scenario import Scenario
from reservation_manager.adapters.jobs import PRODUCER, JobEnactor
from reservation_manager.adapters.kube import StatusWriter, wanted_statuses

pytestmark = pytest.mark.integration

LOWNODELOAD = {
    "name": "LowNodeLoad",
    "args": {
        "lowThresholds": {"cpu": 30, "memory": 30},
        "highThresholds": {"cpu": 60, "memory": 80},
        "anomalyCondition": {"consecutiveAbnormalities": 1},
    },
}
CONFIG = {
    "reservation-manager": {
        "descheduler": {
            "apiVersion": "descheduler/v1alpha2",
            "kind": "DeschedulerConfiguration",
            "deschedulingInterval": "60s",
            "profiles": [{"name": "lnl", "pluginConfig": [LOWNODELOAD]}],
        }
    }
}
HOT = {
    f"web-{i}": 2000 for i in range(6)
}  # millicores each, all on node "hot" (16 cores: 78 % with the system's)


def _pod(name: str) -> dict[str, Any]:
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web",
        "uid": "rs-web",
        "controller": True,
    }
    requests = {"cpu": "1", "memory": "2Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}, "ownerReferences": [owner]},
        "spec": {"nodeName": "hot", "containers": [{"name": "main", "resources": {"requests": requests}}]},
    }


def _metric(node: str, pods: dict[str, int]) -> dict[str, Any]:
    cpu = 500 + sum(pods.values())
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": node},
        "status": {
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": f"{cpu}m", "memory": f"{2 + 2 * len(pods)}Gi"}}
            },
            "podsMetric": [
                {"namespace": "shop", "name": p, "podUsage": {"resources": {"cpu": f"{u}m", "memory": "2Gi"}}}
                for p, u in sorted(pods.items())
            ],
        },
    }


def a_round() -> Scenario:
    """A hot node and an idle one, one descheduler round: it asks for PodMigrationJobs."""
    sc = Scenario(CONFIG)
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    for node in ("hot", "idle"):
        sc.apply(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": {"allocatable": alloc}}
        )
    sc.apply(*[_pod(name) for name in sorted(HOT)])
    sc.apply(_metric("hot", HOT), _metric("idle", {}))
    sc.advance(60)
    assert sc.of_type("migration.applied"), [r["message"] for r in sc.of_type("descheduler.round")]
    return sc


async def copy_log(sc: Scenario, store: Any, after: int = 0) -> int:
    """The simulator's log from ``after`` on, appended to the real store as each producer recorded it."""
    last = after
    for record in sc.events:
        if record.position <= after:
            continue
        new = NewEvent(
            stream_id=record.stream_id,
            event=record.decode(),
            event_id=record.event_id,
            causation_id=record.causation_id,
            correlation_id=record.correlation_id,
        )
        await store.append([new], producer=record.producer)
        last = record.position
    return last


async def outcomes(store: Any) -> list[tuple[str, dict[str, Any], str | None]]:
    return [(r.type, json.loads(r.payload), r.causation_id) async for r in store.iterate(producer=PRODUCER)]


def engine_of(sc: Scenario) -> Any:
    return sc.sim.host("reservation-manager").processor.engine  # type: ignore[attr-defined]


async def enact(sc: Scenario, store: Any, enactor: JobEnactor, writer: StatusWriter) -> None:
    engine = engine_of(sc)
    await enactor.refresh()
    await enactor.create_step(set(engine.jobs.jobs), 0.0)
    await writer.step(wanted_statuses(engine), (await store.head())[0])


async def test_a_round_creates_its_jobs_writes_their_status_and_records_every_outcome(
    kube: FakeKube, store: Any, client: Any
) -> None:
    sc = a_round()
    copied = await copy_log(sc, store)
    applied = {
        r.payload_dict()["job"]["name"]: r
        async for r in store.iterate(types={"migration.applied"}, producer="reservation-manager")
    }
    enactor = JobEnactor(client=client, store=store)
    writer = StatusWriter(client, None, enactor)
    await enact(sc, store, enactor, writer)

    engine = engine_of(sc)
    for name, decision in applied.items():
        obj = kube.get("PodMigrationJob", name)
        assert obj is not None, name
        manifest = decision.payload_dict()["manifest"]
        assert obj["apiVersion"] == "scheduling.koordinator.sh/v1alpha1" and obj["kind"] == "PodMigrationJob"
        assert obj["spec"] == manifest["spec"]  # podRef with the pod's uid, the reservation template
        assert obj["spec"]["podRef"]["namespace"] == "shop" and obj["spec"]["podRef"]["uid"]
        assert obj["metadata"]["labels"]["koordinator.sh/created-by"] == "koord-descheduler"
        assert obj["metadata"]["annotations"]["koordinator.sh/evict-trigger"] == "LowNodeLoad"
        assert obj["status"]["phase"] == engine.jobs.jobs[name].phase
    posts = [q for m, p, q in kube.requests if m == "POST" and p.endswith("/podmigrationjobs")]
    assert posts == [{"fieldManager": "allot-reservation-manager"}] * len(applied)

    got = await outcomes(store)
    created = {c: p for t, p, c in got if t == "migration.job_enacted"}
    assert set(created) == {d.event_id for d in applied.values()}
    assert all(
        p["uid"] == kube.get("PodMigrationJob", p["job"]["name"])["metadata"]["uid"] for p in created.values()
    )  # type: ignore[index]
    assert sorted(p["job"]["name"] for t, p, _ in got if t == "migration.status_enacted") == sorted(applied)

    # the jobs run to their end: the new status reaches the objects, each write answered once
    for _ in range(6):
        sc.advance(30).advance(0)
    await copy_log(sc, store, copied)
    await enact(sc, store, enactor, writer)
    await enact(sc, store, enactor, writer)  # nothing changed: nothing written or recorded twice
    phases = {name: kube.get("PodMigrationJob", name)["status"]["phase"] for name in applied}  # type: ignore[index]
    assert phases == {name: job.phase for name, job in engine.jobs.jobs.items()}
    assert "Succeeded" in phases.values(), phases
    done = [n for n, phase in phases.items() if phase == "Succeeded"]
    assert kube.get("PodMigrationJob", done[0])["status"]["message"].startswith("Bind Pod")  # type: ignore[index]
    assert kube.count("POST", r"/podmigrationjobs$") == len(applied)
    got = await outcomes(store)
    statuses = [p for t, p, _ in got if t == "migration.status_enacted"]
    decisions = [p["decision"] for p in statuses]
    assert len(decisions) == len(set(decisions)) >= len(applied) + len(done)  # one outcome per decision
    assert {p["job"]["name"] for p in statuses if p["phase"] == "Succeeded"} == set(done)

    ledger = fold([r async for r in store.iterate(types=TYPES)])
    own = [e for e in ledger.entries.values() if e.type == "migration.applied"]
    assert len(own) == len(applied) and {e.state for e in own} == {ENACTED}
    assert not [e for e in ledger.entries.values() if e.state == "open"]
    head = (await store.head())[0]
    report = await verify_report(store, until=head, now=10**18, bound=300_000_000)
    assert report is not None
    line, data = report
    assert data["states"][ENACTED] == len(applied) + len(decisions) and not data["without_outcome"], line
    assert "has its outcome" in line


async def test_a_refusal_is_recorded_with_the_api_servers_reason_and_not_asked_again(
    kube: FakeKube, store: Any, client: Any
) -> None:
    sc = a_round()
    await copy_log(sc, store)
    names = sorted(p["job"]["name"] for p in sc.of_type("migration.applied"))
    kube.fail("POST", r"/podmigrationjobs$", status=500, times=1)  # transient: asked again
    kube.fail("POST", r"/podmigrationjobs$", status=422, message="spec.podRef: Invalid value", times=1)
    enactor = JobEnactor(client=client, store=store, backoff=(0.0, 0.0))
    writer = StatusWriter(client, None, enactor)
    for _ in range(3):
        await enact(sc, store, enactor, writer)
    # the first job's call failed transiently and was asked again; the second's was refused, once
    assert kube.count("POST", r"/podmigrationjobs$") == len(names) + 1
    got = await outcomes(store)
    (refused,) = [p for t, p, _ in got if t == "migration.job_enactment_failed"]
    assert refused["reason"] == "Invalid" and refused["message"] == "spec.podRef: Invalid value"
    assert refused["attempts"] == 1 and refused["job"]["name"] == names[1]
    assert kube.get("PodMigrationJob", names[1]) is None
    (made,) = [p for t, p, _ in got if t == "migration.job_enacted"]
    assert made["job"]["name"] == names[0] and made["attempts"] == 2
    ledger = fold([r async for r in store.iterate(types=TYPES)])
    (entry,) = [e for e in ledger.entries.values() if e.type == "migration.applied" and e.state == REFUSED]
    assert entry.message == "Invalid spec.podRef: Invalid value"
    for _ in range(3):  # the refused job is never asked for again
        await enact(sc, store, enactor, writer)
    assert kube.count("POST", r"/podmigrationjobs$") == len(names) + 1
    assert not [
        p
        for t, p, _ in await outcomes(store)
        if t == "migration.status_enacted" and p["job"]["name"] == names[1]
    ]


async def test_a_refused_status_write_is_recorded_and_not_retried(
    kube: FakeKube, store: Any, client: Any
) -> None:
    sc = a_round()
    copied = await copy_log(sc, store)
    enactor = JobEnactor(client=client, store=store)
    writer = StatusWriter(client, None, enactor)
    await enact(sc, store, enactor, writer)
    for _ in range(6):
        sc.advance(30).advance(0)
    await copy_log(sc, store, copied)
    kube.fail("PATCH", r"/podmigrationjobs/[^/]+/status$", status=403, message="cannot patch", times=100)
    patches = kube.count("PATCH", r"/podmigrationjobs/[^/]+/status$")
    for _ in range(3):
        await enact(sc, store, enactor, writer)
    failed = [p for t, p, _ in await outcomes(store) if t == "migration.status_enactment_failed"]
    assert failed and {(p["reason"], p["message"]) for p in failed} == {("Forbidden", "cannot patch")}
    # each changed status asked once: the refusal is final
    assert kube.count("PATCH", r"/podmigrationjobs/[^/]+/status$") == patches + len(failed)
    ledger = fold([r async for r in store.iterate(types=TYPES)])
    refused = [e for e in ledger.entries.values() if e.state == REFUSED]
    assert len(refused) == len(failed) and all(e.message == "Forbidden cannot patch" for e in refused)


async def test_kube_sync_records_nothing_for_allots_own_jobs(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any
) -> None:
    sc = a_round()
    own = sorted(p["job"]["name"] for p in sc.of_type("migration.applied"))
    enactor = JobEnactor(client=client, store=store)
    writer = StatusWriter(client, None, enactor)
    sync = KubeSync(store=store, client=client, watch_timeout=2, backoff=(0.05, 0.2), absent_retry=0.5)
    runner = running(sync.run)
    try:
        await eventually(lambda: sync.synced, what="first lists")
        # the round is decided while kube-sync watches: its jobs arrive on the watch, newer than its last list
        await copy_log(sc, store)
        await enact(sc, store, enactor, writer)
        assert all(kube.get("PodMigrationJob", name) is not None for name in own)
        users = a_job_manifest("users-job", pod="shop/web-0")
        del users["metadata"]["uid"]
        kube.create(users)

        async def recorded() -> list[tuple[str, str]]:
            return [
                (r.type, r.payload_dict()["job"]["name"])
                async for r in store.iterate(
                    types={"migration.applied", "migration.deleted"}, producer=KUBE_SYNC
                )
            ]

        await asyncio.sleep(0.5)  # the watches have delivered what they will
        assert await recorded() == [("migration.applied", "users-job")]
        kube.update("PodMigrationJob", own[0], lambda o: o.setdefault("status", {}).update(phase="Running"))
        kube.delete("PodMigrationJob", own[-1])  # an operator deletes one: that is input
        for _ in range(50):
            if len(await recorded()) == 2:
                break
            await asyncio.sleep(0.1)
        assert await recorded() == [("migration.applied", "users-job"), ("migration.deleted", own[-1])]
    finally:
        await runner.close()


async def test_a_gang_moved_whole_has_a_job_object_per_member_each_answered(
    kube: FakeKube, store: Any, client: Any
) -> None:
    """LowNodeLoad with ``gangMigration: Whole``: the round's jobs for both members of gang ml/train are created in
    the API server (one PodMigrationJob per member, each naming its pod), every create answered in the ledger."""
    from allot_testing.gang_round import cluster

    sc = cluster(gangMigration="Whole")
    first = sc.of_type("descheduler.round")[0]
    members = {c["job"]: c["pod"] for c in first["candidates"] if c.get("chosen")}
    assert sorted(members.values()) == ["ml/train-0", "ml/train-1"]
    await copy_log(sc, store)
    enactor = JobEnactor(client=client, store=store)
    await enact(sc, store, enactor, StatusWriter(client, None, enactor))
    for job, key in members.items():
        obj = kube.get("PodMigrationJob", job)
        assert obj is not None, job
        assert f"{obj['spec']['podRef']['namespace']}/{obj['spec']['podRef']['name']}" == key
    created = {p["job"]["name"] for t, p, _ in await outcomes(store) if t == "migration.job_enacted"}
    assert set(members) <= created
