"""``allot kube-sync`` against the fake API server and a real PostgreSQL: what enters the log, once, and only when
something that matters changed; 410 relists and restarts reconcile against the log."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from typing import Any

import aiohttp
import pytest

from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_kube_sync.sync import PRODUCER, KubeSync, normalize_pod
from allot_testing.builders import a_pod, a_quota
from allot_testing.fake_kube import RESOURCES, FakeKube, FakeResource

pytestmark = pytest.mark.integration

SCHEDULER = "allot-scheduler"


def ours(
    name: str, *, namespace: str = "team", node: str = "", gates: bool = False, **kw: Any
) -> dict[str, Any]:
    pod = a_pod(name, namespace=namespace, **kw)
    del pod["metadata"]["uid"]  # the API server assigns it
    pod["spec"]["schedulerName"] = SCHEDULER
    if node:
        pod["spec"]["nodeName"] = node
    if gates:
        pod["spec"]["schedulingGates"] = [{"name": "wait"}]
    pod["status"] = {"phase": "Running" if node else "Pending"}
    return pod


def a_podgroup(name: str, namespace: str = "team", min_member: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }


def sync_for(store: Any, client: Any, registry: Any = None) -> KubeSync:
    return KubeSync(
        store=store, client=client, watch_timeout=2, backoff=(0.05, 0.2), absent_retry=0.5, registry=registry
    )


@pytest.fixture
def kinds(log_of: Any) -> Any:
    async def count(store: Any) -> collections.Counter[tuple[str, str]]:
        return collections.Counter((t, s) for t, s, _ in await log_of(store, producer=PRODUCER))

    return count


@pytest.fixture
def settle(log_of: Any) -> Any:
    async def wait(store: Any, seconds: float = 0.4) -> list[Any]:
        """Wait until the log stops moving; return it."""
        before = None
        while True:
            await asyncio.sleep(seconds)
            now = await log_of(store)
            if now == before:
                return now
            before = now

    return wait


@pytest.fixture
def has(log_of: Any) -> Any:
    def check(store: Any, type_: str, stream: str) -> Any:
        async def found() -> bool:
            return any(t == type_ and s == stream for t, s, _ in await log_of(store, producer=PRODUCER))

        return found

    return check


def seed_objects(kube: FakeKube) -> tuple[dict[str, Any], dict[str, Any]]:
    """A quota, a PodGroup, a pod of ours waiting, one bound with its devices and one for another scheduler: the
    quota and the waiting pod as created."""
    quota = kube.create(a_quota("q", namespace="team"))
    kube.create(a_podgroup("pg"))
    waiting = kube.create(ours("a", gpus=1))
    kube.create(
        ours(
            "bound",
            node="n1",
            annotations={
                "scheduling.koordinator.sh/device-allocated": '{"gpu":[{"minor":0,"resources":{}}]}'
            },
        )
    )
    kube.create({**ours("other"), "spec": {**ours("other")["spec"], "schedulerName": "default-scheduler"}})
    return quota, waiting


async def assert_first_lists_recorded(
    kube: FakeKube, store: Any, log_of: Any, kinds: Any, waiting: dict[str, Any]
) -> None:
    """What the first lists record: each object once, as `allot apply` records it (minus server bookkeeping and
    status); pods watched with our scheduler's field selector, custom resources in full."""
    assert await kinds(store) == {
        ("quota.applied", "quota:team/q"): 1,
        ("podgroup.applied", "podgroup:team/pg"): 1,
        ("pod.submitted", "pod:team/a"): 1,
        ("pod.observed", "pod:team/bound"): 1,
        ("pod.phase_observed", "pod:team/bound"): 1,  # first seen bound and Running
    }
    # The same events `allot apply` records for the same objects (minus server bookkeeping and status).
    recorded = {s: p for _, s, p in await log_of(store, producer=PRODUCER)}
    expected_stream, expected = to_input(
        Document(
            source="x",
            index=0,
            body=normalize_pod({**kube.get("Pod", "a", "team"), "apiVersion": "v1", "kind": "Pod"}),
        )
    ).events[0]
    assert recorded[expected_stream] == {"type": "pod.submitted.v2", **_payload(expected)}
    assert "managedFields" not in recorded["pod:team/a"]["manifest"]["metadata"]
    assert recorded["pod:team/a"]["uid"] == waiting["metadata"]["uid"]
    # Pods are watched with our scheduler's field selector; custom resources in full.
    assert kube.count("GET", "/api/v1/pods$", query=None) >= 2
    assert any(
        q.get("fieldSelector") == f"spec.schedulerName={SCHEDULER}"
        for m, p, q in kube.requests
        if p == "/api/v1/pods"
    )


