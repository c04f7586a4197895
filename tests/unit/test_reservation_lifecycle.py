"""A Reservation's life through the chained services (reservation-manager and device-allocator over one log, as the
simulator and the live stack run them): expiry and garbage collection on recorded timers, what the reservation held
going back to the node, reserve pods waiting for capacity, allocateOnce, its node going away, deletion."""

from __future__ import annotations

import json
from typing import Any

from allot_testing.builders import a_node, a_pod
from allot_testing.scenario import Scenario


def reservation(name: str = "slot", cpu: str = "3", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"namespace": "default"},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
                },
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            **spec,
        },
    }


def of(s: Scenario, event_type: str, name: str = "slot") -> list[dict[str, Any]]:
    return [e for e in s.of_type(event_type) if e["reservation"]["name"] == name]


def node_of(s: Scenario, pod: str) -> str | None:
    placed = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == pod]
    return placed[-1]["node"] if placed else None


def test_expiry_frees_the_node_for_others_then_gc_removes_the_reservation():
    s = Scenario().apply(a_node("n1", cpu="4", memory="8Gi"), reservation(ttl="60s"))
    assert of(s, "reservation.placed")[0]["node"] == "n1"
    s.apply(a_pod("other", cpu="2"))
    assert s.phase("default/other") == "Unschedulable"  # 3 of 4 CPUs are held for app=web

    s.advance(59)
    assert not of(s, "reservation.failed")
    s.advance(2)
    (failed,) = of(s, "reservation.failed")
    assert failed["reason"] == "Expired" and failed["message"] == "Reservation expired"
    (released,) = of(s, "reservation.released")
    assert released["node"] == "n1" and released["freed"]["allocation"]["requests"]["cpu"] == 3000
    assert s.phase("default/other") == "Bound" and node_of(s, "other") == "n1"

    s.advance(86400 - 2)
    assert not of(s, "reservation.removed")
    s.advance(5)
    (removed,) = of(s, "reservation.removed")
    assert removed["reason"] == "GarbageCollected"
    timers = [e.payload_dict() for e in s.events if e.type == "timer.fired"]
    due = {t["due"] for t in timers if t["service"] == "reservation-manager"}
    accepted = of(s, "reservation.accepted")[0]
    # expiry and GC fire on recorded timer events, due at the reservation's deadlines
    assert accepted["expires_at"] in due and accepted["expires_at"] + 86400 * 1_000_000 in due
    s.assert_replays()


def test_a_reservation_waits_for_capacity_and_is_placed_when_it_comes():
    s = Scenario().apply(a_node("n1", cpu="2", memory="8Gi"), reservation())
    (unschedulable,) = of(s, "reservation.unschedulable")
    assert "Insufficient cpu" in unschedulable["message"]
    assert not of(s, "reservation.placed")
    s.apply(a_node("n2", cpu="4", memory="8Gi"))
    assert of(s, "reservation.placed")[0]["node"] == "n2"
    s.assert_replays()


def test_allocate_once_succeeds_with_its_first_owner_and_gives_the_rest_back():
    s = Scenario().apply(a_node("n1", cpu="4", memory="8Gi"), reservation())
    s.apply(a_pod("web-0", cpu="1", labels={"app": "web"}))
    placed = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == "web-0"][0]
    assert placed["decision"]["reservation"]["name"] == "slot"
    (succeeded,) = of(s, "reservation.succeeded")
    assert succeeded["owner"] == "default/web-0"
    # what web-0 did not take (2 of the 3 CPUs) goes back: another pod of 3 CPUs fits beside it
    assert of(s, "reservation.released")
    s.apply(a_pod("other", cpu="3"))
    assert s.phase("default/other") == "Bound"
    # a second owner no longer matches the used reservation: it is an ordinary pod, and n1 is full
    s.apply(a_pod("web-1", cpu="1", labels={"app": "web"}))
    resolved = [r for r in s.of_type("reservation.resolved") if r["pod"]["name"] == "web-1"][0]
    assert resolved["match"] is None
    assert s.phase("default/web-1") == "Unschedulable"
    s.assert_replays()


def test_a_reusable_reservation_takes_owners_until_it_is_full():
    s = Scenario().apply(a_node("n1", cpu="4", memory="8Gi"), reservation(allocateOnce=False))
    s.apply(*(a_pod(f"web-{i}", cpu="1", labels={"app": "web"}) for i in range(3)))
    for i in range(3):
        placed = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == f"web-{i}"][0]
        assert placed["decision"]["reservation"]["name"] == "slot"
    assert not of(s, "reservation.succeeded")
    s.apply(a_pod("other", cpu="2"))
    assert s.phase("default/other") == "Unschedulable"  # 3 CPUs in the reservation (all used) + 1 free
    s.delete("Pod", "web-0")  # its CPU goes back to the reservation, not to the node
    assert s.phase("default/other") == "Unschedulable"
    s.apply(a_pod("web-3", cpu="1", labels={"app": "web"}))
    placed = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == "web-3"][0]
    assert placed["decision"]["reservation"]["name"] == "slot"
    s.assert_replays()


