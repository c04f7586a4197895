"""Runtime quota on whole trees: request propagation, min scaling, allow-lent, guarantee, incremental recompute."""

import random

import pytest

from allot_quota import QuotaEngine
from allot_quota.testing import a_node, a_pod, a_quota, an_engine

CLUSTER = [a_node("n1", cpu=10, memory="40Gi")]


def engine_with(*quotas, config=None, nodes=CLUSTER):
    return an_engine(*quotas, nodes=nodes, config=config)


def pend(e, quota, cpu, n=1, prefix=None, **kw):
    for i in range(n):
        e.add_pending(a_pod(f"{prefix or quota}-{i}", quota=quota, cpu=cpu, **kw))


TWO_TEAMS = (a_quota("a", min={"cpu": 4}, max={"cpu": 10}), a_quota("b", min={"cpu": 4}, max={"cpu": 10}))


@pytest.mark.parametrize(
    ("quotas", "pending", "expected"),
    [
        pytest.param(TWO_TEAMS, {"a": 2}, {"a": "2", "b": "0"}, id="runtime-follows-request-under-min"),
        pytest.param(TWO_TEAMS, {"a": 8}, {"a": "8", "b": "0"}, id="idle-sibling-lends-everything"),
        pytest.param(
            TWO_TEAMS, {"a": 9, "b": 9}, {"a": "5", "b": "5"}, id="contention-splits-surplus-by-weight"
        ),
        pytest.param(TWO_TEAMS, {"a": 12}, {"a": "10", "b": "0"}, id="capped-by-max"),
        pytest.param(
            (
                a_quota("a", min={"cpu": 4}, max={"cpu": 10}),
                a_quota("b", min={"cpu": 4}, max={"cpu": 10}, allow_lent=False),
            ),
            {"a": 9},
            {"a": "6", "b": "4"},
            id="allow-lent-false-keeps-min",
        ),
        pytest.param(
            (a_quota("a", min={"cpu": 8}, max={"cpu": 10}), a_quota("b", min={"cpu": 8}, max={"cpu": 10})),
            {"a": 9, "b": 9},
            {"a": "5", "b": "5"},
            id="mins-over-cluster-are-scaled",
        ),
        pytest.param(
            (
                a_quota("a", min={"cpu": 2}, max={"cpu": 10}, shared_weight={"cpu": 1}),
                a_quota("b", min={"cpu": 2}, max={"cpu": 10}, shared_weight={"cpu": 3}),
            ),
            {"a": 10, "b": 10},
            {"a": "3500m", "b": "6500m"},
            id="shared-weight-annotation",
        ),
        pytest.param(
            (
                a_quota("a", min={"cpu": 1}, max={"cpu": 10}, shared_weight={"memory": "1Gi"}),
                a_quota("b", min={"cpu": 1}, max={"cpu": 10}),
            ),
            {"a": 10, "b": 10},
            {"a": "5", "b": "5"},
            id="weight-annotation-without-the-dimension-weighs-max",  # the webhook completes it with max
        ),
        pytest.param(
            (
                a_quota("a", min={"cpu": 1}, max={"cpu": 10, "memory": "1Gi"}, shared_weight={"cpu": 0}),
                a_quota("b", min={"cpu": 1}, max={"cpu": 10}),
            ),
            {"a": 10, "b": 10},
            {"a": "1", "b": "9"},
            id="a-zero-weight-stays-zero-when-another-resource-weighs",  # {"cpu":"0"} -> {"cpu":"0","memory":"1Gi"}
        ),
        pytest.param(
            (
                a_quota("a", min={"cpu": 1}, max={"cpu": 10}, shared_weight={"cpu": 0}),
                a_quota("b", min={"cpu": 1}, max={"cpu": 10}),
            ),
            {"a": 10, "b": 10},
            {"a": "5", "b": "5"},
            id="all-zero-weights-mean-max",
        ),
        pytest.param(
            (
                a_quota("dept", min={"cpu": 6}, max={"cpu": 10}, is_parent=True),
                a_quota("x", min={"cpu": 3}, max={"cpu": 10}, parent="dept"),
                a_quota("y", min={"cpu": 3}, max={"cpu": 10}, parent="dept"),
                a_quota("b", min={"cpu": 4}, max={"cpu": 10}),
            ),
            {"x": 10, "b": 2},
            {"dept": "8", "x": "8", "y": "0", "b": "2"},
            id="parent-runtime-is-childrens-total",
        ),
    ],
)
def test_runtime_table(quotas, pending, expected):
    e = engine_with(*quotas)
    for q, cpu in pending.items():
        pend(e, q, cpu)
    assert {q: e.runtime(q).get("cpu") for q in expected} == expected


