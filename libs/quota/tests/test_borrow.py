"""Borrow and return facts: who lends to whom, how much, under which runtime."""

import pytest

from allot_quota.testing import a_node, a_pod, a_quota, an_engine

TREE = (
    a_quota("dept", min={"cpu": 8}, max={"cpu": 20}, is_parent=True),
    a_quota("x", min={"cpu": 4}, max={"cpu": 20}, parent="dept"),
    a_quota("y", min={"cpu": 4}, max={"cpu": 20}, parent="dept"),
    a_quota("z", min={"cpu": 8}, max={"cpu": 20}),
)


def tree(**kw):
    e = an_engine(*TREE, nodes=[a_node("n1", cpu=20)], **kw)
    e.assign(a_pod("x-base", quota="x", cpu=4))
    return e


def lenders(fact):
    return {(x["quota"], x["kind"]): x["amount"] for x in fact["lenders"]}


def test_borrow_within_parent_and_passed_up():
    e = tree()
    change = e.assign(a_pod("x-big", quota="x", cpu=6))
    inner, outer = change.borrow
    assert (inner["quota"], inner["parent"], inner["amount"], inner["within_parent"], inner["passed_up"]) == (
        "x",
        "dept",
        "6",
        "4",
        "2",
    )
    assert (inner["used_before"], inner["used_after"], inner["floor"], inner["runtime"]) == (
        "4",
        "10",
        "4",
        "10",
    )
    assert lenders(inner) == {("y", "idle-min"): "4"}
    assert (outer["quota"], outer["parent"], outer["amount"], outer["parent_runtime"]) == (
        "dept",
        "koordinator-root-quota",
        "2",
        "20",
    )
    # dept's 2 come from z's idle min (8) and the 4 cpus nobody's min covers, 2:1
    assert lenders(outer) == {("z", "idle-min"): "1333m", ("koordinator-root-quota", "unassigned"): "667m"}


def test_no_borrow_within_min():
    e = an_engine(*TREE, nodes=[a_node("n1", cpu=20)])
    assert e.assign(a_pod("p", quota="x", cpu=4)).borrow == []


def test_non_lending_sibling_is_not_a_lender():
    quotas = (
        *TREE[:2],
        a_quota("y", min={"cpu": 4}, max={"cpu": 20}, parent="dept", allow_lent=False),
        TREE[3],
    )
    e = an_engine(*quotas, nodes=[a_node("n1", cpu=20)])
    e.assign(a_pod("x-base", quota="x", cpu=4))
    change = e.assign(a_pod("x-big", quota="x", cpu=2))
    [fact, up] = change.borrow
    assert fact["within_parent"] == "0" and fact["lenders"] == []  # y keeps its min; dept must borrow it all
    assert up["amount"] == "2"


def test_return_facts_mirror_the_borrow():
    e = tree()
    pod = a_pod("x-big", quota="x", cpu=6)
    borrowed = e.assign(pod).borrow
    returned = e.remove_pod(pod).returned
    assert [(f["direction"], f["quota"], f["amount"]) for f in returned] == [
        ("return", "x", "6"),
        ("return", "dept", "2"),
    ]
    assert [f["amount"] for f in borrowed] == [f["amount"] for f in returned]
    assert e.unassign(pod).returned == []


@pytest.mark.parametrize(
    ("first", "second", "amounts"),
    [
        pytest.param(2, 3, ["1"], id="crossing-min-counts-only-the-excess"),
        pytest.param(5, 1, ["1"], id="already-above-min-counts-it-all"),
    ],
)
def test_borrowed_amount(first, second, amounts):
    e = an_engine(*TREE, nodes=[a_node("n1", cpu=20)])
    e.assign(a_pod("p1", quota="x", cpu=first))
    facts = e.assign(a_pod("p2", quota="x", cpu=second)).borrow
    assert [f["amount"] for f in facts if f["quota"] == "x"] == amounts


def test_admit_reports_the_borrow_it_would_cause_without_doing_it():
    e = tree()
    before = e.digest()
    d = e.admit(a_pod("x-big", quota="x", cpu=6))
    assert [f["amount"] for f in d.borrow] == ["6", "2"]
    assert e.digest() == before


def test_borrow_beyond_what_anyone_can_lend_is_marked_overcommitted():
    # with runtime quota off, admission only checks max: a may use capacity that b's unlent min covers
    e = an_engine(
        a_quota("a", min={"cpu": 8}, max={"cpu": 20}),
        a_quota("b", min={"cpu": 8}, max={"cpu": 20}, allow_lent=False),
        nodes=[a_node("n1", cpu=12)],
        config={"enableRuntimeQuota": False},
    )
    e.assign(a_pod("a-0", quota="a", cpu=8))
    [fact] = e.assign(a_pod("a-1", quota="a", cpu=2)).borrow
    assert fact["lenders"] == [{"quota": "koordinator-root-quota", "amount": "2", "kind": "overcommitted"}]
