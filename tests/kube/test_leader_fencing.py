"""Leader election with fencing, against the fake API server and a real PostgreSQL: a leader paused past its lease
is replaced, and when it resumes none of its writes land — neither in the log nor on the API server — and the
refusal is recorded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.errors import Fenced
from allot_contracts.events import ObjectRef, PodBindRequested
from allot_eventstore import Fence
from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.kube.lease import GuardedStore, Leadership, LeadershipLost, LeaseConfig
from allot_testing.builders import a_pod
from allot_testing.fake_kube import FAST_LEASE, FakeKube
from binder.adapters.kube import BindWorker, View
from binder.processor import BindRequest

pytestmark = pytest.mark.integration

FAST = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}


async def candidate(
    kube: FakeKube, tmp_path: Any, database_url: str, identity: str, decider: str = "binder"
) -> Leadership:
    from allot_runtime.kube import api_client

    client = await api_client(kube.kubeconfig(tmp_path))
    client.user_agent = f"allot-{decider}/{identity}"
    config = LeaseConfig(namespace="allot-system", name=f"allot-{decider}", identity=identity, **FAST)
    return Leadership(
        client=client, store=PostgresEventStore.connect(database_url), config=config, decider=decider
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


async def test_releasing_after_the_stop_hands_over_at_once(
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
        # the lease outlives the stop, while the stopping leader records its last writes (was: released at the stop)
        taking = asyncio.create_task(second.acquire(asyncio.Event()))
        await asyncio.sleep(0.3)
        assert not taking.done(), "the follower took over before the stopping leader released the lease"
        started = time.monotonic()
        await first.release()
        assert await asyncio.wait_for(taking, timeout=5)
        assert time.monotonic() - started < FAST["lease_duration"] / 2  # at once, not when the lease lapses
        assert second.term == 2
    finally:
        for leader in (first, second):
            await leader.client.close()
            await leader.store.close()


async def test_a_paused_kube_sync_leader_records_nothing_and_its_refusal_is_recorded(
    kube: FakeKube, tmp_path: Any, database_url: str, store: Any, eventually: Any
) -> None:
    from allot_kube_sync.sync import KubeSync

    first = await candidate(kube, tmp_path, database_url, "a", decider="kube-sync")
    second = await candidate(kube, tmp_path, database_url, "b", decider="kube-sync")
    stop = asyncio.Event()
    start = (await store.head())[0]
    fenced = PostgresEventStore.connect(database_url, fence=Fence("kube-sync", 1))
    try:
        assert await first.acquire(stop)
        # Paused before it recorded anything (its lease is never renewed): the other replica takes over.
        assert await asyncio.wait_for(second.acquire(stop), timeout=5)
        assert (first.term, second.term) == (1, 2)
        kube.create(_synced_pod("p"))

        # The old leader resumes and lists: every append is refused, the refusal is recorded once, it steps down.
        stale = KubeSync(
            store=GuardedStore(fenced, first, "recording the cluster's objects"),
            client=first.client,
            watch_timeout=2,
            backoff=(0.05, 0.2),
        )
        running = asyncio.create_task(stale.run(stop))

        async def refused() -> bool:
            return [r async for r in store.iterate(types={"leader.write_refused"}, after=start)] != []

        await eventually(refused, timeout=10, what="the refusal recorded")
        await asyncio.sleep(0.5)  # its list-watches keep retrying
        stop.set()
        await asyncio.wait_for(running, timeout=10)
        with pytest.raises(LeadershipLost):
            await first.hold(asyncio.Event())
        recorded = [(r.type, r.producer, json.loads(r.payload)) async for r in store.iterate(after=start)]
        assert [t for t, _, _ in recorded] == ["leader.elected", "leader.elected", "leader.write_refused"]
        refusal = recorded[-1][2]
        assert (refusal["decider"], refusal["holder"], refusal["term"], refusal["current"]) == (
            "kube-sync",
            "a",
            1,
            2,
        )
        assert refusal["target"] == "log"
    finally:
        stop.set()
        await fenced.close()
        for leader in (first, second):
            await leader.client.close()
            await leader.store.close()


# -- kube-sync: two replicas, one records ---------------------------------------------------------------------------

ALLOT = str(Path(sys.executable).parent / "allot")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _synced_pod(name: str) -> dict[str, Any]:
    pod = a_pod(name, namespace="team")
    del pod["metadata"]["uid"]
    pod["spec"]["schedulerName"] = "allot-scheduler"
    pod["status"] = {"phase": "Pending"}
    return pod


class KubeSyncProcess:
    """``allot kube-sync`` as its own process, in lease mode with short durations."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc = proc
        self.port = port

    @classmethod
    async def start(cls, kube: FakeKube, tmp_path: Any, database_url: str) -> KubeSyncProcess:
        port = _free_port()
        env = {
            **os.environ,
            "ALLOT_DATABASE_URL": database_url,
            "ALLOT_KUBECONFIG": kube.kubeconfig(tmp_path),
            "ALLOT_HTTP_HOST": "127.0.0.1",
            "ALLOT_HTTP_PORT": str(port),
            **FAST_LEASE,
            "ALLOT_LEASE_NAMESPACE": "allot-system",
            "ALLOT_LOG_FORMAT": "text",
        }
        err = os.open(tmp_path / f"kube-sync-{port}.log", os.O_WRONLY | os.O_CREAT)
        try:
            proc = await asyncio.create_subprocess_exec(
                ALLOT, "kube-sync", env=env, stdout=asyncio.subprocess.DEVNULL, stderr=err
            )
        finally:
            os.close(err)
        return cls(proc, port)

    async def health(self) -> dict[str, Any] | None:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{self.port}/healthz") as r,
            ):
                return dict(await r.json())
        return None

    async def phase(self) -> str:
        return str((await self.health() or {}).get("phase", ""))

    async def stop(self) -> int:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
                self.proc.terminate()
        return await asyncio.wait_for(self.proc.wait(), timeout=15)