def touch_without_changing(kube: FakeKube) -> None:
    """Heartbeats, a phase already recorded and Allot's own writes (quota runtime/request annotations and status,
    a label on a pod): none of them is input."""
    kube.set_phase("bound", "Running", "team")
    kube.heartbeat("Pod", "a", "team")
    kube.update(
        "ElasticQuota",
        "q",
        lambda o: (
            o["metadata"]
            .setdefault("annotations", {})
            .update(
                {
                    "quota.scheduling.koordinator.sh/runtime": '{"cpu":"2"}',
                    "quota.scheduling.koordinator.sh/request": '{"cpu":"1"}',
                }
            ),
            o.setdefault("status", {}).update({"used": {"cpu": "1"}}),
        ),
        "team",
    )
    kube.update("Pod", "a", lambda o: o["metadata"]["labels"].update({"touched": "yes"}), "team")


async def test_objects_are_recorded_once_and_only_real_changes_count(
    kube: FakeKube,
    store: Any,
    client: Any,
    running: Any,
    eventually: Any,
    log_of: Any,
    kinds: Any,
    settle: Any,
):
    quota, waiting = seed_objects(kube)

    sync = sync_for(store, client)
    runner = running(sync.run)
    try:
        await eventually(lambda: sync.synced, what="first lists")
        await settle(store)
        await assert_first_lists_recorded(kube, store, log_of, kinds, waiting)

        # Heartbeats, a phase already recorded and Allot's own writes are not input.
        touch_without_changing(kube)
        kube.bookmark()
        await settle(store)
        assert sum((await kinds(store)).values()) == 5
        # Bookmarks move every watch to the latest version without any object changing.
        assert {r.resource_version for r in sync.reflectors} == {str(kube.rv)}

        # Real changes are recorded once each.
        kube.update("ElasticQuota", "q", lambda o: o["spec"]["max"].update({"cpu": "50"}), "team")
        kube.update("PodGroup", "pg", lambda o: o["spec"].update({"minMember": 3}), "team")
        kube.create(ours("gated", gates=True))
        await settle(store)
        counts = await kinds(store)
        assert counts[("quota.applied", "quota:team/q")] == 2
        assert counts[("podgroup.applied", "podgroup:team/pg")] == 2
        assert ("pod.submitted", "pod:team/gated") not in counts  # not schedulable yet
        kube.update("Pod", "gated", lambda o: o["spec"].pop("schedulingGates"), "team")
        # Bound by someone (the binder): not input. Finished: its resources are free, recorded once.
        kube.update("Pod", "a", lambda o: o["spec"].update({"nodeName": "n1"}), "team")
        kube.set_phase("a", "Succeeded", "team")
        kube.delete("Pod", "a", "team")
        kube.delete("ElasticQuota", "q", "team")
        await settle(store)
        counts = await kinds(store)
        assert counts[("pod.submitted", "pod:team/gated")] == 1
        assert counts[("pod.deleted", "pod:team/a")] == 1
        assert counts[("pod.phase_observed", "pod:team/a")] == 1  # Succeeded, before its pod.deleted
        assert counts[("quota.deleted", "quota:team/q")] == 1
        deleted = [p for t, s, p in await log_of(store, producer=PRODUCER) if t == "pod.deleted"]
        assert deleted == [
            {
                "type": "pod.deleted.v1",
                "pod": {"namespace": "team", "name": "a"},
                "uid": waiting["metadata"]["uid"],
            }
        ]
        assert quota["metadata"]["uid"]  # (the quota's deletion is keyed by its uid)
    finally:
        await runner.close()


def _payload(event: Any) -> dict[str, Any]:
    import msgspec

    from allot_contracts.envelope import canonical

    return {k: v for k, v in msgspec.json.decode(canonical(event)).items() if k != "type"}


