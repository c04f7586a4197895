"""Webhook validation of ElasticQuota objects: every refusal names the field and the reason; nothing changes."""

import pytest

from allot_contracts.objects.quota import parse_quota
from allot_quota.testing import a_pod, a_quota, a_quota_manifest, an_engine

P = "quota.scheduling.koordinator.sh/"
DEPT = a_quota("dept", min={"cpu": 8, "memory": "16Gi"}, max={"cpu": 20, "memory": "64Gi"}, is_parent=True)
TEAM = a_quota("team", min={"cpu": 4, "memory": "8Gi"}, max={"cpu": 20, "memory": "64Gi"}, parent="dept")


def with_meta(manifest, **meta):
    manifest = {**manifest, "metadata": {**manifest["metadata"], **meta}}
    return manifest


SELF_CASES = [
    pytest.param(
        a_quota_manifest("q", max={"cpu": -1}),
        "spec.max",
        "q quota.Spec.Max's value < 0, in dimensions :[cpu]",
        id="negative-max",
    ),
    pytest.param(
        a_quota_manifest("q", min={"cpu": -1, "memory": "-1Gi"}, max={"cpu": 1, "memory": "1Gi"}),
        "spec.min",
        "q quota.Spec.Min's value < 0, in dimensions :[cpu memory]",
        id="negative-min-lists-dimensions",
    ),
    pytest.param(
        a_quota_manifest("q", min={"cpu": 10}, max={"cpu": 5}),
        "spec.min[cpu]",
        "resourceKey cpu of quota q min 10 > max 5",
        id="min-above-max",
    ),
    pytest.param(
        a_quota_manifest("q", min={"nvidia.com/gpu": 1}, max={"cpu": 5}),
        "spec.min[nvidia.com/gpu]",
        "resourceKey nvidia.com/gpu of quota q is included in min, which is not included in max",
        id="min-key-not-in-max",
    ),
    pytest.param(
        a_quota_manifest("q", max={"cpu": "lots"}),
        "spec.max[cpu]",
        "'lots' is not a valid quantity",
        id="bad-quantity",
    ),
    pytest.param(
        a_quota_manifest("q", max={"cpu": 1}, shared_weight="{cpu: 1"),
        f"metadata.annotations[{P}shared-weight]",
        "invalid JSON: Expecting property name enclosed in double quotes",
        id="malformed-shared-weight-json",
    ),
    pytest.param(
        a_quota_manifest("q", max={"cpu": 1}, shared_weight='["cpu"]'),
        f"metadata.annotations[{P}shared-weight]",
        "expected an object",
        id="shared-weight-not-an-object",
    ),
    pytest.param(
        a_quota_manifest("q", max={"cpu": 1}, shared_weight={"cpu": -2}),
        f"metadata.annotations[{P}shared-weight]",
        f"q quota.Annotation[{P}shared-weight]'s value < 0, in dimension :[cpu]",
        id="negative-shared-weight",
    ),
    pytest.param(
        a_quota_manifest("q", max={"cpu": 1}, namespaces='"team-a"'),
        f"metadata.annotations[{P}namespaces]",
        "expected a list of namespace names",
        id="namespaces-not-a-list",
    ),
    pytest.param(
        a_quota_manifest("q", max={"cpu": 1}, namespaces="[team-a]"),
        f"metadata.annotations[{P}namespaces]",
        "invalid JSON",
        id="malformed-namespaces-json",
    ),
    pytest.param(
        with_meta(a_quota_manifest("q", max={"cpu": 1}), annotations={f"{P}namespaces": ["team-a"]}),
        f"metadata.annotations[{P}namespaces]",
        "must be a string: an annotation's value is text",  # was read as the text "['team-a']"
        id="namespaces-a-yaml-list",
    ),
    pytest.param(
        a_quota_manifest("q", max={"cpu": 1}, allow_lent="False"),
        f"metadata.labels[{P}allow-lent-resource]",
        'must be "true" or "false"',
        id="label-boolean-spelled-wrong",
    ),
    pytest.param(
        {**a_quota_manifest("q"), "kind": "ResourceQuota"},
        "kind",
        "expected apiVersion scheduling.sigs.k8s.io/v1alpha1",
        id="wrong-kind",
    ),
    pytest.param(
        with_meta(a_quota_manifest("q", max={"cpu": 1}), labels={f"{P}is-parent": True}),
        f'metadata.labels["{P}is-parent"]',
        "must be a string",  # an unquoted YAML boolean: the API server refuses it too
        id="label-value-not-a-string",
    ),
    pytest.param(
        with_meta(a_quota_manifest("q"), name=""),
        "metadata.name",
        "is required",
        id="missing-name",
    ),
]

