"""node-reporter's NodeMetric: procfs and cgroup (v1 and v2, cgroupfs and systemd) readers, the aggregation window, the
processor's decision, and this machine's own /proc and /sys/fs/cgroup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from allot_contracts.events.nodeside import NodeMetricRejected, NodeMetricReported
from allot_contracts.objects import names as n
from allot_contracts.objects.nodemetric import nodemetric_manifest, parse_nodemetric
from node_reporter.metrics.cgroups import detect, list_pods, read_limits, read_pod
from node_reporter.metrics.procfs import CpuCounters, cpu_milli, parse_meminfo, parse_stat, read_node
from node_reporter.metrics.report import nodemetric_decision
from node_reporter.metrics.sampler import Sampler
from node_reporter.metrics.testing import write_cgroups, write_proc
from node_reporter.metrics.window import PodInfo, Sample, Window, percentile

S = 1_000_000
GiB = 1024**3
T0 = 1_700_000_000 * S


def v1_tree(root: Path, pods: dict[str, tuple[str, int, int, int]]) -> None:
    write_cgroups(root, pods, version=1)


def v2_tree(root: Path, pods: dict[str, tuple[str, int, int, int]]) -> None:
    write_cgroups(root, pods, version=2)


PODS = {
    "aaaa-1": ("guaranteed", 10**9, 2 * GiB, GiB // 2),
    "bbbb-2": ("burstable", 3 * 10**9, GiB, 0),
    "cccc-3": ("besteffort", 10**8, GiB // 4, GiB),  # inactive file above usage: memory 0
}


@pytest.mark.parametrize("tree", [v1_tree, v2_tree], ids=["cgroup-v1-cgroupfs", "cgroup-v2-systemd"])
def test_pod_cgroups_are_found_and_read_on_both_versions(tmp_path: Path, tree: object) -> None:
    tree(tmp_path, PODS)  # type: ignore[operator]
    layout = detect(str(tmp_path))
    assert layout.version == (1 if tree is v1_tree else 2)
    pods = list_pods(layout)
    assert [(p.uid, p.qos) for p in pods] == [
        ("aaaa-1", "guaranteed"),
        ("bbbb-2", "burstable"),
        ("cccc-3", "besteffort"),
    ]
    readings = {p.uid: read_pod(layout, p) for p in pods}
    assert readings["aaaa-1"] is not None and readings["aaaa-1"].memory == 2 * GiB - GiB // 2
    assert readings["bbbb-2"] is not None and readings["bbbb-2"].cpu_ns == 3 * 10**9
    assert readings["cccc-3"] is not None and readings["cccc-3"].memory == 0
    limits = {p.uid: read_limits(layout, p) for p in pods}
    assert limits["aaaa-1"] is not None
    assert (limits["aaaa-1"].cpu_limit, limits["aaaa-1"].memory_limit) == (4000, 4 * GiB)
    # v2 keeps the request as a weight (1..10000), so it comes back within the kubelet's rounding
    assert limits["aaaa-1"].cpu_request == (2000 if tree is v1_tree else pytest.approx(2000, abs=26))
    assert (
        limits["cccc-3"] is not None
        and limits["cccc-3"].cpu_request == 0
        and limits["cccc-3"].memory_limit is None
    )


def test_no_controllers_means_no_pod_usage_with_a_reason(tmp_path: Path) -> None:
    layout = detect(str(tmp_path))
    assert layout.version == 0 and str(tmp_path) in layout.reason
    assert list_pods(layout) == []


def test_procfs_parsing() -> None:
    stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 1\n"
    before = parse_stat(stat)
    assert before == CpuCounters(busy=150, total=1000, cpus=2)
    after = CpuCounters(busy=150 + 100, total=1000 + 200, cpus=2)
    assert cpu_milli(before, after) == 1000  # half of 2 CPUs
    assert parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 600 kB\n") == (
        400 * 1024,
        1000 * 1024,
    )


def test_the_sampler_follows_pods_and_rates_their_cpu(tmp_path: Path) -> None:
    proc = tmp_path / "host"
    write_proc(proc, busy=100, idle=900)
    cg = tmp_path / "cg"
    v2_tree(cg, PODS)
    sampler = Sampler(proc_root=str(proc), cgroup_root=str(cg))
    assert sampler.sample(T0, 0) is None  # the baseline
    write_proc(proc, busy=600, idle=1400)
    v2_tree(cg, {**PODS, "bbbb-2": ("burstable", 3 * 10**9 + 5 * 10**8, GiB, 0)})
    sample = sampler.sample(T0 + S, 10**9)
    assert sample is not None
    assert sample.cpu == 500 and sample.memory == 4 * GiB
    assert sample.pods["bbbb-2"] == (500, GiB)  # 0.5 s of cpu in 1 s
    assert sample.pods["aaaa-1"][0] == 0
    assert (
        sampler.pods["aaaa-1"].priority == "koord-prod" and sampler.pods["cccc-3"].priority == "koord-batch"
    )


def test_the_window_reports_averages_percentiles_system_usage_and_reclaimable() -> None:
    window = Window(aggregate_s=10, durations_s=(10, 20))
    info = {"g": PodInfo(uid="g", qos="guaranteed", limits=read_limits_of(2000, 4 * GiB))}
    for i in range(21):
        window.add(
            Sample(at=T0 + i * S, cpu=1000 + 100 * i, memory=GiB, pods={"g": (500 + 10 * i, GiB // 2)})
        )
    metric = window.metric("node-a", info, report_interval_s=5)
    assert metric is not None and metric.update_time == T0 + 20 * S
    # nodeUsage: the average of the last 10 s (samples 11..20)
    assert metric.node_usage == {n.CPU: 1000 + 100 * 155 // 10, n.MEMORY: GiB}
    assert [a.duration_s for a in metric.aggregated_node_usages] == [10, 20]
    p95 = metric.aggregated_node_usages[1].usage["p95"][n.CPU]
    assert p95 == percentile(sorted(1000 + 100 * i for i in range(1, 21)), 95) == 2900
    assert metric.system_usage[n.CPU] == metric.node_usage[n.CPU] - (500 + 10 * 155 // 10)
    # prod reclaimable: request 2000 - p95 x 110 % of the pod's cpu; memory limit 4Gi - p95 x 110 %
    pod_p95 = percentile(sorted(500 + 10 * i for i in range(11, 21)), 95)
    assert metric.prod_reclaimable == {
        n.CPU: 2000 - pod_p95 * 110 // 100,
        n.MEMORY: 4 * GiB - (GiB // 2) * 110 // 100,
    }
    # what the agent records is in upstream's shape and reads back at the door unchanged
    manifest = nodemetric_manifest(metric)
    status = manifest["status"]
    assert status["nodeMetric"]["nodeUsage"] == {"resources": {"cpu": "2550m", "memory": "1Gi"}}
    assert set(status["nodeMetric"]["aggregatedNodeUsages"][0]["usage"]["p95"]) == {"resources"}
    assert status["podsMetric"] == [
        {
            "podUsage": {"resources": {"cpu": "655m", "memory": "512Mi"}},
            "priority": "koord-prod",
            "qos": "LS",
            "extensions": {"allot.dev/pod-uid": "g"},
        }
    ]
    assert set(status["prodReclaimableMetric"]["resource"]) == {"resources"}
    again = parse_nodemetric(manifest, [], [])
    assert again == metric


def read_limits_of(cpu_request: int, memory_limit: int) -> object:
    from node_reporter.metrics.cgroups import PodLimits

    return PodLimits(cpu_request=cpu_request, memory_limit=memory_limit)


def test_a_young_window_reports_no_aggregates_and_no_reclaimable() -> None:
    window = Window(aggregate_s=300, durations_s=(300,))
    window.add(Sample(at=T0, cpu=1, memory=1))
    metric = window.metric("n", {})
    assert metric is not None and metric.aggregated_node_usages == () and metric.prod_reclaimable is None


def test_the_processor_fills_in_the_update_time_and_rejects_bad_metrics() -> None:
    manifest = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n1"},
        "status": {"nodeMetric": {"nodeUsage": {"resources": {"cpu": "2", "memory": "1Gi"}}}},
    }
    got = nodemetric_decision("n1", manifest, T0)
    assert isinstance(got, NodeMetricReported)
    assert got.update_time == T0 and got.manifest["status"]["updateTime"] == "2023-11-14T22:13:20Z"
    assert got.usage == {"cpu": "2", "memory": "1Gi"}
    assert "updateTime" not in manifest["status"]  # the input is not changed
    bad = nodemetric_decision("n2", manifest, T0)
    assert isinstance(bad, NodeMetricRejected) and bad.errors[0].path == "metadata.name"
    manifest["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = "x"
    bad = nodemetric_decision("n1", manifest, T0)
    assert isinstance(bad, NodeMetricRejected)
    assert bad.errors[0].path == "status.nodeMetric.nodeUsage.resources[cpu]"
    # a flat usage map (not upstream's ResourceMap) is refused, not read as no usage
    manifest["status"]["nodeMetric"]["nodeUsage"] = {"cpu": "2"}
    bad = nodemetric_decision("n1", manifest, T0)
    assert isinstance(bad, NodeMetricRejected)
    assert [e.path for e in bad.errors] == ["status.nodeMetric.nodeUsage.cpu"]


def test_this_machines_proc_and_cgroups_are_read() -> None:
    node = read_node("/")
    assert node.cpu.cpus == os.cpu_count() and node.memory_total > 0
    layout = detect("/sys/fs/cgroup")
    if layout.version == 0:
        pytest.skip(f"this machine exposes no cgroup controllers: {layout.reason}")
    sampler = Sampler(proc_root="/", cgroup_root="/sys/fs/cgroup")
    sampler.sample(T0, 0)
    busy = sum(range(200_000))  # some cpu between the two readings
    sample = sampler.sample(T0 + S, 10**9)
    assert busy and sample is not None and 0 <= sample.cpu <= (os.cpu_count() or 1) * 1000
    assert 0 < sample.memory <= node.memory_total
