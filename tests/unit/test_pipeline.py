"""The seven services' decisions chained over a log (the simulator), scenario by scenario.

These exercise the processors exactly as the live services run them (same Host, same events), without servers.
"""

from __future__ import annotations

import pytest

from allot_testing.builders import a_gpu_device, a_node, a_pod, a_quota
from allot_testing.scenario import Scenario, borrowed_quota

# A plain pod: the gang gate lets it through as it arrives (no event), quota admission takes it from pod.submitted.
POD_PATH = [
    "pod.submitted",
    "quota.admitted",
    "reservation.resolved",
    "pod.placed",
    "pod.bound",
    "qos.recorded",
]


def gpu_cluster(s: Scenario, nodes: int = 1, gpus: int = 8) -> Scenario:
    for i in range(nodes):
        s.apply(a_node(f"node-{i}", gpus=gpus), a_gpu_device(f"node-{i}", gpus=gpus))
    return s


def test_a_pod_walks_the_whole_path_and_gets_gpu_minors():
    s = gpu_cluster(Scenario())
    s.apply(a_pod("train", gpus=2))
    pod_events = [e.type for e in s.events if e.stream_id == "pod:default/train"]
    assert pod_events == POD_PATH
    placed = s.of_type("pod.placed")[0]
    allocated = placed["decision"]["annotations"]["scheduling.koordinator.sh/device-allocated"]
    assert [d["minor"] for d in allocated["gpu"]] == [0, 1]
    bound = s.of_type("pod.bound")[0]
    assert '"minor":0' in bound["annotations"]["scheduling.koordinator.sh/device-allocated"]
    assert s.phase("default/train") == "Bound"


def test_unschedulable_pod_is_requeued_when_capacity_arrives():
    s = gpu_cluster(Scenario(), gpus=2)
    s.apply(a_pod("big", gpus=4))
    assert s.phase("default/big") == "Unschedulable"
    assert "Insufficient" in s.of_type("pod.unschedulable")[0]["message"]
    assert s.of_type("quota.released")[0]["reason"] == "unschedulable"
    s.apply(a_node("node-x", gpus=8), a_gpu_device("node-x", gpus=8))
    assert s.of_type("pod.requeued")[0]["attempt"] == 2
    assert s.phase("default/big") == "Bound"
    assert s.view().pods["default/big"].node == "node-x"


def test_an_invalid_device_request_is_rejected_once_and_never_retried():
    s = gpu_cluster(Scenario())
    bad = a_pod("bad", extra={"koordinator.sh/gpu-core": "150", "koordinator.sh/gpu-memory-ratio": "150"})
    # admission would refuse it up front; the services must refuse it too when it arrives another way
    s.sim.apply(
        __import__("allot_intake.manifests", fromlist=["to_input"]).to_input(
            __import__("allot_intake.manifests", fromlist=["Document"]).Document(
                source="t", index=0, body=bad
            )
        )
    )
    rejected = s.of_type("pod.rejected")
    assert (
        len(rejected) == 1 and rejected[0]["stage"] == "admission"
    )  # the door's issues, recorded by the first hop
    assert "koordinator.sh/gpu-core" in rejected[0]["message"]
    s.apply(a_node("node-more", gpus=8), a_gpu_device("node-more", gpus=8))
    assert len(s.of_type("pod.rejected")) == 1
    assert not s.of_type("pod.requeued")
    assert s.phase("default/bad") == "Rejected"


def test_a_pod_waits_for_quota_and_is_admitted_when_it_frees():
    s = gpu_cluster(Scenario())
    s.apply(a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "4"}))
    s.apply(a_pod("a", namespace="team", gpus=4), a_pod("b", namespace="team", gpus=2))
    assert s.phase("team/a") == "Bound"
    assert s.phase("team/b") == "Waiting"
    waiting = s.of_type("quota.waiting")[0]
    assert "Insufficient quotas, quotaName: team" in waiting["message"]
    assert "exceedDimensions: [nvidia.com/gpu]" in waiting["message"]
    s.delete("Pod", "a", "team")
    assert s.phase("team/b") == "Bound"
    released = [r for r in s.of_type("quota.released") if r["pod"]["name"] == "a"]
    assert released and released[0]["reason"] == "deleted"


