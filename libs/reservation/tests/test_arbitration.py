"""Migration arbitration: per node / namespace / workload / global limits, max unavailable, expected replicas,
non-retryable filters, eviction rate limits and the per-workload object limiter."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.events import Event, MigrationFailed, MigrationPending, ObjectRef, PodReleased
from allot_reservation.arbitration import max_unavailable
from allot_reservation.config import ConfigError, IntOrPercent, ReservationConfig
from allot_reservation.testing import Driver, a_job_manifest, a_pod_manifest


def kinds(events: list[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def cluster(config: dict[str, Any] | None = None, nodes: int = 3) -> Driver:
    d = Driver(config)
    for i in range(1, nodes + 1):
        d.node(f"n{i}")
    return d


@pytest.mark.parametrize(
    ("replicas", "limit", "expected"),
    [
        (1, None, 1),
        (3, None, 1),
        (4, None, 2),
        (10, None, 2),
        (11, None, 1),
        (40, None, 4),
        (10, IntOrPercent(3), 3),
        (10, IntOrPercent(0), 1),
        (10, IntOrPercent(25, True), 2),
        (3, IntOrPercent(5), 3),
    ],
)
def test_max_unavailable(replicas: int, limit: IntOrPercent | None, expected: int) -> None:
    assert max_unavailable(replicas, limit) == expected


def test_per_node_limit_holds_the_third_job_until_one_ends() -> None:
    d = cluster()
    for i in range(3):
        d.pod(a_pod_manifest(f"p{i}", node="n1"))
    assert kinds(d.job(a_job_manifest("j0", pod="default/p0")))[0] == "MigrationRunning"
    assert kinds(d.job(a_job_manifest("j1", pod="default/p1")))[0] == "MigrationRunning"
    (out,) = d.job(a_job_manifest("j2", pod="default/p2"))
    assert isinstance(out, MigrationPending) and out.reason == "MaxMigratingPerNode"
    assert out.message == "2 pods of node n1 are migrating, at most 2"
    # a job ending frees a slot: the held one starts on that very trigger
    out = d.placed_reservation(d.engine.jobs.jobs["j0"].reservation, "n1")  # same node: j0 fails
    assert "MigrationFailed" in kinds(out) and "MigrationRunning" in kinds(out)


def test_global_and_namespace_limits() -> None:
    d = cluster({"migration": {"maxMigratingGlobally": 1, "maxMigratingPerNode": 0}})
    d.pod(a_pod_manifest("a", node="n1"))
    d.pod(a_pod_manifest("b", node="n2"))
    d.job(a_job_manifest("ja", pod="default/a"))
    (out,) = d.job(a_job_manifest("jb", pod="default/b"))
    assert isinstance(out, MigrationPending) and out.reason == "MaxMigratingGlobally"

    d = cluster({"migration": {"maxMigratingPerNamespace": 1}})
    d.pod(a_pod_manifest("a", node="n1", namespace="x"))
    d.pod(a_pod_manifest("b", node="n2", namespace="x"))
    d.pod(a_pod_manifest("c", node="n2", namespace="y"))
    d.job(a_job_manifest("ja", pod="x/a"))
    (out,) = d.job(a_job_manifest("jb", pod="x/b"))
    assert isinstance(out, MigrationPending) and out.reason == "MaxMigratingPerNamespace"
    assert kinds(d.job(a_job_manifest("jc", pod="y/c")))[0] == "MigrationRunning"


def test_workload_never_drops_below_its_max_unavailable() -> None:
    d = cluster()
    rs = ("ReplicaSet", "web")
    for i in range(3):
        d.pod(a_pod_manifest(f"web-{i}", node=f"n{i + 1}", controller=rs))
    d.job(a_job_manifest("j0", pod="default/web-0"))
    (out,) = d.job(a_job_manifest("j1", pod="default/web-1"))
    assert isinstance(out, MigrationPending) and out.reason == "MaxMigratingPerWorkload"

    d = cluster()
    for i in range(3):
        d.pod(a_pod_manifest(f"web-{i}", node=f"n{i + 1}", controller=rs))
    # one replica is already down (released, not running): nothing more may go
    d.feed(PodReleased(pod=ObjectRef(namespace="default", name="web-2"), node="n3"))
    (out,) = d.job(a_job_manifest("j0", pod="default/web-0"))
    assert isinstance(out, MigrationPending) and out.reason == "MaxUnavailablePerWorkload"


@pytest.mark.parametrize(
    ("replicas", "config", "allowed"),
    [
        (1, {}, False),
        (2, {}, True),
        (1, {"skipCheckExpectedReplicas": True}, True),
        (4, {"maxUnavailablePerWorkload": 4}, False),
    ],
)
def test_expected_replicas(replicas: int, config: dict[str, Any], allowed: bool) -> None:
    d = cluster({"migration": config}, nodes=4)
    for i in range(replicas):
        d.pod(a_pod_manifest(f"web-{i}", node=f"n{i + 1}", controller=("ReplicaSet", "web")))
    out = d.job(a_job_manifest("j0", pod="default/web-0"))
    assert (kinds(out)[0] == "MigrationRunning") is allowed
    if not allowed:
        assert isinstance(out[0], MigrationFailed) and out[0].reason == "ForbiddenMigratePod"


@pytest.mark.parametrize(
    ("config", "pod_kw", "mode", "reason_part"),
    [
        ({"namespaces": {"exclude": ["default"]}}, {}, "standalone", "excluded"),
        ({"namespaces": {"include": ["prod"]}}, {}, "standalone", "not among"),
        ({"labelSelector": {"matchLabels": {"migratable": "yes"}}}, {}, "standalone", "label selector"),
        ({"priorityThreshold": {"value": 100}}, {"priority": 100}, "standalone", "threshold"),
        ({}, {}, "kubernetes", "no controller"),
    ],
)
def test_non_retryable_filters(
    config: dict[str, Any], pod_kw: dict[str, Any], mode: str, reason_part: str
) -> None:
    d = cluster({"mode": mode, "migration": config})
    d.pod(a_pod_manifest("p", node="n1", **pod_kw))
    (out,) = d.job(a_job_manifest("j", pod="default/p"))
    assert isinstance(out, MigrationFailed) and out.reason == "ForbiddenMigratePod"
    assert reason_part in out.message


def test_a_second_job_for_the_same_pod_is_forbidden() -> None:
    d = cluster()
    d.pod(a_pod_manifest("p", node="n1"))
    d.job(a_job_manifest("j0", pod="default/p"))
    (out,) = d.job(a_job_manifest("j1", pod="default/p"))
    assert isinstance(out, MigrationFailed) and "already being migrated" in out.message


def test_eviction_rate_limit_paces_evictions_by_recorded_time() -> None:
    d = cluster({"migration": {"evictQPS": 0.5, "evictBurst": 1, "maxMigratingPerNode": 0}})
    d.pod(a_pod_manifest("a", node="n1"))
    d.pod(a_pod_manifest("b", node="n2"))
    assert (
        kinds(d.job(a_job_manifest("ja", pod="default/a", mode="EvictDirectly")))[-1] == "MigrationSucceeded"
    )
    out = d.job(a_job_manifest("jb", pod="default/b", mode="EvictDirectly"))
    assert kinds(out) == ["MigrationRunning", "MigrationCondition"]
    assert out[1].reason == "RateLimited"  # type: ignore[attr-defined]
    assert d.engine.next_deadline() == d.now + 2_000_000  # one token every 2 s
    out = d.tick(2)
    assert kinds(out)[-1] == "MigrationSucceeded"


def test_workload_object_limiter() -> None:
    # 4 replicas: max migrating 2 per 5 minutes → one eviction every 150 s for this workload
    d = cluster({"migration": {"maxMigratingPerNode": 0}}, nodes=4)
    for i in range(4):
        d.pod(a_pod_manifest(f"web-{i}", node=f"n{i + 1}", controller=("ReplicaSet", "web")))
    assert (
        kinds(d.job(a_job_manifest("j0", pod="default/web-0", mode="EvictDirectly")))[-1]
        == "MigrationSucceeded"
    )
    d.pod(
        a_pod_manifest("web-0", node="n1", controller=("ReplicaSet", "web"), uid="web-0-again")
    )  # it came back
    out = d.job(a_job_manifest("j1", pod="default/web-1", mode="EvictDirectly"), seconds=1)
    assert kinds(out) == ["MigrationRunning", "MigrationCondition"]
    assert d.engine.next_deadline() == d.now - 1_000_000 + 150_000_000
    assert kinds(d.tick(150))[-1] == "MigrationSucceeded"


def test_config_errors_name_the_setting() -> None:
    with pytest.raises(ConfigError) as err:
        ReservationConfig.from_dict(
            {"migration": {"maxMigratingPerNod": 1, "maxUnavailablePerWorkload": "x"}}
        )
    assert [i.path for i in err.value.issues] == [
        "migration.maxMigratingPerNod",
        "migration.maxUnavailablePerWorkload",
    ]
