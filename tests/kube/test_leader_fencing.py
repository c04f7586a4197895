"""Leader election with fencing, against the fake API server and a real PostgreSQL: a leader paused past its lease
is replaced, and when it resumes none of its writes land — neither in the log nor on the API server — and the
refusal is recorded."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.errors import Fenced
from allot_contracts.events import ObjectRef, PodBindRequested
from allot_eventstore import Fence
from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.kube.lease import Leadership, LeadershipLost, LeaseConfig
from allot_testing.builders import a_pod
from allot_testing.fake_kube import FakeKube
from binder.adapters.kube import BindWorker, View
from binder.processor import BindRequest

pytestmark = pytest.mark.integration

FAST = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}


async def candidate(kube: FakeKube, tmp_path: Any, database_url: str, identity: str) -> Leadership:
    from allot_runtime.kube import api_client

    client = await api_client(kube.kubeconfig(tmp_path))
    client.user_agent = f"allot-binder/{identity}"
    config = LeaseConfig(namespace="allot-system", name="allot-binder", identity=identity, **FAST)
    return Leadership(
        client=client, store=PostgresEventStore.connect(database_url), config=config, decider="binder"
    )


async def request_binding(store: Any, pod: dict[str, Any]) -> BindRequest:
    ref = ObjectRef(namespace="default", name=pod["metadata"]["name"])
    uid = pod["metadata"]["uid"]
    event = PodBindRequested(pod=ref, uid=uid, attempt=1, node="n1")
    await store.append(
        [NewEvent(stream_id=stream_id("pod", ref.key), event=event, event_id=derived_event_id("t", uid, 0))],
        producer="binder",
    )
    return BindRequest(pod=ref, uid=uid, attempt=1, node="n1")


def worker(store: Any, client: Any, leadership: Leadership, requests: list[BindRequest]) -> BindWorker:
    async def view() -> View:
        return View(ready=True, requests=list(requests), patches={})

    return BindWorker(store=store, client=client, view=view, leadership=leadership, backoff=(0.01, 0.05))


async def test_a_paused_leader_is_replaced_and_none_of_its_writes_land(
    kube: FakeKube, tmp_path: Any, database_url: str, store: Any
) -> None:
    first = await candidate(kube, tmp_path, database_url, "a")
    second = await candidate(kube, tmp_path, database_url, "b")
    stop = asyncio.Event()
    try:
        assert await first.acquire(stop)
        assert first.term == 1
        lease = kube.get("Lease", "allot-binder", "allot-system")
        assert lease["spec"]["holderIdentity"] == "a"

        # The follower does not take a lease that is being renewed.
        held = asyncio.create_task(first.hold(stop))
        following = asyncio.create_task(second.acquire(stop))
        await asyncio.sleep(1.5)
        assert not following.done()

        # Pause the leader: no renewals, nothing runs (as under SIGSTOP); the follower takes over after the lease.
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        paused_at = time.monotonic()
        assert await asyncio.wait_for(following, timeout=5)
        assert time.monotonic() - paused_at >= FAST["lease_duration"]
        assert second.term == 2
        assert kube.get("Lease", "allot-binder", "allot-system")["spec"]["leaseTransitions"] == 1
        renewing = asyncio.create_task(second.hold(stop))  # the new leader keeps its lease

        # Meanwhile a pod waits to be bound, and the new leader binds it under its term.
        pods = [kube.create(a_pod(f"p{i}")) for i in range(2)]
        requests = [await request_binding(store, pod) for pod in pods]
        new_store = PostgresEventStore.connect(database_url, fence=second.fence)
        old_store = PostgresEventStore.connect(database_url, fence=first.fence)
        try:
            await worker(new_store, second.client, second, requests[:1]).step()

            # Resume the old leader exactly where a write was due: every write is refused, none reaches the API
            # server or the log, the refusal is recorded once, and it steps down.
            before = len(kube.writers)
            stale = worker(old_store, first.client, first, requests)
            await stale.run(asyncio.Event())  # returns: it stopped writing
            with pytest.raises(Fenced) as refused:
                await old_store.append(
                    [
                        NewEvent(
                            stream_id="pod:default/p1",
                            event=PodBindRequested(
                                pod=requests[1].pod, uid=requests[1].uid, attempt=2, node="n2"
                            ),
                            event_id=derived_event_id("t", "stale", 0),
                        )
                    ],
                    producer="binder",
                )
            assert (refused.value.term, refused.value.current) == (1, 2)
            with pytest.raises(LeadershipLost):
                await first.hold(asyncio.Event())
            assert [w for w in kube.writers[before:] if w[2] == "allot-binder/a"] == []
        finally:
            await new_store.close()
            await old_store.close()

        bindings = [b["metadata"]["name"] for b in kube.bindings]
        assert bindings == ["p0"]  # p1 was only ever the old leader's to write, and it wrote nothing
        assert kube.get("Pod", "p1")["spec"].get("nodeName") is None
        recorded = [
            (r.type, r.producer, r.metadata.get("fence"), json.loads(r.payload))
            async for r in store.iterate(types={"pod.bound", "leader.elected", "leader.write_refused"})
        ]
        assert [(t, p, f) for t, p, f, _ in recorded] == [
            ("leader.elected", "binder.lease", "binder/1"),
            ("leader.elected", "binder.lease", "binder/2"),
            ("pod.bound", "binder.kube", "binder/2"),
            ("leader.write_refused", "binder.fence", None),
        ]
        refusal = recorded[-1][3]
        assert (refusal["holder"], refusal["term"], refusal["target"]) == ("a", 1, "api")
        assert recorded[1][3]["previous"] == "a"
        stop.set()
        await renewing
    finally:
        stop.set()
        for leader in (first, second):
            await leader.client.close()
            await leader.store.close()


async def test_a_recreated_lease_continues_past_the_recorded_term(
    kube: FakeKube, tmp_path: Any, database_url: str, store: Any
) -> None:
    await store.advance_fence(Fence("binder", 7), holder="someone-before")
    leader = await candidate(kube, tmp_path, database_url, "c")
    try:
        assert await asyncio.wait_for(leader.acquire(asyncio.Event()), timeout=5)
        assert leader.term == 8
        assert await store.advance_fence(Fence("binder", 0), holder="x") == (8, "c")
    finally:
        await leader.client.close()
        await leader.store.close()


async def test_releasing_on_stop_hands_over_at_once(
    kube: FakeKube, tmp_path: Any, database_url: str, store: Any
) -> None:
    first = await candidate(kube, tmp_path, database_url, "a")
    second = await candidate(kube, tmp_path, database_url, "b")
    try:
        stop = asyncio.Event()
        assert await first.acquire(stop)
        holding = asyncio.create_task(first.hold(stop))
        await asyncio.sleep(0.2)
        stop.set()
        await holding
        started = time.monotonic()
        assert await asyncio.wait_for(second.acquire(asyncio.Event()), timeout=5)
        assert time.monotonic() - started < FAST["lease_duration"] + 0.5
        assert second.term == 2
    finally:
        for leader in (first, second):
            await leader.client.close()
            await leader.store.close()
