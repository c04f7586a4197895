"""Batch/mid overcommit, NUMA-level batch, CPU normalization, amplification and update suppression, worked by hand."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.colocation import ColocationConfig, parse_colocation_configmap
from allot_contracts.objects.nodemetric import HostAppMetric, NodeMetric, PodMetric
from allot_placement.overcommit import (
    CpuBasicInfo,
    NodeFacts,
    PodFacts,
    compute,
    node_facts,
    node_strategy,
    should_record,
)

GiB = 1024**3
S = 1_000_000
T0 = 1_700_000_000 * S


def config(colocation: dict[str, Any] | None = None, **others: dict[str, Any]) -> ColocationConfig:
    data = {"colocation-config": json.dumps({"enable": True, **(colocation or {})})}
    for key, value in others.items():
        data[key.replace("_", "-")] = json.dumps(value)
    issues: list[FieldIssue] = []
    got = parse_colocation_configmap({"data": data}, issues, [])
    assert got is not None, issues
    return got


NODE = NodeFacts(
    name="n1",
    capacity={n.CPU: 32_000, n.MEMORY: 128 * GiB},
    allocatable={n.CPU: 31_000, n.MEMORY: 126 * GiB},
)
WEB = PodFacts(key="apps/web", priority_class="koord-prod", requests={n.CPU: 8_000, n.MEMORY: 16 * GiB})
JOB = PodFacts(key="apps/job", priority_class="koord-batch", requests={n.BATCH_CPU: 4_000})
METRIC = NodeMetric(
    name="n1",
    update_time=T0,
    has_node_metric=True,
    node_usage={n.CPU: 9_000, n.MEMORY: 30 * GiB},
    system_usage={n.CPU: 500, n.MEMORY: 2 * GiB},
    pods=(
        PodMetric(namespace="apps", name="web", usage={n.CPU: 2_000, n.MEMORY: 6 * GiB}),
        PodMetric(namespace="apps", name="job", usage={n.CPU: 6_000}, priority="koord-batch"),
    ),
    prod_reclaimable={n.CPU: 5_000, n.MEMORY: 8 * GiB},
)
MARGIN_CPU = 32_000 * 40 // 100  # capacity × (100 − 60) %: 12800
MARGIN_MEM = 128 * GiB * 35 // 100  # truncated, as upstream's int64(capacity × 0.35)


def test_batch_by_usage_reclaims_what_high_priority_pods_leave_unused() -> None:
    got = compute(config(), NODE, METRIC, [WEB, JOB], T0 + 60 * S)
    assert got is not None and not got.degraded
    # systemUsed = max(system usage, kubelet reserved) = max(500, 1000); the batch pod's own usage is not counted
    assert got.allocatable[n.BATCH_CPU] == 32_000 - MARGIN_CPU - 1_000 - 2_000
    assert got.allocatable[n.BATCH_MEMORY] == 128 * GiB - MARGIN_MEM - 2 * GiB - 6 * GiB
    assert got.inputs["hpUsed"] == {n.CPU: 2_000, n.MEMORY: 6 * GiB}
    assert got.inputs["systemUsed"] == {n.CPU: 1_000, n.MEMORY: 2 * GiB}


@pytest.mark.parametrize(
    ("policies", "cpu", "memory"),
    [
        (
            {"memoryCalculatePolicy": "request"},
            32_000 - MARGIN_CPU - 1_000 - 2_000,
            128 * GiB - MARGIN_MEM - 2 * GiB - 16 * GiB,
        ),
        (
            {"cpuCalculatePolicy": "maxUsageRequest", "memoryCalculatePolicy": "maxUsageRequest"},
            32_000 - MARGIN_CPU - 1_000 - 8_000,
            128 * GiB - MARGIN_MEM - 2 * GiB - 16 * GiB,
        ),
        ({"batchCPUThresholdPercent": 20, "batchMemoryThresholdPercent": 10}, 6_400, 128 * GiB * 10 // 100),
    ],
)
def test_calculate_policies_and_thresholds(policies: dict[str, Any], cpu: int, memory: int) -> None:
    got = compute(config(policies), NODE, METRIC, [WEB, JOB], T0)
    assert got is not None
    assert (got.allocatable[n.BATCH_CPU], got.allocatable[n.BATCH_MEMORY]) == (cpu, memory)


def test_pods_without_metrics_count_by_request_and_dangling_hp_metrics_count() -> None:
    unknown = PodMetric(
        namespace="x", name="gone", usage={n.CPU: 3_000, n.MEMORY: GiB}, priority="koord-prod"
    )
    lse = PodFacts(
        key="apps/lse", priority_class="koord-prod", qos="LSE", requests={n.CPU: 4_000, n.MEMORY: GiB}
    )
    m = msgspec.structs.replace(
        METRIC,
        pods=(
            *METRIC.pods,
            unknown,
            PodMetric(namespace="apps", name="lse", usage={n.CPU: 100, n.MEMORY: GiB}),
        ),
        host_apps=(HostAppMetric(name="nginx", usage={n.CPU: 700}, priority="koord-prod"),),
    )
    other = PodFacts(key="apps/new", priority_class="koord-prod", requests={n.CPU: 1_000, n.MEMORY: GiB})
    got = compute(config(), NODE, m, [WEB, JOB, lse, other], T0)
    assert got is not None
    # web 2000 used, lse counts its cpu request 4000, new has no metric: its request 1000, dangling 3000
    assert got.inputs["hpUsed"][n.CPU] == 2_000 + 4_000 + 1_000 + 3_000
    # system usage 500 + the prod host application 700 = 1200 > kubelet reserved 1000
    assert got.inputs["systemUsed"][n.CPU] == 1_200


def test_a_metric_without_system_usage_counts_the_system_as_upstream_derives_it() -> None:
    # NodeMetricInfo: systemUsage = nodeUsage - sum(podUsage) - sum(hostApplicationUsage). Here 9000 - 8000 - 0 =
    # 1000 m cpu and 30 - 6 = 24 GiB memory: that is what the system uses, not 0.
    m = msgspec.structs.replace(METRIC, system_usage={})
    got = compute(config(), NODE, m, [WEB, JOB], T0)
    assert got is not None
    assert got.inputs["systemUsed"] == {n.CPU: 1_000, n.MEMORY: 24 * GiB}
    assert got.inputs["systemUsageDerived"] == [n.CPU, n.MEMORY]
    assert got.allocatable[n.BATCH_MEMORY] == 128 * GiB - MARGIN_MEM - 24 * GiB - 6 * GiB
    reported = compute(config(), NODE, METRIC, [WEB, JOB], T0)
    assert reported is not None and "systemUsageDerived" not in reported.inputs


def test_a_stale_metric_degrades_batch_to_zero() -> None:
    fresh = compute(config({"degradeTimeMinutes": 5}), NODE, METRIC, [WEB], T0 + 300 * S)
    stale = compute(config({"degradeTimeMinutes": 5}), NODE, METRIC, [WEB], T0 + 300 * S + 1)
    assert fresh is not None and not fresh.degraded and fresh.allocatable[n.BATCH_CPU] > 0
    assert stale is not None and stale.degraded
    assert stale.allocatable[n.BATCH_CPU] == stale.allocatable[n.BATCH_MEMORY] == 0
    assert compute(config(), NODE, None, [WEB], T0) is not None  # no metric at all: degraded
    assert compute(config(), NODE, None, [WEB], T0).degraded  # type: ignore[union-attr]


def test_mid_default_and_static_modes() -> None:
    got = compute(config({"midUnallocatedPercent": 50}), NODE, METRIC, [WEB], T0)
    assert got is not None
    # min(prodReclaimable 5000, unused 32000-9000) + 50 % of max(32000 - max(1000, 1000) - 8000, 0)
    assert got.allocatable[n.MID_CPU] == 5_000 + (32_000 - 1_000 - 8_000) // 2
    static = compute(
        config(
            {
                "midReclaimMode": "static",
                "midStaticCPUReservedPercent": 10,
                "midMemoryThresholdPercent": 5,
                "midStaticMemoryReservedPercent": 20,
            }
        ),
        NODE,
        METRIC,
        [WEB],
        T0,
    )
    assert static is not None
    assert static.allocatable[n.MID_CPU] == 3_200
    # Written as slo-controller writes it: an integer count of millicores, like batch-cpu (not "3200m", which the
    # kubelet would round up to 4 whole units of the extended resource)
    assert static.quantities()[n.MID_CPU] == "3200"
    assert static.allocatable[n.MID_MEMORY] == 128 * GiB * 5 // 100  # capped by the threshold


def test_mid_counts_nothing_unused_without_the_node_usage() -> None:
    for usage in ({}, {n.CPU: 9_000}):
        m = msgspec.structs.replace(METRIC, node_usage=usage)
        got = compute(config(), NODE, m, [WEB], T0)
        assert got is not None and got.allocatable[n.MID_CPU] == got.allocatable[n.MID_MEMORY] == 0


def test_numa_level_batch_is_calculated_per_zone() -> None:
    # each zone like a node of 16 cores: margin 40 % = 6400, system usage and the kubelet's reservation halved
    # (max(250, 500)); web is bound to NUMA node 0, so its 2000 used count there only
    node = msgspec.structs.replace(
        NODE, zones={0: {n.CPU: 16_000, n.MEMORY: 64 * GiB}, 1: {n.CPU: 16_000, n.MEMORY: 64 * GiB}}
    )
    bound = msgspec.structs.replace(WEB, numa=(0,))
    got = compute(config(), node, METRIC, [bound, JOB], T0)
    assert got is not None
    assert got.numa[0][n.BATCH_CPU] == 16_000 - 6_400 - 500 - 2_000
    assert got.numa[1][n.BATCH_CPU] == 16_000 - 6_400 - 500
    assert got.allocatable[n.BATCH_CPU] == 32_000 - MARGIN_CPU - 1_000 - 2_000
    # unbound, it is spread evenly
    spread = compute(config(), node, METRIC, [WEB, JOB], T0)
    assert spread is not None and spread.numa[0][n.BATCH_CPU] == spread.numa[1][n.BATCH_CPU] == 8_100


def test_node_strategy_master_switch_annotation_and_ratio_labels() -> None:
    pool = {"nodeSelector": {"matchLabels": {"pool": "batch"}}, "enable": True}
    off = config({"enable": False, "nodeConfigs": [pool]})
    node = msgspec.structs.replace(NODE, labels={"pool": "batch"})
    strategy, notes = node_strategy(off, node)
    assert not strategy.enable and any("disabled for the cluster" in note for note in notes)
    assert compute(off, node, METRIC, [WEB], T0) is None  # the cluster's enable: false wins over the pool's
    labelled = msgspec.structs.replace(
        NODE,
        labels={
            "node.koordinator.sh/cpu-reclaim-ratio": "0.7",
            "node.koordinator.sh/memory-reclaim-ratio": "-1",
            "node.koordinator.sh/mid-static-cpu-reserved-ratio": "0.1",
        },
        strategy_override={"cpuReclaimThresholdPercent": 50, "memoryReclaimThresholdPercent": 75},
    )
    strategy, notes = node_strategy(config(), labelled)
    # the annotation over the ConfigMap, the labels over both; a negative ratio is not read
    assert strategy.cpu_reclaim_threshold_percent == 70
    assert strategy.memory_reclaim_threshold_percent == 75
    assert strategy.mid_static_cpu_reserved_percent == 10
    assert any("memory-reclaim-ratio" in note for note in notes)


def test_reclaim_threshold_above_100_lends_more_than_the_unused_capacity() -> None:
    got = compute(
        config({"cpuReclaimThresholdPercent": 150, "batchCPUThresholdPercent": 60}), NODE, METRIC, [WEB], T0
    )
    assert got is not None
    assert got.inputs["margin"][n.CPU] == -16_000  # 32000 × (100 − 150) %
    assert got.inputs["byUsage"][n.CPU] == 32_000 + 16_000 - 1_000 - 2_000
    assert got.allocatable[n.BATCH_CPU] == 19_200  # capped at 60 % of capacity


def test_host_applications_count_above_the_resource_priority() -> None:
    apps = (
        HostAppMetric(name="yarn-mid", usage={n.CPU: 2_000}, priority="koord-mid"),
        HostAppMetric(name="yarn-batch", usage={n.CPU: 4_000}, priority="koord-batch"),
        HostAppMetric(name="unclassed", usage={n.CPU: 8_000}),
    )
    m = msgspec.structs.replace(METRIC, host_apps=apps)
    got = compute(config({"midUnallocatedPercent": 100}), NODE, m, [WEB], T0)
    assert got is not None
    assert got.inputs["systemUsed"][n.CPU] == 500 + 2_000  # batch: prod and mid host applications
    assert got.inputs["midSystemUsed"][n.CPU] == 500  # mid: prod ones only
    assert got.inputs["unallocated"][n.CPU] == 32_000 - 1_000 - 8_000  # max(500, kubelet-reserved 1000)


def test_a_stale_metric_degrades_static_mid_too() -> None:
    static = config({"midReclaimMode": "static", "midStaticCPUReservedPercent": 10, "degradeTimeMinutes": 5})
    fresh = compute(static, NODE, METRIC, [WEB], T0)
    stale = compute(static, NODE, METRIC, [WEB], T0 + 301 * S)
    assert fresh is not None and fresh.allocatable[n.MID_CPU] == 3_200
    assert stale is not None and stale.degraded and stale.allocatable[n.MID_CPU] == 0


def test_node_reservation_reserved_cpus_count_as_cores() -> None:
    manifest = {
        "metadata": {
            "name": "n1",
            "annotations": {
                n.ANN_NODE_RESERVATION: json.dumps({"resources": {"cpu": "20"}, "reservedCPUs": "0-9"})
            },
        },
        "status": {"capacity": {"cpu": "32", "memory": "128Gi"}},
    }
    assert node_facts(manifest, None, {}).reservation == {n.CPU: 10_000}
    manifest["metadata"]["annotations"] = {n.ANN_NODE_RESERVATION: json.dumps({"reservedCPUs": "3-1"})}
    facts = node_facts(manifest, None, {})
    assert facts.reservation == {} and any("reservation" in note for note in facts.notes)


def test_cpu_normalization_and_amplification() -> None:
    norm = {
        "enable": True,
        "ratioModel": {"Xeon 8369": {"baseRatio": 1.5, "hyperThreadTurboEnabledRatio": 1.2}},
    }
    node = msgspec.structs.replace(
        NODE, cpu=CpuBasicInfo(model="Xeon 8369", hyper_threading=True, turbo=True)
    )
    got = compute(config(cpu_normalization_config=norm), node, METRIC, [WEB], T0)
    plain = compute(config(), node, METRIC, [WEB], T0)
    assert got is not None and plain is not None
    assert got.cpu_normalization_ratio == "1.20"
    assert got.allocatable[n.BATCH_CPU] == -(-plain.allocatable[n.BATCH_CPU] * 12 // 10)  # batch-cpu x ratio
    assert got.amplification == {n.CPU: "1.20"} and got.allocatable[n.CPU] == 37_200  # ceil(31000 x 1.2)
    # a node label switches it off; an annotation amplifies memory too
    off = msgspec.structs.replace(node, labels={"node.koordinator.sh/cpu-normalization-enabled": "false"})
    assert (
        compute(config(cpu_normalization_config=norm), off, METRIC, [WEB], T0).cpu_normalization_ratio
        == "1.00"
    )  # type: ignore[union-attr]
    amplified = msgspec.structs.replace(node, amplification={n.CPU: "1.50", n.MEMORY: "1.10"})
    got = compute(config(cpu_normalization_config=norm), amplified, METRIC, [WEB], T0)
    assert got is not None and got.amplification == {n.CPU: "1.80", n.MEMORY: "1.10"}


def test_a_strategy_ratio_left_below_one_voids_the_amplification() -> None:
    norm = {"enable": True, "ratioModel": {"Xeon": {"baseRatio": 1.5}}}
    node = msgspec.structs.replace(NODE, cpu=CpuBasicInfo(model="Xeon"))
    amp = {"enable": True, "resourceAmplificationRatio": {"cpu": 0.5, "memory": 3.5}}
    got = compute(
        config(cpu_normalization_config=norm, resource_amplification_config=amp), node, METRIC, [WEB], T0
    )
    assert got is not None and got.amplification == {} and n.MEMORY not in got.allocatable
    assert any("below 1 for cpu" in note for note in got.inputs["notes"])
    amp["resourceAmplificationRatio"] = {"cpu": 0.8, "memory": 3.5}  # 0.8 × 1.5 = 1.20
    got = compute(
        config(cpu_normalization_config=norm, resource_amplification_config=amp), node, METRIC, [WEB], T0
    )
    assert got is not None and got.amplification == {n.CPU: "1.20", n.MEMORY: "3.50"}


def test_nothing_applies_to_a_node_when_every_strategy_is_off() -> None:
    assert compute(ColocationConfig(), NODE, METRIC, [WEB], T0) is None


def test_no_normalization_ratio_where_colocation_is_off() -> None:
    norm = {"enable": True, "ratioModel": {"Xeon": {"baseRatio": 1.5}}}
    node = msgspec.structs.replace(NODE, cpu=CpuBasicInfo(model="Xeon"))
    assert compute(config({"enable": False}, cpu_normalization_config=norm), node, METRIC, [WEB], T0) is None
    # an amplification written on the node still applies, without the ratio
    amplified = msgspec.structs.replace(node, amplification={n.CPU: "2.00"})
    got = compute(config({"enable": False}, cpu_normalization_config=norm), amplified, METRIC, [WEB], T0)
    assert got is not None and got.cpu_normalization_ratio == "1.00"
    assert got.amplification == {n.CPU: "2.00"} and got.allocatable[n.CPU] == 62_000


def test_update_suppression() -> None:
    strategy = config().strategy
    first = compute(config(), NODE, METRIC, [WEB], T0)
    assert first is not None
    slightly = msgspec.structs.replace(
        first, allocatable={**first.allocatable, n.BATCH_CPU: first.allocatable[n.BATCH_CPU] + 100}
    )
    much = msgspec.structs.replace(
        first, allocatable={**first.allocatable, n.BATCH_CPU: first.allocatable[n.BATCH_CPU] * 2}
    )
    assert should_record(None, 0, first, T0, strategy)
    assert not should_record(first, T0, slightly, T0 + 10 * S, strategy)  # < 10 % within 300 s
    assert should_record(first, T0, much, T0 + 10 * S, strategy)
    assert not should_record(
        first, T0, slightly, T0 + 300 * S, strategy
    )  # the time threshold: more than 300 s
    assert should_record(first, T0, slightly, T0 + 300 * S + 1, strategy)
    degraded = msgspec.structs.replace(first, degraded=True)
    assert should_record(first, T0, degraded, T0 + 1, strategy)
    # a NUMA zone's batch resources are held to the same threshold
    zoned = msgspec.structs.replace(first, numa={0: {n.BATCH_CPU: 8_000}, 1: {n.BATCH_CPU: 8_000}})
    shifted = msgspec.structs.replace(zoned, numa={0: {n.BATCH_CPU: 4_000}, 1: {n.BATCH_CPU: 12_000}})
    assert not should_record(zoned, T0, zoned, T0 + 10 * S, strategy)
    assert should_record(zoned, T0, shifted, T0 + 10 * S, strategy)


def test_node_facts_read_reservation_and_annotations_and_report_bad_ones() -> None:
    manifest = {
        "metadata": {
            "name": "n1",
            "annotations": {
                n.ANN_NODE_RESERVATION: json.dumps({"resources": {"cpu": "2", "memory": "4Gi"}}),
                "node.koordinator.sh/resource-amplification-ratio": "{not json",
            },
        },
        "status": {
            "capacity": {"cpu": "32", "memory": "128Gi"},
            "allocatable": {"cpu": "31", "memory": "126Gi"},
        },
    }
    topology = {
        "metadata": {
            "annotations": {
                "node.koordinator.sh/cpu-basic-info": json.dumps({"cpuModel": "X", "turboEnabled": True})
            }
        }
    }
    facts = node_facts(manifest, topology, {})
    assert facts.reservation == {n.CPU: 2_000, n.MEMORY: 4 * GiB}
    assert facts.cpu == CpuBasicInfo(model="X", turbo=True)
    assert facts.amplification is None and any("resource-amplification-ratio" in note for note in facts.notes)
    got = compute(config(), facts, METRIC, [WEB], T0)
    assert got is not None
    assert got.inputs["nodeReserved"] == {n.CPU: 2_000, n.MEMORY: 4 * GiB}  # the annotation beats kubelet's
    assert any("resource-amplification-ratio" in note for note in got.inputs["notes"])