def test_borrowing_is_on_the_record():
    s = gpu_cluster(Scenario())
    s.apply(
        a_quota(
            "parent",
            namespace="q",
            max={"cpu": "64", "memory": "256Gi"},
            min={"cpu": "64", "memory": "256Gi"},
            labels={"quota.scheduling.koordinator.sh/is-parent": "true"},
        ),
        a_quota(
            "lender",
            namespace="q",
            max={"cpu": "64", "memory": "256Gi"},
            min={"cpu": "32", "memory": "128Gi"},
            labels={"quota.scheduling.koordinator.sh/parent": "parent"},
        ),
        a_quota(
            "borrower",
            namespace="q",
            max={"cpu": "64", "memory": "256Gi"},
            min={"cpu": "8", "memory": "32Gi"},
            labels={"quota.scheduling.koordinator.sh/parent": "parent"},
        ),
    )
    pod = a_pod("big", namespace="q", cpu="16", labels={"quota.scheduling.koordinator.sh/name": "borrower"})
    s.apply(pod)
    admitted = s.of_type("quota.admitted")[0]
    assert admitted["quota"] == "borrower"
    borrow = admitted["detail"]["borrow"]
    cpu = next(f for f in borrow if f["dimension"] == "cpu" and f["direction"] == "borrow")
    assert cpu["amount"] == "8" and cpu["quota"] == "borrower"
    # funded by the sibling's idle min (32) and the parent's unassigned min (64 - 40 = 24), split 32:24
    assert {(lender["quota"], lender["amount"]) for lender in cpu["lenders"]} == {
        ("lender", "4571m"),
        ("parent", "3429m"),
    }


def test_a_more_important_pod_preempts_within_its_quota():
    s = gpu_cluster(Scenario())
    s.apply(a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "4"}))
    low = a_pod("low", namespace="team", gpus=4)
    low["spec"]["priority"] = 10
    s.apply(low)
    high = a_pod("high", namespace="team", gpus=4)
    high["spec"]["priority"] = 1000
    s.apply(high)
    evicted = s.of_type("quota.evicted")
    assert [(e["pod"]["name"], e["cause"]) for e in evicted] == [("low", "Preempted")]
    assert s.phase("team/low") == "Evicted"
    assert s.phase("team/high") == "Bound"
    released = [r for r in s.of_type("pod.released") if r["pod"]["name"] == "low"]
    assert released and released[0]["reason"] == "evicted (Preempted)"


def test_non_preemptible_pods_are_never_victims():
    s = gpu_cluster(Scenario())
    s.apply(
        a_quota(
            "team",
            namespace="team",
            max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "4"},
            min={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "4"},
        )
    )
    low = a_pod(
        "low", namespace="team", gpus=4, labels={"quota.scheduling.koordinator.sh/preemptible": "false"}
    )
    low["spec"]["priority"] = 10
    high = a_pod("high", namespace="team", gpus=4)
    high["spec"]["priority"] = 1000
    s.apply(low, high)
    assert not s.of_type("quota.evicted")
    assert s.phase("team/low") == "Bound" and s.phase("team/high") == "Waiting"


def gang_pod(
    name: str,
    *,
    gang: str = "job",
    minimum: int = 3,
    gpus: int = 2,
    namespace: str = "ml",
    extra: dict[str, str] | None = None,
) -> dict:
    annotations = {
        "gang.scheduling.koordinator.sh/name": gang,
        "gang.scheduling.koordinator.sh/min-available": str(minimum),
        **(extra or {}),
    }
    return a_pod(name, namespace=namespace, gpus=gpus, annotations=annotations)


