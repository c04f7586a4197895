"""The v1/v2 knob mapping: which file each setting goes to, in which format, what the kernel would refuse, and
how read-back values compare (cpulists as sets, memory after page rounding, cpu.max by the written tokens)."""

from __future__ import annotations

import pytest

from qos_enforcer.cgroups.knobs import (
    KNOBS,
    CpuQuota,
    Settings,
    UnsupportedKnob,
    canonical,
    cpulist,
    format_cpulist,
    plan,
    same,
    shares_to_weight,
    supported,
)
from qos_enforcer.cgroups.mode import (
    CgroupError,
)

PAGE = 4096


# --- the knob mapping ---------------------------------------------------------------------------------------------


def test_every_setting_has_exactly_one_row_in_the_table():
    assert set(KNOBS) == set(Settings.__struct_fields__)


@pytest.mark.parametrize(("shares", "weight"), [(1024, 100), (2, 1), (512, 50), (100, 10), (262_144, 10_000)])
def test_shares_to_weight_is_the_kernels_conversion(shares, weight):
    assert shares_to_weight(shares) == weight


def test_v1_plan_files_and_formats():
    settings = Settings(
        cpuset_cpus="3,0,1,2,8",
        cpu_quota=CpuQuota(quota_us=50_000, period_us=100_000),
        cpu_shares=512,
        cpu_burst_us=10_000,
        memory_low=64 << 20,
        memory_max="max",
    )
    assert [(w.file, w.value) for w in plan("kubepods/podx", settings, 1)] == [
        ("cpuset.cpus", "0-3,8"),
        ("cpu.cfs_period_us", "100000"),
        ("cpu.cfs_quota_us", "50000"),
        ("cpu.shares", "512"),
        ("cpu.cfs_burst_us", "10000"),
        ("memory.soft_limit_in_bytes", str(64 << 20)),
        ("memory.limit_in_bytes", "-1"),
    ]


def test_v2_plan_files_and_formats():
    settings = Settings(
        cpu_quota=CpuQuota(quota_us=None),
        cpu_shares=2048,
        cpu_burst_us=0,
        cpu_idle=False,
        memory_min=1 << 20,
        memory_low="max",
        memory_high=256 << 20,
        memory_max=512 << 20,
    )
    assert [(w.file, w.value) for w in plan("p", settings, 2)] == [
        ("cpu.max", "max 100000"),
        ("cpu.idle", "0"),  # idle off goes before the weight, which the kernel refuses while idle
        ("cpu.weight", "200"),
        ("cpu.max.burst", "0"),
        ("memory.min", str(1 << 20)),
        ("memory.low", "max"),
        ("memory.high", str(256 << 20)),
        ("memory.max", str(512 << 20)),
    ]
    assert [w.file for w in plan("p", Settings(cpu_idle=True, cpuset_cpus="0"), 2)] == [
        "cpuset.cpus",
        "cpu.idle",
    ]


@pytest.mark.parametrize("setting", ["memory_min", "memory_high"])
def test_v1_refuses_memory_knobs_it_has_no_file_for(setting):
    assert supported(setting, 1) is not None and supported(setting, 2) is None
    with pytest.raises(UnsupportedKnob, match=f"{setting} on cgroup v1"):
        plan("kubepods/podx", Settings(**{setting: 1 << 20}), 1)


@pytest.mark.parametrize(
    "settings",
    [
        Settings(cpu_shares=1),
        Settings(cpu_shares=300_000),
        Settings(cpu_quota=CpuQuota(quota_us=500)),
        Settings(cpu_quota=CpuQuota(quota_us=50_000, period_us=999)),
        Settings(cpu_quota=CpuQuota(quota_us=50_000), cpu_burst_us=60_000),
        Settings(memory_max=-1),
        Settings(cpuset_cpus=""),
        Settings(cpuset_cpus="3-1"),
        Settings(cpuset_cpus="0-3,x"),
        Settings(cpu_shares=512, cpu_idle=True),
    ],
)
def test_values_the_kernel_would_reject_are_refused_when_planning(settings):
    with pytest.raises(CgroupError, match="kubepods/podx"):
        plan("kubepods/podx", settings, 2)


def test_cpulists_compare_as_sets_and_format_compactly():
    assert cpulist("0-3") == cpulist("0,1,2,3") == cpulist("3,2,1,0")
    assert format_cpulist(frozenset({0, 1, 2, 3, 8, 10, 11})) == "0-3,8,10-11"
    assert same("cpuset.cpus", "0,1,2,3", "0-3\n", PAGE)
    assert not same("cpuset.cpus", "0-3", "0-2", PAGE)


def test_memory_values_compare_after_page_rounding_and_v1_unlimited_reads_as_max():
    assert same("memory.limit_in_bytes", "268435579", "268435456", PAGE)
    assert not same("memory.limit_in_bytes", "268435579", "268431360", PAGE)
    assert canonical("memory.soft_limit_in_bytes", "9223372036854771712", PAGE) == "max"
    assert same("memory.limit_in_bytes", "-1", "9223372036854771712", PAGE)
    assert same("memory.high", "max", "max\n", PAGE)


def test_cpu_max_compares_only_the_written_tokens():
    assert same("cpu.max", "max 100000", "max 100000\n", PAGE)
    assert same("cpu.max", "max", "max 100000", PAGE)
    assert not same("cpu.max", "50000 100000", "max 100000", PAGE)
    assert not same("cpu.max", "50000 100000", "50000 50000", PAGE)
