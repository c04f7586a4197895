"""ElasticQuotaProfile trees: totals from selected nodes × ratio, separate runtimes, default tree shrinks."""

from typing import Any

import pytest

from allot_contracts.fnv import fnv1a64
from allot_contracts.objects.quota import ANNO_RESOURCE_KEYS, parse_profile, tree_id_for
from allot_quota.testing import a_node, a_pod, a_profile, a_profile_manifest, a_quota, an_engine

NODES = [
    a_node("gpu-1", cpu=32, memory="128Gi", gpu=8, labels={"pool": "gpu"}),
    a_node("gpu-2", cpu=32, memory="128Gi", gpu=8, labels={"pool": "gpu"}),
    a_node("cpu-1", cpu=64, memory="256Gi", labels={"pool": "cpu"}),
]
PROFILE = a_profile(
    "gpu",
    quota_name="gpu-root",
    selector={"pool": "gpu"},
    ratio="0.5",
    resource_keys=["cpu", "nvidia.com/gpu"],
)
TID = tree_id_for("default", "gpu")


def engine():
    e = an_engine(nodes=NODES)
    assert e.apply_profile(PROFILE) == []
    return e


def test_profile_root_quota_holds_the_selected_total():
    snap = engine().snapshot()["quotas"]["gpu-root"]
    assert snap["min"] == {"cpu": "32", "nvidia.com/gpu": "8"}  # (32+32) × 0.5, (8+8) × 0.5
    assert snap["runtime"] == {"cpu": "32", "nvidia.com/gpu": "8"}


def test_children_of_the_profile_tree_share_its_total_and_default_tree_keeps_the_rest():
    e = engine()
    child = a_quota(
        "train",
        min={"cpu": 8, "nvidia.com/gpu": 4},
        max={"cpu": 32, "nvidia.com/gpu": 8},
        parent="gpu-root",
        tree_id=TID,
    )
    assert e.apply_quota(child) == []
    assert e.apply_quota(a_quota("web", min={"cpu": 0}, max={"cpu": 200})) == []
    e.add_pending(a_pod("t", quota="train", cpu=40, gpu=8))
    e.add_pending(a_pod("w", quota="web", cpu=200))
    assert e.runtime("train") == {"cpu": "32", "nvidia.com/gpu": "8"}
    assert e.runtime("web") == {"cpu": "96"}  # 128 in the cluster - 32 carved out for the gpu tree
    rows = {r["name"]: r for r in e.tree_view()}
    assert rows["train"]["tree"] == "gpu-root" and rows["web"]["tree"] == "koordinator-root-quota"


def test_ignore_default_tree_keeps_the_default_total():
    profile = a_profile(
        "gpu",
        quota_name="gpu-root",
        selector={"pool": "gpu"},
        quota_labels={"quota.scheduling.koordinator.sh/ignore-default-tree": "true"},
    )
    e = an_engine(a_quota("web", max={"cpu": 500}), nodes=NODES)
    assert e.apply_profile(profile) == []
    e.add_pending(a_pod("w", quota="web", cpu=500))
    assert e.runtime("web") == {"cpu": "128"}


def test_totals_follow_node_changes():
    e = engine()
    e.upsert_node(a_node("gpu-3", cpu=32, memory="128Gi", gpu=8, labels={"pool": "gpu"}))
    assert e.snapshot()["quotas"]["gpu-root"]["min"] == {"cpu": "48", "nvidia.com/gpu": "12"}
    e.delete_node("gpu-1")
    e.delete_node("gpu-2")
    assert e.snapshot()["quotas"]["gpu-root"]["min"] == {"cpu": "16", "nvidia.com/gpu": "4"}


def with_meta(**fields: Any) -> dict[str, Any]:
    manifest = a_profile_manifest("p", quota_name="q")
    manifest["metadata"].update(fields)
    return manifest


