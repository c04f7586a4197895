"""Reclaim: intra-quota preemption (victim selection) and the over-use revoke."""

from datetime import UTC, datetime

import pytest

from allot_quota.testing import a_node, a_pod, a_quota, an_engine

QUOTAS = (
    a_quota("a", min={"cpu": 4}, max={"cpu": 10}),
    a_quota("b", min={"cpu": 4}, max={"cpu": 10}),
)
NODES = [a_node("n1", cpu=10)]


def node_capacity(cpu):
    """A node-fit callback: the preemptor fits when the remaining pods leave it enough cpu."""

    def fits(preemptor_cpu):
        def check(remaining):
            used = sum(p.requests.get("cpu", 0) // 1000 for p in remaining)
            return used + preemptor_cpu <= cpu

        return check

    return fits


def setup(node_pods, pending=()):
    e = an_engine(*QUOTAS, nodes=NODES)
    for p in pending:
        e.add_pending(p)
    for p in node_pods:
        e.assign(p)
    return e


LOW = [
    a_pod(f"low-{i}", quota="a", cpu=2, priority=1, start_time=f"2026-01-01T00:00:0{i}Z") for i in range(3)
]


@pytest.mark.parametrize(
    ("node_pods", "preemptor", "capacity", "reason", "victims"),
    [
        pytest.param(
            LOW,
            a_pod("hi", quota="a", cpu=2, priority=10),
            6,
            "Victims",
            ["default/low-2"],
            id="latest-started-low-priority-pod-goes",
        ),
        pytest.param(
            LOW,
            a_pod("hi", quota="a", cpu=4, priority=10),
            6,
            "Victims",
            ["default/low-2", "default/low-1"],
            id="as-few-as-needed-least-important-first",
        ),
        pytest.param(
            [*LOW, a_pod("b-0", quota="b", cpu=2, priority=0)],
            a_pod("hi", quota="a", cpu=2, priority=10),
            8,
            "Victims",
            ["default/low-2"],
            id="other-quotas-pods-are-never-victims",
        ),
        pytest.param(
            [a_pod("np", quota="a", cpu=6, priority=1, preemptible=False)],
            a_pod("hi", quota="a", cpu=2, priority=10),
            6,
            "NoCandidates",
            [],
            id="non-preemptible-is-never-a-victim",
        ),
        pytest.param(
            [a_pod("eq", quota="a", cpu=6, priority=10)],
            a_pod("hi", quota="a", cpu=2, priority=10),
            6,
            "NoCandidates",
            [],
            id="equal-priority-is-never-a-victim",
        ),
        pytest.param(
            LOW, a_pod("hi", quota="a", cpu=9, priority=10), 8, "NodeFitFails", [], id="not-helpful-on-node"
        ),
        pytest.param(
            LOW,
            a_pod("hi", quota="a", cpu=2, priority=10, preemption_never=True),
            6,
            "PreemptionPolicyNever",
            [],
            id="preemption-policy-never",
        ),
        pytest.param(
            [*LOW[:2], a_pod("dying", quota="a", cpu=2, priority=1, terminating=True)],
            a_pod("hi", quota="a", cpu=2, priority=10),
            6,
            "VictimTerminating",
            [],
            id="waits-for-a-terminating-pod",
        ),
        pytest.param(
            [a_pod("d-0", namespace="x", cpu=4, priority=1)],
            a_pod("hi", namespace="x", cpu=8, priority=10),
            10,
            "NoCandidates",
            [],
            id="default-quota-pods-are-protected",
        ),
    ],
)
def test_preemption_victims(node_pods, preemptor, capacity, reason, victims):
    e = setup(node_pods)
    req = preemptor.requests["cpu"] // 1000
    d = e.preemption_victims(preemptor, node_pods, node_capacity(capacity)(req))
    assert (d.reason, d.victims) == (reason, victims)
    assert len(set(d.victims)) == len(d.victims)


def test_quota_limits_reprieve():
    # b has pending demand, so a's runtime is its min 4 + 1 shared = 5: the node has room, the quota does not
    e = setup(LOW, pending=[a_pod("b-big", quota="b", cpu=5)])
    preemptor = a_pod("hi", quota="a", cpu=3, priority=10)
    e.add_pending(preemptor)
    assert e.runtime("a") == {"cpu": "5"}
    d = e.preemption_victims(preemptor, LOW, lambda remaining: True)
    # used 6 + 3 must fit runtime 5: two of the three low pods must go
    assert d.victims == ["default/low-2", "default/low-1"]
    assert d.reprieved == ["default/low-0"]
    assert d.to_dict()["used_limit"] == {"cpu": "5"}


def test_preemption_with_default_quota_preemption_enabled():
    e = an_engine(config={"disableDefaultQuotaPreemption": False}, nodes=NODES)
    low = a_pod("d-0", namespace="x", cpu=4, priority=1)
    e.assign(low)
    d = e.preemption_victims(a_pod("hi", namespace="x", cpu=8, priority=10), [low], node_capacity(10)(8))
    assert d.victims == ["x/d-0"]


REVOKE = {"monitorAllQuotas": True, "delayEvictTime": "120s"}


def overused(config=REVOKE):
    e = an_engine(*QUOTAS, nodes=NODES, config=config)
    for i, prio in enumerate([5, 1, 3, 9]):
        e.assign(a_pod(f"a-{i}", quota="a", cpu=2, priority=prio))
    e.assign(a_pod("a-np", quota="a", cpu=1, priority=0, preemptible=False))
    e.add_pending(
        a_pod("b-0", quota="b", cpu=6)
    )  # b wants its min back: a's runtime drops to 5, below used 9
    return e


def test_overuse_revoke_waits_for_the_delay_then_gives_back_least_important():
    e = overused()
    assert e.runtime("a") == {"cpu": "5"}  # used 9 > runtime 5
    assert e.overuse_revoke(1000) == []  # starts the clock
    assert e.overuse_revoke(1120) == []  # exactly the delay: not yet
    evictions = e.overuse_revoke(1121)
    # least important first: a-1 (prio 1), a-2 (3); a-np is never taken; then used 5 fits
    assert [ev.pod for ev in evictions] == ["default/a-1", "default/a-2"]
    ev = evictions[0].to_dict()
    assert (ev["cause"], ev["over_since"], ev["now"], ev["delay_seconds"]) == (
        "OverUseRevoke",
        1000,
        1121,
        120,
    )
    assert ev["runtime"] == {"cpu": "5"} and ev["used"] == {"cpu": "9"}
    assert e.overuse_revoke(1122) == []  # the clock restarted


def test_overuse_clock_resets_when_usage_fits_again():
    e = overused()
    e.overuse_revoke(1000)
    e.remove_pending("default/b-0")  # b gives up: a may use everything again
    assert e.overuse_revoke(1100) == []
    e.add_pending(a_pod("b-0", quota="b", cpu=6))
    assert e.overuse_revoke(1200) == []  # a new clock starts at 1200
    assert [ev.pod for ev in e.overuse_revoke(1321)] == ["default/a-1", "default/a-2"]


def test_revoke_is_off_unless_all_quotas_are_monitored():
    e = overused(config={})
    e.overuse_revoke(0)
    assert e.overuse_revoke(10_000) == []


def test_revoke_takes_time_as_data():
    e = overused()
    e.overuse_revoke(datetime(2026, 1, 1, tzinfo=UTC))
    assert e.overuse_revoke(datetime(2026, 1, 1, 0, 2, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="timezone-aware"):
        e.overuse_revoke(datetime(2026, 1, 1))  # noqa: DTZ001


def test_dry_run_revoke_leaves_the_clocks_alone():
    e = overused()
    e.overuse_revoke(1000)
    before = e.digest()
    assert [ev.pod for ev in e.overuse_revoke(1121, dry_run=True)] == ["default/a-1", "default/a-2"]
    assert e.digest() == before
    assert [ev.pod for ev in e.overuse_revoke(1121)] == ["default/a-1", "default/a-2"]
    assert e.digest() != before


def test_overuse_revoke_spares_a_pod_whose_eviction_kubernetes_refused_and_takes_the_next():
    e = overused()
    e.overuse_revoke(1000)
    # a-1 (the least important) is kept by a disruption budget: a-2 and a-0 go in its place, until used fits
    evictions = e.overuse_revoke(1121, dry_run=True, spare={"default/a-1"})
    assert [ev.pod for ev in evictions] == ["default/a-2", "default/a-0"]
    assert [ev.pod for ev in e.overuse_revoke(1121)] == ["default/a-1", "default/a-2"]  # without: as before
