"""Pods: quota resolution, request summing, accounting calls (pending/assign/unassign/remove)."""

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.pod import parse_pod
from allot_quota.model import pod_info
from allot_quota.testing import a_node, a_pod, a_quota, an_engine

QUOTAS = (
    a_quota("team-a", max={"cpu": 10}, namespaces=["ns-shared", "ns-a"]),
    a_quota("ns-named", max={"cpu": 10}, namespace="ns-named"),
    a_quota("lives-elsewhere", max={"cpu": 10}),  # in namespace default
    a_quota("other", max={"cpu": 10}),
)


@pytest.mark.parametrize(
    ("pod", "config", "expected"),
    [
        pytest.param(a_pod("p", namespace="ns-a", quota="other"), {}, "other", id="label-wins"),
        pytest.param(a_pod("p", namespace="ns-named"), {}, "ns-named", id="quota-named-after-namespace"),
        pytest.param(
            a_pod("p", namespace="lives-elsewhere"),
            {},
            "koordinator-default-quota",
            id="quota-named-after-namespace-but-living-elsewhere",  # upstream looks up <namespace>/<namespace>
        ),
        pytest.param(a_pod("p", namespace="ns-shared"), {}, "team-a", id="namespaces-annotation"),
        pytest.param(a_pod("p", namespace="elsewhere"), {}, "koordinator-default-quota", id="default-quota"),
        pytest.param(
            a_pod("p", namespace="ns-a", quota="missing"), {}, "team-a", id="unknown-label-falls-through"
        ),
        pytest.param(
            a_pod("p", namespace="elsewhere"),
            {"featureGates": {"DisableDefaultQuota": True}},
            "",
            id="no-quota-when-default-disabled",
        ),
    ],
)
def test_resolution(pod, config, expected):
    assert an_engine(*QUOTAS, config=config).resolve(pod) == expected


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        pytest.param(a_pod("p", quota="missing"), "elastic quota missing not found", id="unknown-quota"),
        pytest.param(
            a_pod("p", quota="koordinator-root-quota"),
            "pod can not be linked to a parentQuotaGroup,quota:koordinator-root-quota, pod:p",
            id="parent-quota",
        ),
    ],
)
def test_validate_pod(pod, message):
    [err] = an_engine(*QUOTAS).validate_pod(pod)
    assert message in err.message


def test_pod_requests_follow_kubernetes_pod_requests():
    pod = {
        "metadata": {"name": "p", "namespace": "x"},
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "nvidia.com/gpu": "1"}}},
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "3", "memory": "512Mi"}}}],
            "overhead": {"cpu": "100m"},
            "priority": 5,
        },
    }
    info = pod_info(parse_pod(pod, [], []))
    # containers: cpu 1.5, gpu 1 (limit as request); init max: cpu 3; + overhead 100m
    assert info.requests == {"cpu": 3100, "memory": 2**30, "nvidia.com/gpu": 1}
    assert (info.key, info.priority, info.preemptible) == ("x/p", 5, True)


def test_an_unreadable_pod_never_reaches_the_engine():
    issues: list[FieldIssue] = []
    pod = parse_pod(
        {"metadata": {"name": "p"}, "spec": {"priority": "high", "containers": [{"name": "c"}]}}, issues, []
    )
    assert pod is None and [e.path for e in issues] == ["spec.priority"]


def test_requests_are_masked_to_the_quota_max_keys():
    e = an_engine(a_quota("q", max={"cpu": 10}), nodes=[a_node("n", cpu=10, memory="1Gi")])
    change = e.assign(a_pod("p", quota="q", cpu=2, memory="1Gi"))
    assert change.request == {"cpu": "2"} and change.used == {"cpu": "2"}


def test_accounting_calls_are_idempotent():
    e = an_engine(a_quota("q", max={"cpu": 10}), nodes=[a_node("n", cpu=10)])
    pod = a_pod("p", quota="q", cpu=2)
    assert e.unassign(pod).action == "noop"  # unreserve without reserve
    assert e.add_pending(pod).changed
    assert not e.add_pending(pod).changed
    assert e.assign(pod).action == "assigned"
    assert e.assign(pod).action == "noop"
    assert e.snapshot()["quotas"]["q"]["used"] == {"cpu": "2"}
    assert e.remove_pending(pod).action == "noop"  # assigned pods leave through remove_pod
    assert e.unassign(pod).action == "unassigned"
    assert e.unassign(pod).action == "noop"  # double unreserve
    assert e.snapshot()["quotas"]["q"] == {
        "max": {"cpu": "10"},
        "min": {},
        "request": {"cpu": "2"},
        "runtime": {"cpu": "2"},
        "used": {},
    }
    assert e.remove_pod("default/p").action == "removed"
    assert e.remove_pod("default/p").action == "noop"
    assert e.snapshot()["quotas"]["q"]["request"] == {}


def test_changed_pod_is_re_registered_and_keeps_its_binding():
    e = an_engine(a_quota("q1", max={"cpu": 10}), a_quota("q2", max={"cpu": 10}), nodes=[a_node("n", cpu=10)])
    e.assign(a_pod("p", quota="q1", cpu=2))
    e.add_pending(a_pod("p", quota="q2", cpu=3))  # label and size changed on a bound pod
    q = e.snapshot()["quotas"]
    assert q["q1"]["used"] == {} and q["q2"]["used"] == {"cpu": "3"}
    assert e.quota_of_pod("default/p") == "q2"


def test_pods_without_quota_are_not_tracked():
    e = an_engine(config={"featureGates": {"DisableDefaultQuota": True}})
    assert e.assign(a_pod("p", cpu=1)).action == "noop"
    d = e.admit(a_pod("p", cpu=1))
    assert (d.admitted, d.reason) == (True, "NoQuota")


def test_namespaces_binding_follows_quota_updates():
    e = an_engine(a_quota("q", max={"cpu": 1}, namespaces=["ns1"]))
    assert e.resolve(a_pod("p", namespace="ns1")) == "q"
    assert e.apply_quota(a_quota("q", max={"cpu": 1}, namespaces=["ns2"])) == []
    assert e.resolve(a_pod("p", namespace="ns1")) == "koordinator-default-quota"
    assert e.resolve(a_pod("p", namespace="ns2")) == "q"
    assert e.delete_quota("default", "q") == []
    assert e.resolve(a_pod("p", namespace="ns2")) == "koordinator-default-quota"