def test_a_gang_waits_for_its_members_then_starts_whole():
    s = gpu_cluster(Scenario())
    s.apply(gang_pod("w0"), gang_pod("w1"))
    assert [d["outcome"] for d in s.decisions()] == ["Waiting", "Waiting"]
    assert not s.of_type("pod.bound")
    s.apply(gang_pod("w2"))
    bound = sorted(b["pod"]["name"] for b in s.of_type("pod.bound"))
    assert bound == ["w0", "w1", "w2"]
    placed = s.of_type("gang.group_placed")
    assert len(placed) == 1 and sorted(placed[0]["members"]) == ["ml/w0", "ml/w1", "ml/w2"]


def test_a_gang_that_does_not_fit_places_nobody_and_holds_nothing():
    s = gpu_cluster(Scenario())
    s.apply(*(gang_pod(f"w{i}", minimum=3, gpus=4) for i in range(3)))  # needs 12 GPUs, the node has 8
    assert not s.of_type("pod.bound")
    assert not s.of_type("pod.placed")
    unsched = s.of_type("gang.group_unschedulable")
    assert unsched and unsched[0]["failed_pod"]
    released = s.of_type("gang.holds_released")
    assert released and sorted(released[0]["members"]) == ["ml/w0", "ml/w1", "ml/w2"]
    quota = s.sim.host("quota-manager").processor
    assert not quota.charged, "every quota charge of the failed attempt was returned"
    allocator = s.sim.host("device-allocator").processor
    assert not allocator.placed


def test_gang_timeout_is_the_configured_one_and_fires_on_recorded_time():
    s = gpu_cluster(Scenario())
    s.apply(gang_pod("w0", extra={"gang.scheduling.koordinator.sh/waiting-time": "3600s"}))
    s.advance(3599)
    assert not s.of_type("gang.timed_out")
    s.advance(2)
    timed_out = s.of_type("gang.timed_out")
    assert len(timed_out) == 1 and timed_out[0]["gang"] == "ml/job"
    timer = [e for e in s.events if e.type == "timer.fired" and e.producer == "gang-coordinator.timer"]
    assert timer and timer[0].payload_dict()["service"] == "gang-coordinator"


def test_malformed_gang_annotation_is_rejected_with_its_field_path():
    s = Scenario()
    pod = gang_pod("w0", extra={"gang.scheduling.koordinator.sh/match-policy": "Sometimes"})
    s.sim.apply(
        __import__("allot_intake.manifests", fromlist=["to_input"]).to_input(
            __import__("allot_intake.manifests", fromlist=["Document"]).Document(
                source="t", index=0, body=pod
            )
        )
    )
    rejected = s.of_type("pod.rejected")
    assert rejected and rejected[0]["stage"] == "admission"
    assert (
        rejected[0]["errors"][0]["path"]
        == 'metadata.annotations["gang.scheduling.koordinator.sh/match-policy"]'
    )


def test_a_pod_group_object_declares_the_gang():
    s = gpu_cluster(Scenario())
    s.apply(
        {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {"minMember": 2},
        }
    )
    for i in range(2):
        pod = a_pod(f"m{i}", namespace="ml", gpus=1, labels={"pod-group.scheduling.sigs.k8s.io": "pg"})
        s.apply(pod)
    assert sorted(b["pod"]["name"] for b in s.of_type("pod.bound")) == ["m0", "m1"]


@pytest.mark.parametrize("seed_order", [0, 1], ids=["as-written", "reversed"])
def test_the_simulator_is_deterministic(seed_order):
    def run() -> list[bytes]:
        s = gpu_cluster(Scenario(), nodes=2)
        pods = [a_pod(f"p{i}", gpus=1 + i % 3) for i in range(6)]
        if seed_order:
            pods.reverse()
        s.apply(*pods)
        return [e.hash for e in s.events]

    assert run() == run()


def test_an_over_used_quota_gives_back_borrowed_pods_after_the_delay():
    """A borrows B's idle min; B's pods arrive and need it back; after delayEvictTime A's borrowed pod is evicted."""
    s = borrowed_quota()  # a uses 16: borrows 8 of b's min; b0 wants it back
    assert all(s.phase(f"a/a{i}") == "Bound" for i in range(4))
    assert s.phase("b/b0") in ("Waiting", "Unschedulable")
    s.advance(60)
    assert not s.of_type("quota.evicted"), "nothing is evicted before delayEvictTime (120s)"
    s.advance(120)
    evicted = s.of_type("quota.evicted")
    assert evicted and {e["cause"] for e in evicted} == {"OverUseRevoke"}
    assert all(e["quota"] == "a" for e in evicted)
    assert "exceeds its runtime" in evicted[0]["message"]
    assert s.phase("b/b0") == "Bound"


