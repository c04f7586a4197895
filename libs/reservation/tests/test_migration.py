"""PodMigrationJob: ReservationFirst and EvictDirectly, standalone and Kubernetes eviction, failures, abort, GC."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.events import (
    Event,
    MigrationAborted,
    MigrationCondition,
    MigrationDeleted,
    MigrationEvicted,
    MigrationEvictionFailed,
    MigrationEvictionRequested,
    MigrationFailed,
    MigrationPending,
    MigrationRejected,
    MigrationRemoved,
    MigrationRunning,
    ObjectRef,
    PodDeleted,
    PodSubmitted,
    ReservationAccepted,
    ReservationRemoved,
    ReservationUnschedulable,
)
from allot_reservation.testing import Driver, a_job_manifest, a_pod_manifest, a_reservation_manifest

WEB = {"app": "web"}


def kinds(events: list[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def cluster(config: dict[str, Any] | None = None) -> Driver:
    d = Driver(config)
    d.node("n1")
    d.node("n2")
    return d


def job_reservation(d: Driver, job: str = "j1") -> str:
    return d.engine.jobs.jobs[job].reservation


def test_reservation_first_standalone_end_to_end() -> None:
    d = cluster()
    d.pod(
        a_pod_manifest(
            "web-0", labels=WEB, node="n1", annotations={"scheduling.koordinator.sh/resource-status": "{}"}
        )
    )
    out = d.job(a_job_manifest("j1", pod="default/web-0"))
    assert kinds(out) == ["MigrationRunning", "ReservationAccepted", "MigrationCondition"]
    running, accepted = out[0], out[1]
    assert (
        isinstance(running, MigrationRunning) and running.node == "n1" and running.mode == "ReservationFirst"
    )
    assert isinstance(accepted, ReservationAccepted) and accepted.job == "j1" and accepted.allocate_once
    spec = accepted.manifest["spec"]
    # a pod without a controller owns it by name (standalone re-creates it under that name)
    assert spec["owners"] == [{"object": {"name": "web-0", "namespace": "default"}}]
    terms = spec["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}
        ]
    }
    assert "nodeName" not in spec["template"]["spec"]
    assert accepted.manifest["metadata"]["labels"]["scheduling.koordinator.sh/reservation-order"] == str(
        d.now // 1000
    )
    assert "annotations" not in spec["template"]["metadata"]  # allocation annotations are not copied

    out = d.placed_reservation(job_reservation(d), "n2")
    assert kinds(out) == [
        "MigrationCondition",
        "MigrationCondition",
        "MigrationEvicted",
        "PodDeleted",
        "PodSubmitted",
    ]
    evicted, deleted, submitted = out[2], out[3], out[4]
    assert isinstance(evicted, MigrationEvicted) and isinstance(deleted, PodDeleted)
    assert isinstance(submitted, PodSubmitted)
    assert deleted.uid == "uid-default-web-0" and submitted.uid == evicted.new_uid != deleted.uid
    assert "nodeName" not in submitted.manifest["spec"]
    assert "annotations" not in submitted.manifest["metadata"]
    assert d.engine.world.pods["default/web-0"].uid == evicted.new_uid

    (resolved,) = d.admit("default/web-0")
    assert [c.name for c in resolved.match.candidates] == [job_reservation(d)]  # type: ignore[attr-defined]
    out = d.place("default/web-0", "n2", reservation=job_reservation(d))
    assert kinds(out) == ["ReservationSucceeded", "MigrationCondition", "MigrationCondition"]
    out = d.bind("default/web-0", "n2")
    assert kinds(out) == ["MigrationCondition", "MigrationCondition", "MigrationSucceeded"]
    status = d.engine.jobs.jobs["j1"].status()
    assert status["phase"] == "Succeeded" and status["nodeName"] == "n2" and status["status"] == "Complete"
    assert status["message"] == f'Bind Pod "default/web-0" in Reservation "{job_reservation(d)}"'


def test_controller_pod_reservation_is_owned_by_the_controller() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", labels=WEB, node="n1", controller=("ReplicaSet", "web-rs")))
    d.pod(a_pod_manifest("web-1", labels=WEB, node="n2", controller=("ReplicaSet", "web-rs")))
    out = d.job(a_job_manifest("j1", pod="default/web-0"))
    accepted = out[1]
    assert isinstance(accepted, ReservationAccepted)
    assert accepted.manifest["spec"]["owners"] == [
        {
            "controller": {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web-rs",
                "uid": "uid-web-rs",
                "controller": True,
                "namespace": "default",
            }
        }
    ]


def test_evict_directly_standalone_is_one_decision() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", node="n1"))
    out = d.job(a_job_manifest("j1", pod="default/web-0", mode="EvictDirectly"))
    assert kinds(out) == [
        "MigrationRunning",
        "MigrationCondition",
        "MigrationEvicted",
        "PodDeleted",
        "PodSubmitted",
        "MigrationSucceeded",
    ]
    assert out[-1].message == 'Pod "default/web-0" has been evicted'  # type: ignore[attr-defined]


def test_kubernetes_mode_asks_the_binder_and_follows_its_answer() -> None:
    d = cluster({"mode": "kubernetes", "migration": {"evictAllBarePods": True}})
    d.pod(a_pod_manifest("web-0", node="n1"))
    out = d.job(
        a_job_manifest(
            "j1", pod="default/web-0", mode="EvictDirectly", deleteOptions={"gracePeriodSeconds": 5}
        )
    )
    assert kinds(out) == ["MigrationRunning", "MigrationCondition", "MigrationEvictionRequested"]
    request = out[-1]
    assert isinstance(request, MigrationEvictionRequested) and request.delete_options == {
        "gracePeriodSeconds": 5
    }
    assert d.engine.jobs.jobs["j1"].status()["status"] == "Eviction"
    ref = ObjectRef(name="j1")
    out = d.feed(
        MigrationEvicted(job=ref, uid="uid-j1", pod=request.pod, pod_uid=request.pod_uid, mode="kubernetes")
    )
    assert kinds(out) == ["MigrationCondition", "MigrationSucceeded"]

    d.pod(a_pod_manifest("web-1", node="n1"))
    d.job(a_job_manifest("j2", pod="default/web-1", mode="EvictDirectly"))
    out = d.feed(
        MigrationEvictionFailed(job=ObjectRef(name="j2"), uid="uid-j2", pod=request.pod, message="forbidden")
    )
    assert kinds(out) == ["MigrationFailed"] and out[0].reason == "FailedEvict"  # type: ignore[attr-defined]


def test_missing_pod_fails() -> None:
    d = cluster()
    (out,) = d.job(a_job_manifest("j1", pod="default/ghost"))
    assert isinstance(out, MigrationFailed) and out.reason == "MissingPod"
    assert out.message == 'Abort job caused by missing Pod "default/ghost"'


def test_reservation_on_the_pods_own_node_is_forbidden_and_cleaned_up() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", node="n1"))
    d.job(a_job_manifest("j1", pod="default/web-0"))
    out = d.placed_reservation(job_reservation(d), "n1")
    assert kinds(out) == ["MigrationFailed", "ReservationRemoved"]
    assert out[0].reason == "ForbiddenMigratePod"  # type: ignore[attr-defined]
    assert isinstance(out[1], ReservationRemoved) and out[1].reason == "MigrationEnded"


def test_unschedulable_reservation_waits_then_times_out() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", node="n1"))
    d.job(a_job_manifest("j1", pod="default/web-0", ttl="5m"))
    name = job_reservation(d)
    record = d.engine.world.book.get(name)
    assert record is not None and record.expires_at == d.now + 300_000_000  # the job's ttl
    out = d.feed(
        ReservationUnschedulable(
            reservation=ObjectRef(name=name), uid=record.uid, message="0/2 nodes", codes=[]
        )
    )
    assert kinds(out) == ["MigrationCondition"]
    cond = out[0]
    assert isinstance(cond, MigrationCondition) and (cond.condition, cond.status, cond.reason) == (
        "ReservationScheduled",
        "False",
        "Unschedulable",
    )
    assert d.engine.next_deadline() == d.now + 300_000_000
    out = d.tick(300)
    assert kinds(out) == ["ReservationFailed", "MigrationFailed", "ReservationRemoved"] or kinds(out) == [
        "ReservationFailed",
        "MigrationFailed",
    ]
    failed = next(e for e in out if isinstance(e, MigrationFailed))
    assert failed.reason == "Timeout" and failed.message == "Abort job caused by timeout"


def test_reservation_ref_missing_and_present() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", node="n1", labels=WEB))
    out = d.job(
        a_job_manifest("j1", pod="default/web-0", reservationOptions={"reservationRef": {"name": "nope"}})
    )
    assert kinds(out) == ["MigrationRunning", "MigrationFailed"]
    assert out[1].reason == "MissingReservation"  # type: ignore[attr-defined]

    d.reservation(a_reservation_manifest("r1"))
    d.placed_reservation("r1", "n2")
    out = d.job(
        a_job_manifest("j2", pod="default/web-0", reservationOptions={"reservationRef": {"name": "r1"}})
    )
    assert kinds(out)[:2] == ["MigrationRunning", "MigrationCondition"] and "MigrationEvicted" in kinds(out)
    assert "ReservationAccepted" not in kinds(out)


def test_reservation_taken_by_another_pod_first_is_forbidden() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", node="n1", labels=WEB))
    d.pod(a_pod_manifest("web-1", labels=WEB))
    d.reservation(a_reservation_manifest("r1"))
    d.placed_reservation("r1", "n2")
    d.place("default/web-1", "n2", reservation="r1")
    out = d.job(
        a_job_manifest("j1", pod="default/web-0", reservationOptions={"reservationRef": {"name": "r1"}})
    )
    assert kinds(out) == ["MigrationRunning", "MigrationCondition", "MigrationFailed"]
    failed = out[-1]
    assert isinstance(failed, MigrationFailed) and failed.reason == "ForbiddenMigratePod"
    assert failed.message == "Reservation is already bound by another Pod"


def test_paused_then_resumed() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", node="n1"))
    (out,) = d.job(a_job_manifest("j1", pod="default/web-0", paused=True, mode="EvictDirectly"))
    assert isinstance(out, MigrationPending) and out.reason == "Paused"
    out = d.job(a_job_manifest("j1", pod="default/web-0", paused=False, mode="EvictDirectly"))
    assert kinds(out)[-1] == "MigrationSucceeded"


def test_abort_and_delete_clean_up_the_reservation() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", node="n1"))
    d.job(a_job_manifest("j1", pod="default/web-0"))
    aborted = a_job_manifest("j1", pod="default/web-0")
    aborted["status"] = {"phase": "Aborted"}
    out = d.job(aborted)
    assert kinds(out) == ["MigrationAborted", "ReservationRemoved"]
    assert isinstance(out[0], MigrationAborted) and d.engine.jobs.jobs["j1"].phase == "Aborted"

    d.pod(a_pod_manifest("web-1", node="n1"))
    d.job(a_job_manifest("j2", pod="default/web-1"))
    out = d.feed(MigrationDeleted(job=ObjectRef(name="j2"), uid="uid-j2"))
    assert kinds(out) == ["ReservationRemoved", "MigrationRemoved"]
    assert "j2" not in d.engine.jobs.jobs


def test_finished_jobs_are_scavenged() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0", node="n1"))
    d.job(a_job_manifest("j1", pod="default/web-0", mode="EvictDirectly"))
    assert d.engine.next_deadline() == d.now + 30 * 60 * 1_000_000
    (out,) = d.tick(1800)
    assert isinstance(out, MigrationRemoved) and out.reason == "GarbageCollected"
    assert d.engine.jobs.jobs == {}


def test_invalid_job_is_rejected() -> None:
    d = cluster()
    (out,) = d.job(a_job_manifest("j1", pod="default/web-0", mode="Teleport"))
    assert isinstance(out, MigrationRejected) and out.errors[0].path == "spec.mode"
    assert d.engine.snapshot()["migrations"]["rejected"]["j1"].startswith("invalid PodMigrationJob")


def test_pending_pod_needs_no_eviction() -> None:
    d = cluster()
    d.pod(a_pod_manifest("web-0"))
    out = d.job(a_job_manifest("j1", pod="default/web-0"))
    accepted = out[1]
    assert isinstance(accepted, ReservationAccepted)
    assert accepted.manifest["spec"]["owners"] == [
        {"object": {"uid": "uid-default-web-0", "kind": "Pod", "name": "web-0", "namespace": "default"}}
    ]
    assert kinds(d.placed_reservation(job_reservation(d), "n2")) == ["MigrationCondition"]
    d.admit("default/web-0")
    out = d.place("default/web-0", "n2", reservation=job_reservation(d))
    assert kinds(out) == ["ReservationSucceeded", "MigrationSucceeded"]
    assert out[1].message == 'Assign Pod "default/web-0" to node "n2"'  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("config", "job_ttl", "fails_after"),
    [
        ({}, None, 300),  # upstream's defaultJobTTL: 5 minutes
        ({"defaultJobTTL": "90s"}, None, 90),
        ({"defaultJobTTL": "90s"}, "10m", 600),  # the job's own ttl wins
        ({"defaultJobTTL": "0s"}, None, None),  # no default timeout
    ],
    ids=["default-5m", "configured", "job-ttl-wins", "disabled"],
)
def test_a_job_times_out_at_its_ttl_or_the_default(
    config: dict[str, Any], job_ttl: str | None, fails_after: int | None
) -> None:
    d = Driver({"migration": config})
    d.node("n1")  # one node: the job's reservation never finds another one
    d.pod(a_pod_manifest("web-0", node="n1"))
    d.job(a_job_manifest("j1", pod="default/web-0", **({"ttl": job_ttl} if job_ttl else {})))
    start = d.now
    if fails_after is None:
        assert d.engine.next_deadline() != start + 300_000_000
        d.tick(1500)  # 25 minutes (the scavenger removes a job without a ttl at 30)
        assert d.engine.jobs.jobs["j1"].phase == "Running"
        return
    assert d.engine.next_deadline() == start + fails_after * 1_000_000
    assert not [e for e in d.tick(fails_after - 1) if isinstance(e, MigrationFailed)]
    failed = [e for e in d.tick(fails_after) if isinstance(e, MigrationFailed)]
    assert len(failed) == 1 and failed[0].reason == "Timeout"
    assert failed[0].message == "Abort job caused by timeout"


def test_default_job_ttl_must_be_a_duration() -> None:
    from allot_reservation.config import ConfigError, ReservationConfig

    with pytest.raises(ConfigError) as err:
        ReservationConfig.from_dict({"migration": {"defaultJobTTL": "soon"}})
    assert [i.path for i in err.value.issues] == ["migration.defaultJobTTL"]