TOPOLOGY_CASES = [
    pytest.param(
        [],
        a_quota("koordinator-root-quota", max={"cpu": 1}),
        "metadata.name",
        "is built in",
        id="root-is-built-in",
    ),
    pytest.param(
        [],
        a_quota("koordinator-system-quota", max={"cpu": 1}),
        "metadata.name",
        "is built in",
        id="system-is-built-in",
    ),
    pytest.param(
        [DEPT],
        a_quota("dept", namespace="other", max={"cpu": 1}),
        "metadata.name",
        "AddQuota quota already exist:dept",
        id="same-name-other-namespace",
    ),
    pytest.param(
        [],
        a_quota("t", max={"cpu": 1}, parent="nope"),
        f"metadata.labels[{P}parent]",
        "t has parentName nope but the parent quota nope does not exist",
        id="parent-missing",
    ),
    pytest.param(
        [a_quota("leaf", max={"cpu": 20})],
        a_quota("t", max={"cpu": 1}, parent="leaf"),
        f"metadata.labels[{P}parent]",
        "t has parentName leaf but the parentQuotaInfo's IsParent is false",
        id="parent-not-is-parent",
    ),
    pytest.param(
        [DEPT],
        a_quota("t", max={"cpu": 1, "nvidia.com/gpu": 1}, parent="dept"),
        "spec.max",
        "checkSubAndParentGroupQuotaKey failed: t's max keys are not all included in dept's",
        id="child-max-key-not-in-parent",
    ),
    pytest.param(
        [a_quota("dept", min={"cpu": 8}, max={"cpu": 20, "memory": "1Gi"}, is_parent=True)],
        a_quota("t", min={"memory": "1Gi"}, max={"memory": "1Gi"}, parent="dept"),
        "spec.min",
        "checkSubAndParentGroupQuotaKey failed: t's min keys are not all included in dept's",
        id="child-min-key-not-in-parent",
    ),
    pytest.param(
        [DEPT, TEAM],
        a_quota("t2", min={"cpu": 5}, max={"cpu": 20, "memory": "64Gi"}, parent="dept"),
        "spec.min",
        "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: dept",
        id="siblings-min-sum-above-parent",
    ),
    pytest.param(
        [DEPT, TEAM],
        a_quota("dept", min={"cpu": 2, "memory": "16Gi"}, max={"cpu": 20, "memory": "64Gi"}, is_parent=True),
        "spec.min",
        "checkMinQuotaSum all children's MinQuota > current MinQuota, current: dept",
        id="lowering-parent-min-below-children",
    ),
    pytest.param(
        [DEPT, TEAM],
        a_quota("dept", min={"cpu": 8}, max={"cpu": 20}, is_parent=True, force=True),
        "spec.max",
        "checkSubAndParentGroupQuotaKey failed: team's max keys are not all included in dept's",
        id="parent-drops-a-childs-key",
    ),
    pytest.param(
        [DEPT, TEAM],
        a_quota("dept", min={"cpu": 8, "memory": "16Gi"}, max={"cpu": 20, "memory": "64Gi"}, is_parent=False),
        f"metadata.labels[{P}is-parent]",
        "quota has children, isParent is forbidden to modify as false, quotaName:dept",
        id="is-parent-false-with-children",
    ),
    pytest.param(
        [a_quota("dept", min={"cpu": 8}, max={"cpu": 20}, is_parent=True, tree_id="7")],
        a_quota("t", max={"cpu": 1}, parent="dept", tree_id="8"),
        f"metadata.labels[{P}tree-id]",
        "t tree id is different from parent dept, [8] vs [7]",
        id="tree-id-differs-from-parent",
    ),
    pytest.param(
        [DEPT],
        a_quota(
            "dept",
            min={"cpu": 8, "memory": "16Gi"},
            max={"cpu": 20, "memory": "64Gi"},
            is_parent=True,
            tree_id="9",
        ),
        f"metadata.labels[{P}tree-id]",
        "dept tree id changed [] vs [9]",
        id="tree-id-changed",
    ),
    pytest.param(
        [
            DEPT,
            a_quota("sub", min={"cpu": 4}, max={"cpu": 20, "memory": "64Gi"}, parent="dept", is_parent=True),
        ],
        a_quota(
            "dept",
            min={"cpu": 8, "memory": "16Gi"},
            max={"cpu": 20, "memory": "64Gi"},
            is_parent=True,
            parent="sub",
        ),
        f"metadata.labels[{P}parent]",
        "sub is a descendant of dept: the parent chain would form a cycle",
        id="cycle",
    ),
    pytest.param(
        [a_quota("a", max={"cpu": 1}, namespaces=["ns1"])],
        a_quota("b", max={"cpu": 1}, namespaces=["ns1"]),
        f"metadata.annotations[{P}namespaces]",
        "namespace ns1 is already bound to quota a",
        id="namespace-bound-twice",
    ),
    pytest.param(
        [],
        a_quota("r", max={"cpu": 1}, is_root=True),
        f"metadata.labels[{P}tree-id]",
        "needs a tree-id label",
        id="tree-root-without-tree-id",
    ),
]