def test_an_over_used_quota_with_nothing_to_give_back_fires_its_revoke_timer_once_not_in_a_loop():
    s = borrowed_quota(labels={"quota.scheduling.koordinator.sh/preemptible": "false"})
    before = len(s.of_type("timer.fired"))
    s.advance(3600)
    assert not s.of_type("quota.evicted"), "non-preemptible pods are never given back"
    assert len(s.of_type("timer.fired")) - before <= 2  # the revoke deadline (and at most one status sync)
    s.apply(a_pod("b1", namespace="b", cpu="1", memory="1Gi"))  # any later input still re-checks revokes
    assert not s.of_type("quota.evicted")


def test_every_decision_of_a_run_re_derives_and_rebuilt_projections_match():
    import asyncio

    from allot_runtime.processor import Host
    from allot_runtime.replay import rebuild, verify_decisions

    s = gpu_cluster(Scenario(), nodes=2)
    s.apply(a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "6"}))
    s.apply(*(a_pod(f"p{i}", namespace="team", gpus=2) for i in range(5)))
    s.apply(gang_pod("w0"), gang_pod("w1"), gang_pod("w2"))
    s.delete("Pod", "p0", "team")

    async def check() -> None:
        for live in s.sim.hosts:
            fresh = Host(type(live.processor)({}))
            checked, mismatches = await verify_decisions(fresh, s.sim.store)
            assert checked > 0 and mismatches == [], (live.name, mismatches[:1])
            rebuilt = Host(type(live.processor)({}))
            await rebuild(rebuilt, s.sim.store, until=live.position)
            assert rebuilt.digest() == live.digest(), live.name

    asyncio.run(check())


def test_a_decision_that_does_not_reproduce_is_reported_with_its_field():
    import asyncio

    import msgspec

    from allot_eventstore import InMemoryEventStore
    from allot_runtime.processor import Host
    from allot_runtime.replay import verify_decisions
    from device_allocator.processor import DeviceAllocator

    s = gpu_cluster(Scenario(), nodes=2)
    s.apply(a_pod("p", gpus=1))
    forged = InMemoryEventStore()
    for record in s.events:
        if record.type == "pod.placed":
            payload = msgspec.json.decode(record.payload)
            payload["node"] = "node-elsewhere"
            record = msgspec.structs.replace(record, payload=msgspec.json.encode(payload))
        forged.events.append(record)
    checked, mismatches = asyncio.run(verify_decisions(Host(DeviceAllocator({})), forged))
    assert len(mismatches) == 1
    assert mismatches[0].path == "outputs[0].payload.node"
    assert mismatches[0].recorded == "node-elsewhere"
    from allot_runtime.replay import verify_many
    from binder.processor import Binder

    many = asyncio.run(verify_many([Host(DeviceAllocator({})), Host(Binder({}))], forged))
    assert (many["device-allocator"].checked, many["device-allocator"].mismatches) == (checked, mismatches)
    # the forged placement is also an input of the binder: its recorded binding no longer follows from it
    assert [(m.processor, m.path, m.recomputed) for m in many["binder"].mismatches] == [
        ("binder", "outputs[0].payload.node", "node-elsewhere")
    ]


def _churn(s: Scenario, rounds: int, *, start: int, seconds: float = 5) -> None:
    """Small jobs finish and new ones arrive, one at a time."""
    for i in range(rounds):
        s.delete("Pod", f"small-{start + i}", "apps")
        s.apply(a_pod(f"small-{start + i + 8}", namespace="apps", gpus=1))
        s.advance(seconds)


