"""Reservation lifecycle and the pod path: accept, reject, resolve, allocate, succeed, expire, node gone, GC."""

from __future__ import annotations

from allot_contracts.events import (
    NodeRemoved,
    ObjectRef,
    PodRejected,
    PodReleased,
    QuotaGroupAdmitted,
    ReservationAccepted,
    ReservationFailed,
    ReservationGroupResolved,
    ReservationRejected,
    ReservationRemoved,
    ReservationResolved,
    ReservationSucceeded,
)
from allot_reservation.testing import Driver, a_pod_manifest, a_reservation_manifest, at

WEB = {"app": "web"}


def ready(**kw: object) -> Driver:
    d = Driver()
    d.node("n1")
    d.node("n2", labels={"zone": "z2"})
    d.reservation(a_reservation_manifest("r1", **kw))  # type: ignore[arg-type]
    d.placed_reservation("r1", "n2")
    return d


def resolved(d: Driver, key: str) -> ReservationResolved:
    (out,) = d.admit(key)
    assert isinstance(out, ReservationResolved), out
    return out


def test_invalid_reservation_is_rejected_with_paths() -> None:
    d = Driver()
    (out,) = d.reservation(a_reservation_manifest("r1", owners=[{}], ttl="soon"))
    assert isinstance(out, ReservationRejected)
    assert [e.path for e in out.errors] == ["spec.owners[0]", "spec.ttl"]
    assert d.engine.world.book.get("r1") is None
    assert d.engine.snapshot()["rejected"]["r1"].startswith("invalid Reservation")


def test_reapply_same_is_quiet_changed_is_accepted_again() -> None:
    d = ready()
    created = d.engine.world.book.get("r1").created_at
    assert d.reservation(a_reservation_manifest("r1")) == []
    (out,) = d.reservation(a_reservation_manifest("r1", unschedulable=True))
    assert isinstance(out, ReservationAccepted) and out.created_at == created
    record = d.engine.world.book.get("r1")
    assert record.phase == "Available" and record.spec.unschedulable


def test_resolution_lists_matching_available_reservations() -> None:
    d = ready()
    d.reservation(a_reservation_manifest("r-pending"))  # accepted, never placed: not matchable
    d.pod(a_pod_manifest("web-0", labels=WEB))
    out = resolved(d, "default/web-0")
    assert out.match is not None
    assert [(c.name, c.node) for c in out.match.candidates] == [("r1", "n2")]
    assert out.reason == "1 reservation(s) match: r1" and not out.match.required

    d.pod(a_pod_manifest("db-0", labels={"app": "db"}))
    out = resolved(d, "default/db-0")
    assert out.match is None and out.reason == "no reservation applies"


def test_affinity_without_a_match_is_required_and_says_why() -> None:
    d = ready(taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])
    d.pod(
        a_pod_manifest(
            "web-0",
            labels=WEB,
            annotations={"scheduling.koordinator.sh/reservation-affinity": {"reservationSelector": {}}},
        )
    )
    out = resolved(d, "default/web-0")
    assert out.match is not None and out.match.required and out.match.candidates == []
    assert out.match.unmatched == {"r1": "reservation(s) had untolerated taint {dedicated: ml}"}
    assert out.reason == "node(s) no reservations match reservation affinity"


def test_affinity_with_no_reservation_anywhere_is_still_required() -> None:
    d = Driver()
    d.pod(
        a_pod_manifest(
            "web-0", annotations={"scheduling.koordinator.sh/reservation-affinity": '{"name": "r9"}'}
        )
    )
    out = resolved(d, "default/web-0")
    assert out.match is not None and out.match.required and out.reservation == "r9"


def test_malformed_pod_annotation_rejects_the_pod() -> None:
    d = ready()
    d.pod(
        a_pod_manifest(
            "web-0", labels=WEB, annotations={"scheduling.koordinator.sh/reservation-affinity": "{"}
        )
    )
    (out,) = d.admit("default/web-0")
    assert isinstance(out, PodRejected) and out.stage == "reservation-manager"
    assert out.errors[0].path == 'metadata.annotations["scheduling.koordinator.sh/reservation-affinity"]'


