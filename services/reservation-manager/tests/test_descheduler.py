"""The descheduler inside reservation-manager, driven through the simulator (all seven services' decision code over
one log): rounds on recorded time, PodMigrationJobs through the migration controller, convergence without
oscillation, dry runs, the pre-eviction hotspot re-check, and replay re-deriving every round."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from allot_descheduling import DeschedulerConfigError
from allot_runtime.processor import Host
from allot_runtime.replay import rebuild
from allot_testing.scenario import Scenario
from reservation_manager.processor import ReservationManager

GI = 1024**3
CORES = 16
HIGH = {"cpu": 60, "memory": 80}


def descheduler(dry_run: bool = False, abnormalities: int = 2) -> dict[str, Any]:
    return {
        "reservation-manager": {
            "descheduler": {
                "apiVersion": "descheduler/v1alpha2",
                "kind": "DeschedulerConfiguration",
                "deschedulingInterval": "60s",
                "dryRun": dry_run,
                "profiles": [
                    {
                        "name": "lnl",
                        "pluginConfig": [
                            {
                                "name": "LowNodeLoad",
                                "args": {
                                    "lowThresholds": {"cpu": 30, "memory": 30},
                                    "highThresholds": HIGH,
                                    "anomalyCondition": {"consecutiveAbnormalities": abnormalities},
                                },
                            }
                        ],
                    }
                ],
            }
        }
    }


def node(name: str) -> dict[str, Any]:
    alloc = {"cpu": str(CORES), "memory": "64Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": alloc}}


def pod(name: str, on: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"app": app},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": app,
                    "uid": f"rs-{app}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": on,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}],
        },
    }


class Cluster:
    """A load model: every pod uses a fixed amount wherever it runs; each node reports its system usage plus its
    pods' usage, as koordlet would, after each round."""

    SYSTEM = 500  # millicores per node

    def __init__(self, config: dict[str, Any], placement: dict[str, tuple[str, int]]) -> None:
        self.usage = {name: cpu for name, (_, cpu) in placement.items()}
        self.nodes = sorted({n for n, _ in placement.values()} | {"node-idle"})
        self.sc = Scenario(config)
        self.sc.apply(*[node(n) for n in self.nodes])
        for name, (on, _) in sorted(placement.items()):
            self.sc.apply(pod(name, on, name.rsplit("-", 1)[0]))

    def where(self) -> dict[str, str]:
        world = self.sc.sim.host("reservation-manager").processor.engine.world  # type: ignore[attr-defined]
        return {key.split("/")[1]: rec.node for key, rec in world.pods.items()}

    def node_cpu(self) -> dict[str, int]:
        where = self.where()
        return {n: self.SYSTEM + sum(self.usage[p] for p, at in where.items() if at == n) for n in self.nodes}

    def report(self) -> None:
        where = self.where()
        for n in self.nodes:
            on = sorted(p for p, at in where.items() if at == n)
            cpu = self.SYSTEM + sum(self.usage[p] for p in on)
            self.sc.apply(
                {
                    "apiVersion": "slo.koordinator.sh/v1alpha1",
                    "kind": "NodeMetric",
                    "metadata": {"name": n},
                    "status": {
                        "nodeMetric": {
                            "nodeUsage": {"resources": {"cpu": f"{cpu}m", "memory": f"{2 + 2 * len(on)}Gi"}}
                        },
                        "podsMetric": [
                            {
                                "namespace": "shop",
                                "name": p,
                                "podUsage": {"resources": {"cpu": f"{self.usage[p]}m", "memory": "2Gi"}},
                            }
                            for p in on
                        ],
                    },
                }
            )

    def rounds(self) -> list[dict[str, Any]]:
        return self.sc.of_type("descheduler.round")


PLACEMENT = {
    # node-hot: 12.5 of 16 cores (78 %), node-hot-2: 13 (81 %), node-warm: 6.5 (41 %), node-idle: 0.5 (3 %)
    **{f"web-{i}": ("node-hot", 2000) for i in range(6)},
    **{f"etl-{i}": ("node-hot-2", 2500) for i in range(5)},
    **{f"api-{i}": ("node-warm", 3000) for i in range(2)},
}