def test_min_scaling_can_be_disabled():
    e = engine_with(
        a_quota("a", min={"cpu": 8}, max={"cpu": 10}),
        a_quota("b", min={"cpu": 8}, max={"cpu": 10}),
        config={"enableMinQuotaScale": False},
    )
    pend(e, "a", 9)
    pend(e, "b", 9)
    assert (e.runtime("a"), e.runtime("b")) == ({"cpu": "8"}, {"cpu": "8"})  # Σ over the cluster, as upstream


def test_runtime_only_lists_max_dimensions_and_absent_cluster_resource_is_zero():
    e = engine_with(a_quota("a", min={"cpu": 1}, max={"cpu": 4, "nvidia.com/gpu": 2}))
    e.add_pending(a_pod("p", quota="a", cpu=2, memory="1Gi", gpu=1))
    assert e.runtime("a") == {"cpu": "2", "nvidia.com/gpu": "0"}


def test_system_and_default_usage_reduce_the_default_tree_total():
    e = engine_with(a_quota("a", min={"cpu": 0}, max={"cpu": 10}))
    pend(e, "a", 10)
    assert e.runtime("a") == {"cpu": "10"}
    e.assign(a_pod("sys", namespace="kube-system", quota="koordinator-system-quota", cpu=3))
    e.assign(a_pod("stray", namespace="other", cpu=2))  # no quota → default quota
    assert e.runtime("a") == {"cpu": "5"}
    assert e.runtime("koordinator-default-quota")["cpu"] == "1844674407370955161"


def test_guarantee_gate_keeps_allocated_and_disables_lending():
    cfg = {"featureGates": {"ElasticQuotaGuaranteeUsage": True}}
    e = engine_with(*TWO_TEAMS, config=cfg)
    pend(e, "a", 9)
    assert e.runtime("a") == {"cpu": "6"}  # b keeps its min although idle
    e.assign(a_pod("a-0", quota="a", cpu=9))
    ann = e.status_annotations("a")
    assert ann["quota.scheduling.koordinator.sh/allocated"] == '{"cpu":"9"}'
    assert ann["quota.scheduling.koordinator.sh/guaranteed"] == '{"cpu":"9"}'
    # a's guaranteed 9 is now its floor and b's min stays guaranteed too: both floors hold even though they
    # add up to more than the cluster (node fit is what stops the overcommit), as upstream
    pend(e, "b", 4)
    assert (e.runtime("a"), e.runtime("b")) == ({"cpu": "9"}, {"cpu": "4"})
    e.remove_pod("default/a-0")
    assert e.status_annotations("a")["quota.scheduling.koordinator.sh/guaranteed"] == '{"cpu":"4"}'


def test_request_propagates_up_the_tree():
    e = engine_with(
        a_quota("dept", min={"cpu": 4}, max={"cpu": 10}, is_parent=True),
        a_quota("x", min={"cpu": 2}, max={"cpu": 3}, parent="dept"),
        a_quota("y", min={"cpu": 2}, max={"cpu": 10}, parent="dept", allow_lent=False),
    )
    pend(e, "x", 5)
    snap = e.snapshot()["quotas"]
    assert snap["x"]["request"] == {"cpu": "5"}
    # dept sees x's request limited to x's max (3) plus y's unlent min (2)
    assert snap["dept"]["request"] == {"cpu": "5"}
    e.remove_pending("default/x-0")
    assert e.snapshot()["quotas"]["dept"]["request"] == {"cpu": "2"}