def with_spec(**fields: Any) -> dict[str, Any]:
    manifest = a_profile_manifest("p", quota_name="q")
    manifest["spec"].update(fields)
    return manifest


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(
            a_profile_manifest("p", quota_name="q", ratio="1.5"),
            "spec.resourceRatio",
            "in (0, 1]",
            id="ratio-above-one",
        ),
        pytest.param(
            a_profile_manifest("p", quota_name="q", ratio="abc"),
            "spec.resourceRatio",
            "in (0, 1]",
            id="ratio-not-a-number",
        ),
        pytest.param(
            a_profile_manifest("p", quota_name=""),
            "spec.quotaName",
            "quotaName is required",
            id="no-quota-name",
        ),
        pytest.param(
            a_profile_manifest("p", quota_name="Not A Name"),
            "spec.quotaName",
            "must be a quota's name",
            id="quota-name-not-a-name",
        ),
        pytest.param(
            with_meta(annotations={ANNO_RESOURCE_KEYS: ["cpu", "nvidia.com/gpu"]}),
            f"metadata.annotations[{ANNO_RESOURCE_KEYS}]",
            "must be a string: an annotation's value is text",
            id="resource-keys-a-yaml-list",
        ),
        pytest.param(
            with_meta(annotations={ANNO_RESOURCE_KEYS: '{"cpu": 1}'}),
            f"metadata.annotations[{ANNO_RESOURCE_KEYS}]",
            "expected a list of resource names",
            id="resource-keys-not-a-list",
        ),
        pytest.param(
            with_meta(namespace="Not_A_Namespace"), "metadata.namespace", "", id="namespace-not-a-label"
        ),
        pytest.param(
            a_profile_manifest("p", quota_name="q", quota_labels={"team": 5}),
            "spec.quotaLabels[team]",
            "must be a label value",
            id="quota-label-a-number",
        ),
        pytest.param(
            a_profile_manifest("p", quota_name="q", quota_labels={"bad key!": "x"}),
            "spec.quotaLabels[bad key!]",
            "must be a label key",
            id="quota-label-key",
        ),
        pytest.param(
            with_spec(nodeSelector={"matchExpressions": 5}),
            "spec.nodeSelector.matchExpressions",
            "must be a list",
            id="node-selector-expressions-a-number",
        ),
        pytest.param(
            with_spec(nodeSelector={"matchLabels": {"pool": ["gpu"]}}),
            "spec.nodeSelector.matchLabels.pool",
            "must be a string",
            id="node-selector-label-a-list",
        ),
        pytest.param(
            with_spec(nodeSelector={"pool": "gpu"}),
            "spec.nodeSelector.pool",
            "unknown field",
            id="node-selector-not-a-selector",
        ),
        pytest.param(
            {**a_profile_manifest("p", quota_name="q"), "kind": "Profile"},
            "kind",
            "ElasticQuotaProfile",
            id="wrong-kind",
        ),
    ],
)
def test_profile_validation(manifest, field, message):
    spec, [err] = parse_profile(manifest)
    assert spec is None and err.path == field and message in err.message


def test_profile_cannot_take_over_a_user_quota_and_its_root_is_managed():
    e = an_engine(a_quota("taken", max={"cpu": 1}), nodes=NODES)
    [err] = e.apply_profile(a_profile("p", quota_name="taken"))
    assert "not managed by profile default/p" in err.message
    e = engine()
    [err] = e.apply_quota(a_quota("gpu-root", max={"cpu": 1}))
    assert "managed by ElasticQuotaProfile default/gpu" in err.message
    [err] = e.delete_quota("default", "gpu-root")
    assert "delete the profile instead" in err.message


def test_delete_profile_refuses_while_its_tree_has_children():
    e = engine()
    child = a_quota("train", min={"cpu": 1}, max={"cpu": 2}, parent="gpu-root", tree_id=TID)
    assert e.apply_quota(child) == []
    [err] = e.delete_profile("default", "gpu")
    assert err.message == "delete quota failed, quota gpu-root has 1 child quotas"
    assert e.delete_quota("default", "train") == []
    assert e.delete_profile("default", "gpu") == []
    assert "gpu-root" not in e.snapshot()["quotas"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"", 0xCBF29CE484222325), (b"a", 0xAF63DC4C8601EC8C), (b"foobar", 0x85944171F73967E8)],
    ids=["empty", "a", "foobar"],
)
def test_fnv1a64_known_vectors(data, expected):
    assert fnv1a64(data) == expected


def test_tree_id_hashes_namespace_slash_name():
    assert tree_id_for("default", "gpu") == str(fnv1a64(b"default/gpu"))


def test_renaming_the_profile_root_replaces_it_and_validate_changes_nothing():
    e = engine()
    renamed = a_profile("gpu", quota_name="gpu-root-2", selector={"pool": "gpu"}, ratio="0.5")
    before = e.digest()
    assert e.validate_profile(renamed) == []
    assert e.digest() == before
    assert e.apply_profile(renamed) == []
    quotas = e.snapshot()["quotas"]
    assert "gpu-root" not in quotas and quotas["gpu-root-2"]["min"] == {"cpu": "32", "memory": "128Gi"}


def test_the_cluster_total_follows_each_node_change_as_a_fresh_sum_would():
    e = an_engine()
    fresh = an_engine()
    steps = [
        ("upsert", a_node("a", cpu=8, memory="32Gi", gpu=2)),
        ("upsert", a_node("b", cpu=16, memory="64Gi")),
        (
            "upsert",
            a_node("a", cpu=8, memory="32Gi"),
        ),  # a loses its GPUs: no node lists nvidia.com/gpu any more
        ("upsert", a_node("c", cpu=4, memory="8Gi", gpu=1)),
        ("delete", "b"),
        ("delete", "nobody"),
    ]
    nodes: dict[str, object] = {}
    for op, arg in steps:
        if op == "upsert":
            e.upsert_node(arg)  # type: ignore[arg-type]
            nodes[arg.name] = arg  # type: ignore[union-attr]
        else:
            e.delete_node(arg)  # type: ignore[arg-type]
            nodes.pop(arg, None)  # type: ignore[call-overload]
        fresh.set_nodes(list(nodes.values()))  # type: ignore[arg-type]
        assert e.hierarchy.cluster_total == fresh.hierarchy.cluster_total, (op, arg)
    assert e.hierarchy.cluster_total == {"cpu": 12000, "memory": 40 * 2**30, "nvidia.com/gpu": 1}
