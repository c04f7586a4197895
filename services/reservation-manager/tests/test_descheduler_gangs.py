"""LowNodeLoad and gangs inside reservation-manager, driven through the simulator: a hot node's smallest sufficient
pod is a gang member; with ``gangMigration: Whole`` the round moves the whole gang (its mate on another node too),
a PodMigrationJob per member in the round's one decision; by default the member stays (``GangMember``)."""

from __future__ import annotations

import pytest

from allot_testing.gang_round import NODES, PLACEMENT, cluster, config, node, node_metric, pod
from allot_testing.scenario import Scenario


def test_a_gang_whose_policy_allows_it_moves_whole_a_job_per_member_in_one_decision() -> None:
    sc = cluster(gangMigration="Whole")
    first = sc.of_type("descheduler.round")[0]
    chosen = {c["pod"]: c for c in first["candidates"] if c.get("chosen")}
    assert set(chosen) == {"ml/train-0", "ml/train-1"}, first["candidates"]
    assert chosen["ml/train-1"]["node"] == "node-warm"
    assert {c["target"] for c in chosen.values()} == {"node-idle", "node-idle-2"}
    assert sorted(first["jobs"]) == sorted(c["job"] for c in chosen.values())
    jobs = [e for e in sc.events if e.type == "migration.applied"]
    assert {e.payload_dict()["job"]["name"] for e in jobs} >= set(first["jobs"])
    [decided] = [e for e in sc.events if e.type == "descheduler.round"][:1]
    # the round and its members' jobs: one decision of one trigger, recorded together
    mine = [e for e in jobs if e.payload_dict()["job"]["name"] in first["jobs"]]
    assert {e.causation_id for e in mine} == {decided.causation_id}
    sc.assert_replays()


def test_by_default_a_gang_member_stays_and_no_job_moves_its_gang() -> None:
    sc = cluster()
    first = sc.of_type("descheduler.round")[0]
    codes = {c["pod"]: c["code"] for c in first["candidates"]}
    assert codes["ml/train-0"] == "GangMember"
    assert "ml/train-1" not in codes
    assert not any("train" in j for j in first["jobs"])
    sc.assert_replays()


def test_a_member_moved_off_a_node_that_is_not_hot_is_not_aborted_by_that_nodes_metric() -> None:
    # train-1 (same workload as train-0) waits for the workload's eviction limiter; node-warm, never above its high
    # thresholds, reports again: the hotspot re-check is node-hot's, so the gang keeps moving whole
    sc = cluster(gangMigration="Whole")
    assert sc.of_type("migration.condition")[-1]["message"] == "waiting for the eviction rate limits"
    sc.apply(node_metric("node-warm"))
    assert not sc.of_type("migration.aborted")
    sc.assert_replays()


def test_once_a_member_is_evicted_the_hot_nodes_cooling_aborts_none_of_its_gang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # train-1 (lowest priority) is arbitrated and evicted first; train-0 waits for the workload's limiter when
    # node-hot reports it is under its high thresholds: aborting train-0 would split the gang, so nothing is aborted
    priorities = {"train-0": 5, "train-1": 0}
    sc = Scenario(config(gangMigration="Whole"))
    sc.apply(*[node(n) for n in NODES])
    for name, (on, _) in sorted(PLACEMENT.items()):
        body = pod(name, on)
        body["spec"]["priority"] = priorities.get(name, 10)
        sc.apply(body)
    sc.apply(*[node_metric(n) for n in NODES])
    sc.advance(60)
    evicted = [e["job"]["name"] for e in sc.of_type("migration.evicted")]
    assert evicted == ["lnl-r1-ml-train-1"]
    monkeypatch.setitem(PLACEMENT, "web-0", ("node-hot", 0))  # node-hot cools down
    sc.apply(node_metric("node-hot"))
    assert not sc.of_type("migration.aborted")
    sc.assert_replays()
