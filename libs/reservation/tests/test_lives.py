"""Migration events name a pod but are about a job: a host following pod lives never takes them for a decision
about another life of the pod (their ``uid`` is the job's)."""

from __future__ import annotations

import pytest

from allot_contracts.events import (
    Event,
    MigrationEvicted,
    MigrationEvictionFailed,
    MigrationEvictionRequested,
    ObjectRef,
    PodPlaced,
    PodSubmitted,
)
from allot_contracts.lives import PodLives

POD = ObjectRef(namespace="default", name="web-0")
JOB = ObjectRef(name="move-web-0")


@pytest.mark.parametrize(
    "event",
    [
        MigrationEvictionRequested(job=JOB, uid="job-uid", pod=POD, pod_uid="life-1", node="n1"),
        MigrationEvicted(job=JOB, uid="job-uid", pod=POD, pod_uid="life-1", node="n1", mode="kubernetes"),
        MigrationEvictionFailed(job=JOB, uid="job-uid", pod=POD, message="refused"),
        # the answer to an eviction may come after the pod was re-created under its name
        MigrationEvicted(job=JOB, uid="job-uid", pod=POD, pod_uid="life-0", node="n1", mode="kubernetes"),
    ],
    ids=["requested", "evicted", "eviction-failed", "evicted-after-recreation"],
)
def test_job_events_are_never_stale(event: Event) -> None:
    lives = PodLives()
    lives.observe(PodSubmitted(pod=POD, uid="life-1", manifest={}))
    assert not lives.stale(event)


def test_pod_events_of_another_life_are_stale() -> None:
    lives = PodLives()
    lives.observe(PodSubmitted(pod=POD, uid="life-1", manifest={}))
    assert lives.stale(PodPlaced(pod=POD, uid="life-0", attempt=1, node="n1", decision={}))
    assert not lives.stale(PodPlaced(pod=POD, uid="life-1", attempt=1, node="n1", decision={}))
