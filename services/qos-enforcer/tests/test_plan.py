"""The enforcement plan, rule by rule, as tables: pod facts and config in, cgroup settings / GPU isolation / resctrl
out, and the facts adapter that reads pods for it. The node plan (BE suppression), memory-pressure eviction and the
warnings for Koordinator settings not enforced are in test_plan_node.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_contracts.errors import InvalidConfig
from allot_contracts.events.qos import QosPlan
from allot_contracts.gpu_isolation import bind_annotations, isolated_containers
from allot_testing.builders import a_gpu_device, a_node, a_qos_pod
from qos_enforcer.config import parse_config
from qos_enforcer.plan import plan_pod, share_pools
from qos_enforcer.plan_node import plan_node
from qos_enforcer.podfacts import NodeFacts, PodFacts, node_facts, pod_facts

UID = "0f1e2d3c-1111-2222-3333-444455556666"
HAMI = {"koordinator.sh/gpu-isolation-provider": "HAMi-core"}
GIB = 1 << 30


def pod(name: str = "p", **kw: Any) -> dict[str, Any]:
    return a_qos_pod(name, uid=UID, **kw)


def node(labels: dict[str, str] | None = None, gpus: int = 0, cpus: int = 0) -> NodeFacts:
    facts = node_facts(None, "n1", node=a_node("n1", cpu="8", memory="32Gi", labels=labels))
    if gpus:
        facts = node_facts(facts, "n1", device=a_gpu_device("n1", gpus=gpus))
    if cpus:
        facts = NodeFacts(
            **{**{f: getattr(facts, f) for f in facts.__struct_fields__}, "cpus": tuple(range(cpus))}
        )
    return facts


def settings_of(plan: QosPlan, scope: str = "pod", container: str = "") -> dict[str, Any]:
    for target in plan.cgroups:
        if target.scope == scope and target.container == container:
            return dict(target.settings)
    return {}


def allocated(*gpus: tuple[int, int, str]) -> dict[str, str]:
    """device-allocated with (minor, core %, memory) per GPU."""
    return {
        "scheduling.koordinator.sh/device-allocated": json.dumps(
            {
                "gpu": [
                    {
                        "minor": m,
                        "resources": {"koordinator.sh/gpu-core": str(c), "koordinator.sh/gpu-memory": mem},
                    }
                    for m, c, mem in gpus
                ]
            }
        )
    }


ENABLED_ALL = {
    "resourceQOSStrategy": {
        "lsClass": {
            "cpuQOS": {"enable": True},
            "memoryQOS": {
                "enable": True,
                "minLimitPercent": 50,
                "lowLimitPercent": 80,
                "throttlingPercent": 90,
            },
        },
        "beClass": {"cpuQOS": {"enable": True}, "resctrlQOS": {"enable": True}},
        "lsrClass": {"resctrlQOS": {"enable": True}},
    },
    "cpuBurstStrategy": {"policy": "cpuBurstOnly", "cpuBurstPercent": 50},
}


# --- per pod, per rule ------------------------------------------------------------------------------------------

POD_CASES = [
    pytest.param(
        pod(qos="LSR", requests={"cpu": "2", "memory": "1Gi"}, limits={"cpu": "2", "memory": "1Gi"}),
        {"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": "2-3"})},
        {},
        {"cpuset_cpus": "2-3"},
        id="LSR cpuset from resource-status",
    ),
    pytest.param(
        pod(
            qos="BE",
            requests={"kubernetes.io/batch-cpu": "500"},
            limits={"kubernetes.io/batch-cpu": "1000"},
            labels={"koordinator.sh/priority-class": "koord-batch"},
        ),
        {},
        {},
        {"cpu_shares": 512, "cpu_quota": {"quota_us": 100_000, "period_us": 100_000}},
        id="BE batch-cpu: shares from request, quota from limit",
    ),
    pytest.param(
        pod(
            qos="BE",
            requests={"kubernetes.io/batch-cpu": "500"},
            limits={"kubernetes.io/batch-cpu": "1000"},
            labels={"koordinator.sh/priority-class": "koord-batch"},
        ),
        {},
        ENABLED_ALL,
        {"cpu_idle": True, "cpu_bvt_warp_ns": -1, "cpu_quota": {"quota_us": 100_000, "period_us": 100_000}},
        id="BE with CPU QoS: SCHED_IDLE and group identity -1, no shares",
    ),
    pytest.param(
        pod(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "2", "memory": "2Gi"}),
        {},
        ENABLED_ALL,
        {
            "cpu_bvt_warp_ns": 2,
            "cpu_burst_us": 100_000,
            "memory_min": GIB // 2,
            "memory_low": GIB * 8 // 10,
            "memory_high": 2 * GIB * 9 // 10,
        },
        id="LS: group identity 2, burst 50% of a 2-core limit, memory min/low/high",
    ),
    pytest.param(
        pod(requests={"cpu": "1"}, limits={"cpu": "1"}),
        {},
        {"cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": 1000}},
        {"cpu_burst_us": 100_000},
        id="burst is capped at the quota (mainline kernels refuse more)",
    ),
    pytest.param(
        pod(
            requests={"cpu": "1"},
            annotations={"koordinator.sh/cpuBurst": json.dumps({"policy": "cpuBurstOnly"})},
        ),
        {},
        {},
        {},
        id="no CPU limit: no burst",
    ),
    pytest.param(
        pod(
            requests={"cpu": "1"},
            limits={"cpu": "1"},
            annotations={"koordinator.sh/cpuBurst": '{"policy":"cpuBurstOnly","cpuBurstPercent":20}'},
        ),
        {},
        {},
        {"cpu_burst_us": 20_000},
        id="pod-level koordinator.sh/cpuBurst",
    ),
    pytest.param(
        pod(
            requests={"cpu": "1"},
            annotations={"koordinator.sh/cpuQOS": json.dumps({"groupIdentity": 1, "schedIdle": 0})},
        ),
        {},
        {},
        {"cpu_bvt_warp_ns": 1, "cpu_idle": False},
        id="pod-level koordinator.sh/cpuQOS without a class strategy",
    ),
    pytest.param(
        pod(
            requests={"memory": "1Gi"},
            annotations={"koordinator.sh/memoryQOS": json.dumps({"policy": "auto", "minLimitPercent": 100})},
        ),
        {},
        {},
        {"memory_min": GIB, "memory_high": "max"},
        id="pod-level koordinator.sh/memoryQOS; throttling 0 resets memory.high",
    ),
    pytest.param(
        pod(
            requests={"memory": "1Gi"},
            annotations={"koordinator.sh/memoryQOS": json.dumps({"policy": "none"})},
        ),
        {},
        {"resourceQOSStrategy": {"lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 100}}}},
        {},
        id="memoryQOS policy none turns the class strategy off for the pod",
    ),
    pytest.param(
        pod(requests={"memory": "1Gi"}),
        {},
        {"resourceQOSStrategy": {"lsClass": {"memoryQOS": {"enable": True, "throttlingPercent": 50}}}},
        {"memory_high": 16 * GIB},
        id="memory.high from node allocatable when the pod has no memory limit",
    ),
    pytest.param(pod(requests={"cpu": "1"}), {}, {}, {}, id="defaults: nothing for a plain LS pod"),
]


@pytest.mark.parametrize(("manifest", "annotations", "config", "expected"), POD_CASES)
def test_pod_level_settings(manifest, annotations, config, expected):
    plan = plan_pod(pod_facts(manifest, UID, annotations), node(), parse_config(config), revision=1)
    assert settings_of(plan) == expected


def test_cgroup_paths_follow_the_driver_root_and_qos_class():
    guaranteed = {"cpu": "2", "memory": "1Gi"}
    facts = pod_facts(
        pod(qos="LSR", requests=guaranteed, limits=guaranteed, status_ids=["ab12"]),
        UID,
        {"scheduling.koordinator.sh/resource-status": '{"cpuset":"0-1"}'},
    )
    systemd = plan_pod(facts, node(), parse_config({}), revision=1)
    assert [(t.scope, t.path) for t in systemd.cgroups] == [
        ("pod", f"kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice"),
        ("container", f"kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-ab12.scope"),
    ]
    cgroupfs = plan_pod(
        facts, node(), parse_config({"cgroupDriver": "cgroupfs", "cgroupRoot": "/test"}), revision=1
    )
    assert [t.path for t in cgroupfs.cgroups] == [f"test/kubepods/pod{UID}", f"test/kubepods/pod{UID}/ab12"]
    assert all(t.settings == {"cpuset_cpus": "0-1"} for t in cgroupfs.cgroups)


def test_container_values_are_per_container_and_the_pod_gets_the_sum():
    manifest = pod(
        requests={"cpu": "1", "memory": "1Gi"},
        limits={"cpu": "1", "memory": "1Gi"},
        containers=2,
        status_ids=["aa", "bb"],
    )
    plan = plan_pod(pod_facts(manifest, UID), node(), parse_config(ENABLED_ALL), revision=1)
    assert settings_of(plan)["cpu_burst_us"] == 100_000
    assert settings_of(plan, "container", "c0")["cpu_burst_us"] == 50_000
    assert (
        settings_of(plan)["memory_min"] == GIB
        and settings_of(plan, "container", "c1")["memory_min"] == GIB // 2
    )


def test_share_pools_keep_ls_pods_off_bound_cpus_and_be_pods_off_lse_cpus():
    lse = pod_facts(
        pod("lse", qos="LSE", requests={"cpu": "2"}, limits={"cpu": "2"}),
        "u1",
        {"scheduling.koordinator.sh/resource-status": '{"cpuset":"0-1"}'},
    )
    lsr = pod_facts(
        pod("lsr", qos="LSR", requests={"cpu": "2"}, limits={"cpu": "2"}),
        "u2",
        {"scheduling.koordinator.sh/resource-status": '{"cpuset":"2-3"}'},
    )
    ls = pod_facts(pod("ls", requests={"cpu": "1"}), "u3")
    be = pod_facts(pod("be", qos="BE"), "u4")
    pools = share_pools(range(8), [lse, lsr, ls, be])
    assert pools is not None and pools.ls == (4, 5, 6, 7) and pools.be == (2, 3, 4, 5, 6, 7)
    config = parse_config({})
    assert settings_of(plan_pod(ls, node(), config, revision=1, pools=pools)) == {"cpuset_cpus": "4-7"}
    assert settings_of(plan_pod(be, node(), config, revision=1, pools=pools)) == {"cpuset_cpus": "2-7"}
    off = parse_config({"cpusetSharePools": False})
    assert settings_of(plan_pod(ls, node(), off, revision=1, pools=pools)) == {}
    assert share_pools([], [ls]) is None


# --- GPU isolation (HAMi-core) ----------------------------------------------------------------------------------


def test_hami_core_pods_get_one_cdi_device_per_gpu_container_by_uuid():
    manifest = pod(
        labels=HAMI,
        requests={"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
        containers=2,
    )
    manifest["spec"]["containers"][1]["resources"] = {"requests": {"cpu": "1"}}
    facts = pod_facts(manifest, UID, allocated((1, 50, "20Gi"), (0, 50, "20Gi")))
    plan = plan_pod(facts, node(labels=HAMI, gpus=2), parse_config({}), revision=1)
    [gpu] = plan.gpu
    assert gpu.container == "c0" and gpu.device == f"allot.dev/gpu={UID}-c0"
    assert (
        gpu.env["NVIDIA_VISIBLE_DEVICES"] == "GPU-n1-1,GPU-n1-0"
    )  # in the order device-allocated lists them
    assert gpu.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == gpu.env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "20480m"
    assert gpu.env["CUDA_DEVICE_SM_LIMIT"] == "50"
    assert gpu.env["LD_PRELOAD"] == "/usr/local/vgpu/libvgpu.so"
    assert gpu.annotations == {"cdi-devices.noderesource.dev/container.c0": f"- allot.dev/gpu={UID}-c0\n"}
    # the binder writes the same annotation at bind time
    assert bind_annotations(UID, isolated_containers(manifest), allocated((0, 50, "20Gi"))) == gpu.annotations


def test_memory_from_the_ratio_and_the_devices_total_when_the_allocation_has_none():
    manifest = pod(
        labels=HAMI, requests={"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu-memory-ratio": "25"}
    )
    ann = {
        "scheduling.koordinator.sh/device-allocated": json.dumps(
            {"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-memory-ratio": "25"}}]}
        )
    }
    plan = plan_pod(pod_facts(manifest, UID, ann), node(labels=HAMI, gpus=1), parse_config({}), revision=1)
    assert plan.gpu[0].env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m"  # 25% of 80Gi
    assert plan.gpu[0].env["CUDA_DEVICE_SM_LIMIT"] == "100"


@pytest.mark.parametrize(
    ("labels", "node_labels", "gpus", "warning"),
    [
        ({}, HAMI, 1, ""),
        (HAMI, {}, 1, "does not offer HAMi-core"),
        ({"koordinator.sh/gpu-isolation-provider": "other"}, HAMI, 1, "only HAMi-core"),
        (HAMI, HAMI, 0, "no UUID"),
    ],
    ids=["pod does not ask", "node does not offer", "other provider", "no UUID known"],
)
def test_no_isolation_without_both_labels_or_a_uuid(labels, node_labels, gpus, warning):
    manifest = pod(labels=labels, requests={"nvidia.com/gpu": "1"})
    plan = plan_pod(
        pod_facts(manifest, UID, allocated((0, 100, "80Gi"))),
        node(labels=node_labels, gpus=gpus),
        parse_config({}),
        revision=1,
    )
    assert plan.gpu == []
    assert any(warning in w.message for w in plan.warnings) if warning else not plan.warnings


def test_opting_out_and_ld_so_preload():
    manifest = pod(labels=HAMI, requests={"nvidia.com/gpu": "1"})
    manifest["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    facts = pod_facts(manifest, UID, allocated((0, 100, "80Gi")))
    plan = plan_pod(facts, node(labels=HAMI, gpus=1), parse_config({}), revision=1)
    assert plan.gpu[0].disable_control and "LD_PRELOAD" not in plan.gpu[0].env
    config = parse_config({"hamiCore": {"ldSoPreloadHostPath": "/usr/local/vgpu/ld.so.preload"}})
    plan = plan_pod(
        pod_facts(pod(labels=HAMI, requests={"nvidia.com/gpu": "1"}), UID, allocated((0, 100, "80Gi"))),
        node(labels=HAMI, gpus=1),
        config,
        revision=1,
    )
    assert "LD_PRELOAD" not in plan.gpu[0].env


# --- resctrl ----------------------------------------------------------------------------------------------------


def test_resctrl_class_groups_and_the_pod_level_annotation():
    config = parse_config(ENABLED_ALL)
    be = plan_pod(pod_facts(pod(qos="BE"), UID), node(), config, revision=1)
    assert be.resctrl == "allot-BE" and be.resctrl_group is None
    lse = plan_pod(pod_facts(pod(qos="LSE"), UID), node(), config, revision=1)
    assert lse.resctrl == "allot-LSR"
    own = {
        "llc": {"schemata": {"range": [20, 80]}, "schemataPerCache": [{"cacheID": 1, "range": [0, 50]}]},
        "mb": {"schemata": {"percent": 40}},
    }
    plan = plan_pod(
        pod_facts(pod(annotations={"node.koordinator.sh/resctrl": json.dumps(own)}), UID),
        node(),
        parse_config({}),
        revision=1,
    )
    assert plan.resctrl == f"allot-pod-{UID}"
    group = plan.resctrl_group
    assert group is not None and (group.llc_start, group.llc_end, group.mb_percent) == (20, 80, 40)
    assert group.per_cache == {"1": {"llc": [0, 50]}}
    bad = plan_pod(
        pod_facts(
            pod(annotations={"node.koordinator.sh/resctrl": '{"llc":{"schemata":{"range":[80,20]}}}'}), UID
        ),
        node(),
        parse_config({}),
        revision=1,
    )
    assert bad.resctrl == "" and any("range" in w.path for w in bad.warnings)
    assert plan_node(node(), config, pods={}, usage=None, previous_quota=None).resctrl[0].group == "allot-LSR"


# --- what cannot be read is reported, never guessed ---------------------------------------------------------------


def test_unreadable_inputs_become_warnings_with_their_paths():
    manifest = pod(requests={"cpu": "lots"}, annotations={"koordinator.sh/cpuQOS": "{not json"})
    plan = plan_pod(
        pod_facts(manifest, UID, {"scheduling.koordinator.sh/resource-status": '{"cpuset":"3-1"}'}),
        node(),
        parse_config({}),
        revision=1,
    )
    paths = {w.path for w in plan.warnings}
    assert "spec.containers[0].resources.requests[cpu]" in paths
    assert 'metadata.annotations["koordinator.sh/cpuQOS"]' in paths
    assert 'metadata.annotations["scheduling.koordinator.sh/resource-status"].cpuset' in paths
    weird = plan_pod(pod_facts(pod(), "Not/A-uid"), node(), parse_config({}), revision=1)
    assert weird.cgroups == [] and any(w.path == "metadata.uid" for w in weird.warnings)


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"cgroupDriver": "openrc"}, "cgroupDriver"),
        (
            {"resourceQOSStrategy": {"lsClass": {"memoryQOS": {"minLimitPercent": 120}}}},
            "resourceQOSStrategy.lsClass.memoryQOS.minLimitPercent",
        ),
        (
            {
                "resourceQOSStrategy": {
                    "beClass": {"resctrlQOS": {"catRangeStartPercent": 60, "catRangeEndPercent": 30}}
                }
            },
            "resourceQOSStrategy.beClass.resctrlQOS.catRangeEndPercent",
        ),
        ({"resourceUsedThresholdWithBE": {"enable": "yes"}}, "resourceUsedThresholdWithBE.enable"),
        ({"hamiCore": {"libvgpuHostPath": "lib/libvgpu.so"}}, "hamiCore.libvgpuHostPath"),
        ({"colour": "blue"}, "colour"),
        ({"agent": {"reconcileSecond": 3}}, "agent.reconcileSecond"),
    ],
)
def test_bad_config_is_refused_naming_the_field(config, path):
    from qos_enforcer.processor import QosEnforcer

    with pytest.raises(InvalidConfig) as error:
        QosEnforcer(config)
    assert path in [i.path for i in error.value.issues]


def test_facts_adapter_reads_what_enforcement_needs():
    manifest = pod(
        qos="LS",
        labels=HAMI,
        requests={"cpu": "500m", "nvidia.com/gpu": "1"},
        limits={"cpu": "1"},
        status_ids=["abc"],
    )
    manifest["spec"]["priority"] = 9500
    facts: PodFacts = pod_facts(manifest, UID, allocated((3, 100, "80Gi")))
    assert (facts.kube_qos, facts.koord_qos, facts.priority_class, facts.priority) == (
        "Burstable",
        "LS",
        "koord-prod",
        9500,
    )
    assert facts.isolation_provider == "HAMi-core"
    [c] = facts.containers
    assert (c.requests["cpu"], c.limits["cpu"], c.gpu, c.container_id) == (500, 1000, True, "abc")
    assert [(g.minor, g.core, g.memory_bytes) for g in facts.gpus] == [(3, 100, 80 * GIB)]


@pytest.mark.parametrize(
    "manifest",
    [
        pod(
            qos="LS",
            labels=HAMI,
            requests={"cpu": "500m", "nvidia.com/gpu": "1"},
            limits={"cpu": "1"},
            status_ids=["ab"],
        ),
        pod(
            qos="BE",
            limits={"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
            labels={"koordinator.sh/priority-class": "koord-batch"},
        ),
        pod(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"}, containers=2),
        pod(),
    ],
    ids=["LS GPU", "BE batch", "guaranteed", "best effort"],
)
def test_the_typed_pod_and_the_manifest_give_the_same_facts(manifest):
    from allot_contracts.objects.pod import parse_pod

    typed = parse_pod(manifest, [], [])
    assert typed is not None
    assert pod_facts(manifest, UID, spec=typed) == pod_facts(manifest, UID)


def test_pods_bound_with_the_same_allocation_text_read_the_same_gpus_and_issues_each_time():
    manifest = pod(labels=HAMI, requests={"koordinator.sh/gpu.shared": "1"})
    good = allocated((1, 30, "4Gi"))
    first, second = pod_facts(manifest, UID, good), pod_facts(manifest, UID, dict(good))
    assert [(g.minor, g.core, g.memory_bytes) for g in first.gpus] == [(1, 30, 4 * GIB)]
    assert second.gpus == first.gpus and not second.issues
    # a malformed allocation is reported on every pod that carries it, not only the first
    bad = {"scheduling.koordinator.sh/device-allocated": json.dumps({"gpu": [{"minor": "x"}]})}
    reports = [pod_facts(manifest, UID, bad).issues for _ in range(2)]
    assert reports[0] == reports[1] and any("integer minor" in i.message for i in reports[0])
    assert pod_facts(manifest, UID, good).gpus == first.gpus  # the good one is unaffected