def test_small_pods_cannot_starve_a_gang_forever():
    s = gpu_cluster(Scenario())
    s.apply(*(a_pod(f"small-{i}", namespace="apps", gpus=1) for i in range(8)))  # the node is full
    s.apply(gang_pod("g0", minimum=2, gpus=2), gang_pod("g1", minimum=2, gpus=2))  # needs 4 GPUs at once
    assert s.of_type("gang.group_unschedulable")
    _churn(s, 30, start=0)
    assert sorted(b["pod"]["name"] for b in s.of_type("pod.bound") if b["pod"]["name"].startswith("g")) == [
        "g0",
        "g1",
    ]
    held = [u for u in s.of_type("pod.unschedulable") if "HeldForGang" in u["codes"]]
    assert held, "small pods were held back while the gang gathered capacity"


def test_small_pods_do_starve_a_gang_without_the_protection():
    s = gpu_cluster(
        Scenario({"device-allocator": {"queue": {"maxBypasses": 1_000_000, "maxBlockedSeconds": 0}}})
    )
    s.apply(*(a_pod(f"small-{i}", namespace="apps", gpus=1) for i in range(8)))
    s.apply(gang_pod("g0", minimum=2, gpus=2), gang_pod("g1", minimum=2, gpus=2))
    _churn(s, 30, start=0)
    assert not [b for b in s.of_type("pod.bound") if b["pod"]["name"].startswith("g")]


def test_a_gang_that_never_fits_cannot_starve_small_pods_forever():
    s = gpu_cluster(Scenario({"device-allocator": {"queue": {"maxBypasses": 2, "maxReserveSeconds": 60}}}))
    s.apply(*(a_pod(f"small-{i}", namespace="apps", gpus=1) for i in range(8)))
    s.apply(*(gang_pod(f"h{i}", gang="huge", minimum=3, gpus=4) for i in range(3)))  # 12 GPUs: never fits
    _churn(s, 40, start=0)
    late = [b for b in s.of_type("pod.bound") if b["pod"]["name"] in {f"small-{i}" for i in range(30, 48)}]
    assert late, "small pods run again after the gang yields its reservation"
    assert any("HeldForGang" in u["codes"] for u in s.of_type("pod.unschedulable")), "the gang did reserve"


def test_an_elastic_quota_profile_makes_a_tree_of_its_selected_nodes():
    s = Scenario()
    s.apply(
        a_node("gpu-a", cpu="32", memory="128Gi", labels={"pool": "gpu"}),
        a_node("gpu-b", cpu="32", memory="128Gi", labels={"pool": "gpu"}),
        a_node("cpu-c", cpu="16", memory="64Gi", labels={"pool": "cpu"}),
    )
    s.apply(
        {
            "apiVersion": "quota.koordinator.sh/v1alpha1",
            "kind": "ElasticQuotaProfile",
            "metadata": {"name": "gpu-pool", "namespace": "kube-system"},
            "spec": {"quotaName": "gpu-root", "nodeSelector": {"matchLabels": {"pool": "gpu"}}},
        }
    )
    registered = s.of_type("quotaprofile.registered")
    assert registered and registered[0]["quota"] == "gpu-root"
    assert registered[0]["runtime"]["cpu"] == "64", "the tree's total is the selected nodes' allocatable"
    bad = {
        "apiVersion": "quota.koordinator.sh/v1alpha1",
        "kind": "ElasticQuotaProfile",
        "metadata": {"name": "bad", "namespace": "kube-system"},
        "spec": {"resourceRatio": "2"},
    }
    from allot_intake.documents import Document
    from allot_intake.manifests import admit_all

    assert list(admit_all([Document(source="t", index=0, body=bad)])), (
        "an invalid profile is refused at admission"
    )


def test_quota_status_annotations_are_published_by_the_binder():
    s = Scenario()
    s.apply(a_node("n", cpu="32", memory="128Gi"))
    s.apply(a_quota("team", namespace="team", max={"cpu": "16", "memory": "64Gi"}))
    s.apply(a_pod("p", namespace="team", cpu="4", memory="4Gi"))
    s.advance(1)  # status is written back at most once a second
    published = {e["quota"]["name"]: e["patch"] for e in s.of_type("quota.status_published")}
    patch = published["team"]
    import json as _json

    assert (
        _json.loads(patch["metadata"]["annotations"]["quota.scheduling.koordinator.sh/runtime"])["cpu"] == "4"
    )
    assert patch["status"]["used"]["cpu"] == "4"
    last = [e for e in s.events if e.type == "quota.status_published"][-1]
    assert last.producer == "binder"