def test_its_node_gone_fails_the_reservation():
    s = Scenario().apply(a_node("n1", cpu="4", memory="8Gi"), reservation())
    s.delete("Node", "n1", namespace="")
    (failed,) = of(s, "reservation.failed")
    assert failed["reason"] == "Expired" and "n1 is gone" in failed["message"]


def test_deleting_a_reservation_gives_back_what_it_held():
    s = Scenario().apply(a_node("n1", cpu="4", memory="8Gi"), reservation())
    s.apply(a_pod("other", cpu="2"))
    assert s.phase("default/other") == "Unschedulable"
    s.delete("Reservation", "slot", namespace="")
    assert of(s, "reservation.released")
    assert s.phase("default/other") == "Bound"
    s.assert_replays()


def running_pod(name: str, node: str, cpu: str = "2", labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = a_pod(name, cpu=cpu, labels=labels)
    body["spec"]["nodeName"] = node
    return body


def job(name: str, pod: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {"name": name},
        "spec": {"podRef": {"namespace": "default", "name": pod}, **spec},
    }


def job_events(s: Scenario, name: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.payload_dict()) for e in s.events if e.stream_id == f"migration:{name}"]


def test_a_migration_whose_reservation_never_fits_times_out_and_the_pod_stays():
    s = Scenario().apply(a_node("n1", cpu="4", memory="8Gi"), a_node("n2", cpu="1", memory="8Gi"))
    s.apply(running_pod("web-0", "n1", cpu="2"), job("move", "web-0", mode="ReservationFirst", ttl="5m"))
    kinds = [t for t, _ in job_events(s, "move")]
    assert kinds[:2] == ["migration.applied", "migration.running"]
    scheduled = [p for t, p in job_events(s, "move") if t == "migration.condition"][-1]
    assert (scheduled["condition"], scheduled["status"], scheduled["reason"]) == (
        "ReservationScheduled",
        "False",
        "Unschedulable",
    )
    s.advance(301)
    (failed,) = [p for t, p in job_events(s, "move") if t == "migration.failed"]
    assert failed["reason"] == "Timeout"
    (removed,) = s.of_type("reservation.removed")
    assert removed["reason"] == "MigrationEnded"
    assert not s.of_type("migration.evicted") and not s.of_type("pod.deleted")
    assert s.view().pods["default/web-0"].node == "n1"  # never evicted: the pod is where it was
    s.assert_replays()


def test_evict_directly_deletes_and_resubmits_the_pod_in_one_decision():
    s = Scenario().apply(a_node("n1", cpu="4", memory="8Gi"), a_node("n2", cpu="4", memory="8Gi"))
    s.apply(running_pod("web-0", "n1"), job("evict", "web-0", mode="EvictDirectly"))
    (evicted,) = s.of_type("migration.evicted")
    position = next(e.position for e in s.events if e.type == "migration.evicted")
    after = [(e.type, e.producer) for e in s.events if e.position > position][:2]
    assert after == [("pod.deleted", "reservation-manager"), ("pod.submitted", "reservation-manager")]
    (succeeded,) = [p for t, p in job_events(s, "evict") if t == "migration.succeeded"]
    assert succeeded["message"] == 'Pod "default/web-0" has been evicted'
    new_life = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == "web-0"][-1]
    assert new_life["uid"] == evicted["new_uid"] != evicted["pod_uid"]
    assert "reservation" not in new_life["decision"] or new_life["decision"]["reservation"] is None
    s.assert_replays()


def wants(name: str) -> dict[str, str]:
    return {"scheduling.koordinator.sh/reservation-affinity": json.dumps({"name": name})}


def test_a_pod_waiting_for_its_reservation_goes_on_when_the_reservation_is_placed():
    s = Scenario().apply(a_node("n1", cpu="4", memory="8Gi"))
    s.apply(
        a_pod("web", cpu="1", labels={"app": "web"}, annotations=wants("slot")),
        a_pod("elsewhere", cpu="1", labels={"app": "web"}, annotations=wants("another")),
    )
    assert s.phase("default/web") == "Unschedulable"  # no reservation yet: its affinity requires one
    s.apply(reservation())
    requeued = [e["pod"]["name"] for e in s.of_type("pod.requeued")]
    assert requeued == ["web"]  # the pod whose affinity names another reservation stays where it is
    placed = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == "web"]
    assert placed and placed[-1]["decision"]["reservation"]["name"] == "slot"
    assert s.phase("default/web") == "Bound" and s.phase("default/elsewhere") == "Unschedulable"
    s.assert_replays()


def test_a_reservation_placed_on_new_capacity_takes_the_pod_waiting_for_it():
    s = Scenario().apply(a_node("n1", cpu="2", memory="8Gi"), reservation())
    s.apply(a_pod("web", cpu="3", labels={"app": "web"}, annotations=wants("slot")))
    assert s.phase("default/web") == "Unschedulable"
    s.apply(a_node("n2", cpu="4", memory="8Gi"))  # the reserve pod fits there now, and web in it
    assert of(s, "reservation.placed")[0]["node"] == "n2"
    placed = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == "web"]
    assert placed and placed[-1]["node"] == "n2" and placed[-1]["decision"]["reservation"]["name"] == "slot"
    s.assert_replays()
