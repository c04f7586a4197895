"""Quota admission (PreFilter): the checks, the upstream messages, waiting pods, purity."""

import pytest

from allot_quota.testing import a_node, a_pod, a_quota, an_engine

NODES = [a_node("n1", cpu=10, memory="40Gi", gpu=4)]
TEAMS = (
    a_quota("a", min={"cpu": 4, "memory": "8Gi"}, max={"cpu": 10, "memory": "40Gi"}),
    a_quota("b", min={"cpu": 4, "memory": "8Gi"}, max={"cpu": 10, "memory": "40Gi"}),
)


def engine(*quotas, config=None, assigned=(), pending=()):
    e = an_engine(*(quotas or TEAMS), nodes=NODES, config=config)
    for pod in pending:
        e.add_pending(pod)
    for pod in assigned:
        e.assign(pod)
    return e


@pytest.mark.parametrize(
    ("setup", "pod", "reason", "message"),
    [
        pytest.param({}, a_pod("p", quota="a", cpu=2), "Admitted", None, id="fits-within-min"),
        pytest.param(
            {"pending": [a_pod("b1", quota="b", cpu=4)]},
            a_pod("p", quota="a", cpu=6),
            "Admitted",
            None,
            id="borrows-idle-capacity",
        ),
        pytest.param(
            {"assigned": [a_pod("a1", quota="a", cpu=4)], "pending": [a_pod("b1", quota="b", cpu=6)]},
            a_pod("p", quota="a", cpu="1500m"),
            "InsufficientQuota",
            "Insufficient quotas, quotaName: a, runtime: cpu:5,memory:0, used: cpu:4, pod's request: cpu:1500m, "
            "exceedDimensions: [cpu]",
            id="over-runtime-upstream-message",
        ),
        pytest.param(
            {}, a_pod("p", quota="a", cpu=11), "InsufficientQuota", "exceedDimensions: [cpu]", id="over-max"
        ),
        pytest.param(
            {},
            a_pod("p", quota="a", cpu=1, gpu=8),
            "Admitted",
            None,
            id="dimension-absent-from-max-does-not-constrain",
        ),
        pytest.param(
            {},
            a_pod("p", quota="a", cpu=3, preemptible=False),
            "Admitted",
            None,
            id="non-preemptible-within-min",
        ),
        pytest.param(
            {"assigned": [a_pod("np1", quota="a", cpu=3, preemptible=False)]},
            a_pod("p", quota="a", cpu=2, preemptible=False),
            "InsufficientNonPreemptibleQuota",
            "Insufficient non-preemptible quotas, quotaName: a, min: cpu:4,memory:8Gi, nonPreemptibleUsed: cpu:3, "
            "pod's request: cpu:2, exceedDimensions: [cpu]",
            id="non-preemptible-limited-to-min",
        ),
        pytest.param(
            {"assigned": [a_pod("np1", quota="a", cpu=3, preemptible=False)]},
            a_pod("p", quota="a", cpu=2),
            "Admitted",
            None,
            id="preemptible-pod-may-borrow-beyond-min",
        ),
    ],
)
def test_admission_table(setup, pod, reason, message):
    e = engine(**setup)
    before = e.digest()
    d = e.admit(pod)
    assert d.reason == reason
    assert d.admitted is (reason == "Admitted")
    if message is not None:
        assert message in d.message
    if not d.admitted:
        assert d.status == "Unschedulable" and d.waiting
    assert e.digest() == before  # admit is a pure check


def test_runtime_quota_disabled_checks_max():
    e = engine(config={"enableRuntimeQuota": False}, pending=[a_pod("b1", quota="b", cpu=10)])
    e.assign(a_pod("a1", quota="a", cpu=8))
    d = e.admit(a_pod("p", quota="a", cpu=2))
    assert d.admitted and d.limit == {"cpu": "10", "memory": "40Gi"}
    assert e.admit(a_pod("p", quota="a", cpu=3)).reason == "InsufficientQuota"


PARENTS = (
    a_quota("dept", min={"cpu": 4}, max={"cpu": 6}, is_parent=True),
    a_quota("x", min={"cpu": 2}, max={"cpu": 6}, parent="dept"),
    a_quota("y", min={"cpu": 2}, max={"cpu": 6}, parent="dept"),
)


def test_parent_check_is_optional_and_names_the_topology():
    setup = {"assigned": [a_pod("y1", quota="y", cpu=5)]}
    e = engine(*PARENTS, config={"enableCheckParentQuota": True, "enableRuntimeQuota": False}, **setup)
    d = e.admit(a_pod("p", quota="x", cpu=2))
    assert d.reason == "InsufficientParentQuota"
    assert d.topology == ["dept", "x"]
    assert d.message == (
        "Insufficient quotas, quotaNameTopo: [dept x], runtime: cpu:6, used: cpu:5, pod's request: cpu:2, "
        "exceedDimensions: [cpu]"
    )
    off = engine(*PARENTS, config={"enableRuntimeQuota": False}, **setup)
    assert off.admit(a_pod("p", quota="x", cpu=2)).admitted


def test_pod_in_a_parent_quota_is_unresolvable():
    e = engine(*PARENTS)
    d = e.admit(a_pod("p", quota="dept", cpu=1))
    assert (d.status, d.reason, d.waiting) == ("UnschedulableAndUnresolvable", "ParentQuota", False)