def test_a_pod_whose_binding_failed_is_freed_and_placed_again():
    from allot_contracts.envelope import NewEvent, stream_id
    from allot_contracts.events import ObjectRef, PodBindFailed

    s = gpu_cluster(Scenario())
    s.apply(a_pod("p", gpus=2))
    first = s.of_type("pod.placed")[0]
    failed = PodBindFailed(
        pod=ObjectRef(namespace="default", name="p"),
        attempt=first["attempt"],
        node=first["node"],
        message="the node refused it",
    )
    s.sim.store.append_sync(
        [NewEvent(stream_id=stream_id("pod", "default/p"), event=failed, event_id="bf-1")],
        producer="binder.kube",
    )
    s.sim.pump()
    assert [r["reason"] for r in s.of_type("pod.released")] == ["bind failed"]
    assert [r["reason"] for r in s.of_type("quota.released") if r["pod"]["name"] == "p"] == ["binding failed"]
    assert [r["attempt"] for r in s.of_type("pod.placed")] == [1, 2], "requeued, admitted and placed again"


def test_a_gang_waiting_for_capacity_starts_whole_as_soon_as_capacity_arrives():
    s = gpu_cluster(Scenario(), nodes=1, gpus=8)
    s.apply(
        *(gang_pod(f"t{i}", gang="llm", minimum=4, gpus=4) for i in range(4))
    )  # 16 GPUs, the cluster has 8
    assert not s.of_type("pod.bound")
    s.apply(
        a_node("more", gpus=8), a_gpu_device("more", gpus=8)
    )  # no clock movement: no backoff expiry involved
    assert [r["group"] for r in s.of_type("gang.retry_requested")] == ["ml/llm"]
    assert sorted(b["pod"]["name"] for b in s.of_type("pod.bound")) == ["t0", "t1", "t2", "t3"]


def test_quota_status_is_synced_at_most_once_a_second_however_many_pods_arrive():
    s = Scenario()
    s.apply(a_node("n", cpu="64", memory="256Gi"))
    s.apply(a_quota("team", namespace="team", max={"cpu": "32", "memory": "128Gi"}))
    s.advance(1)
    before = len(s.of_type("quota.status_synced"))
    for i in range(20):
        s.apply(a_pod(f"p{i}", namespace="team", cpu="1", memory="1Gi"))
    assert len(s.of_type("quota.status_synced")) == before, "admissions within the second do not each sync"
    s.advance(1)
    synced = s.of_type("quota.status_synced")
    assert len(synced) == before + 1
    assert synced[-1]["patches"]["team/team"]["status"]["used"]["cpu"] == "20"
    s.assert_replays()


def test_a_service_passes_over_its_own_decisions_coming_back_from_the_bus_as_replay_does():
    from allot_runtime.processor import Host

    class Counting:  # what a processor sees: every event it is handed as a trigger
        name = "binder"
        interests = frozenset({"pod.placed", "pod.bound"})

        def __init__(self) -> None:
            self.triggers: list[str] = []

        def evolve(self, event, *, at, own):
            if not own:
                self.triggers.append(event.type if hasattr(event, "type") else type(event).__name__)

        def decide(self, event, *, at):
            return []

        def snapshot(self):
            return {"triggers": self.triggers}

    s = Scenario().apply(a_node("n1"), a_pod("p"))
    processor = Counting()
    live = Host(processor)  # type: ignore[arg-type]
    records = [r for r in s.sim.store.events if r.type in processor.interests]
    assert {r.producer for r in records} >= {"binder", "device-allocator"}
    for record in records:
        live.step(record)
    assert len(processor.triggers) == sum(r.producer != "binder" for r in records)
    assert live.position == records[-1].position