def test_ten_rounds_converge_without_moving_a_pod_twice_or_a_target_above_high() -> None:
    cluster = Cluster(descheduler(), PLACEMENT)
    high_cpu = CORES * 1000 * HIGH["cpu"] // 100
    history: list[dict[str, int]] = []
    for _ in range(10):
        cluster.report()
        history.append(cluster.node_cpu())
        cluster.sc.advance(60)
        # the migration controller's limits space evictions out: let them land before the next report
        cluster.sc.advance(0)
    rounds = cluster.rounds()
    assert [r["round"] for r in rounds] == list(range(1, 11))
    jobs = cluster.sc.of_type("migration.applied")
    moved = Counter(j["manifest"]["spec"]["podRef"]["name"] for j in jobs)
    assert moved and max(moved.values()) == 1, moved  # no pod migrated twice
    evicted = Counter(e["pod"]["name"] for e in cluster.sc.of_type("migration.evicted"))
    assert evicted and max(evicted.values()) == 1
    final = cluster.node_cpu()
    assert final["node-hot"] <= high_cpu, final  # the hot node is under its high threshold
    for loads in [*history, final]:  # and no node that received a pod ever went above it
        assert loads["node-idle"] <= high_cpu and loads["node-warm"] <= high_cpu, loads
    assert final["node-hot-2"] <= high_cpu and final["node-idle"] > history[0]["node-idle"]
    # converged: the last rounds find nothing to do
    assert all(not r["jobs"] for r in rounds[-3:]), [r["message"] for r in rounds]
    assert all(n["state"] in ("low", "normal") for n in rounds[-1]["nodes"]), rounds[-1]["nodes"]
    # every chosen candidate says why, every skipped one too; every job names its reason and round
    for r in rounds:
        for c in r["candidates"]:
            assert c["reason"] and c["code"]
    for j in jobs:
        annotations = j["manifest"]["metadata"]["annotations"]
        assert annotations["koordinator.sh/evict-trigger"] == "LowNodeLoad"
        assert annotations["descheduler.allot.dev/round"].startswith("lnl/")
        spec = j["manifest"]["spec"]
        assert "mode" not in spec and "ttl" not in spec  # the migration controller's defaults
        # the reservation is pinned to the node the round counted room on
        terms = spec["reservationOptions"]["template"]["spec"]["template"]["spec"]["affinity"][
            "nodeAffinity"
        ]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        target = annotations["descheduler.allot.dev/target"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target]}]}]
    for accepted in cluster.sc.of_type("reservation.accepted"):
        (term,) = accepted["manifest"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        operators = [(f["operator"], f["values"]) for f in term["matchFields"]]
        assert operators[0] == ("In", ["node-idle"]) and operators[1][0] == "NotIn"
    assert {s["job"]["name"] for s in cluster.sc.of_type("migration.succeeded")} == {
        j["job"]["name"] for j in jobs
    }
    assert {r["mode"] for r in cluster.sc.of_type("migration.running")} == {"ReservationFirst"}
    descheduler_state: Any = cluster.sc.sim.host("reservation-manager").processor.descheduler  # type: ignore[attr-defined]
    assert descheduler_state.jobs == {}, "finished jobs are no longer watched for the hotspot re-check"
    cluster.sc.assert_replays()  # every round (and every job's step) re-derives from the log


def test_a_dry_run_records_what_it_would_do_and_moves_nothing() -> None:
    cluster = Cluster(descheduler(dry_run=True, abnormalities=1), PLACEMENT)
    before = cluster.where()
    for _ in range(3):
        cluster.report()
        cluster.sc.advance(60)
    rounds = cluster.rounds()
    assert len(rounds) == 3 and all(r["dry_run"] for r in rounds)
    assert all(any(c.get("chosen") for c in r["candidates"]) for r in rounds)
    assert all("dry run" in r["message"] and not r["jobs"] for r in rounds)
    assert not cluster.sc.of_type("migration.applied") and cluster.where() == before
    cluster.sc.assert_replays()


def test_no_rounds_without_configuration_or_without_node_metrics() -> None:
    plain = Cluster({}, PLACEMENT)
    plain.report()
    plain.sc.advance(300)
    assert not plain.rounds() and "timer:reservation-manager" not in {e.stream_id for e in plain.sc.events}
    quiet = Cluster(descheduler(), PLACEMENT)
    quiet.sc.advance(300)
    assert not quiet.rounds()


def test_a_job_still_to_evict_is_aborted_when_its_node_cools_down_first() -> None:
    # one workload of five on node-hot: the first eviction goes at once, the second waits for the workload's
    # limiter (2 per 5 minutes); a NodeMetric saying node-hot is under its high threshold aborts the waiting job
    placement = {f"web-{i}": ("node-hot", 2500) for i in range(5)}
    cluster = Cluster(descheduler(abnormalities=1), placement)
    cluster.report()
    cluster.sc.advance(60)
    (first,) = cluster.rounds()
    assert len(first["jobs"]) == 2, first
    assert len(cluster.sc.of_type("migration.evicted")) == 1
    cluster.usage = {p: 1000 for p in cluster.usage}  # the load drops before the second eviction
    cluster.report()
    (aborted,) = cluster.sc.of_type("migration.aborted")
    assert aborted["message"].startswith(
        "hotspot re-check: node node-hot is no longer above its high thresholds"
    )
    assert aborted["job"]["name"] in first["jobs"]
    removed = [r["reservation"]["name"] for r in cluster.sc.of_type("reservation.removed")]
    assert removed == [f"pmj-{aborted['job']['name']}"]
    cluster.sc.assert_replays()


@pytest.mark.parametrize(
    ("descheduler_config", "path"),
    [
        (
            {
                "profiles": [
                    {
                        "name": "p",
                        "pluginConfig": [{"name": "LowNodeLoad", "args": {"lowThresholds": {"cpu": 5}}}],
                    }
                ]
            },
            "descheduler.profiles[0].pluginConfig[0].args.highThresholds",
        ),
        ({"deschedulingInterval": 60}, "descheduler.deschedulingInterval"),
    ],
)
def test_reservation_manager_refuses_a_bad_descheduler_config_with_its_field_path(
    descheduler_config: dict[str, Any], path: str
) -> None:
    with pytest.raises(DeschedulerConfigError) as err:
        ReservationManager({"descheduler": descheduler_config})
    assert path in [i.path for i in err.value.issues]


def test_its_own_jobs_coming_back_as_triggers_change_nothing() -> None:
    # the live runtime delivers a service's own outputs of a type it consumes (migration.applied); replay does not.
    # Handled right after the round (before the timer that arbitrates them), they must decide nothing and leave the
    # projection as it was
    cluster = Cluster(descheduler(abnormalities=1), PLACEMENT)
    cluster.report()
    cluster.sc.advance(60)
    own = [
        r for r in cluster.sc.events if r.type == "migration.applied" and r.producer == "reservation-manager"
    ]
    assert own
    host = Host(ReservationManager(descheduler()["reservation-manager"]))
    asyncio.run(rebuild(host, cluster.sc.sim.store, until=own[-1].position))
    before = host.digest()
    for record in own:
        assert host.step(record) == []
    assert host.digest() == before


def with_migration(config: dict[str, Any], migration: dict[str, Any], **args: Any) -> dict[str, Any]:
    """The descheduler config with the migration controller's settings (and a profile's MigrationController args)."""
    out: dict[str, Any] = {"reservation-manager": {**config["reservation-manager"], "migration": migration}}
    if args:
        profile = out["reservation-manager"]["descheduler"]["profiles"][0]
        profile["pluginConfig"] = [*profile["pluginConfig"], {"name": "MigrationController", "args": args}]
    return out


def test_rounds_skip_the_pods_the_migration_controller_would_refuse() -> None:
    # the migration controller's evictor filter is the round's: no job is asked for a pod it would fail
    config = with_migration(descheduler(abnormalities=1), {"namespaces": {"exclude": ["shop"]}})
    cluster = Cluster(config, PLACEMENT)
    cluster.report()
    cluster.sc.advance(60)
    (first,) = cluster.rounds()
    hot = [c for c in first["candidates"] if c["node"] == "node-hot"]
    assert hot and {c["code"] for c in hot} == {"NamespaceExcluded"}, hot
    assert "excluded from migrations" in hot[0]["reason"]
    assert not first["jobs"] and not cluster.sc.of_type("migration.applied")


def test_a_profile_cannot_allow_what_the_migration_controller_refuses() -> None:
    config = with_migration(descheduler(), {}, evictLocalStoragePods=True)
    with pytest.raises(DeschedulerConfigError) as err:
        ReservationManager(config["reservation-manager"])
    (issue,) = err.value.issues
    assert issue.path == "descheduler.profiles[0].pluginConfig[1].args.evictLocalStoragePods"
    assert "migration.evictLocalStoragePods" in issue.message
    allowed = with_migration(descheduler(), {"evictLocalStoragePods": True}, evictLocalStoragePods=True)
    assert ReservationManager(allowed["reservation-manager"]).descheduler.enabled