async def test_after_410_the_relist_records_what_the_watch_missed(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, kinds: Any, settle: Any, has: Any
):
    kube.create(a_quota("q", namespace="team"))
    kube.create(ours("a"))
    kube.create(ours("b"))
    sync = sync_for(store, client)
    runner = running(sync.run)
    try:
        await eventually(lambda: sync.synced, what="first lists")
        await settle(store)
        lists_before = kube.count("GET", "/api/v1/pods$", query=None) - kube.count(
            "GET", "/api/v1/pods$", "watch"
        )
        # Gone while no watch event could say so; the history is compacted, so the watches get 410.
        kube.delete_quietly("Pod", "b", "team")
        kube.delete_quietly("ElasticQuota", "q", "team")
        await eventually(has(store, "pod.deleted", "pod:team/b"), what="b recorded deleted")
        await eventually(has(store, "quota.deleted", "quota:team/q"), what="q recorded deleted")
        await settle(store)
        lists_after = kube.count("GET", "/api/v1/pods$") - kube.count("GET", "/api/v1/pods$", "watch")
        assert lists_after > lists_before  # a relist, not a guess
        counts = await kinds(store)
        assert counts[("pod.deleted", "pod:team/b")] == 1 and ("pod.deleted", "pod:team/a") not in counts
        assert counts[("pod.submitted", "pod:team/a")] == 1  # the relist did not record a again
        # A broken watch (no 410) resumes from the last version: nothing is listed or recorded again.
        kube.drop_watches()
        kube.create(ours("c"))
        await eventually(has(store, "pod.submitted", "pod:team/c"), what="c recorded")
        await settle(store)
        assert sum((await kinds(store)).values()) == 6
    finally:
        await runner.close()


async def test_a_restart_records_nothing_twice_and_catches_up(
    kube: FakeKube,
    store: Any,
    client: Any,
    running: Any,
    eventually: Any,
    log_of: Any,
    kinds: Any,
    settle: Any,
):
    kube.create(a_quota("q", namespace="team"))
    first_a = kube.create(ours("a"))
    kube.create(ours("b"))
    sync = sync_for(store, client)
    runner = running(sync.run)
    await eventually(lambda: sync.synced, what="first lists")
    await settle(store)
    await runner.close()
    assert sum((await kinds(store)).values()) == 3

    # While kube-sync is down: b deleted, c created, q changed, a deleted and created again (a new uid).
    kube.delete("Pod", "b", "team")
    kube.create(ours("c"))
    kube.update("ElasticQuota", "q", lambda o: o["spec"]["max"].update({"cpu": "7"}), "team")
    kube.delete("Pod", "a", "team")
    second_a = kube.create(ours("a"))

    for _ in range(2):  # the second restart finds nothing to do
        sync = sync_for(store, client)
        runner = running(sync.run)
        await eventually(lambda s=sync: s.synced, what="lists after restart")
        await settle(store)
        await runner.close()
        counts = await kinds(store)
        assert counts == {
            ("quota.applied", "quota:team/q"): 2,
            ("pod.submitted", "pod:team/a"): 2,
            ("pod.deleted", "pod:team/a"): 1,
            ("pod.submitted", "pod:team/b"): 1,
            ("pod.deleted", "pod:team/b"): 1,
            ("pod.submitted", "pod:team/c"): 1,
        }
    lives = [(t, p["uid"]) for t, s, p in await log_of(store, producer=PRODUCER) if s == "pod:team/a"]
    assert lives == [
        ("pod.submitted", first_a["metadata"]["uid"]),
        ("pod.deleted", first_a["metadata"]["uid"]),
        ("pod.submitted", second_a["metadata"]["uid"]),
    ]


async def test_pod_phases_are_recorded_once_per_life_and_before_the_end(
    kube: FakeKube,
    store: Any,
    client: Any,
    running: Any,
    eventually: Any,
    log_of: Any,
    kinds: Any,
    settle: Any,
):
    first = kube.create(ours("w"))
    kube.create(ours("f"))
    sync = sync_for(store, client)
    runner = running(sync.run)
    await eventually(lambda: sync.synced, what="first lists")
    for name in ("w", "f"):
        kube.update("Pod", name, lambda o: o["spec"].update({"nodeName": "n1"}), "team")
        kube.set_phase(name, "Running", "team")
    kube.heartbeat("Pod", "w", "team")  # Running again: nothing new
    kube.set_phase("f", "Failed", "team")
    await settle(store)
    await runner.close()

    # While kube-sync is down, w finishes; the restart and a second one record it once.
    kube.set_phase("w", "Succeeded", "team")
    for _ in range(2):
        sync = sync_for(store, client)
        runner = running(sync.run)
        await eventually(lambda s=sync: s.synced, what="lists after restart")
        await settle(store)
        await runner.close()

    def life(name: str) -> list[tuple[str, str]]:
        return [(t, p.get("phase", "")) for t, s, p in recorded if s == f"pod:team/{name}"]

    recorded = await log_of(store, producer=PRODUCER)
    assert life("w") == [
        ("pod.submitted", ""),
        ("pod.phase_observed", "Running"),
        ("pod.phase_observed", "Succeeded"),
        ("pod.deleted", ""),
    ]
    assert life("f") == [
        ("pod.submitted", ""),
        ("pod.phase_observed", "Running"),
        ("pod.phase_observed", "Failed"),
        ("pod.deleted", ""),
    ]
    phases = [p for t, s, p in recorded if t == "pod.phase_observed" and s == "pod:team/w"]
    assert phases[0] == {
        "type": "pod.phase_observed.v1",
        "pod": {"namespace": "team", "name": "w"},
        "uid": first["metadata"]["uid"],
        "phase": "Running",
    }

    # A new life under the same name has phases of its own; a DELETED event records the phase it shows.
    kube.delete("Pod", "w", "team")
    kube.create(ours("w", node="n1"))
    sync = sync_for(store, client)
    runner = running(sync.run)
    try:
        await eventually(lambda: sync.synced, what="lists")
        await settle(store)
        # Failed and gone before a watch event said so: only the DELETED event's object shows it.
        kube.objects[("pods", "team", "w")]["status"]["phase"] = "Failed"
        kube.delete("Pod", "w", "team")
        await settle(store)
    finally:
        await runner.close()
    recorded = await log_of(store, producer=PRODUCER)
    assert life("w")[4:] == [
        ("pod.observed", ""),
        ("pod.phase_observed", "Running"),
        ("pod.phase_observed", "Failed"),
        ("pod.deleted", ""),
    ]