def test_allocate_once_succeeds_on_first_owner_and_stops_matching() -> None:
    d = ready()
    d.pod(a_pod_manifest("web-0", labels=WEB))
    d.pod(a_pod_manifest("web-1", labels=WEB))
    resolved(d, "default/web-0")
    (out,) = d.place("default/web-0", "n2", reservation="r1")
    assert isinstance(out, ReservationSucceeded) and out.owner == "default/web-0"
    status = d.engine.world.book.get("r1").status()
    assert status["phase"] == "Succeeded" and status["allocated"] == {"cpu": 2000}
    assert status["currentOwners"] == [{"namespace": "default", "name": "web-0", "uid": "uid-default-web-0"}]
    assert resolved(d, "default/web-1").match is None


def test_reusable_reservation_tracks_owners_and_releases() -> None:
    d = ready(allocateOnce=False)
    d.pod(a_pod_manifest("web-0", labels=WEB))
    assert d.place("default/web-0", "n2", reservation="r1") == []
    record = d.engine.world.book.get("r1")
    assert record.phase == "Available" and record.allocated == {"cpu": 2000}
    d.feed(PodReleased(pod=ObjectRef(namespace="default", name="web-0"), node="n2"))
    assert record.owners == {} and record.allocated == {}
    d.pod(a_pod_manifest("web-1", labels=WEB))
    assert resolved(d, "default/web-1").match is not None


def test_ttl_expiry_then_gc() -> None:
    d = ready(ttl="1h")
    assert d.engine.next_deadline() == at(3600)
    assert d.tick(3599) == []
    (out,) = d.tick(3600)
    assert (
        isinstance(out, ReservationFailed)
        and out.reason == "Expired"
        and out.message == "Reservation expired"
    )
    assert d.engine.world.book.get("r1").phase == "Failed"
    assert d.engine.next_deadline() == at(3600 + 86400)
    (out,) = d.tick(3600 + 86400)
    assert isinstance(out, ReservationRemoved) and out.reason == "GarbageCollected"
    assert d.engine.world.book.get("r1") is None and d.engine.next_deadline() is None


def test_ttl_zero_never_expires_and_expires_is_absolute() -> None:
    d = ready(ttl="0s")
    assert d.engine.next_deadline() is None
    d = Driver()
    d.reservation(a_reservation_manifest("r1", expires="2023-11-14T22:23:20Z"))  # T0 + 600 s
    assert d.engine.next_deadline() == at(600)


def test_pending_reservation_expires_too() -> None:
    d = Driver()
    d.reservation(a_reservation_manifest("r1", ttl="10m"))
    (out,) = d.tick(600)
    assert isinstance(out, ReservationFailed)


def test_node_gone_fails_its_reservations() -> None:
    d = ready()
    (out,) = d.feed(NodeRemoved(name="n2"))
    assert isinstance(out, ReservationFailed) and out.reason == "Expired" and "n2" in out.message
    assert d.feed(NodeRemoved(name="n1")) == []


def test_group_resolution_names_members_with_reservations() -> None:
    d = ready()
    d.pod(a_pod_manifest("web-0", labels=WEB))
    d.pod(a_pod_manifest("db-0", labels={"app": "db"}))
    (out,) = d.feed(QuotaGroupAdmitted(group="g", attempt=1, members=["default/db-0", "default/web-0"]))
    assert isinstance(out, ReservationGroupResolved)
    assert sorted(out.matches) == ["default/web-0"]


def test_a_fold_of_the_log_sees_what_the_service_sees() -> None:
    """``allot get reservations`` folds inputs and decisions in log order; it must end where the service is."""
    d = ready(allocateOnce=False)
    d.pod(a_pod_manifest("web-0", labels=WEB))
    d.place("default/web-0", "n2", reservation="r1")
    d.tick(86400)
    fold = Driver()
    for event, when in d.log:
        fold.engine.apply(event, when)
    assert fold.engine.world.book.snapshot() == d.engine.world.book.snapshot()