def _check(existing, manifest, field, message):
    e = an_engine(*existing)
    before = e.digest()
    errors = e.apply_quota(manifest)
    assert errors, "expected a refusal"
    assert any(err.path == field and message in err.message for err in errors), [str(x) for x in errors]
    assert e.digest() == before  # an invalid object changes nothing
    return errors


@pytest.mark.parametrize(("manifest", "field", "message"), SELF_CASES)
def test_self_checks(manifest, field, message):
    spec, errors = parse_quota(manifest)
    assert spec is None, "expected a refusal"
    assert any(err.path == field and message in err.message for err in errors), [str(x) for x in errors]


def test_a_child_without_a_tree_id_joins_its_parents_tree():
    e = an_engine(a_quota("dept", min={"cpu": 8}, max={"cpu": 20}, is_parent=True, is_root=True, tree_id="7"))
    assert e.apply_quota(a_quota("t", max={"cpu": 1}, parent="dept")) == []
    assert e.hierarchy.nodes["t"].spec.tree_id == "7"


@pytest.mark.parametrize(("existing", "manifest", "field", "message"), TOPOLOGY_CASES)
def test_topology_checks(existing, manifest, field, message):
    _check(existing, manifest, field, message)


def test_every_self_error_is_reported_not_just_the_first():
    _, errors = parse_quota(a_quota_manifest("q", min={"cpu": -1}, max={"cpu": -2, "memory": "x"}))
    assert {e.path for e in errors} == {"spec.max", "spec.min", "spec.max[memory]", "spec.min[cpu]"}


def test_field_error_is_json_ready_and_readable():
    _, [err] = parse_quota(a_quota_manifest("q", min={"cpu": 10}, max={"cpu": 5}))
    assert err.to_dict() == {
        "path": "spec.min[cpu]",
        "code": "Invalid",
        "message": "resourceKey cpu of quota q min 10 > max 5",
        "value": "10",
    }
    assert str(err) == "spec.min[cpu]: resourceKey cpu of quota q min 10 > max 5 (got '10')"


@pytest.mark.parametrize(
    ("existing", "manifest"),
    [
        pytest.param(
            [DEPT, TEAM],
            a_quota("t2", min={"cpu": 5}, max={"cpu": 20}, parent="dept", force=True),
            id="allow-force-update-skips-min-sum",
        ),
        pytest.param(
            [a_quota("dept", min={"cpu": 8}, max={"cpu": 20, "memory": "1Gi"}, is_parent=True)],
            a_quota("t", min={"cpu": 8}, max={"cpu": 20}, parent="dept"),
            id="child-max-keys-subset-of-parent",
        ),
        pytest.param(
            [],
            a_quota("top", min={"cpu": 1000}, max={"cpu": 1000}),
            id="top-level-min-not-checked-against-cluster",
        ),
        pytest.param(
            [DEPT, TEAM],
            a_quota(
                "team", min={"cpu": 6, "memory": "8Gi"}, max={"cpu": 20, "memory": "64Gi"}, parent="dept"
            ),
            id="update-counts-own-old-min-once",
        ),
        pytest.param(
            [],
            a_quota("koordinator-default-quota", namespace="koordinator-system", max={"cpu": 4}),
            id="default-quota-max-is-settable",
        ),
    ],
)
def test_accepted(existing, manifest):
    e = an_engine(*existing)
    assert e.apply_quota(manifest) == []


