"""binder's processor in both modes: standalone records the binding; Kubernetes mode requests it and follows the
outcomes the IO worker records (pure: no IO, no clock)."""

from __future__ import annotations

import pytest

from allot_contracts.decisions.placement import Decision
from allot_contracts.errors import InvalidInput
from allot_contracts.events import (
    GangGroupAdmitted,
    GangGroupPlaced,
    ObjectRef,
    PodBindFailed,
    PodBindRequested,
    PodBound,
    PodDeleted,
    PodPlaced,
    PodSubmitted,
    QuotaStatusPublished,
    QuotaStatusSynced,
)
from allot_contracts.objects.pod import parse_pod
from allot_testing.builders import a_qos_pod
from binder.processor import Binder

POD = ObjectRef(namespace="default", name="p")
ANNOTATIONS = {"scheduling.koordinator.sh/device-allocated": {"gpu": [{"minor": 0}]}}


def step(binder: Binder, event, *, own: bool = False):
    binder.evolve(event, at=1, own=own)
    emits = [] if own else binder.decide(event, at=1)
    for emit in emits:
        binder.evolve(emit.event, at=1, own=True)
    return [e.event for e in emits]


def placed(attempt: int = 1, node: str = "n1") -> PodPlaced:
    return PodPlaced(pod=POD, attempt=attempt, node=node, decision=_decision(node, ANNOTATIONS))


def test_standalone_binds_by_recording_the_binding():
    binder = Binder({})
    step(binder, PodSubmitted(pod=POD, uid="u1", manifest={}))
    (bound,) = step(binder, placed())
    assert bound == PodBound(
        pod=POD,
        attempt=1,
        node="n1",
        annotations={"scheduling.koordinator.sh/device-allocated": '{"gpu":[{"minor":0}]}'},
    )
    # Our own pod.bound delivered again as an input changes nothing (rebuild never sees it as input).
    before = binder.snapshot()
    step(binder, bound)
    assert binder.snapshot() == before
    assert step(binder, placed(attempt=2)) == []  # bound at most once per life


def test_kubernetes_mode_requests_then_follows_the_outcome():
    binder = Binder({"mode": "kubernetes"})
    step(binder, PodSubmitted(pod=POD, uid="u1", manifest={}))
    (request,) = step(binder, placed())
    assert request == PodBindRequested(
        pod=POD,
        uid="u1",
        attempt=1,
        node="n1",
        annotations={"scheduling.koordinator.sh/device-allocated": '{"gpu":[{"minor":0}]}'},
    )
    assert [(r.pod, r.uid, r.attempt, r.node) for r in binder.outstanding()] == [(POD, "u1", 1, "n1")]
    assert step(binder, placed()) == []  # requested: never twice
    # an outcome for another attempt is not this request's
    step(binder, PodBound(pod=POD, attempt=7, node="n1", mode="kubernetes"))
    assert binder.outstanding()
    step(binder, PodBound(pod=POD, attempt=1, node="n1", annotations=request.annotations, mode="kubernetes"))
    assert binder.outstanding() == [] and binder.bound == {"default/p": "n1"}


def test_kubernetes_mode_failure_clears_the_request_and_a_new_attempt_binds_again():
    binder = Binder({"mode": "kubernetes"})
    step(binder, PodSubmitted(pod=POD, uid="u1", manifest={}))
    step(binder, placed())
    step(binder, PodBindFailed(pod=POD, attempt=1, node="n1", message="409"))
    assert binder.outstanding() == [] and binder.bound == {}
    (again,) = step(binder, placed(attempt=2, node="n2"))
    assert isinstance(again, PodBindRequested) and (again.attempt, again.node) == (2, "n2")


def test_a_deleted_pod_is_no_longer_outstanding():
    binder = Binder({"mode": "kubernetes"})
    step(binder, PodSubmitted(pod=POD, uid="u1", manifest={}))
    step(binder, placed())
    step(binder, PodDeleted(pod=POD, uid="u1"))
    assert binder.outstanding() == []


def test_gang_members_are_requested_in_one_decision():
    binder = Binder({"mode": "kubernetes"})
    members = ["default/a", "default/b"]
    for i, key in enumerate(members):
        step(
            binder,
            PodSubmitted(
                pod=ObjectRef(namespace="default", name=key.split("/")[1]), uid=f"u{i}", manifest={}
            ),
        )
    step(
        binder,
        GangGroupPlaced(
            group="g",
            attempt=3,
            members=members,
            decisions={m: _decision("n1", {}) for m in members},
        ),
    )
    out = step(binder, GangGroupAdmitted(group="g", attempt=3, members=members))
    assert [(e.pod.key, e.uid, e.attempt) for e in out] == [("default/a", "u0", 3), ("default/b", "u1", 3)]
    assert all(isinstance(e, PodBindRequested) for e in out)


def test_quota_status_is_published_for_the_mode_and_kept_for_the_worker():
    patch = {"metadata": {"annotations": {"quota.scheduling.koordinator.sh/runtime": "{}"}}}
    kube = Binder({"mode": "kubernetes"})
    (published,) = step(kube, QuotaStatusSynced(patches={"team/q": patch}))
    assert published == QuotaStatusPublished(
        quota=ObjectRef(namespace="team", name="q"), patch=patch, mode="kubernetes"
    )
    assert kube.quota_patches() == {"team/q": patch}
    standalone = Binder({})
    (recorded,) = step(standalone, QuotaStatusSynced(patches={"team/q": patch}))
    assert recorded.mode == "standalone" and standalone.quota_patches() == {}


def test_an_unknown_mode_is_refused():
    with pytest.raises(InvalidInput, match="mode"):
        Binder({"mode": "cluster"})


def _decision(node: str, annotations: dict) -> Decision:
    return Decision(pod="default/p", outcome="Scheduled", node=node, annotations=dict(annotations))


@pytest.mark.parametrize(
    ("provider", "cdi"), [("HAMi-core", True), ("", False)], ids=["HAMi-core", "no provider"]
)
def test_a_pod_read_at_the_door_gets_cdi_devices_only_when_it_is_a_hami_core_pod(provider: str, cdi: bool):
    labels = {"koordinator.sh/gpu-isolation-provider": provider} if provider else {}
    manifest = a_qos_pod("p", uid="u1", labels=labels, requests={"nvidia.com/gpu": "1"})
    spec = parse_pod(manifest, [], [])
    assert spec is not None and spec.isolation_provider == provider
    binder = Binder({})
    step(binder, PodSubmitted(pod=POD, uid="u1", manifest=manifest, spec=spec))
    (bound,) = step(binder, placed())
    keys = [k for k in bound.annotations if k.startswith("cdi-devices.noderesource.dev/")]
    assert bool(keys) is cdi