async def test_a_custom_resource_that_is_not_installed_does_not_hold_up_pods(
    store: Any, tmp_path: Any, running: Any, eventually: Any, has: Any
):
    from allot_runtime.kube import api_client

    without_profiles = tuple(r for r in RESOURCES if r.kind != "ElasticQuotaProfile")
    assert all(isinstance(r, FakeResource) for r in without_profiles)
    async with FakeKube(resources=without_profiles) as kube:
        kube.create(ours("a"))
        api = await api_client(kube.kubeconfig(tmp_path))
        sync = sync_for(store, api)
        runner = running(sync.run)
        try:
            await eventually(has(store, "pod.submitted", "pod:team/a"), what="a recorded")
        finally:
            await runner.close()
            await api.close()


QUOTAS = "/apis/scheduling.sigs.k8s.io/v1alpha1/elasticquotas$"


async def _recording_quotas(
    kube: FakeKube,
    store: Any,
    client: Any,
    running: Any,
    eventually: Any,
    has: Any,
    settle: Any,
    names: list[str],
) -> Any:
    """kube-sync running, with these quotas of namespace ``team`` recorded."""
    for name in names:
        kube.create(a_quota(name, namespace="team"))
    runner = running(sync_for(store, client).run)
    for name in names:
        await eventually(has(store, "quota.applied", f"quota:team/{name}"), what=f"{name} recorded")
    await settle(store)
    return runner


async def test_a_404_while_discovery_serves_the_resource_deletes_nothing(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, kinds: Any, settle: Any, has: Any
):
    """A list or watch answered 404 while the group/version's resource list still names the resource is not
    evidence of deletion: nothing is recorded, the list is retried, and a later real deletion is recorded once
    (a ghost deletion would have taken its event id, so the real one would be skipped as a duplicate)."""
    runner = await _recording_quotas(kube, store, client, running, eventually, has, settle, ["q"])
    try:
        lists = kube.count("GET", QUOTAS) - kube.count("GET", QUOTAS, "watch")
        kube.fail(
            "GET", QUOTAS, status=404, message="the server could not find the requested resource", times=3
        )
        kube.drop_watches()
        await eventually(lambda: all(f.times == 0 for f in kube.faults), what="the 404s answered")
        await eventually(
            lambda: kube.count("GET", QUOTAS) - kube.count("GET", QUOTAS, "watch") > lists + 1,
            what="a list after the 404s",
        )
        await settle(store)
        assert kube.count("GET", "/apis/scheduling.sigs.k8s.io/v1alpha1$") >= 1  # discovery was asked
        assert ("quota.deleted", "quota:team/q") not in await kinds(store)
        kube.delete("ElasticQuota", "q", "team")
        await eventually(has(store, "quota.deleted", "quota:team/q"), what="the real deletion recorded")
        await settle(store)
        counts = await kinds(store)
        assert (
            counts[("quota.deleted", "quota:team/q")] == 1 and counts[("quota.applied", "quota:team/q")] == 1
        )
    finally:
        await runner.close()


