"""Every PodMigrationJob passes the evictor filter, a job applied by hand as much as the descheduler's: a pod the
filter refuses ends the job Failed (ForbiddenMigratePod) before anything is reserved or evicted."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.events import Event, MigrationFailed, MigrationPending
from allot_reservation.testing import Driver, a_job_manifest, a_pod_manifest

FORBIDDEN = "is forbidden to migrate because it does not meet the requirements"


def kinds(events: list[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def cluster(config: dict[str, Any] | None = None) -> Driver:
    d = Driver(config)
    for name in ("n1", "n2", "n3"):
        d.node(name)
    return d


def owned_by(kind: str, name: str, pod: str, node: str, **kw: Any) -> dict[str, Any]:
    return a_pod_manifest(pod, node=node, controller=(kind, name), **kw)


def with_volumes(manifest: dict[str, Any], *volumes: dict[str, Any]) -> dict[str, Any]:
    if volumes:
        manifest["spec"]["volumes"] = list(volumes)
    return manifest


def two(kind: str, name: str, *volumes: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
    """Two replicas of a workload, so that the expected-replicas check (a workload of one is never migrated) does
    not hide what the evictor filter decides."""
    return [with_volumes(owned_by(kind, name, f"{name}-{i}", f"n{i + 1}", **kw), *volumes) for i in range(2)]


LOCAL = "uses local storage (emptyDir or hostPath; evictLocalStoragePods is off)"
REFUSED = [
    pytest.param(two("DaemonSet", "agent"), "a DaemonSet pod belongs to its node", id="daemonset"),
    pytest.param(
        [  # a node owns its mirror pods
            owned_by(
                "Node",
                "n1",
                name,
                "n1",
                annotations={"kubernetes.io/config.mirror": "4f1c", "kubernetes.io/config.source": "file"},
            )
            for name in ("etcd-n1", "kube-apiserver-n1")
        ],
        "a mirror (static) pod cannot be evicted",
        id="mirror",
    ),
    pytest.param(two("ReplicaSet", "cache", {"name": "tmp", "emptyDir": {}}), LOCAL, id="emptydir"),
    pytest.param(
        two("ReplicaSet", "logs", {"name": "var-log", "hostPath": {"path": "/var/log"}}), LOCAL, id="hostpath"
    ),
    pytest.param(
        two("ReplicaSet", "dns", priority=2_000_000_000),
        "system-critical priority 2000000000 (evictSystemCriticalPods is off)",
        id="system-critical",
    ),
    pytest.param(
        two("ReplicaSet", "db", annotations={"scheduling.koordinator.sh/eviction-cost": "2147483647"}),
        "scheduling.koordinator.sh/eviction-cost is 2147483647: never evicted",
        id="eviction-cost-max",
    ),
    pytest.param(
        two("ReplicaSet", "db", annotations={"descheduler.alpha.kubernetes.io/prevent-eviction": "true"}),
        "descheduler.alpha.kubernetes.io/prevent-eviction is true",
        id="prevent-eviction",
    ),
]


@pytest.mark.parametrize(("pods", "why"), REFUSED)
@pytest.mark.parametrize("mode", ["EvictDirectly", "ReservationFirst"])
def test_a_job_made_by_hand_for_a_pod_the_evictor_refuses_fails(
    pods: list[dict[str, Any]], why: str, mode: str
) -> None:
    d = cluster()
    for manifest in pods:
        d.pod(manifest)
    key = f"default/{pods[0]['metadata']['name']}"
    uid = pods[0]["metadata"]["uid"]
    out = d.job(a_job_manifest("by-hand", pod=key, mode=mode))
    assert kinds(out) == ["MigrationFailed"]  # nothing reserved, nothing evicted
    failed = out[0]
    assert isinstance(failed, MigrationFailed) and failed.reason == "ForbiddenMigratePod"
    assert failed.message == f'Pod "{key}" {FORBIDDEN}: {why}'
    status = d.engine.jobs.jobs["by-hand"].status()
    assert status["phase"] == "Failed" and status["reason"] == "ForbiddenMigratePod"
    assert d.engine.world.pods[key].uid == uid and not d.engine.world.book.records


@pytest.mark.parametrize("mode", ["EvictDirectly", "ReservationFirst"])
def test_a_job_made_by_hand_for_a_deployment_pod_still_migrates(mode: str) -> None:
    d = cluster()
    for i in range(2):
        d.pod(owned_by("ReplicaSet", "web-5f9b977566", f"web-{i}", f"n{i + 1}"))
    out = d.job(a_job_manifest("by-hand", pod="default/web-0", mode=mode))
    assert kinds(out)[0] == "MigrationRunning"
    if mode == "EvictDirectly":
        assert kinds(out)[-1] == "MigrationSucceeded"
        return
    reservation = d.engine.jobs.jobs["by-hand"].reservation
    d.placed_reservation(reservation, "n3")
    d.admit("default/web-0")
    d.place("default/web-0", "n3", reservation=reservation)
    assert kinds(d.bind("default/web-0", "n3"))[-1] == "MigrationSucceeded"


@pytest.mark.parametrize(
    ("config", "pods"),
    [
        ({"evictLocalStoragePods": True}, two("ReplicaSet", "c", {"name": "t", "emptyDir": {}})),
        ({"evictSystemCriticalPods": True}, two("ReplicaSet", "c", priority=2_000_001_000)),
    ],
    ids=["evictLocalStoragePods", "evictSystemCriticalPods"],
)
def test_the_migration_controller_settings_lift_the_checks(
    config: dict[str, Any], pods: list[dict[str, Any]]
) -> None:
    d = cluster({"migration": config})
    for manifest in pods:
        d.pod(manifest)
    out = d.job(a_job_manifest("j", pod="default/c-0", mode="EvictDirectly"))
    assert kinds(out)[-1] == "MigrationSucceeded"


def test_ignore_pvc_pods_refuses_a_pod_with_a_claim() -> None:
    d = cluster({"migration": {"ignorePvcPods": True}})
    for manifest in two(
        "StatefulSet", "pg", {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    ):
        d.pod(manifest)
    (out,) = d.job(a_job_manifest("j", pod="default/pg-0"))
    assert isinstance(out, MigrationFailed) and out.message.endswith(
        "uses a PersistentVolumeClaim (ignorePvcPods is on)"
    )


def test_the_evict_annotation_lifts_the_evictor_and_the_limits() -> None:
    # upstream: a pod annotated descheduler.alpha.kubernetes.io/evict passes the arbitrator's filters, retryable or not
    d = cluster({"migration": {"maxMigratingPerNode": 1}})
    evict = {"descheduler.alpha.kubernetes.io/evict": "true"}
    d.pod(owned_by("DaemonSet", "agent", "agent-n1", "n1", annotations=evict))
    d.pod(a_pod_manifest("other", node="n1"))
    d.pod(a_pod_manifest("third", node="n1"))
    d.job(a_job_manifest("j0", pod="default/other", mode="ReservationFirst"))  # takes n1's one slot
    (held,) = d.job(a_job_manifest("j1", pod="default/third"))
    assert isinstance(held, MigrationPending) and held.reason == "MaxMigratingPerNode"
    out = d.job(a_job_manifest("j2", pod="default/agent-n1", mode="EvictDirectly"))
    assert kinds(out)[-1] == "MigrationSucceeded"  # a DaemonSet pod, one replica, the node's limit reached


def test_prevent_eviction_wins_over_the_evict_annotation() -> None:
    d = cluster()
    d.pod(
        a_pod_manifest(
            "p",
            node="n1",
            annotations={
                "descheduler.alpha.kubernetes.io/evict": "true",
                "descheduler.alpha.kubernetes.io/prevent-eviction": "true",
            },
        )
    )
    (out,) = d.job(a_job_manifest("j", pod="default/p"))
    assert isinstance(out, MigrationFailed) and out.reason == "ForbiddenMigratePod"