async def test_kube_sync_processes_in_lease_mode_hand_over_on_stop(
    kube: FakeKube,
    tmp_path: Any,
    database_url: str,
    store: Any,
    eventually: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run_kube_sync`` as the command runs it, twice in this process: one leads, the other stands by and takes over
    with the next term when the first stops (releasing the Lease)."""
    from allot_kube_sync.process import run_kube_sync

    for name, value in {
        "ALLOT_DATABASE_URL": database_url,
        "ALLOT_KUBECONFIG": kube.kubeconfig(tmp_path),
        "ALLOT_HTTP_HOST": "127.0.0.1",
        **FAST_LEASE,
        "ALLOT_LOG_FORMAT": "text",
    }.items():
        monkeypatch.setenv(name, value)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    start = (await store.head())[0]

    async def fences(stream: str) -> list[str | None]:
        return [
            r.metadata.get("fence")
            async for r in store.iterate(types={"pod.submitted"}, after=start)
            if r.stream_id == stream
        ]

    async def phase(port: int) -> str:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/healthz") as r,
            ):
                return str((await r.json())["phase"])
        return ""

    kube.create(_synced_pod("before"))
    replicas = []
    try:
        for _ in range(2):
            port = _free_port()
            monkeypatch.setenv("ALLOT_HTTP_PORT", str(port))
            stop = asyncio.Event()
            replicas.append((port, stop, asyncio.create_task(run_kube_sync(stop=stop))))
            await eventually(lambda port=port: phase(port), timeout=20, what="the replica answers")
        (first_port, first_stop, first), (second_port, _, _) = replicas
        await eventually(lambda: fences("pod:team/before"), timeout=20, what="the leader records")
        assert await fences("pod:team/before") == ["kube-sync/1"]

        async def standing_by() -> bool:
            return (await phase(second_port)).startswith("standing by")

        await eventually(standing_by, timeout=10, what="the second stands by")
        first_stop.set()
        await asyncio.wait_for(first, timeout=10)
        kube.create(_synced_pod("after"))
        await eventually(lambda: fences("pod:team/after"), timeout=20, what="the second records")
        assert await fences("pod:team/after") == ["kube-sync/2"]
        holder = (kube.get("Lease", "allot-kube-sync", "allot-system") or {})["spec"]["holderIdentity"]
        assert holder and holder.startswith(socket.gethostname())
    finally:
        for _, stop, task in replicas:
            stop.set()
            await asyncio.wait_for(task, timeout=10)
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.slow
async def test_kube_sync_replicas_record_one_at_a_time_and_a_resumed_ex_leader_records_nothing(
    kube: FakeKube, tmp_path: Any, database_url: str, store: Any, eventually: Any
) -> None:
    async def recorded() -> list[tuple[str, str, str | None]]:
        return [
            (r.type, r.stream_id, r.metadata.get("fence"))
            async for r in store.iterate(
                types={"pod.submitted", "leader.elected", "leader.write_refused"},
                after=start,
            )
        ]

    def holder() -> str:
        lease = kube.get("Lease", "allot-kube-sync", "allot-system") or {}
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    start = (await store.head())[0]
    kube.create(_synced_pod("before"))
    first = await KubeSyncProcess.start(kube, tmp_path, database_url)
    second: KubeSyncProcess | None = None
    third: KubeSyncProcess | None = None
    try:
        await eventually(first.health, timeout=30, what="the first replica answers")
        await eventually(
            lambda: _has(recorded, ("pod.submitted", "pod:team/before")), timeout=30, what="recorded"
        )
        leader = holder()
        assert leader
        second = await KubeSyncProcess.start(kube, tmp_path, database_url)

        async def standing_by() -> bool:
            return (await second.phase()).startswith("standing by")

        await eventually(standing_by, timeout=30, what="the second replica stands by")
        await asyncio.sleep(1.5)  # more than the lease duration: the leader renews, the standby keeps waiting
        assert holder() == leader and await standing_by()

        # Pause the leader (SIGSTOP) past its lease: the standby takes over with term 2 and records from now on.
        first.proc.send_signal(signal.SIGSTOP)
        await eventually(lambda: holder() not in ("", leader), timeout=15, what="the standby takes over")

        async def running() -> bool:
            return await second.phase() == "running"

        await eventually(running, timeout=15, what="the new leader runs")
        kube.create(_synced_pod("during"))
        await eventually(
            lambda: _has(recorded, ("pod.submitted", "pod:team/during", "kube-sync/2")),
            timeout=15,
            what="the new leader records",
        )
        # The new leader stops (handing the lease back); a pod arrives that nobody has recorded yet.
        assert await second.stop() == 0
        kube.create(_synced_pod("after"))

        # The old leader resumes: its open watch hands it the pod, its append under term 1 is refused and
        # recorded, and it exits for its supervisor to restart it as a standby.
        first.proc.send_signal(signal.SIGCONT)
        assert await asyncio.wait_for(first.proc.wait(), timeout=15) == 1
        log = await recorded()
        assert not [entry for entry in log if entry[1] == "pod:team/after"]
        assert [e for e in log if e[0] == "pod.submitted"] == [
            ("pod.submitted", "pod:team/before", "kube-sync/1"),
            ("pod.submitted", "pod:team/during", "kube-sync/2"),
        ]
        assert [e[0] for e in log if e[0].startswith("leader.")][:2] == ["leader.elected", "leader.elected"]

        # A restarted replica takes over (term 3) and records what the ex-leader could not.
        third = await KubeSyncProcess.start(kube, tmp_path, database_url)
        await eventually(
            lambda: _has(recorded, ("pod.submitted", "pod:team/after", "kube-sync/3")),
            timeout=30,
            what="the next leader records it",
        )
    finally:
        for replica in (first, second, third):
            if replica is not None:
                await replica.stop()


async def _has(recorded: Any, entry: tuple[str, ...]) -> bool:
    return any(found[: len(entry)] == entry for found in await recorded())