def _random_tree(rng, e, n=40):
    names, manifests = [], []
    for i in range(n):
        parents = [p for p in names if p.startswith("p")]
        parent = rng.choice(parents) if parents and rng.random() < 0.7 else None
        is_parent = rng.random() < 0.3
        name = f"{'p' if is_parent else 'l'}{i:03d}"
        q = a_quota(
            name,
            min={"cpu": rng.randint(0, 3)},
            max={"cpu": rng.randint(3, 30), "memory": "64Gi"},
            parent=parent,
            is_parent=is_parent,
            shared_weight={"cpu": rng.randint(0, 4)} if rng.random() < 0.3 else None,
            allow_lent=rng.random() < 0.8,
            force=True,
        )
        assert e.apply_quota(q) == []
        names.append(name)
        manifests.append(q)
    return [n for n in names if n.startswith("l")], manifests


@pytest.mark.parametrize(
    "config", [{}, {"featureGates": {"ElasticQuotaGuaranteeUsage": True}}], ids=["default", "guarantee"]
)
def test_incremental_state_equals_a_fresh_build(config, seed=20260101):
    """After random pod churn, lazily refreshed runtimes and incrementally kept sums equal a from-scratch build."""
    rng = random.Random(seed)
    nodes = [a_node("n1", cpu=40, memory="256Gi")]
    e = an_engine(nodes=nodes, config=config)
    leaves, manifests = _random_tree(rng, e)
    pods = {}
    for step in range(300):
        pod = a_pod(f"pod-{step % 50}", quota=rng.choice(leaves), cpu=f"{rng.randint(1, 4000)}m")
        op = rng.choice(["add_pending", "remove_pod", "assign", "unassign"])
        getattr(e, op)(pod)
        key = pod.key
        if op == "remove_pod":
            pods.pop(key, None)
        elif op == "unassign":
            if key in pods:
                pods[key] = (pods[key][0], False)
        else:
            assigned = op == "assign" or (key in pods and pods[key][1])  # an update keeps a bound pod bound
            pods[key] = (pod, assigned)
        e.runtime(rng.choice(leaves))  # lazy, partial refreshes in between
        if step % 50 == 49:
            fresh = an_engine(*manifests, nodes=nodes, config=config)
            for manifest, assigned in pods.values():
                (fresh.assign if assigned else fresh.add_pending)(manifest)
            assert e.snapshot() == fresh.snapshot(), f"seed={seed} step={step}"


def test_replaying_the_same_commands_gives_the_same_digest_and_snapshot(seed=7):
    def run():
        rng = random.Random(seed)
        e = QuotaEngine()
        e.set_nodes([a_node("n1", cpu=60, memory="256Gi")])
        leaves, _ = _random_tree(rng, e, n=25)
        for step in range(200):
            pod = a_pod(f"pod-{step % 30}", quota=rng.choice(leaves), cpu=rng.randint(1, 5))
            rng.choice([e.add_pending, e.assign, e.unassign, e.remove_pod])(pod)
            if step % 17 == 0:
                e.runtime(rng.choice(leaves))  # lazy reads in between must not matter
        return e.digest(), e.snapshot()

    assert run() == run()


def test_one_pod_change_recomputes_only_the_path():
    e = engine_with(
        a_quota("d1", min={"cpu": 4}, max={"cpu": 10}, is_parent=True),
        a_quota("d2", min={"cpu": 4}, max={"cpu": 10}, is_parent=True),
        a_quota("t1", min={"cpu": 2}, max={"cpu": 10}, parent="d1"),
        a_quota("t2", min={"cpu": 2}, max={"cpu": 10}, parent="d1"),
        a_quota("t3", min={"cpu": 2}, max={"cpu": 10}, parent="d2"),
    )
    e.snapshot()  # everything fresh
    h = e.hierarchy
    before = h.recomputed
    pend(e, "t1", 3)
    e.runtime("t1")
    assert h.recomputed - before == 2  # root's and d1's calculators; d2's subtree waits until asked
    e.runtime("t1")
    assert h.recomputed - before == 2  # nothing stale any more on that path