def test_a_quota_labelled_is_parent_takes_no_pods_even_before_it_has_children():
    e = engine(a_quota("dept", min={"cpu": 4}, max={"cpu": 6}, is_parent=True))
    d = e.admit(a_pod("p", quota="dept", cpu=1))
    assert (d.admitted, d.reason, d.waiting) == (False, "ParentQuota", False)
    assert d.message == "pod can not be linked to a parentQuotaGroup,quota:dept, pod:p"
    [issue] = e.validate_pod(a_pod("p", quota="dept", cpu=1))
    assert issue.message == d.message


def test_offering_waiting_pods_again_reports_why_the_others_still_wait():
    e = engine(pending=[a_pod("a1", quota="a", cpu=6), a_pod("a2", quota="a", cpu=6)])
    admitted, refused = e.offer_waiting()
    assert [d.pod for d in admitted] == ["default/a1"]
    [d] = refused
    assert d.pod == "default/a2" and d.message.startswith(
        "Insufficient quotas, quotaName: a, runtime: cpu:10,"
    )
    assert "used: cpu:6," in d.message  # a1, admitted before it, counts
    assert e.waiting_admissions() == admitted


def test_decision_is_json_builtins():
    d = engine().admit(a_pod("p", quota="a", cpu=6))
    out = d.to_dict()
    assert out["request"] == {"cpu": "6"} and out["runtime"] == {"cpu": "6", "memory": "0"}
    assert out["borrow"][0]["lenders"] == [
        {"quota": "b", "amount": "1333m", "kind": "idle-min"},
        {"quota": "koordinator-root-quota", "amount": "667m", "kind": "unassigned"},
    ]


def test_a_waiting_pod_is_admitted_when_quota_frees():
    e = engine(pending=[a_pod("b1", quota="b", cpu=5)])
    e.assign(a_pod("a1", quota="a", cpu=4))
    waiting = a_pod("a2", quota="a", cpu=2)
    e.add_pending(waiting)
    # requests a=6, b=5 over 10 cpus: both get min 4 plus 1 of the 2 spare, so a2 (4+2 > 5) waits
    assert e.runtime("a") == {"cpu": "5", "memory": "0"}
    assert e.admit(waiting).waiting
    assert e.waiting_admissions() == [e.admit(a_pod("b1", quota="b", cpu=5))]  # only b1 fits now
    e.remove_pod("default/a1")
    assert [d.pod for d in e.waiting_admissions()] == ["default/b1", "default/a2"]


def test_waiting_admissions_order_and_no_overcommit():
    e = engine()
    for name, prio, cpu in [("low-1", 1, 3), ("high", 10, 3), ("low-2", 1, 3), ("mid", 5, 6)]:
        e.add_pending(a_pod(name, quota="a", cpu=cpu, priority=prio))
    before = e.digest()
    got = [d.pod for d in e.waiting_admissions()]
    # runtime of a is its request capped by the cluster (10); admitted in priority, then arrival order
    assert got == ["default/high", "default/mid"]
    assert e.digest() == before
    assert [d.pod for d in e.waiting_admissions(limit=1)] == ["default/high"]


def test_already_assigned_pod_is_admitted_without_recount():
    pod = a_pod("p", quota="a", cpu=4)
    e = engine(assigned=[pod])
    assert e.admit(pod).reason == "AlreadyAssigned"


def test_admit_of_a_changed_pending_pod_uses_the_new_manifest_and_changes_nothing():
    e = engine(pending=[a_pod("p", quota="a", cpu=2)])
    before = e.digest()
    d = e.admit(a_pod("p", quota="a", cpu=11))
    assert (d.reason, d.request) == ("InsufficientQuota", {"cpu": "11"})
    assert e.digest() == before
    assert e.admit(a_pod("p", quota="a", cpu=2)).admitted


def test_waiting_admissions_can_be_limited_to_some_quotas():
    e = engine(pending=[a_pod("a1", quota="a", cpu=1), a_pod("b1", quota="b", cpu=1)])
    assert [d.pod for d in e.waiting_admissions(quotas=["b"])] == ["default/b1"]


def test_waiting_admissions_on_a_release_not_yet_applied():
    running = a_pod("a1", quota="a", cpu=4)
    e = engine(
        assigned=[running],
        pending=[
            a_pod("b1", quota="b", cpu=10),
            a_pod("a2", quota="a", cpu=2),
            a_pod("a3", quota="a", cpu=1),
        ],
    )
    before = e.digest()
    assert e.waiting_admissions(pods=["default/a2"]) == []  # a's runtime is 5: 4 used + 2 does not fit
    got = e.waiting_admissions(pods=["default/a2"], released=["default/a1"])
    assert [d.pod for d in got] == ["default/a2"]
    assert e.digest() == before


def test_validate_quota_and_delete_change_nothing():
    e = engine()
    before = e.digest()
    assert e.validate_quota(a_quota("c", min={"cpu": 1}, max={"cpu": 2})) == []
    [err] = e.validate_quota(a_quota("c", max={"cpu": 2}, parent="nope"))
    assert err.path == "metadata.labels[quota.scheduling.koordinator.sh/parent]"
    assert e.validate_delete("default", "a") == []
    assert e.digest() == before and "c" not in e.snapshot()["quotas"]