async def test_a_resource_no_longer_served_keeps_what_was_recorded_until_a_list_shows_it(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, kinds: Any, settle: Any, has: Any
):
    """Discovery no longer lists the resource (its CRD not established): the last recorded state stays; when it is
    served again, the list records only the differences (here: one quota gone, the other unchanged)."""
    runner = await _recording_quotas(kube, store, client, running, eventually, has, settle, ["q", "r"])
    try:
        kube.unserve("ElasticQuota")
        kube.create(ours("a"))  # the other kinds go on
        await eventually(has(store, "pod.submitted", "pod:team/a"), what="a recorded")
        await asyncio.sleep(1.2)  # more than absent_retry: listed again, still not served
        kube.delete_quietly("ElasticQuota", "q", "team")
        await settle(store)
        counts = await kinds(store)
        assert not [k for k in counts if k[0] == "quota.deleted"]
        kube.serve("ElasticQuota")
        await eventually(has(store, "quota.deleted", "quota:team/q"), what="q recorded deleted by the list")
        await settle(store)
        counts = await kinds(store)
        assert counts[("quota.deleted", "quota:team/q")] == 1
        assert ("quota.deleted", "quota:team/r") not in counts and counts[
            ("quota.applied", "quota:team/r")
        ] == 1
    finally:
        await runner.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_process_serves_health_readiness_and_metrics(
    kube: FakeKube, database_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, eventually: Any
):
    from allot_kube_sync.process import run_kube_sync

    port = _free_port()
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.setenv("ALLOT_HTTP_HOST", "127.0.0.1")
    monkeypatch.setenv("ALLOT_HTTP_PORT", str(port))
    monkeypatch.setenv("ALLOT_KUBECONFIG", kube.kubeconfig(tmp_path))
    monkeypatch.setenv("ALLOT_SCHEDULER_NAME", "custom")
    kube.create({**ours("mine"), "spec": {**ours("mine")["spec"], "schedulerName": "custom"}})
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stop = asyncio.Event()
    task = asyncio.create_task(run_kube_sync(stop=stop))
    try:
        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                        return r.status == 200
                return False

            await eventually(ready, timeout=20, what="/readyz 200")
            async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert (await r.json())["service"] == "kube-sync"
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                text = await r.text()
        assert 'allot_kube_events_recorded_total{component="kube-sync",type="pod.submitted"} 1.0' in text
        assert 'allot_kube_synced{component="kube-sync",resource="pods"} 1.0' in text
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        root.handlers[:] = handlers
        root.setLevel(level)


async def test_what_the_log_cannot_store_is_skipped_and_counted_once(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, has: Any, kinds: Any, settle: Any
):
    kube.create(ours("bad", annotations={"note": "nul\x00inside"}))
    kube.create(ours("good"))
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    running(sync_for(store, client, registry).run)
    await eventually(has(store, "pod.submitted", "pod:team/good"), what="good recorded")
    kube.heartbeat("Pod", "bad", "team")
    await settle(store)
    assert set(await kinds(store)) == {("pod.submitted", "pod:team/good")}
    labels = {"component": "kube-sync", "resource": "pods"}
    assert registry.get_sample_value("allot_kube_objects_skipped_total", labels) == 1


async def test_a_pod_with_a_forbidden_qos_and_priority_is_recorded_refused_with_the_reason(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, has: Any, log_of: Any
):
    """A BE pod of priority class koord-prod, as the API server holds it (``spec.priority`` resolved from
    ``priorityClassName``): recorded with the door's refusal (no spec), which the first service rejects."""
    for name, priority_class, value in (("be-prod", "koord-prod", 9000), ("be-batch", "koord-batch", 5000)):
        pod = ours(name, labels={"koordinator.sh/qosClass": "BE"})
        pod["spec"].update(priorityClassName=priority_class, priority=value)
        kube.create(pod)
    running(sync_for(store, client).run)
    await eventually(has(store, "pod.submitted", "pod:team/be-prod"), what="be-prod recorded")
    await eventually(has(store, "pod.submitted", "pod:team/be-batch"), what="be-batch recorded")
    recorded = {s: p for t, s, p in await log_of(store, producer=PRODUCER) if t == "pod.submitted"}
    refused = recorded["pod:team/be-prod"]
    assert refused["spec"] is None
    (issue,) = refused["issues"]
    assert issue["path"] == 'metadata.labels["koordinator.sh/qosClass"]' and issue["code"] == "Forbidden"
    assert issue["message"].startswith(
        "Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination"
    )
    allowed = recorded["pod:team/be-batch"]
    assert allowed["spec"]["koord_priority"] == "koord-batch" and not allowed.get("issues")