def test_child_max_keys_must_equal_parent_keys_when_update_resource_key_gate_is_off():
    e = an_engine(
        a_quota("dept", min={"cpu": 8}, max={"cpu": 20, "memory": "1Gi"}, is_parent=True),
        config={"featureGates": {"ElasticQuotaEnableUpdateResourceKey": False}},
    )
    [err] = e.apply_quota(a_quota("t", min={"cpu": 8}, max={"cpu": 20}, parent="dept"))
    assert err.message == "checkSubAndParentGroupQuotaKey failed: dept's max keys are not the same with t's"


def test_is_parent_cannot_be_set_while_the_quota_holds_pods():
    e = an_engine(a_quota("q", max={"cpu": 4}))
    e.add_pending(a_pod("p", quota="q", cpu=1))
    [err] = e.apply_quota(a_quota("q", max={"cpu": 4}, is_parent=True))
    assert err.message == "quota has bound pods, isParent is forbidden to modify as true, quotaName: q"


@pytest.mark.parametrize(
    ("namespace", "name", "pods", "message"),
    [
        pytest.param(
            "default", "dept", False, "delete quota failed, quota dept has 1 child quotas", id="has-children"
        ),
        pytest.param(
            "default", "team", True, "delete quota failed, quota team has 1 child pods", id="has-pods"
        ),
        pytest.param("other", "team", False, "elastic quota other/team not found", id="wrong-namespace"),
        pytest.param("default", "ghost", False, "elastic quota default/ghost not found", id="unknown"),
        pytest.param(
            "koordinator-system",
            "koordinator-default-quota",
            False,
            "is built in and cannot be deleted",
            id="built-in",
        ),
    ],
)
def test_delete_refusals(namespace, name, pods, message):
    e = an_engine(DEPT, TEAM)
    if pods:
        e.add_pending(a_pod("p", quota="team", cpu=1))
    before = e.digest()
    [err] = e.delete_quota(namespace, name)
    assert message in err.message
    assert e.digest() == before


def test_delete_leaf_then_parent():
    e = an_engine(DEPT, TEAM)
    assert e.delete_quota("default", "team") == []
    assert e.delete_quota("default", "dept") == []
    assert set(e.snapshot()["quotas"]) == {
        "koordinator-root-quota",
        "koordinator-system-quota",
        "koordinator-default-quota",
    }


def test_update_moves_a_quota_and_its_usage_to_the_new_parent():
    other = a_quota(
        "other", min={"cpu": 8, "memory": "16Gi"}, max={"cpu": 20, "memory": "64Gi"}, is_parent=True
    )
    e = an_engine(DEPT, other, TEAM)
    e.assign(a_pod("p", quota="team", cpu=3))
    moved = a_quota(
        "team", min={"cpu": 4, "memory": "8Gi"}, max={"cpu": 20, "memory": "64Gi"}, parent="other"
    )
    assert e.apply_quota(moved) == []
    snap = e.snapshot()["quotas"]
    assert snap["dept"]["used"] == {} and snap["other"]["used"] == {"cpu": "3"}


def test_max_strict_check_keys_refuse_lowering_max_below_used():
    strict = {"quota.scheduling.koordinator.sh/max-strict-check-resource-keys": '["cpu"]'}
    e = an_engine(a_quota("q", max={"cpu": 10, "memory": "8Gi"}, annotations=strict))
    e.assign(a_pod("p", quota="q", cpu=6, memory="4Gi"))
    [err] = e.apply_quota(a_quota("q", max={"cpu": 4, "memory": "8Gi"}, annotations=strict))
    assert (err.path, err.message) == ("spec.max[cpu]", "resourceKey cpu of quota q max 4 < used 6")
    assert (
        e.apply_quota(a_quota("q", max={"cpu": 10, "memory": "1Gi"}, annotations=strict)) == []
    )  # memory not strict
    bad = {"quota.scheduling.koordinator.sh/max-strict-check-resource-keys": '"cpu"'}
    _, [err] = parse_quota(a_quota_manifest("q", max={"cpu": 10}, annotations=bad))
    assert "'s value is invalid" in err.message
