"""The node plan (BE CPU suppression from the usage sample), memory-pressure eviction choices, and the warnings
for Koordinator settings that are read but not enforced (pod annotations, the config, a NodeSLO spec)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_contracts.errors import InvalidConfig
from allot_contracts.events.qos import PodUsage, QosUsageSampled
from allot_testing.builders import a_node, a_qos_pod
from qos_enforcer.config import parse_config
from qos_enforcer.plan import plan_pod
from qos_enforcer.plan_node import choose_evictions, plan_node
from qos_enforcer.podfacts import NodeFacts, node_facts, pod_facts

UID = "0f1e2d3c-1111-2222-3333-444455556666"
GIB = 1 << 30


def pod(name: str = "p", **kw: Any) -> dict[str, Any]:
    return a_qos_pod(name, uid=UID, **kw)


def node() -> NodeFacts:
    return node_facts(None, "n1", node=a_node("n1", cpu="8", memory="32Gi"))


# --- node plan: BE suppression --------------------------------------------------------------------------------------


def usage(cpu_used: int, pods: dict[str, tuple[int, int]], memory_used: int = 10 * GIB) -> QosUsageSampled:
    return QosUsageSampled(
        node="n1",
        cpu_capacity_milli=8000,
        cpu_used_milli=cpu_used,
        memory_capacity_bytes=32 * GIB,
        memory_used_bytes=memory_used,
        pods={k: PodUsage(cpu_milli=c, memory_bytes=m) for k, (c, m) in pods.items()},
    )


THRESHOLDS = {"resourceUsedThresholdWithBE": {"enable": True}}


@pytest.mark.parametrize(
    ("cpu_used", "pod_usage", "budget", "previous", "expected_milli"),
    [
        # 8000 x 65% - LS 2000 - max(system 500, reserved 0) = 2700
        (3500, {"default/ls": (2000, 0), "default/be": (1000, 0)}, None, None, 2700),
        # the floor (1000m) holds when LS pods use almost everything
        (7900, {"default/ls": (5000, 0), "default/be": (100, 0)}, None, None, 1000),
        # the batch budget caps it
        (3500, {"default/ls": (2000, 0), "default/be": (1000, 0)}, "1500", None, 1500),
        # a move smaller than the update threshold (100m) keeps the previous quota
        (3500, {"default/ls": (2000, 0), "default/be": (1000, 0)}, None, 2650, 2650),
    ],
)
def test_be_suppression_quota(cpu_used, pod_usage, budget, previous, expected_milli):
    facts = node()
    if budget is not None:
        facts = node_facts(None, "n1", node=a_node("n1", cpu="8", memory="32Gi"))
        manifest = a_node("n1", cpu="8", memory="32Gi")
        manifest["status"]["allocatable"]["kubernetes.io/batch-cpu"] = budget
        facts = node_facts(None, "n1", node=manifest)
    pods = {
        "default/ls": pod_facts(pod("ls", requests={"cpu": "1"}), "u1"),
        "default/be": pod_facts(pod("be", qos="BE"), "u2"),
    }
    result = plan_node(
        facts, parse_config(THRESHOLDS), pods=pods, usage=usage(cpu_used, pod_usage), previous_quota=previous
    )
    assert result.be_quota_milli == expected_milli
    [target] = result.cgroups
    assert target.scope == "qos" and target.path == "kubepods.slice/kubepods-besteffort.slice"
    assert target.settings["cpu_quota"] == {"quota_us": expected_milli * 100, "period_us": 100_000}
    assert result.basis["be_quota_milli"] == expected_milli


def test_no_suppression_when_disabled_or_without_a_sample():
    assert (
        plan_node(node(), parse_config({}), pods={}, usage=usage(1000, {}), previous_quota=None).cgroups == []
    )
    assert plan_node(node(), parse_config(THRESHOLDS), pods={}, usage=None, previous_quota=None).cgroups == []


# --- memory-pressure eviction ---------------------------------------------------------------------------------------


def test_eviction_picks_be_pods_by_priority_then_usage_until_below_the_lower_threshold():
    pods = {
        "default/ls": pod_facts(pod("ls", requests={"memory": "1Gi"}), "u0"),
        "default/be-low": pod_facts(
            {**pod("be-low", qos="BE"), "spec": {**pod("x")["spec"], "priority": 5000}}, "u1"
        ),
        "default/be-big": pod_facts(
            {**pod("be-big", qos="BE"), "spec": {**pod("x")["spec"], "priority": 5500}}, "u2"
        ),
        "default/be-small": pod_facts(
            {**pod("be-small", qos="BE"), "spec": {**pod("x")["spec"], "priority": 5500}}, "u3"
        ),
    }
    config = parse_config(THRESHOLDS)
    # 32Gi x 70% = 22.4Gi: 24Gi used is over; down to 68% (21.76Gi) needs 2.24Gi
    sample = usage(
        0,
        {
            "default/ls": (0, 10 * GIB),
            "default/be-low": (0, 1 * GIB),
            "default/be-big": (0, 2 * GIB),
            "default/be-small": (0, GIB // 2),
        },
        memory_used=24 * GIB,
    )
    victims, detail = choose_evictions(sample, pods, config)
    assert victims == ["default/be-low", "default/be-big"]
    assert detail["released_bytes"] == 3 * GIB
    assert choose_evictions(sample, pods, config, exclude=["default/be-low"])[0] == [
        "default/be-big",
        "default/be-small",
    ]
    assert choose_evictions(usage(0, {}, memory_used=20 * GIB), pods, config) == ([], {})
    assert choose_evictions(sample, pods, parse_config({})) == ([], {})


# --- Koordinator settings read but not enforced ---------------------------------------------------------------


def test_koordinator_settings_read_but_not_enforced_are_warnings_not_silence():
    manifest = pod(
        requests={"memory": "1Gi"},
        annotations={
            "koordinator.sh/memoryQOS": json.dumps({"policy": "auto", "wmarkRatio": 95, "colour": "blue"}),
            "koordinator.sh/cpuQOS": json.dumps({"groupIdentity": 1, "coreExpeller": True}),
        },
    )
    plan = plan_pod(pod_facts(manifest, UID), node(), parse_config({}), revision=1)
    warned = {w.path: w.message for w in plan.warnings}
    assert warned['metadata.annotations["koordinator.sh/memoryQOS"].wmarkRatio'].startswith(
        "not enforced here"
    )
    assert warned['metadata.annotations["koordinator.sh/memoryQOS"].colour'] == "unknown field; ignored"
    assert warned['metadata.annotations["koordinator.sh/cpuQOS"].coreExpeller'].startswith(
        "not enforced here"
    )
    config = parse_config(
        {
            "resourceQOSStrategy": {"lsClass": {"memoryQOS": {"enable": True, "wmarkRatio": 95}}},
            "resourceUsedThresholdWithBE": {"enable": True, "cpuEvictPolicy": "evictByRealLimit"},
        }
    )
    paths = {w.path for w in config.warnings}
    assert {
        "resourceQOSStrategy.lsClass.memoryQOS.wmarkRatio",
        "resourceUsedThresholdWithBE.cpuEvictPolicy",
    } <= paths
    # the rest of a NodeSLO spec copied from a cluster is accepted, each part not enforced saying so
    slo = parse_config(
        {
            "resourceQOSStrategy": {
                "policies": {"cpuPolicy": "coreSched"},
                "beClass": {"blkioQOS": {"enable": True}, "networkQOS": {"enable": True}},
                "systemClass": {"cpuQOS": {"enable": True}},
            },
            "systemStrategy": {"minFreeKbytesFactor": 100},
        }
    )
    assert {w.path: w.message.split(":")[0] for w in slo.warnings} == {
        "resourceQOSStrategy.policies": "not enforced here",
        "resourceQOSStrategy.beClass.blkioQOS": "not enforced here",
        "resourceQOSStrategy.beClass.networkQOS": "not enforced here",
        "resourceQOSStrategy.systemClass": "not enforced here",
        "systemStrategy": "not enforced here",
    }
    with pytest.raises(InvalidConfig) as error:  # a key Koordinator does not have is still refused
        parse_config({"resourceQOSStrategy": {"beClass": {"diskQOS": {}}}})
    assert [i.path for i in error.value.issues] == ["resourceQOSStrategy.beClass.diskQOS"]
    assert plan_node(node(), config, pods={}, usage=None, previous_quota=None).warnings == list(
        config.warnings
    )
