"""Views: the quota tree rows, snapshots, status annotations, digest."""

import json

from allot_quota.testing import a_node, a_pod, a_quota, an_engine

QUOTAS = (
    a_quota("dept", min={"cpu": 4, "memory": "8Gi"}, max={"cpu": 8, "memory": "32Gi"}, is_parent=True),
    a_quota("z-team", min={"cpu": 2, "memory": "4Gi"}, max={"cpu": 8, "memory": "32Gi"}, parent="dept"),
    a_quota("a-team", min={"cpu": 2, "memory": "4Gi"}, max={"cpu": 8, "memory": "32Gi"}, parent="dept"),
    a_quota("solo", min={"cpu": 1}, max={"cpu": 2}),
)


def engine():
    e = an_engine(*QUOTAS, nodes=[a_node("n1", cpu=16, memory="64Gi")])
    e.assign(a_pod("p1", quota="a-team", cpu=3, memory="2Gi"))
    e.add_pending(a_pod("p2", quota="a-team", cpu=1, preemptible=False))
    return e


def test_tree_view_is_depth_first_with_children_by_name():
    rows = engine().tree_view()
    assert [(r["name"], r["depth"]) for r in rows] == [
        ("koordinator-root-quota", 0),
        ("dept", 1),
        ("a-team", 2),
        ("z-team", 2),
        ("solo", 1),
        ("koordinator-system-quota", 0),
        ("koordinator-default-quota", 0),
    ]
    a = rows[2]
    assert a["dimensions"] == ["cpu", "memory"]
    assert (a["min"], a["max"]) == ({"cpu": "2", "memory": "4Gi"}, {"cpu": "8", "memory": "32Gi"})
    assert (a["used"], a["request"], a["runtime"]) == (
        {"cpu": "3", "memory": "2Gi"},
        {"cpu": "4", "memory": "2Gi"},
        {"cpu": "4", "memory": "2Gi"},
    )
    assert (a["pods"], a["parent"], a["tree"]) == (2, "dept", "koordinator-root-quota")


def test_status_annotations_are_json_resource_lists_under_upstream_keys():
    ann = engine().status_annotations("a-team")
    p = "quota.scheduling.koordinator.sh/"
    assert ann == {
        p + "child-request": '{"cpu":"4","memory":"2Gi"}',
        p + "non-preemptible-request": '{"cpu":"1"}',
        p + "non-preemptible-used": "{}",
        p + "request": '{"cpu":"4","memory":"2Gi"}',
        p + "runtime": '{"cpu":"4","memory":"2Gi"}',
    }
    assert json.loads(engine().status_annotations("dept")[p + "non-preemptible-request"]) == {"cpu": "1"}
    patch = engine().status_patch("a-team")
    assert patch["status"] == {"used": {"cpu": "3", "memory": "2Gi"}}


def test_snapshot_shape():
    snap = engine().snapshot()
    assert list(snap) == ["quotas"]
    assert list(snap["quotas"]) == sorted(snap["quotas"])
    assert snap["quotas"]["solo"] == {
        "max": {"cpu": "2"},
        "min": {"cpu": "1"},
        "request": {},
        "runtime": {"cpu": "0"},
        "used": {},
    }


def test_digest_depends_on_inputs_not_on_what_was_read():
    e1, e2 = engine(), engine()
    e1.snapshot()
    e1.runtime("solo")
    assert e1.digest() == e2.digest()
    e2.unassign("default/p1")
    assert e1.digest() != e2.digest()
    e2.assign("default/p1")
    assert e1.digest() == e2.digest()
    assert e1.digest().startswith("sha256:")
